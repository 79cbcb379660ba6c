/* Private to the CUDA backend: flash attention with bf16 or fp16 tensor-core operands
   (flash16.cu), the twin of the 16-bit contract written at the top of kernels/cpu/flash.c.
   C++ with CUDA types: included by backend_cuda.cu only, never by a public header. */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "mgt/backend.h"

/* 1 when head dim hd has a tensor-core kernel (32, 64, 128: cpu_flash16_hd, the head dims the
   CPU twin rounds for); any other runs the fp32 kernels on both backends. */
int flash16_supported(int hd);

/* flash_attention_forward of include/mgt/backend.h with the operands rounded to bfloat16
   (bf16 nonzero) or IEEE half: qkv (B*T, 3*Hl*hd), out (B*T, Hl*hd), lse (B, Hl, T), keylen
   NULL (causal) or (B) in device memory, all device memory and fp32. Queued on s; allocates
   nothing. hd must be supported. Not collective. */
mgt_status flash16_forward(cudaStream_t s, int bf16, float *out, float *lse, const float *qkv,
                           int B, int T, int Hl, int hd, int head_offset, const int32_t *keylen,
                           const mgt_dropout *d);

/* flash_attention_backward in the same precision: dqkv (B*T, 3*Hl*hd) is overwritten. D is
   device scratch of B*Hl*T floats (each row's dO . O, written by the first kernel and read by
   the second; its contents on entry do not matter). Queued on s; allocates nothing. Not
   collective. */
mgt_status flash16_backward(cudaStream_t s, int bf16, float *dqkv, float *D, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B, int T,
                            int Hl, int hd, int head_offset, const int32_t *keylen,
                            const mgt_dropout *d);
