/* mgt plan: every layout of a model on a machine that fits in its GPU memory, ranked by a step
   time estimated from a small compute and communication model whose constants are flags.
   Memory is this project's own plan (the one --dry-run prints); nothing is allocated. */
#include "mgt/plan.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/flags.h"
#include "mgt/gpt.h"

static const char *const recomputes[] = {"all", "none", "full", "selective", NULL};

#define OFF(f) offsetof(mgt_plan_opts, f)
#define SZ(f) sizeof(((mgt_plan_opts *)0)->f)
/* The flags of mgt plan alone; mgt train's model flags come first (plan_flags). */
static const mgt_flag own[] = {
    {"--nodes", MGT_FLAG_INT, OFF(nodes), 1, 1 << 20, "nodes", NULL, 0, 0},
    {"--gpus-per-node", MGT_FLAG_INT, OFF(gpus_per_node), 1, 1024, "GPUs per node", NULL, 0, 0},
    {"--gpu-memory", MGT_FLAG_STR, OFF(gpu_memory), 0, 0, "memory per GPU, e.g. 80GiB or 32GB",
     NULL, SZ(gpu_memory), 0},
    {"--gemm-tflops", MGT_FLAG_DOUBLE, OFF(gemm_tflops), 1e-3, 1e6,
     "sustained model TFLOP/s of one GPU", NULL, 0, 0},
    {"--nvlink-gbps", MGT_FLAG_DOUBLE, OFF(nvlink_gbps), 1e-3, 1e6,
     "all-reduce bus bandwidth inside a node, GB/s per GPU", NULL, 0, 0},
    {"--network-gbps", MGT_FLAG_DOUBLE, OFF(network_gbps), 1e-3, 1e6,
     "network bandwidth of a node (all its adapters), GB/s", NULL, 0, 0},
    {"--memory-gbps", MGT_FLAG_DOUBLE, OFF(memory_gbps), 1e-3, 1e6,
     "GPU memory bandwidth, GB/s (the element-wise work every tensor-parallel rank repeats)", NULL,
     0, 0},
    {"--comm-bytes", MGT_FLAG_INT, OFF(comm_bytes), 1, 8,
     "bytes per element sent (4: this project's fp32; 2: fp16 as the paper's runs)", NULL, 0, 0},
    {"--dp-overlap", MGT_FLAG_DOUBLE, OFF(dp_overlap), 0, 1,
     "fraction of the last backward the data-parallel reduction can hide under", NULL, 0, 0},
    {"--tensor-model-parallel-size", MGT_FLAG_INT, OFF(tp), 0, 1 << 16,
     "only this tensor-parallel size (default: every one that divides the heads)", NULL, 0, 0},
    {"--micro-batch-size", MGT_FLAG_INT, OFF(micro_batch), 0, 1 << 20,
     "only this micro-batch (default: powers of two)", NULL, 0, 0},
    {"--recompute", MGT_FLAG_ENUM, OFF(recompute), 0, 0,
     "all (try each), none, full or selective (--recompute-granularity)", recomputes, 0, 0},
    {"--use-distributed-optimizer", MGT_FLAG_BOOL, OFF(distopt_only), 0, 1,
     "only layouts with the distributed optimizer (default: with and without)", NULL, 0, 0},
    {"--sequence-parallel", MGT_FLAG_BOOL, OFF(sp_only), 0, 1,
     "only layouts with sequence parallelism (default: with and without, where tp > 1)", NULL, 0,
     0},
    {"--top", MGT_FLAG_INT, OFF(top), 1, 1 << 20, "layouts printed", NULL, 0, 0},
    {"--json", MGT_FLAG_BOOL, OFF(json), 0, 1, "one JSON object per layout (bytes, seconds)", NULL,
     0, 0},
};
enum { N_OWN = sizeof own / sizeof own[0], MAX_FLAGS = 160 };

