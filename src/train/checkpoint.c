#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"

#define MODEL_FILE "mp_rank_00/model.safetensors"
#define OPTIM_FILE "mp_rank_00/optim_dp000.safetensors"
#define RNG_FILE "mp_rank_00/rng_dp000.json"
#define LATEST_FILE "latest_checkpointed_iteration.txt"

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

static size_t tensor_bytes(const td_ckpt_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return (size_t)n * sizeof(float);
}

/* ------------------------------------------------------------------ save */

/* Copy tensors to the host and write them as one safetensors file. */
static int save_tensors(td_device *dev, const char *path, const td_ckpt_tensor *ts, int n,
                        char *err, size_t errlen) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += tensor_bytes(&ts[i]);
  char *host = td_malloc(total ? total : 1);
  td_st_tensor *st = td_calloc(sizeof *st * (size_t)(n ? n : 1));
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    dev->ops->copy_d2h(dev, host + off, ts[i].data, tensor_bytes(&ts[i]));
    st[i] = (td_st_tensor){.name = ts[i].name, .dtype = TD_F32, .ndim = ts[i].ndim, .data = host + off};
    memcpy(st[i].shape, ts[i].shape, sizeof ts[i].shape);
    off += tensor_bytes(&ts[i]);
  }
  const char *k[] = {"format"}, *v[] = {"pt"};
  int rc = td_safetensors_write(path, st, n, k, v, 1, err, errlen);
  td_free(st), td_free(host);
  return rc;
}

static cJSON *shape_json(const td_ckpt_tensor *t) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->shape[d]));
  return a;
}

/* metadata.json: state, layout, and where every global tensor's slices live. */
static char *metadata_json(const td_ckpt_contents *c, char *err, size_t errlen) {
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
  cJSON_AddNumberToObject(layout, "tensor_model_parallel_size", 1);
  cJSON_AddNumberToObject(layout, "pipeline_model_parallel_size", 1);
  cJSON_AddNumberToObject(layout, "data_parallel_size", 1);
  cJSON_AddBoolToObject(layout, "has_optimizer_state", c->exp_avg != NULL);
  cJSON *tensors = cJSON_AddObjectToObject(root, "tensors");
  for (int i = 0; i < c->n_params; i++) {
    const td_ckpt_tensor *t = &c->params[i];
    cJSON *e = cJSON_AddObjectToObject(tensors, t->name);
    cJSON_AddStringToObject(e, "dtype", "F32");
    cJSON_AddItemToObject(e, "shape", shape_json(t));
    cJSON *slice = cJSON_CreateObject();
    cJSON_AddStringToObject(slice, "file", MODEL_FILE);
    cJSON *offset = cJSON_CreateArray();
    for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(offset, cJSON_CreateNumber(0));
    cJSON_AddItemToObject(slice, "offset", offset);
    cJSON_AddItemToObject(slice, "shape", shape_json(t));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(e, "slices"), slice);
  }
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  return s;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
  return td_write_file(path, text, strlen(text), err, errlen);
}

/* Write the iteration's files into tmp (which must not exist yet). */
static int save_into(td_device *dev, const char *tmp, const td_ckpt_contents *c, char *err,
                     size_t errlen) {
  char p[CK_PATH];
  path_join(p, sizeof p, tmp, "mp_rank_00");
  if (td_mkdir_p(p, err, errlen)) return -1;
  path_join(p, sizeof p, tmp, MODEL_FILE);
  if (save_tensors(dev, p, c->params, c->n_params, err, errlen)) return -1;
  if (c->exp_avg) {
    td_ckpt_tensor *both = td_malloc(sizeof *both * (size_t)(2 * c->n_params + 1));
    memcpy(both, c->exp_avg, sizeof *both * (size_t)c->n_params);
    memcpy(both + c->n_params, c->exp_avg_sq, sizeof *both * (size_t)c->n_params);
    path_join(p, sizeof p, tmp, OPTIM_FILE);
    int rc = save_tensors(dev, p, both, 2 * c->n_params, err, errlen);
    td_free(both);
    if (rc) return -1;
  }
  path_join(p, sizeof p, tmp, RNG_FILE);
  if (write_text(p, c->rng_json ? c->rng_json : "{}", err, errlen)) return -1;
  char *meta = metadata_json(c, err, errlen);
  if (!meta) return -1;
  path_join(p, sizeof p, tmp, "metadata.json");
  int rc = write_text(p, meta, err, errlen);
  free(meta);
  if (rc) return -1;
  path_join(p, sizeof p, tmp, "mp_rank_00");
  if (td_fsync_dir(p, err, errlen)) return -1;
  return td_fsync_dir(tmp, err, errlen);
}

