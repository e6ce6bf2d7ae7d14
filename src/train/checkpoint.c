#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"

#define MODEL_NAME "model.safetensors"
#define OPTIM_NAME "optim_dp000.safetensors"
#define RNG_NAME "rng_dp000.json"
#define SLICES_NAME "slices.json"
#define LATEST_FILE "latest_checkpointed_iteration.txt"
#define METADATA_NAME "metadata.json"
/* iter_XXXXXXX.tmp: a save in progress; iter_XXXXXXX.old: the published
 * directory of an iteration being saved again, moved aside until the new one and
 * the latest file are in place (see publish()). */
#define TMP_SUFFIX ".tmp"
#define ASIDE_SUFFIX ".old"

/* Paths are at most CK_PATH bytes; a longer checkpoint directory is refused. */
#define CK_PATH 4096

static void path_join(char *out, size_t n, const char *a, const char *b) {
  if ((size_t)snprintf(out, n, "%s/%s", a, b) >= n) td_fail("checkpoint path too long: %s/%s", a, b);
}

static void iter_dir(char *out, size_t n, const char *dir, int64_t iteration) {
  if ((size_t)snprintf(out, n, "%s/iter_%07lld", dir, (long long)iteration) >= n)
    td_fail("checkpoint path too long: %s", dir);
}

static void with_suffix(char *out, size_t n, const char *a, const char *suffix) {
  if ((size_t)snprintf(out, n, "%s%s", a, suffix) >= n) td_fail("checkpoint path too long: %s", a);
}

/* The names of one iteration: published, being written, and moved aside. */
typedef struct {
  char final[CK_PATH], tmp[CK_PATH], aside[CK_PATH];
} iter_paths;

static void paths_of(iter_paths *p, const char *dir, int64_t iteration) {
  iter_dir(p->final, sizeof p->final, dir, iteration);
  with_suffix(p->tmp, sizeof p->tmp, p->final, TMP_SUFFIX);
  with_suffix(p->aside, sizeof p->aside, p->final, ASIDE_SUFFIX);
}

void td_checkpoint_path(char *out, size_t n, const char *dir, int64_t iteration, const char *rel) {
  char d[CK_PATH];
  iter_dir(d, sizeof d, dir, iteration);
  path_join(out, n, d, rel);
}

/* Megatron's shard directory of TP rank t and pipeline stage p: "mp_rank_TT", or
 * "mp_rank_TT_PPP" when there are several stages. */
static void shard_name(char *out, size_t n, int t, int p, int pp) {
  if (pp > 1)
    snprintf(out, n, "mp_rank_%02d_%03d", t, p);
  else
    snprintf(out, n, "mp_rank_%02d", t);
}

static int tp_size_of(const td_ckpt_contents *c) { return c->tp_size > 0 ? c->tp_size : 1; }
static int pp_size_of(const td_ckpt_contents *c) { return c->pp_size > 0 ? c->pp_size : 1; }

static int64_t numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

static size_t tensor_bytes(const td_ckpt_tensor *t) {
  return (size_t)numel(t->ndim, t->shape) * sizeof(float);
}

