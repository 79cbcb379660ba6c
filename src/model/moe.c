/* Mixture-of-Experts layers in place of the MLP (docs/moe.md): the router (an fp32 GEMM and
   Megatron-LM's routing), each token's rows gathered in expert order, each expert's MLP (split on
   its inner width over tp as the dense MLP), and the weighted sum back into the tokens; the
   backward with the load-balancing and z-losses (Megatron-LM's aux_loss, per micro-batch). The
   routing is the same on every tensor-parallel rank (the router is replicated, its input every
   row), so each rank runs its shard of the same experts on the same rows. */
#include "mgt/gpt_impl.h"
#include "moe_route.h"

struct gpt_moe_host {
  int *offsets;  /* (L, E + 1): layer l's rows of expert e are [offsets[e], offsets[e + 1]) */
  int *counts;   /* (L, E): the tokens that chose each expert (before capacity) */
  int32_t *idx;  /* (N, K) staging of the routing */
  float *w;      /* (N, K) */
  int32_t *pos;  /* (N, K) */
  int32_t *perm; /* (M) */
  float *probs;  /* (N, E) the scores, for the load-balancing loss's value */
  float *lse;    /* (N) */
  int *order;    /* (N) one expert's tokens, sorted by probability */
  /* expert parallelism: layer l's rows from each rank for each of this rank's experts
     (L, ep, El), and the staging of the counts (2 E floats) and the orders (2 ep M) */
  int *recv;
  float *counts_f;
  int32_t *order_h;
  double *bias_counts; /* (L, E) the tokens of each expert since the last bias update */
  /* global_aux_loss: layer l's counts over the data-parallel ranks, summed over this step's
     micro-batches so far (L, E), and how many (L) */
  double *gsum;
  int *gsteps;
  int32_t *ident; /* 0 .. N - 1: each row's own position (the shared expert's gate) */
};

mgt_status gpt_moe_create(mgt_gpt *m) {
  const mgt_gpt_dims *d = &m->d;
  if (!d->E) return MGT_OK;
  const size_t N = (size_t)d->B * d->T, K = (size_t)d->K, E = (size_t)d->E, L = (size_t)d->L;
  struct gpt_moe_host *h = NULL;
  MGT_CHECK(mgt_calloc(sizeof *h, "routing", (void **)&h));
  m->moe = h;
  MGT_CHECK(mgt_calloc(sizeof(int) * L * (E + 1), "routing", (void **)&h->offsets));
  MGT_CHECK(mgt_calloc(sizeof(int) * L * E, "routing", (void **)&h->counts));
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * N * K, "routing", (void **)&h->idx));
  MGT_CHECK(mgt_calloc(sizeof(float) * N * K, "routing", (void **)&h->w));
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * N * K, "routing", (void **)&h->pos));
  MGT_CHECK(mgt_calloc(sizeof(int32_t) * N * K, "routing", (void **)&h->perm));
  MGT_CHECK(mgt_calloc(sizeof(float) * N * E, "routing", (void **)&h->probs));
  MGT_CHECK(mgt_calloc(sizeof(float) * N, "routing", (void **)&h->lse));
  MGT_CHECK(mgt_calloc(sizeof(int) * N, "routing", (void **)&h->order));
  if (d->spec.expert_bias)
    MGT_CHECK(mgt_calloc(sizeof(double) * L * E, "routing", (void **)&h->bias_counts));
  MGT_CHECK(mgt_calloc(sizeof(double) * L * E, "routing", (void **)&h->gsum));
  MGT_CHECK(mgt_calloc(sizeof(int) * L, "routing", (void **)&h->gsteps));
  if (d->Fs && d->spec.shared_gate) {
    MGT_CHECK(mgt_calloc(sizeof(int32_t) * N, "routing", (void **)&h->ident));
    for (size_t t = 0; t < N; t++)
      h->ident[t] = (int32_t)t;
  }
  if (d->ep > 1) {
    const size_t R = N * K * (size_t)d->ep;
    MGT_CHECK(mgt_calloc(sizeof(int) * L * E, "routing", (void **)&h->recv));
    MGT_CHECK(mgt_calloc(sizeof(float) * 2 * E, "routing", (void **)&h->counts_f));
    MGT_CHECK(mgt_calloc(sizeof(int32_t) * 2 * R, "routing", (void **)&h->order_h));
  }
  m->aux_scale = m->aux_loss_scale = 1.0;
  m->spread[0] = INFINITY, m->spread[1] = 0;
  return MGT_OK;
}

void gpt_moe_destroy(mgt_gpt *m) {
  struct gpt_moe_host *h = m->moe;
  if (!h) return;
  mgt_free(h->offsets), mgt_free(h->counts), mgt_free(h->idx), mgt_free(h->w);
  mgt_free(h->pos), mgt_free(h->perm), mgt_free(h->probs), mgt_free(h->lse), mgt_free(h->order);
  mgt_free(h->recv), mgt_free(h->counts_f), mgt_free(h->order_h), mgt_free(h->bias_counts);
  mgt_free(h->gsum), mgt_free(h->gsteps);
  mgt_free(h->ident);
  mgt_free(h);
  m->moe = NULL;
}

/* One expert's slots (t * K + s): by weight, the higher first, the earlier token among equal
   weights (the probs policy); by position in the sequence, then sequence (the position policy:
   Megatron-LM's rows are [s, b], ours b * T + t); or by slot, the token order. */
