/* Hugging Face GPT-2 interchange (src/model/hf_convert.h, gpt_config.h):
 *  - import of tests/parity's weights in Hugging Face's names and layouts (made by
 *    the PyTorch script with numpy reshapes and checked there against a forward
 *    written as transformers' modeling_gpt2): bit-identical to the trident-layout
 *    weights, and the model's loss is the reference loss; with the "transformer."
 *    prefix and sharded; in F16; with vocabulary padding (mean rows);
 *  - round trips trident -> hf -> trident (bit-identical) and hf -> trident -> hf
 *    (identical files), tied and untied, both GELUs, with and without padding;
 *  - the checkpoint args (config <-> JSON, mismatch messages);
 *  - refusals: every bad directory, config and tensor says what is wrong. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/mem.h"
#include "base/safetensors.h"
#include "check.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/hf_convert.h"

static char g_tmp[256]; /* this run's scratch directory */

static void path_in(char *out, size_t n, const char *dir, const char *file) {
  snprintf(out, n, "%s/%s", dir, file);
}

/* A fresh empty directory g_tmp/name. */
static const char *fresh_dir(const char *name) {
  static char dirs[8][512];
  static int next;
  char *d = dirs[next++ % 8], err[256];
  path_in(d, sizeof dirs[0], g_tmp, name);
  if (td_remove_tree(d, err, sizeof err) || td_mkdir_p(d, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  return d;
}

static void write_text(const char *dir, const char *file, const char *text) {
  char p[600], err[256];
  path_in(p, sizeof p, dir, file);
  if (td_write_file(p, text, strlen(text), err, sizeof err)) fprintf(stderr, "%s\n", err), exit(1);
}

/* ------------------------------------------------------- the reference model */

static td_safetensors *g_ref; /* tests/parity/gpt2_tiny_ref.safetensors */

static void open_reference(void) {
  char path[4096], err[512];
  const char *f = __FILE__, *slash = strrchr(f, '/');
  snprintf(path, sizeof path, "%.*s/parity/gpt2_tiny_ref.safetensors", slash ? (int)(slash - f) : 0,
           f);
  g_ref = td_safetensors_open(slash ? path : "parity/gpt2_tiny_ref.safetensors", err, sizeof err);
  if (!g_ref) fprintf(stderr, "%s\n", err), exit(1);
}

static double ref_meta(const char *key) { return strtod(td_safetensors_meta(g_ref, key), NULL); }

/* config.json of the reference model (exact GELU, tied), with the keys of
 * override (a JSON object text, or NULL) replacing or adding to it. */
static void write_ref_config(const char *dir, const char *override) {
  char base[512];
  snprintf(base, sizeof base,
           "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_layer\": %g, "
           "\"n_head\": %g, \"n_embd\": %g, \"n_inner\": %g, \"n_positions\": %g, \"vocab_size\": "
           "%g, \"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu\"}",
           ref_meta("num_layers"), ref_meta("heads"), ref_meta("hidden"), ref_meta("ffn_hidden"),
           ref_meta("max_positions"), ref_meta("vocab_size"));
  cJSON *c = cJSON_Parse(base), *o = override ? cJSON_Parse(override) : NULL, *e;
  cJSON_ArrayForEach(e, o) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, e->string);
    cJSON_AddItemToObject(c, e->string, cJSON_Duplicate(e, 1));
  }
  char *text = cJSON_Print(c);
  write_text(dir, "config.json", text);
  cJSON_free(text), cJSON_Delete(c), cJSON_Delete(o);
}

typedef struct {
  const char *file, *prefix; /* the file in dir; prepended to every name */
  td_dtype dtype;            /* TD_F32 or TD_F16 */
  int shard;                 /* -1: every tensor; 0 / 1: the even / odd ones */
  const char *drop;          /* a tensor left out, or NULL */
  const char *extra;         /* an extra (1-element) tensor, or NULL */
} hf_file;

