/* The table of compute operations the model calls. CPU (BLAS + OpenMP) and CUDA provide
   it; the model never branches on which one it has. Buffers are in the backend's memory.
   Shapes are row-major; comments give them as (rows, cols). No operation is collective. */
#pragma once

#include <stdint.h>

#include "mgt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dropout site: the mask element e of the sample in row r is drawn from stream
   mgt_rng_dropout_stream(sample_base + r, layer, site), word e. */
typedef struct mgt_dropout {
  float p; /* drop probability; 0 turns the site off */
  uint64_t seed;
  uint64_t sample_base;
  int layer;
  int site;
  /* the micro-batch element of a buffer's element 0: a rank's first row times its width under
     sequence parallelism, so that the masks do not depend on the layout */
  uint64_t first;
} mgt_dropout;

/* Where a tensor-parallel shard sits in its logical tensor. Elements of the local buffer
   whose logical index falls outside `full` are padding. */
typedef struct mgt_shard {
  int ndim;
  int64_t shape[3]; /* local */
  int64_t full[3];  /* logical, unpadded */
  int split_dim;    /* -1 when every rank holds the whole tensor */
  int64_t offset;   /* first logical index along split_dim held here */
  /* first logical index along dimension 0 held here when split_dim is another (an MoE layer's
     experts over the expert-parallel ranks, their width over tp); 0 otherwise */
  int64_t lead;
} mgt_shard;

/* A contiguous range of a flat buffer and how the optimizer treats it. */
typedef struct mgt_segment {
  size_t offset, n;
  float weight_decay; /* 0 for biases and LayerNorm */
  int count_in_norm;  /* 0 for a replicated tensor on a rank that is not its owner */
  int expert;         /* an MoE layer's experts: a different part on each expert-parallel rank */
} mgt_segment;

/* Elements [at, at + n) of flat buffers, held at [to, to + n) of a packed part of them (the
   distributed optimizer's shard of a rank). */
typedef struct mgt_span {
  size_t at, n, to;
} mgt_span;

/* AdamW hyper-parameters of one step. */
typedef struct mgt_adamw_step {
  float lr, beta1, beta2, eps;
  float bias_correction1, bias_correction2; /* 1 - beta^t */
  float grad_scale;                         /* multiplies every gradient first (clipping) */
  int copies; /* p is set_weights' w: the updated elements' 16-bit copies written in the same pass
               */
} mgt_adamw_step;

enum { MGT_NOTRANS = 0, MGT_TRANS = 1 };

/* Mixture-of-Experts router score functions (Megatron-LM's --moe-router-score-function). */
enum { MGT_MOE_SOFTMAX = 0, MGT_MOE_SIGMOID = 1 };

/* Activations: GPT's MLP and Megatron's fused bias-GeLU use the tanh form; BERT's LM head
   uses the erf form (torch.nn.functional.gelu), its pooler tanh. */
enum { MGT_ACT_GELU_TANH = 0, MGT_ACT_GELU_ERF = 1, MGT_ACT_TANH = 2 };

/* Precision of the inputs of the linear-layer GEMMs (mixed precision as in the paper: the
   inputs are rounded to 16 bits, products accumulate in fp32, everything else is fp32). */
typedef enum mgt_precision {
  MGT_PREC_FP32 = 0,
  MGT_PREC_BF16 = 1,
  MGT_PREC_FP16 = 2
} mgt_precision;

/* A backend: one device's memory and the compute operations on it (CPU: BLAS + OpenMP; CUDA).
   The table behind it is private (kernels/backend_impl.h); the model calls these wrappers,
   each of which fails with "backend NAME lacks operation OP" where the backend has none. */
typedef struct mgt_backend mgt_backend;

/* "cpu" or "cuda". */
const char *mgt_be_name(const mgt_backend *be);
/* Bytes per element of the 16-bit activations (set_act16): 2 on GPUs and under the CPU's
   native bf16 GEMMs, else 4 on the CPU. */
int mgt_be_act16_bytes(const mgt_backend *be);

/* ---- the operations (not collective; buffers in the backend's memory) ---- */

/* Memory. alloc returns zeroed memory; free and sync are always there. */
void mgt_be_free(const mgt_backend *be, void *p);
/* Waits for queued work to finish (timers and host reads need it). */
MGT_NODISCARD mgt_status mgt_be_sync(const mgt_backend *be);

/* The other operations, one list: X(name, NAME, (parameters after the backend), (their names),
   PLAIN or GUARDED: the wrapper checks the arguments first, in kernels/backend.c).
   From it come the enum MGT_BE_NAME (mgt_be_has), the slot `name` of the private table
   (kernels/backend_impl.h), each backend's filling of it (cpu_name, cu_name), and the checked
   wrapper mgt_be_name(be, parameters) with its "backend B lacks operation name" error
   (kernels/backend.c): an operation is one entry here, a CPU kernel and a CUDA kernel. Every
   one returns mgt_status. */
