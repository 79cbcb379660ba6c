/* bf16 GEMMs on the CPU's own bf16 units (AVX512-BF16, AMX) through oneDNN's matmul primitive:
   bf16 operands, fp32 accumulation and output, as a GPU's tensor cores multiply; and fp32 GEMMs
   through the same primitive where it beats the BLAS (--cpu-gemm-fp32). A primitive is
   made once per shape and kept (a training step repeats the same few dozen shapes), with its
   memory objects, whose data pointers are set per call. */
#include "native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_compat.h"
#include "mgt/common.h"

enum { NATIVE_CACHE = 96 };

typedef struct native_entry {
  cpu_mm key;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
  unsigned long long used; /* clock of the last call: the oldest entry is replaced when full */
} native_entry;

struct cpu_native {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  int amx; /* oneDNN runs AMX's kernels here: long inner dimensions go in blocks */
  native_entry e[NATIVE_CACHE];
  int n;
  unsigned long long clock;
};

#define DNNL_TRY(call, what)                                                                       \
  do {                                                                                             \
    dnnl_status_t s_ = (call);                                                                     \
    if (s_ != dnnl_success) MGT_FAIL(MGT_ERR_BACKEND, "oneDNN: %s failed (status %d)", what, s_);  \
  } while (0)

/* Whether oneDNN runs the kernels of `want` here (a wider ISA includes a narrower one's bits). */
static int isa_has(dnnl_cpu_isa_t want) { return (dnnl_get_effective_cpu_isa() & want) == want; }

int mgt_cpu_bf16_units(char *what, size_t n) {
  const dnnl_version_t *v = dnnl_version();
  /* avx512_core_bf16 and avx512_core_amx include its bits; AVX2-VNNI has no bf16 */
  const int amx = isa_has(dnnl_cpu_isa_avx512_core_amx);
  const int bf16 = isa_has(dnnl_cpu_isa_avx512_core_bf16);
  if (what && n)
    snprintf(what, n, "oneDNN %d.%d.%d, %s", v->major, v->minor, v->patch,
             amx ? "AMX" : (bf16 ? "AVX512-BF16" : "no bf16 units on this CPU"));
  return bf16;
}

mgt_status cpu_native_create(cpu_native **out) {
  cpu_native *nat = calloc(1, sizeof *nat);
  if (!nat) MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the bf16 GEMM state");
  if (dnnl_engine_create(&nat->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&nat->stream, nat->eng, dnnl_stream_default_flags) != dnnl_success) {
    if (nat->eng) dnnl_engine_destroy(nat->eng);
    free(nat);
    MGT_FAIL(MGT_ERR_BACKEND, "oneDNN: no CPU engine");
  }
  nat->amx = isa_has(dnnl_cpu_isa_avx512_core_amx);
  *out = nat;
  return MGT_OK;
}

static void entry_free(native_entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  if (e->a) dnnl_memory_destroy(e->a);
  if (e->b) dnnl_memory_destroy(e->b);
  if (e->c) dnnl_memory_destroy(e->c);
  memset(e, 0, sizeof *e);
}

void cpu_native_destroy(cpu_native *nat) {
  if (!nat) return;
  for (int i = 0; i < nat->n; i++)
    entry_free(&nat->e[i]);
  dnnl_stream_destroy(nat->stream);
  dnnl_engine_destroy(nat->eng);
  free(nat);
}

/* A plain GEMM is 2-D, a batched one 4-D (batch, head, rows, columns); the strides say where
   each element is, so a transposed operand is the same matrix read with its strides swapped,
   which oneDNN's kernels take as they are. */
static mgt_status entry_make(cpu_native *nat, const cpu_mm *k, native_entry *e) {
  const int nd = k->nb == 1 && k->nh == 1 ? 2 : 4, o = 4 - nd;
  dnnl_dims_t ad = {k->nb, k->nh, k->M, k->K}, bd = {k->nb, k->nh, k->K, k->N};
  dnnl_dims_t cd = {k->nb, k->nh, k->M, k->N}, as, bs, cs;
  for (int i = 0; i < 4; i++) {
    ad[i] = i + o < 4 ? ad[i + o] : 0, bd[i] = i + o < 4 ? bd[i + o] : 0;
    cd[i] = i + o < 4 ? cd[i + o] : 0;
    as[i] = i + o < 4 ? k->sa[i + o] : 0, bs[i] = i + o < 4 ? k->sb[i + o] : 0;
    cs[i] = i + o < 4 ? k->sc[i + o] : 0;
  }
  const dnnl_data_type_t in = k->f32 ? dnnl_f32 : dnnl_bf16;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  mgt_dnnl_md am = MGT_DNNL_MD_NONE, bm = MGT_DNNL_MD_NONE, cm = MGT_DNNL_MD_NONE;
  mgt_status st = MGT_ERR_BACKEND;
  if (mgt_dnnl_md_strides(&am, nd, ad, in, as) || mgt_dnnl_md_strides(&bm, nd, bd, in, bs) ||
      mgt_dnnl_md_strides(&cm, nd, cd, dnnl_f32, cs))
    goto done;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
      mgt_dnnl_alpha_beta(attr, &po, k->alpha, k->beta) != dnnl_success ||
      mgt_dnnl_matmul_pd(&pd, nat->eng, &am, &bm, &cm, attr) != dnnl_success ||
      dnnl_primitive_create(&e->prim, pd) != dnnl_success)
    goto done;
  if (dnnl_memory_create(&e->a, MGT_DNNL_MD(am), nat->eng, DNNL_MEMORY_NONE) ||
      dnnl_memory_create(&e->b, MGT_DNNL_MD(bm), nat->eng, DNNL_MEMORY_NONE) ||
      dnnl_memory_create(&e->c, MGT_DNNL_MD(cm), nat->eng, DNNL_MEMORY_NONE))
    goto done;
  e->key = *k;
  st = MGT_OK;