/* The reference's hf.* tensors as a Hugging Face safetensors file. */
static void write_ref_tensors(const char *dir, const hf_file *o) {
  int n = td_safetensors_count(g_ref), k = 0, idx = 0;
  td_st_tensor *st = td_calloc((size_t)(n + 1) * sizeof *st);
  char(*names)[128] = td_calloc((size_t)(n + 1) * sizeof *names);
  uint16_t *half = td_malloc(1 << 20), *h = half;
  for (int i = 0; i < n; i++) {
    const td_st_tensor *t = td_safetensors_at(g_ref, i);
    if (strncmp(t->name, "hf.", 3) || (o->drop && !strcmp(t->name + 3, o->drop))) continue;
    if (o->shard >= 0 && idx++ % 2 != o->shard) continue;
    st[k] = *t;
    snprintf(names[k], sizeof names[k], "%s%s", o->prefix ? o->prefix : "", t->name + 3);
    st[k].name = names[k];
    if (o->dtype == TD_F16) {
      for (int64_t j = 0; j < td_st_numel(t); j++)
        h[j] = td_f32_to_f16(((const float *)t->data)[j]);
      st[k].dtype = TD_F16, st[k].data = h, h += td_st_numel(t);
    }
    k++;
  }
  static const float one = 1.0f;
  if (o->extra)
    st[k++] =
        (td_st_tensor){.name = o->extra, .dtype = TD_F32, .ndim = 1, .shape = {1}, .data = &one};
  char p[600], err[256];
  path_in(p, sizeof p, dir, o->file);
  const char *keys[] = {"format"}, *values[] = {"pt"};
  if (td_safetensors_write(p, st, k, keys, values, 1, err, sizeof err))
    fprintf(stderr, "%s\n", err), exit(1);
  td_free(st), td_free(names), td_free(half);
}

/* A Hugging Face directory of the reference model in one file. */
static const char *ref_hf_dir(const char *name, const hf_file *o, const char *override) {
  const char *dir = fresh_dir(name);
  write_ref_config(dir, override);
  write_ref_tensors(dir, o);
  return dir;
}

/* ------------------------------------------------------------ import helpers */

typedef struct {
  td_gpt_config cfg;
  int64_t vocab, flat_numel;
  td_gpt_tensor *tensors;
  int n;
  float *flat;
} imported;

/* td_hf_open + td_hf_read_params; 0, or -1 with err. */
static int import_dir(const char *dir, int64_t divisible_by, imported *im, char *err,
                      size_t errlen) {
  memset(im, 0, sizeof *im);
  td_hf_gpt2 *h = td_hf_open(dir, divisible_by, err, errlen);
  if (!h) return -1;
  im->cfg = *td_hf_config(h);
  im->vocab = td_hf_vocab_size(h);
  im->tensors = td_gpt_single_tensors(&im->cfg, &im->n, &im->flat_numel);
  im->flat = td_calloc((size_t)im->flat_numel * sizeof(float));
  int rc = td_hf_read_params(h, im->tensors, im->n, im->flat, err, errlen);
  td_hf_close(h);
  return rc;
}

static void imported_free(imported *im) { td_free(im->tensors), td_free(im->flat); }

/* Every imported tensor (rows of real tokens) equals the reference's trident-layout
 * tensor; with f16, equals its fp16 rounding. */
static int equals_reference(const imported *im, int f16) {
  int ok = 1;
  for (int i = 0; i < im->n; i++) {
    const td_gpt_tensor *t = &im->tensors[i];
    const td_st_tensor *r = td_safetensors_find(g_ref, t->name);
    const float *got = im->flat + t->offset, *want = r->data;
    for (int64_t k = 0; k < td_st_numel(r); k++) {
      float w = f16 ? td_f16_to_f32(td_f32_to_f16(want[k])) : want[k];
      ok &= memcmp(&got[k], &w, sizeof w) == 0;
    }
  }
  return ok;
}