static const float *sort_w;
static int sort_k, sort_t, sort_b;
static int by_position(const void *a, const void *b) {
  const int x = *(const int *)a / sort_k, y = *(const int *)b / sort_k;
  const long long kx = (long long)(x % sort_t) * sort_b + x / sort_t,
                  ky = (long long)(y % sort_t) * sort_b + y / sort_t;
  return (kx > ky) - (kx < ky);
}
static int by_weight(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  if (sort_w[x] != sort_w[y]) return sort_w[x] > sort_w[y] ? -1 : 1;
  return (x > y) - (x < y);
}
static int by_slot(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Each expert's rows from the routing of N tokens (h->idx, h->w): its slots in token order, at
   most `cap` of them, the others dropped (pos -1): those of the lowest weights (probs) or the
   latest positions (position: the micro-batch's sequences position by position), as
   Megatron-LM's apply_router_token_dropping. */
static void place(const mgt_gpt_dims *d, struct gpt_moe_host *h, int N, int cap, int *off,
                  int *counts) {
  const int E = d->E, K = d->K;
  for (int e = 0; e < E; e++)
    counts[e] = 0;
  for (int i = 0; i < N * K; i++)
    counts[h->idx[i]]++;
  int at = 0;
  for (int e = 0; e < E; e++) {
    int n = 0; /* an expert is in a token's slots once at most: n <= N */
    for (int i = 0; i < N * K; i++)
      if (h->idx[i] == e) h->order[n++] = i;
    if (n > cap) {
      if (d->spec.drop_policy == MGT_MOE_DROP_PROBS) {
        sort_w = h->w;
        qsort(h->order, (size_t)n, sizeof(int), by_weight);
        qsort(h->order, (size_t)cap, sizeof(int), by_slot);
      } else if (d->T > 0 && N % d->T == 0 && N > d->T) { /* rows of N / T sequences */
        sort_k = K, sort_t = d->T, sort_b = N / d->T;
        qsort(h->order, (size_t)n, sizeof(int), by_position);
        qsort(h->order, (size_t)cap, sizeof(int), by_slot);
      }
      for (int j = cap; j < n; j++)
        h->pos[h->order[j]] = -1;
      n = cap;
    }
    off[e] = at;
    for (int j = 0; j < n; j++) {
      h->pos[h->order[j]] = at;
      h->perm[at++] = h->order[j] / K;
    }
  }
  off[E] = at;
}

/* An expert's capacity at N tokens: ceil(N K / E x factor), or all of them. */
static int capacity(const mgt_gpt_dims *d, int N) {
  if (d->spec.capacity <= 0) return N;
  const double c = ceil((double)N * d->K / d->E * d->spec.capacity);
  return c > N ? N : (int)c;
}

/* An operand of the experts' GEMMs: each expert's block of rows (rows[j] .. rows[j + 1] of a
   matrix ld floats a row; stride 0) or each expert's own matrix (stride floats apart). */
typedef struct xop {
  const float *p;
  int ld;
  size_t stride;
} xop;

#define XROWS (-1) /* a GEMM dimension that is each expert's row count */

/* One kind of GEMM of the n local experts with rows, as one grouped GEMM (cuBLAS's on GPUs); an
   expert without a row has none. */
static mgt_status experts_gemm(const mgt_gpt *m, int n, const int *rows, int ta, int tb, int M,
                               int N, int K, xop A, xop B, float beta, xop C) {
  int gm[n], gn[n], gk[n], k = 0;
  const float *pa[n], *pb[n];
  float *pc[n];
  for (int j = 0; j < n; j++) {
    const int r = rows[j + 1] - rows[j];
    if (!r) continue;
    gm[k] = M == XROWS ? r : M, gn[k] = N == XROWS ? r : N, gk[k] = K == XROWS ? r : K;
    pa[k] = A.p + (A.stride ? j * A.stride : (size_t)rows[j] * A.ld);
    pb[k] = B.p + (B.stride ? j * B.stride : (size_t)rows[j] * B.ld);
    pc[k] = (float *)C.p + (C.stride ? j * C.stride : (size_t)rows[j] * C.ld);
    k++;
  }
  return mgt_be_gemm_grouped(m->be, ta, tb, k, gm, gn, gk, 1.0f, pa, A.ld, pb, B.ld, beta, pc,
                             C.ld);
}

/* The n local experts' MLPs on their rows of x (expert j: rows [rows[j], rows[j + 1])): [gate |
   up] (or the GeLU's input) in a->fch, the activations in a->fch_gelu, the outputs (partial sums
   over tp) in out's rows; each GEMM one grouped GEMM of them all, the activation one call over
   all the rows. */
static mgt_status experts_forward(mgt_gpt *m, int n, const int *rows, const float *x, layer_acts *a,
                                  float *const *w, float *out) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, Fl = d->Fel, Fo = d->Foe, r0 = rows[0], R = rows[n] - rows[0];
  const size_t sw = (size_t)Fl * C;
  const xop X = {x, C, 0}, pre = {a->fch, Fo, 0}, act = {a->fch_gelu, Fl, 0};
  if (R == 0) return MGT_OK;
  MGT_CHECK(experts_gemm(m, n, rows, MGT_NOTRANS, MGT_TRANS, XROWS, Fl, C, X,
                         (xop){w[P_EFC_W], C, sw}, 0.0f, pre));
  if (d->spec.mlp == MGT_MLP_SWIGLU) {
    MGT_CHECK(experts_gemm(m, n, rows, MGT_NOTRANS, MGT_TRANS, XROWS, Fl, C, X,
                           (xop){w[P_EUP_W], C, sw}, 0.0f, (xop){a->fch + Fl, Fo, 0}));
    MGT_CHECK(
        mgt_be_swiglu_forward(be, a->fch_gelu + (size_t)r0 * Fl, a->fch + (size_t)r0 * Fo, R, Fl));
  } else { /* the experts' activations are floats, never 16-bit (layout.c) */
    MGT_CHECK(mgt_be_bias_gelu_forward(be, a->fch_gelu + (size_t)r0 * Fl, a->fch + (size_t)r0 * Fo,
                                       NULL, R, Fl));
  }
  return experts_gemm(m, n, rows, MGT_NOTRANS, MGT_TRANS, XROWS, C, Fl, act,
                      (xop){w[P_EFCP_W], Fl, sw}, 0.0f, (xop){out, C, 0});
}

/* Expert parallelism: the rows this rank sends each rank (rows[q], the experts q holds, in
   expert order), and the rows each rank sends it (recv[q]), from layer l's counts. */
static void exchange_rows(const mgt_gpt *m, int l, const int *off, int *sent, int *got) {
  const mgt_gpt_dims *d = &m->d;
  const int *rc = m->moe->recv + (size_t)l * d->E;
  for (int q = 0; q < d->ep; q++) {
    sent[q] = off[(q + 1) * d->El] - off[q * d->El], got[q] = 0;
    for (int j = 0; j < d->El; j++)
      got[q] += rc[q * d->El + j];
  }
}

/* The received rows (by sender, then expert) put in expert order (by expert, then sender):
   order[i] is the received row at expert-order position i, unorder its inverse; *local the
   first row of each of this rank's experts (El + 1). Uploaded to the model's buffers. */
static mgt_status orders(mgt_gpt *m, int l, int *local) {
  const mgt_gpt_dims *d = &m->d;
  const int *rc = m->moe->recv + (size_t)l * d->E;
  int32_t *order = m->moe->order_h;
  int total = 0;
  for (int i = 0; i < d->ep * d->El; i++)
    total += rc[i];
  int32_t *unorder = order + total;
  int at = 0;
  for (int j = 0; j < d->El; j++) {
    local[j] = at;
    for (int q = 0; q < d->ep; q++) {
      int from = 0; /* sender q's first row for expert j */
      for (int p = 0; p < q; p++)
        for (int k = 0; k < d->El; k++)
          from += rc[p * d->El + k];
      for (int k = 0; k < j; k++)
        from += rc[q * d->El + k];
      for (int r = 0; r < rc[q * d->El + j]; r++, at++)
        order[at] = from + r, unorder[from + r] = at;
    }
  }
  local[d->El] = at;
  MGT_CHECK(mgt_be_upload(m->be, m->moe_order, order, sizeof(int32_t) * (size_t)total));
  return mgt_be_upload(m->be, m->moe_unorder, unorder, sizeof(int32_t) * (size_t)total);
}

/* Sends each row of src (rows in expert order, sent[q] to rank q) to the rank of its expert and
   receives into dst (got[q] from rank q), C floats a row; or back with the counts swapped. */
static mgt_status all_to_all(mgt_gpt *m, const float *src, const int *sent, float *dst,
                             const int *got) {
  int sc[m->d.ep], rc[m->d.ep];
  for (int q = 0; q < m->d.ep; q++)
    sc[q] = sent[q] * m->d.C, rc[q] = got[q] * m->d.C;
  return mgt_comm_alltoallv(m->comm, MGT_AXIS_EP, src, sc, dst, rc);
}

/* The all-gather dispatcher's counts: S[p * ep + q] rows rank p sends rank q (every rank's
   sent), from an all-gather over the expert-parallel group. */
static mgt_status sent_matrix(mgt_gpt *m, const int *sent, int *S) {
  const int ep = m->d.ep, me = m->grid->ep_rank;
  float f[ep * ep];
  int counts[ep], displs[ep];
  for (int q = 0; q < ep; q++)
    f[me * ep + q] = (float)sent[q], counts[q] = ep, displs[q] = q * ep;
  MGT_CHECK(mgt_comm_allgatherv(m->comm, MGT_AXIS_EP, f, counts, displs, NULL));
  for (int i = 0; i < ep * ep; i++)
    S[i] = (int)f[i];
  return MGT_OK;
}

/* Rows of src (in expert order, sent[q] of them for rank q) to the ranks of their experts, into
   dst (got[q] from rank q, by sender): by all-to-all, or (--moe-token-dispatcher-type allgather)
   by an all-gather of every rank's rows into m->moe_eout, of which each rank takes its own. */
static mgt_status to_experts(mgt_gpt *m, const float *src, const int *sent, float *dst,
                             const int *got) {
  if (!m->run.moe_allgather) return all_to_all(m, src, sent, dst, got);
  const int ep = m->d.ep, me = m->grid->ep_rank, C = m->d.C;
  int S[ep * ep], counts[ep], displs[ep], at = 0, n = 0;
  MGT_CHECK(sent_matrix(m, sent, S));
  for (int p = 0; p < ep; p++) {
    int rows = 0;
    for (int q = 0; q < ep; q++)
      rows += S[p * ep + q];
    MGT_REQUIRE((int64_t)rows * C <= INT32_MAX && (int64_t)at * C <= INT32_MAX,
                "the all-gather dispatcher: over 2^31 floats of rows");
    counts[p] = rows * C, displs[p] = at * C;
    for (int q = 0, first = at; q < ep; first += S[p * ep + q], q++) /* p's rows for me */
      for (int r = 0; q == me && r < S[p * ep + q]; r++)
        m->moe->order_h[n++] = first + r;
    at += rows;
  }
  (void)got;
  MGT_CHECK(mgt_be_copy(m->be, m->moe_eout + displs[me], src, sizeof(float) * (size_t)counts[me]));
  MGT_CHECK(mgt_comm_allgatherv(m->comm, MGT_AXIS_EP, m->moe_eout, counts, displs, NULL));
  MGT_CHECK(mgt_be_upload(m->be, m->moe_order, m->moe->order_h, sizeof(int32_t) * (size_t)n));
  return mgt_be_gather_rows(m->be, dst, m->moe_eout, m->moe_order, n, C);
}

/* Back: rows of src (got[q] for rank q, by sender) to where they came from, dst (sent[q] to
   rank q, in expert order): by all-to-all, or each rank's rows placed among zeros in
   m->moe_eout at every rank's rows and reduce-scattered (a sum of one row and zeros: exact). */
static mgt_status to_sources(mgt_gpt *m, const float *src, const int *got, float *dst,
                             const int *sent) {
  if (!m->run.moe_allgather) return all_to_all(m, src, got, dst, sent);
  const int ep = m->d.ep, me = m->grid->ep_rank, C = m->d.C;
  int S[ep * ep], counts[ep], at = 0, n = 0;
  int32_t *from = m->moe->order_h; /* each row of every rank's: the row of src, or -1 */
  MGT_CHECK(sent_matrix(m, sent, S));
  for (int p = 0; p < ep; p++) {
    int rows = 0;
    for (int q = 0; q < ep; q++)
      for (int r = 0; r < S[p * ep + q]; r++, rows++)
        from[at + rows] = q == me ? n++ : -1;
    counts[p] = rows * C;
    at += rows;
  }
  (void)got;
  MGT_CHECK(mgt_be_upload(m->be, m->moe_order, from, sizeof(int32_t) * (size_t)at));
  MGT_CHECK(mgt_be_moe_combine(m->be, m->moe_eout, src, m->moe_order, NULL, at, 1, C, 0));
  return mgt_comm_reduce_scatter(m->comm, MGT_AXIS_EP, m->moe_eout, dst, counts, NULL);
}

/* Expert parallelism's forward: each rank's rows (m->moe_xp, in expert order) to the ranks of
   their experts, this rank's experts on what it received (kept in a->xin by expert), the
   outputs back into a->mout at the rows they came from. */
static mgt_status dispatch(mgt_gpt *m, int l, int N, const int *off, layer_acts *a,
                           float *const *w) {
  const mgt_gpt_dims *d = &m->d;
  struct gpt_moe_host *h = m->moe;
  const int E = d->E, El = d->El, C = d->C;
  (void)N;
  int cs[d->ep], cr[d->ep], sent[d->ep], got[d->ep], local[El + 1];
  for (int e = 0; e < E; e++) /* each expert's rows from here, to its rank */
    h->counts_f[e] = (float)(off[e + 1] - off[e]);
  for (int q = 0; q < d->ep; q++)
    cs[q] = cr[q] = El;
  MGT_CHECK(mgt_comm_alltoallv(m->comm, MGT_AXIS_EP, h->counts_f, cs, h->counts_f + E, cr));
  int *rc = h->recv + (size_t)l * E;
  for (int i = 0; i < E; i++)
    rc[i] = (int)h->counts_f[E + i];
  exchange_rows(m, l, off, sent, got);
  MGT_CHECK(to_experts(m, m->moe_xp, sent, m->moe_recv, got));
  MGT_CHECK(orders(m, l, local));
  MGT_CHECK(mgt_be_gather_rows(m->be, a->xin, m->moe_recv, m->moe_order, local[El], C));
  MGT_CHECK(experts_forward(m, El, local, a->xin, a, w, m->moe_eout));
  MGT_CHECK(mgt_be_gather_rows(m->be, m->moe_recv, m->moe_eout, m->moe_unorder, local[El], C));
  return to_sources(m, m->moe_recv, got, a->mout, sent);
}

/* The shared expert on every row of in, added to y (partial sums over tp): an MLP split over tp
   as the dense one; with its gate, its output times sigmoid(in . w), the gate being a sigmoid
   router of one expert (so moe_route and moe_combine compute it and its gradient). */
static mgt_status shared_forward(mgt_gpt *m, int N, const float *in, layer_acts *a, float *const *w,
                                 float *y) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, Fl = d->Fsl, Fo = d->Fso, gate = d->spec.shared_gate;
  if (d->spec.mlp == MGT_MLP_SWIGLU) {
    MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, N, Fl, C, 1.0f, in, C, w[P_SFC_W], C, 0.0f,
                          a->sfch, Fo));
    MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, N, Fl, C, 1.0f, in, C, w[P_SUP_W], C, 0.0f,
                          a->sfch + Fl, Fo));
    MGT_CHECK(mgt_be_swiglu_forward(be, a->sact, a->sfch, N, Fl));
  } else {
    MGT_CHECK(mgt_be_linear_bias_gelu(be, N, Fl, C, in, C, w[P_SFC_W], C, NULL, a->sfch, a->sact));
  }
  MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_TRANS, N, C, Fl, 1.0f, a->sact, Fl, w[P_SFCP_W], Fl,
                        gate ? 0.0f : 1.0f, gate ? a->sout : y, C));
  if (!gate) return MGT_OK;
  MGT_CHECK(mgt_be_gemm32(be, MGT_NOTRANS, MGT_TRANS, N, 1, C, 1.0f, in, C, w[P_SG_W], C, 0.0f,
                          a->glogit, 1));
  MGT_CHECK(mgt_be_moe_route(be, a->glogit, N, 1, 1, MGT_MOE_SIGMOID, 0, 0.0f, NULL, a->gidx, a->gw,
                             a->gprobs, a->glse));
  MGT_CHECK(mgt_be_upload(be, m->sh_pos, m->moe->ident, sizeof(int32_t) * (size_t)N));
  return mgt_be_moe_combine(be, y, a->sout, m->sh_pos, a->gw, N, 1, C, 1);
}

