/* Checkpoint save/load: Megatron's layout, exact round trip, and refusals that
 * leave the caller's tensors untouched; tensor-parallel shards saved at TP=2 and
 * loaded at TP=1, 2, 3 and 4 bit for bit (with and without Adam state), and the
 * refusals of a missing shard, a global-shape mismatch, a truncated shard and an
 * incomplete save; the checks of every number read back; a re-save, the restore
 * of an iteration left aside and the cleaning of leftovers. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/files.h"
#include "base/mem.h"
#include "check.h"
#include "train/checkpoint.h"

static char g_dir[256];

typedef struct {
  td_ckpt_tensor p[2], m[2], v[2];
  float buf[6][12];
} fixture;

static void fixture_init(fixture *f, uint64_t stream) {
  static const char *names[3][2] = {{"a.weight", "b.bias"},
                                    {"a.weight.exp_avg", "b.bias.exp_avg"},
                                    {"a.weight.exp_avg_sq", "b.bias.exp_avg_sq"}};
  td_ckpt_tensor *sets[3] = {f->p, f->m, f->v};
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < 2; i++) {
      float *data = f->buf[s * 2 + i];
      tst_fill_uniform(data, 12, stream + (uint64_t)(s * 2 + i), -1, 1);
      sets[s][i] = (td_ckpt_tensor){.name = names[s][i], .ndim = i ? 1 : 2,
                                    .shape = {i ? 12 : 3, 4}, .data = data};
    }
}

static td_ckpt_contents contents(fixture *f, int64_t it) {
  return (td_ckpt_contents){.iteration = it, .params = f->p, .n_params = 2, .exp_avg = f->m,
                            .exp_avg_sq = f->v, .state_json = "{\"consumed_samples\": 640}",
                            .rng_json = "{\"seed\": 1234}"};
}

static const char *path(const char *rel) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, rel);
  return p;
}

static void test_round_trip(void) {
  td_device *dev = tst_device();
  fixture a, b;
  fixture_init(&a, 1);
  fixture_init(&b, 100); /* different values to be overwritten */
  char err[1024];
  td_ckpt_contents ca = contents(&a, 100);
  CHECK(td_checkpoint_save(dev, g_dir, &ca, err, sizeof err) == 0, "save iteration 100");
  CHECK(td_is_dir(path("iter_0000100/mp_rank_00")) &&
            td_path_exists(path("iter_0000100/mp_rank_00/model.safetensors")) &&
            td_path_exists(path("iter_0000100/mp_rank_00/optim_dp000.safetensors")) &&
            td_path_exists(path("iter_0000100/metadata.json")) &&
            !td_path_exists(path("iter_0000100.tmp")),
        "Megatron layout, no temporary directory left");
  CHECK(td_checkpoint_latest(g_dir, err, sizeof err) == 100, "latest_checkpointed_iteration.txt = 100");
  char *state = NULL;
  td_ckpt_contents cb = contents(&b, 100);
  CHECK(td_checkpoint_load(dev, g_dir, 100, &cb, &state, err, sizeof err) == 0, "load");
  CHECK(!memcmp(a.buf, b.buf, sizeof a.buf), "parameters and Adam state identical after load");
  CHECK(state && strstr(state, "\"consumed_samples\":640"), "trainer state comes back: %s", state ? state : "");
  td_free(state);
}