int td_checkpoint_save(td_device *dev, const char *dir, const td_ckpt_contents *c, char *err,
                       size_t errlen) {
  char final[CK_PATH], tmp[CK_PATH], p[CK_PATH], ptmp[CK_PATH];
  if (td_mkdir_p(dir, err, errlen)) return -1;
  iter_dir(final, sizeof final, dir, c->iteration);
  with_suffix(tmp, sizeof tmp, final, ".tmp");
  if (td_remove_tree(tmp, err, errlen)) return -1; /* left over from a crash */
  if (save_into(dev, tmp, c, err, errlen)) {
    char ignore[256];
    td_remove_tree(tmp, ignore, sizeof ignore);
    return -1;
  }
  if (td_remove_tree(final, err, errlen)) return -1; /* re-saving the same iteration */
  if (td_rename(tmp, final, err, errlen) || td_fsync_dir(dir, err, errlen)) return -1;
  char text[32];
  snprintf(text, sizeof text, "%lld", (long long)c->iteration);
  path_join(p, sizeof p, dir, LATEST_FILE);
  with_suffix(ptmp, sizeof ptmp, p, ".tmp");
  if (write_text(ptmp, text, err, errlen) || td_rename(ptmp, p, err, errlen)) return -1;
  return td_fsync_dir(dir, err, errlen);
}

/* ------------------------------------------------------------------ load */

int64_t td_checkpoint_latest(const char *dir, char *err, size_t errlen) {
  char p[CK_PATH];
  path_join(p, sizeof p, dir, LATEST_FILE);
  if (!td_path_exists(p)) return -1;
  char *text = td_read_file(p, NULL, err, errlen);
  if (!text) return -2;
  char *end;
  errno = 0;
  long long it = strtoll(text, &end, 10);
  while (*end == '\n' || *end == ' ' || *end == '\r') end++;
  int bad = errno || end == text || *end || it < 0;
  td_free(text);
  if (bad) {
    td_errorf(err, errlen, "%s: expected an iteration number (e.g. 100); the checkpoint is damaged", p);
    return -2;
  }
  return it;
}

/* Check that every tensor is in the file with dtype F32 and the expected shape. */
static int check_tensors(const td_safetensors *st, const char *path, const td_ckpt_tensor *ts,
                         int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    const td_st_tensor *s = td_safetensors_find(st, ts[i].name);
    if (!s) return td_errorf(err, errlen, "%s: tensor '%s' is missing (the model does not match the checkpoint)", path, ts[i].name);
    int same = s->dtype == TD_F32 && s->ndim == ts[i].ndim;
    for (int d = 0; same && d < s->ndim; d++) same = s->shape[d] == ts[i].shape[d];
    if (!same) {
      char want[128] = "", got[128] = "";
      for (int d = 0; d < ts[i].ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)ts[i].shape[d]);
      for (int d = 0; d < s->ndim; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)s->shape[d]);
      return td_errorf(err, errlen,
                   "%s: tensor '%s' has shape [%s] %s in the checkpoint but the model needs [%s] F32 "
                   "(model flags differ from the saved run?)",
                   path, ts[i].name, got, td_dtype_name(s->dtype), want);
    }
  }
  return 0;
}

static void copy_tensors(td_device *dev, const td_safetensors *st, const td_ckpt_tensor *ts, int n) {
  for (int i = 0; i < n; i++)
    dev->ops->copy_h2d(dev, ts[i].data, td_safetensors_find(st, ts[i].name)->data, tensor_bytes(&ts[i]));
}

static char *read_state(const char *iterdir, char *err, size_t errlen) {
  char p[CK_PATH];
  path_join(p, sizeof p, iterdir, "metadata.json");
  char *text = td_read_file(p, NULL, err, errlen);
  if (!text) return NULL;
  cJSON *root = cJSON_Parse(text);
  td_free(text);
  cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
  char *out = NULL;
  if (!cJSON_IsObject(state)) {
    td_errorf(err, errlen, "%s: not a trident checkpoint metadata file (no \"state\" object)", p);
  } else {
    char *s = cJSON_PrintUnformatted(state);
    out = td_strdup(s);
    free(s);
  }
  cJSON_Delete(root);
  return out;
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

int td_checkpoint_load(td_device *dev, const char *dir, int64_t iteration,
                       const td_ckpt_contents *c, char **state_json, char *err, size_t errlen) {
  char iterdir[CK_PATH], p[CK_PATH], po[CK_PATH];
  iter_dir(iterdir, sizeof iterdir, dir, iteration);
  if (!td_is_dir(iterdir))
    return td_errorf(err, errlen, "checkpoint directory '%s' does not exist (latest file names iteration %lld)",
                 iterdir, (long long)iteration);
  char *state = read_state(iterdir, err, errlen);
  if (!state) return -1;
  path_join(p, sizeof p, iterdir, MODEL_FILE);
  path_join(po, sizeof po, iterdir, OPTIM_FILE);
  td_safetensors *model = td_safetensors_open(p, err, errlen), *optim = NULL;
  int rc = model ? check_tensors(model, p, c->params, c->n_params, err, errlen) : -1;
  if (rc == 0 && c->exp_avg) {
    optim = td_safetensors_open(po, err, errlen);
    rc = optim ? check_tensors(optim, po, c->exp_avg, c->n_params, err, errlen) : -1;
    if (rc == 0) rc = check_tensors(optim, po, c->exp_avg_sq, c->n_params, err, errlen);
  }
  if (rc == 0) { /* everything checked: only now touch the caller's tensors */
    copy_tensors(dev, model, c->params, c->n_params);
    if (optim) {
      copy_tensors(dev, optim, c->exp_avg, c->n_params);
      copy_tensors(dev, optim, c->exp_avg_sq, c->n_params);
    }
  }
  td_safetensors_close(model);
  td_safetensors_close(optim);
  if (rc == 0 && state_json)
    *state_json = state;
  else
    td_free(state);
  return rc;
}
