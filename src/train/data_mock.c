#include "mgt/data_mock.h"
#include "mgt/model.h"
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

/* ---- BERT ---- */

typedef struct mock_bert {
  uint64_t seed, offset;
  int vocab;
  double mask_prob;
  int binary_head;
} mock_bert;

enum { MOCK_PAD = 0, MOCK_CLS = 2, MOCK_SEP = 3, MOCK_MASK = 4, MOCK_FIRST = 5 };

static mgt_status mock_bert_get(void *ctx, uint64_t first, int n, int T, int32_t *out) {
  const mock_bert *mk = ctx;
  const uint64_t span = (uint64_t)(mk->vocab - MOCK_FIRST);
  const uint64_t stream = mgt_rng_data_stream(3);
  for (int r = 0; r < n; r++) {
    const uint64_t idx = mk->offset + first + (uint64_t)r;
    int32_t *row = out + (size_t)r * mgt_bert_row_ints(T);
    int32_t *tok = row + MGT_BERT_TOKENS * T, *typ = row + MGT_BERT_TYPES * T,
            *lab = row + MGT_BERT_LABELS * T;
    uint32_t w[4];
    mgt_rng_block(mk->seed, stream, idx * ((uint64_t)T + 2), w);
    const int half = (T - 3) / 2, la = 1 + (int)(w[0] % (uint32_t)half);
    const int swap = mk->binary_head && (w[1] & 1);
    int32_t a[half];
    for (int j = 0; j < la; j++) {
      uint32_t v[4];
      mgt_rng_block(mk->seed, stream, idx * ((uint64_t)T + 2) + 1 + (uint64_t)j, v);
      a[j] = (int32_t)(MOCK_FIRST + v[0] % span);
    }
    for (int t = 0; t < T; t++)
      tok[t] = MOCK_PAD, typ[t] = 0, lab[t] = -1;
    int len = 0;
    tok[len++] = MOCK_CLS;
    for (int seg = 0; seg < 2; seg++) {
      const int shifted = seg != swap; /* the second segment is the first shifted by one */
      for (int j = 0; j < la; j++, len++) {
        tok[len] =
            shifted ? (int32_t)(MOCK_FIRST + ((uint64_t)(a[j] - MOCK_FIRST) + 1) % span) : a[j];
        typ[len] = seg;
      }
      typ[len] = seg;
      tok[len++] = MOCK_SEP;
    }
    /* mask what is not [CLS]/[SEP], within the model's budget */
    const int most = mgt_bert_max_predictions(T, mk->mask_prob);
    for (int t = 1, masked = 0; t < len && masked < most; t++) {
      if (tok[t] == MOCK_SEP) continue;
      uint32_t v[4];
      mgt_rng_block(mk->seed, stream ^ 1u, idx * ((uint64_t)T + 2) + (uint64_t)t, v);
      if (v[0] / 4294967296.0 >= mk->mask_prob) continue;
      lab[t] = tok[t];
      masked++;
      double u = v[1] / 4294967296.0;
      if (u < 0.8)
        tok[t] = MOCK_MASK;
      else if (u < 0.9)
        tok[t] = (int32_t)(MOCK_FIRST + v[2] % span);
    }
    row[mgt_bert_length_at(T)] = len;
    row[mgt_bert_random_at(T)] = swap;
  }
  return MGT_OK;
}

mgt_status mgt_data_mock_bert_create(const mgt_config *cfg, uint64_t first, mgt_data *out) {
  MGT_REQUIRE(cfg->vocab_size > MOCK_FIRST + 1,
              "--mock-data for BERT needs --vocab-size above %d (ids 0-4 are special)",
              MOCK_FIRST + 1);
  mock_bert *mk = NULL;
  MGT_CHECK(mgt_calloc(sizeof *mk, "mock data", (void **)&mk));
  mk->seed = cfg->seed;
  mk->offset = first;
  mk->vocab = cfg->vocab_size;
  mk->mask_prob = cfg->mask_prob;
  mk->binary_head = mgt_model_of(cfg).head == MGT_HEAD_MLM_SOP;
  out->ctx = mk;
  out->get = mock_bert_get;
  out->destroy = mock_destroy;
  return MGT_OK;
}

mgt_status mgt_data_mock_create(const mgt_config *cfg, mgt_data *out) {
  return mock_create(cfg, 0, out);
}

mgt_status mgt_data_mock_valid_create(const mgt_config *cfg, mgt_data *out) {
  return mock_create(cfg, 1ull << 40, out);
}
