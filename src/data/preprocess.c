#define _GNU_SOURCE /* getline */
#include "data/preprocess.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "base/error.h"
#include "base/mem.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"

#define DEFAULT_BATCH_BYTES ((size_t)1 << 18)
#define NOTE_LEN 640

/* Lines of the input, the unit a worker reads and tokenizes. Batch number s lives
 * in slot s % n_slots from its reading until it is written. */
typedef struct {
  char *text; /* whole lines, newlines included */
  size_t len, cap;
  size_t *ends; /* end of each line in text */
  size_t n_lines, lines_cap;
  int64_t first_line; /* 1-based number of its first line */
  /* the worker's result */
  int32_t *ids; /* every line's tokens, key after key */
  size_t n_ids, ids_cap;
  int64_t *counts; /* [line][key] tokens, -1 for a skipped line */
  size_t counts_cap;
  int64_t n_bad;
  char notes[TD_PREPROCESS_SHOWN_BAD_LINES][NOTE_LEN]; /* why the first bad lines are bad */
  int n_notes;
  int failed; /* a bad line without skip_bad_lines: the last note says why */
  int done;
} batch;

typedef struct {
  const td_preprocess_opts *o;
  const char *name; /* the input, for messages */
  FILE *in;
  char *line; /* getline's buffer */
  size_t line_cap;
  int64_t next_line;
  int eof;
  td_idx_builder **builders;
  int32_t eod;
  /* the pipeline, under mu: every worker reads a batch, tokenizes it, and writes
   * whatever is finished next in input order unless another worker is writing */
  batch *slots;
  int64_t n_slots, n_read, n_written;
  int writing, stop;
  char *err; /* the first error */
  size_t errlen;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a slot was freed, or the run stopped */
  /* the writer's */
  td_preprocess_stats *st;
  struct timespec t0;
  int64_t shown_bad;
} pp;

typedef struct {
  pp *p;
  td_bpe_worker *bpe;
  char *value; /* the current text */
  size_t value_cap;
  pthread_t thread;
} worker;

static int failf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int failf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

char *td_preprocess_output_name(const char *prefix, const char *key) {
  size_t n = strlen(prefix) + strlen(key) + sizeof "__document";
  char *s = td_malloc(n);
  snprintf(s, n, "%s_%s_document", prefix, key);
  return s;
}

