/* The whole model's gradient against finite differences of its loss, on a tiny
   configuration with dropout on (the masks are a function of the sample, so the loss is a
   deterministic function of the parameters), for GPT and for BERT (pre-LN and post-LN, with
   and without the binary head). Also: recomputation gives the same gradients, and BERT's
   padding changes nothing. */
#include <mpi.h>
#include <string.h>

#include "mgt/train.h"
#include "mgt/backend.h"
#include "mgt/data.h"
#include "mgt/gpt.h"
#include "mgt/gpt_impl.h"
#include "mgt/grid.h"
#include "mgt/tasks.h"
#include "testutil.h"

static mgt_config tiny(void) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.attention_backend = MGT_ATTN_UNFUSED; /* the flash tests compare against this one */
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.seq_length = 5;
  c.max_position_embeddings = 7;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  c.micro_batch_size = 2;
  c.hidden_dropout = 0.2;
  c.attention_dropout = 0.2;
  c.init_method_std = 0.3; /* large enough that every path carries gradient */
  c.mock_data = 1;
  return c;
}

static const int32_t tokens[2 * 6] = {1, 4, 7, 10, 2, 5, 3, 3, 9, 0, 6, 6};
enum { SAMPLE_BASE = 17 };

/* BERT rows (data.h) of T = 8: a full sample and one with two padding positions. */
enum { BT = 8, BW = 3 * BT + 2 };
static int32_t bert_rows[2 * BW];
static void make_bert_rows(void) {
  const int32_t tok[2][BT] = {{2, 5, 4, 3, 7, 4, 9, 3}, {2, 8, 3, 6, 4, 3, 0, 0}};
  const int32_t typ[2][BT] = {{0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 0, 1, 1, 1, 0, 0}};
  const int32_t lab[2][BT] = {{-1, -1, 6, -1, -1, 10, -1, -1}, {-1, -1, -1, -1, 1, -1, -1, -1}};
  const int32_t len[2] = {8, 6}, sop[2] = {1, 0};
  for (int b = 0; b < 2; b++) {
    int32_t *r = bert_rows + b * BW;
    memcpy(r + MGT_BERT_TOKENS * BT, tok[b], sizeof tok[b]);
    memcpy(r + MGT_BERT_TYPES * BT, typ[b], sizeof typ[b]);
    memcpy(r + MGT_BERT_LABELS * BT, lab[b], sizeof lab[b]);
    r[mgt_bert_length_at(BT)] = len[b];
    r[mgt_bert_random_at(BT)] = sop[b];
  }
}

/* Llama's block on any model: RMSNorm, SwiGLU, no linear biases, 4 heads in 2 key/value
   groups. */
static void llama_block(mgt_config *c) {
  c->normalization = MGT_NORM_RMSNORM, c->swiglu = 1, c->disable_bias_linear = 1;
  c->num_attention_heads = 4, c->group_query_attention = 1, c->num_query_groups = 2;
}

static mgt_config tiny_bert(int post_ln, int binary) {
  mgt_config c = tiny();
  c.model = MGT_MODEL_BERT;
  c.seq_length = BT;
  c.max_position_embeddings = 9;
  c.apply_residual_connection_post_layernorm = post_ln;
  c.bert_no_binary_head = !binary;
  return c;
}

/* Fine-tuning rows: the two BERT rows, their labels the class (MNLI: 2 examples of 1 row) or,
   for RACE, one example of 4 rows (the two rows twice, the answer option 2). */
static int32_t task_rows[4 * BW];
static void make_task_rows(int task) {
  const int rows = mgt_task_rows(task);
  for (int k = 0; k < 2 * rows / (rows > 1 ? 2 : 1) && k < 4; k++) {
    int32_t *r = task_rows + k * BW;
    memcpy(r, bert_rows + (k % 2) * BW, sizeof(int32_t) * BW);
    for (int t = 0; t < BT; t++)
      r[MGT_BERT_LABELS * BT + t] = -1;
    r[mgt_bert_random_at(BT)] = task == MGT_TASK_RACE ? 2 : (k == 0 ? 2 : 0);
  }
}

static double loss_of(mgt_gpt *m) {
  double ls = 0;
  if (mgt_gpt_get_dims(m)->spec.task) {
    mgt_task_result r;
    T_OK(mgt_task_forward_backward(m, task_rows, SAMPLE_BASE, 1.0f, 0, 0, &r));
    return r.loss_sum;
  }
  if (mgt_gpt_get_dims(m)->spec.masked_lm) {
    mgt_bert_losses l;
    T_OK(mgt_bert_forward_backward(m, bert_rows, SAMPLE_BASE, 1.0f, 1.0f, 0, 0, &l));
    return l.lm_sum + l.sop_sum;
  }
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &ls));
  const mgt_model_spec *s = &mgt_gpt_get_dims(m)->spec;
  if (s->experts) { /* the auxiliary losses, summed over the MoE layers, are in the objective */
    double aux[2];
    int layers = 0;
    mgt_gpt_aux_losses(m, aux);
    for (int l = 0; l < s->layers; l++)
      layers += mgt_model_is_moe_layer(s, l);
    ls += layers * (aux[0] + aux[1]);
  }
  return ls;
}

static void test_gradient(mgt_gpt *m) {
  int np;
  const mgt_param *params = mgt_gpt_params(m, &np);
  float *w = mgt_gpt_param_data(m), *g = mgt_gpt_grad_data(m);
  size_t n = mgt_gpt_param_count(m);
  /* twice: a pass without accumulate must write every gradient, not add to the last one's */
  loss_of(m);
  loss_of(m);
  float *grad = malloc(n * sizeof(float));
  memcpy(grad, g, n * sizeof(float));
  const double h = 1e-2;
  for (int i = 0; i < np; i++) {
    const mgt_param *p = &params[i];
    if (strstr(p->name, "expert_bias")) { /* it chooses experts only: no gradient, by design */
      for (size_t k = 0; k < p->numel; k++)
        T_CHECK(grad[p->offset + k] == 0.0f, "%s has a gradient", p->name);
      continue;
    }
    /* direction: random unit vector inside this tensor */
    double *dir = calloc(p->numel, sizeof(double)), nrm = 0, gd = 0;
    for (size_t k = 0; k < p->numel; k++) {
      dir[k] = t_randn();
      nrm += dir[k] * dir[k];
    }
    nrm = sqrt(nrm);
    float *save = malloc(p->numel * sizeof(float));
    memcpy(save, w + p->offset, p->numel * sizeof(float));
    for (size_t k = 0; k < p->numel; k++) {
      dir[k] /= nrm;
      gd += dir[k] * grad[p->offset + k];
    }
    for (size_t k = 0; k < p->numel; k++)
      w[p->offset + k] = (float)(save[k] + h * dir[k]);
    double lp = loss_of(m);
    for (size_t k = 0; k < p->numel; k++)
      w[p->offset + k] = (float)(save[k] - h * dir[k]);
    double lm = loss_of(m);
    memcpy(w + p->offset, save, p->numel * sizeof(float));
    double fd = (lp - lm) / (2 * h);
    T_CHECK(fabs(fd - gd) <= 2e-3 + 1e-2 * fabs(gd),
            "%s: directional derivative %.6g, finite difference %.6g", p->name, gd, fd);
    /* and the element with the largest gradient */
    size_t best = 0;
    for (size_t k = 0; k < p->numel; k++)
      if (fabsf(grad[p->offset + k]) > fabsf(grad[p->offset + best])) best = k;
    float x0 = w[p->offset + best];
    w[p->offset + best] = (float)(x0 + h);
    lp = loss_of(m);
    w[p->offset + best] = (float)(x0 - h);
    lm = loss_of(m);
    w[p->offset + best] = x0;
    fd = (lp - lm) / (2 * h);
    double an = grad[p->offset + best];
    T_CHECK(fabs(fd - an) <= 2e-3 + 2e-2 * fabs(an),
            "%s[%zu]: gradient %.6g, finite difference %.6g", p->name, best, an, fd);
    free(dir), free(save);
  }
  free(grad);
}

