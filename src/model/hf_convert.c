/* Hugging Face GPT-2 <-> trident (hf_convert.h, docs/hf_convert.md). */
#include "model/hf_convert.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/files.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "base/safetensors.h"
#include "model/gpt_config.h"
#include "model/gpt_impl.h"

#define HF_PATH 4096
#define HF_MAX_FILES 256
#define HF_PREFIX "transformer."
#define HF_NAME_MAX TD_GPT_NAME_MAX /* Hugging Face names are shorter than trident's */
#define HF_PREFIXED_MAX (HF_NAME_MAX + sizeof HF_PREFIX)

/* ------------------------------------------------------------------ mapping */

/* How a tensor moves between the layouts (hf_convert.h's table). */
typedef enum {
  M_COPY,   /* same layout */
  M_CONV1D, /* Conv1D weight [in, out] <-> Linear [out, in] */
  M_QKV_W,  /* Conv1D and [q | k | v] columns <-> Linear and per-head [H, 3, D] rows */
  M_QKV_B,  /* [q | k | v] <-> [H, 3, D] */
  M_VOCAB   /* the first V of the Vp rows */
} move_kind;

typedef struct {
  const char *trident, *hf;
  move_kind kind;
} name_map;

static const name_map k_top[] = {
    {"embedding.word_embeddings.weight", "wte.weight", M_VOCAB},
    {"embedding.position_embeddings.weight", "wpe.weight", M_COPY},
    {"decoder.final_layernorm.weight", "ln_f.weight", M_COPY},
    {"decoder.final_layernorm.bias", "ln_f.bias", M_COPY},
    {"output_layer.weight", "lm_head.weight", M_VOCAB},
};

static const name_map k_layer[] = {
    {"input_layernorm.weight", "ln_1.weight", M_COPY},
    {"input_layernorm.bias", "ln_1.bias", M_COPY},
    {"self_attention.linear_qkv.weight", "attn.c_attn.weight", M_QKV_W},
    {"self_attention.linear_qkv.bias", "attn.c_attn.bias", M_QKV_B},
    {"self_attention.linear_proj.weight", "attn.c_proj.weight", M_CONV1D},
    {"self_attention.linear_proj.bias", "attn.c_proj.bias", M_COPY},
    {"pre_mlp_layernorm.weight", "ln_2.weight", M_COPY},
    {"pre_mlp_layernorm.bias", "ln_2.bias", M_COPY},
    {"mlp.linear_fc1.weight", "mlp.c_fc.weight", M_CONV1D},
    {"mlp.linear_fc1.bias", "mlp.c_fc.bias", M_COPY},
    {"mlp.linear_fc2.weight", "mlp.c_proj.weight", M_CONV1D},
    {"mlp.linear_fc2.bias", "mlp.c_proj.bias", M_COPY},
};

#define COUNT(a) (sizeof a / sizeof *a)

/* The Hugging Face name (without prefix) of a trident tensor and how it moves,
 * or -1 for a name not in the tables. */
static int lookup(const char *name, char *hf, size_t n) {
  for (size_t i = 0; i < COUNT(k_top); i++)
    if (!strcmp(name, k_top[i].trident)) {
      snprintf(hf, n, "%s", k_top[i].hf);
      return (int)k_top[i].kind;
    }
  long long layer;
  int used = 0;
  if (sscanf(name, "decoder.layers.%lld.%n", &layer, &used) == 1 && used > 0)
    for (size_t i = 0; i < COUNT(k_layer); i++)
      if (!strcmp(name + used, k_layer[i].trident)) {
        snprintf(hf, n, "h.%lld.%s", layer, k_layer[i].hf);
        return (int)k_layer[i].kind;
      }
  return -1;
}

/* lookup for the model's own tensors, which only have names of the tables. */
static move_kind hf_name(const char *name, char *hf, size_t n) {
  int k = lookup(name, hf, n);
  TD_CHECK(k >= 0, "no Hugging Face name for tensor %s", name);
  return (move_kind)k;
}