static void test_refusals(void) {
  td_device *dev = tst_device();
  fixture a, b;
  fixture_init(&a, 1);
  fixture_init(&b, 200);
  char err[1024];
  td_ckpt_contents cb = contents(&b, 100);
  float before[6][12];
  memcpy(before, b.buf, sizeof before);

  b.p[0].shape[0] = 4, b.p[0].shape[1] = 3; /* same size, other shape */
  CHECK(td_checkpoint_load(dev, g_dir, 100, &cb, NULL, err, sizeof err) == -1 &&
            strstr(err, "a.weight") && strstr(err, "[3, 4]"),
        "shape mismatch refused: %s", err);
  b.p[0].shape[0] = 3, b.p[0].shape[1] = 4;
  b.p[1].name = "c.bias";
  CHECK(td_checkpoint_load(dev, g_dir, 100, &cb, NULL, err, sizeof err) == -1 && strstr(err, "c.bias"),
        "missing tensor refused: %s", err);
  b.p[1].name = "b.bias";
  CHECK(!memcmp(before, b.buf, sizeof before), "refused loads left the tensors untouched");
  CHECK(td_checkpoint_load(dev, g_dir, 200, &cb, NULL, err, sizeof err) == -1 && strstr(err, "iter_0000200"),
        "absent iteration refused: %s", err);

  /* truncate the model file */
  size_t len;
  char *data = td_read_file(path("iter_0000100/mp_rank_00/model.safetensors"), &len, err, sizeof err);
  td_write_file(path("iter_0000100/mp_rank_00/model.safetensors"), data, len - 10, err, sizeof err);
  td_free(data);
  CHECK(td_checkpoint_load(dev, g_dir, 100, &cb, NULL, err, sizeof err) == -1 && strstr(err, "model.safetensors"),
        "truncated model file refused: %s", err);
  CHECK(!memcmp(before, b.buf, sizeof before), "still untouched");

  td_write_file(path("latest_checkpointed_iteration.txt"), "abc", 3, err, sizeof err);
  CHECK(td_checkpoint_latest(g_dir, err, sizeof err) == -2 && strstr(err, "iteration number"),
        "malformed latest file refused: %s", err);
  CHECK(td_checkpoint_latest(path("nowhere"), err, sizeof err) == -1, "no checkpoint: -1");
}

/* Every number read from a checkpoint: an integer in range of the right JSON
 * type, or a message naming the file and the field. */