#define MGT_BE_OPERATIONS(X)                                                                       \
  /* Memory: alloc returns zeroed memory. */                                                       \
  X(alloc, ALLOC, (size_t bytes, const char *what, void **out), (bytes, what, out), PLAIN)         \
  X(zero, ZERO, (void *p, size_t bytes), (p, bytes), PLAIN)                                        \
  X(upload, UPLOAD, (void *dst, const void *host_src, size_t bytes), (dst, host_src, bytes),       \
    PLAIN)                                                                                         \
  /* dst = src, both in the backend's memory. */                                                   \
  X(copy, COPY, (void *dst, const void *src, size_t bytes), (dst, src, bytes), PLAIN)              \
  X(download, DOWNLOAD, (void *host_dst, const void *src, size_t bytes), (host_dst, src, bytes),   \
    PLAIN)                                                                                         \
  /* Sets the precision of gemm's inputs from now on; a change drops the weights' copies           \
  (set_weights), so that no GEMM reads values rounded to another format. */                        \
  X(set_precision, SET_PRECISION, (mgt_precision prec), (prec), PLAIN)                             \
  /* 16-bit copies of the weights, made once per step instead of once per GEMM: registers the      \
  fp32 parameters [w, w + n) (n = 0 forgets them if w is the registered start) and, under a        \
  16-bit precision, allocates their rounded copy, which gemm and linear_bias_gelu then read for    \
  any operand that lies inside [w, w + n) instead of rounding it again. The copy is only as fresh  \
  as the last refresh_weights of each range, which the caller makes after the parameters change    \
  and before the next GEMM reads them; at fp32 both do nothing. */                                 \
  X(set_weights, SET_WEIGHTS, (const float *w, size_t n), (w, n), PLAIN)                           \
  X(refresh_weights, REFRESH_WEIGHTS, (size_t offset, size_t n), (offset, n), PLAIN)               \
  /* 16-bit activations: under a 16-bit precision, [p, p + bytes) holds GEMM-input activations     \
  in that format, act16_bytes per element (2 on GPUs and under the CPU's native bf16 GEMMs; 4      \
  on the CPU otherwise, floats holding 16-bit values, so that BLAS multiplies them as they are).   \
  A buffer there is addressed by its first element as a float pointer (its elements are not        \
  floats at 2 bytes: only the operations below touch it). linear_bias_gelu and the norms'          \
  forwards write their out there already rounded, gemm and                                         \
  linear_param_grads read operands there without rounding them; the numbers are those of           \
  rounding per GEMM. bytes = 0 forgets the region if p is its start; while one is set the          \
  precision cannot change. */                                                                      \
  X(set_act16, SET_ACT16, (void *p, size_t bytes), (p, bytes), PLAIN)                              \
  /* A promise: the caller writes nothing in [p, p + n) until its next hold (p NULL: none). Under  \
  a 16-bit precision the GEMMs meanwhile convert an operand starting at p once, not once each      \
  (a linear layer's output gradient, read by its input- and weight-gradient GEMMs): the same       \
  numbers. */                                                                                      \
  X(hold, HOLD, (const float *p, size_t n), (p, n), PLAIN)                                         \
  /* p = std * N(0,1) by logical element index, or 0 on padding. */                                \
  X(init_normal, INIT_NORMAL,                                                                      \
    (float *p, const mgt_shard *sh, uint64_t seed, uint64_t stream, float std),                    \
    (p, sh, seed, stream, std), PLAIN)                                                             \
  X(fill, FILL, (float *p, size_t n, float value), (p, n, value), PLAIN)                           \
  /* C(M,N) = alpha * op(A) op(B) + beta * C, A and B rounded to the set precision. */             \
  X(gemm, GEMM,                                                                                    \
    (int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,            \
     const float *B, int ldb, float beta, float *C, int ldc),                                      \
    (transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), PLAIN)                         \
  /* count GEMMs at once (the experts'): C_g(M_g,N_g) = alpha * op(A_g) op(B_g) + beta * C_g for   \
  g < count, as gemm each (A and B rounded to the set precision); M, N, K, A, B and C are host     \
  arrays of count entries, the matrices in the backend's memory, the leading dimensions shared.    \
  One cuBLAS grouped GEMM on GPUs; a gemm each on the CPU. */                                      \
  X(gemm_grouped, GEMM_GROUPED,                                                                    \
    (int transa, int transb, int count, const int *M, const int *N, const int *K, float alpha,     \
     const float *const *A, int lda, const float *const *B, int ldb, float beta, float *const *C,  \
     int ldc),                                                                                     \
    (transa, transb, count, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), GUARDED)                \
  /* gemm in fp32 whatever the set precision (the MoE router's). */                                \
  X(gemm32, GEMM32,                                                                                \
    (int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,            \
     const float *B, int ldb, float beta, float *C, int ldc),                                      \
    (transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), PLAIN)                         \
  /* MoE routing of N tokens over E experts from the router's logits (N,E), as Megatron-LM's       \
  topk_routing_with_score_function: idx (N,k) the k chosen experts (the largest first, the lower   \
  index first among equal scores), w (N,k) their weights: score MGT_MOE_SOFTMAX: the softmax of    \
  the k chosen logits, or with pre the softmax over all E at the chosen; MGT_MOE_SIGMOID: the      \
  chosen sigmoids divided by their sum (k > 1); times scale unless 0. probs (N,E): the scores the  \
  load-balancing loss reads (softmax over all E, or sigmoids divided by their sum); lse (N): each  \
  row's log-sum-exp (the z-loss's). With bias (E, MGT_MOE_SIGMOID only) the top-k of the sigmoids  \
  plus it chooses, the sigmoids alone weigh (aux-loss-free balancing). 1 <= k <= E. */             \
  X(moe_route, MOE_ROUTE,                                                                          \
    (const float *logits, int N, int E, int k, int score, int pre, float scale, const float *bias, \
     int32_t *idx, float *w, float *probs, float *lse),                                            \
    (logits, N, E, k, score, pre, scale, bias, idx, w, probs, lse), GUARDED)                       \
  /* Its backward: dlogits (N,E) = the gradient through moe_route of dw (N,k) (NULL: none), of     \
  aux taken as the gradient of probs (NULL: none; E floats for every row, or with aux_rows > 0 E   \
  for each aux_rows rows: a sequence's), and of zc * lse^2. */                                     \
  X(moe_route_backward, MOE_ROUTE_BACKWARD,                                                        \
    (float *dlogits, const float *dw, const float *logits, const int32_t *idx, const float *w,     \
     const float *probs, const float *lse, int N, int E, int k, int score, int pre, float scale,   \
     const float *aux, int aux_rows, float zc),                                                    \
    (dlogits, dw, logits, idx, w, probs, lse, N, E, k, score, pre, scale, aux, aux_rows, zc),      \
    GUARDED)                                                                                       \
  /* y(N,C) = [y +] sum over the k slots of row t, in order, of w[t,s] (1 with w NULL) times row   \
  pos[t,s] of src (a slot with pos < 0 is dropped): the experts' rows back into their tokens. */   \
  X(moe_combine, MOE_COMBINE,                                                                      \
    (float *y, const float *src, const int32_t *pos, const float *w, int N, int k, int C,          \
     int accumulate),                                                                              \
    (y, src, pos, w, N, k, C, accumulate), PLAIN)                                                  \
  /* Its backward: row pos[t,s] of dsrc = w[t,s] dy[t] (rows no slot names untouched; each row     \
  named once), dw[t,s] = dy[t] . src[pos[t,s]] (0 for a dropped slot; dw may be NULL). */          \
  X(moe_combine_backward, MOE_COMBINE_BACKWARD,                                                    \
    (float *dsrc, float *dw, const float *dy, const float *src, const int32_t *pos,                \
     const float *w, int N, int k, int C),                                                         \
    (dsrc, dw, dy, src, pos, w, N, k, C), PLAIN)                                                   \
  /* The MLP's first linear layer fused with its bias and GeLU: pre(M,N) = A(M,K) W(N,K)^T + b,    \
  out = gelu(pre), both with leading dimension N (cuBLASLt's bias + GeLU epilogue on GPUs;         \
  gemm then bias_gelu_forward on the CPU). */                                                      \
  X(linear_bias_gelu, LINEAR_BIAS_GELU,                                                            \
    (int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *b,        \
     float *pre, float *out),                                                                      \
    (M, N, K, A, lda, W, ldw, b, pre, out), PLAIN)                                                 \
  /* out(M,N) = A(M,K) W(N,K)^T [+ b(N)] (cuBLASLt's bias epilogue on GPUs). */                    \
  X(linear_bias, LINEAR_BIAS,                                                                      \
    (int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *b,        \
     float *out),                                                                                  \
    (M, N, K, A, lda, W, ldw, b, out), PLAIN)                                                      \
  /* A linear layer's parameter gradients: dW(N,K) = [dW +] dy(M,N)^T x(M,K) and, db not NULL,     \
  db(N) = [db +] the column sums of dy, as the GEMM sees it (rounded under 16 bits;                \
  cuBLASLt's BGRADB epilogue on GPUs). */                                                          \
  X(linear_param_grads, LINEAR_PARAM_GRADS,                                                        \
    (int M, int N, int K, const float *dy, const float *x, float *dW, float *db, int accumulate),  \
    (M, N, K, dy, x, dW, db, accumulate), PLAIN)                                                   \
  /* The gradient through a linear layer W(K,N) into the tanh GeLU before it: dpre(M,N) =          \
  (dy(M,K) W) * gelu'(pre) and, db not NULL, db(N) = [db +] the column sums of dpre: the           \
  GeLU's bias gradient (cuBLASLt's DGELU_BGRAD epilogue on GPUs). */                               \
  X(linear_dgelu, LINEAR_DGELU,                                                                    \
    (int M, int N, int K, const float *dy, const float *W, const float *pre, float *dpre,          \
     float *db, int accumulate),                                                                   \
    (M, N, K, dy, W, pre, dpre, db, accumulate), PLAIN)                                            \
  /* The end of a row-parallel layer, in one pass on GPUs: out(N,C) = [res +] dropout(x [+ b])     \
  (dropout_forward's masks: row elements per sample, element 0 is d->first) and, ln not            \
  NULL, ln = layernorm(out) with w, lb, eps, its mean and rstd (N) kept; with mean NULL,           \
  ln = rmsnorm(out) with w and eps, its rstd kept (lb unused). x is scratch: its contents are      \
  undefined afterwards. out may not alias x. */                                                    \
  X(bias_dropout_add_ln, BIAS_DROPOUT_ADD_LN,                                                      \
    (float *out, float *x, const float *b, const float *res, int N, int C, size_t row,             \
     const mgt_dropout *d, float *ln, float *mean, float *rstd, const float *w, const float *lb,   \
     float eps),                                                                                   \
    (out, x, b, res, N, C, row, d, ln, mean, rstd, w, lb, eps), PLAIN)                             \
  /* y(N,C) += b(C) broadcast over rows. */                                                        \
  X(add_bias, ADD_BIAS, (float *y, const float *b, int N, int C), (y, b, N, C), PLAIN)             \
  /* db(C) = [db +] column sums of dy(N,C). */                                                     \
  X(bias_backward, BIAS_BACKWARD, (float *db, const float *dy, int N, int C, int accumulate),      \
    (db, dy, N, C, accumulate), PLAIN)                                                             \
  /* out(N,C) = (x - mean) * rstd * w + b; mean, rstd (N) kept for backward. */                    \
  X(layernorm_forward, LAYERNORM_FORWARD,                                                          \
    (float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int N,  \
     int C, float eps),                                                                            \
    (out, mean, rstd, x, w, b, N, C, eps), PLAIN)                                                  \
  /* dx += d/dx; dw, db = [dw, db +] parameter gradients. */                                       \
  X(layernorm_backward, LAYERNORM_BACKWARD,                                                        \
    (float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,           \
     const float *mean, const float *rstd, int N, int C, int accumulate),                          \
    (dx, dw, db, dout, x, w, mean, rstd, N, C, accumulate), PLAIN)                                 \
  /* RMSNorm: out(N,C) = x * rstd * w with rstd = 1 / sqrt(mean over C of x^2 + eps), rstd (N)     \
  kept for backward. */                                                                            \
  X(rmsnorm_forward, RMSNORM_FORWARD,                                                              \
    (float *out, float *rstd, const float *x, const float *w, int N, int C, float eps),            \
    (out, rstd, x, w, N, C, eps), PLAIN)                                                           \
  /* dx += d/dx; dw = [dw +] its gradient. */                                                      \
  X(rmsnorm_backward, RMSNORM_BACKWARD,                                                            \
    (float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,   \
     int N, int C, int accumulate),                                                                \
    (dx, dw, dout, x, w, rstd, N, C, accumulate), PLAIN)                                           \
  /* SwiGLU (Llama's MLP): out(N,F) = silu(x[:, :F]) * x[:, F:] for x(N, 2F), the gate and up      \
  projections side by side (silu(g) = g / (1 + exp(-g))). */                                       \
  X(swiglu_forward, SWIGLU_FORWARD, (float *out, const float *x, int N, int F), (out, x, N, F),    \
    PLAIN)                                                                                         \
  /* dx(N, 2F) = the gradients of the gate and up halves of x. */                                  \
  X(swiglu_backward, SWIGLU_BACKWARD,                                                              \
    (float *dx, const float *dout, const float *x, int N, int F), (dx, dout, x, N, F), PLAIN)      \
  /* RMSNorm over each head (Qwen 3's q/k norm), in place: in each of N rows (stride ld floats)    \
  the `heads` consecutive vectors of hd floats at x become v * r * w, r = (mean v^2 + eps)^-1/2;   \
  raw (N, heads*hd) keeps the vectors before, rstd (N*heads) their r, for the backward. With       \
  sums (N floats, heads 1) the vectors are one rank's part of norms `width` floats wide (OLMoE's   \
  over all heads, split over tensor ranks): r = (sums[row] / width + eps)^-1/2, sums[row] the sum  \
  of squares over the whole width (row_dots, then summed over the ranks). */                       \
  X(head_rmsnorm_forward, HEAD_RMSNORM_FORWARD,                                                    \
    (float *x, int ld, float *raw, float *rstd, const float *w, int N, int heads, int hd,          \
     float eps, const float *sums, int width),                                                     \
    (x, ld, raw, rstd, w, N, heads, hd, eps, sums, width), GUARDED)                                \
  /* Its backward in place: dx (the same strided vectors) from the gradient of the output to that  \
  of the input; dw (hd) = [dw +] the sum over rows and heads of dout * raw * rstd. With sums (N    \
  floats, heads 1): each row's sum of dout * w * raw over the whole width (row_dots with w, summed \
  over the ranks). */                                                                              \
  X(head_rmsnorm_backward, HEAD_RMSNORM_BACKWARD,                                                  \
    (float *dx, int ld, float *dw, const float *raw, const float *rstd, const float *w, int N,     \
     int heads, int hd, int accumulate, const float *sums, int width),                             \
    (dx, ld, dw, raw, rstd, w, N, heads, hd, accumulate, sums, width), GUARDED)                    \
  /* out[r] = sum over c < n of a[r*lda + c] * b[r*ldb + c] (* w[c] when w is given), r < N. */    \
  X(row_dots, ROW_DOTS,                                                                            \
    (float *out, const float *a, int lda, const float *b, int ldb, const float *w, int N, int n),  \
    (out, a, lda, b, ldb, w, N, n), GUARDED)                                                       \
  /* Rotary position embedding in place, in Hugging Face's half-split convention: in each of N     \
  rows (stride ld floats) the `heads` consecutive vectors of hd floats at x, at position pos0 +    \
  row % T (or pos[row], N ints in the backend's memory, when pos is given), have each pair (i,     \
  i + hd/2) rotated by the angle position * inv_freq[i] (float32, as Hugging Face computes it;     \
  inv_freq: hd/2 floats in the backend's memory). With inverse the rotation is undone: the         \
  backward of the forward. hd is even. */                                                          \
  X(rope, ROPE,                                                                                    \
    (float *x, int N, int T, int pos0, const int32_t *pos, int heads, int hd, int ld,              \
     const float *inv_freq, int inverse),                                                          \
    (x, N, T, pos0, pos, heads, hd, ld, inv_freq, inverse), GUARDED)                               \
  /* Grouped-query attention over the multi-head kernels: Gl key/value heads shared by Hl query    \
  heads, head h using group h / (Hl/Gl) (Hugging Face's repeat_kv, Megatron's repeat_interleave).  \
  Forward (reduce 0): rows of src (N, (Hl + 2*Gl)*hd), [q | k | v], become rows of dst             \
  (N, 3*Hl*hd) with each group's k and v repeated for its heads. Backward (reduce 1): the          \
  gradient src (N, 3*Hl*hd) becomes dst (N, (Hl + 2*Gl)*hd), a group's dk and dv the sum of its    \
  heads' in head order. Hl is a multiple of Gl. */                                                 \
  X(kv_group, KV_GROUP, (float *dst, const float *src, int N, int Hl, int Gl, int hd, int reduce), \
    (dst, src, N, Hl, Gl, hd, reduce), GUARDED)                                                    \
  /* pre(N,C) += b; out = gelu(pre), tanh form. */                                                 \
  X(bias_gelu_forward, BIAS_GELU_FORWARD, (float *out, float *pre, const float *b, int N, int C),  \
    (out, pre, b, N, C), PLAIN)                                                                    \
  /* dpre = dout * gelu'(pre); dpre may alias dout. */                                             \
  X(gelu_backward, GELU_BACKWARD, (float *dpre, const float *dout, const float *pre, size_t n),    \
    (dpre, dout, pre, n), PLAIN)                                                                   \
  /* Self-attention of Hl local heads. qkv (B*T, 3*Hl*hd) holds [q | k | v], each (Hl, hd)         \
  per token; out (B*T, Hl*hd); P (B, Hl, T, T) softmax probabilities before dropout.               \
  keylen NULL: causal, row i sees keys j <= i. Otherwise keylen (B, backend memory) is             \
  each sample's real length and every row sees keys j < keylen[b] (BERT's padding mask;            \
  rows past the length are computed the same way and carry no gradient to real rows).              \
  kfirst (B*T, backend memory) or NULL: row i of sample b sees no key before kfirst[b*T + i] (the  \
  first of its document: documents kept apart, causal only; the CUDA kernels refuse it yet).       \
  head_offset is the global index of local head 0, for the dropout mask. scratch holds             \
  B*Hl*T*T floats. */                                                                              \
  X(attention_forward, ATTENTION_FORWARD,                                                          \
    (float *out, float *P, const float *qkv, int B, int T, int Hl, int hd, int head_offset, int H, \
     const int32_t *keylen, const int32_t *kfirst, const mgt_dropout *d, float *scratch),          \
    (out, P, qkv, B, T, Hl, hd, head_offset, H, keylen, kfirst, d, scratch), PLAIN)                \
  /* dqkv = gradient wrt qkv (overwritten). scratch holds B*Hl*T*T floats. */                      \
  X(attention_backward, ATTENTION_BACKWARD,                                                        \
    (float *dqkv, const float *dout, const float *qkv, const float *P, int B, int T, int Hl,       \
     int hd, int head_offset, int H, const int32_t *keylen, const int32_t *kfirst,                 \
     const mgt_dropout *d, float *scratch),                                                        \
    (dqkv, dout, qkv, P, B, T, Hl, hd, head_offset, H, keylen, kfirst, d, scratch), PLAIN)         \
  /* The same attention without the T x T probabilities (--use-flash-attn): tiles of keys with     \
  an online softmax, the same dropout masks; lse (B, Hl, T) keeps each row's log-sum-exp           \
  for the backward, which rebuilds the probabilities tile by tile from it and from out,            \
  the forward's output. dqkv is overwritten. No scratch: O(T) memory per (batch, head). */         \
  X(flash_attention_forward, FLASH_ATTENTION_FORWARD,                                              \
    (float *out, float *lse, const float *qkv, int B, int T, int Hl, int hd, int head_offset,      \
     const int32_t *keylen, const int32_t *kfirst, const mgt_dropout *d),                          \
    (out, lse, qkv, B, T, Hl, hd, head_offset, keylen, kfirst, d), PLAIN)                          \
  X(flash_attention_backward, FLASH_ATTENTION_BACKWARD,                                            \
    (float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, int B,  \
     int T, int Hl, int hd, int head_offset, const int32_t *keylen, const int32_t *kfirst,         \
     const mgt_dropout *d),                                                                        \
    (dqkv, dout, qkv, out, lse, B, T, Hl, hd, head_offset, keylen, kfirst, d), PLAIN)              \
  /* The activations of BERT's heads (MGT_ACT_*): pre(N,C) += b (b may be NULL), out =             \
  act(pre); and dpre = dout * act'(pre), dpre may alias dout. */                                   \
  X(bias_act_forward, BIAS_ACT_FORWARD,                                                            \
    (int act, float *out, float *pre, const float *b, int N, int C), (act, out, pre, b, N, C),     \
    PLAIN)                                                                                         \
  X(act_backward, ACT_BACKWARD,                                                                    \
    (int act, float *dpre, const float *dout, const float *pre, size_t n),                         \
    (act, dpre, dout, pre, n), PLAIN)                                                              \
  /* out(M,C) = rows idx[m] of x; idx (M) in backend memory. BERT's heads take the masked          \
  positions and each [CLS] this way. */                                                            \
  X(gather_rows, GATHER_ROWS, (float *out, const float *x, const int32_t *idx, int M, int C),      \
    (out, x, idx, M, C), PLAIN)                                                                    \
  /* dx[idx[m]] += dy[m], the indices distinct. */                                                 \
  X(scatter_add_rows, SCATTER_ADD_ROWS,                                                            \
    (float *dx, const float *dy, const int32_t *idx, int M, int C), (dx, dy, idx, M, C), PLAIN)    \
  /* out(N,C) = rows of wte (Vl,C) for tokens in [v0, v0+Vl), zero rows otherwise. */              \
  X(embedding_forward, EMBEDDING_FORWARD,                                                          \
    (float *out, const int32_t *tokens, const float *wte, int N, int C, int v0, int Vl),           \
    (out, tokens, wte, N, C, v0, Vl), PLAIN)                                                       \
  /* x(N,C) += wpe(T,C): row n is position (t0 + n) mod T (t0 > 0: a rank's rows under             \
  sequence parallelism), or pos[n] when pos (N ints, backend memory) is given */                   \
  X(add_position, ADD_POSITION,                                                                    \
    (float *x, const float *wpe, int N, int t0, int T, int C, const int32_t *pos),                 \
    (x, wpe, N, t0, T, C, pos), PLAIN)                                                             \
  /* dwte[tok - v0] += dout for tokens in range; dwpe = [dwpe +] the sum of each position's rows   \
  (row n at n % T, or pos[n] when pos is given), rows in order. */                                 \
  X(embedding_backward, EMBEDDING_BACKWARD,                                                        \
    (float *dwte, float *dwpe, const float *dout, const int32_t *tokens, const int32_t *pos,       \
     int B, int T, int C, int v0, int Vl, int accumulate),                                         \
    (dwte, dwpe, dout, tokens, pos, B, T, C, v0, Vl, accumulate), PLAIN)                           \
  /* out = [res +] dropout(x) over n elements: element i is element d->first + i of the            \
  micro-batch, whose samples are `row` elements each; p = 0 is a plain add/copy. out may           \
  alias x. */                                                                                      \
  X(dropout_forward, DROPOUT_FORWARD,                                                              \
    (float *out, const float *x, const float *res, size_t n, size_t row, const mgt_dropout *d),    \
    (out, x, res, n, row, d), PLAIN)                                                               \
  /* dx = dropout mask applied to dout; dx may alias dout. */                                      \
  X(dropout_backward, DROPOUT_BACKWARD,                                                            \
    (float *dx, const float *dout, size_t n, size_t row, const mgt_dropout *d),                    \
    (dx, dout, n, row, d), PLAIN)                                                                  \
  /* y += x */                                                                                     \
  X(add, ADD, (float *y, const float *x, size_t n), (y, x, n), PLAIN)                              \
  /* Vocabulary-parallel cross-entropy over logits (N, Vl) of which the first nv columns           \
  are real vocabulary starting at global id v0. Step 1: rowmax(N). */                              \
  X(xent_max, XENT_MAX, (float *rowmax, const float *logits, int N, int Vl, int nv),               \
    (rowmax, logits, N, Vl, nv), PLAIN)                                                            \
  /* Step 2 (after the max is reduced): sum(N) of exp(l - max) and the target logit tgt(N)         \
  (0 when the target lives on another rank). With keep_exp, logits become exp(l - max). */         \
  X(xent_sumexp, XENT_SUMEXP,                                                                      \
    (float *sum, float *tgt, float *logits, const float *rowmax, const int32_t *targets, int N,    \
     int Vl, int nv, int v0, int keep_exp),                                                        \
    (sum, tgt, logits, rowmax, targets, N, Vl, nv, v0, keep_exp), PLAIN)                           \
  /* Step 3 (after sum and tgt are reduced): losses(N) = log(sum) + max - tgt, 0 where the target  \
  is negative (a token without loss); returns their total on the host. */                          \
  X(xent_loss, XENT_LOSS,                                                                          \
    (float *losses, const float *rowmax, const float *sum, const float *tgt,                       \
     const int32_t *targets, int N, double *total),                                                \
    (losses, rowmax, sum, tgt, targets, N, total), PLAIN)                                          \
  /* Step 4: logits holding exp(l - max) become scale * (softmax - onehot), 0 where the target is  \
  negative. */                                                                                     \
  X(xent_backward, XENT_BACKWARD,                                                                  \
    (float *logits, const float *sum, const int32_t *targets, int N, int Vl, int nv, int v0,       \
     float scale),                                                                                 \
    (logits, sum, targets, N, Vl, nv, v0, scale), PLAIN)                                           \
  /* Greedy prediction: per row of logits (N, Vl), the largest of the first nv columns             \
  (lowest index on ties); val = -FLT_MAX and idx = -1 when nv is 0. val and idx are host           \
  arrays of N. */                                                                                  \
  X(argmax, ARGMAX, (const float *logits, int N, int Vl, int nv, float *val, int32_t *idx),        \
    (logits, N, Vl, nv, val, idx), PLAIN)                                                          \
  /* One query per head against the first len rows of a key/value cache: q and out are             \
  (Hl*hd); kc and vc are (rows, Gl*hd) with key/value head g in columns g*hd, shared by the        \
  Hl/Gl consecutive query heads g*Hl/Gl ... (grouped-query attention; Gl == Hl: one each). */      \
  X(attention_decode, ATTENTION_DECODE,                                                            \
    (float *out, const float *q, const float *kc, const float *vc, int len, int Hl, int Gl,        \
     int hd),                                                                                      \
    (out, q, kc, vc, len, Hl, Gl, hd), GUARDED)                                                    \
  /* Sum of squares over the segments with count_in_norm set, on the host. */                      \
  X(sumsq, SUMSQ, (const float *x, const mgt_segment *segs, int nseg, double *out),                \
    (x, segs, nseg, out), PLAIN)                                                                   \
  /* One AdamW step over the segments of the flat buffers; with s->copies (p must then be          \
  set_weights' w) also the 16-bit copies of the elements it updates, as refresh_weights would. */  \
  X(adamw, ADAMW,                                                                                  \
    (float *p, const float *g, float *m, float *v, const mgt_segment *segs, int nseg,              \
     const mgt_adamw_step *s),                                                                     \
    (p, g, m, v, segs, nseg, s), PLAIN)