/* Its backward from dy (the layer output's gradient, every row): the weights' gradients, and
   the input's added to dx (the gate's on tensor-parallel rank 0 only, as the router's). */
static mgt_status shared_backward(mgt_gpt *m, int N, const float *in, const float *dy,
                                  layer_acts *a, float *const *w, float *const *g, float *dx,
                                  int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, Fl = d->Fsl, Fo = d->Fso;
  const float beta = acc ? 1.0f : 0.0f;
  const float *ds = dy;
  if (d->spec.shared_gate) { /* the gate's weight gradient: dy . output, summed over tp */
    MGT_CHECK(mgt_be_upload(be, m->sh_pos, m->moe->ident, sizeof(int32_t) * (size_t)N));
    MGT_CHECK(mgt_be_moe_combine_backward(be, m->sh_ds, m->sh_dg, dy, a->sout, m->sh_pos, a->gw, N,
                                          1, C));
    if (d->tp > 1)
      MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->sh_dg, (size_t)N, MGT_SUM));
    MGT_CHECK(mgt_be_moe_route_backward(be, m->sh_dglogit, m->sh_dg, a->glogit, a->gidx, a->gw,
                                        a->gprobs, a->glse, N, 1, 1, MGT_MOE_SIGMOID, 0, 0.0f, NULL,
                                        0, 0.0f));
    MGT_CHECK(mgt_be_gemm32(be, MGT_TRANS, MGT_NOTRANS, 1, C, N, 1.0f, m->sh_dglogit, 1, in, C,
                            beta, g[P_SG_W], C));
    if (d->tp_rank == 0)
      MGT_CHECK(mgt_be_gemm32(be, MGT_NOTRANS, MGT_NOTRANS, N, C, 1, 1.0f, m->sh_dglogit, 1,
                              w[P_SG_W], C, 1.0f, dx, C));
    ds = m->sh_ds;
  }
  MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, Fl, C, 1.0f, ds, C, w[P_SFCP_W], Fl, 0.0f,
                        m->sh_dact, Fl));
  MGT_CHECK(mgt_be_gemm(be, MGT_TRANS, MGT_NOTRANS, C, Fl, N, 1.0f, ds, C, a->sact, Fl, beta,
                        g[P_SFCP_W], Fl));
  if (d->spec.mlp == MGT_MLP_SWIGLU) {
    MGT_CHECK(mgt_be_swiglu_backward(be, m->sh_dfch, m->sh_dact, a->sfch, N, Fl));
    MGT_CHECK(mgt_be_gemm(be, MGT_TRANS, MGT_NOTRANS, Fl, C, N, 1.0f, m->sh_dfch, Fo, in, C, beta,
                          g[P_SFC_W], C));
    MGT_CHECK(mgt_be_gemm(be, MGT_TRANS, MGT_NOTRANS, Fl, C, N, 1.0f, m->sh_dfch + Fl, Fo, in, C,
                          beta, g[P_SUP_W], C));
    MGT_CHECK(mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, C, Fl, 1.0f, m->sh_dfch, Fo, w[P_SFC_W],
                          C, 1.0f, dx, C));
    return mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, C, Fl, 1.0f, m->sh_dfch + Fl, Fo,
                       w[P_SUP_W], C, 1.0f, dx, C);
  }
  MGT_CHECK(mgt_be_gelu_backward(be, m->sh_dfch, m->sh_dact, a->sfch, (size_t)N * Fl));
  MGT_CHECK(mgt_be_gemm(be, MGT_TRANS, MGT_NOTRANS, Fl, C, N, 1.0f, m->sh_dfch, Fo, in, C, beta,
                        g[P_SFC_W], C));
  return mgt_be_gemm(be, MGT_NOTRANS, MGT_NOTRANS, N, C, Fl, 1.0f, m->sh_dfch, Fo, w[P_SFC_W], C,
                     1.0f, dx, C);
}