/* Rotary frequencies: base^(-2i/hd), and Llama 3.1's rescaling written as Hugging Face writes it
   (masks over the wavelengths: long ones divided by the factor, short ones kept, the band
   between smoothed), with the properties that define it: continuous at both edges of the band
   and strictly between f/factor and f inside it. */
static void test_rope_frequencies(void) {
  const int hd = 128;
  float f[64], s[64];
  mgt_model_spec c = {.pos = MGT_POS_ROPE, .head_size = hd, .rope_base = 500000};
  mgt_gpt_rope_frequencies(&c, f);
  c.rope_scaling = 1, c.rope_factor = 8;
  mgt_gpt_rope_frequencies(&c, s);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < hd / 2; i++) {
    const double inv = pow(500000.0, -(double)(2 * i) / hd), wl = 2 * 3.14159265358979323846 / inv;
    const double lo = inv / 8, sm = (8192 / wl - 1) / (4 - 1);
    const double llama = wl > 8192 ? lo : inv; /* where(wavelen > low_freq_wavelen, ...) */
    const double medium = !(wl < 8192 / 4.0) && !(wl > 8192);
    const double want = medium ? (1 - sm) * llama / 8 + sm * llama : llama;
    T_CHECK(fabs(f[i] - inv) <= 1e-7 * inv, "frequency %d: %.9g, want %.9g", i, f[i], inv);
    T_CHECK(fabs(s[i] - want) <= 1e-7 * want, "scaled frequency %d: %.9g, want %.9g", i, s[i],
            want);
    if (medium)
      T_CHECK(s[i] > lo * (1 - 1e-7) && s[i] < inv * (1 + 1e-7), "frequency %d outside its band",
              i);
    kept += s[i] == f[i], divided += wl > 8192, smoothed += (int)medium;
  }
  T_CHECK(kept > 0 && divided > 0 && smoothed > 0,
          "Llama 3.1's scaling at base 500000, hd 128: %d kept, %d divided, %d smoothed", kept,
          divided, smoothed);
}

/* Whether the model has a parameter of this name and full shape (ndim -1: has none of it). */
static int has_param(mgt_gpt *m, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2) {
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  for (int i = 0; i < np; i++) {
    if (strcmp(p[i].name, name) != 0) continue;
    const int64_t *f = p[i].shard.full;
    return p[i].shard.ndim == ndim && f[0] == d0 && (ndim < 2 || f[1] == d1) &&
           (ndim < 3 || f[2] == d2);
  }
  return ndim < 0;
}

static void test_accumulate(mgt_gpt *m);

/* Documents packed in a sample (--reset-position-ids with --reset-attention-mask): a document
   after an end of document (id 8) scores as it does alone at the start of a sample, as the
   float64 sum of its tokens' losses (row 0's inputs 3 and 4 against row 1's 0 and 1); with the
   positions reset alone it does not, nor with the attention kept apart alone under learned
   positions (rotary ones see relative positions only: there it does). Then the gradient
   against finite differences. */
static void test_documents(mgt_gpt *m, const mgt_config *c) {
  static const int32_t two[2 * 6] = {5, 1, 8, 6, 2, 9, 6, 2, 9, 4, 3, 7};
  const int T = c->seq_length;
  double gap[3];
  for (int k = 0; k < 3; k++) { /* both flags, positions only, attention only */
    mgt_gpt_training t = mgt_train_model_options(c);
    t.reset_positions = k != 2 ? 8 : -1, t.reset_attention = k != 1 ? 8 : -1;
    T_OK(mgt_gpt_train_with(m, &t));
    float l[2 * 5];
    T_OK(mgt_gpt_forward_losses(m, two, l));
    const double packed = (double)l[3] + l[4], alone = (double)l[T] + l[T + 1];
    gap[k] = fabs(packed - alone) / alone;
  }
  T_CHECK(gap[0] <= 1e-6, "a packed document scores %.3g off its score alone", gap[0]);
  T_CHECK(gap[1] > 1e-4, "positions reset alone, a packed document scores as alone: no test");
  if (c->position_embedding_type == MGT_POS_ROPE) /* rotations see relative positions only */
    T_CHECK(gap[2] <= 1e-6, "rotary, attention kept apart: %.3g off alone", gap[2]);
  else
    T_CHECK(gap[2] > 1e-4, "learned positions, attention kept apart alone: scores as alone");
  mgt_gpt_training t = mgt_train_model_options(c);
  t.reset_positions = t.reset_attention = 9; /* row 1: documents 3 3 9 and 0 6 */
  T_OK(mgt_gpt_train_with(m, &t));
  test_gradient(m);
  t.reset_positions = t.reset_attention = -1;
  T_OK(mgt_gpt_train_with(m, &t));
}

/* --sft's flags (include/mgt/data.h): row 0 packs the document 6 2 9 after 5 1 8, flagged as
   starting there, so it scores as alone (row 1 of the plain batch), the target starting it has no
   loss, and the first document scores as in the plain batch; row 1 starts a document at 0 and
   masks two targets (their losses 0, the others as in the plain batch). The loss units count the
   7 targets left. */
static void test_doc_flags(mgt_gpt *m, const mgt_config *c) {
  const int T = c->seq_length;
  const int32_t D = MGT_TOKEN_DOC_START, N = MGT_TOKEN_NO_LOSS;
  const int32_t packed[2 * 6] = {5, 1, 8, 6 | D, 2, 9, 6 | D, 2 | N, 9, 4, 3 | N, 7};
  const int32_t plain[2 * 6] = {5, 1, 8, 6, 2, 9, 6, 2, 9, 4, 3, 7};
  mgt_gpt_training t = mgt_train_model_options(c);
  t.doc_flags = 1;
  T_OK(mgt_gpt_train_with(m, &t));
  float lf[2 * 5], lp[2 * 5];
  T_OK(mgt_gpt_forward_losses(m, packed, lf));
  double units[2] = {0, 0};
  mgt_gpt_loss_units(m, packed, 2, units);
  t.doc_flags = 0;
  T_OK(mgt_gpt_train_with(m, &t));
  T_OK(mgt_gpt_forward_losses(m, plain, lp));
  const double alone = (double)lp[T] + lp[T + 1], packed_doc = (double)lf[3] + lf[4];
  T_CHECK(fabs(packed_doc - alone) <= 1e-6 * alone, "a flagged document scores %.9g, alone %.9g",
          packed_doc, alone);
  T_CHECK(fabs(lf[0] - lp[0]) <= 1e-6 * lp[0] && fabs(lf[1] - lp[1]) <= 1e-6 * lp[1],
          "the document before a flagged one scores %g %g, not %g %g", lf[0], lf[1], lp[0], lp[1]);
  T_CHECK(lf[2] == 0 && lf[T] == 0 && lf[T + 3] == 0,
          "masked targets and a document's first token have losses %g %g %g, not 0", lf[2], lf[T],
          lf[T + 3]);
  for (int k = 1; k < 5; k++)
    if (k != 3)
      T_CHECK(fabs(lf[T + k] - lp[T + k]) <= 1e-6 * lp[T + k],
              "row 1 target %d: %g with flags, %g without", k, lf[T + k], lp[T + k]);
  T_CHECK(units[0] == 7, "%g loss units, not the 7 targets left", units[0]);
}

