/* Flash attention on tensor cores (--use-flash-attn under --bf16 or --fp16): the twin of the
   16-bit contract at the top of kernels/cpu/flash.c. Q, K, V, dO and the probabilities and dS
   are rounded to bfloat16 or half where they enter a 16x16x16 WMMA product; the products
   accumulate in fp32 and the softmax statistics, D and every output stay fp32.

   A block is four warps and owns a tile of 64 query rows (forward, dQ) or 64 keys (dK, dV)
   of one (sample, head); each warp owns 16 of those rows, so most hand-offs between the
   tensor cores (which write and read shared memory through fragments of unspecified layout)
   and the per-element softmax need only __syncwarp. Keys come in tiles of 64 as in the
   contract (the running maximum that the rounded probabilities are relative to is the
   maximum after each tile of 64 keys). Nothing of T x T is kept; there are no atomics: dQ is
   one pass over key tiles, dK and dV another over query tiles, so results are deterministic.

   In the elementwise steps of the forward and of dQ, lane pair (2r, 2r + 1) of a warp holds
   row r of the warp's 16 and 32 consecutive keys each, so that a row's maximum and sum take
   one shuffle and consecutive dropout words share a Philox block. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "../philox.h"
#include "cuda_check.h"
#include "flash16.h"
extern "C" {
#include "../cpu/cpu.h" /* cpu_flash16_hd: the twins round for the same head dims */
}

