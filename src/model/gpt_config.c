#include "model/gpt_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"

typedef enum { F_INT, F_FLOAT, F_BOOL } field_kind;

/* One key: where it lives in td_gpt_config, the flag that sets it, whether it is
 * architecture (compared on --load) and required by td_gpt_config_from_args. */
typedef struct {
  const char *key, *flag;
  field_kind kind;
  size_t offset;
  int arch, required;
} field;

#define CFG(f) offsetof(td_gpt_config, f)
static const field k_fields[] = {
    {"num_layers", "--num-layers", F_INT, CFG(num_layers), 1, 1},
    {"hidden_size", "--hidden-size", F_INT, CFG(hidden), 1, 1},
    {"num_attention_heads", "--num-attention-heads", F_INT, CFG(heads), 1, 1},
    {"ffn_hidden_size", "--ffn-hidden-size", F_INT, CFG(ffn_hidden), 1, 1},
    {"max_position_embeddings", "--max-position-embeddings", F_INT, CFG(max_positions), 1, 1},
    {"padded_vocab_size",
     "padded vocabulary (the tokenizer's size, --vocab-size, --make-vocab-size-divisible-by)",
     F_INT, CFG(vocab_size), 1, 0},
    {"layernorm_epsilon", "--layernorm-epsilon", F_FLOAT, CFG(layernorm_eps), 1, 1},
    {"openai_gelu", "--openai-gelu", F_BOOL, CFG(openai_gelu), 1, 1},
    {"untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", F_BOOL,
     CFG(untie_embeddings), 1, 1},
    {"init_method_std", "--init-method-std", F_FLOAT, CFG(init_std), 0, 0},
    {"hidden_dropout", "--hidden-dropout", F_FLOAT, CFG(hidden_dropout), 0, 0},
    {"attention_dropout", "--attention-dropout", F_FLOAT, CFG(attention_dropout), 0, 0},
};
#undef CFG
#define N_FIELDS (sizeof k_fields / sizeof *k_fields)

static void *at(const td_gpt_config *c, const field *f) { return (char *)c + f->offset; }

double td_float_shortest(float v) {
  char buf[32];
  for (int digits = 6; digits < 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
    if ((float)strtod(buf, NULL) == v) return strtod(buf, NULL);
  }
  return (double)v;
}

static void set_item(cJSON *o, const char *key, cJSON *item) {
  cJSON_DeleteItemFromObjectCaseSensitive(o, key);
  cJSON_AddItemToObject(o, key, item);
}

static cJSON *field_json(const td_gpt_config *c, const field *f) {
  switch (f->kind) {
    case F_INT:
      return cJSON_CreateNumber((double)*(const int64_t *)at(c, f));
    case F_FLOAT:
      return cJSON_CreateNumber(td_float_shortest(*(const float *)at(c, f)));
    case F_BOOL:
      return cJSON_CreateBool(*(const int *)at(c, f));
  }
  return NULL;
}

void td_gpt_config_to_args(const td_gpt_config *c, int64_t true_vocab, cJSON *args) {
  for (size_t i = 0; i < N_FIELDS; i++)
    set_item(args, k_fields[i].key, field_json(c, &k_fields[i]));
  if (true_vocab > 0) set_item(args, "true_vocab_size", cJSON_CreateNumber((double)true_vocab));
}

/* Read one field of args into c: 0, 1 when absent, -1 when of the wrong type
 * (an integer must be one: converting 1e30 to int64_t is undefined). */
static int read_field(const cJSON *args, const field *f, td_gpt_config *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, f->key);
  if (!v || cJSON_IsNull(v)) return 1;
  if (f->kind == F_BOOL) {
    if (!cJSON_IsBool(v)) return -1;
    *(int *)at(c, f) = cJSON_IsTrue(v);
  } else if (!cJSON_IsNumber(v)) {
    return -1;
  } else if (f->kind == F_INT) {
    double x = v->valuedouble;
    if (!(x > -9.2e18 && x < 9.2e18) || x != floor(x)) return -1;
    *(int64_t *)at(c, f) = (int64_t)x;
  } else {
    *(float *)at(c, f) = (float)v->valuedouble;
  }
  return 0;
}

/* ------------------------------------------------------------------ size limits */

