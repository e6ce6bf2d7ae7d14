/* GPT parameters: Megatron-core names, global shapes, this rank's slices in the
 * flat buffers, and initialisation on the global shape (DESIGN.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/checked.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/memory_limit.h"
#include "base/rng.h"
#include "model/gpt_config.h"
#include "model/gpt_impl.h"

int64_t td_gpt_padded_vocab(int64_t vocab, int64_t divisible_by, int tp_size) {
  TD_CHECK(vocab > 0 && divisible_by > 0 && tp_size > 0, "vocab %lld, multiple %lld x %d",
           (long long)vocab, (long long)divisible_by, tp_size);
  int64_t multiple, padded;
  if (td_mul_i64(divisible_by, tp_size, &multiple) || td_add_i64(vocab, multiple - 1, &padded))
    return INT64_MAX; /* beyond any limit: td_gpt_check_sizes refuses it */
  return padded / multiple * multiple;
}

uint64_t td_gpt_name_stream(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  return h;
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t td_gpt_dropout_seed(uint64_t seed, int64_t iteration, int64_t micro_batch) {
  return splitmix64(seed ^ splitmix64((uint64_t)iteration ^ splitmix64((uint64_t)micro_batch)));
}

/* ------------------------------------------------------------------ views */

/* How a tensor is split over TP ranks (Megatron's tensor_parallel layers). */
enum { REPLICATED = -1, COLUMN = 0, ROW = 1 }; /* split dim: output rows / input columns */

typedef struct {
  td_gpt *m;
  int cap, unit_cap;
} builder;

/* Append one tensor of global shape [d0] or [d0, d1]; 64-byte aligned offset. */
static int add(builder *b, const char *name, int ndim, int64_t d0, int64_t d1, int split,
               float std, float value) {
  td_gpt *m = b->m;
  if (m->n_tensors == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    td_gpt_tensor *grown = td_calloc((size_t)b->cap * sizeof *grown);
    if (m->n_tensors) memcpy(grown, m->tensors, (size_t)m->n_tensors * sizeof *grown);
    td_free(m->tensors);
    m->tensors = grown;
  }
  td_gpt_tensor *t = &m->tensors[m->n_tensors];
  TD_CHECK(strlen(name) < TD_GPT_NAME_MAX, "tensor name too long: %s", name);
  strcpy(t->name, name);
  t->ndim = ndim;
  t->shape[0] = t->local_shape[0] = d0;
  t->shape[1] = t->local_shape[1] = ndim == 2 ? d1 : 1;
  t->split_dim = split;
  if (split != REPLICATED) {
    int64_t full = t->shape[t->split_dim], tp = m->lay.tp_size;
    TD_CHECK(full % tp == 0, "%s: dim %d (%lld) not divisible by tp %lld", name, t->split_dim,
             (long long)full, (long long)tp);
    t->local_shape[t->split_dim] = full / tp;
    t->slice_start = full / tp * m->lay.tp_rank;
  }
  t->numel = t->local_shape[0] * t->local_shape[1];
  t->offset = m->flat_numel;
  t->weight_decay = ndim == 2; /* Megatron: no decay on biases and norm parameters */
  t->init_std = std;
  t->init_value = value;
  m->flat_numel += (t->numel + 15) / 16 * 16;
  m->num_params += t->numel;
  return m->n_tensors++;
}

static void add_layer(builder *b, int64_t layer) {
  const td_gpt_config *c = &b->m->cfg;
  float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->num_layers);
  int64_t h = c->hidden, f = c->ffn_hidden;
  char n[TD_GPT_NAME_MAX];
#define NAME(s) (snprintf(n, sizeof n, "decoder.layers.%lld.%s", (long long)layer, s), n)
  add(b, NAME("input_layernorm.weight"), 1, h, 0, REPLICATED, 0, 1);
  add(b, NAME("input_layernorm.bias"), 1, h, 0, REPLICATED, 0, 0);
  add(b, NAME("self_attention.linear_qkv.weight"), 2, 3 * h, h, COLUMN, std, 0);
  add(b, NAME("self_attention.linear_qkv.bias"), 1, 3 * h, 0, COLUMN, 0, 0);
  add(b, NAME("self_attention.linear_proj.weight"), 2, h, h, ROW, out_std, 0);
  add(b, NAME("self_attention.linear_proj.bias"), 1, h, 0, REPLICATED, 0, 0);
  add(b, NAME("pre_mlp_layernorm.weight"), 1, h, 0, REPLICATED, 0, 1);
  add(b, NAME("pre_mlp_layernorm.bias"), 1, h, 0, REPLICATED, 0, 0);
  add(b, NAME("mlp.linear_fc1.weight"), 2, f, h, COLUMN, std, 0);
  add(b, NAME("mlp.linear_fc1.bias"), 1, f, 0, COLUMN, 0, 0);
  add(b, NAME("mlp.linear_fc2.weight"), 2, h, f, ROW, out_std, 0);
  add(b, NAME("mlp.linear_fc2.bias"), 1, h, 0, REPLICATED, 0, 0);
#undef NAME
}