/* --reset-position-ids with learned positions: both rows end a document at their second input
   (id 8), so their positions are 0 1 0 1 2; the loss is bit for bit that of the model without
   the reset whose position table's rows 0..4 are the rows of those positions. Then the gradient
   against finite differences, which checks the positions' gradient rows too. */
static void test_reset_positions(mgt_gpt *m, const mgt_config *c) {
  static const int32_t two[2 * 6] = {5, 8, 1, 2, 6, 7, 3, 8, 9, 4, 0, 2};
  static const int pos[5] = {0, 1, 0, 1, 2};
  mgt_gpt_training t = mgt_train_model_options(c);
  t.reset_positions = 8;
  T_OK(mgt_gpt_train_with(m, &t));
  double reset = 0, moved = 0;
  T_OK(mgt_gpt_forward(m, two, &reset));
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  int wpe = -1;
  for (int i = 0; i < np; i++)
    if (!strcmp(p[i].name, "embedding.position_embeddings.weight")) wpe = i;
  T_CHECK(wpe >= 0, "a learned position table");
  if (wpe < 0) return;
  float *w = mgt_gpt_param_data(m) + p[wpe].offset, rows[5 * 8];
  const int C = c->hidden_size;
  for (int k = 0; k < 5; k++)
    memcpy(rows + k * C, w + pos[k] * C, sizeof(float) * (size_t)C);
  t.reset_positions = -1;
  T_OK(mgt_gpt_train_with(m, &t)); /* the same initialization, then the table's rows moved */
  w = mgt_gpt_param_data(m) + p[wpe].offset;
  memcpy(w, rows, sizeof(float) * 5 * (size_t)C);
  T_OK(mgt_gpt_forward(m, two, &moved));
  T_CHECK(reset == moved, "positions reset after the end of document: loss %.9g, not %.9g", reset,
          moved);
  t.reset_positions = 3;
  T_OK(mgt_gpt_train_with(m, &t));
  test_gradient(m);
  t.reset_positions = -1;
  T_OK(mgt_gpt_train_with(m, &t));
}

/* --eod-mask-loss: taking each id x in turn as the end of document drops the losses of the
   positions whose input is x, so the V masked losses sum to (V - 1) times the whole loss, each
   no more than it (equal where x is no input); the loss units count the other positions; and
   the gradient of a masked loss (x = 3, twice an input) against finite differences. */
static void test_eod_mask(mgt_gpt *m, const mgt_config *c) {
  mgt_gpt_training t = mgt_train_model_options(c);
  const int V = c->vocab_size, T = c->seq_length;
  double all = 0, sum = 0;
  T_OK(mgt_gpt_train_with(m, &t));
  T_OK(mgt_gpt_forward(m, tokens, &all));
  for (int x = 0; x < V; x++) {
    t.eod_mask = x;
    T_OK(mgt_gpt_train_with(m, &t));
    double l = 0, units[2] = {0, 0};
    T_OK(mgt_gpt_forward(m, tokens, &l));
    mgt_gpt_loss_units(m, tokens, 2, units);
    int inputs = 0;
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < T; k++)
        inputs += tokens[r * (T + 1) + k] == x;
    T_CHECK(units[0] == 2 * T - inputs, "eod %d: %g units, not %d", x, units[0], 2 * T - inputs);
    T_CHECK(inputs ? l < all : l == all, "eod %d (%d inputs): loss %.9g, unmasked %.9g", x, inputs,
            l, all);
    sum += l;
  }
  T_CHECK(fabs(sum - (V - 1) * all) <= 1e-5 * V * all,
          "the masked losses sum to %.9g, not (V - 1) x %.9g", sum, all);
  /* a batch of end-of-document tokens only: no loss, no unit, a zero gradient, no NaN */
  int32_t eods[2 * 6];
  for (int i = 0; i < 2 * (T + 1); i++)
    eods[i] = 5;
  t.eod_mask = 5;
  T_OK(mgt_gpt_train_with(m, &t));
  double l = -1, units[2] = {0, 0};
  mgt_gpt_loss_units(m, eods, 2, units);
  T_OK(mgt_gpt_forward_backward(m, eods, SAMPLE_BASE, 0.0f, 0, 0, &l));
  const float *g = mgt_gpt_grad_data(m);
  size_t bad = 0;
  for (size_t i = 0; i < mgt_gpt_param_count(m); i++)
    bad += g[i] != 0.0f;
  T_CHECK(l == 0 && units[0] == 0 && bad == 0,
          "ends of documents only: loss %g, %g units, %zu nonzero gradients", l, units[0], bad);
  t.eod_mask = 3;
  T_OK(mgt_gpt_train_with(m, &t));
  test_gradient(m);
  t.eod_mask = -1;
  T_OK(mgt_gpt_train_with(m, &t));
}
static void test_expert_bias(mgt_gpt *m);

/* The logical parameters of the model's tensors (full shapes, vocabulary without padding). */
static int64_t full_params(mgt_gpt *m) {
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  int64_t n = 0;
  for (int i = 0; i < np; i++) {
    int64_t k = 1;
    for (int j = 0; j < p[i].shard.ndim; j++)
      k *= p[i].shard.full[j];
    n += k;
  }
  return n;
}

/* mgt_gpt_logical_params (plans, FLOPs, the log) against the tensors the model holds */
static void check_count(mgt_gpt *m, const mgt_config *c, const char *what) {
  T_CHECK(full_params(m) == mgt_gpt_logical_params(c),
          "%s: %lld parameters in the tensors, %lld "
          "counted",
          what, (long long)full_params(m), (long long)mgt_gpt_logical_params(c));
}

/* A model from its spec and a layout alone (inference: no training configuration): parameters
   zero until written; given the trained model's parameters it scores as that model does, bit
   for bit, with no dropout; a trainer's options turn dropout and the seed's initialization on. */