#define MGT_BE_UNPACK(...) __VA_ARGS__
#define MGT_BE_ENUM(name, NAME, params, args, kind) MGT_BE_##NAME,
/* The operations, for asking whether a backend has one (mgt_be_has). */
typedef enum mgt_be_op { MGT_BE_OPERATIONS(MGT_BE_ENUM) MGT_BE_N_OPS } mgt_be_op;
#undef MGT_BE_ENUM
int mgt_be_has(const mgt_backend *be, mgt_be_op op);
/* Its name ("gemm"), or NULL beyond the list. */
const char *mgt_be_op_name(mgt_be_op op);

#define MGT_BE_PROTOTYPE(name, NAME, params, args, kind)                                           \
  MGT_NODISCARD mgt_status mgt_be_##name(const mgt_backend *be, MGT_BE_UNPACK params);
MGT_BE_OPERATIONS(MGT_BE_PROTOTYPE)
#undef MGT_BE_PROTOTYPE

/* The CPU backend: BLAS for GEMMs, OpenMP for the rest. Not collective. */
MGT_NODISCARD mgt_status mgt_backend_cpu_create(mgt_backend **out);
void mgt_backend_destroy(mgt_backend **be);

/* The CUDA backend on `device` (cuBLAS and kernels on one stream of its own); buffers are
   device memory. Built with MGT_CUDA (MGT_HAVE_CUDA defined); not collective. */