/* The Hugging Face shape of trident tensor t. */
static void hf_shape(const td_gpt_tensor *t, move_kind k, int64_t true_vocab, int64_t shape[2]) {
  int transposed = k == M_CONV1D || k == M_QKV_W;
  shape[0] = transposed ? t->shape[1] : t->shape[0];
  shape[1] = transposed ? t->shape[0] : t->shape[1];
  if (k == M_VOCAB) shape[0] = true_vocab;
}

/* The Hugging Face output index of trident output index r (of `out`): per-head
 * (h, s, e) of [H, 3, D] is column s*C + h*D + e of [q | k | v]. */
static int64_t hf_index(move_kind k, int64_t r, int64_t out, int64_t heads) {
  if (k != M_QKV_W && k != M_QKV_B) return r;
  int64_t c = out / 3, d = c / heads;
  return r / d % 3 * c + r / (3 * d) * d + r % d;
}

/* Move trident tensor t from one layout to the other: to_hf, from trident's
 * layout into Hugging Face's, else back. Element (r, i) of trident's [rows, cols]
 * is element (i, hf_index(r)) of a transposed Hugging Face weight, else row
 * hf_index(r) of its [rows, cols]. */
static void move(const td_gpt_tensor *t, move_kind k, int64_t heads, int64_t true_vocab,
                 const float *from, float *to, int to_hf) {
  int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
  if (k == M_CONV1D || k == M_QKV_W) {
    for (int64_t r = 0; r < rows; r++) {
      int64_t j = hf_index(k, r, rows, heads);
      for (int64_t i = 0; i < cols; i++) {
        int64_t tr = r * cols + i, hf = i * rows + j;
        to[to_hf ? hf : tr] = from[to_hf ? tr : hf];
      }
    }
    return;
  }
  int64_t moved = k == M_VOCAB ? true_vocab : rows;
  for (int64_t r = 0; r < moved; r++) {
    int64_t tr = r * cols, hf = hf_index(k, r, rows, heads) * cols;
    memcpy(to + (to_hf ? hf : tr), from + (to_hf ? tr : hf), (size_t)cols * sizeof(float));
  }
}

/* Rows real.. padded-1 of w [padded, cols] = the mean of rows 0.. real-1. */
static void pad_vocab_rows(float *w, int64_t real, int64_t padded, int64_t cols) {
  if (real == padded) return;
  double *mean = td_calloc((size_t)cols * sizeof(double));
  for (int64_t r = 0; r < real; r++)
    for (int64_t c = 0; c < cols; c++) mean[c] += w[r * cols + c];
  for (int64_t r = real; r < padded; r++)
    for (int64_t c = 0; c < cols; c++) w[r * cols + c] = (float)(mean[c] / (double)real);
  td_free(mean);
}

/* ------------------------------------------------------------------ config.json */

struct td_hf_gpt2 {
  td_gpt_config cfg;
  int64_t vocab;
  int n_files;
  td_safetensors *files[HF_MAX_FILES];
  char *paths[HF_MAX_FILES];
};

/* One config.json value: absent or null takes dflt (a required key has none). */
typedef struct {
  const cJSON *root;
  const char *path;
  char *err;
  size_t errlen;
} cfg_reader;

static const cJSON *cfg_item(const cfg_reader *r, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, key);
  return cJSON_IsNull(v) ? NULL : v;
}

/* A positive integer; required when dflt <= 0. */
static int cfg_int(const cfg_reader *r, const char *key, int64_t dflt, int64_t *out) {
  const cJSON *v = cfg_item(r, key);
  if (!v && dflt > 0) return *out = dflt, 0;
  if (!v) return td_errorf(r->err, r->errlen, "%s: \"%s\" is missing", r->path, key);
  /* range first: converting 1e30 to int64_t is undefined */
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble < 9.2e18) ||
      v->valuedouble != floor(v->valuedouble))
    return td_errorf(r->err, r->errlen, "%s: \"%s\" must be a positive integer", r->path, key);
  *out = (int64_t)v->valuedouble;
  return 0;
}

static int cfg_float(const cfg_reader *r, const char *key, float dflt, float *out) {
  const cJSON *v = cfg_item(r, key);
  if (v && !cJSON_IsNumber(v))
    return td_errorf(r->err, r->errlen, "%s: \"%s\" must be a number", r->path, key);
  *out = v ? (float)v->valuedouble : dflt;
  return 0;
}