/* The model's masked mean loss on the reference batch with the imported weights. */
static double imported_loss(const imported *im) {
  td_device *d = tst_device();
  const td_st_tensor *tok = td_safetensors_find(g_ref, "tokens");
  td_gpt_config c = im->cfg;
  c.seq_len = tok->shape[1];
  td_gpt_layout lay = td_gpt_layout_single(&c);
  td_gpt *m = td_gpt_create(d, &c, &lay, tok->shape[0], TD_F32);
  CHECK(td_gpt_flat_numel(m) == im->flat_numel, "the model's flat buffer is the table's");
  d->ops->copy_h2d(d, td_gpt_params(m), im->flat, (size_t)im->flat_numel * sizeof(float));
  td_gpt_cast_weights(m);
  double msum, sum = td_gpt_forward(m, tok->data, td_safetensors_find(g_ref, "targets")->data,
                                    td_safetensors_find(g_ref, "loss_mask")->data, 0, 0, &msum);
  td_gpt_destroy(m);
  return sum / msum;
}

/* ------------------------------------------------------------------ import */

static void test_import_reference(void) {
  char err[1024];
  imported im;
  hf_file plain = {"model.safetensors", NULL, TD_F32, -1, NULL, NULL};
  const char *dir = ref_hf_dir("ref", &plain, NULL);
  int rc = import_dir(dir, 64, &im, err, sizeof err);
  CHECK(rc == 0, "import of the reference in Hugging Face layout: %s", rc ? err : "ok");
  if (rc) return;
  CHECK(im.cfg.num_layers == 2 && im.cfg.heads == 3 && im.cfg.vocab_size == 64 &&
            !im.cfg.openai_gelu && !im.cfg.untie_embeddings && im.cfg.layernorm_eps == 1e-5f,
        "config.json read: 2 layers, 3 heads, vocab 64, exact GELU, tied, eps 1e-5");
  CHECK(equals_reference(&im, 0),
        "every tensor bit-identical to the trident-layout weights "
        "(QKV per-head interleave, Conv1D transposes)");
  double loss = imported_loss(&im), want = ref_meta("loss");
  CHECK(fabs(loss - want) < 1e-5 * want, "loss of the imported model %.7f vs PyTorch's %.7f", loss,
        want);
  imported_free(&im);
}

static void test_import_prefixed_sharded(void) {
  char err[1024];
  imported im;
  const char *dir = fresh_dir("sharded");
  write_ref_config(dir, NULL);
  hf_file a = {"model-00001-of-00002.safetensors", "transformer.", TD_F32, 0, NULL, NULL};
  hf_file b = {"model-00002-of-00002.safetensors", "transformer.", TD_F32, 1, NULL, NULL};
  write_ref_tensors(dir, &a);
  write_ref_tensors(dir, &b);
  write_text(dir, "model.safetensors.index.json",
             "{\"metadata\": {}, \"weight_map\": {\"transformer.wte.weight\": "
             "\"model-00001-of-00002.safetensors\", \"transformer.wpe.weight\": "
             "\"model-00002-of-00002.safetensors\", \"transformer.ln_f.bias\": "
             "\"model-00001-of-00002.safetensors\"}}");
  int rc = import_dir(dir, 64, &im, err, sizeof err);
  CHECK(rc == 0 && equals_reference(&im, 0),
        "\"transformer.\"-prefixed names in two shards (index.json): bit-identical: %s",
        rc ? err : "ok");
  imported_free(&im);
}

static void test_import_f16(void) {
  char err[1024];
  imported im;
  hf_file f16 = {"model.safetensors", "transformer.", TD_F16, -1, NULL, NULL};
  int rc = import_dir(ref_hf_dir("f16", &f16, NULL), 64, &im, err, sizeof err);
  CHECK(rc == 0 && equals_reference(&im, 1), "F16 tensors import as their exact fp32 values: %s",
        rc ? err : "ok");
  imported_free(&im);
}