static void test_json_fields(void) {
  static const struct {
    const char *json;
    int ok;
    int64_t want;
    const char *msg;
  } rows[] = {
      {"{\"v\": 7}", 1, 7, NULL},
      {"{\"v\": 0}", 1, 0, NULL},
      {"{\"v\": 9007199254740992}", 1, (int64_t)1 << 53, NULL},
      {"{\"v\": -1}", 0, 0, "got -1"},
      {"{\"v\": 1.5}", 0, 0, "got 1.5"},
      {"{\"v\": 1e300}", 0, 0, "got 1e+300"},
      {"{\"v\": -1e300}", 0, 0, "got -1e+300"},
      {"{\"v\": \"7\"}", 0, 0, "got \"7\""},
      {"{\"v\": true}", 0, 0, "got true"},
      {"{\"v\": null}", 0, 0, "got null"},
      {"{\"v\": [1]}", 0, 0, "got [1]"},
      {"{\"w\": 1}", 0, 0, "but it is missing"},
      {"{\"v\": 9007199254740994}", 0, 0, "got 9007199254740994"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    cJSON *o = cJSON_Parse(rows[i].json);
    char err[512] = "";
    int64_t v = -99;
    int rc = td_ckpt_json_int(o, "v", "ck/x.json", "state.v", 0, TD_CKPT_MAX_INT, &v, err, sizeof err);
    if (rows[i].ok)
      CHECK(rc == 0 && v == rows[i].want, "%s accepted as %lld", rows[i].json, (long long)v);
    else
      CHECK(rc == -1 && strstr(err, "ck/x.json: state.v must be an integer from 0 to 9007199254740992") &&
                strstr(err, rows[i].msg),
            "%s refused: %s", rows[i].json, err);
    cJSON_Delete(o);
  }
  cJSON *o = cJSON_Parse("{\"s\": 0, \"t\": 65536}");
  double x = 0;
  char err[512] = "";
  CHECK(td_ckpt_json_number(o, "s", "f", "scale", 1e-30, 1e30, &x, err, sizeof err) == -1 &&
            strstr(err, "f: scale must be a number from"),
        "0 refused for a positive number: %s", err);
  CHECK(td_ckpt_json_number(o, "t", "f", "scale", 1e-30, 1e30, &x, err, sizeof err) == 0 && x == 65536,
        "65536 accepted");
  cJSON_Delete(o);
}

/* Saving an iteration that is there already keeps a loadable copy at every
 * moment (the crash points are in cli_ckpt_faults.sh); a load that finds the
 * latest iteration only aside puts it back; leftovers go at the next save; an
 * unreadable or non-directory path is an error, a missing one "no checkpoint". */
static void test_resave_and_leftovers(void) {
  td_device *dev = tst_device();
  fixture a, b, got;
  fixture_init(&a, 1);
  fixture_init(&b, 300);
  fixture_init(&got, 400);
  char err[1024], dir[512];
  snprintf(dir, sizeof dir, "%s/resave", g_dir);
  td_ckpt_contents ca = contents(&a, 5), cb = contents(&b, 5), cg = contents(&got, 5);
  CHECK(td_checkpoint_save(dev, dir, &ca, err, sizeof err) == 0, "save iteration 5: %s", err);
  CHECK(td_checkpoint_save(dev, dir, &cb, err, sizeof err) == 0, "save iteration 5 again: %s", err);
  CHECK(!td_path_exists(path("resave/iter_0000005.old")) && !td_path_exists(path("resave/iter_0000005.tmp")),
        "no copy aside or temporary left after a re-save");
  CHECK(td_checkpoint_latest(dir, err, sizeof err) == 5 &&
            td_checkpoint_load(dev, dir, 5, &cg, NULL, err, sizeof err) == 0 &&
            !memcmp(got.buf, b.buf, sizeof b.buf),
        "the re-saved tensors load: %s", err);

  /* killed between the two renames, the new copy lost as well: iter_5.old only */
  char from[600], to[600];
  snprintf(from, sizeof from, "%s", path("resave/iter_0000005"));
  snprintf(to, sizeof to, "%s", path("resave/iter_0000005.old"));
  CHECK(rename(from, to) == 0, "move iteration 5 aside");
  CHECK(td_checkpoint_latest(dir, err, sizeof err) == 5 && td_is_dir(from) && !td_path_exists(to),
        "td_checkpoint_latest puts iter_0000005.old back: %s", err);

  /* leftovers of this layout go at the next save; other names stay */
  td_mkdir_p(path("resave/iter_0000009.tmp/mp_rank_00"), err, sizeof err);
  td_mkdir_p(path("resave/iter_0000003.old"), err, sizeof err);
  td_mkdir_p(path("resave/iter_12.tmp"), err, sizeof err);
  td_write_file(path("resave/keep.tmp"), "x", 1, err, sizeof err);
  td_ckpt_contents c6 = contents(&a, 6);
  CHECK(td_checkpoint_save(dev, dir, &c6, err, sizeof err) == 0, "save iteration 6: %s", err);
  CHECK(!td_path_exists(path("resave/iter_0000009.tmp")) && !td_path_exists(path("resave/iter_0000003.old")) &&
            td_is_dir(path("resave/iter_12.tmp")) && td_path_exists(path("resave/keep.tmp")) &&
            td_is_dir(path("resave/iter_0000005")),
        "iter_0000009.tmp and iter_0000003.old removed; iter_12.tmp, keep.tmp, iter_0000005 kept");

  CHECK(td_checkpoint_latest(path("resave/keep.tmp"), err, sizeof err) == -2 && strstr(err, "not a directory"),
        "a file as the checkpoint directory: %s", err);
  CHECK(td_checkpoint_latest(path("resave/missing/deeper"), err, sizeof err) == -1,
        "a path that does not exist: no checkpoint");
  td_write_file(path("resave/latest_checkpointed_iteration.txt"), "6\n", 2, err, sizeof err);
  CHECK(td_checkpoint_latest(dir, err, sizeof err) == 6, "a latest file with a newline: 6");
}

/* ------------------------------------------------------------------ tensor parallel */

/* Global tensors: a column-parallel weight (split along dim 0) and its bias, a
 * row-parallel weight (split along dim 1), a replicated 1-D tensor; sizes that are
 * not multiples of 16 (nor of the TP sizes). */
#define NT 4
static const char *g_names[NT] = {"col.weight", "row.weight", "norm.bias", "col.bias"};
static const int g_ndim[NT] = {2, 2, 1, 1};
static const int64_t g_shape[NT][2] = {{37, 23}, {19, 45}, {29, 0}, {37, 0}};
static const int g_split[NT] = {0, 1, -1, 0}; /* -1: replicated */
static float *g_global[3][NT];                /* params, exp_avg, exp_avg_sq */
static char g_tname[3][NT][64];

static int64_t g_numel(int i) { return g_shape[i][0] * (g_ndim[i] == 2 ? g_shape[i][1] : 1); }

static void tp_init(void) {
  static const char *suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < NT; i++) {
      g_global[s][i] = malloc(sizeof(float) * (size_t)g_numel(i));
      tst_fill_uniform(g_global[s][i], g_numel(i), 1000 + (uint64_t)(s * NT + i), -1, 1);
      snprintf(g_tname[s][i], sizeof g_tname[s][i], "%s%s", g_names[i], suffix[s]);
    }
}

