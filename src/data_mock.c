#include "mgt/data.h"
#include "mgt/rng.h"

typedef struct mock {
  uint64_t seed, offset;
  int vocab;
} mock;

static mgt_status mock_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  const mock *mk = ctx;
  for (int r = 0; r < n; r++) {
    uint32_t w[4];
    mgt_rng_block(mk->seed, mgt_rng_data_stream(0), mk->offset + first + (uint64_t)r, w);
    uint64_t start = w[0] % (uint32_t)mk->vocab, stride = 1 + w[1] % 8u;
    for (int j = 0; j <= T; j++)
      out[(size_t)r * (T + 1) + j] =
          (int32_t)((start + stride * (uint64_t)j) % (uint64_t)mk->vocab);
  }
  return MGT_OK;
}

static void mock_destroy(void *ctx) { mgt_free(ctx); }

static mgt_status mock_create(const mgt_config *cfg, uint64_t offset, mgt_data *out) {
  mock *mk = NULL;
  MGT_CHECK(mgt_calloc(sizeof *mk, "mock data", (void **)&mk));
  mk->seed = cfg->seed;
  mk->offset = offset;
  mk->vocab = cfg->vocab_size;
  out->ctx = mk;
  out->get = mock_get;
  out->destroy = mock_destroy;
  return MGT_OK;
}

mgt_status mgt_data_mock_create(const mgt_config *cfg, mgt_data *out) {
  return mock_create(cfg, 0, out);
}

mgt_status mgt_data_mock_valid_create(const mgt_config *cfg, mgt_data *out) {
  return mock_create(cfg, 1ull << 40, out);
}

void mgt_data_destroy(mgt_data *data) {
  if (data->destroy && data->ctx) data->destroy(data->ctx);
  data->ctx = NULL;
}