/* "3, 4" */
static void dims_text(char *out, size_t n, int ndim, const int64_t *shape) {
  out[0] = 0;
  for (int d = 0; d < ndim; d++)
    snprintf(out + strlen(out), n - strlen(out), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* A box inside a global tensor: where it starts and its shape. */
typedef struct {
  int64_t off[TD_ST_MAX_DIMS], shape[TD_ST_MAX_DIMS];
} box;

/* The global shape and the box of a caller's slice (the convention: global_shape
 * all zero = the whole tensor). */
static void slice_of(const td_ckpt_tensor *t, int64_t *gshape, box *b) {
  int whole = 1;
  for (int d = 0; d < t->ndim; d++) whole &= t->global_shape[d] == 0;
  memset(b, 0, sizeof *b);
  for (int d = 0; d < t->ndim; d++) {
    gshape[d] = whole ? t->shape[d] : t->global_shape[d];
    b->off[d] = whole ? 0 : t->offset[d];
    b->shape[d] = t->shape[d];
  }
}

static int box_inside(int ndim, const box *b, const int64_t *gshape) {
  for (int d = 0; d < ndim; d++)
    if (b->off[d] < 0 || b->shape[d] < 0 || b->off[d] + b->shape[d] > gshape[d]) return 0;
  return 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Which of the n boxes s are needed to cover region r: the region is cut into
 * cells at every box boundary, and each cell takes the first box that contains
 * it (used[i] = 1). Returns 0 when every cell is covered; -1 with the start of
 * the first uncovered cell in hole[] otherwise. */
static int plan_cover(int ndim, const box *r, const box *s, int n, unsigned char *used,
                      int64_t *hole) {
  memset(used, 0, (size_t)n);
  for (int d = 0; d < ndim; d++)
    if (r->shape[d] == 0) return 0; /* empty region */
  int64_t *bp[TD_ST_MAX_DIMS];
  int nb[TD_ST_MAX_DIMS], idx[TD_ST_MAX_DIMS] = {0}, rc = 0;
  for (int d = 0; d < ndim; d++) {
    int64_t lo = r->off[d], hi = r->off[d] + r->shape[d];
    bp[d] = td_malloc(sizeof(int64_t) * (size_t)(2 * n + 2));
    int k = 0;
    bp[d][k++] = lo, bp[d][k++] = hi;
    for (int i = 0; i < n; i++) {
      int64_t a = s[i].off[d], b = s[i].off[d] + s[i].shape[d];
      if (a > lo && a < hi) bp[d][k++] = a;
      if (b > lo && b < hi) bp[d][k++] = b;
    }
    qsort(bp[d], (size_t)k, sizeof(int64_t), cmp_i64);
    int u = 0;
    for (int j = 0; j < k; j++)
      if (!u || bp[d][j] != bp[d][u - 1]) bp[d][u++] = bp[d][j];
    nb[d] = u - 1; /* cells along d */
  }
  for (;;) {
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
      int in = 1;
      for (int d = 0; d < ndim && in; d++)
        in = s[i].off[d] <= bp[d][idx[d]] && bp[d][idx[d] + 1] <= s[i].off[d] + s[i].shape[d];
      if (in) found = i;
    }
    if (found < 0) {
      for (int d = 0; d < ndim; d++) hole[d] = bp[d][idx[d]];
      rc = -1;
      break;
    }
    used[found] = 1;
    int d = ndim - 1;
    while (d >= 0 && ++idx[d] == nb[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  for (int d = 0; d < ndim; d++) td_free(bp[d]);
  return rc;
}

/* Copy the part of box s (its data at src, row-major) that lies in box r into
 * dst (r's data, row-major). */
static void copy_box(int ndim, const float *src, const box *s, float *dst, const box *r) {
  if (ndim == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t lo[TD_ST_MAX_DIMS], hi[TD_ST_MAX_DIMS], ss[TD_ST_MAX_DIMS], rs[TD_ST_MAX_DIMS];
  for (int d = 0; d < ndim; d++) {
    lo[d] = s->off[d] > r->off[d] ? s->off[d] : r->off[d];
    int64_t se = s->off[d] + s->shape[d], re = r->off[d] + r->shape[d];
    hi[d] = se < re ? se : re;
    if (lo[d] >= hi[d]) return;
  }
  ss[ndim - 1] = rs[ndim - 1] = 1;
  for (int d = ndim - 2; d >= 0; d--) ss[d] = ss[d + 1] * s->shape[d + 1], rs[d] = rs[d + 1] * r->shape[d + 1];
  size_t run = (size_t)(hi[ndim - 1] - lo[ndim - 1]) * sizeof(float);
  int64_t idx[TD_ST_MAX_DIMS];
  memcpy(idx, lo, sizeof idx);
  for (;;) {
    int64_t so = 0, ro = 0;
    for (int d = 0; d < ndim; d++) so += (idx[d] - s->off[d]) * ss[d], ro += (idx[d] - r->off[d]) * rs[d];
    memcpy(dst + ro, src + so, run);
    int d = ndim - 2;
    while (d >= 0 && ++idx[d] == hi[d]) idx[d] = lo[d], d--;
    if (d < 0) break;
  }
}

/* ------------------------------------------------------------------ JSON helpers */

static cJSON *dims_json(int ndim, const int64_t *v) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[d]));
  return a;
}

/* A JSON array of non-negative integers into v; its length, or -1. */
static int parse_dims(const cJSON *a, int64_t *v) {
  if (!cJSON_IsArray(a)) return -1;
  int n = cJSON_GetArraySize(a);
  if (n > TD_ST_MAX_DIMS) return -1;
  for (int d = 0; d < n; d++) {
    const cJSON *x = cJSON_GetArrayItem(a, d);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9.0e15 ||
        x->valuedouble != (double)(int64_t)x->valuedouble)
      return -1;
    v[d] = (int64_t)x->valuedouble;
  }
  return n;
}

static cJSON *read_json(const char *path, char *err, size_t errlen) {
  char *text = td_read_file(path, NULL, err, errlen);
  if (!text) return NULL;
  cJSON *root = cJSON_Parse(text);
  td_free(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    td_errorf(err, errlen, "%s: not a JSON object (the checkpoint is damaged)", path);
    return NULL;
  }
  return root;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
  return td_write_file(path, text, strlen(text), err, errlen);
}

/* "got 1e+300", "got \"x\"", or "but it is missing": what a field holds, for a message. */
static void got_text(char *out, size_t n, const cJSON *v) {
  if (!v) {
    snprintf(out, n, "but it is missing");
    return;
  }
  char *j = cJSON_PrintUnformatted(v);
  snprintf(out, n, "got %.40s%s", j ? j : "?", j && strlen(j) > 40 ? "..." : "");
  free(j);
}

int td_ckpt_json_int(const cJSON *o, const char *key, const char *file, const char *field,
                     int64_t lo, int64_t hi, int64_t *out, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  /* compared as doubles first: casting one outside int64 is undefined */
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (isfinite(x) && x >= (double)lo && x <= (double)hi && x == floor(x)) {
    *out = (int64_t)x;
    return 0;
  }
  char got[64];
  got_text(got, sizeof got, v);
  return td_errorf(err, errlen, "%s: %s must be an integer from %lld to %lld, %s (the checkpoint is damaged)",
                   file, field, (long long)lo, (long long)hi, got);
}

int td_ckpt_json_number(const cJSON *o, const char *key, const char *file, const char *field,
                        double lo, double hi, double *out, char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (isfinite(x) && x >= lo && x <= hi) {
    *out = x;
    return 0;
  }
  char got[64];
  got_text(got, sizeof got, v);
  return td_errorf(err, errlen, "%s: %s must be a number from %g to %g, %s (the checkpoint is damaged)",
                   file, field, lo, hi, got);
}

td_ckpt_tensor td_ckpt_view_of(const td_gpt_tensor *v, float *flat) {
  td_ckpt_tensor c = {.name = v->name, .ndim = v->ndim, .data = flat ? flat + v->offset : NULL};
  for (int d = 0; d < v->ndim; d++) {
    c.shape[d] = v->local_shape[d];
    c.global_shape[d] = v->shape[d];
    c.offset[d] = d == v->split_dim ? v->slice_start : 0;
  }
  return c;
}

/* ------------------------------------------------------------------ save */

/* Copy tensors to the host and write them as one safetensors file. */
static void device_to_host(void *dev, void *dst, const void *src, size_t bytes) {
  ((td_device *)dev)->ops->copy_d2h(dev, dst, src, bytes);
}

static void host_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  memcpy(dst, src, bytes);
}

/* The tensors (device memory, or all of them host memory) as one safetensors
 * file, streamed through a bounded host buffer: a checkpoint never needs a
 * second copy of the model in memory. */
static int save_tensors(td_device *dev, const char *path, const td_ckpt_tensor *ts, int n,
                        char *err, size_t errlen) {
  const int host = n > 0 && ts[0].on_host;
  td_st_tensor *st = td_calloc(sizeof *st * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    TD_CHECK(ts[i].on_host == host, "checkpoint: %s mixes host and device tensors in one file", path);
    st[i] = (td_st_tensor){.name = ts[i].name, .dtype = TD_F32, .ndim = ts[i].ndim, .data = ts[i].data};
    memcpy(st[i].shape, ts[i].shape, sizeof ts[i].shape);
  }
  const char *k[] = {"format"}, *v[] = {"pt"};
  int rc = td_safetensors_write_with(path, st, n, k, v, 1, host ? host_to_host : device_to_host,
                                     dev, err, errlen);
  td_free(st);
  return rc;
}

/* A directory holds a complete checkpoint when its metadata.json is there: the
 * commit renames it into place after every shard is on disk. */
static int is_complete(const char *d) {
  char p[CK_PATH];
  path_join(p, sizeof p, d, METADATA_NAME);
  return td_path_exists(p);
}

/* write path through path.tmp and a rename, so path is either the old file or
 * the whole new one; fsynced. Returns 0; -1 when path is unchanged; -2 when it
 * was replaced but its directory could not be flushed. err set on failure. */
static int replace_file(const char *dir, const char *path, const char *text, char *err,
                        size_t errlen) {
  char ptmp[CK_PATH];
  with_suffix(ptmp, sizeof ptmp, path, TMP_SUFFIX);
  if (write_text(ptmp, text, err, errlen) || td_rename(ptmp, path, err, errlen)) {
    char ignore[1024];
    td_remove_tree(ptmp, ignore, sizeof ignore); /* no half-written temporary left behind */
    return -1;
  }
  return td_fsync_dir(dir, err, errlen) ? -2 : 0;
}

/* A re-save of iteration N moves the published iter_N aside before renaming the
 * new one in; a crash between the two renames leaves iter_N missing while the
 * latest file may name it. Both copies are complete then: put the newer one (the
 * .tmp) back, else the one aside. Several ranks may race here when loading: a
 * failed rename is fine once iter_N is there. Returns 0 when iter_N is there (or
 * was restored), 1 when it is missing and nothing can restore it, -1 with err set
 * when a copy exists but could not be put back. */
static int recover_iteration(const char *dir, int64_t it, char *err, size_t errlen) {
  iter_paths p;
  paths_of(&p, dir, it);
  if (td_is_dir(p.final)) return 0;
  const char *from = is_complete(p.tmp) ? p.tmp : is_complete(p.aside) ? p.aside : NULL;
  if (!from) return 1;
  char why[1024];
  if (td_rename(from, p.final, why, sizeof why) == 0) {
    td_fsync_dir(dir, why, sizeof why);
    printf("  checkpoint %s: %s was missing (a save was interrupted while publishing it); "
           "restored it from %s\n", dir, p.final, from);
    fflush(stdout);
    return 0;
  }
  if (td_is_dir(p.final)) return 0; /* another rank put it back first */
  return td_errorf(err, errlen,
                   "%s is missing (a save was interrupted while publishing it) and %s holds a "
                   "complete copy, but putting it back failed: %s; rename %s to %s and load again",
                   p.final, from, why, from, p.final);
}

/* The latest file's iteration: >= 0; -1 when there is no such file; -2 with err
 * set when it cannot be read or does not hold an iteration number. */
static int64_t read_latest(const char *dir, char *err, size_t errlen) {
  char p[CK_PATH];
  path_join(p, sizeof p, dir, LATEST_FILE);
  char *text = td_read_file(p, NULL, err, errlen);
  if (!text) return errno == ENOENT ? -1 : -2;
  char *end;
  errno = 0;
  long long it = strtoll(text, &end, 10);
  while (*end == '\n' || *end == ' ' || *end == '\r') end++;
  /* digits only: strtoll would also take "-1", "+5" and leading blanks */
  int bad = !isdigit((unsigned char)text[0]) || errno || *end || it > TD_CKPT_MAX_INT;
  char shown[48];
  size_t k = 0;
  for (; text[k] && k < 32; k++) shown[k] = isprint((unsigned char)text[k]) ? text[k] : '?';
  while (k > 0 && (text[k - 1] == '\n' || text[k - 1] == '\r')) k--; /* the usual newline */
  shown[k] = 0;
  td_free(text);
  if (!bad) return it;
  td_errorf(err, errlen, "%s: expected an iteration number (an integer from 0 to %lld, e.g. 100), "
            "got \"%s\"; the checkpoint is damaged", p, (long long)TD_CKPT_MAX_INT, shown);
  return -2;
}

/* iter_NNNNNNN.tmp or iter_NNNNNNN.old (7 to 18 digits, as iter_dir writes them):
 * 1 (a save's temporary) or 2 (a copy aside) with the iteration; the latest
 * file's temporary: 3; anything else: 0, never touched. */
static int leftover_kind(const char *name, int64_t *it) {
  if (!strcmp(name, LATEST_FILE TMP_SUFFIX)) return 3;
  if (strncmp(name, "iter_", 5)) return 0;
  const char *d = name + 5;
  size_t n = 0;
  while (isdigit((unsigned char)d[n])) n++;
  if (n < 7 || n > 18) return 0;
  *it = strtoll(d, NULL, 10);
  return !strcmp(d + n, TMP_SUFFIX) ? 1 : !strcmp(d + n, ASIDE_SUFFIX) ? 2 : 0;
}

/* Leftovers of interrupted saves in dir: first every copy that still holds a
 * checkpoint the directory lacks is put back (the latest file's iteration, and
 * any iteration moved aside), then the rest is removed, with one line saying
 * what. Nothing else in dir is touched. */
static int clean_leftovers(const char *dir, char *err, size_t errlen) {
  char ignore[1024], done[512] = "";
  int64_t latest = read_latest(dir, ignore, sizeof ignore), it;
  if (latest >= 0 && recover_iteration(dir, latest, err, errlen) < 0) return -1;
  int n, rc = 0, removed = 0;
  char **names = td_list_dir(dir, &n, err, errlen);
  if (!names) return -1;
  for (int i = 0; i < n && rc == 0; i++)
    if (leftover_kind(names[i], &it) == 2 && recover_iteration(dir, it, err, errlen) < 0) rc = -1;
  for (int i = 0; i < n && rc == 0; i++) {
    char p[CK_PATH];
    path_join(p, sizeof p, dir, names[i]);
    if (!leftover_kind(names[i], &it) || !td_path_exists(p)) continue; /* gone: put back above */
    rc = td_remove_tree(p, err, errlen);
    if (rc == 0 && removed++ < 8)
      snprintf(done + strlen(done), sizeof done - strlen(done), "%s%s", removed > 1 ? ", " : "", names[i]);
  }
  td_free_list(names, n);
  if (removed) {
    printf("  removed %d leftover%s of interrupted saves from %s: %s%s\n", removed,
           removed > 1 ? "s" : "", dir, done, removed > 8 ? ", ..." : "");
    fflush(stdout);
  }
  return rc;
}

int td_checkpoint_save_prepare(const char *dir, int64_t iteration, char *err, size_t errlen) {
  iter_paths p;
  if (iteration < 0 || iteration > TD_CKPT_MAX_INT)
    return td_errorf(err, errlen, "internal: checkpoint iteration %lld out of range", (long long)iteration);
  if (td_mkdir_p(dir, err, errlen)) return -1;
  if (clean_leftovers(dir, err, errlen)) return -1; /* this iteration's .tmp among them */
  paths_of(&p, dir, iteration);
  if (td_mkdir_p(p.tmp, err, errlen)) return -1;
  return td_fsync_dir(dir, err, errlen);
}

void td_checkpoint_save_abort(const char *dir, int64_t iteration) {
  iter_paths p;
  char ignore[1024];
  paths_of(&p, dir, iteration);
  td_remove_tree(p.tmp, ignore, sizeof ignore);
}

/* The caller's slices must be consistent: inside their global shapes. */
static int check_slices(const td_ckpt_tensor *ts, int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    int64_t g[TD_ST_MAX_DIMS];
    box b;
    if (ts[i].ndim < 0 || ts[i].ndim > TD_ST_MAX_DIMS)
      return td_errorf(err, errlen, "internal: tensor '%s' has %d dimensions", ts[i].name, ts[i].ndim);
    slice_of(&ts[i], g, &b);
    if (!box_inside(ts[i].ndim, &b, g)) {
      char gs[128], os[128], ss[128];
      dims_text(gs, sizeof gs, ts[i].ndim, g), dims_text(os, sizeof os, ts[i].ndim, b.off);
      dims_text(ss, sizeof ss, ts[i].ndim, b.shape);
      return td_errorf(err, errlen,
                       "internal: slice of tensor '%s' at offset [%s] with shape [%s] lies outside "
                       "its global shape [%s]",
                       ts[i].name, os, ss, gs);
    }
  }
  return 0;
}