/* TP rank r of n's part [lo, hi) of a dimension of length len. */
static void part(int64_t len, int r, int n, int64_t *lo, int64_t *hi) {
  *lo = len * r / n, *hi = len * (r + 1) / n;
}

/* Reference slice extraction (independent of the checkpoint code's block copy). */
static int64_t extract(int s, int i, int r, int n, float *out) {
  int64_t rows = g_shape[i][0], cols = g_ndim[i] == 2 ? g_shape[i][1] : 1;
  int64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols, k = 0;
  if (g_split[i] == 0) part(rows, r, n, &r0, &r1);
  if (g_split[i] == 1) part(cols, r, n, &c0, &c1);
  for (int64_t y = r0; y < r1; y++)
    for (int64_t x = c0; x < c1; x++) out[k++] = g_global[s][i][y * cols + x];
  return k;
}

#define SENTINEL -777.25f

/* TP rank r of n's tensors: its slices, filled from the global data or with SENTINEL. */
typedef struct {
  td_ckpt_tensor t[3][NT];
} tp_view;

static void view_init(tp_view *v, int r, int n, int fill) {
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < NT; i++) {
      td_ckpt_tensor *t = &v->t[s][i];
      *t = (td_ckpt_tensor){.name = g_tname[s][i], .ndim = g_ndim[i]};
      for (int d = 0; d < g_ndim[i]; d++) {
        int64_t lo = 0, hi = g_shape[i][d];
        if (g_split[i] == d) part(g_shape[i][d], r, n, &lo, &hi);
        t->global_shape[d] = g_shape[i][d], t->offset[d] = lo, t->shape[d] = hi - lo;
      }
      t->data = malloc(sizeof(float) * (size_t)g_numel(i));
      if (fill) {
        extract(s, i, r, n, t->data);
      } else {
        for (int64_t k = 0; k < g_numel(i); k++) t->data[k] = SENTINEL;
      }
    }
}

static void view_free(tp_view *v) {
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < NT; i++) free(v->t[s][i].data);
}

static td_ckpt_contents view_contents(tp_view *v, int64_t it, int r, int n, int adam) {
  return (td_ckpt_contents){.iteration = it, .params = v->t[0], .n_params = NT,
                            .exp_avg = adam ? v->t[1] : NULL, .exp_avg_sq = adam ? v->t[2] : NULL,
                            .state_json = "{\"consumed_samples\": 64}", .rng_json = "{\"seed\": 7}",
                            .tp_rank = r, .tp_size = n};
}

/* Bit-identical to the global data (the first `sets` sets)? */
static int view_matches(const tp_view *v, int r, int n, int sets) {
  float *want = malloc(sizeof(float) * 64 * 64);
  int ok = 1;
  for (int s = 0; s < sets; s++)
    for (int i = 0; i < NT; i++) {
      int64_t k = extract(s, i, r, n, want);
      ok &= k == v->t[s][i].shape[0] * (g_ndim[i] == 2 ? v->t[s][i].shape[1] : 1);
      ok &= !memcmp(want, v->t[s][i].data, sizeof(float) * (size_t)k);
    }
  free(want);
  return ok;
}

static int view_untouched(const tp_view *v) {
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < NT; i++)
      for (int64_t k = 0; k < g_numel(i); k++)
        if (v->t[s][i].data[k] != SENTINEL) return 0;
  return 1;
}