mgt_status gpt_moe_forward(mgt_gpt *m, int l, int N, const float *in, layer_acts *a, float *y,
                           int dropless) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int E = d->E, K = d->K, C = d->C;
  struct gpt_moe_host *h = m->moe;
  float *w[P_SLOTS];
  gpt_layer_views(m, m->w, l, w);
  /* the router, in fp32 whatever the precision, and the routing: the same on every rank */
  MGT_CHECK(mgt_be_gemm32(be, MGT_NOTRANS, MGT_TRANS, N, E, C, 1.0f, in, C, w[P_RT_W], C, 0.0f,
                          a->logits, E));
  MGT_CHECK(mgt_be_moe_route(be, a->logits, N, E, K, d->spec.router_score, d->spec.router_pre,
                             (float)d->spec.router_scale, w[P_RT_B], a->ridx, a->rw, a->probs,
                             a->rlse));
  MGT_CHECK(mgt_be_download(be, h->idx, a->ridx, sizeof(int32_t) * (size_t)N * K));
  MGT_CHECK(mgt_be_download(be, h->w, a->rw, sizeof(float) * (size_t)N * K));
  int *off = h->offsets + (size_t)l * (E + 1);
  place(d, h, N, dropless ? N : capacity(d, N), off, h->counts + (size_t)l * E);
  const int M = off[E];
  MGT_CHECK(mgt_be_upload(be, a->rpos, h->pos, sizeof(int32_t) * (size_t)N * K));
  MGT_CHECK(mgt_be_upload(be, a->rperm, h->perm, sizeof(int32_t) * (size_t)M));
  MGT_CHECK(mgt_be_gather_rows(be, m->moe_xp, in, a->rperm, M, C));
  if (d->ep > 1)
    MGT_CHECK(dispatch(m, l, N, off, a, w));
  else
    MGT_CHECK(experts_forward(m, E, off, m->moe_xp, a, w, a->mout));
  MGT_CHECK(mgt_be_moe_combine(be, y, a->mout, a->rpos, a->rw, N, K, C, 0));
  return d->Fs ? shared_forward(m, N, in, a, w, y) : MGT_OK;
}