static int cfg_bool(const cfg_reader *r, const char *key, int dflt, int *out) {
  const cJSON *v = cfg_item(r, key);
  if (v && !cJSON_IsBool(v))
    return td_errorf(r->err, r->errlen, "%s: \"%s\" must be true or false", r->path, key);
  *out = v ? cJSON_IsTrue(v) : dflt;
  return 0;
}

/* A switch that must keep the value GPT-2 as trident builds it has. */
static int cfg_require_bool(const cfg_reader *r, const char *key, int want, const char *why) {
  int v;
  if (cfg_bool(r, key, want, &v)) return -1;
  if (v == want) return 0;
  return td_errorf(r->err, r->errlen, "%s: \"%s\": %s is not supported (%s)", r->path, key,
                   v ? "true" : "false", why);
}

static int cfg_gelu(const cfg_reader *r, int *openai_gelu) {
  const cJSON *v = cfg_item(r, "activation_function");
  const char *s = v ? cJSON_GetStringValue(v) : "gelu_new"; /* GPT2Config's default */
  static const char *const tanh_forms[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};
  *openai_gelu = 0;
  for (size_t i = 0; s && i < COUNT(tanh_forms); i++)
    if (!strcmp(s, tanh_forms[i])) *openai_gelu = 1;
  if (*openai_gelu || (s && !strcmp(s, "gelu"))) return 0;
  return td_errorf(r->err, r->errlen,
                   "%s: \"activation_function\" %s%s%s is not supported: trident has gelu "
                   "(exact erf) and the tanh form (gelu_new, gelu_pytorch_tanh, gelu_fast)",
                   r->path, s ? "\"" : "", s ? s : "(not a string)", s ? "\"" : "");
}

static int cfg_model_type(const cfg_reader *r) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r->root, "model_type"));
  if (s && !strcmp(s, "gpt2")) return 0;
  return td_errorf(r->err, r->errlen,
                   "%s: \"model_type\" is %s%s%s, not \"gpt2\": trident converts GPT-2 "
                   "(GPT2LMHeadModel) checkpoints",
                   r->path, s ? "\"" : "", s ? s : "missing", s ? "\"" : "");
}

static int cfg_features(const cfg_reader *r) {
  if (cfg_require_bool(r, "scale_attn_weights", 1, "trident scales scores by 1/sqrt(head_dim)") ||
      cfg_require_bool(r, "scale_attn_by_inverse_layer_idx", 0, "no per-layer score scaling") ||
      cfg_require_bool(r, "add_cross_attention", 0, "a decoder-only GPT has no cross-attention"))
    return -1;
  return 0;
}

/* The sizes, checked against each other as the model needs them. */
static int cfg_sizes(const cfg_reader *r, td_gpt_config *c, int64_t *vocab) {
  int64_t ctx = 0; /* n_positions defaults to the older n_ctx */
  if (cfg_int(r, "n_layer", 0, &c->num_layers) || cfg_int(r, "n_head", 0, &c->heads) ||
      cfg_int(r, "n_embd", 0, &c->hidden) || cfg_int(r, "vocab_size", 0, vocab) ||
      cfg_int(r, "n_ctx", 1, &ctx) ||
      cfg_int(r, "n_positions", ctx > 1 ? ctx : 0, &c->max_positions) ||
      cfg_int(r, "n_inner", c->hidden <= TD_GPT_MAX_HIDDEN ? 4 * c->hidden : 1, &c->ffn_hidden))
    return -1;
  if (c->hidden % c->heads)
    return td_errorf(r->err, r->errlen, "%s: n_embd %lld is not divisible by n_head %lld", r->path,
                     (long long)c->hidden, (long long)c->heads);
  return 0;
}

/* The sizes against trident's limits (model/gpt_config.h) under config.json's
 * names, then the memory the import takes: the parameters (fp32, padded
 * vocabulary), the buffer of the largest tensor as read, and the tensor table;
 * refused before anything is allocated, a billion n_layer included. */