/* Padded rows are the mean of the real rows; the loss stays within
 * log(1 + (Vp - V) / V) above the unpadded model's (hf_convert.h). */
static void test_import_padding(void) {
  char err[1024];
  imported im;
  hf_file plain = {"model.safetensors", NULL, TD_F32, -1, NULL, NULL};
  int rc = import_dir(ref_hf_dir("pad", &plain, NULL), 40, &im, err, sizeof err);
  CHECK(rc == 0 && im.vocab == 64 && im.cfg.vocab_size == 80, "vocab 64 padded to 80: %s",
        rc ? err : "ok");
  if (rc) return;
  const td_gpt_tensor *wte = &im.tensors[0];
  const float *w = im.flat + wte->offset;
  int64_t C = wte->shape[1];
  double worst = 0;
  for (int64_t c = 0; c < C; c++) {
    double mean = 0;
    for (int64_t r = 0; r < 64; r++) mean += w[r * C + c];
    for (int64_t r = 64; r < 80; r++) worst = fmax(worst, fabs(w[r * C + c] - mean / 64));
  }
  CHECK(worst < 1e-6, "padded rows are the mean of the real rows (max diff %.2g)", worst);
  double loss = imported_loss(&im), want = ref_meta("loss"), bound = log(1.0 + 16.0 / 64.0);
  CHECK(loss >= want - 1e-5 && loss <= want + bound, "padded loss %.6f within [%.6f, +%.4f]", loss,
        want, bound);
  imported_free(&im);
}

/* ------------------------------------------------------------- round trips */

static td_gpt_config small_config(int64_t vocab, int untie, int tanh_gelu) {
  td_gpt_config c;
  memset(&c, 0, sizeof c);
  c.num_layers = 3, c.hidden = 32, c.heads = 4, c.ffn_hidden = 80;
  c.seq_len = c.max_positions = 20;
  c.vocab_size = vocab;
  c.init_std = 0.02f, c.layernorm_eps = 1e-6f, c.hidden_dropout = 0.1f, c.attention_dropout = 0.05f;
  c.untie_embeddings = untie, c.openai_gelu = tanh_gelu;
  return c;
}

/* A random model's flat parameters (every element distinct in value). */
static float *random_params(const td_gpt_config *c, td_gpt_tensor **ts, int *n, int64_t *numel) {
  *ts = td_gpt_single_tensors(c, n, numel);
  float *flat = td_calloc((size_t)*numel * sizeof(float));
  for (int i = 0; i < *n; i++)
    tst_fill_normal(flat + (*ts)[i].offset, (*ts)[i].numel, 100 + (uint64_t)i, 0.5f);
  return flat;
}

static int configs_equal(const td_gpt_config *a, const td_gpt_config *b) {
  return a->num_layers == b->num_layers && a->hidden == b->hidden && a->heads == b->heads &&
         a->ffn_hidden == b->ffn_hidden && a->max_positions == b->max_positions &&
         a->vocab_size == b->vocab_size && a->layernorm_eps == b->layernorm_eps &&
         a->openai_gelu == b->openai_gelu && a->untie_embeddings == b->untie_embeddings &&
         a->init_std == b->init_std && a->hidden_dropout == b->hidden_dropout &&
         a->attention_dropout == b->attention_dropout;
}

static char *file_bytes(const char *dir, const char *file, size_t *len) {
  char p[600], err[256];
  path_in(p, sizeof p, dir, file);
  return td_read_file(p, len, err, sizeof err);
}

/* trident -> hf -> trident is bit-identical (padded rows: the mean, as any import);
 * hf -> trident -> hf writes the same files. */
