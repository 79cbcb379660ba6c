/* Every (tp, dp) layout trains the same model as one rank: run under mpiexec with the
   tensor-parallel size as argument. Rank 0 also trains the single-rank reference alone
   (over MPI_COMM_SELF); per-iteration losses must agree within 1e-5 relative and the
   parameters, gathered to their logical shape, within 1e-5. Replicas must be identical.
   Modes: overlap, recompute (full, every layer), selective (--recompute-granularity selective),
   block (full, --recompute-method block, the first layer), distopt (--use-distributed-optimizer on
   the layout only, with a clipping norm that binds, against the reference without it),
   distopt-overlap; sp (--sequence-parallel on the layout only, with micro-batches of 3 samples so
   that a rank's rows start mid-sample and span two samples), distopt-sp, distopt-sp-overlap,
   recompute-sp, selective-sp, block-sp; flash and flash-sp (--use-flash-attn, the reference
   too); chunks and chunks-sp (the layout's output layer in chunks of 7 rows); untied, rope;
   llama (RMSNorm, SwiGLU, no biases, rotary, untied, 8 heads in 4 key/value groups) and gqa
   (the groups alone, with biases), combined with the others; qwen (Llama's block with Qwen 3's
   head size of 24 and q/k norms); moe (Llama's block with Mixture-of-Experts layers: top-2 of 4
   experts, the load-balancing and z-losses, a gated shared expert) and moe1 (layer 1 only,
   sigmoid scores, the load-balancing loss per sequence, an expert bias, a shared expert), with
   "-epN" the experts over N expert-parallel ranks (the layout only); "full": OLMoE's q/k norms
   over all heads; "-ag" the all-gather dispatcher; "eod" --eod-mask-loss (the loss the mean
   over the global batch's tokens with a loss); "reset" --reset-position-ids; "docs" those two and
   --reset-attention-mask. */
#include <mpi.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/train.h"
#include "testutil.h"

enum { ITERS = 20 };

static int overlap, recompute, distopt, selective, block, sp, flash, chunks, untied, rope, llama,
    gqa, qwen, moe, moe1, olmoe, allgather, gaux, eod, reset, docs, ep = 1;
static int ref_dp =
    1; /* global_aux_loss: the reference takes the layout's dp micro-batches at once */
static int layout_run; /* the run on the layout, not the one-rank reference */

static mgt_config test_config(int tp, int dist, int seqpar) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 128;
  c.seq_length = 16;
  c.vocab_size = 100; /* padded per layout: the last shard holds padding */
  c.make_vocab_size_divisible_by = 8;
  c.micro_batch_size = 2;
  c.global_batch_size = 16;
  c.train_iters = ITERS;
  c.lr = 1e-3;
  c.lr_warmup_iters = 5;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  c.tensor_model_parallel_size = tp;
  c.ddp_bucket_size = 5000; /* several all-reduce pieces per bucket */
  c.overlap_grad_reduce = overlap;
  c.recompute_activations = recompute;
  if (selective) c.recompute_granularity = MGT_RECOMPUTE_SELECTIVE;
  if (block) /* layer 0 recomputed, layer 1 kept */
    c.recompute_granularity = MGT_RECOMPUTE_FULL, c.recompute_method = MGT_RECOMPUTE_BLOCK;
  c.use_distributed_optimizer = dist;
  c.sequence_parallel = seqpar;
  if (sp) c.micro_batch_size = 3, c.global_batch_size = 24; /* the reference too */
  c.attention_backend = flash ? MGT_ATTN_FLASH : MGT_ATTN_UNFUSED;
  c.untie_embeddings_and_output_weights = untied;
  c.position_embedding_type = rope ? MGT_POS_ROPE : MGT_POS_LEARNED;
  if (llama || gqa) /* 8 heads in 4 key/value groups: whole groups on up to 4 ranks */
    c.num_attention_heads = 8, c.group_query_attention = 1, c.num_query_groups = 4;
  if (qwen) c.kv_channels = 24, c.qk_layernorm = 1;       /* 8 heads of 24: 192 wide */
  if (olmoe) c.qk_layernorm = 1, c.qk_layernorm_full = 1; /* OLMoE's, over all heads */
  if (eod) c.eod_mask_loss = 1, c.eod_token = 7;          /* an id the mock sequences hold */
  if (reset) c.reset_position_ids = 1, c.eod_token = 7;
  if (docs) /* documents packed in samples, kept apart */
    c.reset_position_ids = c.reset_attention_mask = c.eod_mask_loss = 1, c.eod_token = 7;
  if (moe || moe1) {
    c.num_experts = 4, c.moe_router_topk = 2, c.moe_ffn_hidden_size = 96;
    c.moe_aux_loss_coeff = 0.01, c.moe_z_loss_coeff = 0.001;
    if (moe1) strcpy(c.moe_layer_freq, "[0,1]"), c.moe_router_score_function = MGT_MOE_SIGMOID;
    if (moe1) c.moe_router_load_balancing_type = MGT_MOE_LB_SEQ_AUX;
    if (moe1) c.moe_router_enable_expert_bias = 1, c.moe_router_bias_update_rate = 0.01;
    c.moe_shared_expert_intermediate_size = moe1 ? 32 : 48; /* gated in moe */
    c.moe_shared_expert_gate = moe;
    c.expert_model_parallel_size = layout_run ? ep : 1;
    c.moe_token_dispatcher_type = layout_run && allgather; /* the all-gather dispatcher */
    if (ep > 1) c.clip_grad = 0.05; /* a norm that binds: each expert counted once, exactly */
    if (gaux) { /* the counts of the micro-step on all dp ranks: one rank's of dp x the rows */
      c.moe_router_load_balancing_type = MGT_MOE_LB_GLOBAL_AUX, c.moe_aux_loss_coeff = 0.1;
      if (!layout_run) c.micro_batch_size *= ref_dp;
    }
  }
  if (llama) { /* and the rest of Llama's block */
    c.normalization = MGT_NORM_RMSNORM, c.swiglu = 1, c.disable_bias_linear = 1;
    c.position_embedding_type = MGT_POS_ROPE, c.untie_embeddings_and_output_weights = 1;
  }
  c.logits_chunk_rows = chunks && layout_run ? 7 : 0; /* several chunks, the last one short */
  c.overlap_param_gather = dist && overlap;
  if (distopt) c.clip_grad = 0.05; /* the global norm, summed over shards, must be exact */
  c.mock_data = 1;
  return c;
}