/* The loss's own counts of tokens [t0, t1) per expert, into c (E), from their scores (layer l's,
   h->probs): the top k without the expert bias (Megatron-LM's
   compute_routing_scores_for_aux_loss; without a bias, the experts the tokens were sent to). */
static void loss_counts(const struct gpt_moe_host *h, int t0, int t1, int E, int K, double *c) {
  int32_t idx[K];
  for (int e = 0; e < E; e++)
    c[e] = 0;
  for (int t = t0; t < t1; t++) {
    mgt_moe_top_k(h->probs + (size_t)t * E, NULL, E, K, idx);
    for (int j = 0; j < K; j++)
      c[idx[j]]++;
  }
}

/* Megatron-LM's seq_aux_loss: the load-balancing loss of each of the B sequences of T tokens (its
   own counts and scores), averaged over them; the gradient of the scores is then the
   sequence's (aux, B x E, a sequence's E for each of its T rows). */
static mgt_status seq_aux_loss(mgt_gpt *m, int l, int N, const layer_acts *a, float **aux,
                               int *aux_rows) {
  const mgt_gpt_dims *d = &m->d;
  struct gpt_moe_host *h = m->moe;
  const int E = d->E, K = d->K, T = d->T, B = N / T;
  const double s = m->aux_scale, f = m->run.moe_aux_coeff * E / ((double)K * T * T) / B;
  float g[B * E];
  double v = 0;
  MGT_CHECK(mgt_be_download(m->be, h->probs, a->probs, sizeof(float) * (size_t)N * E));
  for (int b = 0; b < B; b++) {
    double c[E];
    loss_counts(h, b * T, (b + 1) * T, E, K, c);
    for (int e = 0; e < E; e++) {
      double p = 0;
      for (int t = b * T; t < (b + 1) * T; t++)
        p += h->probs[(size_t)t * E + e];
      g[b * E + e] = (float)(s * m->aux_loss_scale * f * c[e]);
      v += p * c[e];
    }
  }
  m->aux_sums[0] += s * f * v;
  MGT_CHECK(mgt_be_upload(m->be, m->moe_aux, g, sizeof g));
  *aux = m->moe_aux, *aux_rows = T;
  return MGT_OK;
}