MGT_NODISCARD mgt_status mgt_backend_cuda_create(int device, mgt_backend **out);
/* The same on the caller's stream (a cudaStream_t) and cuBLAS handle (a cublasHandle_t, which
   is set to that stream while the backend lives), either NULL to create one; the caller's are
   not destroyed, and a caller's handle gets its own stream and math mode back at destruction.
   For embedding megatron-c in an application that owns its streams. */
MGT_NODISCARD mgt_status mgt_backend_cuda_create_on(int device, void *stream, void *blas,
                                                    mgt_backend **out);
/* Visible CUDA devices (0 with no driver or no device). */
int mgt_cuda_device_count(void);
/* Free and total bytes of CUDA device `device` without a backend on it; 0 when they cannot be
   read. */
int mgt_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes);
/* The backend's stream (a cudaStream_t), for device-buffer collectives. */
void *mgt_backend_cuda_stream(const mgt_backend *be);
/* 1 when the last linear_bias_gelu at the backend's current precision ran as one cuBLASLt
   call with the bias + GeLU epilogue, 0 when it fell back (no suitable algorithm, or cuBLASLt
   failed at that precision) to a GEMM and the bias + GeLU kernel. */
int mgt_backend_cuda_fused_epilogue(const mgt_backend *be);
/* The same for each fused cuBLASLt epilogue: whether the last call of its operation at the
   current precision ran as one cuBLASLt matmul. */
