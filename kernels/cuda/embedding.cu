/* The CUDA backend: embeddings forward and backward. */
#include "cuda_impl.h"

namespace mgt_cu {

__global__ void k_embedding_forward(float *out, const int32_t *tokens, const float *wte, int N,
                                    int C, int v0, int Vl) {
  GRID_STRIDE(i, (size_t)N * C) {
    int n = (int)(i / C), c = (int)(i % C), t = tokens[n] - v0;
    out[i] = (t >= 0 && t < Vl) ? wte[(size_t)t * C + c] : 0.0f;
  }
}

mgt_status cu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const float *wte,
                                int N, int C, int v0, int Vl) {
  if ((size_t)N * C == 0) return MGT_OK;
  k_embedding_forward<<<blocks_for((size_t)N * C, 256), 256, 0, C_(ctx)->stream>>>(out, tokens, wte,
                                                                                   N, C, v0, Vl);
  LAUNCHED();
  return MGT_OK;
}

__global__ void k_add_position(float *x, const float *wpe, int t0, int T, int C, const int32_t *pos,
                               size_t n) {
  GRID_STRIDE(i, n) {
    const size_t row = i / C, p = pos ? (size_t)pos[row] : (t0 + row) % T;
    x[i] += wpe[p * C + i % C];
  }
}

mgt_status cu_add_position(void *ctx, float *x, const float *wpe, int N, int t0, int T, int C,
                           const int32_t *pos) {
  size_t n = (size_t)N * C;
  if (!n) return MGT_OK;
  k_add_position<<<blocks_for(n, 256), 256, 0, C_(ctx)->stream>>>(x, wpe, t0, T, C, pos, n);
  LAUNCHED();
  return MGT_OK;
}

/* One thread per column, rows in order: a token seen twice adds in row order, as on the CPU,
   without atomics. */
__global__ void k_embedding_backward_wte(float *dwte, const float *dout, const int32_t *tokens,
                                         int N, int C, int v0, int Vl) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; n++) {
    int t = tokens[n] - v0;
    if (t >= 0 && t < Vl) dwte[(size_t)t * C + c] += dout[(size_t)n * C + c];
  }
}

__global__ void k_embedding_backward_wpe(float *dwpe, const float *dout, int B, int T, int C,
                                         int acc) {
  GRID_STRIDE(i, (size_t)T * C) {
    float s = acc ? dwpe[i] : 0.0f;
    for (int b = 0; b < B; b++)
      s += dout[(size_t)b * T * C + i];
    dwpe[i] = s;
  }
}

/* Positions of their own: one thread per column, rows in order, as the CPU twin. */
__global__ void k_embedding_backward_wpe_pos(float *dwpe, const float *dout, const int32_t *pos,
                                             int N, int T, int C, int acc) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int t = 0; t < T && !acc; t++)
    dwpe[(size_t)t * C + c] = 0.0f;
  for (int n = 0; n < N; n++)
    dwpe[(size_t)pos[n] * C + c] += dout[(size_t)n * C + c];
}

mgt_status cu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, const int32_t *pos, int B, int T, int C,
                                 int v0, int Vl, int accumulate) {
  cudaStream_t s = C_(ctx)->stream;
  if (C == 0) return MGT_OK;
  k_embedding_backward_wte<<<(C + 127) / 128, 128, 0, s>>>(dwte, dout, tokens, B * T, C, v0, Vl);
  LAUNCHED();
  if (dwpe && pos) {
    k_embedding_backward_wpe_pos<<<(C + 127) / 128, 128, 0, s>>>(dwpe, dout, pos, B * T, T, C,
                                                                 accumulate);
    LAUNCHED();
  } else if (dwpe && (size_t)T * C > 0) {
    k_embedding_backward_wpe<<<blocks_for((size_t)T * C, 256), 256, 0, s>>>(dwpe, dout, B, T, C,
                                                                            accumulate);
    LAUNCHED();
  }
  return MGT_OK;
}

} // namespace mgt_cu