const char *const td_gpt_flag_names[TD_GPT_SIZE_COUNT] = {
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--ffn-hidden-size",
    "--seq-length",
    "--max-position-embeddings",
    "the padded vocabulary (--vocab-size + 1 or the tokenizer's, rounded up to a multiple of "
    "--make-vocab-size-divisible-by x --tensor-model-parallel-size)",
    "--micro-batch-size",
};

static const char *const k_arg_names[TD_GPT_SIZE_COUNT] = {
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "max_position_embeddings",
    "max_position_embeddings", "padded_vocab_size", "micro_batch_size",
};

typedef struct {
  const char *const *names;
  char *err;
  size_t errlen;
} size_msg;

static int positive(const size_msg *m, td_gpt_size s, int64_t v) {
  if (v > 0) return 0;
  return td_errorf(m->err, m->errlen, "%s must be a positive integer; got %lld", m->names[s],
                   (long long)v);
}

static int at_most(const size_msg *m, td_gpt_size s, int64_t v, int64_t limit, const char *why) {
  if (v <= limit) return 0;
  return td_errorf(m->err, m->errlen, "%s %lld is too large: at most %lld (%s)", m->names[s],
                   (long long)v, (long long)limit, why);
}

#define GEMM_DIM "a GEMM dimension, which BLAS takes as a 32-bit int"

static int check_dims(const size_msg *m, const td_gpt_config *c) {
  const int64_t v[] = {c->num_layers, c->hidden, c->heads, c->ffn_hidden,
                       c->seq_len,    c->max_positions, c->vocab_size};
  for (int s = 0; s < (int)(sizeof v / sizeof *v); s++)
    if (positive(m, (td_gpt_size)s, v[s])) return -1;
  if (at_most(m, TD_GPT_SIZE_SEQ, c->seq_len, TD_GPT_MAX_DIM, "position ids are 32-bit ints") ||
      at_most(m, TD_GPT_SIZE_HIDDEN, c->hidden, TD_GPT_MAX_HIDDEN,
              "the fused QKV layer's 3 x hidden outputs are " GEMM_DIM) ||
      at_most(m, TD_GPT_SIZE_FFN, c->ffn_hidden, TD_GPT_MAX_DIM, GEMM_DIM) ||
      at_most(m, TD_GPT_SIZE_POSITIONS, c->max_positions, TD_GPT_MAX_DIM,
              "position ids are 32-bit ints") ||
      at_most(m, TD_GPT_SIZE_VOCAB, c->vocab_size, TD_GPT_MAX_DIM,
              "token ids are 32-bit ints, and the vocabulary is " GEMM_DIM))
    return -1;
  if (c->hidden % c->heads)
    return td_errorf(m->err, m->errlen,
                     "%s %lld is not divisible by %s %lld (every head gets hidden-size / heads "
                     "channels)",
                     m->names[TD_GPT_SIZE_HIDDEN], (long long)c->hidden,
                     m->names[TD_GPT_SIZE_HEADS], (long long)c->heads);
  if (c->seq_len > c->max_positions)
    return td_errorf(m->err, m->errlen,
                     "%s %lld is longer than %s %lld (positions past the table have no embedding)",
                     m->names[TD_GPT_SIZE_SEQ], (long long)c->seq_len,
                     m->names[TD_GPT_SIZE_POSITIONS], (long long)c->max_positions);
  return 0;
}

int td_gpt_check_sizes(const td_gpt_config *c, int64_t micro_batch, const char *const *names,
                       char *err, size_t errlen) {
  size_msg m = {names ? names : td_gpt_flag_names, err, errlen};
  if (check_dims(&m, c)) return -1;
  int64_t tokens;
  if (micro_batch > 0 && (td_mul_i64(micro_batch, c->seq_len, &tokens) || tokens > TD_GPT_MAX_DIM))
    return td_errorf(err, errlen,
                     "%s %lld x %s %lld tokens per micro-batch is too many: at most %lld (the "
                     "tokens are " GEMM_DIM ")",
                     m.names[TD_GPT_SIZE_MICRO_BATCH], (long long)micro_batch,
                     m.names[TD_GPT_SIZE_SEQ], (long long)c->seq_len, (long long)TD_GPT_MAX_DIM);
  return 0;
}

