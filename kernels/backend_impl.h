/* The backend's table of operations: private to the backends that fill it (kernels/cpu,
   kernels/cuda) and to the checked wrappers (kernels/backend.c), as ggml's backend
   implementation header. Everything else calls the wrappers of include/mgt/backend.h, which
   fail with "backend NAME lacks operation OP" where a slot is empty. */
#pragma once

#include "mgt/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mgt_backend {
  const char *name;
  void *ctx;

  /* Memory. alloc returns zeroed memory. */
  mgt_status (*alloc)(void *ctx, size_t bytes, const char *what, void **out);
  void (*free)(void *ctx, void *p);
  mgt_status (*zero)(void *ctx, void *p, size_t bytes);
  mgt_status (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes);
  /* dst = src, both in the backend's memory. */
  mgt_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
  mgt_status (*download)(void *ctx, void *host_dst, const void *src, size_t bytes);
  /* Waits for queued work to finish (timers and host reads need it). */
  mgt_status (*sync)(void *ctx);
  /* Releases what the backend holds (handles, streams, scratch); NULL if nothing. */
  void (*destroy)(void *ctx);
  /* Sets the precision of gemm's inputs from now on; a change drops the weights' copies
     (set_weights), so that no GEMM reads values rounded to another format. */
  mgt_status (*set_precision)(void *ctx, mgt_precision prec);
  /* 16-bit copies of the weights, made once per step instead of once per GEMM: registers the
     fp32 parameters [w, w + n) (n = 0 forgets them if w is the registered start) and, under a
     16-bit precision, allocates their rounded copy, which gemm and linear_bias_gelu then read for
     any operand that lies inside [w, w + n) instead of rounding it again. The copy is only as fresh
     as the last refresh_weights of each range, which the caller makes after the parameters change
     and before the next GEMM reads them; at fp32 both do nothing. */
  mgt_status (*set_weights)(void *ctx, const float *w, size_t n);
  mgt_status (*refresh_weights)(void *ctx, size_t offset, size_t n);
  /* 16-bit activations: under a 16-bit precision, [p, p + bytes) holds GEMM-input activations
     in that format, act16_bytes per element (2 on GPUs; 4 on the CPU, floats holding 16-bit
     values, so that BLAS multiplies them as they are). A buffer there is addressed by its first
     element as a float pointer (its elements are not floats on GPUs: only the operations below
     touch it). linear_bias_gelu writes its out there already rounded, gemm and
     linear_param_grads read operands there without rounding them; the numbers are those of
     rounding per GEMM. bytes = 0 forgets the region if p is its start; while one is set the
     precision cannot change. */
  mgt_status (*set_act16)(void *ctx, void *p, size_t bytes);
  int act16_bytes;

  /* p = std * N(0,1) by logical element index, or 0 on padding. */
  mgt_status (*init_normal)(void *ctx, float *p, const mgt_shard *sh, uint64_t seed,
                            uint64_t stream, float std);
  mgt_status (*fill)(void *ctx, float *p, size_t n, float value);

  /* C(M,N) = alpha * op(A) op(B) + beta * C, A and B rounded to the set precision. */
  mgt_status (*gemm)(void *ctx, int transa, int transb, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
  /* The MLP's first linear layer fused with its bias and GeLU: pre(M,N) = A(M,K) W(N,K)^T + b,
     out = gelu(pre), both with leading dimension N (cuBLASLt's bias + GeLU epilogue on GPUs;
     gemm then bias_gelu_forward on the CPU). */
  mgt_status (*linear_bias_gelu)(void *ctx, int M, int N, int K, const float *A, int lda,
                                 const float *W, int ldw, const float *b, float *pre, float *out);
  /* out(M,N) = A(M,K) W(N,K)^T [+ b(N)] (cuBLASLt's bias epilogue on GPUs). */
  mgt_status (*linear_bias)(void *ctx, int M, int N, int K, const float *A, int lda, const float *W,
                            int ldw, const float *b, float *out);
  /* A linear layer's parameter gradients: dW(N,K) = [dW +] dy(M,N)^T x(M,K) and, db not NULL,
     db(N) = [db +] the column sums of dy, as the GEMM sees it (rounded under 16 bits;
     cuBLASLt's BGRADB epilogue on GPUs). */
  mgt_status (*linear_param_grads)(void *ctx, int M, int N, int K, const float *dy, const float *x,
                                   float *dW, float *db, int accumulate);
  /* The gradient through a linear layer W(K,N) into the tanh GeLU before it: dpre(M,N) =
     (dy(M,K) W) * gelu'(pre) and, db not NULL, db(N) = [db +] the column sums of dpre: the
     GeLU's bias gradient (cuBLASLt's DGELU_BGRAD epilogue on GPUs). */
  mgt_status (*linear_dgelu)(void *ctx, int M, int N, int K, const float *dy, const float *W,
                             const float *pre, float *dpre, float *db, int accumulate);
  /* The end of a row-parallel layer, in one pass on GPUs: out(N,C) = [res +] dropout(x [+ b])
     (dropout_forward's masks: row elements per sample, element 0 is d->first) and, ln not
     NULL, ln = layernorm(out) with w, lb, eps, its mean and rstd (N) kept. x is scratch: its
     contents are undefined afterwards. out may not alias x. */
  mgt_status (*bias_dropout_add_ln)(void *ctx, float *out, float *x, const float *b,
                                    const float *res, int N, int C, size_t row,
                                    const mgt_dropout *d, float *ln, float *mean, float *rstd,
                                    const float *w, const float *lb, float eps);
  /* y(N,C) += b(C) broadcast over rows. */
  mgt_status (*add_bias)(void *ctx, float *y, const float *b, int N, int C);
  /* db(C) = [db +] column sums of dy(N,C). */
  mgt_status (*bias_backward)(void *ctx, float *db, const float *dy, int N, int C, int accumulate);

  /* out(N,C) = (x - mean) * rstd * w + b; mean, rstd (N) kept for backward. */
  mgt_status (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd, const float *x,
                                  const float *w, const float *b, int N, int C, float eps);
  /* dx += d/dx; dw, db = [dw, db +] parameter gradients. */
  mgt_status (*layernorm_backward)(void *ctx, float *dx, float *dw, float *db, const float *dout,
                                   const float *x, const float *w, const float *mean,
                                   const float *rstd, int N, int C, int accumulate);
  /* RMSNorm: out(N,C) = x * rstd * w, rstd = 1 / sqrt(mean of x^2 + eps) (N) kept. */
  mgt_status (*rmsnorm_forward)(void *ctx, float *out, float *rstd, const float *x, const float *w,
                                int N, int C, float eps);
  /* dx += d/dx; dw = [dw +] its gradient. */
  mgt_status (*rmsnorm_backward)(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                                 const float *w, const float *rstd, int N, int C, int accumulate);

  /* pre(N,C) += b; out = gelu(pre), tanh form. */
  mgt_status (*bias_gelu_forward)(void *ctx, float *out, float *pre, const float *b, int N, int C);
  /* dpre = dout * gelu'(pre); dpre may alias dout. */
  /* SwiGLU (Llama's MLP): out(N,F) = silu(x[:, :F]) * x[:, F:] of x(N, 2F), the gate and up
     projections side by side. */
  mgt_status (*swiglu_forward)(void *ctx, float *out, const float *x, int N, int F);
  /* dx(N, 2F) = the gradient of the gate and up halves. */
  mgt_status (*swiglu_backward)(void *ctx, float *dx, const float *dout, const float *x, int N,
                                int F);
  /* Rotary positions in place (Hugging Face's half-split convention): in each of N rows
     (stride ld) `heads` vectors of hd at x, position pos0 + row % T, the pair (i, i + hd/2)
     rotated by position * inv_freq[i] (hd/2 floats); inverse rotates back (the backward). */
  mgt_status (*rope)(void *ctx, float *x, int N, int T, int pos0, int heads, int hd, int ld,
                     const float *inv_freq, int inverse);
  /* Grouped key/value heads repeated for their query heads (reduce 0), or the gradient summed
     back per group (reduce 1); see mgt_be_kv_group. */
  mgt_status (*kv_group)(void *ctx, float *dst, const float *src, int N, int Hl, int Gl, int hd,
                         int reduce);
  mgt_status (*gelu_backward)(void *ctx, float *dpre, const float *dout, const float *pre,
                              size_t n);

  /* Self-attention of Hl local heads. qkv (B*T, 3*Hl*hd) holds [q | k | v], each (Hl, hd)
     per token; out (B*T, Hl*hd); P (B, Hl, T, T) softmax probabilities before dropout.
     keylen NULL: causal, row i sees keys j <= i. Otherwise keylen (B, backend memory) is
     each sample's real length and every row sees keys j < keylen[b] (BERT's padding mask;
     rows past the length are computed the same way and carry no gradient to real rows).
     head_offset is the global index of local head 0, for the dropout mask. scratch holds
     B*Hl*T*T floats. */
  mgt_status (*attention_forward)(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                                  int Hl, int hd, int head_offset, int H, const int32_t *keylen,
                                  const mgt_dropout *d, float *scratch);
  /* dqkv = gradient wrt qkv (overwritten). scratch holds B*Hl*T*T floats. */
  mgt_status (*attention_backward)(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                   const float *P, int B, int T, int Hl, int hd, int head_offset,
                                   int H, const int32_t *keylen, const mgt_dropout *d,
                                   float *scratch);

  /* The same attention without the T x T probabilities (--use-flash-attn): tiles of keys with
     an online softmax, the same dropout masks; lse (B, Hl, T) keeps each row's log-sum-exp
     for the backward, which rebuilds the probabilities tile by tile from it and from out,
     the forward's output. dqkv is overwritten. No scratch: O(T) memory per (batch, head). */
  mgt_status (*flash_attention_forward)(void *ctx, float *out, float *lse, const float *qkv, int B,
                                        int T, int Hl, int hd, int head_offset,
                                        const int32_t *keylen, const mgt_dropout *d);
  mgt_status (*flash_attention_backward)(void *ctx, float *dqkv, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         int B, int T, int Hl, int hd, int head_offset,
                                         const int32_t *keylen, const mgt_dropout *d);

  /* The activations of BERT's heads (MGT_ACT_*): pre(N,C) += b (b may be NULL), out =
     act(pre); and dpre = dout * act'(pre), dpre may alias dout. */
  mgt_status (*bias_act_forward)(void *ctx, int act, float *out, float *pre, const float *b, int N,
                                 int C);
  mgt_status (*act_backward)(void *ctx, int act, float *dpre, const float *dout, const float *pre,
                             size_t n);
  /* out(M,C) = rows idx[m] of x; idx (M) in backend memory. BERT's heads take the masked
     positions and each [CLS] this way. */
  mgt_status (*gather_rows)(void *ctx, float *out, const float *x, const int32_t *idx, int M,
                            int C);
  /* dx[idx[m]] += dy[m], the indices distinct. */
  mgt_status (*scatter_add_rows)(void *ctx, float *dx, const float *dy, const int32_t *idx, int M,
                                 int C);

  /* out(N,C) = rows of wte (Vl,C) for tokens in [v0, v0+Vl), zero rows otherwise. */
  mgt_status (*embedding_forward)(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C, int v0, int Vl);
  /* x(N,C) += wpe(T,C): row n is position (t0 + n) mod T (t0 > 0: a rank's rows under
     sequence parallelism) */
  mgt_status (*add_position)(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C);
  /* dwte[tok - v0] += dout for tokens in range; dwpe = [dwpe +] sum over the batch. */
  mgt_status (*embedding_backward)(void *ctx, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int B, int T, int C, int v0, int Vl,
                                   int accumulate);

  /* out = [res +] dropout(x) over n elements: element i is element d->first + i of the
     micro-batch, whose samples are `row` elements each; p = 0 is a plain add/copy. out may
     alias x. */
  mgt_status (*dropout_forward)(void *ctx, float *out, const float *x, const float *res, size_t n,
                                size_t row, const mgt_dropout *d);
  /* dx = dropout mask applied to dout; dx may alias dout. */
  mgt_status (*dropout_backward)(void *ctx, float *dx, const float *dout, size_t n, size_t row,
                                 const mgt_dropout *d);
  /* y += x */
  mgt_status (*add)(void *ctx, float *y, const float *x, size_t n);

  /* Vocabulary-parallel cross-entropy over logits (N, Vl) of which the first nv columns
     are real vocabulary starting at global id v0. Step 1: rowmax(N). */
  mgt_status (*xent_max)(void *ctx, float *rowmax, const float *logits, int N, int Vl, int nv);
  /* Step 2 (after the max is reduced): sum(N) of exp(l - max) and the target logit tgt(N)
     (0 when the target lives on another rank). With keep_exp, logits become exp(l - max). */
  mgt_status (*xent_sumexp)(void *ctx, float *sum, float *tgt, float *logits, const float *rowmax,
                            const int32_t *targets, int N, int Vl, int nv, int v0, int keep_exp);
  /* Step 3 (after sum and tgt are reduced): losses(N) = log(sum) + max - tgt; returns
     their total on the host. */
  mgt_status (*xent_loss)(void *ctx, float *losses, const float *rowmax, const float *sum,
                          const float *tgt, int N, double *total);
  /* Step 4: logits holding exp(l - max) become scale * (softmax - onehot). */
  mgt_status (*xent_backward)(void *ctx, float *logits, const float *sum, const int32_t *targets,
                              int N, int Vl, int nv, int v0, float scale);

  /* Greedy prediction: per row of logits (N, Vl), the largest of the first nv columns
     (lowest index on ties); val = -FLT_MAX and idx = -1 when nv is 0. val and idx are host
     arrays of N. */
  mgt_status (*argmax)(void *ctx, const float *logits, int N, int Vl, int nv, float *val,
                       int32_t *idx);
  /* One query per head against the first len rows of a key/value cache: q and out are
     (Hl*hd); kc and vc are (rows, Hl*hd) with head h in columns h*hd. */
  mgt_status (*attention_decode)(void *ctx, float *out, const float *q, const float *kc,
                                 const float *vc, int len, int Hl, int Gl, int hd);

  /* Sum of squares over the segments with count_in_norm set, on the host. */
  mgt_status (*sumsq)(void *ctx, const float *x, const mgt_segment *segs, int nseg, double *out);
  /* One AdamW step over the segments of the flat buffers. */
  mgt_status (*adamw)(void *ctx, float *p, const float *g, float *m, float *v,
                      const mgt_segment *segs, int nseg, const mgt_adamw_step *s);
};

#ifdef __cplusplus
}
#endif