enum {
  MGT_CUDA_EPI_BIAS_GELU = 0, /* linear_bias_gelu */
  MGT_CUDA_EPI_BIAS = 1,      /* linear_bias */
  MGT_CUDA_EPI_BGRAD = 2,     /* linear_param_grads with db */
  MGT_CUDA_EPI_DGELU = 3      /* linear_dgelu with db */
};
int mgt_backend_cuda_fused(const mgt_backend *be, int epilogue);
/* Name and memory (free, total bytes) of the backend's device. */
MGT_NODISCARD mgt_status mgt_backend_cuda_info(const mgt_backend *be, char *name, size_t name_size,
                                               size_t *free_bytes, size_t *total_bytes);

/* Rounds to the nearest bfloat16 / IEEE half (ties to even; half overflows to infinity):
   the CPU twins of the GPU's conversions. */
float mgt_round_bf16(float x);
float mgt_round_fp16(float x);

/* Whether the 16-bit flash attention tiles heads of size hd (the GPU's tensor-core kernels and
   their CPU twin): 32, 64 and 128. */
int mgt_flash16_head(int hd);
/* The OpenBLAS kernel family in use (e.g. "Haswell"; OPENBLAS_CORETYPE chooses it), or
   "CBLAS" for another BLAS. */
const char *mgt_cpu_blas_name(void);
/* Whether this build and CPU can multiply bf16 GEMMs on the CPU's own bf16 units (oneDNN on
   AVX512-BF16 or AMX); `what` (may be NULL) names the library and units, or says why not. */