static void test_spec_create(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *trained = NULL, *m = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &trained));
  mgt_model_spec spec;
  T_OK(mgt_model_describe(&c, &spec));
  const mgt_model_layout layout = mgt_model_layout_of(&c);
  T_OK(mgt_gpt_create(&spec, &layout, grid, be, comm, &m));
  const size_t n = mgt_gpt_param_count(m);
  T_CHECK(n == mgt_gpt_param_count(trained), "%zu parameters, the trainer's model %zu", n,
          mgt_gpt_param_count(trained));
  float *w = malloc(sizeof(float) * n);
  memcpy(w, mgt_gpt_param_data(m), sizeof(float) * n);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++)
    nonzero += w[i] != 0.0f;
  T_CHECK(nonzero == 0, "a created model has %zu nonzero parameters before any is written",
          nonzero);
  memcpy(mgt_gpt_param_data(m), mgt_gpt_param_data(trained), sizeof(float) * n);
  float la[10], lb[10];
  T_OK(mgt_gpt_forward_losses(trained, tokens, la));
  T_OK(mgt_gpt_forward_losses(m, tokens, lb));
  T_CHECK(memcmp(la, lb, sizeof la) == 0, "the spec's model scores otherwise than the trainer's");
  /* no dropout without a trainer: two training steps' losses equal the forward's */
  double sum = 0, sum2 = 0;
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &sum));
  T_OK(mgt_gpt_forward_backward(trained, tokens, SAMPLE_BASE, 1.0f, 0, 0, &sum2));
  double fwd = 0;
  for (int i = 0; i < 10; i++)
    fwd += la[i];
  T_CHECK(fabs(sum - fwd) <= 1e-5 * fabs(fwd) && fabs(sum2 - fwd) > 1e-3 * fabs(fwd),
          "forward-backward: %.9g without a trainer, %.9g with dropout 0.2, forward %.9g", sum,
          sum2, fwd);
  /* the trainer's options: its seed's initialization, as the trainer's model */
  const mgt_gpt_training t = mgt_train_model_options(&c);
  T_OK(mgt_gpt_train_with(m, &t));
  T_CHECK(memcmp(mgt_gpt_param_data(m), mgt_gpt_param_data(trained), sizeof(float) * n) == 0,
          "mgt_gpt_train_with does not initialize from the seed as the trainer does");
  free(w);
  mgt_gpt_destroy(&m);
  mgt_gpt_destroy(&trained);
}

/* A block's checks: its parameter count, every gradient against finite differences and
   accumulation; then (m destroyed) the gradients again with flash attention. */
static void check_block(mgt_gpt *m, mgt_config *c, const char *what, mgt_grid *grid,
                        mgt_backend *be, mgt_comm *comm) {
  check_count(m, c, what);
  test_gradient(m);
  test_accumulate(m);
  mgt_gpt_destroy(&m);
  mgt_config f = *c;
  f.attention_backend = MGT_ATTN_FLASH;
  T_OK(mgt_train_model_create(&f, grid, be, comm, &m));
  test_gradient(m);
  mgt_gpt_destroy(&m);
}

/* Llama-style decoders: every gradient against finite differences and accumulation, for the
   whole block (rotary, untied, RMSNorm, SwiGLU, grouped-query attention, no biases; with
   materialized and flash attention) and for each new part alone beside GPT-2's (the key/value
   and SwiGLU biases exist only there). */
static void test_llama(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  llama_block(&c);
  c.position_embedding_type = MGT_POS_ROPE, c.untie_embeddings_and_output_weights = 1;
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *m = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  /* hidden 8 over 4 heads: head size 2, 2 groups of keys and values of 4 floats */
  T_CHECK(has_param(m, "layers.1.attention.query.weight", 2, 8, 8, 0) &&
              has_param(m, "layers.1.attention.key_value.weight", 3, 2, 4, 8) &&
              has_param(m, "layers.1.mlp.gate.weight", 2, 12, 8, 0) &&
              has_param(m, "layers.1.mlp.up.weight", 2, 12, 8, 0) &&
              has_param(m, "layers.1.input_layernorm.weight", 1, 8, 0, 0) &&
              has_param(m, "layers.1.input_layernorm.bias", -1, 0, 0, 0) &&
              has_param(m, "layers.1.attention.qkv.weight", -1, 0, 0, 0) &&
              has_param(m, "layers.1.attention.dense.bias", -1, 0, 0, 0) &&
              has_param(m, "layers.1.mlp.up.bias", -1, 0, 0, 0) &&
              has_param(m, "final_layernorm.bias", -1, 0, 0, 0),
          "Llama's layer: query (8,8), key_value (2,4,8), gate and up (12,8), norm weights only, "
          "no biases");
  check_block(m, &c, "Llama", grid, be, comm);
  mgt_config g = tiny(); /* grouped attention with LayerNorm, biases and GeLU */
  g.num_attention_heads = 4, g.group_query_attention = 1, g.num_query_groups = 1;
  T_OK(mgt_config_finalize(&g, 1));
  /* a layer keeps the groups' projection (8 + 2 x 2 floats a row, not 24), and one shared
     buffer holds them repeated for the heads */
  mgt_config ug = g;
  ug.group_query_attention = 0, ug.num_query_groups = 0;
  mgt_gpt_memory mg, mu;
  mgt_gpt_memory_plan(&g, 1, &mg);
  mgt_gpt_memory_plan(&ug, 1, &mu);
  const long r16 = 16, rows = 2 * 5, kept = (rows * 12 + r16 - 1) / r16 * r16,
             full = (rows * 24 + r16 - 1) / r16 * r16;
  T_CHECK((long)mg.activations_full - (long)mu.activations_full == 4 * (full - 2 * (full - kept)),
          "grouped activations: %zu bytes, ungrouped %zu", mg.activations_full,
          mu.activations_full);
  T_OK(mgt_train_model_create(&g, grid, be, comm, &m));
  T_CHECK(has_param(m, "layers.0.attention.query.bias", 1, 8, 0, 0) &&
              has_param(m, "layers.0.attention.key_value.bias", 2, 2, 2, 0),
          "grouped attention with biases: query.bias (8) and key_value.bias (2,2)");
  check_count(m, &g, "grouped");
  test_gradient(m);
  mgt_gpt_destroy(&m);
  mgt_config w = tiny(); /* SwiGLU with biases, RMSNorm, learned positions */
  w.swiglu = 1, w.normalization = MGT_NORM_RMSNORM;
  T_OK(mgt_config_finalize(&w, 1));
  T_OK(mgt_train_model_create(&w, grid, be, comm, &m));
  T_CHECK(has_param(m, "layers.0.mlp.gate.bias", 1, 12, 0, 0) &&
              has_param(m, "layers.0.mlp.up.bias", 1, 12, 0, 0),
          "SwiGLU with biases: gate.bias and up.bias (12)");
  check_count(m, &w, "SwiGLU");
  test_gradient(m);
  test_accumulate(m);
  mgt_gpt_destroy(&m);
  mgt_config b = tiny(); /* GPT-2's block without its biases */
  b.disable_bias_linear = 1;
  T_OK(mgt_config_finalize(&b, 1));
  T_OK(mgt_train_model_create(&b, grid, be, comm, &m));
  T_CHECK(has_param(m, "layers.0.mlp.dense_h_to_4h.bias", -1, 0, 0, 0) &&
              has_param(m, "layers.0.input_layernorm.bias", 1, 8, 0, 0),
          "--disable-bias-linear keeps the LayerNorms' biases only");
  test_gradient(m);
  mgt_gpt_destroy(&m);
}

/* Qwen 3's block (a head size of its own, RMSNorm over each head's q and k before the rotary
   positions, also with zero-centred gains) and Qwen 2's (biases in the QKV projection only):
   every gradient against finite differences, with materialized and flash attention. */
