/* Checkpoint save/load: Megatron's layout, exact round trip, and refusals that
 * leave the caller's tensors untouched. */
#include <stdio.h>
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

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/trident_test_ckpt_%d", (int)getpid());
  test_round_trip();
  test_refusals();
  char err[256];
  td_remove_tree(g_dir, err, sizeof err);
  return tst_finish();
}