static void round_trip(int64_t true_vocab, int64_t divisible_by, int untie, int tanh_gelu) {
  char err[1024], what[96];
  snprintf(what, sizeof what, "vocab %lld/%lld, %s, %s GELU", (long long)true_vocab,
           (long long)td_gpt_padded_vocab(true_vocab, divisible_by, 1), untie ? "untied" : "tied",
           tanh_gelu ? "tanh" : "erf");
  td_gpt_config c =
      small_config(td_gpt_padded_vocab(true_vocab, divisible_by, 1), untie, tanh_gelu);
  td_gpt_tensor *ts;
  int n;
  int64_t numel;
  float *orig = random_params(&c, &ts, &n, &numel);
  const char *hf1 = fresh_dir("rt_hf1"), *hf2 = fresh_dir("rt_hf2");
  int rc = td_hf_write(hf1, &c, true_vocab, ts, n, orig, err, sizeof err);
  imported im;
  if (!rc) rc = import_dir(hf1, divisible_by, &im, err, sizeof err);
  CHECK(rc == 0, "%s: export and import: %s", what, rc ? err : "ok");
  if (rc) return;
  CHECK(configs_equal(&im.cfg, &c) && im.vocab == true_vocab, "%s: config survives", what);
  for (int i = 0; i < n; i++) /* the padded rows come back as the mean: compare real rows */
    if (!strcmp(ts[i].name, "embedding.word_embeddings.weight") ||
        !strcmp(ts[i].name, "output_layer.weight"))
      memcpy(orig + ts[i].offset + true_vocab * c.hidden,
             im.flat + ts[i].offset + true_vocab * c.hidden,
             (size_t)((c.vocab_size - true_vocab) * c.hidden) * sizeof(float));
  CHECK(im.flat_numel == numel && !memcmp(orig, im.flat, (size_t)numel * sizeof(float)),
        "%s: trident -> hf -> trident bit-identical", what);
  rc = td_hf_write(hf2, &im.cfg, im.vocab, im.tensors, im.n, im.flat, err, sizeof err);
  size_t l1, l2, k1, k2;
  char *m1 = file_bytes(hf1, "model.safetensors", &l1),
       *m2 = file_bytes(hf2, "model.safetensors", &l2);
  char *c1 = file_bytes(hf1, "config.json", &k1), *c2 = file_bytes(hf2, "config.json", &k2);
  CHECK(rc == 0 && m1 && m2 && l1 == l2 && !memcmp(m1, m2, l1) && k1 == k2 && !memcmp(c1, c2, k1),
        "%s: hf -> trident -> hf writes identical files", what);
  td_free(m1), td_free(m2), td_free(c1), td_free(c2);
  imported_free(&im);
  td_free(orig), td_free(ts);
}

/* The exported config.json says what transformers needs. */
static void test_export_config(void) {
  char err[512];
  td_gpt_config c = small_config(40, 1, 1);
  td_gpt_tensor *ts;
  int n;
  int64_t numel;
  float *p = random_params(&c, &ts, &n, &numel);
  const char *dir = fresh_dir("cfg");
  int rc = td_hf_write(dir, &c, 37, ts, n, p, err, sizeof err);
  char *text = file_bytes(dir, "config.json", NULL);
  cJSON *j = cJSON_Parse(text);
  const char *act = cJSON_GetStringValue(cJSON_GetObjectItem(j, "activation_function"));
  const char *arch =
      cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "architectures"), 0));
  CHECK(rc == 0 && act && !strcmp(act, "gelu_new") && arch && !strcmp(arch, "GPT2LMHeadModel") &&
            cJSON_GetObjectItem(j, "vocab_size")->valuedouble == 37 &&
            cJSON_GetObjectItem(j, "n_ctx")->valuedouble == 20 &&
            cJSON_GetObjectItem(j, "layer_norm_epsilon")->valuedouble == 1e-6 &&
            cJSON_IsFalse(cJSON_GetObjectItem(j, "tie_word_embeddings")),
        "config.json: GPT2LMHeadModel, gelu_new, vocab 37 (unpadded), n_ctx, eps 1e-06, untied");
  char path[600];
  path_in(path, sizeof path, dir, "model.safetensors");
  td_safetensors *st = td_safetensors_open(path, err, sizeof err);
  const td_st_tensor *attn =
      st ? td_safetensors_find(st, "transformer.h.2.attn.c_attn.weight") : NULL;
  const td_st_tensor *head = st ? td_safetensors_find(st, "lm_head.weight") : NULL;
  const char *fmt = st ? td_safetensors_meta(st, "format") : NULL;
  CHECK(attn && attn->shape[0] == 32 && attn->shape[1] == 96 && head && head->shape[0] == 37 &&
            fmt && !strcmp(fmt, "pt"),
        "model.safetensors: transformer.* Conv1D [in, out], lm_head [37, 32], format pt");
  td_safetensors_close(st);
  cJSON_Delete(j), td_free(text), td_free(p), td_free(ts);
}