/* mgt train's flags marked SPEC or PLAN, aimed at o->m, then mgt plan's own: out holds
   MAX_FLAGS. */
static int plan_flags(mgt_flag *out) {
  int n = 0, nc;
  const mgt_flag *c = mgt_config_flags(&nc);
  for (int i = 0; i < nc && n < MAX_FLAGS - N_OWN; i++)
    if (c[i].marks & (MGT_FLAG_SPEC | MGT_FLAG_PLAN)) {
      out[n] = c[i];
      out[n++].offset += OFF(m);
    }
  for (int i = 0; i < N_OWN; i++)
    out[n++] = own[i];
  return n;
}

void mgt_plan_defaults(mgt_plan_opts *o) {
  memset(o, 0, sizeof *o);
  mgt_config_defaults(&o->m);
  o->m.num_layers = 24, o->m.hidden_size = 1024, o->m.num_attention_heads = 16;
  o->m.seq_length = 1024, o->m.max_position_embeddings = 0; /* 0: the sequence length */
  o->m.vocab_size = 50257, o->m.make_vocab_size_divisible_by = 128;
  o->m.global_batch_size = 512;
  o->m.device = MGT_DEVICE_CUDA; /* the memory of a GPU run: its attention, its 16-bit copies */
  o->nodes = 1, o->gpus_per_node = 8;
  snprintf(o->gpu_memory, sizeof o->gpu_memory, "80GiB");
  o->gemm_tflops = 100, o->nvlink_gbps = 150, o->network_gbps = 100, o->memory_gbps = 2000;
  o->comm_bytes = 4, o->top = 20;
}

/* "80GiB", "32GB", "1.5TiB", or bytes. */
static mgt_status parse_bytes(const char *s, double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  MGT_REQUIRE(end != s && v > 0 && v < 1e18, "--gpu-memory '%s': not a size (e.g. 80GiB)", s);
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1},          {"B", 1},
               {"KiB", 1024.0},  {"MiB", 1048576.0},
               {"GiB", 1 << 30}, {"TiB", 1099511627776.0},
               {"KB", 1e3},      {"MB", 1e6},
               {"GB", 1e9},      {"TB", 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].unit)) {
      *out = v * units[i].mult;
      return MGT_OK;
    }
  MGT_FAIL(MGT_ERR_INPUT, "--gpu-memory '%s': unknown unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
           s);
}

mgt_status mgt_plan_parse(mgt_plan_opts *o, int argc, char **argv, int first, int *help) {
  mgt_flag flags[MAX_FLAGS];
  const int n = plan_flags(flags);
  MGT_CHECK(mgt_flags_parse(flags, n, o, argc, argv, first, "plan", help));
  if (*help) return MGT_OK;
  MGT_CHECK(parse_bytes(o->gpu_memory, &o->memory_bytes));
  MGT_REQUIRE(!(o->m.fp16 && o->m.bf16), "--fp16 and --bf16 exclude each other");
  mgt_config c; /* the block's flags make sense together, as mgt train would say */
  mgt_model_spec d;
  mgt_plan_config(o, o->tp ? o->tp : 1, 1, MGT_RECOMPUTE_NONE, 0, 0, &c);
  MGT_CHECK(mgt_config_check_tp(&c, c.tensor_model_parallel_size));
  return mgt_model_describe(&c, &d);
}

void mgt_plan_usage(FILE *f) {
  mgt_plan_opts d;
  mgt_plan_defaults(&d);
  mgt_flag flags[MAX_FLAGS];
  mgt_flags_usage(flags, plan_flags(flags), &d, "plan", f);
}

void mgt_plan_config(const mgt_plan_opts *o, int tp, int mb, int recompute, int distopt, int sp,
                     mgt_config *c) {
  *c = o->m;
  c->tensor_model_parallel_size = tp;
  c->micro_batch_size = mb;
  c->recompute_granularity = recompute;
  c->use_distributed_optimizer = distopt;
  c->sequence_parallel = sp;
  mgt_config_derive(c);
}

