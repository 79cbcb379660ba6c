/* --sft's samples: whole documents (conversations) packed into samples of seq + 1 tokens, as
   Megatron-LM's packed sequences (THD) hold them, each document starting its own positions and
   attending only to itself (the flags of include/mgt/data.h tell the model). Documents come in
   the order the GPT sample index shuffles them, epoch after epoch; the index is small (three
   numbers per document placed) and every rank builds it. */
#include <stdlib.h>
#include <string.h>

#include "dataset_impl.h"

void ds_pack_free(pack_index *px) {
  free(px->first); /* grown with realloc */
  free(px->piece);
  memset(px, 0, sizeof *px);
}

static mgt_status grow64(int64_t **v, int64_t *cap, int64_t need) {
  if (need <= *cap) return MGT_OK;
  int64_t c = *cap ? *cap : 1024;
  while (c < need)
    c *= 2;
  int64_t *p = realloc(*v, sizeof *p * (size_t)c);
  if (!p) MGT_FAIL(MGT_ERR_NOMEM, "out of memory packing %lld documents", (long long)need);
  *v = p, *cap = c;
  return MGT_OK;
}

typedef struct packer {
  pack_index *px;
  int64_t cap_first, cap_piece, fill; /* tokens in the sample being filled */
  int slots;
} packer;

/* Puts a piece in the sample being filled, or, if it does not fit there, in a new one. */
static mgt_status place(packer *k, int64_t doc, int64_t at, int64_t len) {
  pack_index *px = k->px;
  if (px->n_samples == 0 || k->fill + len > k->slots) {
    MGT_CHECK(grow64(&px->first, &k->cap_first, px->n_samples + 2));
    px->first[px->n_samples++] = px->n_pieces;
    k->fill = 0;
  }
  MGT_CHECK(grow64(&px->piece, &k->cap_piece, 3 * (px->n_pieces + 1)));
  px->piece[3 * px->n_pieces] = doc;
  px->piece[3 * px->n_pieces + 1] = at;
  px->piece[3 * px->n_pieces + 2] = len;
  px->n_pieces++;
  px->tokens += len;
  k->fill += len;
  return MGT_OK;
}

mgt_status ds_pack_build(const dataset *ds, int64_t a, int64_t b, int split, int64_t needed,
                         int seq, uint64_t seed, int policy, pack_index *px) {
  static const char *names[3] = {"train", "valid", "test"};
  memset(px, 0, sizeof *px);
  px->ds = ds;
  packer k = {px, 0, 0, 0, seq + 1};
  int32_t *order = NULL;
  mgt_status st =
      mgt_calloc(sizeof *order * (size_t)(b - a + 1), "document order", (void **)&order);
  /* samples are closed when the next one opens: the last of an index may be fuller later */
  for (int64_t e = 0; st == MGT_OK && px->n_samples <= needed; e++) {
    const int64_t placed = px->n_pieces;
    ds_shuffle_docs(seed, split, e, a, b - a, order);
    for (int64_t i = 0; st == MGT_OK && i < b - a; i++) {
      const int64_t d = order[i], len = ds->doc_off[d + 1] - ds->doc_off[d];
      if (len == 0) continue;
      if (len <= k.slots) {
        st = place(&k, d, 0, len);
      } else if (policy == 0) {
        st = place(&k, d, 0, k.slots);
        px->truncated++, px->cut += len - k.slots;
      } else if (policy == 1) {
        px->dropped++;
        continue;
      } else { /* pieces of seq + 1 overlapping by one: each target in exactly one */
        px->split++;
        for (int64_t at = 0; st == MGT_OK && at + 1 < len; at += seq, px->pieces_split++)
          st = place(&k, d, at, len - at < k.slots ? len - at : k.slots);
      }
      px->docs++;
    }
    if (st == MGT_OK && px->n_pieces == placed)
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "--sft: the %s split of %s (documents %lld to %lld) has no document to "
                     "place in a sample of --seq-length %d + 1 tokens%s",
                     names[split], ds->info.path, (long long)a, (long long)b, seq,
                     px->dropped ? " (--sft-long-policy drop dropped them all)" : "");
  }
  mgt_free(order);
  if (st == MGT_OK) px->first[px->n_samples] = px->n_pieces;
  if (st != MGT_OK) ds_pack_free(px);
  return st;
}

mgt_status ds_pack_read(const pack_index *px, int64_t s, int seq, int train_on_prompt,
                        int32_t *out) {
  const dataset *ds = px->ds;
  const int64_t V = ds->info.vocab_size;
  int k = 0;
  for (int64_t p = px->first[s]; p < px->first[s + 1]; p++) {
    const int64_t *pc = px->piece + 3 * p, at = ds->doc_off[pc[0]] + pc[1];
    for (int64_t i = 0; i < pc[2]; i++) {
      const int32_t id = ds_token_at(ds, at + i);
      MGT_REQUIRE(
          id >= 0 && id < V && id <= MGT_TOKEN_ID,
          "--data-path %s: token id %lld of document %lld is outside its vocabulary of %lld",
          ds->info.path, (long long)(uint32_t)id, (long long)pc[0], (long long)V);
      out[k++] = id | (i == 0 ? MGT_TOKEN_DOC_START : 0) |
                 (!train_on_prompt && !ds_mask_at(ds, at + i) ? MGT_TOKEN_NO_LOSS : 0);
    }
  }
  const int32_t pad = ds->info.eod_id >= 0 && ds->info.eod_id < V ? (int32_t)ds->info.eod_id : 0;
  for (int first = 1; k <= seq; first = 0)
    out[k++] = pad | MGT_TOKEN_NO_LOSS | (first ? MGT_TOKEN_DOC_START : 0);
  return MGT_OK;
}