/* ------------------------------------------------------------- checkpoint args */

static void test_args(void) {
  char err[1024];
  td_gpt_config c = small_config(128, 0, 1), back;
  cJSON *args = cJSON_Parse("{\"num_layers\": 99, \"seed\": 1234}");
  td_gpt_config_to_args(&c, 100, args);
  int64_t tv;
  int rc = td_gpt_config_from_args(args, &back, &tv, err, sizeof err);
  CHECK(rc == 0 && configs_equal(&c, &back) && tv == 100 && back.seq_len == c.max_positions,
        "config -> args -> config (true vocab 100): %s", rc ? err : "ok");
  CHECK(cJSON_GetObjectItem(args, "num_layers")->valuedouble == 3 &&
            cJSON_GetObjectItem(args, "seed")->valuedouble == 1234 &&
            cJSON_GetObjectItem(args, "layernorm_epsilon")->valuedouble == 1e-6,
        "existing keys replaced, others kept, eps written as 1e-06");
  CHECK(td_gpt_config_check_args(&c, args, err, sizeof err) == 0, "the same model passes");
  td_gpt_config other = c;
  other.heads = 8, other.openai_gelu = 0, other.vocab_size = 256;
  rc = td_gpt_config_check_args(&other, args, err, sizeof err);
  CHECK(rc && strstr(err, "--num-attention-heads: 4 in the checkpoint, 8 in this run") &&
            strstr(err, "--openai-gelu: on in the checkpoint, off in this run") &&
            strstr(err, "padded vocabulary") && strstr(err, "128 in the checkpoint, 256"),
        "a mismatch names each flag: %s", err);
  cJSON_DeleteItemFromObject(args, "padded_vocab_size");
  cJSON_DeleteItemFromObject(args, "openai_gelu");
  CHECK(td_gpt_config_check_args(&c, args, err, sizeof err) == 0, "absent keys are not compared");
  rc = td_gpt_config_from_args(args, &back, &tv, err, sizeof err);
  CHECK(rc && strstr(err, "lack \"openai_gelu\""), "a missing architecture key: %s", err);
  cJSON_Delete(args);
}

/* ------------------------------------------------------------------ refusals */

static void expect_refusal(const char *dir, const char *want, const char *what) {
  char err[1024] = "";
  imported im;
  int rc = import_dir(dir, 64, &im, err, sizeof err);
  CHECK(rc && strstr(err, want), "%s: refused with \"%s\" (got: %s)", what, want,
        rc ? err : "accepted");
  imported_free(&im);
}

