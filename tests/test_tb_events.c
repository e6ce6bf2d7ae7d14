/* TensorBoard event files (src/train/tb_events.h): CRC-32C against its check
 * value and a bitwise implementation; a written file read back by a decoder
 * written here from the TFRecord and protobuf wire formats (frame CRCs, the
 * file-version event, every scalar's tag, value and step); an unwritable
 * directory refused with its path. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "check.h"
#include "train/tb_events.h"

static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
  }
  return ~c;
}

static void test_crc(void) {
  CHECK(td_crc32c("123456789", 9) == 0xe3069283u, "CRC-32C check value of \"123456789\"");
  unsigned char buf[1000];
  for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 131 + 7);
  int same = 1;
  for (size_t n = 0; n <= 1000; n += 37) same &= td_crc32c(buf, n) == crc32c_bitwise(buf, n);
  CHECK(same, "table CRC-32C equals the bitwise one on 28 lengths");
}

/* ------------------------------------------------------------ the decoder */

typedef struct {
  const unsigned char *p, *end;
  int bad;
} rd;

static uint64_t varint(rd *r) {
  uint64_t v = 0;
  for (int s = 0; s < 64; s += 7) {
    if (r->p >= r->end) break;
    unsigned char b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) return v;
  }
  r->bad = 1;
  return 0;
}

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

typedef struct {
  double wall_time;
  int64_t step;
  char version[32], tag[64];
  float value;
  int has_value;
} event;

/* Summary.Value { tag = 1; simple_value = 2 } inside Summary { value = 1 } */
static void decode_summary(rd r, event *e) {
  while (r.p < r.end && !r.bad) {
    uint64_t key = varint(&r), len = varint(&r);
    if (key != (1 << 3 | 2) || len > (uint64_t)(r.end - r.p)) { r.bad = 1; break; }
    rd v = {r.p, r.p + len, 0};
    r.p += len;
    while (v.p < v.end && !v.bad) {
      uint64_t k = varint(&v);
      if (k == (1 << 3 | 2)) {
        uint64_t n = varint(&v);
        if (n >= sizeof e->tag || n > (uint64_t)(v.end - v.p)) { v.bad = 1; break; }
        memcpy(e->tag, v.p, n), e->tag[n] = 0, v.p += n;
      } else if (k == (2 << 3 | 5) && v.end - v.p >= 4) {
        uint32_t u = (uint32_t)le(v.p, 4);
        memcpy(&e->value, &u, 4), e->has_value = 1, v.p += 4;
      } else {
        v.bad = 1;
      }
    }
    r.bad |= v.bad;
  }
  if (r.bad) e->step = -999;
}

static int decode_event(const unsigned char *p, size_t n, event *e) {
  rd r = {p, p + n, 0};
  memset(e, 0, sizeof *e);
  while (r.p < r.end && !r.bad) {
    uint64_t key = varint(&r);
    int field = (int)(key >> 3), wire = (int)(key & 7);
    if (field == 1 && wire == 1 && r.end - r.p >= 8) {
      uint64_t u = le(r.p, 8);
      memcpy(&e->wall_time, &u, 8), r.p += 8;
    } else if (field == 2 && wire == 0) {
      e->step = (int64_t)varint(&r);
    } else if ((field == 3 || field == 5) && wire == 2) {
      uint64_t len = varint(&r);
      if (len > (uint64_t)(r.end - r.p)) return -1;
      if (field == 3 && len < sizeof e->version) memcpy(e->version, r.p, len);
      if (field == 5) decode_summary((rd){r.p, r.p + len, 0}, e);
      r.p += len;
    } else {
      return -1;
    }
  }
  return r.bad || e->step == -999 ? -1 : 0;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

/* Read every record of path into events (at most max); -1 on a framing or CRC error. */
static int read_events(const char *path, event *events, int max) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  int n = 0;
  unsigned char head[12], data[1024], tail[4];
  while (fread(head, 1, 12, f) == 12) {
    uint64_t len = le(head, 8);
    if (masked(crc32c_bitwise(head, 8)) != (uint32_t)le(head + 8, 4) || len > sizeof data ||
        fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4 ||
        masked(crc32c_bitwise(data, len)) != (uint32_t)le(tail, 4) || n >= max ||
        decode_event(data, len, &events[n]))
      n = -1;
    if (n < 0) break;
    n++;
  }
  fclose(f);
  return n;
}

static void find_event_file(const char *dir, char *out, size_t n) {
  out[0] = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, "events.out.tfevents.", 20)) snprintf(out, n, "%s/%s", dir, e->d_name);
  closedir(d);
}

static void test_round_trip(const char *tmp) {
  static const struct {
    const char *tag;
    double value;
    int64_t step;
  } s[] = {{"lm loss", 2.5, 1},
           {"learning-rate", 1e-4, 2},
           {"lm loss validation ppl", 12.25, 100},
           {"grad-norm vs samples", -0.75, (int64_t)1 << 40}};
  const int ns = (int)(sizeof s / sizeof *s);
  char dir[512], err[512] = "", path[1024];
  snprintf(dir, sizeof dir, "%s/runs/a", tmp);
  td_tb_writer *w = td_tb_open(dir, err, sizeof err);
  CHECK(w != NULL, "td_tb_open creates %s (%s)", dir, err);
  if (!w) return;
  int rc = 0;
  for (int i = 0; i < ns; i++) rc |= td_tb_scalar(w, s[i].tag, s[i].value, s[i].step, err, sizeof err);
  rc |= td_tb_flush(w, err, sizeof err);
  td_tb_close(w);
  CHECK(rc == 0, "scalars written (%s)", err);
  find_event_file(dir, path, sizeof path);
  CHECK(path[0] != 0, "an events.out.tfevents.* file in the directory: %s", path);
  event ev[8];
  int n = read_events(path, ev, 8);
  CHECK(n == ns + 1, "%d records with valid length and data CRCs (want %d)", n, ns + 1);
  if (n != ns + 1) return;
  double now = (double)time(NULL);
  CHECK(!strcmp(ev[0].version, "brain.Event:2") && ev[0].wall_time > now - 3600 &&
            ev[0].wall_time < now + 3600,
        "first event: file_version %s, wall time now", ev[0].version);
  int ok = 1;
  for (int i = 0; i < ns; i++) {
    const event *e = &ev[i + 1];
    ok &= !strcmp(e->tag, s[i].tag) && e->has_value && e->value == (float)s[i].value &&
          e->step == s[i].step && e->wall_time >= ev[0].wall_time;
    if (!ok) printf("    record %d: tag '%s' value %g step %lld\n", i + 1, e->tag, e->value,
                    (long long)e->step);
  }
  CHECK(ok, "every scalar reads back with its tag, value (as float) and step");
}

static void test_unwritable(const char *tmp) {
  char file[512], dir[600], err[512] = "";
  snprintf(file, sizeof file, "%s/plain_file", tmp);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  snprintf(dir, sizeof dir, "%s/sub", file);
  td_tb_writer *w = td_tb_open(dir, err, sizeof err);
  CHECK(w == NULL && strstr(err, "plain_file"), "a directory under a file is refused: %s", err);
  td_tb_close(w);
}

int main(void) {
  test_crc();
  char tmp[] = "/tmp/td_tb_XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  test_round_trip(tmp);
  test_unwritable(tmp);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd)) printf("    could not remove %s\n", tmp);
  return tst_finish();
}