static void test_qwen(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  llama_block(&c);
  c.position_embedding_type = MGT_POS_ROPE, c.untie_embeddings_and_output_weights = 1;
  c.qk_layernorm = 1, c.kv_channels = 4; /* 4 heads of 4: attention 16 wide at hidden 8 */
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *m = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  T_CHECK(has_param(m, "layers.1.attention.query.weight", 2, 16, 8, 0) &&
              has_param(m, "layers.1.attention.key_value.weight", 3, 2, 8, 8) &&
              has_param(m, "layers.1.attention.dense.weight", 2, 8, 16, 0) &&
              has_param(m, "layers.1.attention.q_layernorm.weight", 1, 4, 0, 0) &&
              has_param(m, "layers.1.attention.k_layernorm.weight", 1, 4, 0, 0) &&
              has_param(m, "layers.1.attention.query.bias", -1, 0, 0, 0),
          "Qwen 3's layer: query (16,8), key_value (2,8,8), dense (8,16), q and k norms (4)");
  check_block(m, &c, "Qwen 3", grid, be, comm);
  c.apply_layernorm_1p = 1;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  test_gradient(m);
  mgt_gpt_destroy(&m);
  mgt_config q2 = tiny();
  llama_block(&q2);
  q2.position_embedding_type = MGT_POS_ROPE, q2.add_qkv_bias = 1;
  T_OK(mgt_config_finalize(&q2, 1));
  T_OK(mgt_train_model_create(&q2, grid, be, comm, &m));
  T_CHECK(has_param(m, "layers.0.attention.query.bias", 1, 8, 0, 0) &&
              has_param(m, "layers.0.attention.key_value.bias", 2, 2, 4, 0) &&
              has_param(m, "layers.0.attention.dense.bias", -1, 0, 0, 0) &&
              has_param(m, "layers.0.mlp.gate.bias", -1, 0, 0, 0),
          "Qwen 2's layer: query.bias (8) and key_value.bias (2,4), no other bias");
  check_count(m, &q2, "Qwen 2");
  test_gradient(m);
  mgt_gpt_destroy(&m);
}

/* Mixture-of-Experts layers: every gradient against finite differences of the loss plus the
   load-balancing and z-losses, with the router's weights scaled up (logits of order 1, so that
   no perturbation changes a token's experts): softmax top-2 of 4 in every layer; pre-softmax
   top-1 of 16 (experts that get no token) in layer 1 only; sigmoid top-3 of 6 scaled, GeLU
   experts, capacity 1 by position; capacity 0.5 by probability; the second and the last with
   the load-balancing loss of each sequence (seq_aux_loss); a shared expert in the first (with
   its gate) and the third; OLMoE's q/k norms over all heads in the last. */
static void test_moe(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  /* E, k, score, pre, GeLU, capacity x 10, policy, freq */
  const int cases[][8] = {{4, 2, 0, 0, 0, 0, 0, 1},
                          {16, 1, 0, 1, 0, 0, 0, 2},
                          {6, 3, 1, 0, 1, 10, 1, 1},
                          {4, 2, 0, 0, 0, 5, 0, 1}};
  for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
    mgt_config c = tiny();
    if (!cases[q][4]) llama_block(&c);
    c.disable_bias_linear = 1;
    c.num_experts = cases[q][0], c.moe_router_topk = cases[q][1];
    c.moe_router_score_function = cases[q][2], c.moe_router_pre_softmax = cases[q][3];
    c.moe_expert_capacity_factor = cases[q][5] / 10.0, c.moe_token_drop_policy = cases[q][6];
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, cases[q][7] == 2 ? "[0,1]" : "1");
    c.moe_ffn_hidden_size = 6, c.moe_aux_loss_coeff = 0.1, c.moe_z_loss_coeff = 0.001;
    if (q == 2) c.moe_router_topk_scaling_factor = 2.5, c.moe_router_enable_expert_bias = 1;
    if (q == 0 || q == 2) c.moe_shared_expert_intermediate_size = 10; /* SwiGLU, GeLU */
    if (q == 0) c.moe_shared_expert_gate = 1;
    if (q == 3) c.qk_layernorm = 1, c.qk_layernorm_full = 1; /* OLMoE's, over all heads */
    if (q == 1 || q == 3) c.moe_router_load_balancing_type = MGT_MOE_LB_SEQ_AUX; /* a sequence's */
    T_OK(mgt_config_finalize(&c, 1));
    mgt_gpt *m = NULL;
    T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
    int np;
    const mgt_param *p = mgt_gpt_params(m, &np);
    float *w = mgt_gpt_param_data(m);
    int routers = 0;
    for (int i = 0; i < np; i++)
      if (strstr(p[i].name, "mlp.router.weight")) {
        routers++;
        for (size_t k = 0; k < p[i].numel; k++)
          w[p[i].offset + k] *= 20.0f;
      }
    T_CHECK(routers == (cases[q][7] == 2 ? 1 : 2), "case %zu: %d routers", q, routers);
    T_CHECK(has_param(m, "layers.1.mlp.experts.dense_4h_to_h.weight", 3, cases[q][0], 8, 6),
            "case %zu: the experts' second projection is [E, C, F]", q);
    T_CHECK(q != 0 || (has_param(m, "layers.1.mlp.shared_expert.up.weight", 2, 10, 8, 0) &&
                       has_param(m, "layers.1.mlp.shared_expert_gate.weight", 2, 1, 8, 0)),
            "a SwiGLU shared expert [10, C] and its gate [1, C]");
    T_CHECK(q != 2 ||
                (has_param(m, "layers.1.mlp.shared_expert.dense_4h_to_h.weight", 2, 8, 10, 0) &&
                 has_param(m, "layers.1.mlp.shared_expert_gate.weight", -1, 0, 0, 0)),
            "a GeLU shared expert [C, 10] without a gate");
    check_count(m, &c, "MoE");
    test_gradient(m);
    test_accumulate(m);
    if (c.moe_router_enable_expert_bias) test_expert_bias(m);
    mgt_gpt_destroy(&m);
  }
}

/* Aux-loss-free balancing: a bias of +10 on expert 0 and -10 on expert 1 sends every token to
   expert 0 and none to expert 1; the update moves them a step of the rate back toward the mean. */
static void test_expert_bias(mgt_gpt *m) {
  double ls;
  T_OK(mgt_gpt_update_expert_bias(m, 0.0)); /* forgets the counts of the tests before */
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  float *w = mgt_gpt_param_data(m);
  for (int i = 0; i < np; i++)
    if (strstr(p[i].name, "expert_bias")) w[p[i].offset] = 10.0f, w[p[i].offset + 1] = -10.0f;
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &ls));
  T_OK(mgt_gpt_update_expert_bias(m, 0.25));
  w = mgt_gpt_param_data(m);
  int seen = 0;
  for (int i = 0; i < np; i++)
    if (strstr(p[i].name, "expert_bias")) {
      seen++;
      T_CHECK(w[p[i].offset] == 9.75f && w[p[i].offset + 1] == -9.75f,
              "%s: the crowded and the idle expert's biases %g and %g, not 9.75 and -9.75",
              p[i].name, w[p[i].offset], w[p[i].offset + 1]);
    }
  T_CHECK(seen == 2, "%d expert biases", seen);
}