namespace {

namespace wm = nvcuda::wmma;

enum { BR = 64, BC = 64, WARPS = 4, THREADS = 32 * WARPS };
/* Strides (elements) of 64-wide tiles in shared memory: fp32 scores, 16-bit probabilities.
   The padding spreads rows over banks; WMMA wants strides of 16 bytes and fragment starts on
   32 bytes, which these keep (every region below is a multiple of 128 bytes). */
enum { SLD = BC + 4, PLD = BC + 8 };
enum { SMEM_ALIGN = 128 };
static_assert(BR == 16 * WARPS, "one warp per 16 rows of a tile");
static_assert(BR == BC, "dK/dV start at the query tile of their key tile (causal)");

/* Round to nearest even, overflow to infinity: mgt_round_bf16 / mgt_round_fp16 on the CPU. */
template <typename T16> __device__ __forceinline__ T16 to16(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to16<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half to16<__half>(float x) { return __float2half_rn(x); }

template <typename T16> using frag_a = wm::fragment<wm::matrix_a, 16, 16, 16, T16, wm::row_major>;
/* B = X^T of a row-major X: X's rows read as B's columns */
template <typename T16> using frag_bt = wm::fragment<wm::matrix_b, 16, 16, 16, T16, wm::col_major>;
template <typename T16> using frag_b = wm::fragment<wm::matrix_b, 16, 16, 16, T16, wm::row_major>;
using frag_c = wm::fragment<wm::accumulator, 16, 16, 16, float>;

/* What every kernel of a call needs to know; the dropout fields as the CPU's cpu_att_of. */
struct fa_args {
  int T, Hl, head_offset;
  float scale; /* 1/sqrtf(hd) */
  const int32_t *keylen;
  int drop;
  uint32_t thr;
  float dscale;
  uint64_t seed, sample_base;
  int layer, site;
};

/* Keys [0, lim) that row i of sample b sees: cpu_key_limit. */
__device__ __forceinline__ int key_lim(const int32_t *keylen, int b, int T, int i) {
  if (!keylen) return i + 1;
  const int n = keylen[b];
  return n < 1 ? 1 : (n > T ? T : n);
}

/* Keep flags of one sample's attention mask: word e = ((global head)*T + i)*T + j of stream
   mgt_philox_dropout_stream(sample_base + b, layer, site), as cpu_attn_mask and the fp32
   kernels' attn_keep. A lane walks words in order, so it keeps the last Philox block (4
   words) it drew. */
struct keep_stream {
  uint64_t seed, stream, blk;
  uint32_t w0, w1, w2, w3, thr;
  __device__ __forceinline__ bool keep(uint64_t e) {
    if ((e >> 2) != blk) {
      uint32_t w[4];
      blk = e >> 2;
      mgt_philox_at(seed, stream, blk, w);
      w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
    }
    const uint32_t k = (uint32_t)(e & 3u);
    const uint32_t x = k == 0 ? w0 : (k == 1 ? w1 : (k == 2 ? w2 : w3));
    return x >= thr;
  }
};

__device__ __forceinline__ keep_stream keep_stream_of(const fa_args &a, int b) {
  keep_stream k;
  k.seed = a.seed;
  k.stream = mgt_philox_dropout_stream(a.sample_base + (uint64_t)b, a.layer, a.site);
  k.blk = ~0ull; /* no word's block: e < 2^62 */
  k.w0 = k.w1 = k.w2 = k.w3 = 0;
  k.thr = a.thr;
  return k;
}

/* n of the 64 rows of a tile (HD floats each, row stride ld in global memory) rounded into
   shared memory (stride HD + 8); rows n..63 become zeros, so that products over a tile's
   padding multiply zeros, never stale or uninitialized values. */
template <typename T16, int HD>
__device__ __forceinline__ void stage(T16 *dst, const float *src, size_t ld, int n) {
  constexpr int LD = HD + 8;
  for (int x = threadIdx.x; x < 64 * HD; x += THREADS) {
    const int r = x / HD, e = x % HD;
    dst[r * LD + e] = to16<T16>(r < n ? src[(size_t)r * ld + e] : 0.0f);
  }
}

/* dst (16 x 64 fp32, stride SLD) = A B^T for the warp's 16 rows A (16 x HD) and a whole tile
   B (64 x HD), both 16-bit with stride HD + 8: scores, or dP. */
template <typename T16, int HD>
__device__ __forceinline__ void warp_abt(float *dst, const T16 *A, const T16 *B) {
  constexpr int LD = HD + 8;
#pragma unroll
  for (int n = 0; n < BC / 16; n++) {
    frag_c acc;
    wm::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < HD / 16; k++) {
      frag_a<T16> fa;
      frag_bt<T16> fb;
      wm::load_matrix_sync(fa, A + k * 16, LD);
      wm::load_matrix_sync(fb, B + n * 16 * LD + k * 16, LD);
      wm::mma_sync(acc, fa, fb, acc);
    }
    wm::store_matrix_sync(dst + n * 16, acc, SLD, wm::mem_row_major);
  }
}

/* acc (16 x HD as HD/16 fragments) += A B for the warp's 16 rows A (16 x 64, stride PLD) and a
   whole tile B (64 x HD, stride HD + 8). */
template <typename T16, int HD>
__device__ __forceinline__ void warp_ab(frag_c *acc, const T16 *A, const T16 *B) {
  constexpr int LD = HD + 8;
#pragma unroll
  for (int k = 0; k < BC / 16; k++) {
    frag_a<T16> fa;
    wm::load_matrix_sync(fa, A + k * 16, PLD);
#pragma unroll
    for (int n = 0; n < HD / 16; n++) {
      frag_b<T16> fb;
      wm::load_matrix_sync(fb, B + k * 16 * LD + n * 16, LD);
      wm::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

/* Byte sizes of shared-memory regions, all multiples of 128. */
template <int HD> struct tiles {
  static constexpr size_t h16 = (size_t)64 * (HD + 8) * 2; /* 64 rows of HD, 16-bit */
  static constexpr size_t f32 = (size_t)64 * SLD * 4;      /* 64 x 64 fp32 */
  static constexpr size_t p16 = (size_t)64 * PLD * 2;      /* 64 x 64 16-bit */
  static constexpr size_t out = (size_t)64 * (HD + 4) * 4; /* 64 rows of HD, fp32 */
  /* the output staging of dQ, dK and dV reuses two fp32 64 x 64 tiles */
  static_assert(out <= 2 * f32, "an output tile fits in the scores and dP tiles");
};

__device__ __forceinline__ unsigned char *aligned_smem(unsigned char *p) {
  return p + ((SMEM_ALIGN - ((uintptr_t)p & (SMEM_ALIGN - 1))) & (SMEM_ALIGN - 1));
}

/* The block's dynamic shared memory from its first 128-byte boundary: the launches ask for
   SMEM_ALIGN bytes more than a layout needs. */
__device__ __forceinline__ unsigned char *block_smem() {
  extern __shared__ __align__(128) unsigned char smem[];
  return aligned_smem(smem);
}

/* A block's tile: rows t0 .. t0 + n - 1 (queries, or keys for dK and dV) of (sample b, head
   h), bh = b * Hl + h; q, k, v are the head's columns of sample b's row 0 in qkv, whose rows
   are ld = 3 Cl apart. */
struct fa_tile {
  int bh, b, h, t0, n, Cl;
  size_t ld;
  const float *q, *k, *v;
};

/* Blocks are tile-major within a (sample, head), as grid_of counts them; BR == BC, so query
   and key tiles are numbered alike. */
template <int HD> __device__ __forceinline__ fa_tile tile_of(const fa_args &a, const float *qkv) {
  fa_tile t;
  const int nt = (a.T + BR - 1) / BR, tile = (int)(blockIdx.x % (unsigned)nt);
  t.bh = (int)(blockIdx.x / (unsigned)nt), t.b = t.bh / a.Hl, t.h = t.bh % a.Hl;
  t.t0 = tile * BR, t.n = min(BR, a.T - t.t0);
  t.Cl = a.Hl * HD;
  t.ld = 3 * (size_t)t.Cl;
  t.q = qkv + (size_t)t.b * a.T * t.ld + (size_t)t.h * HD, t.k = t.q + t.Cl, t.v = t.q + 2 * t.Cl;
  return t;
}

/* The mask word of (query i, key 0) of head h (keep_stream). */
__device__ __forceinline__ uint64_t mask_row(const fa_args &a, int h, int i) {
  return ((uint64_t)(a.head_offset + h) * a.T + (uint64_t)i) * (uint64_t)a.T;
}

/* A lane of the forward or of dQ: lane pair (2r, 2r + 1) of the warp holds row r of the
   query tile (query i) and keys c0 .. c0 + 31 of each key tile. */
struct q_lane {
  int warp, half, r, c0, i;
  int lim;        /* row i sees keys [0, lim); 0 on the tile's padding rows */
  int jend;       /* the last key any row of the tile sees, plus one (flash.c's tile_keys) */
  uint64_t e_row; /* mask_row of query i */
};

__device__ __forceinline__ q_lane q_lane_of(const fa_args &a, const fa_tile &t) {
  q_lane me;
  const int lane = threadIdx.x % 32;
  me.warp = threadIdx.x / 32, me.half = lane & 1;
  me.r = me.warp * 16 + lane / 2, me.c0 = me.half * 32;
  me.i = t.t0 + me.r, me.lim = me.r < t.n ? key_lim(a.keylen, t.b, a.T, me.i) : 0;
  me.jend = a.keylen ? key_lim(a.keylen, t.b, a.T, t.t0) : t.t0 + t.n;
  me.e_row = mask_row(a, t.h, me.i);
  return me;
}

/* n keys from key j0 of the tile's head into K and V (stage). */
template <typename T16, int HD>
__device__ __forceinline__ void stage_kv(T16 *sk, T16 *sv, const fa_tile &t, int j0, int n) {
  stage<T16, HD>(sk, t.k + (size_t)j0 * t.ld, t.ld, n);
  stage<T16, HD>(sv, t.v + (size_t)j0 * t.ld, t.ld, n);
}

/* The next key tile of the forward and of dQ: the first barrier waits until no warp still
   reads the previous K and V (on the first pass, it also publishes what was staged before the
   loop), the second until the new ones are staged. */
template <typename T16, int HD>
__device__ __forceinline__ void load_kv(T16 *sk, T16 *sv, const fa_tile &t, int j0, int n) {
  __syncthreads();
  stage_kv<T16, HD>(sk, sv, t, j0, n);
  __syncthreads();
}

/* Where query i of the tile's head starts in out and dout (rows of Cl). */
template <int HD>
__device__ __forceinline__ size_t out_row(const fa_args &a, const fa_tile &t, int i) {
  return ((size_t)t.b * a.T + i) * t.Cl + (size_t)t.h * HD;
}

/* n queries from query i0 of the tile's head into Q and dO (stage). */
template <typename T16, int HD>
__device__ __forceinline__ void stage_qdo(T16 *sq, T16 *sdo, const fa_args &a, const fa_tile &t,
                                          const float *dout, int i0, int n) {
  stage<T16, HD>(sq, t.q + (size_t)i0 * t.ld, t.ld, n);
  stage<T16, HD>(sdo, dout + out_row<HD>(a, t, i0), (size_t)t.Cl, n);
}

/* The dropout factor of mask word e, 0 or 1/(1 - p); 1 without dropout. */
__device__ __forceinline__ float keep_factor(keep_stream &ks, const fa_args &a, uint64_t e) {
  return a.drop ? (ks.keep(e) ? a.dscale : 0.0f) : 1.0f;
}

/* P again, from a raw score and its row's log-sum-exp L: the forward's scaled S, then exp. */
__device__ __forceinline__ float p_again(float s, float L, const fa_args &a) {
  return __expf(__fmul_rn(s, a.scale) - L);
}

/* ---- forward ----
   Shared: Q, K, V (16-bit tiles), S (fp32 scores), P (16-bit probabilities), O (the fp32
   output accumulator: the online softmax rescales it by rows, which WMMA's opaque fragment
   layout does not allow in registers), 1/l per row. */
template <int HD> struct fwd_smem {
  using t = tiles<HD>;
  static constexpr size_t q = 0, k = q + t::h16, v = k + t::h16, s = v + t::h16, p = s + t::f32,
                          o = p + t::p16, inv = o + t::out, bytes = inv + 64 * 4;
};

template <typename T16, int HD>
__global__ void __launch_bounds__(THREADS)
    k_flash16_forward(float *out, float *lse, const float *qkv, fa_args a) {
  using L = fwd_smem<HD>;
  constexpr int LD = HD + 8, LDO = HD + 4;
  unsigned char *sm = block_smem();
  T16 *sq = (T16 *)(sm + L::q), *sk = (T16 *)(sm + L::k), *sv = (T16 *)(sm + L::v);
  T16 *sp = (T16 *)(sm + L::p);
  float *ss = (float *)(sm + L::s), *so = (float *)(sm + L::o), *sinv = (float *)(sm + L::inv);

  const fa_tile tile = tile_of<HD>(a, qkv);
  const q_lane me = q_lane_of(a, tile);
  const int i0 = tile.t0, nr = tile.n;
  keep_stream ks = keep_stream_of(a, tile.b);

  stage<T16, HD>(sq, tile.q + (size_t)i0 * tile.ld, tile.ld, nr);
  for (int x = threadIdx.x; x < 64 * HD; x += THREADS)
    so[(x / HD) * LDO + x % HD] = 0.0f;
  float m = -FLT_MAX, l = 0.0f; /* both lanes of a row keep the same copy */
  for (int j0 = 0; j0 < me.jend; j0 += BC) {
    const int nc = min(BC, me.jend - j0);
    load_kv<T16, HD>(sk, sv, tile, j0, nc);
    warp_abt<T16, HD>(ss + me.warp * 16 * SLD, sq + me.warp * 16 * LD, sk);
    __syncwarp();
    /* the online softmax of row r over keys [j0, j0 + valid) */
    const int valid = max(0, min(me.lim - j0, nc));
    float *srow = ss + me.r * SLD;
    T16 *prow = sp + me.r * PLD;
    float mx = m;
    for (int t = 0; t < 32; t++) {
      const int c = me.c0 + t;
      if (c < valid) {
        /* S in fp32 as the CPU's sgemm leaves it (alpha = scale), never fused into exp's
           subtraction, so that the maximum is one of the values exp sees */
        const float x = __fmul_rn(srow[c], a.scale);
        srow[c] = x;
        mx = fmaxf(mx, x);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float alpha = valid ? __expf(m - mx) : 1.0f;
    float sum = 0.0f;
    for (int t = 0; t < 32; t++) {
      const int c = me.c0 + t;
      float p = 0.0f;
      if (c < valid) {
        p = __expf(srow[c] - mx);
        sum += p; /* l takes p before dropout and rounding */
        if (a.drop) p = ks.keep(me.e_row + (uint64_t)(j0 + c)) ? p * a.dscale : 0.0f;
      }
      prow[c] = to16<T16>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (valid) {
      l = l * alpha + sum;
      m = mx;
      float *orow = so + me.r * LDO + me.half * (HD / 2);
      for (int e = 0; e < HD / 2; e++)
        orow[e] *= alpha;
    }
    __syncwarp(); /* P and the rescaled O rows of this warp are written */
    frag_c acc[HD / 16];
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
      wm::load_matrix_sync(acc[n], so + me.warp * 16 * LDO + n * 16, LDO, wm::mem_row_major);
    warp_ab<T16, HD>(acc, sp + me.warp * 16 * PLD, sv);
#pragma unroll
    for (int n = 0; n < HD / 16; n++)
      wm::store_matrix_sync(so + me.warp * 16 * LDO + n * 16, acc[n], LDO, wm::mem_row_major);
    __syncwarp(); /* before the next tile's elementwise step rescales these rows */
  }
  /* every real row saw key 0 (lim >= 1), so l > 0 */
  if (me.half == 0 && me.r < nr) {
    sinv[me.r] = 1.0f / l;
    lse[(size_t)tile.bh * a.T + me.i] = m + logf(l);
  }
  __syncthreads();
  for (int x = threadIdx.x; x < nr * HD; x += THREADS) {
    const int rr = x / HD, e = x % HD;
    out[((size_t)tile.b * a.T + i0 + rr) * tile.Cl + (size_t)tile.h * HD + e] =
        so[rr * LDO + e] * sinv[rr];
  }
}

/* Writes n rows of a tile's result (the warps' fragments acc) to dst (row stride ld) through
   the fp32 staging st (64 x (HD + 4)); rows past n (the tile's padding) are not written. Both
   barriers are needed: st may still be read by other warps before, and is read across warps
   after. */
template <int HD>
__device__ __forceinline__ void copy_out(float *dst, size_t ld, int n, float *st, const frag_c *acc,
                                         int warp) {
  constexpr int LDO = HD + 4;
  __syncthreads();
#pragma unroll
  for (int f = 0; f < HD / 16; f++)
    wm::store_matrix_sync(st + warp * 16 * LDO + f * 16, acc[f], LDO, wm::mem_row_major);
  __syncthreads();
  for (int x = threadIdx.x; x < n * HD; x += THREADS) {
    const int r = x / HD, e = x % HD;
    dst[(size_t)r * ld + e] = st[r * LDO + e];
  }
}

/* ---- backward, dQ (and D) ----
   Shared: Q, dO, K, V (16-bit tiles), S and dP (fp32), dS (16-bit); dQ lives in registers
   and leaves through the S and dP tiles. */
template <int HD> struct dq_smem {
  using t = tiles<HD>;
  static constexpr size_t q = 0, o = q + t::h16, k = o + t::h16, v = k + t::h16, s = v + t::h16,
                          dp = s + t::f32, ds = dp + t::f32, bytes = ds + t::p16;
};

template <typename T16, int HD>
__global__ void __launch_bounds__(THREADS)
    k_flash16_dq(float *dqkv, float *D, const float *dout, const float *qkv, const float *out,
                 const float *lse, fa_args a) {
  using L = dq_smem<HD>;
  constexpr int LD = HD + 8;
  unsigned char *sm = block_smem();
  T16 *sq = (T16 *)(sm + L::q), *sdo = (T16 *)(sm + L::o), *sk = (T16 *)(sm + L::k);
  T16 *sv = (T16 *)(sm + L::v), *sds = (T16 *)(sm + L::ds);
  float *ss = (float *)(sm + L::s), *sdp = (float *)(sm + L::dp);

  const fa_tile tile = tile_of<HD>(a, qkv);
  const q_lane me = q_lane_of(a, tile);
  const int i0 = tile.t0, nr = tile.n;
  const size_t orow0 = out_row<HD>(a, tile, i0); /* row i0 in out, dout */
  keep_stream ks = keep_stream_of(a, tile.b);

  stage_qdo<T16, HD>(sq, sdo, a, tile, dout, i0, nr);
  /* D_i = dO_i . O_i from the fp32 dO and O, half a row per lane */
  float part = 0.0f, Li = 0.0f;
  if (me.r < nr) {
    const float *dor = dout + orow0 + (size_t)me.r * tile.Cl + me.half * (HD / 2);
    const float *orr = out + orow0 + (size_t)me.r * tile.Cl + me.half * (HD / 2);
    for (int e = 0; e < HD / 2; e++)
      part += dor[e] * orr[e];
    Li = lse[(size_t)tile.bh * a.T + me.i];
  }
  const float Di = part + __shfl_xor_sync(0xffffffffu, part, 1);
  if (me.half == 0 && me.r < nr) D[(size_t)tile.bh * a.T + me.i] = Di;

  frag_c acc[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; n++)
    wm::fill_fragment(acc[n], 0.0f);
  for (int j0 = 0; j0 < me.jend; j0 += BC) {
    const int nc = min(BC, me.jend - j0);
    load_kv<T16, HD>(sk, sv, tile, j0, nc);
    warp_abt<T16, HD>(ss + me.warp * 16 * SLD, sq + me.warp * 16 * LD, sk);
    warp_abt<T16, HD>(sdp + me.warp * 16 * SLD, sdo + me.warp * 16 * LD, sv);
    __syncwarp();
    const int valid = max(0, min(me.lim - j0, nc));
    const float *srow = ss + me.r * SLD, *gr = sdp + me.r * SLD;
    T16 *dsrow = sds + me.r * PLD;
    for (int t = 0; t < 32; t++) {
      const int c = me.c0 + t;
      float ds = 0.0f;
      if (c < valid) {
        const float p = p_again(srow[c], Li, a);
        const float kd = keep_factor(ks, a, me.e_row + (uint64_t)(j0 + c));
        ds = p * (gr[c] * kd - Di) * a.scale;
      }
      dsrow[c] = to16<T16>(ds);
    }
    __syncwarp();
    warp_ab<T16, HD>(acc, sds + me.warp * 16 * PLD, sk);
  }
  /* through the S and dP tiles, once every warp is done with them */
  copy_out<HD>(dqkv + ((size_t)tile.b * a.T + i0) * tile.ld + (size_t)tile.h * HD, tile.ld, nr, ss,
               acc, me.warp);
}

/* ---- backward, dK and dV ----
   Transposed: the warp's 16 keys are the rows of S^T (16 x 64 queries), dP^T, Pd^T and dS^T,
   so that dV = Pd^T dO and dK = dS^T Q are row-major A operands. Lane l holds queries l and
   l + 32 of the tile and the warp's 16 keys: for one query those are consecutive mask words.
   Shared: K, V, Q, dO (16-bit), S^T and dP^T (fp32), Pd^T and dS^T (16-bit), L and D of the
   query tile; dK and dV live in registers and leave through the S^T and dP^T tiles. */
template <int HD> struct dkv_smem {
  using t = tiles<HD>;
  static constexpr size_t k = 0, v = k + t::h16, q = v + t::h16, o = q + t::h16, s = o + t::h16,
                          dp = s + t::f32, pd = dp + t::f32, ds = pd + t::p16, lq = ds + t::p16,
                          dq = lq + 64 * 4, bytes = dq + 64 * 4;
};

template <typename T16, int HD>
__global__ void __launch_bounds__(THREADS)
    k_flash16_dkv(float *dqkv, const float *D, const float *dout, const float *qkv,
                  const float *lse, fa_args a) {
  using L = dkv_smem<HD>;
  constexpr int LD = HD + 8;
  unsigned char *sm = block_smem();
  T16 *sk = (T16 *)(sm + L::k), *sv = (T16 *)(sm + L::v), *sq = (T16 *)(sm + L::q);
  T16 *sdo = (T16 *)(sm + L::o), *spd = (T16 *)(sm + L::pd), *sds = (T16 *)(sm + L::ds);
  float *ss = (float *)(sm + L::s), *sdp = (float *)(sm + L::dp);
  float *sL = (float *)(sm + L::lq), *sD = (float *)(sm + L::dq);

  const fa_tile tile = tile_of<HD>(a, qkv); /* a tile of keys */
  const int j0 = tile.t0, nk = tile.n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  keep_stream ks = keep_stream_of(a, tile.b);
  /* the queries that see a key of this tile: i >= j0 (causal), or all of them if the tile
     starts inside the sample's length (a key past it is seen by no row and gets zeros) */
  const int klen = a.keylen ? key_lim(a.keylen, tile.b, a.T, 0) : 0;
  const int i_lo = a.keylen ? 0 : j0, i_hi = (!a.keylen || j0 < klen) ? a.T : 0;

  stage_kv<T16, HD>(sk, sv, tile, j0, nk);
  frag_c dk[HD / 16], dv[HD / 16];
#pragma unroll
  for (int n = 0; n < HD / 16; n++) {
    wm::fill_fragment(dk[n], 0.0f);
    wm::fill_fragment(dv[n], 0.0f);
  }
  for (int i0 = i_lo; i0 < i_hi; i0 += BR) {
    const int nq = min(BR, a.T - i0);
    __syncthreads(); /* no warp still reads the previous Q, dO, L, D (first pass: K, V ready) */
    stage_qdo<T16, HD>(sq, sdo, a, tile, dout, i0, nq);
    if (threadIdx.x < BR) {
      const int c = threadIdx.x;
      sL[c] = c < nq ? lse[(size_t)tile.bh * a.T + i0 + c] : 0.0f;
      sD[c] = c < nq ? D[(size_t)tile.bh * a.T + i0 + c] : 0.0f;
    }
    __syncthreads();
    warp_abt<T16, HD>(ss + warp * 16 * SLD, sk + warp * 16 * LD, sq);
    warp_abt<T16, HD>(sdp + warp * 16 * SLD, sv + warp * 16 * LD, sdo);
    __syncwarp();
    for (int part = 0; part < 2; part++) {
      const int c = lane + 32 * part, iq = i0 + c;
      const float Lc = sL[c], Dc = sD[c];
      const uint64_t e_row = mask_row(a, tile.h, iq);
      for (int rr = 0; rr < 16; rr++) {
        const int kr = warp * 16 + rr, j = j0 + kr;
        const bool seen = c < nq && kr < nk && (a.keylen ? j < klen : j <= iq);
        float pd = 0.0f, ds = 0.0f;
        if (seen) {
          const float p = p_again(ss[kr * SLD + c], Lc, a);
          const float kd = keep_factor(ks, a, e_row + (uint64_t)j);
          pd = p * kd;
          ds = p * (sdp[kr * SLD + c] * kd - Dc) * a.scale;
        }
        spd[kr * PLD + c] = to16<T16>(pd);
        sds[kr * PLD + c] = to16<T16>(ds);
      }
    }
    __syncwarp();
    warp_ab<T16, HD>(dv, spd + warp * 16 * PLD, sdo);
    warp_ab<T16, HD>(dk, sds + warp * 16 * PLD, sq);
  }
  /* dK, then dV, through the S^T and dP^T tiles */
  float *dkv = dqkv + (size_t)tile.b * a.T * tile.ld + (size_t)j0 * tile.ld + (size_t)tile.h * HD;
  copy_out<HD>(dkv + tile.Cl, tile.ld, nk, ss, dk, warp);
  copy_out<HD>(dkv + 2 * tile.Cl, tile.ld, nk, ss, dv, warp);
}

fa_args args_of(int T, int Hl, int hd, int head_offset, const int32_t *keylen,
                const mgt_dropout *d) {
  fa_args a;
  a.T = T, a.Hl = Hl, a.head_offset = head_offset;
  a.scale = 1.0f / sqrtf((float)hd);
  a.keylen = keylen;
  a.drop = d->p > 0.0f;
  a.thr = a.drop ? mgt_dropout_threshold(d->p) : 0;
  a.dscale = a.drop ? 1.0f / (1.0f - d->p) : 1.0f;
  a.seed = d->seed, a.sample_base = d->sample_base;
  a.layer = d->layer, a.site = d->site;
  return a;
}

/* One block per tile of 64 rows of each (sample, head); the grid is one-dimensional so that
   B * Hl is not bound by gridDim.y. */
mgt_status grid_of(int B, int T, int Hl, unsigned *blocks) {
  const size_t n = (size_t)((T + 63) / 64) * (size_t)B * (size_t)Hl;
  if (n > 0x7FFFFFFFu)
    MGT_FAIL(MGT_ERR_BACKEND, "flash attention: %zu blocks exceed a CUDA grid", n);
  *blocks = (unsigned)n;
  return MGT_OK;
}

/* Dynamic shared memory beyond 48 KiB must be asked for, per kernel. */
template <typename K> mgt_status allow_smem(K kernel, size_t bytes) {
  CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return MGT_OK;
}

/* The kernels' template arguments as a value, so that one switch (by_kind) serves both
   directions. */
template <typename T16, int HD> struct kind {};

template <typename T16, int HD>
mgt_status forward_as(kind<T16, HD>, cudaStream_t s, float *out, float *lse, const float *qkv,
                      int B, int T, int Hl, const fa_args &a) {
  unsigned blocks;
  MGT_CHECK(grid_of(B, T, Hl, &blocks));
  const size_t bytes = fwd_smem<HD>::bytes + SMEM_ALIGN;
  MGT_CHECK(allow_smem(k_flash16_forward<T16, HD>, bytes));
  k_flash16_forward<T16, HD><<<blocks, THREADS, bytes, s>>>(out, lse, qkv, a);
  LAUNCHED();
  return MGT_OK;
}

template <typename T16, int HD>
mgt_status backward_as(kind<T16, HD>, cudaStream_t s, float *dqkv, float *D, const float *dout,
                       const float *qkv, const float *out, const float *lse, int B, int T, int Hl,
                       const fa_args &a) {
  unsigned blocks;
  MGT_CHECK(grid_of(B, T, Hl, &blocks));
  const size_t dq_bytes = dq_smem<HD>::bytes + SMEM_ALIGN;
  const size_t dkv_bytes = dkv_smem<HD>::bytes + SMEM_ALIGN;
  MGT_CHECK(allow_smem(k_flash16_dq<T16, HD>, dq_bytes));
  MGT_CHECK(allow_smem(k_flash16_dkv<T16, HD>, dkv_bytes));
  /* the second kernel reads every row's D, written by the first: same stream, in order */
  k_flash16_dq<T16, HD><<<blocks, THREADS, dq_bytes, s>>>(dqkv, D, dout, qkv, out, lse, a);
  LAUNCHED();
  k_flash16_dkv<T16, HD><<<blocks, THREADS, dkv_bytes, s>>>(dqkv, D, dout, qkv, lse, a);
  LAUNCHED();
  return MGT_OK;
}

/* f(kind<T16, HD>()) for the 16-bit format and a supported head dim (32, 64 or 128). */
template <typename F> mgt_status by_kind(int bf16, int hd, F f) {
  switch (hd) {
  case 32: return bf16 ? f(kind<__nv_bfloat16, 32>()) : f(kind<__half, 32>());
  case 64: return bf16 ? f(kind<__nv_bfloat16, 64>()) : f(kind<__half, 64>());
  default: return bf16 ? f(kind<__nv_bfloat16, 128>()) : f(kind<__half, 128>());
  }
}

} // namespace

int flash16_supported(int hd) { return cpu_flash16_hd(hd); }

mgt_status flash16_forward(cudaStream_t s, int bf16, float *out, float *lse, const float *qkv,
                           int B, int T, int Hl, int hd, int head_offset, const int32_t *keylen,
                           const mgt_dropout *d) {
  if (!flash16_supported(hd))
    MGT_FAIL(MGT_ERR_INTERNAL, "16-bit flash attention has no kernel for head dim %d", hd);
  if ((size_t)B * T * Hl == 0) return MGT_OK;
  const fa_args a = args_of(T, Hl, hd, head_offset, keylen, d);
  return by_kind(bf16, hd, [&](auto k) { return forward_as(k, s, out, lse, qkv, B, T, Hl, a); });
}

mgt_status flash16_backward(cudaStream_t s, int bf16, float *dqkv, float *D, const float *dout,
                            const float *qkv, const float *out, const float *lse, int B, int T,
                            int Hl, int hd, int head_offset, const int32_t *keylen,
                            const mgt_dropout *d) {
  if (!flash16_supported(hd))
    MGT_FAIL(MGT_ERR_INTERNAL, "16-bit flash attention has no kernel for head dim %d", hd);
  if ((size_t)B * T * Hl == 0) return MGT_OK;
  const fa_args a = args_of(T, Hl, hd, head_offset, keylen, d);
  return by_kind(bf16, hd, [&](auto k) {
    return backward_as(k, s, dqkv, D, dout, qkv, out, lse, B, T, Hl, a);
  });
}