int mgt_cpu_bf16_units(char *what, size_t n);
/* The CPU backend's bf16 GEMMs: on the bf16 units (on = 1: bf16 operands, fp32 accumulation)
   or emulated (0, the default: operands rounded to bf16, multiplied by sgemm; the CUDA
   kernels' twin, bit for bit what conformance tests compare). Fails where the units or oneDNN
   are missing. 16-bit weight copies are dropped: register them again (set_weights). */
MGT_NODISCARD mgt_status mgt_backend_cpu_native(mgt_backend *be, int on);
/* The CPU backend's fp32 GEMMs: through oneDNN's fp32 matmul (on = 1) or the BLAS's sgemm (0,
   the default). Fails where oneDNN is missing. */
MGT_NODISCARD mgt_status mgt_backend_cpu_fp32_onednn(mgt_backend *be, int on);
/* The fp32 GEMM rates (FLOP/s) of the BLAS and of oneDNN (0 without it) over one layer's GEMMs
   at `rows` tokens, widths C (hidden), qkv (the QKV projection's outputs, 3 times the
   attention's) and f (the MLP's): each product forward and in both backward orientations, the
   best of two timings after a warm-up. Returns the FLOPs of one timing. */
double mgt_cpu_fp32_gemm_rates(int rows, int C, int qkv, int f, double *blas, double *dnn);

#ifdef __cplusplus
}
#endif
