/* Decoding with the key/value cache against recomputing the whole prefix, run under mpiexec
   with 1 or 2 ranks (tensor parallelism over all of them):
   - at every position the cached logits equal the full forward's logits of that position;
   - the greedy predictions of mgt_gpt_forward_predict are the argmax of the full logits;
   - greedy continuations agree between the cache and recomputation, and, with 2 ranks,
     between tp=2 and the single-rank model (over MPI_COMM_SELF);
   - argv[1] "bf16": the same in bf16 (GEMM inputs rounded as the CUDA kernels do, the 16-bit
     copies of the weights and activations), within bf16's tolerance, as mgt generate --bf16
     and mgt serve --bf16 decode;
   - argv[1] "moe": Mixture-of-Experts layers trained with a capacity (top-1 of 4, factor 0.5)
     decode without one, whatever rows beside: against the full forward of the same weights
     without a capacity. */
#include <mpi.h>
#include <string.h>

#include "mgt/train.h"
#include "mgt/backend.h"
#include "mgt/generate.h"
#include "mgt/sample.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "testutil.h"

enum { T = 24, PROMPT = 5, VOCAB = 100 };
static int rope;  /* argv[1] "rope": rotary positions, turned at the decoded position */
static int llama; /* argv[1] "llama": and Llama's block, 8 heads reading a cache of 2 groups */
static int bf16;  /* argv[1] "bf16" */
static int moe;   /* argv[1] "moe" */
static double tol = 1e-4;

typedef struct model {
  mgt_grid *grid;
  mgt_backend *be;
  mgt_comm *comm;
  mgt_gpt *m;
  mgt_gpt *full; /* the full forward's: m, or under "moe" its weights without a capacity */
} model;

static void model_create(model *x, MPI_Comm world, int tp) {
  memset(x, 0, sizeof *x);
  mgt_config c;
  mgt_config_defaults(&c);
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 128;
  c.seq_length = T;
  c.max_position_embeddings = T;
  c.vocab_size = VOCAB; /* padded: the last shard holds padding */
  c.make_vocab_size_divisible_by = 8;
  c.micro_batch_size = 1;
  c.tensor_model_parallel_size = tp;
  c.init_method_std = 0.3; /* logits far from uniform, so argmax is well separated */
  c.mock_data = 1;
  c.position_embedding_type = rope || llama ? MGT_POS_ROPE : MGT_POS_LEARNED;
  if (llama) {
    c.normalization = MGT_NORM_RMSNORM, c.swiglu = 1, c.disable_bias_linear = 1;
    c.untie_embeddings_and_output_weights = 1;
    c.num_attention_heads = 8, c.group_query_attention = 1, c.num_query_groups = 2;
  }
  if (moe) {
    c.num_experts = 4, c.moe_router_topk = 1, c.disable_bias_linear = 1;
    c.moe_expert_capacity_factor = 0.5; /* at 3 rows, 1 of them an expert */
  }
  c.bf16 = bf16;
  c.cpu_gemm = bf16 ? MGT_CPU_GEMM_EMULATED : -1;
  int size;
  MPI_Comm_size(world, &size);
  T_OK(mgt_config_finalize(&c, size));
  T_OK(mgt_grid_create(world, tp, &x->grid));
  T_OK(mgt_backend_cpu_create(&x->be));
  if (bf16) T_OK(mgt_be_set_precision(x->be, MGT_PREC_BF16));
  T_OK(mgt_comm_mpi_create(x->grid, NULL, &x->comm));
  T_OK(mgt_train_model_create(&c, x->grid, x->be, x->comm, &x->m));
  x->full = x->m;
  if (moe) { /* the same initialization, no capacity */
    c.moe_expert_capacity_factor = 0;
    T_OK(mgt_train_model_create(&c, x->grid, x->be, x->comm, &x->full));
  }
}

static void model_destroy(model *x) {
  if (x->full != x->m) mgt_gpt_destroy(&x->full);
  mgt_gpt_destroy(&x->m);
  mgt_comm_destroy(&x->comm);
  mgt_backend_destroy(&x->be);
  mgt_grid_destroy(&x->grid);
}