/* Megatron-LM's global_aux_loss: layer l's counts c summed over the data-parallel ranks (the
   tokens of this micro-step on all of them), averaged over the step's micro-steps so far, in
   place; *n the tokens of the micro-step on all ranks. Once per micro-batch and layer: in the
   backward, which recomputation does not repeat. */
static mgt_status global_counts(mgt_gpt *m, int l, int N, double *c, double *n) {
  struct gpt_moe_host *h = m->moe;
  const int E = m->d.E;
  double *sum = h->gsum + (size_t)l * E;
  MGT_CHECK(mgt_comm_allreduce_f64(m->comm, MGT_AXIS_DP, c, (size_t)E, MGT_SUM));
  const int steps = ++h->gsteps[l];
  for (int e = 0; e < E; e++)
    sum[e] += c[e], c[e] = sum[e] / steps;
  *n = (double)N * m->grid->dp;
  return MGT_OK;
}

/* The auxiliary losses' gradients of the scores (aux, E floats on the device) and of the
   log-sum-exps (*zc) at N tokens, and their values added to m->aux_sums. Megatron-LM's
   aux_loss: coeff E / (K N^2) sum_e count_e sum_t p_te; the z-loss: coeff mean_t lse_t^2; each
   scaled by m->aux_scale (1 / the micro-batches of the global batch, as its
   MoEAuxLossAutoScaler) and shared by the MoE layers. global_aux_loss: the same with the
   counts and N of the micro-step on all data-parallel ranks (the counts averaged over the
   step's micro-steps so far), each rank's scores its part of the sum over t: the ranks' parts
   add up to the loss of the micro-step, so it is not divided by dp. */
static mgt_status aux_losses(mgt_gpt *m, int l, int N, const layer_acts *a, float **aux,
                             int *aux_rows, float *zc) {
  const mgt_gpt_dims *d = &m->d;
  const mgt_gpt_training *r = &m->run;
  struct gpt_moe_host *h = m->moe;
  const int E = d->E;
  const int global = r->moe_load_balancing == MGT_MOE_LB_GLOBAL_AUX;
  const int lb = (r->moe_load_balancing == MGT_MOE_LB_AUX || global) && r->moe_aux_coeff > 0;
  *aux = NULL, *aux_rows = 0, *zc = 0.0f;
  const int *off = h->offsets + (size_t)l * (E + 1);
  const double mean = (double)N * d->K / E; /* the tokens an expert gets when balanced */
  for (int e = 0; e < E; e++) {
    const double x = h->counts[(size_t)l * E + e] / mean;
    m->spread[0] = fmin(m->spread[0], x), m->spread[1] = fmax(m->spread[1], x);
    if (h->bias_counts) /* the tokens it took: after the capacity's drops, as Megatron-LM's */
      h->bias_counts[(size_t)l * E + e] += off[e + 1] - off[e];
  }
  if (r->moe_load_balancing == MGT_MOE_LB_SEQ_AUX && r->moe_aux_coeff > 0)
    MGT_CHECK(seq_aux_loss(m, l, N, a, aux, aux_rows));
  if (!lb && r->moe_z_coeff <= 0) return MGT_OK;
  const double s = m->aux_scale, n = N;
  if (lb) {
    float g[E];
    double counts[E], nc = n;
    MGT_CHECK(mgt_be_download(m->be, h->probs, a->probs, sizeof(float) * (size_t)N * E));
    if (h->bias_counts) /* the bias chose other experts than the loss counts */
      loss_counts(h, 0, N, E, d->K, counts);
    else
      for (int e = 0; e < E; e++)
        counts[e] = h->counts[(size_t)l * E + e];
    if (global) MGT_CHECK(global_counts(m, l, N, counts, &nc));
    const double sl = global ? s * m->grid->dp : s;
    const double f = r->moe_aux_coeff * E / ((double)d->K * nc * nc);
    for (int e = 0; e < E; e++)
      g[e] = (float)(sl * m->aux_loss_scale * f * counts[e]);
    MGT_CHECK(mgt_be_upload(m->be, m->moe_aux, g, sizeof g));
    *aux = m->moe_aux;
    double v = 0;
    for (int e = 0; e < E; e++) {
      double p = 0;
      for (int t = 0; t < N; t++)
        p += h->probs[(size_t)t * E + e];
      v += p * counts[e];
    }
    m->aux_sums[0] += sl * f * v;
  }
  if (r->moe_z_coeff > 0) {
    *zc = (float)(s * m->aux_loss_scale * r->moe_z_coeff / n);
    MGT_CHECK(mgt_be_download(m->be, h->lse, a->rlse, sizeof(float) * (size_t)N));
    double v = 0;
    for (int t = 0; t < N; t++)
      v += (double)h->lse[t] * h->lse[t];
    m->aux_sums[1] += s * r->moe_z_coeff * v / n;
  }
  return MGT_OK;
}