/* Close the unit that began at tensor `first`: its flat range is padded to the
 * layout's unit multiple, so the next unit starts on one. */
static void end_unit(builder *b, int first) {
  td_gpt *m = b->m;
  if (first == m->n_tensors) return; /* empty (a stage without layers) */
  int64_t k = m->lay.unit_multiple > 1 ? m->lay.unit_multiple : 1;
  int64_t begin = m->tensors[first].offset;
  m->flat_numel = (m->flat_numel + k - 1) / k * k;
  if (m->n_units == b->unit_cap) {
    b->unit_cap = b->unit_cap ? 2 * b->unit_cap : 16;
    td_gpt_unit *grown = td_calloc((size_t)b->unit_cap * sizeof *grown);
    if (m->n_units) memcpy(grown, m->units, (size_t)m->n_units * sizeof *grown);
    td_free(m->units);
    m->units = grown;
  }
  m->units[m->n_units++] = (td_gpt_unit){.first_tensor = first, .n_tensors = m->n_tensors - first,
                                         .offset = begin, .numel = m->flat_numel - begin};
}

void td_gpt_build_tensors(td_gpt *m) {
  const td_gpt_config *c = &m->cfg;
  builder b = {m, 0, 0};
  m->wte = m->wpe = m->layer_first = m->lnf_w = m->lnf_b = m->head_w = -1;
  if (m->lay.has_embedding) {
    m->wte = add(&b, "embedding.word_embeddings.weight", 2, c->vocab_size, c->hidden, COLUMN,
                 c->init_std, 0);
    m->tensors[m->wte].embedding_or_output = 1;
    m->wpe = add(&b, "embedding.position_embeddings.weight", 2, c->max_positions, c->hidden,
                 REPLICATED, c->init_std, 0);
    end_unit(&b, m->wte);
  }
  m->layer_first = m->n_tensors;
  for (int64_t l = m->lay.layer_begin; l < m->lay.layer_end; l++) {
    int first = m->n_tensors;
    add_layer(&b, l);
    end_unit(&b, first);
  }
  if (m->lay.has_head) {
    int first = m->n_tensors;
    m->lnf_w = add(&b, "decoder.final_layernorm.weight", 1, c->hidden, 0, REPLICATED, 0, 1);
    m->lnf_b = add(&b, "decoder.final_layernorm.bias", 1, c->hidden, 0, REPLICATED, 0, 0);
    /* tied: the word embeddings; on a last pipeline stage without them, its own
     * copy under their name (drawn from the same stream, so equal at init; the
     * trainer keeps the two in step by summing their gradients, as Megatron's
     * embedding group does) */
    if (c->untie_embeddings)
      m->head_w = add(&b, "output_layer.weight", 2, c->vocab_size, c->hidden, COLUMN, c->init_std, 0);
    else
      m->head_w = m->wte >= 0 ? m->wte
                              : add(&b, "embedding.word_embeddings.weight", 2, c->vocab_size,
                                    c->hidden, COLUMN, c->init_std, 0);
    m->tensors[m->head_w].embedding_or_output = 1;
    end_unit(&b, first);
  }
  m->unit_of = td_malloc(sizeof *m->unit_of * (size_t)(m->n_tensors ? m->n_tensors : 1));
  for (int u = 0; u < m->n_units; u++)
    for (int i = 0; i < m->units[u].n_tensors; i++) m->unit_of[m->units[u].first_tensor + i] = u;
}