static int32_t argmax(const float *x, int n) {
  int32_t b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* Full logits of position pos of seq (padded with zeros to T + 1 tokens). */
static void full_logits(model *x, const int32_t *seq, int len, int pos, float *logits) {
  int32_t tokens[T + 1] = {0};
  memcpy(tokens, seq, sizeof(int32_t) * (size_t)len);
  T_OK(mgt_gpt_forward_logits(x->full, tokens, pos, logits));
}

/* Greedy continuation of prompt by the cache (out) and by recomputation (ref). */
static void greedy(model *x, const int32_t *prompt, int32_t *out, int32_t *ref) {
  float *lg = malloc(sizeof(float) * VOCAB);
  mgt_gpt_decoder *dec = NULL;
  T_OK(mgt_gpt_decoder_create(x->m, T, &dec));
  memcpy(out, prompt, sizeof(int32_t) * PROMPT);
  memcpy(ref, prompt, sizeof(int32_t) * PROMPT);
  for (int p = 0; p < PROMPT - 1; p++)
    T_OK(mgt_gpt_decode(dec, out[p], p, lg));
  for (int p = PROMPT - 1; p < T - 1; p++) {
    T_OK(mgt_gpt_decode(dec, out[p], p, lg));
    out[p + 1] = mgt_sample_token(lg, VOCAB, 1, 1.0, 0, 0.0, 0.0);
    full_logits(x, ref, p + 1, p, lg);
    ref[p + 1] = argmax(lg, VOCAB);
  }
  mgt_gpt_decoder_destroy(&dec);
  free(lg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  rope = argc > 1 && strcmp(argv[1], "rope") == 0;
  llama = argc > 1 && strcmp(argv[1], "llama") == 0;
  bf16 = argc > 1 && strcmp(argv[1], "bf16") == 0;
  moe = argc > 1 && strcmp(argv[1], "moe") == 0;
  if (bf16) tol = 3e-2;
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  model a;
  model_create(&a, MPI_COMM_WORLD, size);
  int32_t seq[T + 1];
  for (int i = 0; i <= T; i++)
    seq[i] = (int32_t)(t_next() % VOCAB);

  /* cached logits at every position against the full forward */
  float *dec_lg = malloc(sizeof(float) * VOCAB), *ref_lg = malloc(sizeof(float) * VOCAB);
  double *ref = malloc(sizeof(double) * VOCAB);
  float *all = malloc(sizeof(float) * (size_t)T * VOCAB);
  mgt_gpt_decoder *dec = NULL;
  T_OK(mgt_gpt_decoder_create(a.m, T, &dec));
  for (int p = 0; p < T; p++) {
    T_OK(mgt_gpt_decode(dec, seq[p], p, dec_lg));
    full_logits(&a, seq, T + 1, p, ref_lg);
    for (int v = 0; v < VOCAB; v++)
      ref[v] = ref_lg[v];
    memcpy(all + (size_t)p * VOCAB, ref_lg, sizeof(float) * VOCAB);
    size_t at = 0;
    double w = t_worst(dec_lg, ref, VOCAB, tol, tol, &at);
    T_CHECK(w <= 1.0, "position %d: cached logit %zu is %g, full forward %g", p, at, dec_lg[at],
            ref[at]);
  }
  T_CHECK(mgt_gpt_decode(dec, seq[0], T, dec_lg) == MGT_ERR_INPUT, "a position past the cache");
  mgt_gpt_decoder_destroy(&dec);

  /* several sequences decoded together (slots in another order than the rows, starting at
     different steps, some rows absent from some steps) against the full forward of each */
  {
    enum { S = 3 };
    int32_t sq[S][T + 1];
    for (int k = 0; k < S; k++)
      for (int i = 0; i <= T; i++)
        sq[k][i] = (int32_t)(t_next() % VOCAB);
    const int slot_of[S] = {2, 0, 1}, start[S] = {0, 3, 5};
    float *lg = malloc(sizeof(float) * S * VOCAB);
    T_OK(mgt_gpt_decoder_create_batch(a.m, S, T, &dec));
    double worst = 0.0;
    int next[S] = {0};
    for (int step = 0; step < 2 * T; step++) {
      int n = 0, slot[S], pos[S], who[S];
      int32_t tok[S];
      for (int k = 0; k < S; k++) {
        const int p = next[k];
        if (step < start[k] || p >= T || (k == 1 && step % 4 == 2)) continue; /* 1 waits at times */
        slot[n] = slot_of[k], pos[n] = p, tok[n] = sq[k][p], who[n++] = k;
        next[k]++;
      }
      if (!n) continue;
      T_OK(mgt_gpt_decode_batch(dec, n, slot, tok, pos, lg));
      for (int i = 0; i < n; i++) {
        full_logits(&a, sq[who[i]], T + 1, pos[i], ref_lg);
        for (int v = 0; v < VOCAB; v++)
          ref[v] = ref_lg[v];
        size_t at = 0;
        worst = fmax(worst, t_worst(lg + (size_t)i * VOCAB, ref, VOCAB, tol, tol, &at));
      }
    }
    T_CHECK(worst <= 1.0, "batched decoding: %.3g of the tolerance from the full forward", worst);
    const int bad_slot = S;
    int32_t t0 = 0;
    int p0 = 0;
    T_CHECK(mgt_gpt_decode_batch(dec, 1, &bad_slot, &t0, &p0, lg) == MGT_ERR_INPUT,
            "a slot past the decoder's");
    mgt_gpt_decoder_destroy(&dec);
    free(lg);
  }

  /* greedy predictions of the batched forward */
  float losses[T];
  int32_t pred[T];
  T_OK(mgt_gpt_forward_predict(a.full, seq, losses, pred));
  for (int p = 0; p < T; p++)
    T_CHECK(pred[p] == argmax(all + (size_t)p * VOCAB, VOCAB),
            "position %d: predicted %d, argmax %d", p, pred[p],
            argmax(all + (size_t)p * VOCAB, VOCAB));

  /* greedy continuations */
  int32_t out[T], rec[T];
  greedy(&a, seq, out, rec);
  T_CHECK(memcmp(out, rec, sizeof out) == 0, "greedy: the cache and recomputation differ");
  if (size > 1) {
    model one;
    model_create(&one, MPI_COMM_SELF, 1);
    int32_t out1[T], rec1[T];
    greedy(&one, seq, out1, rec1);
    T_CHECK(memcmp(out, out1, sizeof out) == 0, "greedy: tp=%d and tp=1 differ", size);
    model_destroy(&one);
  }
  if (rank == 0) {
    printf("greedy continuation:");
    for (int p = PROMPT; p < T; p++)
      printf(" %d", out[p]);
    printf("\n");
  }
  free(dec_lg), free(ref_lg), free(ref), free(all);
  model_destroy(&a);
  int bad = t_report("generate");
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return bad;
}