int td_gpt_check_layers(const td_gpt_config *c, const char *name, char *err, size_t errlen) {
  size_msg m = {(const char *const[]){name}, err, errlen};
  return at_most(&m, TD_GPT_SIZE_LAYERS, c->num_layers, TD_GPT_MAX_LAYERS,
                 "the model's tensors, 12 per layer, are numbered by 32-bit ints");
}

/* A checkpoint's sizes, named by their keys; an absent padded_vocab_size (0) is
 * not checked. */
static int check_args_sizes(const td_gpt_config *c, char *err, size_t errlen) {
  td_gpt_config probe = *c;
  if (!probe.vocab_size) probe.vocab_size = 1;
  char why[512];
  if (td_gpt_check_sizes(&probe, 0, k_arg_names, why, sizeof why) ||
      td_gpt_check_layers(&probe, k_arg_names[TD_GPT_SIZE_LAYERS], why, sizeof why))
    return td_errorf(err, errlen, "the checkpoint's args: %s", why);
  return 0;
}

int td_gpt_config_from_args(const cJSON *args, td_gpt_config *c, int64_t *true_vocab, char *err,
                            size_t errlen) {
  memset(c, 0, sizeof *c);
  if (!cJSON_IsObject(args)) return td_errorf(err, errlen, "the checkpoint has no \"args\" object");
  for (size_t i = 0; i < N_FIELDS; i++) {
    int rc = read_field(args, &k_fields[i], c);
    if (rc < 0 || (rc > 0 && k_fields[i].required))
      return td_errorf(err, errlen, "the checkpoint's args %s \"%s\"",
                       rc < 0 ? "have a malformed" : "lack", k_fields[i].key);
  }
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(args, "true_vocab_size");
  double t = cJSON_IsNumber(tv) ? tv->valuedouble : 0;
  *true_vocab = t >= 1 && t <= TD_GPT_MAX_DIM ? (int64_t)t : 0; /* a cast of 1e30 is undefined */
  c->seq_len = c->max_positions;
  return check_args_sizes(c, err, errlen);
}

static void value_text(char *out, size_t n, const td_gpt_config *c, const field *f) {
  switch (f->kind) {
    case F_INT:
      snprintf(out, n, "%lld", (long long)*(const int64_t *)at(c, f));
      break;
    case F_FLOAT:
      snprintf(out, n, "%g", td_float_shortest(*(const float *)at(c, f)));
      break;
    case F_BOOL:
      snprintf(out, n, "%s", *(const int *)at(c, f) ? "on" : "off");
      break;
  }
}

static int same(const td_gpt_config *a, const td_gpt_config *b, const field *f) {
  switch (f->kind) {
    case F_INT:
      return *(const int64_t *)at(a, f) == *(const int64_t *)at(b, f);
    case F_FLOAT:
      return *(const float *)at(a, f) == *(const float *)at(b, f);
    case F_BOOL:
      return !*(const int *)at(a, f) == !*(const int *)at(b, f);
  }
  return 0;
}

int td_gpt_config_check_args(const td_gpt_config *run, const cJSON *saved_args, char *err,
                             size_t errlen) {
  td_gpt_config saved = *run;
  char list[1024] = "", a[48], b[48];
  size_t len = 0;
  for (size_t i = 0; i < N_FIELDS; i++) {
    const field *f = &k_fields[i];
    if (!f->arch || read_field(saved_args, f, &saved) || same(&saved, run, f)) continue;
    value_text(a, sizeof a, &saved, f);
    value_text(b, sizeof b, run, f);
    int w = snprintf(list + len, sizeof list - len, "%s%s: %s in the checkpoint, %s in this run",
                     len ? "; " : "", f->flag, a, b);
    if (w > 0) len = len + (size_t)w < sizeof list ? len + (size_t)w : sizeof list - 1;
  }
  if (!len) return 0;
  /* The padding is a multiple of --make-vocab-size-divisible-by x TP (Megatron's), so
   * a checkpoint moved to another TP size can differ in it alone. */
  const char *tp_hint = saved.vocab_size != run->vocab_size
                            ? "; the padded vocabulary is a multiple of "
                              "--make-vocab-size-divisible-by x --tensor-model-parallel-size, so "
                              "at another TP size choose --make-vocab-size-divisible-by to pad "
                              "to the checkpoint's size"
                            : "";
  return td_errorf(err, errlen,
                   "the checkpoint's model differs from this run's flags: %s (pass the flags the "
                   "checkpoint was made with%s)",
                   list, tp_hint);
}