/* Tensor parallelism: per layer and micro-batch 2 all-reduces forward and 2 backward (2 more
   when the forward is recomputed), and 2 for the vocabulary-parallel embedding and output.
   Sequence parallelism turns each into an all-gather and a reduce-scatter of the same bytes in
   all, and gathers the two LayerNorm outputs again in backward (half an all-reduce each). */
static double tp_collectives(const mgt_config *c, int dp) {
  const int sp = c->sequence_parallel && c->tensor_model_parallel_size > 1;
  const double n_micro = (double)c->global_batch_size / ((double)c->micro_batch_size * dp);
  const double per_layer =
      4.0 + (c->recompute_granularity == MGT_RECOMPUTE_FULL ? 2.0 : 0.0) + (sp ? 1.0 : 0.0);
  return n_micro * (per_layer * c->num_layers + 2.0);
}

/* What one rank of a ring all-reduce over n ranks sends */
static double ring_bytes(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0; }

/* Mixture-of-Experts: the MoE layers, and the expert parameters a rank holds at tp and ep. */
static double expert_floats(const mgt_config *c, int tp, int ep, int *moe_layers) {
  const mgt_model_spec s = mgt_model_of(c);
  *moe_layers = 0;
  for (int l = 0; l < s.layers; l++)
    *moe_layers += mgt_model_is_moe_layer(&s, l);
  if (!s.experts) return 0;
  const double mats = s.mlp == MGT_MLP_SWIGLU ? 3.0 : 2.0; /* gate, up, down */
  return *moe_layers * mats * (s.experts / ep) * (double)(s.moe_ffn / tp) * s.hidden;
}

void mgt_plan_traffic(const mgt_config *c, int dp, int elem, mgt_plan_bytes *b) {
  const int tp = c->tensor_model_parallel_size;
  const int ep = c->expert_model_parallel_size > 0 ? c->expert_model_parallel_size : 1;
  const double act = (double)c->micro_batch_size * c->seq_length * c->hidden_size * elem;
  b->tp = tp_collectives(c, dp) * ring_bytes(act, tp);
  mgt_gpt_memory mem;
  mgt_gpt_memory_plan_grid(c, tp, dp, &mem);
  /* the gradients of this rank's parameters (a reduce-scatter and an all-gather move the same
     bytes as the all-reduce): the experts' summed over the dp / ep ranks holding the same ones */
  int moe_layers;
  const double ef = expert_floats(c, tp, ep, &moe_layers);
  b->dp = ring_bytes(((double)mem.params / sizeof(float) - ef) * elem, dp);
  b->edp = ring_bytes(ef * elem, dp / ep);
  /* each MoE layer's rows out and back by all-to-all, forward and backward (and the forward
     again with full recomputation), (ep - 1) / ep of them to other ranks; the all-gather
     dispatcher receives every other rank's rows, and reduce-scatters as many */
  b->a2a = 0;
  if (ep > 1) {
    const double n_micro = (double)c->global_batch_size / ((double)c->micro_batch_size * dp),
                 rows = (double)c->micro_batch_size * c->seq_length * c->moe_router_topk,
                 passes = 4.0 + (c->recompute_granularity == MGT_RECOMPUTE_FULL ? 2.0 : 0.0),
                 share = c->moe_token_dispatcher_type == 1 ? ep - 1.0 : (ep - 1.0) / ep;
    b->a2a = n_micro * moe_layers * passes * rows * c->hidden_size * elem * share;
  }
}