/* Grow a td_malloc'ed array to at least need elements, keeping the first used. */
static void *grow(void *p, size_t *cap, size_t need, size_t used, size_t elem) {
  if (need <= *cap)
    return p;
  size_t c = *cap ? *cap : 1024;
  while (c < need)
    c *= 2;
  void *q = td_malloc(c * elem);
  if (used)
    memcpy(q, p, used * elem);
  td_free(p);
  *cap = c;
  return q;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

/* ------------------------------------------------------------------ reading */

/* Whole lines into b until it holds batch_bytes or the input ends. */
static int read_batch(pp *p, batch *b, char *err, size_t errlen) {
  size_t limit = p->o->batch_bytes ? p->o->batch_bytes : DEFAULT_BATCH_BYTES;
  b->len = b->n_lines = 0;
  b->first_line = p->next_line;
  while (b->len < limit) {
    ssize_t got = getline(&p->line, &p->line_cap, p->in);
    if (got < 0) {
      if (ferror(p->in))
        return failf(err, errlen, "reading %s: %s", p->name, strerror(errno));
      p->eof = 1;
      break;
    }
    b->text = grow(b->text, &b->cap, b->len + (size_t)got, b->len, 1);
    memcpy(b->text + b->len, p->line, (size_t)got);
    b->len += (size_t)got;
    b->ends = grow(b->ends, &b->lines_cap, b->n_lines + 1, b->n_lines, sizeof *b->ends);
    b->ends[b->n_lines++] = b->len;
  }
  p->next_line += (int64_t)b->n_lines;
  return 0;
}

/* ------------------------------------------------------------------ tokenizing */

/* Append the ids of key's text in the line s[0, len) to b; *count = how many. */
static int encode_key(const pp *p, worker *w, batch *b, const char *s, size_t len, const char *key,
                      int64_t *count, char *why, size_t whylen) {
  size_t n, before = b->n_ids;
  if (td_jsonl_get_string(s, len, key, &w->value, &w->value_cap, &n, why, whylen) ||
      td_bpe_encode(w->bpe, w->value, n, &b->ids, &b->n_ids, &b->ids_cap, why, whylen))
    return -1;
  if (b->n_ids > before && p->o->append_eod) {
    b->ids = grow(b->ids, &b->ids_cap, b->n_ids + 1, b->n_ids, sizeof *b->ids);
    b->ids[b->n_ids++] = p->eod;
  }
  *count = (int64_t)(b->n_ids - before);
  return 0;
}

static void bad_line(const pp *p, batch *b, size_t l, const char *why) {
  if (b->n_notes < TD_PREPROCESS_SHOWN_BAD_LINES)
    snprintf(b->notes[b->n_notes++], NOTE_LEN, "%s line %lld: %s", p->name,
             (long long)(b->first_line + (int64_t)l), why);
  for (int k = 0; k < p->o->n_keys; k++)
    b->counts[l * (size_t)p->o->n_keys + (size_t)k] = -1;
  b->n_bad++;
  b->failed = !p->o->skip_bad_lines;
}

static void tokenize_line(const pp *p, worker *w, batch *b, size_t l, const char *s, size_t len) {
  size_t mark = b->n_ids, nk = (size_t)p->o->n_keys;
  char why[512];
  for (size_t k = 0; k < nk; k++) {
    if (encode_key(p, w, b, s, len, p->o->json_keys[k], &b->counts[l * nk + k], why, sizeof why)) {
      b->n_ids = mark;
      bad_line(p, b, l, why);
      return;
    }
  }
}

static void tokenize_batch(const pp *p, worker *w, batch *b) {
  size_t nk = (size_t)p->o->n_keys, start = 0;
  b->counts = grow(b->counts, &b->counts_cap, b->n_lines * nk, 0, sizeof *b->counts);
  b->n_ids = 0, b->n_bad = 0, b->n_notes = 0, b->failed = 0;
  for (size_t l = 0; l < b->n_lines && !b->failed; l++) {
    size_t end = b->ends[l], len = end - start;
    if (b->text[end - 1] == '\n')
      len--;
    tokenize_line(p, w, b, l, b->text + start, len);
    start = end;
  }
}

/* ------------------------------------------------------------------ writing */

static void progress(pp *p) {
  const td_preprocess_stats *st = p->st;
  int64_t every = p->o->log_interval;
  if (!p->o->log || !every || st->documents % every)
    return;
  double t = seconds_since(&p->t0);
  fprintf(p->o->log, "Processed %lld documents (%.2f docs/s, %.2f MB/s).\n",
          (long long)st->documents, (double)st->documents / t, (double)st->bytes / t / 1024 / 1024);
}

static void show_bad_lines(pp *p, const batch *b) {
  for (int64_t i = 0; i < b->n_bad && p->o->log; i++, p->shown_bad++) {
    if (p->shown_bad < TD_PREPROCESS_SHOWN_BAD_LINES) /* then i < b->n_notes */
      fprintf(p->o->log, "trident: warning: %s (line skipped)\n", b->notes[i]);
    else if (p->shown_bad == TD_PREPROCESS_SHOWN_BAD_LINES)
      fprintf(p->o->log, "trident: warning: further bad lines are skipped and counted silently\n");
  }
}

static int write_batch(pp *p, const batch *b, char *err, size_t errlen) {
  if (b->failed)
    return failf(err, errlen, "%s", b->notes[b->n_notes - 1]);
  show_bad_lines(p, b);
  p->st->bad_lines += b->n_bad;
  size_t nk = (size_t)p->o->n_keys, off = 0, start = 0;
  for (size_t l = 0; l < b->n_lines; l++) {
    p->st->bytes += (int64_t)(b->ends[l] - start);
    start = b->ends[l];
    if (b->counts[l * nk] < 0)
      continue;
    for (size_t k = 0; k < nk; k++) {
      int64_t n = b->counts[l * nk + k];
      if (td_idx_builder_add_document(p->builders[k], b->ids + off, n, err, errlen))
        return -1;
      off += (size_t)n;
      p->st->tokens += n;
    }
    p->st->documents++;
    progress(p);
  }
  return 0;
}

/* ------------------------------------------------------------------ the pipeline */

/* Under mu: stop every worker; the first error is the one reported. */
static void stop_run(pp *p, const char *why) {
  if (!p->stop)
    snprintf(p->err, p->errlen, "%s", why);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
}

/* Under mu: the next batch, read now (reading is serial), or NULL when the input
 * is done or the run stopped. Waits while every slot is in use. */
static batch *take_batch(pp *p) {
  while (!p->stop && !p->eof && p->n_read - p->n_written == p->n_slots)
    pthread_cond_wait(&p->cv, &p->mu);
  if (p->stop || p->eof)
    return NULL;
  batch *b = &p->slots[p->n_read % p->n_slots];
  char err[1024];
  if (read_batch(p, b, err, sizeof err))
    return stop_run(p, err), NULL;
  if (!b->n_lines)
    return NULL;
  b->done = 0;
  p->n_read++;
  return b;
}

/* Under mu: write the finished batches that are next in order, unless another
 * worker is at it (it will see them: it checks again after each batch). */
static void write_ready(pp *p) {
  if (p->writing)
    return;
  p->writing = 1;
  while (!p->stop && p->n_written < p->n_read && p->slots[p->n_written % p->n_slots].done) {
    char err[1024];
    pthread_mutex_unlock(&p->mu);
    int rc = write_batch(p, &p->slots[p->n_written % p->n_slots], err, sizeof err);
    pthread_mutex_lock(&p->mu);
    if (rc)
      stop_run(p, err);
    p->n_written++;
    pthread_cond_broadcast(&p->cv);
  }
  p->writing = 0;
}

static void *work(void *arg) {
  worker *w = arg;
  pp *p = w->p;
  pthread_mutex_lock(&p->mu);
  for (batch *b; (b = take_batch(p));) {
    pthread_mutex_unlock(&p->mu);
    tokenize_batch(p, w, b);
    pthread_mutex_lock(&p->mu);
    b->done = 1;
    write_ready(p);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The calling thread is worker 0; workers 1.. run on their own threads. */
static void run_workers(pp *p) {
  int n = p->o->workers, started = 1;
  worker *w = td_calloc(sizeof *w * (size_t)n);
  for (int i = 0; i < n; i++)
    w[i] = (worker){.p = p, .bpe = td_bpe_worker_new(p->o->bpe)};
  for (int rc = 0; started < n && !rc; started += !rc) {
    rc = pthread_create(&w[started].thread, NULL, work, &w[started]);
    if (rc)
      fprintf(p->o->log ? p->o->log : stderr,
              "trident: warning: cannot start a thread (%s): running %d of %d workers\n",
              strerror(rc), started, n);
  }
  work(&w[0]);
  for (int i = 0; i < n; i++) {
    if (i && i < started)
      pthread_join(w[i].thread, NULL);
    td_bpe_worker_free(w[i].bpe);
    td_free(w[i].value);
  }
  td_free(w);
}

/* ------------------------------------------------------------------ set-up */

static int check_opts(const td_preprocess_opts *o, char *err, size_t errlen) {
  if (o->workers < 1)
    return failf(err, errlen, "--workers %d: need at least 1", o->workers);
  if (o->n_keys < 1)
    return failf(err, errlen, "no --json-keys");
  for (int k = 0; k < o->n_keys; k++)
    for (int j = 0; j < k; j++)
      if (!strcmp(o->json_keys[j], o->json_keys[k]))
        return failf(err, errlen, "--json-keys lists \"%s\" twice", o->json_keys[k]);
  return 0;
}

static int open_builders(pp *p, char *err, size_t errlen) {
  const td_preprocess_opts *o = p->o;
  td_idx_dtype dt = td_idx_dtype_for_vocab(td_bpe_vocab_size(o->bpe));
  p->builders = td_calloc(sizeof *p->builders * (size_t)o->n_keys);
  for (int k = 0; k < o->n_keys; k++) {
    char *name = td_preprocess_output_name(o->output_prefix, o->json_keys[k]);
    p->builders[k] = td_idx_builder_open(name, dt, err, errlen);
    td_free(name);
    if (!p->builders[k])
      return -1;
  }
  return 0;
}

/* Finalize every output on success; otherwise remove what was begun. */
static int close_builders(pp *p, int ok, char *err, size_t errlen) {
  int rc = ok ? 0 : -1;
  for (int k = 0; k < p->o->n_keys && p->builders[k]; k++) {
    if (rc)
      td_idx_builder_abort(p->builders[k]);
    else
      rc = td_idx_builder_finalize(p->builders[k], err, errlen);
  }
  td_free(p->builders);
  return rc;
}

static void free_slots(pp *p) {
  for (int64_t s = 0; s < p->n_slots; s++) {
    batch *b = &p->slots[s];
    td_free(b->text), td_free(b->ends), td_free(b->ids), td_free(b->counts);
  }
  td_free(p->slots);
}

static int process(pp *p) {
  p->n_slots = 2 * (int64_t)p->o->workers + 1;
  p->slots = td_calloc(sizeof *p->slots * (size_t)p->n_slots);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  clock_gettime(CLOCK_MONOTONIC, &p->t0);
  run_workers(p);
  TD_CHECK(p->stop || (p->eof && p->n_written == p->n_read), "%lld of %lld batches written",
           (long long)p->n_written, (long long)p->n_read);
  p->st->seconds = seconds_since(&p->t0);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free_slots(p);
  return p->stop ? -1 : 0;
}

int td_preprocess(const td_preprocess_opts *o, td_preprocess_stats *st, char *err, size_t errlen) {
  *st = (td_preprocess_stats){0};
  if (check_opts(o, err, errlen))
    return -1;
  int from_stdin = !strcmp(o->input, "-");
  pp p = {.o = o,
          .name = from_stdin ? "stdin" : o->input,
          .next_line = 1,
          .st = st,
          .eod = td_bpe_eod(o->bpe),
          .err = err,
          .errlen = errlen};
  p.in = from_stdin ? stdin : fopen(o->input, "rb");
  if (!p.in)
    return failf(err, errlen, "cannot open the input %s: %s", o->input, strerror(errno));
  int rc = open_builders(&p, err, errlen);
  if (!rc)
    rc = process(&p);
  rc = close_builders(&p, rc == 0, err, errlen);
  if (!from_stdin)
    fclose(p.in);
  free(p.line); /* getline's buffer comes from malloc */
  return rc;
}