/* The tensors of lay restricted to layers [begin, end) (and its embedding and
 * head only when with_ends), built on a probe model: their count, flat
 * elements, parameters and largest tensor. */
static td_gpt_param_count probe(const td_gpt_config *cfg, const td_gpt_layout *lay, int64_t layers,
                                int with_ends) {
  td_gpt m;
  memset(&m, 0, sizeof m);
  m.cfg = *cfg, m.lay = *lay;
  m.lay.layer_end = m.lay.layer_begin + layers;
  if (!with_ends) m.lay.has_embedding = m.lay.has_head = 0;
  td_gpt_build_tensors(&m);
  td_gpt_param_count c = {(uint64_t)m.flat_numel, (uint64_t)m.num_params, (uint64_t)m.n_tensors, 0, 0};
  for (int i = 0; i < m.n_tensors; i++)
    if ((uint64_t)m.tensors[i].numel > c.largest) c.largest = (uint64_t)m.tensors[i].numel;
  for (int u = 0; u < m.n_units; u++)
    if ((uint64_t)m.units[u].numel > c.largest_unit) c.largest_unit = (uint64_t)m.units[u].numel;
  td_free(m.tensors), td_free(m.units), td_free(m.unit_of);
  return c;
}

/* Every layer has the same tensors and is a unit of its own (padded alike):
 * the flat buffer is the ends plus the layers times one layer. */
td_gpt_param_count td_gpt_count_params(const td_gpt_config *cfg, const td_gpt_layout *lay) {
  td_gpt_param_count ends = probe(cfg, lay, 0, 1), one = probe(cfg, lay, 1, 0);
  uint64_t layers = (uint64_t)(lay->layer_end - lay->layer_begin);
  td_gpt_param_count c = {
      .flat_numel = td_sat_add(ends.flat_numel, td_sat_mul(layers, one.flat_numel)),
      .num_params = td_sat_add(ends.num_params, td_sat_mul(layers, one.num_params)),
      .n_tensors = td_sat_add(ends.n_tensors, td_sat_mul(layers, one.n_tensors)),
      .largest = ends.largest > one.largest ? ends.largest : one.largest,
      .largest_unit = ends.largest_unit > one.largest_unit ? ends.largest_unit : one.largest_unit};
  return c;
}

/* Refuse (td_fail) what cannot be built: a parameter buffer and tensor table
 * beyond the memory available, then too many layers. (trident convert's
 * readers check their files' sizes under their own names first.) */
static void check_single(const td_gpt_config *cfg, const td_gpt_layout *lay) {
  char err[1024], detail[256], table[32];
  if (td_gpt_check_sizes(cfg, 0, NULL, err, sizeof err)) td_fail("%s", err);
  td_gpt_param_count c = td_gpt_count_params(cfg, lay);
  uint64_t table_bytes = td_sat_mul(td_sat_mul(c.n_tensors, 2), sizeof(td_gpt_tensor));
  td_bytes_text(table_bytes, table, sizeof table);
  snprintf(detail, sizeof detail, "%llu fp32 parameters in %lld layers, a table of %llu tensors: %s",
           (unsigned long long)c.num_params, (long long)cfg->num_layers,
           (unsigned long long)c.n_tensors, table);
  if (td_memory_check(td_sat_add(td_sat_mul(c.flat_numel, sizeof(float)), table_bytes), 1,
                      "the model", detail, err, sizeof err) ||
      td_gpt_check_layers(cfg, "the number of layers", err, sizeof err))
    td_fail("%s", err);
}

td_gpt_tensor *td_gpt_single_tensors(const td_gpt_config *cfg, int *n, int64_t *flat_numel) {
  td_gpt m;
  memset(&m, 0, sizeof m);
  m.cfg = *cfg;
  m.lay = td_gpt_layout_single(cfg);
  check_single(cfg, &m.lay);
  td_gpt_build_tensors(&m);
  *n = m.n_tensors;
  *flat_numel = m.flat_numel;
  td_free(m.units), td_free(m.unit_of);
  return m.tensors;
}