void mgt_plan_estimate(const mgt_plan_opts *o, const mgt_config *c, int dp, mgt_plan_row *r) {
  const int tp = c->tensor_model_parallel_size, G = o->gpus_per_node, L = c->num_layers;
  const int ep = c->expert_model_parallel_size > 0 ? c->expert_model_parallel_size : 1;
  const double T = c->seq_length, C = c->hidden_size, mb = c->micro_batch_size;
  const double n_micro = (double)c->global_batch_size / (mb * dp);
  mgt_gpt_memory mem;
  mgt_gpt_memory_plan_grid(c, tp, dp, &mem);
  r->tp = tp, r->dp = dp, r->micro_batch = c->micro_batch_size;
  r->recompute = c->recompute_granularity, r->distopt = c->use_distributed_optimizer;
  const int sp = c->sequence_parallel && tp > 1;
  r->sp = sp;
  r->memory = (double)mem.total;
  r->params = (double)mem.params, r->grads = (double)mem.grads;
  r->optimizer = (double)mem.optimizer, r->activations = (double)mem.activations;
  /* compute: the model's FLOPs (forward and backward), plus the forward recomputed */
  const double F = mgt_gpt_flops_per_iteration(c);
  const double attention = 12.0 * L * C * T * T * c->global_batch_size;
  const double extra =
      c->recompute_granularity == MGT_RECOMPUTE_FULL
          ? F / 3.0
          : (c->recompute_granularity == MGT_RECOMPUTE_SELECTIVE ? attention / 3.0 : 0.0);
  r->model_flops = F;
  r->compute_s = (F + extra) / (tp * (double)dp) / (o->gemm_tflops * 1e12);
  /* element-wise work (LayerNorms, dropouts, residuals) every tensor-parallel rank repeats on
     the whole B x T x C: about 16 passes over it per layer, fwd and bwd; sequence parallelism
     splits it instead */
  const double elem = 16.0 * mb * T * C * o->comm_bytes * L * n_micro;
  r->elementwise_s = (tp > 1 && !sp ? elem * (1.0 - 1.0 / tp) : 0.0) / (o->memory_gbps * 1e9);
  mgt_plan_bytes b;
  mgt_plan_traffic(c, dp, o->comm_bytes, &b);
  r->tp_bytes = b.tp, r->dp_bytes = b.dp + b.edp, r->a2a_bytes = b.a2a, r->ep = ep;
  r->a2a_s = b.a2a / ((tp * ep <= G ? o->nvlink_gbps : o->network_gbps / G) * 1e9);
  const double tp_gbps = tp <= G ? o->nvlink_gbps : o->network_gbps / G;
  r->tp_comm_s = r->tp_bytes / (tp_gbps * 1e9);
  /* data parallelism, hidden under the last backward as far as --dp-overlap allows. A group
     that spans nodes has G / tp of its members in each node and gets that share of the node's
     network (the tp groups' rings run side by side). Tensor-parallel groups fill nodes first;
     a group that spans nodes is counted as network traffic whole (its ring waits on the
     network). */
  const int across = tp * dp > G, per_node = tp < G ? G / tp : 1;
  const double dp_gbps = across ? o->network_gbps * per_node / G : o->nvlink_gbps;
  r->dp_comm_s = r->dp_bytes / (dp_gbps * 1e9);
  r->intra_bytes = (tp <= G ? r->tp_bytes : 0.0) + (across ? 0.0 : r->dp_bytes) +
                   (tp * ep <= G ? r->a2a_bytes : 0.0);
  r->inter_bytes = (tp <= G ? 0.0 : r->tp_bytes) + (across ? r->dp_bytes : 0.0) +
                   (tp * ep <= G ? 0.0 : r->a2a_bytes);
  const double last_backward = r->compute_s * (2.0 / 3.0) / n_micro;
  r->dp_exposed_s = fmax(0.0, r->dp_comm_s - o->dp_overlap * last_backward);
  r->step_s = r->compute_s + r->elementwise_s + r->tp_comm_s + r->dp_exposed_s + r->a2a_s;
  r->ideal_s = F / (tp * (double)dp) / (o->gemm_tflops * 1e12);
}

static int by_time(const void *a, const void *b) {
  const mgt_plan_row *x = a, *y = b;
  if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
  return x->memory < y->memory ? -1 : (x->memory > y->memory ? 1 : 0); /* then the smaller */
}