/* Save the global tensors as n shards (prepare; shard 0..n-1; commit). */
static int save_tp(const char *dir, int64_t it, int n, int adam, char *err, size_t errlen) {
  err[0] = 0;
  if (td_checkpoint_save_prepare(dir, it, err, errlen)) return -1;
  for (int r = 0; r < n; r++) {
    tp_view v;
    view_init(&v, r, n, 1);
    td_ckpt_contents c = view_contents(&v, it, r, n, adam);
    int rc = td_checkpoint_save_shard(tst_device(), dir, &c, err, errlen);
    view_free(&v);
    if (rc) return -1;
  }
  tp_view v;
  view_init(&v, 0, n, 1);
  td_ckpt_contents c = view_contents(&v, it, 0, n, adam);
  int rc = td_checkpoint_save_commit(dir, &c, err, errlen);
  view_free(&v);
  return rc;
}

/* Load TP rank r of n's slices of iteration it: 1 when loaded and bit-identical to
 * the global data; 0 when refused (err set) with the tensors untouched; -1 otherwise. */
static int load_rank(const char *dir, int64_t it, int r, int n, int adam, char *err, size_t errlen) {
  tp_view v;
  view_init(&v, r, n, 0);
  td_ckpt_contents c = view_contents(&v, it, r, n, adam);
  err[0] = 0;
  int rc = td_checkpoint_load(tst_device(), dir, it, &c, NULL, err, errlen);
  int out = rc == 0 ? (view_matches(&v, r, n, adam ? 3 : 1) ? 1 : -1) : (view_untouched(&v) ? 0 : -1);
  view_free(&v);
  return out;
}

/* Load iteration it at TP size n, every rank, and compare; 1 when all match. */
static int load_tp(const char *dir, int64_t it, int n, int adam, char *err, size_t errlen) {
  err[0] = 0;
  for (int r = 0; r < n; r++)
    if (load_rank(dir, it, r, n, adam, err, errlen) != 1) return 0;
  return 1;
}

static const char *tp_path(const char *dir, const char *rel) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  return p;
}