/* Scatters a shard into its logical tensor (padding dropped). */
static void shard_to_full(const mgt_param *p, const float *local, float *full) {
  const mgt_shard *s = &p->shard;
  int64_t s1 = s->ndim > 1 ? s->shape[1] : 1, s2 = s->ndim > 2 ? s->shape[2] : 1;
  int64_t f1 = s->ndim > 1 ? s->full[1] : 1, f2 = s->ndim > 2 ? s->full[2] : 1;
  for (int64_t i = 0; i < s->shape[0]; i++)
    for (int64_t j = 0; j < s1; j++)
      for (int64_t k = 0; k < s2; k++) {
        int64_t gi = i + (s->split_dim == 0 ? s->offset : s->lead);
        int64_t gj = j + (s->split_dim == 1 ? s->offset : 0);
        int64_t gk = k + (s->split_dim == 2 ? s->offset : 0);
        if (gi >= s->full[0] || gj >= f1 || gk >= f2) continue;
        full[(gi * f1 + gj) * f2 + gk] = local[(i * s1 + j) * s2 + k];
      }
}

static size_t full_numel(const mgt_param *p) {
  size_t n = 1;
  for (int i = 0; i < p->shard.ndim; i++)
    n *= (size_t)p->shard.full[i];
  return n;
}

/* Trains ITERS iterations on `grid`; returns losses and (on world rank 0 of the grid) the
   logical parameters concatenated in order. */