static int shard_into(td_device *dev, const char *shard, const td_ckpt_contents *c, char *err,
                      size_t errlen) {
  char p[CK_PATH];
  if (td_mkdir_p(shard, err, errlen)) return -1;
  path_join(p, sizeof p, shard, MODEL_NAME);
  if (save_tensors(dev, p, c->params, c->n_params, err, errlen)) return -1;
  if (c->exp_avg) {
    td_ckpt_tensor *both = td_malloc(sizeof *both * (size_t)(2 * c->n_params + 1));
    memcpy(both, c->exp_avg, sizeof *both * (size_t)c->n_params);
    memcpy(both + c->n_params, c->exp_avg_sq, sizeof *both * (size_t)c->n_params);
    path_join(p, sizeof p, shard, OPTIM_NAME);
    int rc = save_tensors(dev, p, both, 2 * c->n_params, err, errlen);
    td_free(both);
    if (rc) return -1;
  }
  path_join(p, sizeof p, shard, RNG_NAME);
  if (write_text(p, c->rng_json ? c->rng_json : "{}", err, errlen)) return -1;
  /* slices.json last: its presence says the shard is complete */
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "tp_rank", c->tp_rank);
  cJSON_AddNumberToObject(root, "tp_size", tp_size_of(c));
  cJSON_AddNumberToObject(root, "pp_rank", c->pp_rank);
  cJSON_AddNumberToObject(root, "pp_size", pp_size_of(c));
  cJSON_AddBoolToObject(root, "has_optimizer_state", c->exp_avg != NULL);
  cJSON *tensors = cJSON_AddObjectToObject(root, "tensors");
  for (int i = 0; i < c->n_params; i++) {
    const td_ckpt_tensor *t = &c->params[i];
    int64_t g[TD_ST_MAX_DIMS];
    box b;
    slice_of(t, g, &b);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "global_shape", dims_json(t->ndim, g));
    cJSON_AddItemToObject(e, "offset", dims_json(t->ndim, b.off));
    cJSON_AddItemToObject(e, "shape", dims_json(t->ndim, b.shape));
    cJSON_AddItemToObject(tensors, t->name, e);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  path_join(p, sizeof p, shard, SLICES_NAME);
  int rc = write_text(p, text, err, errlen);
  free(text);
  if (rc) return -1;
  return td_fsync_dir(shard, err, errlen);
}

