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

/* Host memory both: moving to and from the "device" is a copy. */
static mgt_status cpu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
  return cpu_copy(ctx, dst, src, bytes);
}
static mgt_status cpu_download(void *ctx, void *dst, const void *src, size_t bytes) {
  return cpu_copy(ctx, dst, src, bytes);
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
  if (prec != c->precision) cpu_drop_copies(c), c->held_in = 0; /* the old format's values */
  c->precision = prec;
  cpu_act16_mode(c);
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
  be->act16_bytes = (int)sizeof(float);
  ((cpu_ctx *)be->ctx)->be = be;
  be->free = cpu_free;
  be->sync = cpu_sync;
  be->destroy = cpu_destroy;
#define MGT_BE_PREFIXED(name) cpu_##name
  MGT_BE_OPERATIONS(MGT_BE_FILL_SLOT)
#undef MGT_BE_PREFIXED
  *out = be;
  return MGT_OK;
}