static float *run(const mgt_grid *grid, int tp, int dist, int seqpar, double *losses,
                  size_t *total) {
  mgt_backend *be = NULL;
  T_OK(mgt_backend_cpu_create(&be));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  mgt_config c = test_config(tp, dist, seqpar);
  T_OK(mgt_config_finalize(&c, grid->size));
  mgt_trainer *tr = NULL;
  T_OK(mgt_trainer_create(&c, grid, be, comm, NULL, &tr));
  for (int i = 0; i < ITERS; i++) {
    mgt_step_stats s;
    T_OK(mgt_trainer_step(tr, &s));
    losses[i] = s.loss;
  }
  mgt_gpt *m = mgt_trainer_model(tr);
  int np;
  const mgt_param *params = mgt_gpt_params(m, &np);
  const float *w = mgt_gpt_param_data(m);
  size_t n = 0;
  for (int i = 0; i < np; i++)
    n += full_numel(&params[i]);
  float *full = calloc(n, sizeof(float));
  size_t off = 0;
  for (int i = 0; i < np; i++) {
    /* replicated tensors come from tp rank 0 only; shards are disjoint, so a sum is exact */
    if (!params[i].replicated || grid->tp_rank == 0)
      shard_to_full(&params[i], w + params[i].offset, full + off);
    off += full_numel(&params[i]);
  }
  MPI_Allreduce(MPI_IN_PLACE, full, (int)n, MPI_FLOAT, MPI_SUM, grid->tp_comm);
  off = 0; /* each expert-parallel rank holds other experts */
  for (int i = 0; i < np; i++) {
    if (params[i].expert && grid->ep > 1)
      MPI_Allreduce(MPI_IN_PLACE, full + off, (int)full_numel(&params[i]), MPI_FLOAT, MPI_SUM,
                    grid->ep_comm);
    off += full_numel(&params[i]);
  }
  /* every data-parallel replica must hold the same model */
  float *r0 = malloc(n * sizeof(float));
  memcpy(r0, full, n * sizeof(float));
  MPI_Bcast(r0, (int)n, MPI_FLOAT, 0, grid->dp_comm);
  int same = memcmp(r0, full, n * sizeof(float)) == 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, grid->world);
  T_CHECK(all, "data-parallel replicas hold different parameters");
  free(r0);
  *total = n;
  mgt_trainer_destroy(&tr);
  mgt_backend_destroy(&be);
  return full;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int tp = argc > 1 ? atoi(argv[1]) : 1, rank;
  overlap = argc > 2 && strcmp(argv[2], "overlap") == 0;
  recompute = argc > 2 && strncmp(argv[2], "recompute", 9) == 0;
  distopt = argc > 2 && strncmp(argv[2], "distopt", 7) == 0;
  selective = argc > 2 && strncmp(argv[2], "selective", 9) == 0;
  block = argc > 2 && strncmp(argv[2], "block", 5) == 0;
  if (distopt && strstr(argv[2], "overlap")) overlap = 1;
  sp = argc > 2 && (strcmp(argv[2], "sp") == 0 || strstr(argv[2], "-sp") != NULL);
  flash = argc > 2 && strncmp(argv[2], "flash", 5) == 0;
  chunks = argc > 2 && strncmp(argv[2], "chunks", 6) == 0;
  untied = argc > 2 && strstr(argv[2], "untied") != NULL;
  rope = argc > 2 && strstr(argv[2], "rope") != NULL;
  llama = argc > 2 && strstr(argv[2], "llama") != NULL;
  gqa = argc > 2 && strstr(argv[2], "gqa") != NULL;
  qwen = argc > 2 && strstr(argv[2], "qwen") != NULL;
  moe = argc > 2 && strstr(argv[2], "moe") != NULL && !strstr(argv[2], "moe1");
  moe1 = argc > 2 && strstr(argv[2], "moe1") != NULL;
  olmoe = argc > 2 && strstr(argv[2], "full") != NULL;
  allgather = argc > 2 && strstr(argv[2], "-ag") != NULL;
  gaux = argc > 2 && strstr(argv[2], "gaux") != NULL;
  eod = argc > 2 && strstr(argv[2], "eod") != NULL;
  reset = argc > 2 && strstr(argv[2], "reset") != NULL;
  docs = argc > 2 && strstr(argv[2], "docs") != NULL;
  llama |= qwen | moe | moe1;
  if (argc > 2 && strstr(argv[2], "-ep")) ep = atoi(strstr(argv[2], "-ep") + 3);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mgt_grid *grid = NULL, *single = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, tp, &grid));
  T_OK(mgt_grid_set_experts(grid, ep));
  double ref[ITERS], got[ITERS];
  size_t nref = 0, n = 0;
  float *pref = NULL;
  ref_dp = grid->dp;
  if (rank == 0) {
    T_OK(mgt_grid_create(MPI_COMM_SELF, 1, &single));
    pref = run(single, 1, 0, 0, ref, &nref);
    mgt_grid_destroy(&single);
  }
  layout_run = 1;
  float *p = run(grid, tp, distopt, sp, got, &n);
  if (rank == 0) {
    double worst = 0;
    for (int i = 0; i < ITERS; i++) {
      double rel = fabs(got[i] - ref[i]) / fabs(ref[i]);
      if (rel > worst) worst = rel;
      T_CHECK(rel <= 1e-5, "iteration %d: loss %.9g at tp=%d dp=%d, %.9g on one rank", i + 1,
              got[i], grid->tp, grid->dp, ref[i]);
    }
    T_CHECK(n == nref, "parameter count %zu vs %zu", n, nref);
    double *r = malloc(nref * sizeof(double));
    for (size_t i = 0; i < nref; i++)
      r[i] = pref[i];
    T_CLOSE("parameters after training", p, r, n, 1e-5, 1e-5);
    printf("tp=%d dp=%d ep=%d%s%s: %d iterations, worst loss difference %.2e relative, final "
           "loss %.6f (one rank %.6f)\n",
           grid->tp, grid->dp, grid->ep,
           chunks ? " (logits in chunks of 7 rows)"
           : sp   ? (flash ? " (flash attention, sequence parallel)" : " (sequence parallel)")
                  : (flash ? " (flash attention)" : ""),
           distopt ? (overlap ? " (distributed optimizer, overlapped reduce-scatter and all-gather)"
                              : " (distributed optimizer)")
           : overlap ? " (overlapped gradient all-reduce)"
                     : (recompute   ? " (recomputation)"
                        : selective ? " (selective recomputation)"
                        : block     ? " (block recomputation)"
                                    : ""),
           ITERS, worst, got[ITERS - 1], ref[ITERS - 1]);
    free(r);
  }
  free(p);
  free(pref);
  int fails = t_failures, total = 0;
  MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  if (rank == 0)
    printf("test_parallel: %d checks on rank 0, %d failures on all ranks\n", t_checks, total);
  return total ? 1 : 0;
}