/* The backward of experts_forward: dout_io's rows (the gradient of the experts' outputs) become
   the gradient of their inputs; the weights' gradients into g (accumulated with acc; zero for an
   expert without a row when !acc). */
static mgt_status experts_backward(mgt_gpt *m, int n, const int *rows, const float *x,
                                   layer_acts *a, float *const *w, float *const *g, float *dout_io,
                                   int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int C = d->C, Fl = d->Fel, Fo = d->Foe, r0 = rows[0], R = rows[n] - rows[0];
  const int swiglu = d->spec.mlp == MGT_MLP_SWIGLU;
  const size_t sw = (size_t)Fl * C;
  const float beta = acc ? 1.0f : 0.0f;
  for (int j = 0; j < n && !acc; j++) /* no token: a zero gradient */
    if (rows[j + 1] == rows[j]) {
      MGT_CHECK(mgt_be_zero(be, g[P_EFC_W] + j * sw, sizeof(float) * sw));
      MGT_CHECK(mgt_be_zero(be, g[P_EFCP_W] + j * sw, sizeof(float) * sw));
      if (swiglu) MGT_CHECK(mgt_be_zero(be, g[P_EUP_W] + j * sw, sizeof(float) * sw));
    }
  if (R == 0) return MGT_OK;
  const xop X = {x, C, 0}, act = {a->fch_gelu, Fl, 0}, dout = {dout_io, C, 0};
  const xop dact = {m->moe_dact, Fl, 0}, dfch = {m->moe_dfch, Fo, 0};
  const xop dfup = {m->moe_dfch + Fl, Fo, 0};
  float *dfch0 = m->moe_dfch + (size_t)r0 * Fo, *dact0 = m->moe_dact + (size_t)r0 * Fl;
  const float *pre0 = a->fch + (size_t)r0 * Fo;
  MGT_CHECK(experts_gemm(m, n, rows, MGT_NOTRANS, MGT_NOTRANS, XROWS, Fl, C, dout,
                         (xop){w[P_EFCP_W], Fl, sw}, 0.0f, dact));
  MGT_CHECK(experts_gemm(m, n, rows, MGT_TRANS, MGT_NOTRANS, C, Fl, XROWS, dout, act, beta,
                         (xop){g[P_EFCP_W], Fl, sw}));
  if (swiglu)
    MGT_CHECK(mgt_be_swiglu_backward(be, dfch0, dact0, pre0, R, Fl));
  else
    MGT_CHECK(mgt_be_gelu_backward(be, dfch0, dact0, pre0, (size_t)R * Fl));
  MGT_CHECK(experts_gemm(m, n, rows, MGT_TRANS, MGT_NOTRANS, Fl, C, XROWS, dfch, X, beta,
                         (xop){g[P_EFC_W], C, sw}));
  if (swiglu)
    MGT_CHECK(experts_gemm(m, n, rows, MGT_TRANS, MGT_NOTRANS, Fl, C, XROWS, dfup, X, beta,
                           (xop){g[P_EUP_W], C, sw}));
  /* the inputs' gradient over the outputs' (read above, each expert's own rows) */
  MGT_CHECK(experts_gemm(m, n, rows, MGT_NOTRANS, MGT_NOTRANS, XROWS, C, Fl, dfch,
                         (xop){w[P_EFC_W], C, sw}, 0.0f, dout));
  if (!swiglu) return MGT_OK;
  return experts_gemm(m, n, rows, MGT_NOTRANS, MGT_NOTRANS, XROWS, C, Fl, dfup,
                      (xop){w[P_EUP_W], C, sw}, 1.0f, dout);
}

/* Expert parallelism's backward: the outputs' gradients to the ranks of their experts, this
   rank's experts' backward on them, the inputs' gradients back into m->moe_dout. */
static mgt_status undispatch(mgt_gpt *m, int l, const int *off, layer_acts *a, float *const *w,
                             float *const *g, int acc) {
  const mgt_gpt_dims *d = &m->d;
  const int El = d->El, C = d->C;
  int sent[d->ep], got[d->ep], local[El + 1];
  exchange_rows(m, l, off, sent, got);
  MGT_CHECK(to_experts(m, m->moe_dout, sent, m->moe_recv, got));
  MGT_CHECK(orders(m, l, local));
  MGT_CHECK(mgt_be_gather_rows(m->be, m->moe_eout, m->moe_recv, m->moe_order, local[El], C));
  MGT_CHECK(experts_backward(m, El, local, a->xin, a, w, g, m->moe_eout, acc));
  MGT_CHECK(mgt_be_gather_rows(m->be, m->moe_recv, m->moe_eout, m->moe_unorder, local[El], C));
  return to_sources(m, m->moe_recv, got, m->moe_dout, sent);
}