done:
  mgt_dnnl_md_free(am), mgt_dnnl_md_free(bm), mgt_dnnl_md_free(cm);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (st != MGT_OK) {
    entry_free(e);
    MGT_FAIL(st, "oneDNN: no %s matmul for %d x %d x %d (batch %d x %d)", k->f32 ? "fp32" : "bf16",
             k->M, k->N, k->K, k->nb, k->nh);
  }
  return MGT_OK;
}

static mgt_status matmul(cpu_native *nat, const cpu_mm *mm, const void *A, const void *B, float *C);

static void gemm_key(cpu_mm *k, int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb,
                     float beta, int ldc) {
  memset(k, 0, sizeof *k); /* compared as bytes */
  k->nb = k->nh = 1, k->M = M, k->N = N, k->K = K, k->alpha = alpha, k->beta = beta;
  k->sa[2] = ta ? 1 : lda, k->sa[3] = ta ? lda : 1;
  k->sb[2] = tb ? 1 : ldb, k->sb[3] = tb ? ldb : 1;
  k->sc[2] = ldc, k->sc[3] = 1;
}

/* oneDNN 2.6's AMX kernels multiply a long inner dimension at half their rate or less (GPT-2's
   output layer's data gradient, K the 50k vocabulary: 0.58-0.70 TFLOP/s; a weight gradient over
   8k or more tokens), and the same product as a sum over blocks of at most 4096 of it 1.5-1.9x
   faster (bench_bf16_layout): from 8192 on it runs so, in even blocks, the first with the
   caller's beta and the rest added. */
enum { NATIVE_KBLOCK = 4096 };

mgt_status cpu_native_gemm(cpu_native *nat, int ta, int tb, int M, int N, int K, float alpha,
                           const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                           float *C, int ldc) {
  cpu_mm k;
  const int nblk = nat->amx && K >= 2 * NATIVE_KBLOCK ? (K + NATIVE_KBLOCK - 1) / NATIVE_KBLOCK : 1;
  const int kb = (K + nblk - 1) / nblk;
  int k0 = 0;
  do { /* one block when K is short (an empty one when K is 0: C = beta C) */
    const int kk = K - k0 < kb ? K - k0 : kb;
    gemm_key(&k, ta, tb, M, N, kk, alpha, lda, ldb, k0 ? 1.0f : beta, ldc);
    MGT_CHECK(matmul(nat, &k, A + (ta ? (size_t)k0 * lda : (size_t)k0),
                     B + (tb ? (size_t)k0 : (size_t)k0 * ldb), C));
    k0 += kb;
  } while (k0 < K);
  return MGT_OK;
}

mgt_status cpu_native_gemm_f32(cpu_native *nat, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc) {
  cpu_mm k;
  gemm_key(&k, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
  k.f32 = 1;
  return matmul(nat, &k, A, B, C);
}

mgt_status cpu_native_matmul(cpu_native *nat, const cpu_mm *mm, const uint16_t *A,
                             const uint16_t *B, float *C) {
  return matmul(nat, mm, A, B, C);
}

static mgt_status matmul(cpu_native *nat, const cpu_mm *mm, const void *A, const void *B,
                         float *C) {
  cpu_mm k;
  memset(&k, 0, sizeof k);
  k.nb = mm->nb, k.nh = mm->nh, k.M = mm->M, k.N = mm->N, k.K = mm->K;
  k.alpha = mm->alpha, k.beta = mm->beta, k.f32 = mm->f32;
  memcpy(k.sa, mm->sa, sizeof k.sa), memcpy(k.sb, mm->sb, sizeof k.sb);
  memcpy(k.sc, mm->sc, sizeof k.sc);
  native_entry *e = NULL;
  for (int i = 0; i < nat->n && !e; i++)
    if (!memcmp(&nat->e[i].key, &k, sizeof k)) e = &nat->e[i];
  if (!e) {
    if (nat->n < NATIVE_CACHE) {
      e = &nat->e[nat->n++];
    } else {
      e = &nat->e[0];
      for (int i = 1; i < nat->n; i++)
        if (nat->e[i].used < e->used) e = &nat->e[i];
      entry_free(e);
    }
    mgt_status st = entry_make(nat, &k, e);
    if (st != MGT_OK) {
      *e = nat->e[--nat->n]; /* the failed slot is empty: fill it with the last entry */
      memset(&nat->e[nat->n], 0, sizeof nat->e[nat->n]);
      return st;
    }
  }
  e->used = ++nat->clock;
  DNNL_TRY(dnnl_memory_set_data_handle(e->a, (void *)A), "setting A");
  DNNL_TRY(dnnl_memory_set_data_handle(e->b, (void *)B), "setting B");
  DNNL_TRY(dnnl_memory_set_data_handle(e->c, C), "setting C");
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
  DNNL_TRY(dnnl_primitive_execute(e->prim, nat->stream, 3, args), "a matmul");
  DNNL_TRY(dnnl_stream_wait(nat->stream), "waiting for a matmul");
  return MGT_OK;
}