int td_checkpoint_save_shard(td_device *dev, const char *dir, const td_ckpt_contents *c,
                             char *err, size_t errlen) {
  char final[CK_PATH], tmp[CK_PATH], name[32], shard[CK_PATH];
  int tp = tp_size_of(c), pp = pp_size_of(c);
  if (c->tp_rank < 0 || c->tp_rank >= tp || c->pp_rank < 0 || c->pp_rank >= pp)
    return td_errorf(err, errlen, "internal: tensor-parallel rank %d of %d, stage %d of %d",
                     c->tp_rank, tp, c->pp_rank, pp);
  if (check_slices(c->params, c->n_params, err, errlen)) return -1;
  if (c->exp_avg && (check_slices(c->exp_avg, c->n_params, err, errlen) ||
                     check_slices(c->exp_avg_sq, c->n_params, err, errlen)))
    return -1;
  iter_dir(final, sizeof final, dir, c->iteration);
  with_suffix(tmp, sizeof tmp, final, ".tmp");
  if (!td_is_dir(tmp))
    return td_errorf(err, errlen, "%s does not exist (td_checkpoint_save_prepare must run first)", tmp);
  shard_name(name, sizeof name, c->tp_rank, c->pp_rank, pp);
  path_join(shard, sizeof shard, tmp, name);
  return shard_into(dev, shard, c, err, errlen);
}

/* Find an entry in metadata's tensors table being built, by name. */
static cJSON *find_entry(cJSON *tensors, const char *name) {
  return cJSON_GetObjectItemCaseSensitive(tensors, name);
}