static const char *rname(int g) {
  return g == MGT_RECOMPUTE_FULL ? "full" : (g == MGT_RECOMPUTE_SELECTIVE ? "selective" : "none");
}

mgt_status mgt_plan_run(const mgt_plan_opts *o, FILE *out) {
  const int gpus = o->nodes * o->gpus_per_node;
  size_t cap = 256, n = 0, tried = 0;
  mgt_plan_row *rows = malloc(sizeof *rows * cap);
  MGT_REQUIRE(rows, "out of memory for the plan");
  mgt_config c0;
  mgt_plan_config(o, 1, 1, 0, 0, 0, &c0);
  for (int tp = 1; tp <= gpus; tp++) {
    if (gpus % tp || (o->tp && tp != o->tp)) continue;
    if (mgt_config_check_tp(&c0, tp) != MGT_OK) { /* a layout mgt train refuses */
      mgt_error_clear();
      continue;
    }
    const int dp = gpus / tp;
    if (o->m.global_batch_size % dp) continue;
    for (int mb = 1; mb <= o->m.global_batch_size / dp; mb *= 2) {
      if ((o->m.global_batch_size / dp) % mb || (o->micro_batch && mb != o->micro_batch)) continue;
      for (int g = 0; g < 3; g++) {
        if (o->recompute && g != o->recompute - 1) continue;
        const int sp_ok = tp > 1 && (int64_t)mb * o->m.seq_length % tp == 0;
        for (int ep = 1; ep <= dp; ep++) /* expert parallelism: experts over dp ranks */
          for (int dist = o->distopt_only; dist <= (dp > 1); dist++)
            for (int sp = o->sp_only; sp <= sp_ok; sp++) {
              if (ep > 1 &&
                  (!o->m.num_experts || dp % ep || o->m.num_experts % ep ||
                   (o->m.expert_model_parallel_size > 1 && ep != o->m.expert_model_parallel_size)))
                continue;
              if (ep == 1 && o->m.expert_model_parallel_size > 1) continue;
              mgt_config c;
              mgt_plan_config(o, tp, mb, g, dist, sp, &c);
              c.expert_model_parallel_size = ep;
              mgt_plan_row r;
              mgt_plan_estimate(o, &c, dp, &r);
              tried++;
              if (r.memory > o->memory_bytes) continue;
              if (n == cap) {
                mgt_plan_row *p = realloc(rows, sizeof *rows * (cap *= 2));
                if (!p) {
                  free(rows);
                  MGT_FAIL(MGT_ERR_NOMEM, "out of memory for the plan");
                }
                rows = p;
              }
              rows[n++] = r;
            }
      }
    }
  }
  char active[64] = ""; /* Mixture-of-Experts: the parameters a token passes through */
  const mgt_model_spec spec = mgt_model_of(&c0);
  if (spec.experts)
    snprintf(active, sizeof active, " (%.3g B active: %d of %d experts)",
             (double)mgt_gpt_spec_active_params(&spec) / 1e9, spec.topk, spec.experts);
  fprintf(out,
          "%s: %d layers, hidden %d, %d heads, sequence %d, vocabulary %d, %.3g B parameters%s; "
          "global batch %d on %d x %d GPUs of %s\n",
          mgt_model_names[o->m.model], o->m.num_layers, o->m.hidden_size, o->m.num_attention_heads,
          o->m.seq_length, o->m.vocab_size, (double)mgt_gpt_logical_params(&c0) / 1e9, active,
          o->m.global_batch_size, o->nodes, o->gpus_per_node, o->gpu_memory);
  fprintf(out,
          "model: %.4g TFLOP/s per GPU, %.4g GB/s all-reduce in a node, %.4g GB/s network per "
          "node, %.4g GB/s memory, %d bytes per element sent, data-parallel overlap %.2f\n",
          o->gemm_tflops, o->nvlink_gbps, o->network_gbps, o->memory_gbps, o->comm_bytes,
          o->dp_overlap);
  if (n == 0) {
    free(rows);
    MGT_FAIL(MGT_ERR_INPUT,
             "none of the %zu layouts tried fits in %s per GPU (see the memory of each with "
             "mgt train --dry-run; more GPUs or a smaller micro-batch may)",
             tried, o->gpu_memory);
  }
  qsort(rows, n, sizeof *rows, by_time);
  fprintf(out, "%zu of %zu layouts fit; fastest first:\n", n, tried);
  const int moe = o->m.num_experts > 0; /* an expert-parallel column and its all-to-all time */
  if (!o->json)
    fprintf(out,
            "   tp    dp%s  micro  recompute  dist-opt  seq-par  memory/GPU  step (s)  "
            "compute  tp comm  dp comm%s  tokens/s  TFLOP/s/GPU  efficiency  node GB   net GB\n",
            moe ? "    ep" : "", moe ? "  all-to-all" : "");
  for (size_t i = 0; i < n && i < (size_t)o->top && o->json; i++) {
    const mgt_plan_row *r = &rows[i];
    fprintf(out,
            "{\"tp\": %d, \"dp\": %d, \"micro_batch\": %d, \"recompute\": \"%s\", "
            "\"distributed_optimizer\": %s, \"sequence_parallel\": %s, \"memory\": %.0f, "
            "\"params\": %.0f, \"grads\": "
            "%.0f, \"optimizer\": %.0f, \"activations\": %.0f, \"step_s\": %.9g, "
            "\"compute_s\": %.9g, \"elementwise_s\": %.9g, \"tp_comm_s\": %.9g, \"dp_comm_s\": "
            "%.9g, \"dp_exposed_s\": %.9g, \"efficiency\": %.9g, \"tp_bytes\": %.0f, "
            "\"dp_bytes\": %.0f, \"intra_node_bytes\": %.0f, \"inter_node_bytes\": %.0f, "
            "\"ep\": %d, \"a2a_bytes\": %.0f, \"a2a_s\": %.9g}\n",
            r->tp, r->dp, r->micro_batch, rname(r->recompute), r->distopt ? "true" : "false",
            r->sp ? "true" : "false", r->memory, r->params, r->grads, r->optimizer, r->activations,
            r->step_s, r->compute_s, r->elementwise_s, r->tp_comm_s, r->dp_comm_s, r->dp_exposed_s,
            r->ideal_s / r->step_s, r->tp_bytes, r->dp_bytes, r->intra_bytes, r->inter_bytes, r->ep,
            r->a2a_bytes, r->a2a_s);
  }
  for (size_t i = 0; i < n && i < (size_t)o->top && !o->json; i++) {
    const mgt_plan_row *r = &rows[i];
    char epc[16] = "", a2a[16] = "";
    if (moe)
      snprintf(epc, sizeof epc, "  %4d", r->ep), snprintf(a2a, sizeof a2a, "  %10.3f", r->a2a_s);
    fprintf(out,
            " %4d  %4d%s  %5d  %9s  %8s  %7s  %7.1f GiB  %8.3f  %7.3f  %7.3f  %7.3f%s  %8.0f  "
            "%11.2f  %9.1f%%  %7.2f  %7.2f\n",
            r->tp, r->dp, epc, r->micro_batch, rname(r->recompute), r->distopt ? "yes" : "no",
            r->sp ? "yes" : "no", r->memory / (1 << 30), r->step_s, r->compute_s, r->tp_comm_s,
            r->dp_exposed_s, a2a, (double)o->m.global_batch_size * o->m.seq_length / r->step_s,
            r->model_flops / r->step_s / gpus / 1e12, 100.0 * r->ideal_s / r->step_s,
            r->intra_bytes / 1e9, r->inter_bytes / 1e9);
  }
  free(rows);
  return MGT_OK;
}