static int cfg_limits(const cfg_reader *r, const td_gpt_config *c, int64_t divisible_by) {
  static const char *const names[TD_GPT_SIZE_COUNT] = {
      "\"n_layer\"", "\"n_embd\"", "\"n_head\"", "\"n_inner\"", "\"n_positions\"",
      "\"n_positions\"", "the padded \"vocab_size\" (a multiple of --make-vocab-size-divisible-by)",
      "micro-batch"};
  char why[768], detail[256];
  if (td_gpt_check_sizes(c, 0, names, why, sizeof why))
    return td_errorf(r->err, r->errlen, "%s: %s", r->path, why);
  td_gpt_layout lay = td_gpt_layout_single(c);
  td_gpt_param_count n = td_gpt_count_params(c, &lay);
  uint64_t bytes = td_sat_add(td_sat_mul(td_sat_add(n.flat_numel, n.largest), sizeof(float)),
                              td_sat_mul(td_sat_mul(n.n_tensors, 2), sizeof(td_gpt_tensor)));
  snprintf(detail, sizeof detail,
           "%llu fp32 parameters of n_layer %lld, n_embd %lld, n_inner %lld, n_positions %lld, "
           "vocab_size padded to %lld (--make-vocab-size-divisible-by %lld)",
           (unsigned long long)n.num_params, (long long)c->num_layers, (long long)c->hidden,
           (long long)c->ffn_hidden, (long long)c->max_positions, (long long)c->vocab_size,
           (long long)divisible_by);
  if (td_memory_check(bytes, 1, "importing this model", detail, why, sizeof why) ||
      td_gpt_check_layers(c, "\"n_layer\"", why, sizeof why))
    return td_errorf(r->err, r->errlen, "%s: %s", r->path, why);
  return 0;
}

static int parse_config(td_hf_gpt2 *h, const cJSON *root, const char *path, int64_t divisible_by,
                        char *err, size_t errlen) {
  cfg_reader r = {root, path, err, errlen};
  td_gpt_config *c = &h->cfg;
  int tie;
  if (cfg_model_type(&r) || cfg_features(&r) || cfg_sizes(&r, c, &h->vocab) ||
      cfg_gelu(&r, &c->openai_gelu) || cfg_bool(&r, "tie_word_embeddings", 1, &tie) ||
      cfg_float(&r, "layer_norm_epsilon", 1e-5f, &c->layernorm_eps) ||
      cfg_float(&r, "initializer_range", 0.02f, &c->init_std) ||
      cfg_float(&r, "resid_pdrop", 0.1f, &c->hidden_dropout) ||
      cfg_float(&r, "attn_pdrop", 0.1f, &c->attention_dropout))
    return -1;
  c->untie_embeddings = !tie;
  c->seq_len = c->max_positions;
  c->vocab_size = td_gpt_padded_vocab(h->vocab, divisible_by, 1);
  return cfg_limits(&r, c, divisible_by);
}

static int read_config(td_hf_gpt2 *h, const char *dir, int64_t divisible_by, char *err,
                       size_t errlen) {
  char path[HF_PATH];
  if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
    return td_errorf(err, errlen, "path too long: %s", dir);
  if (!td_path_exists(path))
    return td_errorf(err, errlen,
                     "%s: no config.json (a Hugging Face model directory has "
                     "config.json and model.safetensors)",
                     dir);
  char *text = td_read_file(path, NULL, err, errlen);
  if (!text) return -1;
  cJSON *root = cJSON_Parse(text);
  td_free(text);
  int rc = cJSON_IsObject(root) ? parse_config(h, root, path, divisible_by, err, errlen)
                                : td_errorf(err, errlen, "%s: not a JSON object", path);
  cJSON_Delete(root);
  return rc;
}

/* ------------------------------------------------------------------ safetensors */