/* Add shard r's slice description (from its slices.json) to the tensors table. */
static int add_shard(cJSON *tensors, const cJSON *shard, const char *path, const char *name,
                     char *err, size_t errlen) {
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(shard, "tensors");
  if (!cJSON_IsObject(ts)) return td_errorf(err, errlen, "%s: no \"tensors\" object", path);
  const cJSON *t;
  cJSON_ArrayForEach(t, ts) {
    int64_t g[TD_ST_MAX_DIMS], off[TD_ST_MAX_DIMS], sh[TD_ST_MAX_DIMS];
    int nd = parse_dims(cJSON_GetObjectItemCaseSensitive(t, "global_shape"), g);
    if (nd < 0 || parse_dims(cJSON_GetObjectItemCaseSensitive(t, "offset"), off) != nd ||
        parse_dims(cJSON_GetObjectItemCaseSensitive(t, "shape"), sh) != nd)
      return td_errorf(err, errlen, "%s: tensor '%s': bad global_shape/offset/shape", path, t->string);
    cJSON *e = find_entry(tensors, t->string);
    if (!e) {
      e = cJSON_AddObjectToObject(tensors, t->string);
      cJSON_AddStringToObject(e, "dtype", "F32");
      cJSON_AddItemToObject(e, "shape", dims_json(nd, g));
      cJSON_AddArrayToObject(e, "slices");
    } else {
      int64_t g0[TD_ST_MAX_DIMS];
      int nd0 = parse_dims(cJSON_GetObjectItemCaseSensitive(e, "shape"), g0), same = nd0 == nd;
      for (int d = 0; same && d < nd; d++) same = g0[d] == g[d];
      if (!same) {
        char a[128], b[128];
        dims_text(a, sizeof a, nd0, g0), dims_text(b, sizeof b, nd, g);
        return td_errorf(err, errlen,
                         "tensor '%s' has global shape [%s] in one shard but [%s] in %s",
                         t->string, a, b, path);
      }
    }
    /* a replicated tensor (the same offset and shape in another shard) is listed once */
    cJSON *slices = cJSON_GetObjectItemCaseSensitive(e, "slices"), *s;
    int dup = 0;
    cJSON_ArrayForEach(s, slices) {
      int64_t o2[TD_ST_MAX_DIMS], s2[TD_ST_MAX_DIMS];
      parse_dims(cJSON_GetObjectItemCaseSensitive(s, "offset"), o2);
      parse_dims(cJSON_GetObjectItemCaseSensitive(s, "shape"), s2);
      int same = 1;
      for (int d = 0; same && d < nd; d++) same = o2[d] == off[d] && s2[d] == sh[d];
      dup |= same;
    }
    if (dup) continue;
    char file[64];
    snprintf(file, sizeof file, "%s/%s", name, MODEL_NAME);
    s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "file", file);
    cJSON_AddItemToObject(s, "offset", dims_json(nd, off));
    cJSON_AddItemToObject(s, "shape", dims_json(nd, sh));
    cJSON_AddItemToArray(slices, s);
  }
  return 0;
}

/* Every tensor's slices must cover it. */
static int check_coverage(const cJSON *tensors, char *err, size_t errlen) {
  const cJSON *e;
  cJSON_ArrayForEach(e, tensors) {
    int64_t g[TD_ST_MAX_DIMS], hole[TD_ST_MAX_DIMS];
    int nd = parse_dims(cJSON_GetObjectItemCaseSensitive(e, "shape"), g);
    const cJSON *slices = cJSON_GetObjectItemCaseSensitive(e, "slices"), *s;
    int n = cJSON_GetArraySize(slices), i = 0;
    box *bs = td_calloc(sizeof *bs * (size_t)(n + 1)), r = {0};
    cJSON_ArrayForEach(s, slices) {
      parse_dims(cJSON_GetObjectItemCaseSensitive(s, "offset"), bs[i].off);
      parse_dims(cJSON_GetObjectItemCaseSensitive(s, "shape"), bs[i].shape);
      i++;
    }
    memcpy(r.shape, g, sizeof g);
    unsigned char *used = td_malloc((size_t)n + 1);
    int rc = plan_cover(nd, &r, bs, n, used, hole);
    td_free(used), td_free(bs);
    if (rc) {
      char h[128];
      dims_text(h, sizeof h, nd, hole);
      return td_errorf(err, errlen, "tensor '%s': no shard holds the element at [%s] (the "
                       "shards' slices do not cover the tensor)", e->string, h);
    }
  }
  return 0;
}

/* metadata.json from the shards' slice descriptions. */
/* One shard's slices.json must say it is TP rank t of tp, stage p of pp (a file
 * from before pipeline stages has no pp fields: stage 0 of 1). */
static int check_shard_place(const cJSON *shard, const char *p, int t, int tp, int s, int pp,
                             char *err, size_t errlen) {
  const cJSON *jr = cJSON_GetObjectItemCaseSensitive(shard, "tp_rank");
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(shard, "tp_size");
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(shard, "pp_rank");
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(shard, "pp_size");
  int r0 = cJSON_IsNumber(jr) ? jr->valueint : -1, s0 = cJSON_IsNumber(js) ? js->valueint : -1;
  int r1 = cJSON_IsNumber(pr) ? pr->valueint : 0, s1 = cJSON_IsNumber(ps) ? ps->valueint : 1;
  if (r0 != t || s0 != tp || r1 != s || s1 != pp)
    return td_errorf(err, errlen,
                     "%s: saved as tensor-parallel rank %d of %d, stage %d of %d; expected %d of "
                     "%d, stage %d of %d",
                     p, r0, s0, r1, s1, t, tp, s, pp);
  return 0;
}

static char *build_metadata(const char *tmp, const td_ckpt_contents *c, char *err, size_t errlen) {
  int tp = tp_size_of(c), pp = pp_size_of(c);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "iteration", (double)c->iteration);
  cJSON *state = cJSON_Parse(c->state_json ? c->state_json : "{}");
  if (!cJSON_IsObject(state)) {
    cJSON_Delete(state), cJSON_Delete(root);
    td_errorf(err, errlen, "internal: trainer state is not a JSON object");
    return NULL;
  }
  cJSON_AddItemToObject(root, "state", state);
  cJSON *layout = cJSON_AddObjectToObject(root, "layout");
  cJSON_AddNumberToObject(layout, "tensor_model_parallel_size", tp);
  cJSON_AddNumberToObject(layout, "pipeline_model_parallel_size", pp);
  cJSON_AddNumberToObject(layout, "data_parallel_size", 1);
  cJSON *tensors = cJSON_CreateObject();
  int optim = -1, rc = 0;
  for (int k = 0; k < tp * pp && rc == 0; k++) {
    int r = k % tp, stage = k / tp;
    char name[32], sdir[CK_PATH], p[CK_PATH];
    shard_name(name, sizeof name, r, stage, pp);
    path_join(sdir, sizeof sdir, tmp, name);
    path_join(p, sizeof p, sdir, SLICES_NAME);
    if (!td_path_exists(p)) {
      rc = td_errorf(err, errlen,
                     "shard %s of tensor-parallel size %d x %d stages is missing or incomplete (no "
                     "%s): every rank of data-parallel rank 0 must save its shard before the commit",
                     name, tp, pp, p);
      break;
    }
    cJSON *shard = read_json(p, err, errlen);
    if (!shard) {
      rc = -1;
      break;
    }
    int has = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(shard, "has_optimizer_state"));
    if (check_shard_place(shard, p, r, tp, stage, pp, err, errlen))
      rc = -1;
    else if (optim >= 0 && has != optim)
      rc = td_errorf(err, errlen, "%s: optimizer state %s in this shard but %s in the first", p,
                     has ? "saved" : "not saved", optim ? "saved" : "not saved");
    else
      rc = add_shard(tensors, shard, p, name, err, errlen);
    optim = has;
    cJSON_Delete(shard);
  }
  if (rc == 0) rc = check_coverage(tensors, err, errlen);
  cJSON_AddBoolToObject(layout, "has_optimizer_state", optim == 1);
  cJSON_AddItemToObject(root, "tensors", tensors);
  char *s = rc == 0 ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  return s;
}

