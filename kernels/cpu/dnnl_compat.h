/* The few oneDNN calls megatron-c makes, over the two C APIs in use: 2.x (Debian 12's 2.6.3)
   and 3.x (Spack's default, Debian 13's 3.7), which made memory descriptors opaque objects,
   created matmuls in one call and dropped the output scales. */
#pragma once

#include <oneapi/dnnl/dnnl.h>

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t mgt_dnnl_md; /* an object: mgt_dnnl_md_free */
#define MGT_DNNL_MD(md) (md)
#define MGT_DNNL_MD_NONE NULL
typedef const_dnnl_memory_desc_t mgt_dnnl_cmd; /* what a query gives */
#else
typedef dnnl_memory_desc_t mgt_dnnl_md; /* a value */
#define MGT_DNNL_MD(md) (&(md))
#define MGT_DNNL_MD_NONE                                                                           \
  { 0 }
typedef const dnnl_memory_desc_t *mgt_dnnl_cmd;
#endif

static inline dnnl_status_t mgt_dnnl_md_strides(mgt_dnnl_md *md, int nd, const dnnl_dims_t dims,
                                                dnnl_data_type_t t, const dnnl_dims_t strides) {
#if DNNL_VERSION_MAJOR >= 3
  /* A dimension of size 1 is never stepped over, so its stride is free; 3.7 misreads some (a
     1 x K operand with strides (1, ld), transposed: test_kernels' native GEMMs), so each gets
     the stride of a dense row-major layout over the dimensions after it. */
  dnnl_dims_t st;
  for (int i = nd - 1; i >= 0; i--)
    st[i] = dims[i] != 1 ? strides[i] : (i == nd - 1 ? 1 : st[i + 1] * dims[i + 1]);
  *md = NULL;
  return dnnl_memory_desc_create_with_strides(md, nd, dims, t, st);
#else
  return dnnl_memory_desc_init_by_strides(md, nd, dims, t, strides);
#endif
}

/* A descriptor whose layout the primitive chooses (format "any"). */
static inline dnnl_status_t mgt_dnnl_md_any(mgt_dnnl_md *md, int nd, const dnnl_dims_t dims,
                                            dnnl_data_type_t t) {
#if DNNL_VERSION_MAJOR >= 3
  *md = NULL;
  return dnnl_memory_desc_create_with_tag(md, nd, dims, t, dnnl_format_tag_any);
#else
  return dnnl_memory_desc_init_by_tag(md, nd, dims, t, dnnl_format_tag_any);
#endif
}

static inline void mgt_dnnl_md_free(mgt_dnnl_md md) {
#if DNNL_VERSION_MAJOR >= 3
  if (md) dnnl_memory_desc_destroy(md);
#else
  (void)md;
#endif
}

/* The matmul C = A B (no bias) with attr's post-ops and scales. */
static inline dnnl_status_t mgt_dnnl_matmul_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
                                               mgt_dnnl_md *a, mgt_dnnl_md *b, mgt_dnnl_md *c,
                                               const_dnnl_primitive_attr_t attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl_matmul_primitive_desc_create(pd, eng, *a, *b, NULL, *c, attr);
#else
  dnnl_matmul_desc_t d;
  dnnl_status_t s = dnnl_matmul_desc_init(&d, a, b, NULL, c);
  return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &d, attr, eng, NULL);
#endif
}

/* C = alpha A B + beta C: post-ops of attr (2.x: alpha as the output scale; 3.x, which has
   none, as a linear post-op ahead of the sum). */
static inline dnnl_status_t mgt_dnnl_alpha_beta(dnnl_primitive_attr_t attr, dnnl_post_ops_t *po,
                                                float alpha, float beta) {
  dnnl_status_t s = dnnl_success;
  *po = NULL;
#if DNNL_VERSION_MAJOR >= 3
  if (alpha == 1.0f && beta == 0.0f) return s;
  if ((s = dnnl_post_ops_create(po)) != dnnl_success) return s;
  if (alpha != 1.0f && (s = dnnl_post_ops_append_eltwise(*po, dnnl_eltwise_linear, alpha, 0.0f)))
    return s;
  if (beta != 0.0f && (s = dnnl_post_ops_append_sum(*po, beta, 0, dnnl_data_type_undef))) return s;
#else
  if (alpha != 1.0f && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha))) return s;
  if (beta == 0.0f) return s;
  if ((s = dnnl_post_ops_create(po)) != dnnl_success) return s;
  if ((s = dnnl_post_ops_append_sum(*po, beta)) != dnnl_success) return s;
#endif
  return dnnl_primitive_attr_set_post_ops(attr, *po);
}