static int open_file(td_hf_gpt2 *h, const char *dir, const char *name, char *err, size_t errlen) {
  char path[HF_PATH];
  if (strchr(name, '/') || (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
    return td_errorf(err, errlen, "%s: unusable shard file name '%s'", dir, name);
  for (int i = 0; i < h->n_files; i++)
    if (!strcmp(h->paths[i], path)) return 0; /* the index names each shard many times */
  if (h->n_files == HF_MAX_FILES)
    return td_errorf(err, errlen, "%s: more than %d safetensors shards", dir, HF_MAX_FILES);
  td_safetensors *st = td_safetensors_open(path, err, errlen);
  if (!st) return -1;
  h->files[h->n_files] = st;
  h->paths[h->n_files++] = td_strdup(path);
  return 0;
}

/* The shards model.safetensors.index.json's weight_map names. */
static int open_index(td_hf_gpt2 *h, const char *dir, const char *path, char *err, size_t errlen) {
  char *text = td_read_file(path, NULL, err, errlen);
  if (!text) return -1;
  cJSON *root = cJSON_Parse(text);
  td_free(text);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
  int rc = cJSON_IsObject(map) ? 0 : td_errorf(err, errlen, "%s: no \"weight_map\" object", path);
  cJSON_ArrayForEach(e, map) {
    if (rc) break;
    rc = cJSON_IsString(e)
             ? open_file(h, dir, e->valuestring, err, errlen)
             : td_errorf(err, errlen, "%s: weight_map[\"%s\"] is not a file name", path, e->string);
  }
  cJSON_Delete(root);
  return rc;
}

static int open_weights(td_hf_gpt2 *h, const char *dir, char *err, size_t errlen) {
  char p[HF_PATH];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  if (td_path_exists(p)) return open_file(h, dir, "model.safetensors", err, errlen);
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
  if (td_path_exists(p)) return open_index(h, dir, p, err, errlen);
  snprintf(p, sizeof p, "%s/pytorch_model.bin", dir);
  if (td_path_exists(p))
    return td_errorf(err, errlen,
                     "%s has only pytorch_model.bin (a pickle); trident reads safetensors: save "
                     "it with model.save_pretrained(dir, safe_serialization=True) first",
                     dir);
  return td_errorf(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
}

td_hf_gpt2 *td_hf_open(const char *dir, int64_t vocab_divisible_by, char *err, size_t errlen) {
  TD_CHECK(vocab_divisible_by > 0, "vocab_divisible_by %lld", (long long)vocab_divisible_by);
  if (!td_is_dir(dir)) {
    td_errorf(err, errlen, "%s: not a directory", dir);
    return NULL;
  }
  td_hf_gpt2 *h = td_calloc(sizeof *h);
  if (read_config(h, dir, vocab_divisible_by, err, errlen) || open_weights(h, dir, err, errlen)) {
    td_hf_close(h);
    return NULL;
  }
  return h;
}

void td_hf_close(td_hf_gpt2 *h) {
  if (!h) return;
  for (int i = 0; i < h->n_files; i++) {
    td_safetensors_close(h->files[i]);
    td_free(h->paths[i]);
  }
  td_free(h);
}

const td_gpt_config *td_hf_config(const td_hf_gpt2 *h) { return &h->cfg; }
int64_t td_hf_vocab_size(const td_hf_gpt2 *h) { return h->vocab; }

/* ------------------------------------------------------------------ import */

/* A tensor by its Hugging Face name, with or without the prefix; *file: its index. */
static const td_st_tensor *find(const td_hf_gpt2 *h, const char *name, int *file) {
  char prefixed[HF_PREFIXED_MAX];
  snprintf(prefixed, sizeof prefixed, HF_PREFIX "%s", name);
  for (*file = 0; *file < h->n_files; ++*file) {
    const td_st_tensor *s = td_safetensors_find(h->files[*file], name);
    if (!s) s = td_safetensors_find(h->files[*file], prefixed);
    if (s) return s;
  }
  return NULL;
}

/* out = the tensor's values as fp32 (F32, F16 or BF16); -1 for another dtype. */
static int to_float(const td_st_tensor *s, float *out) {
  int64_t n = td_st_numel(s);
  const char *p = s->data;
  if (s->dtype == TD_F32) {
    memcpy(out, p, (size_t)n * sizeof(float));
    return 0;
  }
  if (s->dtype != TD_F16 && s->dtype != TD_BF16) return -1;
  for (int64_t i = 0; i < n; i++) {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    out[i] = s->dtype == TD_F16 ? td_f16_to_f32(v) : td_bf16_to_f32(v);
  }
  return 0;
}

static void shape_text(char *out, size_t n, const int64_t *shape, int ndim) {
  size_t len = 0;
  out[0] = 0;
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(out + len, n - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* The tensor hf (of trident tensor t) from the files, checked, as fp32 in buf. */
static int read_one(const td_hf_gpt2 *h, const td_gpt_tensor *t, const char *hf, move_kind k,
                    float *buf, char *err, size_t errlen) {
  int file;
  const td_st_tensor *s = find(h, hf, &file);
  if (!s)
    return td_errorf(err, errlen, "tensor '%s' (or '" HF_PREFIX "%s') is missing from %s%s", hf, hf,
                     h->paths[0], h->n_files > 1 ? " and the other shards" : "");
  int64_t want[2];
  hf_shape(t, k, h->vocab, want);
  int ok = s->ndim == t->ndim && s->shape[0] == want[0] && (t->ndim == 1 || s->shape[1] == want[1]);
  if (!ok) {
    char got[128], exp[128];
    shape_text(got, sizeof got, s->shape, s->ndim);
    shape_text(exp, sizeof exp, want, t->ndim);
    return td_errorf(err, errlen, "%s: tensor '%s' has shape [%s], config.json gives [%s]",
                     h->paths[file], s->name, got, exp);
  }
  if (to_float(s, buf))
    return td_errorf(err, errlen, "%s: tensor '%s' is %s; expected F32, F16 or BF16",
                     h->paths[file], s->name, td_dtype_name(s->dtype));
  return 0;
}

/* Buffers of the Hugging Face model GPT2LMHeadModel keeps beside its weights
 * (older transformers saved them): the causal mask of each layer. And lm_head
 * when tied (transformers ties it to wte whatever the file holds). */
static int ignored(const td_hf_gpt2 *h, const char *name) {
  long long layer;
  int used = 0;
  if (!h->cfg.untie_embeddings && !strcmp(name, "lm_head.weight")) return 1;
  if (sscanf(name, "h.%lld.attn.%n", &layer, &used) != 1 || !used) return 0;
  return !strcmp(name + used, "bias") || !strcmp(name + used, "masked_bias");
}

/* Every tensor in the files is a weight the model took, or ignored. */
static int check_leftovers(const td_hf_gpt2 *h, const td_gpt_tensor *tensors, int n, char *err,
                           size_t errlen) {
  char hf[HF_NAME_MAX];
  for (int f = 0; f < h->n_files; f++)
    for (int i = 0; i < td_safetensors_count(h->files[f]); i++) {
      const char *name = td_safetensors_at(h->files[f], i)->name;
      if (!strncmp(name, HF_PREFIX, strlen(HF_PREFIX))) name += strlen(HF_PREFIX);
      int known = ignored(h, name);
      for (int t = 0; t < n && !known; t++) {
        hf_name(tensors[t].name, hf, sizeof hf);
        known = !strcmp(hf, name);
      }
      if (!known)
        return td_errorf(err, errlen,
                         "%s: tensor '%s' is not a weight of GPT-2 as config.json describes it "
                         "(n_layer %lld, tie_word_embeddings %s)",
                         h->paths[f], td_safetensors_at(h->files[f], i)->name,
                         (long long)h->cfg.num_layers, h->cfg.untie_embeddings ? "false" : "true");
    }
  return 0;
}

int td_hf_read_params(const td_hf_gpt2 *h, const td_gpt_tensor *tensors, int n, float *flat,
                      char *err, size_t errlen) {
  int64_t most = 0;
  for (int i = 0; i < n; i++) most = tensors[i].numel > most ? tensors[i].numel : most;
  float *buf = td_malloc((size_t)most * sizeof(float));
  char hf[HF_NAME_MAX];
  int rc = check_leftovers(h, tensors, n, err, errlen);
  for (int i = 0; i < n && !rc; i++) {
    const td_gpt_tensor *t = &tensors[i];
    move_kind k = hf_name(t->name, hf, sizeof hf);
    rc = read_one(h, t, hf, k, buf, err, errlen);
    if (rc) break;
    move(t, k, h->cfg.heads, h->vocab, buf, flat + t->offset, 0);
    if (k == M_VOCAB) pad_vocab_rows(flat + t->offset, h->vocab, t->shape[0], t->shape[1]);
  }
  td_free(buf);
  return rc;
}

/* ------------------------------------------------------------------ export */

static char *config_text(const td_gpt_config *c, int64_t vocab) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"),
                       cJSON_CreateString("GPT2LMHeadModel"));
  cJSON_AddStringToObject(o, "model_type", "gpt2");
  cJSON_AddNumberToObject(o, "vocab_size", (double)vocab);
  cJSON_AddNumberToObject(o, "n_positions", (double)c->max_positions);
  cJSON_AddNumberToObject(o, "n_ctx", (double)c->max_positions);
  cJSON_AddNumberToObject(o, "n_embd", (double)c->hidden);
  cJSON_AddNumberToObject(o, "n_layer", (double)c->num_layers);
  cJSON_AddNumberToObject(o, "n_head", (double)c->heads);
  cJSON_AddNumberToObject(o, "n_inner", (double)c->ffn_hidden);
  cJSON_AddStringToObject(o, "activation_function", c->openai_gelu ? "gelu_new" : "gelu");
  cJSON_AddNumberToObject(o, "layer_norm_epsilon", td_float_shortest(c->layernorm_eps));
  cJSON_AddNumberToObject(o, "initializer_range", td_float_shortest(c->init_std));
  cJSON_AddNumberToObject(o, "resid_pdrop", td_float_shortest(c->hidden_dropout));
  cJSON_AddNumberToObject(o, "embd_pdrop", td_float_shortest(c->hidden_dropout));
  cJSON_AddNumberToObject(o, "attn_pdrop", td_float_shortest(c->attention_dropout));
  cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", !c->untie_embeddings);
  /* GPT-2's <|endoftext|> and NullTokenizer's end of document are both the last id */
  cJSON_AddNumberToObject(o, "bos_token_id", (double)(vocab - 1));
  cJSON_AddNumberToObject(o, "eos_token_id", (double)(vocab - 1));
  cJSON_AddStringToObject(o, "torch_dtype", "float32");
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

static int write_config(const char *dir, const td_gpt_config *c, int64_t vocab, char *err,
                        size_t errlen) {
  char path[HF_PATH];
  if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
    return td_errorf(err, errlen, "path too long: %s", dir);
  char *text = config_text(c, vocab);
  int rc = td_write_file(path, text, strlen(text), err, errlen);
  cJSON_free(text);
  return rc;
}

static int write_weights(const char *dir, const td_gpt_config *cfg, int64_t vocab,
                         const td_gpt_tensor *tensors, int n, const float *flat, char *err,
                         size_t errlen) {
  char path[HF_PATH], (*names)[HF_PREFIXED_MAX] = td_malloc((size_t)n * sizeof *names);
  td_st_tensor *st = td_calloc((size_t)n * sizeof *st);
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += tensors[i].numel; /* >= the Hugging Face sizes */
  float *host = td_malloc((size_t)total * sizeof(float)), *p = host;
  for (int i = 0; i < n; i++) {
    const td_gpt_tensor *t = &tensors[i];
    char hf[HF_NAME_MAX];
    move_kind k = hf_name(t->name, hf, sizeof hf);
    snprintf(names[i], sizeof names[i], "%s%s", strcmp(hf, "lm_head.weight") ? HF_PREFIX : "", hf);
    st[i] = (td_st_tensor){.name = names[i], .dtype = TD_F32, .ndim = t->ndim, .data = p};
    hf_shape(t, k, vocab, st[i].shape);
    move(t, k, cfg->heads, vocab, flat + t->offset, p, 1);
    p += td_st_numel(&st[i]);
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  const char *keys[] = {"format"}, *values[] = {"pt"}; /* transformers requires it */
  int rc = td_safetensors_write(path, st, n, keys, values, 1, err, errlen);
  td_free(host), td_free(st), td_free(names);
  return rc;
}

int td_hf_write(const char *dir, const td_gpt_config *cfg, int64_t true_vocab,
                const td_gpt_tensor *tensors, int n, const float *flat, char *err, size_t errlen) {
  TD_CHECK(true_vocab > 0 && true_vocab <= cfg->vocab_size, "true vocab %lld of %lld",
           (long long)true_vocab, (long long)cfg->vocab_size);
  if (td_mkdir_p(dir, err, errlen)) return -1;
  if (write_config(dir, cfg, true_vocab, err, errlen)) return -1;
  return write_weights(dir, cfg, true_vocab, tensors, n, flat, err, errlen);
}