/* Undo a publish that failed before the latest file changed: the new directory
 * back to .tmp (the caller removes it), the one aside back in place. */
static void unpublish(const char *dir, const iter_paths *p, int moved_new, int moved_old,
                      char *err, size_t errlen) {
  char why[1024];
  if ((moved_new && td_rename(p->final, p->tmp, why, sizeof why)) ||
      (moved_old && td_rename(p->aside, p->final, why, sizeof why)) || td_fsync_dir(dir, why, sizeof why)) {
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, "; undoing the save failed too: %s", why);
  }
}

/* Publish p->tmp (complete) as iteration `it`. Nothing is deleted before the
 * new checkpoint and the latest file are in place, so at every moment the latest
 * file names a complete directory, or recover_iteration can rename one back:
 *   iter_N -> iter_N.old (a re-save), iter_N.tmp -> iter_N, the latest file
 *   (written aside, renamed), then iter_N.old removed;
 * each rename followed by an fsync of dir. A failure before the latest file is
 * replaced puts everything back as it was. */
static int publish(const char *dir, const iter_paths *p, int64_t it, char *err, size_t errlen) {
  int moved_old = 0, moved_new = 0;
  if (td_is_dir(p->final)) {
    if (td_remove_tree(p->aside, err, errlen) || td_rename(p->final, p->aside, err, errlen)) return -1;
    moved_old = 1;
  }
  int rc = moved_old ? td_fsync_dir(dir, err, errlen) : 0;
  if (rc == 0) rc = td_rename(p->tmp, p->final, err, errlen);
  moved_new = rc == 0;
  if (rc == 0) rc = td_fsync_dir(dir, err, errlen);
  char latest[CK_PATH], text[32];
  path_join(latest, sizeof latest, dir, LATEST_FILE);
  snprintf(text, sizeof text, "%lld", (long long)it);
  if (rc == 0) rc = replace_file(dir, latest, text, err, errlen);
  if (rc == -1) {
    unpublish(dir, p, moved_new, moved_old, err, errlen);
    return -1;
  }
  if (rc == -2) return -1; /* published; only the flush of dir failed: said in err */
  char why[1024];
  if (moved_old && td_remove_tree(p->aside, why, sizeof why)) {
    printf("  warning: %s (the next save removes it)\n", why);
    fflush(stdout);
  }
  return 0;
}

int td_checkpoint_save_commit(const char *dir, const td_ckpt_contents *c, char *err,
                              size_t errlen) {
  iter_paths p;
  char meta_path[CK_PATH];
  paths_of(&p, dir, c->iteration);
  if (!td_is_dir(p.tmp))
    return td_errorf(err, errlen, "%s does not exist (td_checkpoint_save_prepare must run first)", p.tmp);
  char *meta = build_metadata(p.tmp, c, err, errlen);
  if (!meta) return -1;
  path_join(meta_path, sizeof meta_path, p.tmp, METADATA_NAME);
  int rc = replace_file(p.tmp, meta_path, meta, err, errlen); /* last: marks the copy complete */
  free(meta);
  if (rc) return -1;
  return publish(dir, &p, c->iteration, err, errlen);
}