static void test_tp_round_trip(void) {
  char dir[300], err[1024] = "";
  snprintf(dir, sizeof dir, "%s/tp", g_dir);
  CHECK(save_tp(dir, 10, 2, 1, err, sizeof err) == 0, "TP=2 save with Adam state: %s", err);
  CHECK(td_is_dir(tp_path(dir, "iter_0000010/mp_rank_00")) &&
            td_path_exists(tp_path(dir, "iter_0000010/mp_rank_01/model.safetensors")) &&
            td_path_exists(tp_path(dir, "iter_0000010/mp_rank_01/optim_dp000.safetensors")) &&
            td_path_exists(tp_path(dir, "iter_0000010/mp_rank_01/rng_dp000.json")) &&
            td_path_exists(tp_path(dir, "iter_0000010/mp_rank_01/slices.json")) &&
            !td_path_exists(tp_path(dir, "iter_0000010/mp_rank_02")) &&
            !td_path_exists(tp_path(dir, "iter_0000010.tmp")),
        "TP=2 layout: mp_rank_00 and mp_rank_01, no temporary directory left");
  CHECK(td_checkpoint_latest(dir, err, sizeof err) == 10, "latest = 10");
  CHECK(td_checkpoint_has_optimizer_state(dir, 10), "has_optimizer_state");

  /* metadata.json: the real TP size, split tensors with 2 slices, replicated with 1 */
  char *text = td_read_file(tp_path(dir, "iter_0000010/metadata.json"), NULL, err, sizeof err);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  td_free(text);
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
  const cJSON *col = cJSON_GetObjectItemCaseSensitive(tensors, "col.weight");
  const cJSON *row = cJSON_GetObjectItemCaseSensitive(tensors, "row.weight");
  const cJSON *rep = cJSON_GetObjectItemCaseSensitive(tensors, "norm.bias");
  const cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(row, "slices"), 1);
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(s1, "offset");
  CHECK(cJSON_GetObjectItemCaseSensitive(layout, "tensor_model_parallel_size")->valueint == 2 &&
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(col, "slices")) == 2 &&
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rep, "slices")) == 1 &&
            !strcmp(cJSON_GetObjectItemCaseSensitive(s1, "file")->valuestring, "mp_rank_01/model.safetensors") &&
            cJSON_GetArrayItem(off, 0)->valueint == 0 && cJSON_GetArrayItem(off, 1)->valueint == 22,
        "metadata.json: tensor_model_parallel_size 2, split tensors in 2 slices (row.weight's "
        "second at [0, 22] in mp_rank_01), the replicated one in 1");
  cJSON_Delete(root);

  for (int n = 1; n <= 4; n++)
    CHECK(load_tp(dir, 10, n, 1, err, sizeof err), "TP=2 checkpoint loads at TP=%d, parameters and "
          "Adam state bit for bit %s", n, err);

  /* state comes back from a sharded checkpoint */
  tp_view v;
  view_init(&v, 0, 1, 0);
  td_ckpt_contents c = view_contents(&v, 10, 0, 1, 0);
  char *state = NULL;
  err[0] = 0;
  CHECK(td_checkpoint_load(tst_device(), dir, 10, &c, &state, err, sizeof err) == 0 && state &&
            strstr(state, "\"consumed_samples\":64"),
        "trainer state from a TP=2 checkpoint: %s", state ? state : err);
  td_free(state);
  view_free(&v);

  /* without Adam state */
  CHECK(save_tp(dir, 20, 2, 0, err, sizeof err) == 0, "TP=2 save without Adam state: %s", err);
  CHECK(!td_checkpoint_has_optimizer_state(dir, 20) &&
            !td_path_exists(tp_path(dir, "iter_0000020/mp_rank_01/optim_dp000.safetensors")),
        "no optimizer state recorded or written");
  for (int n = 1; n <= 4; n++)
    CHECK(load_tp(dir, 20, n, 0, err, sizeof err), "TP=2 checkpoint without Adam loads at TP=%d %s", n, err);
  view_init(&v, 0, 2, 0);
  c = view_contents(&v, 20, 0, 2, 1);
  CHECK(td_checkpoint_load(tst_device(), dir, 20, &c, NULL, err, sizeof err) == -1 &&
            strstr(err, "optim_dp000.safetensors") && view_untouched(&v),
        "asking for Adam state it does not have refused, tensors untouched: %s", err);
  view_free(&v);

  /* a TP=4 checkpoint loads at TP=3; a TP=1 one (one call) at TP=2 and 3 */
  CHECK(save_tp(dir, 30, 4, 1, err, sizeof err) == 0, "TP=4 save: %s", err);
  CHECK(load_tp(dir, 30, 3, 1, err, sizeof err) && load_tp(dir, 30, 1, 1, err, sizeof err),
        "TP=4 checkpoint loads at TP=3 and TP=1 %s", err);
  view_init(&v, 0, 1, 1);
  c = view_contents(&v, 40, 0, 0, 1);
  err[0] = 0;
  CHECK(td_checkpoint_save(tst_device(), dir, &c, err, sizeof err) == 0, "TP=1 save (one call): %s", err);
  view_free(&v);
  CHECK(load_tp(dir, 40, 2, 1, err, sizeof err) && load_tp(dir, 40, 3, 1, err, sizeof err),
        "TP=1 checkpoint loads at TP=2 and TP=3 %s", err);
  /* the format before tensor parallelism (no slices.json) still loads */
  unlink(tp_path(dir, "iter_0000040/mp_rank_00/slices.json"));
  CHECK(load_tp(dir, 40, 1, 1, err, sizeof err), "single-shard checkpoint without slices.json loads %s", err);
}