/* Padding rows of the vocabulary get no gradient, and accumulation adds micro-batches. */
static void test_accumulate(mgt_gpt *m) {
  size_t n = mgt_gpt_param_count(m);
  float *g = mgt_gpt_grad_data(m), *one = malloc(n * sizeof(float));
  double ls;
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &ls));
  memcpy(one, g, n * sizeof(float));
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 1, 0, &ls));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += fabsf(g[i] - 2 * one[i]) > 1e-6f * (1 + fabsf(one[i]));
  T_CHECK(bad == 0, "accumulated gradient differs from twice one micro-batch in %zu places", bad);
  const mgt_gpt_dims *d = mgt_gpt_get_dims(m);
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  size_t nz = 0;
  for (int r = d->nv; r < d->Vl; r++)
    for (int c = 0; c < d->C; c++)
      nz += g[p[0].offset + (size_t)r * d->C + c] != 0.0f;
  T_CHECK(d->Vl > d->nv && nz == 0, "padding rows of the vocabulary got %zu nonzero gradients", nz);
  free(one);
}

static void test_recompute(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  c.num_layers = 3;
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *a = NULL, *b = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &a));
  c.recompute_activations = 1;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &b));
  double la, lb;
  T_OK(mgt_gpt_forward_backward(a, tokens, SAMPLE_BASE, 0.1f, 0, 0, &la));
  T_OK(mgt_gpt_forward_backward(b, tokens, SAMPLE_BASE, 0.1f, 0, 0, &lb));
  size_t n = mgt_gpt_param_count(a);
  T_CHECK(la == lb, "loss with recomputation %.17g, without %.17g", lb, la);
  T_CHECK(memcmp(mgt_gpt_grad_data(a), mgt_gpt_grad_data(b), n * sizeof(float)) == 0,
          "gradients differ with --recompute-activations");
  /* every other way of recomputing: the same loss and gradients bit for bit, less memory */
  mgt_gpt_memory base;
  mgt_config none = c;
  none.recompute_activations = 0;
  T_OK(mgt_config_finalize(&none, 1));
  mgt_gpt_memory_plan(&none, 1, &base);
  struct {
    int gran, method, k;
    const char *what;
  } ways[] = {{MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_UNIFORM, 2, "full, uniform chunks of 2 of 3"},
              {MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_UNIFORM, 3, "full, uniform, one chunk"},
              {MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_BLOCK, 2, "full, block of the first 2"},
              {MGT_RECOMPUTE_FULL, MGT_RECOMPUTE_BLOCK, 0, "full, block of none"},
              {MGT_RECOMPUTE_SELECTIVE, MGT_RECOMPUTE_UNIFORM, 1, "selective"}};
  for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
    mgt_config r = none;
    r.recompute_granularity = ways[w].gran;
    r.recompute_method = ways[w].method;
    r.recompute_num_layers = ways[w].k;
    T_OK(mgt_config_finalize(&r, 1));
    mgt_gpt *x = NULL;
    T_OK(mgt_train_model_create(&r, grid, be, comm, &x));
    double lx;
    T_OK(mgt_gpt_forward_backward(x, tokens, SAMPLE_BASE, 0.1f, 0, 0, &lx));
    T_CHECK(lx == la && !memcmp(mgt_gpt_grad_data(a), mgt_gpt_grad_data(x), n * sizeof(float)),
            "recomputation %s: loss %.17g (without %.17g) or gradients differ", ways[w].what, lx,
            la);
    mgt_gpt_memory mx;
    mgt_gpt_memory_plan(&r, 1, &mx);
    /* no block at all, or one chunk of every layer (all of them live in its backward) */
    const int none_saved = ways[w].k == (ways[w].method == MGT_RECOMPUTE_BLOCK ? 0 : 3);
    T_CHECK(none_saved ? mx.activations == base.activations : mx.activations < base.activations,
            "recomputation %s: %zu bytes of activations, %zu without", ways[w].what, mx.activations,
            base.activations);
    mgt_gpt_destroy(&x);
  }
  mgt_gpt_memory mem;
  mgt_gpt_memory_plan(&c, 1, &mem);
  T_CHECK(mem.activations_recompute < mem.activations_full, "recomputation saves no memory");
  T_CHECK(mem.activations_selective < mem.activations_full &&
              mem.activations_full - mem.activations_selective ==
                  2 *
                      (((size_t)c.micro_batch_size * c.num_attention_heads * c.seq_length *
                            c.seq_length +
                        15) /
                       16 * 16) *
                      sizeof(float),
          "selective recomputation keeps %zu of %zu bytes: not one layer's probabilities less "
          "per layer after the first",
          mem.activations_selective, mem.activations_full);
  /* the distributed optimizer at dp = 3: moments and a gradient shard of ceil(n / 3) floats */
  c.use_distributed_optimizer = 1;
  mgt_gpt_memory d3;
  mgt_gpt_memory_plan_grid(&c, 1, 3, &d3);
  const size_t shard = (n + 2) / 3 * sizeof(float);
  T_CHECK(mem.params == n * sizeof(float) && d3.optimizer == 2 * shard &&
              d3.grads == n * sizeof(float) + shard && d3.params == mem.params &&
              d3.total == mem.total - mem.optimizer + 2 * shard + shard,
          "distributed optimizer plan: optimizer %zu (want %zu), gradients %zu (want %zu)",
          d3.optimizer, 2 * shard, d3.grads, n * sizeof(float) + shard);
  mgt_gpt_destroy(&a);
  mgt_gpt_destroy(&b);
}

/* The largest difference between two models' gradients, and (*scale) the largest of a's. */
static double grad_gap(mgt_gpt *a, mgt_gpt *b, double *scale) {
  const size_t n = mgt_gpt_param_count(a);
  const float *ga = mgt_gpt_grad_data(a), *gb = mgt_gpt_grad_data(b);
  double worst = 0;
  *scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    worst = fmax(worst, fabs((double)ga[i] - gb[i]));
    *scale = fmax(*scale, fabs(ga[i]));
  }
  return worst;
}

/* --logits-chunk-rows: the output layer in chunks of 3 of the 10 rows (the last one short) has
   the finite-difference gradient, the loss and gradients of one chunk within rounding,
   gradient accumulation, and plans one chunk of logits. */