/* ------------------------------------------------------------------ init */

/* This rank's slice of the global tensor drawn element by element: element
 * (i, j) of the global [rows, cols] tensor is element i * cols + j of its stream. */
static void draw_slice(float *out, const td_gpt_tensor *t, uint64_t seed) {
  uint64_t stream = td_gpt_name_stream(t->name);
  int64_t cols = t->shape[1], lcols = t->local_shape[1];
  if (t->split_dim == ROW) {
    for (int64_t r = 0; r < t->local_shape[0]; r++)
      td_rng_fill_normal(out + r * lcols, lcols, seed, stream,
                         (uint64_t)(r * cols + t->slice_start), 0.0f, t->init_std);
  } else {
    int64_t first = t->split_dim == COLUMN ? t->slice_start * cols : 0;
    td_rng_fill_normal(out, t->numel, seed, stream, (uint64_t)first, 0.0f, t->init_std);
  }
}

void td_gpt_init_unit(td_gpt *m, int u, uint64_t seed, float *dst) {
  const td_device_ops *ops = m->dev->ops;
  const td_gpt_unit *un = &m->units[u];
  int64_t most = 0;
  for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++)
    if (m->tensors[i].numel > most) most = m->tensors[i].numel;
  float *host = td_malloc((size_t)most * sizeof(float));
  ops->fill(m->dev, dst, TD_F32, un->numel, 0.0f);
  for (int i = un->first_tensor; i < un->first_tensor + un->n_tensors; i++) {
    const td_gpt_tensor *t = &m->tensors[i];
    float *p = dst + (t->offset - un->offset);
    if (t->init_std > 0) {
      draw_slice(host, t, seed);
      ops->copy_h2d(m->dev, p, host, (size_t)t->numel * sizeof(float));
    } else {
      ops->fill(m->dev, p, TD_F32, t->numel, t->init_value);
    }
  }
  td_free(host);
}

void td_gpt_init_params(td_gpt *m, uint64_t seed) {
  TD_CHECK(m->params, "td_gpt_init_params: the model has no flat parameters (ZeRO-3 initialises "
                      "its shards with td_gpt_init_unit)");
  for (int u = 0; u < m->n_units; u++) td_gpt_init_unit(m, u, seed, m->params + m->units[u].offset);
  td_gpt_cast_weights(m);
}

/* ------------------------------------------------------------------ access */

float *td_gpt_params(td_gpt *m) { return m->params; }
void *td_gpt_weights(td_gpt *m) { return m->weights_lp; }
float *td_gpt_grads(td_gpt *m) { return m->grads; }
int64_t td_gpt_flat_numel(const td_gpt *m) { return m->flat_numel; }
int64_t td_gpt_num_params(const td_gpt *m) { return m->num_params; }
int td_gpt_num_tensors(const td_gpt *m) { return m->n_tensors; }
const td_gpt_config *td_gpt_get_config(const td_gpt *m) { return &m->cfg; }
td_device *td_gpt_device(const td_gpt *m) { return m->dev; }
td_dtype td_gpt_compute_dtype(const td_gpt *m) { return m->cd; }

int td_gpt_num_units(const td_gpt *m) { return m->n_units; }
const td_gpt_unit *td_gpt_unit_at(const td_gpt *m, int u) {
  TD_CHECK(u >= 0 && u < m->n_units, "unit %d of %d", u, m->n_units);
  return &m->units[u];
}
int td_gpt_unit_of(const td_gpt *m, int tensor) {
  TD_CHECK(tensor >= 0 && tensor < m->n_tensors, "tensor %d of %d", tensor, m->n_tensors);
  return m->unit_of[tensor];
}

const td_gpt_tensor *td_gpt_tensor_at(const td_gpt *m, int i) {
  TD_CHECK(i >= 0 && i < m->n_tensors, "tensor %d of %d", i, m->n_tensors);
  return &m->tensors[i];
}

const td_gpt_tensor *td_gpt_find_tensor(const td_gpt *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}