mgt_status gpt_moe_backward(mgt_gpt *m, int l, const float *in, const float *dy, layer_acts *a,
                            float *dx, int acc) {
  const mgt_backend *be = m->be;
  const mgt_gpt_dims *d = &m->d;
  const int E = d->E, K = d->K, C = d->C, N = d->B * d->T;
  const int *off = m->moe->offsets + (size_t)l * (E + 1), M = off[E];
  float *w[P_SLOTS], *g[P_SLOTS];
  gpt_layer_views(m, m->w, l, w);
  gpt_layer_views(m, m->g, l, g);
  /* the experts' outputs' gradient, and the weights': dy . output, summed over tp */
  MGT_CHECK(mgt_be_moe_combine_backward(be, m->moe_dout, m->moe_dw, dy, a->mout, a->rpos, a->rw, N,
                                        K, C));
  if (d->tp > 1)
    MGT_CHECK(mgt_comm_allreduce(m->comm, MGT_AXIS_TP, m->moe_dw, (size_t)N * K, MGT_SUM));
  /* the router: the same on every rank; its input gradient is counted once, on rank 0 */
  float *aux, zc;
  int aux_rows;
  MGT_CHECK(aux_losses(m, l, N, a, &aux, &aux_rows, &zc));
  MGT_CHECK(mgt_be_moe_route_backward(
      be, m->moe_dlogits, m->moe_dw, a->logits, a->ridx, a->rw, a->probs, a->rlse, N, E, K,
      d->spec.router_score, d->spec.router_pre, (float)d->spec.router_scale, aux, aux_rows, zc));
  MGT_CHECK(mgt_be_gemm32(be, MGT_TRANS, MGT_NOTRANS, E, C, N, 1.0f, m->moe_dlogits, E, in, C,
                          acc ? 1.0f : 0.0f, g[P_RT_W], C));
  if (d->tp_rank == 0)
    MGT_CHECK(mgt_be_gemm32(be, MGT_NOTRANS, MGT_NOTRANS, N, C, E, 1.0f, m->moe_dlogits, E,
                            w[P_RT_W], C, 0.0f, dx, C));
  else
    MGT_CHECK(mgt_be_zero(be, dx, sizeof(float) * (size_t)N * C));
  /* each expert, its rows' input gradient in place of their output's */
  if (d->ep > 1) {
    MGT_CHECK(undispatch(m, l, off, a, w, g, acc));
  } else {
    MGT_CHECK(mgt_be_gather_rows(be, m->moe_xp, in, a->rperm, M, C));
    MGT_CHECK(experts_backward(m, E, off, m->moe_xp, a, w, g, m->moe_dout, acc));
  }
  MGT_CHECK(mgt_be_moe_combine(be, dx, m->moe_dout, a->rpos, NULL, N, K, C, 1));
  return d->Fs ? shared_backward(m, N, in, dy, a, w, g, dx, acc) : MGT_OK;
}

void mgt_gpt_set_micro_batches(mgt_gpt *m, int micro_batches) {
  m->aux_scale = micro_batches > 0 ? 1.0 / micro_batches : 1.0;
  struct gpt_moe_host *h = m->moe;
  if (!h) return;
  memset(h->gsum, 0, sizeof(double) * (size_t)m->d.L * m->d.E); /* a new step */
  memset(h->gsteps, 0, sizeof(int) * (size_t)m->d.L);
}

void mgt_gpt_aux_losses(mgt_gpt *m, double out[2]) {
  int layers = 0;
  for (int l = 0; l < m->d.L; l++)
    layers += mgt_model_is_moe_layer(&m->d.spec, l);
  out[0] = layers ? m->aux_sums[0] / layers : 0, out[1] = layers ? m->aux_sums[1] / layers : 0;
  m->aux_sums[0] = m->aux_sums[1] = 0;
}

void mgt_gpt_expert_spread(mgt_gpt *m, double out[2]) {
  const int seen = m->spread[0] <= m->spread[1];
  out[0] = seen ? m->spread[0] : NAN, out[1] = seen ? m->spread[1] : NAN;
  m->spread[0] = INFINITY, m->spread[1] = 0;
}

mgt_status mgt_gpt_update_expert_bias(mgt_gpt *m, double rate) {
  struct gpt_moe_host *h = m->moe;
  const mgt_gpt_dims *d = &m->d;
  if (!h || !h->bias_counts) return MGT_OK;
  /* the biases are parameters: an overlapped all-gather of the update may still write them */
  if (m->ddp) MGT_CHECK(mgt_ddp_params_ready(m->ddp, -1));
  const int E = d->E;
  /* the global batch's counts: the data-parallel ranks' micro-batches (tp ranks route alike) */
  MGT_CHECK(
      mgt_comm_allreduce_f64(m->comm, MGT_AXIS_DP, h->bias_counts, (size_t)d->L * E, MGT_SUM));
  for (int l = 0; l < d->L; l++) {
    if (!mgt_model_is_moe_layer(&d->spec, l)) continue;
    const double *c = h->bias_counts + (size_t)l * E;
    double mean = 0;
    for (int e = 0; e < E; e++)
      mean += c[e] / E;
    float *w[P_SLOTS], b[E];
    gpt_layer_views(m, m->w, l, w);
    MGT_CHECK(mgt_be_download(m->be, b, w[P_RT_B], sizeof b));
    for (int e = 0; e < E; e++) /* Megatron-LM's: + rate sign(mean - count) */
      b[e] += (float)(rate * ((mean > c[e]) - (mean < c[e])));
    MGT_CHECK(mgt_be_upload(m->be, w[P_RT_B], b, sizeof b));
  }
  memset(h->bias_counts, 0, sizeof(double) * (size_t)d->L * E);
  mgt_gpt_weights_changed(m);
  return MGT_OK;
}
