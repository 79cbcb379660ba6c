/* Decoding with a key/value cache: one token at a time through every layer, each the block's
   forward (gpt_layer_forward) at one position with the cache hook. */
#include "mgt/gpt_impl.h"

struct mgt_gpt_decoder {
  mgt_gpt *m;
  int max_len, slots;
  void *mem;                               /* backend memory for everything below */
  float *x[2], *ln, *mean, *rstd, *logits; /* the residual stream, in and out of a layer */
  layer_acts a;                            /* one row of a layer's activations */
  float **kc, **vc;                        /* per layer, (max_len, KVl) */
  int32_t *tok;
  float *host_shard, *host_all;
};

mgt_status mgt_gpt_decoder_create(mgt_gpt *m, int max_len, mgt_gpt_decoder **out) {
  return mgt_gpt_decoder_create_batch(m, 1, max_len, out);
}

mgt_status mgt_gpt_decoder_create_batch(mgt_gpt *m, int slots, int max_len, mgt_gpt_decoder **out) {
  MGT_CHECK(mgt_ddp_weights_ready(m->ddp, -1));
  *out = NULL;
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(mgt_model_generative(&d->spec), "a %s model does not decode (no causal LM head)",
              mgt_model_kinds[d->spec.kind].name);
  MGT_REQUIRE(max_len >= 1 && max_len <= d->maxpos,
              "a sequence of %d tokens does not fit the model's %d positions", max_len, d->maxpos);
  MGT_REQUIRE(slots >= 1 && slots <= d->B * d->T,
              "a decoder of %d sequences needs a model of as many rows (it has %d: micro-batch "
              "x sequence length)",
              slots, d->B * d->T); /* the layers' row buffers (m->dtmp) */
  mgt_status st = MGT_OK;
  mgt_gpt_decoder *dec = NULL;
  MGT_CHECK(mgt_calloc(sizeof *dec, "decoder", (void **)&dec));
  dec->m = m;
  dec->max_len = max_len, dec->slots = slots;
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->kc));
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->vc));
  const size_t S = (size_t)slots;
  for (int pass = 0; pass < 2; pass++) {
    arena a = {(float *)dec->mem, 0};
    dec->x[0] = take(&a, S * d->C), dec->x[1] = take(&a, S * d->C), dec->ln = take(&a, S * d->C);
    dec->mean = take(&a, S), dec->rstd = take(&a, S), dec->logits = take(&a, S * d->Vl);
    /* one row a sequence, every buffer a float one, no attention probabilities: the cache */
    gpt_take_layer(&a, d, S, S, 0, GPT_ATTN_NONE, NULL, &dec->a);
    dec->tok = (int32_t *)take(&a, S);
    for (int l = 0; l < d->L; l++) {
      dec->kc[l] = take(&a, S * max_len * d->KVl); /* the key/value groups only */
      dec->vc[l] = take(&a, S * max_len * d->KVl);
    }
    if (pass == 0)
      MGT_TRY(mgt_be_alloc(m->be, a.used * sizeof(float), "key/value cache", &dec->mem));
  }
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)d->Vl, "logit staging", (void **)&dec->host_shard));
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)d->Vp, "logit staging", (void **)&dec->host_all));
  *out = dec;
  return MGT_OK;
done:
  mgt_gpt_decoder_destroy(&dec);
  return st;
}

void mgt_gpt_decoder_destroy(mgt_gpt_decoder **pd) {
  mgt_gpt_decoder *dec = *pd;
  if (!dec) return;
  if (dec->mem) mgt_be_free(dec->m->be, dec->mem);
  mgt_free(dec->kc);
  mgt_free(dec->vc);
  mgt_free(dec->host_shard);
  mgt_free(dec->host_all);
  mgt_free(dec);
  *pd = NULL;
}

mgt_status mgt_gpt_decode(mgt_gpt_decoder *dec, int32_t token, int pos, float *logits) {
  const int slot = 0;
  return mgt_gpt_decode_batch(dec, 1, &slot, &token, &pos, logits);
}

mgt_status mgt_gpt_decode_batch(mgt_gpt_decoder *dec, int n, const int *slot, const int32_t *token,
                                const int *pos, float *logits) {
  mgt_gpt *m = dec->m;
  MGT_CHECK(mgt_ddp_weights_ready(m->ddp, -1));
  const mgt_gpt_dims *d = &m->d;
  const mgt_backend *be = m->be;
  const int C = d->C;
  MGT_REQUIRE(n >= 1 && n <= dec->slots, "%d sequences for a decoder of %d", n, dec->slots);
  for (int i = 0; i < n; i++) {
    MGT_REQUIRE(slot[i] >= 0 && slot[i] < dec->slots, "sequence slot %d beyond the decoder's %d",
                slot[i], dec->slots);
    MGT_REQUIRE(pos[i] >= 0 && pos[i] < dec->max_len, "position %d beyond the decoder's %d", pos[i],
                dec->max_len);
    MGT_REQUIRE(token[i] >= 0 && token[i] < d->V, "token id %d outside the vocabulary [0, %d)",
                token[i], d->V);
  }
  const float *wte = m->w + m->params[m->ix.wte].offset;
  MGT_CHECK(mgt_be_upload(be, dec->tok, token, sizeof(int32_t) * (size_t)n));
  MGT_CHECK(mgt_tp_embedding_forward(&m->tp, dec->x[0], dec->tok, wte, n, C, d->v0, d->Vl));
  if (m->ix.wpe >= 0)
    for (int i = 0; i < n; i++)
      MGT_CHECK(mgt_be_add_bias(be, dec->x[0] + (size_t)i * C,
                                m->w + m->params[m->ix.wpe].offset + (size_t)pos[i] * C, 1, C));
  const step_ctx s = {0, 0}; /* no dropout */
  for (int l = 0; l < d->L; l++) {
    const layer_rows r = {n,          n,   0,    dec->kc[l],
                          dec->vc[l], pos, slot, (size_t)dec->max_len * d->KVl};
    MGT_CHECK(gpt_layer_forward(m, l, &r, dec->x[l & 1], dec->x[!(l & 1)], &dec->a, &s));
  }
  float *lnw, *lnb;
  gpt_final_norm(m, m->w, &lnw, &lnb);
  MGT_CHECK(gpt_norm_forward(m, dec->ln, dec->mean, dec->rstd, dec->x[d->L & 1], lnw, lnb, n));
  const float *wout = m->w + m->params[gpt_output_param(&m->ix)].offset;
  MGT_CHECK(mgt_tp_column_forward(&m->tp, dec->logits, dec->ln, wout, NULL, n, C, d->Vl));
  for (int i = 0; i < n; i++)
    MGT_CHECK(gpt_gather_row(m, dec->logits + (size_t)i * d->Vl, dec->host_shard, dec->host_all,
                             logits + (size_t)i * d->V));
  return MGT_OK;
}