static void test_tp_refusals(void) {
  char dir[300], err[1024] = "";
  snprintf(dir, sizeof dir, "%s/tpbad", g_dir);
  tp_view v;

  /* a commit with a shard missing */
  CHECK(td_checkpoint_save_prepare(dir, 10, err, sizeof err) == 0, "prepare");
  view_init(&v, 0, 2, 1);
  td_ckpt_contents c = view_contents(&v, 10, 0, 2, 1);
  CHECK(td_checkpoint_save_shard(tst_device(), dir, &c, err, sizeof err) == 0, "shard 0 of 2");
  CHECK(td_checkpoint_save_commit(dir, &c, err, sizeof err) == -1 && strstr(err, "mp_rank_01") &&
            strstr(err, "missing") && !td_path_exists(tp_path(dir, "iter_0000010")) &&
            td_checkpoint_latest(dir, err + 512, 512) == -1,
        "commit without shard 1 refused, nothing published: %s", err);
  /* slices that do not cover a tensor: rank 1 saves rank 0's rows of col.weight */
  tp_view w;
  view_init(&w, 1, 2, 1);
  w.t[0][0].offset[0] = 0, w.t[0][0].shape[0] = v.t[0][0].shape[0];
  c = view_contents(&w, 10, 1, 2, 1);
  CHECK(td_checkpoint_save_shard(tst_device(), dir, &c, err, sizeof err) == 0, "shard 1 of 2");
  CHECK(td_checkpoint_save_commit(dir, &c, err, sizeof err) == -1 && strstr(err, "col.weight") &&
            strstr(err, "[18, 0]"),
        "commit of slices that leave rows uncovered refused: %s", err);
  view_free(&v), view_free(&w);

  CHECK(save_tp(dir, 20, 2, 1, err, sizeof err) == 0, "TP=2 save: %s", err);
  view_init(&v, 0, 1, 0);
  c = view_contents(&v, 20, 0, 1, 1);
  /* a global-shape mismatch, at TP=1 and at TP=2 */
  v.t[0][1].shape[1] = v.t[0][1].global_shape[1] = 46;
  CHECK(td_checkpoint_load(tst_device(), dir, 20, &c, NULL, err, sizeof err) == -1 &&
            strstr(err, "row.weight") && strstr(err, "[19, 45]") && strstr(err, "[19, 46]"),
        "global shape mismatch refused: %s", err);
  v.t[0][1].shape[1] = v.t[0][1].global_shape[1] = 45;
  CHECK(view_untouched(&v), "untouched after the refusal");
  tp_view h;
  view_init(&h, 1, 2, 0);
  td_ckpt_contents ch = view_contents(&h, 20, 1, 2, 1);
  h.t[1][0].global_shape[0] = 38;
  CHECK(td_checkpoint_load(tst_device(), dir, 20, &ch, NULL, err, sizeof err) == -1 &&
            strstr(err, "col.weight") && strstr(err, "[37, 23]") && strstr(err, "[38, 23]"),
        "global shape mismatch of a slice (Adam state) refused: %s", err);
  CHECK(view_untouched(&h), "untouched after the refusal");
  view_free(&h);

  /* a truncated shard file */
  size_t len;
  char *data = td_read_file(tp_path(dir, "iter_0000020/mp_rank_01/model.safetensors"), &len, err, sizeof err);
  td_write_file(tp_path(dir, "iter_0000020/mp_rank_01/model.safetensors"), data, len - 10, err, sizeof err);
  td_free(data);
  CHECK(td_checkpoint_load(tst_device(), dir, 20, &c, NULL, err, sizeof err) == -1 &&
            strstr(err, "mp_rank_01/model.safetensors"),
        "truncated shard file refused: %s", err);
  CHECK(view_untouched(&v), "untouched after the refusal");
  /* at TP=2, rank 0's slices are all in mp_rank_00: they load; rank 1's are refused */
  CHECK(load_rank(dir, 20, 0, 2, 1, err, sizeof err) == 1, "TP=2 rank 0 loads beside the damaged shard %s", err);
  CHECK(load_rank(dir, 20, 1, 2, 1, err, sizeof err) == 0 && strstr(err, "mp_rank_01/model.safetensors"),
        "TP=2 rank 1 refused, untouched: %s", err);

  /* a missing shard directory */
  char ignore[256];
  td_remove_tree(tp_path(dir, "iter_0000020/mp_rank_01"), ignore, sizeof ignore);
  CHECK(td_checkpoint_load(tst_device(), dir, 20, &c, NULL, err, sizeof err) == -1 &&
            strstr(err, "mp_rank_01") && strstr(err, "missing") &&
            strstr(err, "tensor_model_parallel_size 2"),
        "missing shard directory refused: %s", err);
  CHECK(view_untouched(&v), "untouched after the refusal");
  view_free(&v);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_ckpt_%d", (int)getpid());
  test_round_trip();
  test_refusals();
  test_json_fields();
  test_resave_and_leftovers();
  tp_init();
  test_tp_round_trip();
  test_tp_refusals();
  char err[256];
  td_remove_tree(g_dir, err, sizeof err);
  return tst_finish();
}
