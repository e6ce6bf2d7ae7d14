#include "train/tb_events.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"

struct td_tb_writer {
  FILE *f;
  char path[4096];
};

/* ------------------------------------------------------------------ CRC-32C */

uint32_t td_crc32c(const void *data, size_t n) {
  static uint32_t table[256];
  static int ready;
  if (!ready) { /* reflected Castagnoli polynomial; the table is the same on every call */
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  const unsigned char *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static uint32_t masked_crc(const void *data, size_t n) {
  uint32_t c = td_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------------------ protobuf */

/* A small output buffer for one event (tags are short). */
typedef struct {
  unsigned char b[512];
  size_t n;
  int overflow;
} pb;

static void put(pb *o, const void *p, size_t n) {
  if (o->n + n > sizeof o->b) {
    o->overflow = 1;
    return;
  }
  memcpy(o->b + o->n, p, n);
  o->n += n;
}

static void put_varint(pb *o, uint64_t v) {
  unsigned char t[10];
  size_t k = 0;
  do {
    t[k] = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (v) t[k] |= 0x80;
    k++;
  } while (v);
  put(o, t, k);
}

static void put_le(pb *o, uint64_t v, int bytes) {
  unsigned char t[8];
  for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
  put(o, t, (size_t)bytes);
}

/* key = field number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) */
static void put_key(pb *o, int field, int wire) { put_varint(o, (uint64_t)(field << 3 | wire)); }

static void put_bytes(pb *o, int field, const void *p, size_t n) {
  put_key(o, field, 2);
  put_varint(o, n);
  put(o, p, n);
}

static void put_double(pb *o, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  put_key(o, field, 1);
  put_le(o, u, 8);
}

static double wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ records */

static int write_record(td_tb_writer *w, const pb *event, char *err, size_t errlen) {
  if (event->overflow) return td_errorf(err, errlen, "%s: an event does not fit 512 bytes", w->path);
  pb frame = {.n = 0};
  put_le(&frame, event->n, 8);
  uint32_t len_crc = masked_crc(frame.b, 8);
  put_le(&frame, len_crc, 4);
  pb tail = {.n = 0};
  put_le(&tail, masked_crc(event->b, event->n), 4);
  if (fwrite(frame.b, 1, frame.n, w->f) != frame.n ||
      fwrite(event->b, 1, event->n, w->f) != event->n ||
      fwrite(tail.b, 1, tail.n, w->f) != tail.n)
    return td_errorf(err, errlen, "writing %s: %s", w->path, strerror(errno));
  return 0;
}

td_tb_writer *td_tb_open(const char *dir, char *err, size_t errlen) {
  if (td_mkdir_p(dir, err, errlen)) return NULL;
  td_tb_writer *w = td_calloc(sizeof *w);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  double now = wall_time();
  if ((size_t)snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%d.0", dir,
                       (long long)now, host, (int)getpid()) >= sizeof w->path) {
    td_errorf(err, errlen, "--tensorboard-dir %s: path too long", dir);
    td_free(w);
    return NULL;
  }
  w->f = fopen(w->path, "wb");
  if (!w->f) {
    td_errorf(err, errlen, "cannot create the TensorBoard event file %s: %s", w->path,
              strerror(errno));
    td_free(w);
    return NULL;
  }
  pb e = {.n = 0};
  put_double(&e, 1, now);
  put_bytes(&e, 3, "brain.Event:2", 13);
  if (write_record(w, &e, err, errlen) || td_tb_flush(w, err, errlen)) {
    td_tb_close(w);
    return NULL;
  }
  return w;
}

int td_tb_scalar(td_tb_writer *w, const char *tag, double value, int64_t step, char *err,
                 size_t errlen) {
  pb v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
  float f = (float)value;
  uint32_t u;
  memcpy(&u, &f, 4);
  put_bytes(&v, 1, tag, strlen(tag));
  put_key(&v, 2, 5);
  put_le(&v, u, 4);
  put_bytes(&s, 1, v.b, v.n);
  put_double(&e, 1, wall_time());
  put_key(&e, 2, 0);
  put_varint(&e, (uint64_t)step);
  put_bytes(&e, 5, s.b, s.n);
  e.overflow |= v.overflow | s.overflow;
  return write_record(w, &e, err, errlen);
}

int td_tb_flush(td_tb_writer *w, char *err, size_t errlen) {
  if (fflush(w->f)) return td_errorf(err, errlen, "writing %s: %s", w->path, strerror(errno));
  return 0;
}

const char *td_tb_path(const td_tb_writer *w) { return w->path; }

void td_tb_close(td_tb_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  td_free(w);
}