static void test_logit_chunks(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  T_OK(mgt_config_finalize(&c, 1));
  mgt_config k = c;
  k.logits_chunk_rows = 3;
  mgt_gpt *a = NULL, *b = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &a));
  T_OK(mgt_train_model_create(&k, grid, be, comm, &b));
  T_CHECK(mgt_gpt_get_dims(a)->logit_rows == 10 && mgt_gpt_get_dims(b)->logit_rows == 3,
          "logit rows %d and %d", mgt_gpt_get_dims(a)->logit_rows, mgt_gpt_get_dims(b)->logit_rows);
  test_gradient(b);
  test_accumulate(b);
  const double la = loss_of(a), lb = loss_of(b);
  double scale;
  const double worst = grad_gap(a, b, &scale);
  T_CHECK(fabs(la - lb) <= 1e-6 * fabs(la) && worst <= 1e-6 * scale,
          "output layer in chunks: loss %.9g (one chunk %.9g), gradients %.3g apart", lb, la,
          worst);
  float la_rows[10], lb_rows[10];
  T_OK(mgt_gpt_forward_losses(a, tokens, la_rows));
  T_OK(mgt_gpt_forward_losses(b, tokens, lb_rows));
  int32_t pa[10], pb[10];
  T_OK(mgt_gpt_forward_predict(a, tokens, la_rows, pa));
  T_OK(mgt_gpt_forward_predict(b, tokens, lb_rows, pb));
  T_CHECK(!memcmp(pa, pb, sizeof pa), "predictions differ with the output layer in chunks");
  for (int r = 0; r < 10; r++)
    T_CHECK(fabsf(la_rows[r] - lb_rows[r]) <= 1e-6f * fabsf(la_rows[r]), "row %d: loss %.9g, %.9g",
            r, lb_rows[r], la_rows[r]);
  mgt_gpt_memory ma, mb;
  mgt_gpt_memory_plan(&c, 1, &ma);
  mgt_gpt_memory_plan(&k, 1, &mb);
  const size_t Vl = (size_t)mgt_gpt_get_dims(a)->Vl, r16 = 16 * sizeof(float);
  const size_t la_b = (10 * Vl * sizeof(float) + r16 - 1) / r16 * r16,
               lb_b = (3 * Vl * sizeof(float) + r16 - 1) / r16 * r16;
  T_CHECK(ma.activations_full - mb.activations_full == la_b - lb_b,
          "chunked logits plan %zu bytes less, not %zu", ma.activations_full - mb.activations_full,
          la_b - lb_b);
  mgt_gpt_destroy(&a);
  mgt_gpt_destroy(&b);
}

/* --use-flash-attn: the finite-difference gradient of every tensor; loss and gradients within
   rounding of the materialized attention (GPT, and BERT's padding mask); full recomputation
   bit for bit; the plan without the T x T buffers. */
static void test_flash(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  for (int bert = 0; bert < 2; bert++) {
    mgt_config c = bert ? tiny_bert(0, 1) : tiny();
    T_OK(mgt_config_finalize(&c, 1));
    mgt_config f = c;
    f.attention_backend = MGT_ATTN_FLASH;
    mgt_gpt *a = NULL, *b = NULL, *r = NULL;
    T_OK(mgt_train_model_create(&c, grid, be, comm, &a));
    T_OK(mgt_train_model_create(&f, grid, be, comm, &b));
    if (!bert) test_gradient(b);
    const double la = loss_of(a), lb = loss_of(b);
    const size_t n = mgt_gpt_param_count(a);
    double scale;
    const double worst = grad_gap(a, b, &scale);
    const float *gb = mgt_gpt_grad_data(b);
    T_CHECK(fabs(la - lb) <= 1e-5 * fabs(la) && worst <= 1e-5 * scale,
            "%s with --use-flash-attn: loss %.9g (materialized %.9g), gradients %.3g apart "
            "(largest %.3g)",
            bert ? "BERT" : "GPT", lb, la, worst, scale);
    f.recompute_activations = 1;
    T_OK(mgt_config_finalize(&f, 1));
    T_OK(mgt_train_model_create(&f, grid, be, comm, &r));
    const double lr = loss_of(r);
    T_CHECK(lr == lb && !memcmp(mgt_gpt_grad_data(r), gb, n * sizeof(float)),
            "flash attention with recomputation: loss %.17g (without %.17g) or gradients differ",
            lr, lb);
    f.recompute_activations = 0;
    f.recompute_granularity = MGT_RECOMPUTE_NONE;
    mgt_gpt_memory ma, mb;
    mgt_gpt_memory_plan(&c, 1, &ma);
    mgt_gpt_memory_plan(&f, 1, &mb);
    const size_t round = 16 * sizeof(float), B = (size_t)mgt_gpt_get_dims(a)->B,
                 rows = B * c.num_attention_heads * c.seq_length,
                 P = (rows * c.seq_length * sizeof(float) + round - 1) / round * round,
                 lse = (rows * sizeof(float) + round - 1) / round * round;
    T_CHECK(ma.activations_full - mb.activations_full ==
                (c.num_layers + 1) * P - c.num_layers * lse,
            "flash attention plans %zu bytes of activations, %zu without: not the %d layers' "
            "probabilities and the scratch less, their row sums more",
            mb.activations_full, ma.activations_full, c.num_layers);
    mgt_gpt_destroy(&a);
    mgt_gpt_destroy(&b);
    mgt_gpt_destroy(&r);
  }
}

/* BERT: the finite-difference gradient of every tensor, recomputation, accumulation, and ids
   in the padding that change neither the losses nor the gradients. */
static void test_bert(mgt_grid *grid, mgt_backend *be, mgt_comm *comm, int post_ln, int binary,
                      int llama) {
  mgt_config c = tiny_bert(post_ln, binary);
  if (llama) llama_block(&c);
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *m = NULL, *r = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  test_gradient(m);
  size_t n = mgt_gpt_param_count(m);
  float *g1 = malloc(n * sizeof(float));
  mgt_bert_losses a, b;
  T_OK(mgt_bert_forward_backward(m, bert_rows, SAMPLE_BASE, 0.5f, 0.25f, 0, 0, &a));
  memcpy(g1, mgt_gpt_grad_data(m), n * sizeof(float));
  T_CHECK(a.lm_count == 3 && a.sop_count == (binary ? 2 : 0), "counted %lld masked, %lld samples",
          (long long)a.lm_count, (long long)a.sop_count);
  int32_t padded[2 * BW];
  memcpy(padded, bert_rows, sizeof padded);
  padded[BW + MGT_BERT_TOKENS * BT + 6] = 9, padded[BW + MGT_BERT_TOKENS * BT + 7] = 1;
  padded[BW + MGT_BERT_TYPES * BT + 7] = 1;
  T_OK(mgt_bert_forward_backward(m, padded, SAMPLE_BASE, 0.5f, 0.25f, 0, 0, &b));
  T_CHECK(a.lm_sum == b.lm_sum && a.sop_sum == b.sop_sum, "ids in the padding change the losses");
  /* the padding's embedding rows get gradient only through... nothing: compare all but them */
  T_CHECK(memcmp(g1 + mgt_gpt_params(m, &(int){0})[2].offset,
                 mgt_gpt_grad_data(m) + mgt_gpt_params(m, &(int){0})[2].offset,
                 (n - mgt_gpt_params(m, &(int){0})[2].offset) * sizeof(float)) == 0,
          "ids in the padding change the gradients of the layers and heads");
  T_OK(mgt_bert_forward_backward(m, bert_rows, SAMPLE_BASE, 0.5f, 0.25f, 0, 0, &a));
  T_OK(mgt_bert_forward_backward(m, bert_rows, SAMPLE_BASE, 0.5f, 0.25f, 1, 0, &a));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += fabsf(mgt_gpt_grad_data(m)[i] - 2 * g1[i]) > 1e-6f * (1 + fabsf(g1[i]));
  T_CHECK(bad == 0, "BERT: accumulated gradient differs from twice one micro-batch in %zu places",
          bad);
  c.recompute_activations = 1;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &r));
  T_OK(mgt_bert_forward_backward(r, bert_rows, SAMPLE_BASE, 0.5f, 0.25f, 0, 0, &b));
  T_OK(mgt_bert_forward_backward(m, bert_rows, SAMPLE_BASE, 0.5f, 0.25f, 0, 0, &a));
  T_CHECK(a.lm_sum == b.lm_sum && a.sop_sum == b.sop_sum &&
              memcmp(mgt_gpt_grad_data(m), mgt_gpt_grad_data(r), n * sizeof(float)) == 0,
          "BERT: recomputation changes the losses or gradients");
  mgt_gpt_destroy(&r);
  mgt_gpt_destroy(&m);
  free(g1);
}

