/* Decoding with a key/value cache: one token at a time through every layer, each the block's
   forward (gpt_layer_forward) at one position with the cache hook. */
#include "mgt/gpt_impl.h"

struct mgt_gpt_decoder {
  mgt_gpt *m;
  int max_len;
  void *mem;                               /* backend memory for everything below */
  float *x[2], *ln, *mean, *rstd, *logits; /* the residual stream, in and out of a layer */
  layer_acts a;                            /* one row of a layer's activations */
  float **kc, **vc;                        /* per layer, (max_len, KVl) */
  int32_t *tok;
  float *host_shard, *host_all;
};

mgt_status mgt_gpt_decoder_create(mgt_gpt *m, int max_len, mgt_gpt_decoder **out) {
  MGT_CHECK(mgt_ddp_weights_ready(m->ddp, -1));
  *out = NULL;
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE(mgt_model_generative(&d->desc), "a %s model does not decode (no causal LM head)",
              mgt_model_kinds[d->desc.kind].name);
  MGT_REQUIRE(max_len >= 1 && max_len <= d->maxpos,
              "a sequence of %d tokens does not fit the model's %d positions", max_len, d->maxpos);
  mgt_status st = MGT_OK;
  mgt_gpt_decoder *dec = NULL;
  MGT_CHECK(mgt_calloc(sizeof *dec, "decoder", (void **)&dec));
  dec->m = m;
  dec->max_len = max_len;
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->kc));
  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)d->L, "decoder cache views", (void **)&dec->vc));
  for (int pass = 0; pass < 2; pass++) {
    arena a = {(float *)dec->mem, 0};
    dec->x[0] = take(&a, d->C), dec->x[1] = take(&a, d->C), dec->ln = take(&a, d->C);
    dec->mean = take(&a, 1), dec->rstd = take(&a, 1), dec->logits = take(&a, d->Vl);
    layer_acts *la = &dec->a;
    la->ln1 = take(&a, d->C), la->ln1_mean = take(&a, 1), la->ln1_rstd = take(&a, 1);
    la->qkv = take(&a, 3 * (size_t)d->Cl), la->atty = take(&a, d->Cl);
    la->res_mid = take(&a, d->C), la->ln2 = take(&a, d->C), la->ln2_mean = take(&a, 1);
    la->ln2_rstd = take(&a, 1), la->fch = take(&a, d->Fo), la->fch_gelu = take(&a, d->Fl);
    dec->tok = (int32_t *)take(&a, 1);
    for (int l = 0; l < d->L; l++) {
      dec->kc[l] = take(&a, (size_t)max_len * d->KVl); /* the key/value groups only */
      dec->vc[l] = take(&a, (size_t)max_len * d->KVl);
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
  mgt_gpt *m = dec->m;
  MGT_CHECK(mgt_ddp_weights_ready(m->ddp, -1));
  const mgt_gpt_dims *d = &m->d;
  const mgt_backend *be = m->be;
  const int C = d->C;
  MGT_REQUIRE(pos >= 0 && pos < dec->max_len, "position %d beyond the decoder's %d", pos,
              dec->max_len);
  MGT_REQUIRE(token >= 0 && token < d->V, "token id %d outside the vocabulary [0, %d)", token,
              d->V);
  const float *wte = m->w + m->params[m->ix.wte].offset;
  MGT_CHECK(mgt_be_upload(be, dec->tok, &token, sizeof token));
  MGT_CHECK(mgt_tp_embedding_forward(&m->tp, dec->x[0], dec->tok, wte, 1, C, d->v0, d->Vl));
  if (m->ix.wpe >= 0)
    MGT_CHECK(
        mgt_be_add_bias(be, dec->x[0], m->w + m->params[m->ix.wpe].offset + (size_t)pos * C, 1, C));
  const step_ctx s = {0, 0}; /* no dropout */
  for (int l = 0; l < d->L; l++) {
    const layer_rows r = {1, 1, 0, dec->kc[l], dec->vc[l], pos};
    MGT_CHECK(gpt_layer_forward(m, l, &r, dec->x[l & 1], dec->x[!(l & 1)], &dec->a, &s));
  }
  float *lnw, *lnb;
  gpt_final_norm(m, m->w, &lnw, &lnb);
  MGT_CHECK(gpt_norm_forward(m, dec->ln, dec->mean, dec->rstd, dec->x[d->L & 1], lnw, lnb, 1));
  const float *wout = m->w + m->params[gpt_output_param(&m->ix)].offset;
  MGT_CHECK(mgt_tp_column_forward(&m->tp, dec->logits, dec->ln, wout, NULL, 1, C, d->Vl));
  MGT_CHECK(gpt_gather_row(m, dec->logits, dec->host_shard, dec->host_all, logits));
  return MGT_OK;
}
