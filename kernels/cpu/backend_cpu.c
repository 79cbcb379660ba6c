/* The CPU backend table. */
#include <stdlib.h>

#include "backend_impl.h"
#include "cpu.h"
#ifdef MGT_HAVE_ONEDNN
#include "native.h"
#endif

static mgt_status cpu_alloc(void *ctx, size_t bytes, const char *what, void **out) {
  return mgt_calloc(bytes, what, out);
}

static void cpu_free(void *ctx, void *p) { mgt_free(p); }

static mgt_status cpu_zero(void *ctx, void *p, size_t bytes) {
  memset(p, 0, bytes);
  return MGT_OK;
}

static mgt_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
  return MGT_OK;
}

static mgt_status cpu_sync(void *ctx) { return MGT_OK; }

static void cpu_destroy(void *ctx) {
  cpu_ctx *c = ctx;
  free(c->scratch[0]);
  free(c->scratch[1]);
  for (int k = 0; k < 3; k++)
    free(c->s16[k]);
  cpu_drop_copies(c);
#ifdef MGT_HAVE_ONEDNN
  cpu_native_destroy(c->nat);
  for (int t = 0; t < c->tnat_n; t++)
    cpu_native_destroy(c->tnat[t]);
  free(c->tnat);
#endif
  mgt_free(c);
}

static mgt_status cpu_set_precision(void *ctx, mgt_precision prec) {
  cpu_ctx *c = ctx;
  MGT_REQUIRE(prec == c->precision || !c->a16,
              "the precision cannot change while 16-bit activations are held");
  if (prec != c->precision) cpu_drop_copies(c); /* the copies hold the old format's values */
  c->precision = prec;
  return MGT_OK;
}

mgt_status mgt_backend_cpu_create(mgt_backend **out) {
  mgt_backend *be = NULL;
  MGT_CHECK(mgt_calloc(sizeof *be, "CPU backend", (void **)&be));
  if (mgt_calloc(sizeof(cpu_ctx), "CPU backend", &be->ctx) != MGT_OK) {
    mgt_free(be);
    return MGT_ERR_NOMEM;
  }
  be->name = "cpu";
  be->alloc = cpu_alloc;
  be->free = cpu_free;
  be->zero = cpu_zero;
  be->upload = cpu_copy;
  be->download = cpu_copy;
  be->copy = cpu_copy;
  be->sync = cpu_sync;
  be->destroy = cpu_destroy;
  be->set_precision = cpu_set_precision;
  be->set_weights = cpu_set_weights;
  be->set_act16 = cpu_set_act16;
  be->act16_bytes = (int)sizeof(float);
  be->refresh_weights = cpu_refresh_weights;
  be->init_normal = cpu_init_normal;
  be->fill = cpu_fill;
  be->gemm = cpu_gemm;
  be->linear_bias_gelu = cpu_linear_bias_gelu;
  be->linear_bias = cpu_linear_bias;
  be->linear_param_grads = cpu_linear_param_grads;
  be->linear_dgelu = cpu_linear_dgelu;
  be->bias_dropout_add_ln = cpu_bias_dropout_add_ln;
  be->add_bias = cpu_add_bias;
  be->bias_backward = cpu_bias_backward;
  be->layernorm_forward = cpu_layernorm_forward;
  be->layernorm_backward = cpu_layernorm_backward;
  be->rmsnorm_forward = cpu_rmsnorm_forward;
  be->rmsnorm_backward = cpu_rmsnorm_backward;
  be->swiglu_forward = cpu_swiglu_forward;
  be->swiglu_backward = cpu_swiglu_backward;
  be->rope = cpu_rope;
  be->kv_group = cpu_kv_group;
  be->bias_gelu_forward = cpu_bias_gelu_forward;
  be->gelu_backward = cpu_gelu_backward;
  be->attention_forward = cpu_attention_forward;
  be->attention_backward = cpu_attention_backward;
  be->flash_attention_forward = cpu_flash_attention_forward;
  be->flash_attention_backward = cpu_flash_attention_backward;
  be->embedding_forward = cpu_embedding_forward;
  be->add_position = cpu_add_position;
  be->embedding_backward = cpu_embedding_backward;
  be->bias_act_forward = cpu_bias_act_forward;
  be->act_backward = cpu_act_backward;
  be->gather_rows = cpu_gather_rows;
  be->scatter_add_rows = cpu_scatter_add_rows;
  be->dropout_forward = cpu_dropout_forward;
  be->dropout_backward = cpu_dropout_backward;
  be->add = cpu_add;
  be->xent_max = cpu_xent_max;
  be->xent_sumexp = cpu_xent_sumexp;
  be->xent_loss = cpu_xent_loss;
  be->xent_backward = cpu_xent_backward;
  be->argmax = cpu_argmax;
  be->attention_decode = cpu_attention_decode;
  be->sumsq = cpu_sumsq;
  be->adamw = cpu_adamw;
  *out = be;
  return MGT_OK;
}