/* A fine-tuning head (MNLI's classifier, RACE's multiple choice over 4 rows): finite
   differences, and the forward's loss and prediction equal to the training pass's. */
static void test_task(mgt_grid *grid, mgt_backend *be, mgt_comm *comm, int task) {
  mgt_config c = tiny_bert(0, 1);
  c.task = task;
  c.micro_batch_size = task == MGT_TASK_RACE ? 1 : 2;
  T_OK(mgt_config_finalize(&c, 1));
  make_task_rows(task);
  mgt_gpt *m = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  test_gradient(m);
  c.hidden_dropout = c.attention_dropout = 0;
  mgt_gpt *q = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &q));
  mgt_task_result a, b;
  int32_t pred[2] = {-1, -1};
  T_OK(mgt_task_forward_backward(q, task_rows, SAMPLE_BASE, 1.0f, 0, 0, &a));
  T_OK(mgt_task_forward(q, task_rows, c.micro_batch_size, pred, &b));
  T_CHECK(a.loss_sum == b.loss_sum && a.correct == b.correct && pred[0] >= 0 &&
              pred[0] < mgt_task_classes(task),
          "%s: forward %.9g (%lld right), training pass %.9g (%lld right), prediction %d",
          mgt_task_names[task], b.loss_sum, (long long)b.correct, a.loss_sum, (long long)a.correct,
          pred[0]);
  mgt_gpt_destroy(&q);
  mgt_gpt_destroy(&m);
}

static int cmp_u32(const void *a, const void *b) {
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Random streams: each tensor of a model its own (GPT, Llama, BERT at 65,535 layers), the first
   sixteen codes of a layer as they always were (l * 16 + code), and the codes a later tensor
   would take (16 up) apart from every one of them and from the model-wide tensors'. */
static void test_streams(void) {
  mgt_config c = tiny();
  c.num_layers = 65535;
  int bad = 0;
  for (int kind = 0; kind < 3; kind++) {
    mgt_config k = c;
    if (kind == 1)
      k.normalization = MGT_NORM_RMSNORM, k.swiglu = 1, k.disable_bias_linear = 0,
      k.group_query_attention = 1, k.num_query_groups = 1, k.position_embedding_type = 1,
      k.untie_embeddings_and_output_weights = 1, k.ffn_hidden_size = 0;
    if (kind == 2) k.model = MGT_MODEL_BERT, k.seq_length = 8;
    mgt_config_derive(&k);
    mgt_gpt_dims d;
    mgt_gpt_dims_from_config(&k, 1, 0, &d);
    int n = 0;
    size_t total = 0;
    gpt_build_params(&d, NULL, &n, &total, NULL);
    mgt_param *p = calloc((size_t)n, sizeof *p);
    gpt_build_params(&d, p, &n, &total, NULL);
    uint32_t *ids = malloc(sizeof(uint32_t) * ((size_t)n + 64 * 65535));
    int m = 0;
    for (int i = 0; i < n; i++)
      ids[m++] = p[i].id;
    bad += p[n / 2].id / 16 > 65535;            /* a middle layer's stream is l * 16 + code */
    for (uint32_t code = 16; code < 80; code++) /* later tensors' streams, every layer */
      for (int l = 0; l < 65535; l++)
        ids[m++] = gpt_layer_stream(code, l);
    qsort(ids, (size_t)m, sizeof *ids, cmp_u32);
    for (int i = 1; i < m; i++)
      bad += ids[i] == ids[i - 1];
    free(ids), free(p);
  }
  for (int l = 0; l < 65535; l++) /* codes 0..15: the streams checkpoints were made with */
    for (uint32_t code = 0; code < 16; code++)
      bad += gpt_layer_stream(code, l) != (uint32_t)l * 16u + code;
  T_CHECK(bad == 0, "%d random streams shared or moved", bad);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, 1, &grid));
  T_OK(mgt_backend_cpu_create(&be));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  test_streams();
  mgt_config c = tiny();
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *m = NULL;
  T_OK(mgt_train_model_create(&c, grid, be, comm, &m));
  test_gradient(m);
  test_accumulate(m);
  test_eod_mask(m, &c);
  test_reset_positions(m, &c);
  test_documents(m, &c);
  test_doc_flags(m, &c);
  mgt_gpt_destroy(&m);
  /* an untied output layer: its own tensor and gradient, the word embeddings' gradient from
     the lookup alone */
  mgt_config u = tiny();
  u.untie_embeddings_and_output_weights = 1;
  T_OK(mgt_config_finalize(&u, 1));
  T_OK(mgt_train_model_create(&u, grid, be, comm, &m));
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  int found = 0;
  for (int i = 0; i < np; i++)
    found += strcmp(p[i].name, "output_layer.weight") == 0 && p[i].numel == p[0].numel;
  T_CHECK(found == 1, "an untied model has one output_layer.weight shaped as the embeddings");
  test_gradient(m);
  test_accumulate(m);
  mgt_gpt_destroy(&m);
  /* rotary positions: no position table, q and k turned in every layer (Llama 3's base) */
  mgt_config rc = tiny();
  rc.position_embedding_type = MGT_POS_ROPE, rc.rotary_base = 500000;
  T_OK(mgt_config_finalize(&rc, 1));
  T_OK(mgt_train_model_create(&rc, grid, be, comm, &m));
  p = mgt_gpt_params(m, &np);
  found = 0;
  for (int i = 0; i < np; i++)
    found += strstr(p[i].name, "position_embeddings") != NULL;
  T_CHECK(found == 0, "a rotary model has no position table");
  test_gradient(m);
  test_documents(m, &rc);
  test_doc_flags(m, &rc);
  mgt_gpt_destroy(&m);
  rc.attention_backend = MGT_ATTN_FLASH;
  T_OK(mgt_train_model_create(&rc, grid, be, comm, &m));
  test_gradient(m);
  test_documents(m, &rc);
  test_doc_flags(m, &rc);
  mgt_gpt_destroy(&m);
  test_rope_frequencies();
  test_llama(grid, be, comm);
  test_qwen(grid, be, comm);
  test_moe(grid, be, comm);
  test_spec_create(grid, be, comm);
  test_recompute(grid, be, comm);
  make_bert_rows();
  test_logit_chunks(grid, be, comm);
  test_flash(grid, be, comm);
  for (int post_ln = 0; post_ln < 2; post_ln++) {
    test_bert(grid, be, comm, post_ln, 1, 0);
    test_bert(grid, be, comm, post_ln, 1, 1);
  }
  test_bert(grid, be, comm, 0, 0, 0);
  test_task(grid, be, comm, MGT_TASK_MNLI);
  test_task(grid, be, comm, MGT_TASK_RACE);
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return t_report("test_model");
}