static void test_refusals(void) {
  hf_file plain = {"model.safetensors", NULL, TD_F32, -1, NULL, NULL};
  char none[600];
  path_in(none, sizeof none, g_tmp, "does-not-exist");
  expect_refusal(none, "not a directory", "missing directory");
  const char *d = fresh_dir("noconfig");
  write_ref_tensors(d, &plain);
  expect_refusal(d, "no config.json", "no config.json");
  d = fresh_dir("noweights");
  write_ref_config(d, NULL);
  expect_refusal(d, "no model.safetensors", "no weights");
  write_text(d, "pytorch_model.bin", "pickle");
  expect_refusal(d, "only pytorch_model.bin", "a pickle only");
  write_text(d, "config.json", "{\"model_type\": ");
  expect_refusal(d, "not a JSON object", "truncated config.json");
  expect_refusal(ref_hf_dir("llama", &plain, "{\"model_type\": \"llama\"}"),
                 "\"model_type\" is \"llama\", not \"gpt2\"", "another architecture");
  expect_refusal(ref_hf_dir("relu", &plain, "{\"activation_function\": \"relu\"}"),
                 "\"activation_function\" \"relu\" is not supported", "another activation");
  expect_refusal(ref_hf_dir("heads", &plain, "{\"n_head\": 5}"),
                 "n_embd 24 is not divisible by n_head 5", "heads not dividing the hidden size");
  expect_refusal(ref_hf_dir("nolayer", &plain, "{\"n_layer\": null}"), "\"n_layer\" is missing",
                 "no n_layer");
  expect_refusal(ref_hf_dir("scale", &plain, "{\"scale_attn_weights\": false}"),
                 "\"scale_attn_weights\": false is not supported", "unscaled attention");
  expect_refusal(ref_hf_dir("inner", &plain, "{\"n_inner\": 80}"),
                 "'h.0.mlp.c_fc.weight' has shape [24, 96], config.json gives [24, 80]",
                 "a shape that disagrees with config.json");
  hf_file drop = {"model.safetensors", NULL, TD_F32, -1, "h.1.attn.c_attn.bias", NULL};
  expect_refusal(ref_hf_dir("drop", &drop, NULL),
                 "tensor 'h.1.attn.c_attn.bias' (or "
                 "'transformer.h.1.attn.c_attn.bias') is missing",
                 "a missing tensor");
  hf_file extra = {"model.safetensors", NULL, TD_F32, -1, NULL, "h.2.ln_1.weight"};
  expect_refusal(ref_hf_dir("extra", &extra, NULL),
                 "tensor 'h.2.ln_1.weight' is not a weight of "
                 "GPT-2 as config.json describes it (n_layer 2",
                 "a tensor of a deeper model");
  expect_refusal(ref_hf_dir("tiestr", &plain, "{\"tie_word_embeddings\": \"yes\"}"),
                 "\"tie_word_embeddings\" must be true or false", "a switch that is not a boolean");
  expect_refusal(ref_hf_dir("untied", &plain, "{\"tie_word_embeddings\": false}"),
                 "tensor 'lm_head.weight' (or 'transformer.lm_head.weight') is missing",
                 "untied without lm_head");
  hf_file mask = {"model.safetensors", NULL, TD_F32, -1, NULL, "h.0.attn.masked_bias"};
  char err[1024];
  imported im;
  int rc = import_dir(ref_hf_dir("buffers", &mask, NULL), 64, &im, err, sizeof err);
  CHECK(rc == 0, "the attention mask buffers of older transformers are ignored: %s",
        rc ? err : "ok");
  imported_free(&im);
}

int main(void) {
  const char *t = getenv("TMPDIR");
  snprintf(g_tmp, sizeof g_tmp, "%s/td_hf_XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(g_tmp)) return perror("mkdtemp"), 1;
  open_reference();
  test_import_reference();
  test_import_prefixed_sharded();
  test_import_f16();
  test_import_padding();
  round_trip(64, 64, 0, 0);
  round_trip(37, 8, 1, 1);
  round_trip(50, 128, 0, 1);
  test_export_config();
  test_args();
  test_refusals();
  td_safetensors_close(g_ref);
  char err[256];
  td_remove_tree(g_tmp, err, sizeof err);
  return tst_finish();
}