int td_checkpoint_save(td_device *dev, const char *dir, const td_ckpt_contents *c, char *err,
                       size_t errlen) {
  if (td_checkpoint_save_prepare(dir, c->iteration, err, errlen)) return -1;
  if (td_checkpoint_save_shard(dev, dir, c, err, errlen) ||
      td_checkpoint_save_commit(dir, c, err, errlen)) {
    td_checkpoint_save_abort(dir, c->iteration);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ load */

int64_t td_checkpoint_latest(const char *dir, char *err, size_t errlen) {
  /* only a path that does not exist means "no checkpoint": one that cannot be
   * read must not silently start a run from scratch */
  if (td_open_dir(dir, err, errlen)) return errno == ENOENT ? -1 : -2;
  int64_t it = read_latest(dir, err, errlen);
  if (it >= 0 && recover_iteration(dir, it, err, errlen) < 0) return -2;
  return it;
}

int td_checkpoint_has_optimizer_state(const char *dir, int64_t iteration) {
  char iterdir[CK_PATH], p[CK_PATH], err[256];
  iter_dir(iterdir, sizeof iterdir, dir, iteration);
  path_join(p, sizeof p, iterdir, "metadata.json");
  char *text = td_read_file(p, NULL, err, sizeof err);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  td_free(text);
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  int has = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(layout, "has_optimizer_state"));
  cJSON_Delete(root);
  return has;
}

char *td_checkpoint_read_rng(const char *dir, int64_t iteration, char *err, size_t errlen) {
  char iterdir[CK_PATH], shard[64], sdir[CK_PATH], p[CK_PATH];
  iter_dir(iterdir, sizeof iterdir, dir, iteration);
  shard_name(shard, sizeof shard, 0, 0, 1);
  path_join(sdir, sizeof sdir, iterdir, shard);
  if (!td_is_dir(sdir)) { /* saved with pipeline stages: the first stage's shard */
    shard_name(shard, sizeof shard, 0, 0, 2);
    path_join(sdir, sizeof sdir, iterdir, shard);
  }
  path_join(p, sizeof p, sdir, RNG_NAME);
  cJSON *root = read_json(p, err, errlen);
  if (!root) return NULL;
  int64_t v;
  /* {} (a converted checkpoint, --no-save-rng) has no state; else a seed */
  if (cJSON_GetArraySize(root) > 0 &&
      (td_ckpt_json_int(root, "seed", p, "seed", 0, TD_CKPT_MAX_INT, &v, err, errlen) ||
       (cJSON_HasObjectItem(root, "iteration") &&
        td_ckpt_json_int(root, "iteration", p, "iteration", 0, TD_CKPT_MAX_INT, &v, err, errlen)))) {
    cJSON_Delete(root);
    return NULL;
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  char *copy = td_malloc(strlen(text) + 1);
  strcpy(copy, text);
  free(text);
  return copy;
}

/* The safetensors files a load needs, each opened (and validated) once. */
typedef struct {
  int n, cap;
  char **paths;
  td_safetensors **files;
} file_cache;

static td_safetensors *cache_open(file_cache *fc, const char *path, const char *shard_dir,
                                  const char *tensor, int tp_saved, char *err, size_t errlen) {
  for (int i = 0; i < fc->n; i++)
    if (!strcmp(fc->paths[i], path)) return fc->files[i];
  if (!td_is_dir(shard_dir)) {
    td_errorf(err, errlen,
              "shard directory %s is missing (metadata.json lists slices of tensor '%s' in it; "
              "the checkpoint was saved with tensor_model_parallel_size %d)",
              shard_dir, tensor, tp_saved);
    return NULL;
  }
  if (!td_path_exists(path)) {
    td_errorf(err, errlen, "%s is missing (metadata.json lists slices of tensor '%s' in it)", path,
              tensor);
    return NULL;
  }
  td_safetensors *st = td_safetensors_open(path, err, errlen);
  if (!st) return NULL;
  if (fc->n == fc->cap) {
    fc->cap = fc->cap ? 2 * fc->cap : 8;
    char **paths = td_malloc(sizeof *paths * (size_t)fc->cap);
    td_safetensors **files = td_malloc(sizeof *files * (size_t)fc->cap);
    if (fc->n) memcpy(paths, fc->paths, sizeof *paths * (size_t)fc->n);
    if (fc->n) memcpy(files, fc->files, sizeof *files * (size_t)fc->n);
    td_free(fc->paths), td_free(fc->files);
    fc->paths = paths, fc->files = files;
  }
  fc->paths[fc->n] = td_strdup(path);
  fc->files[fc->n++] = st;
  return st;
}

static void cache_close(file_cache *fc) {
  for (int i = 0; i < fc->n; i++) td_free(fc->paths[i]), td_safetensors_close(fc->files[i]);
  td_free(fc->paths), td_free(fc->files);
}

/* One saved slice a requested tensor needs: its box and its bytes in a mapped file. */
typedef struct {
  box b;
  const float *data;
} piece;

/* How to fill one requested tensor: its box and the pieces that cover it. */
typedef struct {
  const td_ckpt_tensor *t;
  box r;
  int n;
  piece *pieces;
} fill;

/* Plan the load of tensor t (its slices listed under meta_name in metadata.json;
 * read under t->name from each slice's directory's file `file`). */
static int plan_tensor(const cJSON *tensors, const char *meta_path, const char *iterdir,
                       const td_ckpt_tensor *t, const char *meta_name, const char *file,
                       int tp_saved, file_cache *fc, fill *f, char *err, size_t errlen) {
  int64_t want_g[TD_ST_MAX_DIMS], g[TD_ST_MAX_DIMS], hole[TD_ST_MAX_DIMS];
  char a[128], b[128], c3[128];
  memset(f, 0, sizeof *f);
  f->t = t;
  if (t->ndim < 0 || t->ndim > TD_ST_MAX_DIMS)
    return td_errorf(err, errlen, "internal: tensor '%s' has %d dimensions", t->name, t->ndim);
  slice_of(t, want_g, &f->r);
  if (!box_inside(t->ndim, &f->r, want_g)) {
    dims_text(a, sizeof a, t->ndim, f->r.off), dims_text(b, sizeof b, t->ndim, t->shape);
    dims_text(c3, sizeof c3, t->ndim, want_g);
    return td_errorf(err, errlen, "internal: slice of tensor '%s' at offset [%s] with shape [%s] "
                     "lies outside its global shape [%s]", t->name, a, b, c3);
  }
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(tensors, meta_name);
  if (!cJSON_IsObject(e))
    return td_errorf(err, errlen, "%s: tensor '%s' is missing (the model does not match the checkpoint)",
                     meta_path, meta_name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  int nd = parse_dims(cJSON_GetObjectItemCaseSensitive(e, "shape"), g);
  int same = nd == t->ndim && cJSON_IsString(dt) && !strcmp(dt->valuestring, "F32");
  for (int d = 0; same && d < nd; d++) same = g[d] == want_g[d];
  if (!same) {
    dims_text(a, sizeof a, nd < 0 ? 0 : nd, g), dims_text(b, sizeof b, t->ndim, want_g);
    return td_errorf(err, errlen,
                     "%s: tensor '%s' has shape [%s] %s in the checkpoint but the model needs [%s] F32 "
                     "(model flags differ from the saved run?)",
                     meta_path, meta_name, a, cJSON_IsString(dt) ? dt->valuestring : "?", b);
  }
  const cJSON *slices = cJSON_GetObjectItemCaseSensitive(e, "slices"), *s;
  int n = cJSON_IsArray(slices) ? cJSON_GetArraySize(slices) : 0, i = 0;
  box *bs = td_calloc(sizeof *bs * (size_t)(n + 1));
  const char **files = td_calloc(sizeof *files * (size_t)(n + 1));
  cJSON_ArrayForEach(s, slices) {
    const cJSON *fj = cJSON_GetObjectItemCaseSensitive(s, "file");
    if (!cJSON_IsString(fj) || parse_dims(cJSON_GetObjectItemCaseSensitive(s, "offset"), bs[i].off) != nd ||
        parse_dims(cJSON_GetObjectItemCaseSensitive(s, "shape"), bs[i].shape) != nd ||
        !box_inside(nd, &bs[i], g) || strstr(fj->valuestring, "..")) {
      td_free(bs), td_free(files);
      return td_errorf(err, errlen, "%s: tensor '%s': slice %d is malformed or outside the tensor "
                       "(the checkpoint is damaged)", meta_path, meta_name, i);
    }
    files[i++] = fj->valuestring;
  }
  unsigned char *used = td_malloc((size_t)n + 1);
  int rc = 0;
  if (plan_cover(nd, &f->r, bs, n, used, hole)) {
    dims_text(a, sizeof a, nd, hole), dims_text(b, sizeof b, nd, f->r.off);
    dims_text(c3, sizeof c3, nd, f->r.shape);
    rc = td_errorf(err, errlen,
                   "%s: tensor '%s': no saved slice holds the element at [%s] (the slice at offset "
                   "[%s] with shape [%s] is not covered; the checkpoint is incomplete)",
                   meta_path, meta_name, a, b, c3);
  }
  f->pieces = td_calloc(sizeof *f->pieces * (size_t)(n + 1));
  for (i = 0; i < n && rc == 0; i++) {
    if (!used[i]) continue;
    /* the slice's directory holds `file`: mp_rank_01/model.safetensors -> mp_rank_01/FILE */
    char rel[CK_PATH], sdir[CK_PATH], p[CK_PATH];
    snprintf(rel, sizeof rel, "%s", files[i]);
    char *slash = strrchr(rel, '/');
    if (slash) *slash = 0;
    if (slash) path_join(sdir, sizeof sdir, iterdir, rel);
    else snprintf(sdir, sizeof sdir, "%s", iterdir);
    path_join(p, sizeof p, sdir, file);
    td_safetensors *st = cache_open(fc, p, sdir, meta_name, tp_saved, err, errlen);
    if (!st) {
      rc = -1;
      break;
    }
    const td_st_tensor *x = td_safetensors_find(st, t->name);
    if (!x) {
      rc = td_errorf(err, errlen, "%s: tensor '%s' is missing (metadata.json lists a slice of it there)",
                     p, t->name);
      break;
    }
    int ok = x->dtype == TD_F32 && x->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = x->shape[d] == bs[i].shape[d];
    if (!ok) {
      dims_text(a, sizeof a, x->ndim, x->shape), dims_text(b, sizeof b, nd, bs[i].shape);
      rc = td_errorf(err, errlen,
                     "%s: tensor '%s' has shape [%s] %s in the file but metadata.json lists a "
                     "slice of shape [%s] F32 (the checkpoint is damaged)",
                     p, t->name, a, td_dtype_name(x->dtype), b);
      break;
    }
    f->pieces[f->n++] = (piece){.b = bs[i], .data = x->data};
  }
  td_free(used), td_free(bs), td_free(files);
  return rc;
}

/* Copy a planned tensor to the device: straight from the file when one saved
 * slice is exactly the requested one, else assembled in a host buffer. */
static void fill_tensor(td_device *dev, const fill *f) {
  const td_ckpt_tensor *t = f->t;
  size_t bytes = tensor_bytes(t);
  if (bytes == 0) return;
  for (int i = 0; i < f->n; i++)
    if (!memcmp(&f->pieces[i].b, &f->r, sizeof f->r)) {
      if (t->on_host)
        memcpy(t->data, f->pieces[i].data, bytes);
      else
        dev->ops->copy_h2d(dev, t->data, f->pieces[i].data, bytes);
      return;
    }
  float *host = t->on_host ? t->data : td_malloc(bytes);
  for (int i = 0; i < f->n; i++) copy_box(t->ndim, f->pieces[i].data, &f->pieces[i].b, host, &f->r);
  if (t->on_host) return;
  dev->ops->copy_h2d(dev, t->data, host, bytes);
  td_free(host);
}

int td_checkpoint_load(td_device *dev, const char *dir, int64_t iteration,
                       const td_ckpt_contents *c, char **state_json, char *err, size_t errlen) {
  char iterdir[CK_PATH], meta_path[CK_PATH];
  iter_dir(iterdir, sizeof iterdir, dir, iteration);
  if (!td_is_dir(iterdir))
    return td_errorf(err, errlen, "checkpoint directory '%s' does not exist (latest file names iteration %lld)",
                 iterdir, (long long)iteration);
  path_join(meta_path, sizeof meta_path, iterdir, "metadata.json");
  cJSON *root = read_json(meta_path, err, errlen);
  if (!root) return -1;
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
  const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  int64_t saved_it, tp_saved = 1;
  if (td_ckpt_json_int(root, "iteration", meta_path, "iteration", 0, TD_CKPT_MAX_INT, &saved_it, err,
                       errlen) ||
      (cJSON_HasObjectItem(layout, "tensor_model_parallel_size") &&
       td_ckpt_json_int(layout, "tensor_model_parallel_size", meta_path,
                        "layout.tensor_model_parallel_size", 1, 1 << 20, &tp_saved, err, errlen))) {
    cJSON_Delete(root);
    return -1;
  }
  if (saved_it != iteration) {
    cJSON_Delete(root);
    return td_errorf(err, errlen, "%s: iteration is %lld but the directory is iteration %lld's (the "
                     "checkpoint is damaged)", meta_path, (long long)saved_it, (long long)iteration);
  }
  if (!cJSON_IsObject(state)) {
    cJSON_Delete(root);
    return td_errorf(err, errlen, "%s: not a trident checkpoint metadata file (no \"state\" object)", meta_path);
  }
  if (c->n_params > 0 && !cJSON_IsObject(tensors)) {
    cJSON_Delete(root);
    return td_errorf(err, errlen, "%s: no \"tensors\" table (the checkpoint is damaged)", meta_path);
  }
  /* plan and check everything first: params, then exp_avg, exp_avg_sq */
  int sets = c->exp_avg ? 3 : 1, n = c->n_params * sets, rc = 0, planned = 0;
  fill *fills = td_calloc(sizeof *fills * (size_t)(n + 1));
  file_cache fc = {0};
  for (int k = 0; k < n && rc == 0; k++) {
    int set = k / c->n_params, i = k % c->n_params;
    const td_ckpt_tensor *t = set == 0 ? &c->params[i] : set == 1 ? &c->exp_avg[i] : &c->exp_avg_sq[i];
    rc = plan_tensor(tensors, meta_path, iterdir, t, c->params[i].name, set ? OPTIM_NAME : MODEL_NAME,
                     (int)tp_saved, &fc, &fills[k], err, errlen);
    planned = k + 1;
  }
  if (rc == 0) /* everything checked: only now touch the caller's tensors */
    for (int k = 0; k < n; k++) fill_tensor(dev, &fills[k]);
  for (int k = 0; k < planned; k++) td_free(fills[k].pieces);
  td_free(fills);
  cache_close(&fc);
  if (rc == 0 && state_json) {
    char *s = cJSON_PrintUnformatted(state);
    *state_json = td_strdup(s);
    free(s);
  }
  cJSON_Delete(root);
  return rc;
}
