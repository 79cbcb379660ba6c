/* The per-rank memory plan that --dry-run prints and what fits: see include/mgt/train.h. */
#include "mgt/train.h"

#include <stdio.h>

void mgt_print_memory_plan(const mgt_config *cfg, int tp, int dp, FILE *f) {
  mgt_gpt_memory m;
  mgt_gpt_memory_plan_grid(cfg, tp, dp, &m);
  const double MiB = 1024.0 * 1024.0;
  fprintf(f, "memory per rank (MiB):\n");
  fprintf(f, "  parameters          %12.1f\n", m.params / MiB);
  const mgt_model_spec spec = mgt_model_of(cfg);
  if (spec.experts)
    fprintf(f, "    (%.4g M parameters, %.4g M active: %d of %d experts a token)\n",
            (double)mgt_gpt_spec_params(&spec) / 1e6,
            (double)mgt_gpt_spec_active_params(&spec) / 1e6, spec.topk, spec.experts);
  if (m.weight_copies)
    fprintf(f, "  16-bit weights      %12.1f  (remade once per step; --no-weight-copies)\n",
            m.weight_copies / MiB);
  fprintf(f, "  gradients           %12.1f\n", m.grads / MiB);
  const int ep = cfg->expert_model_parallel_size;
  if (cfg->use_distributed_optimizer && dp > 1 && ep > 1)
    fprintf(f,
            "  optimizer (Adam)    %12.1f  (a shard of %d, the experts' of %d, "
            "--use-distributed-optimizer)\n",
            m.optimizer / MiB, dp, dp / ep);
  else if (cfg->use_distributed_optimizer && dp > 1)
    fprintf(f, "  optimizer (Adam)    %12.1f  (a shard of %d, --use-distributed-optimizer)\n",
            m.optimizer / MiB, dp);
  else
    fprintf(f, "  optimizer (Adam)    %12.1f\n", m.optimizer / MiB);
  static const char *const gran[] = {"without recomputation", "full recomputation",
                                     "selective recomputation"};
  const int g = cfg->recompute_granularity >= 0 && cfg->recompute_granularity <= 2
                    ? cfg->recompute_granularity
                    : 0;
  fprintf(f, "  activations         %12.1f  (without recomputation)\n", m.activations_full / MiB);
  fprintf(f, "  activations         %12.1f  (with --recompute-activations)\n",
          m.activations_recompute / MiB);
  fprintf(f, "  activations         %12.1f  (with --recompute-granularity selective)\n",
          m.activations_selective / MiB);
  if (g == MGT_RECOMPUTE_FULL &&
      (cfg->recompute_method != MGT_RECOMPUTE_UNIFORM || cfg->recompute_num_layers != 1))
    fprintf(f, "  activations         %12.1f  (as configured: %s, %d layers)\n",
            m.activations / MiB, cfg->recompute_method ? "block" : "uniform",
            cfg->recompute_num_layers);
  if (cfg->sequence_parallel && tp > 1) { /* the numbers above have it; what it saves */
    mgt_config off = *cfg;
    off.sequence_parallel = 0;
    mgt_gpt_memory w;
    mgt_gpt_memory_plan_grid(&off, tp, dp, &w);
    fprintf(
        f,
        "  activations         %12.1f  (as configured, with --sequence-parallel; %.1f without)\n",
        m.activations / MiB, w.activations / MiB);
  }
  fprintf(f, "  total               %12.1f  (%s)\n", m.total / MiB,
          g == 0 && cfg->recompute_activations ? gran[1] : gran[g]);
}

void mgt_print_memory_fit(const mgt_config *cfg, int tp, int dp, size_t avail, const char *where,
                          FILE *f) {
  const double MiB = 1024.0 * 1024.0;
  if (!avail) {
    fprintf(f, "memory available per rank: %s; nothing checked\n", where);
    return;
  }
  mgt_gpt_memory m;
  mgt_gpt_memory_plan_grid(cfg, tp, dp, &m);
  const size_t rest = m.total - m.activations;
  const struct {
    const char *name, *advice;
    size_t act;
  } way[3] = {{"without recomputation", "none", m.activations_full},
              {"selective recomputation", "selective (--recompute-granularity selective)",
               m.activations_selective},
              {"full recomputation", "full (--recompute-activations)", m.activations_recompute}};
  fprintf(f, "memory available per rank: %.1f MiB (%s)\n", avail / MiB, where);
  int least = -1;
  for (int k = 0; k < 3; k++) {
    const int fits = rest + way[k].act <= avail;
    if (fits && least < 0) least = k;
    fprintf(f, "  %-24s %12.1f  %s\n", way[k].name, (rest + way[k].act) / MiB,
            fits ? "fits" : "does not fit");
  }
  if (least >= 0)
    fprintf(f, "  least recomputation that fits: %s\n", way[least].advice);
  else
    fprintf(f, "  nothing fits: a smaller --micro-batch-size, a larger "
               "--tensor-model-parallel-size or --use-distributed-optimizer\n");
}
