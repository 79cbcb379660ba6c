/* The reports of a training run: see src/mgt/report.h. */
#include "mgt/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/json.h"
#include "mgt/log.h"
#include "mgt/tensorboard.h"

/* Averages of the losses over the iterations of one log interval; a fine-tuning run's
   accuracy rides in sop_acc. */
typedef struct loss_means {
  double loss, lm, sop, sop_acc;
  double lb, z; /* Mixture-of-Experts' auxiliary losses */
} loss_means;

/* What the lines hold: 0 a causal LM, 1 masked LM pretraining, 2 fine-tuning. */
enum { KIND_LM = 0, KIND_MASKED = 1, KIND_TASK = 2 };

struct mgt_report {
  const mgt_run *run;
  int root, kind, sop; /* sop: the sentence-order head's values are shown */
  int moe;             /* the auxiliary losses of Mixture-of-Experts layers are shown */
  double spread[2];    /* the interval's fewest and most tokens of an expert, over the mean */
  const char *task;    /* the --task name of a fine-tuning run */
  FILE *log, *metrics;
  mgt_tb *tb;
  double flops, tokens; /* per iteration */
  int ranks;            /* the job's: the model FLOP/s per rank (per GPU) */
  loss_means acc;       /* sums over the interval's iterations that were not skipped */
  double seconds;
  double batches; /* the interval's iterations in full global batches (a ramp-up's are less) */
  int n, skipped, nans;
};

mgt_status mgt_report_open(const mgt_run *run, const mgt_model_spec *desc, double flops,
                           double tokens, int ranks, int root, FILE *log, mgt_report **out) {
  *out = NULL;
  mgt_report *r = NULL;
  MGT_CHECK(mgt_calloc(sizeof *r, "report", (void **)&r));
  r->run = run;
  r->root = root;
  r->kind = desc->task ? KIND_TASK : (desc->masked_lm ? KIND_MASKED : KIND_LM);
  r->sop = desc->head == MGT_HEAD_MLM_SOP;
  r->moe = desc->experts > 0;
  r->task = mgt_task_names[desc->task];
  r->log = log;
  r->flops = flops;
  r->tokens = tokens;
  r->ranks = ranks > 0 ? ranks : 1;
  mgt_status st = MGT_OK;
  if (root && run->metrics_file[0])
    MGT_TRY(mgt_create_file("--metrics-file", run->metrics_file, 1, &r->metrics));
  /* TensorBoard is written before the metrics file, so it holds whatever that does */
  if (root && run->tensorboard_dir[0]) MGT_TRY(mgt_tb_create(run->tensorboard_dir, &r->tb));
  *out = r;
  return MGT_OK;
done:
  return mgt_report_close(&r, st);
}

mgt_status mgt_report_close(mgt_report **ptr, mgt_status st) {
  mgt_report *r = *ptr;
  if (!r) return st;
  mgt_tb_destroy(&r->tb);
  if (r->metrics && fclose(r->metrics) != 0 && st == MGT_OK)
    st = MGT_ERROR(MGT_ERR_IO, "--metrics-file %s: write failed: %s", r->run->metrics_file,
                   strerror(errno));
  mgt_free(r);
  *ptr = NULL;
  return st;
}

void mgt_report_step(mgt_report *r, const mgt_step_stats *s, double seconds) {
  r->seconds += seconds;
  r->batches += (double)s->global_batch / r->run->global_batch;
  if (!s->skipped) {
    r->acc.loss += s->loss, r->acc.lm += s->lm_loss, r->acc.sop += s->sop_loss;
    r->acc.sop_acc += r->kind == KIND_TASK ? s->accuracy : s->sop_accuracy, r->n++;
    r->acc.lb += s->moe_lb_loss, r->acc.z += s->moe_z_loss;
    if (r->moe) {
      r->spread[0] = r->n == 1 ? s->moe_tokens_min : fmin(r->spread[0], s->moe_tokens_min);
      r->spread[1] = r->n == 1 ? s->moe_tokens_max : fmax(r->spread[1], s->moe_tokens_max);
    }
  }
  r->skipped += s->skipped;
  r->nans += s->nonfinite;
}

/* A JSON number, or null for NaN and infinities (no loss when every step was skipped,
   an infinite norm on overflow), which JSON cannot spell. */
static void json_num(FILE *f, const char *key, double v, int digits) {
  fprintf(f, ",\"%s\":", key);
  if (isfinite(v))
    fprintf(f, "%.*g", digits, v);
  else
    fputs("null", f);
}

static void metrics_line(FILE *f, const mgt_step_stats *s, const loss_means *lm, int kind,
                         const double *moe, double ms, double tokens_per_sec, double tflops,
                         double tflops_rank, double tokens_seen, int skipped, int nans) {
  fprintf(f, "{\"iteration\":%lld,\"consumed_samples\":%llu,\"consumed_tokens\":%.0f",
          (long long)s->iteration, (unsigned long long)s->consumed_samples, tokens_seen);
  json_num(f, "loss", lm->loss, 17);
  if (kind == KIND_TASK) {
    json_num(f, "accuracy", lm->sop_acc, 9);
  } else if (kind == KIND_MASKED) {
    json_num(f, "lm_loss", lm->lm, 17);
    json_num(f, "sop_loss", lm->sop, 17);
    json_num(f, "sop_accuracy", lm->sop_acc, 9);
  }
  if (moe) {
    json_num(f, "load_balancing_loss", lm->lb, 17), json_num(f, "z_loss", lm->z, 17);
    json_num(f, "expert_tokens_min", moe[0], 9), json_num(f, "expert_tokens_max", moe[1], 9);
  }
  json_num(f, "lr", s->lr, 9);
  json_num(f, "grad_norm", s->grad_norm, 9);
  json_num(f, "ms_per_iteration", ms, 9);
  json_num(f, "tokens_per_sec", tokens_per_sec, 9);
  json_num(f, "tflops", tflops, 9);
  json_num(f, "tflops_per_rank", tflops_rank, 9);
  fprintf(f, ",\"skipped_iterations\":%d,\"nan_iterations\":%d", skipped, nans);
  json_num(f, "loss_scale", s->loss_scale, 17);
  fputs("}\n", f);
}

/* A TensorBoard scalar, written when `on`. */
typedef struct tb_scalar {
  const char *tag;
  double value;
  int on;
} tb_scalar;

/* One event at `step` of the scalars that are on, flushed. */
static mgt_status tb_write(mgt_tb *tb, int64_t step, const tb_scalar *x, int n) {
  for (int i = 0; i < n; i++)
    if (x[i].on) MGT_CHECK(mgt_tb_add(tb, x[i].tag, x[i].value));
  return mgt_tb_commit(tb, step);
}

/* The values of metrics_line as TensorBoard scalars at step = iteration, under Megatron-LM's
   tags where it has them ("lm loss" is also its key for a fine-tuning loss; BERT's "loss" is
   lm + sop). */
static mgt_status tb_train(mgt_tb *tb, const mgt_step_stats *s, const loss_means *lm, int kind,
                           int moe, const double *spread, int batch, double ms,
                           double tokens_per_sec, double tflops, double tflops_rank,
                           double tokens_seen, int skipped, int nans) {
  const tb_scalar x[] = {
      {"consumed-samples", (double)s->consumed_samples, 1},
      {"consumed-tokens", tokens_seen, 1},
      {kind == KIND_MASKED ? "loss" : "lm loss", lm->loss, 1},
      {"accuracy", lm->sop_acc, kind == KIND_TASK},
      {"lm loss", lm->lm, kind == KIND_MASKED},
      {"sop loss", lm->sop, kind == KIND_MASKED},
      {"sop accuracy", lm->sop_acc, kind == KIND_MASKED},
      {"load_balancing_loss", lm->lb, moe},
      {"z_loss", lm->z, moe},
      {"expert-tokens-min", spread[0], moe},
      {"expert-tokens-max", spread[1], moe},
      {"learning-rate", s->lr, 1},
      {"grad-norm", s->grad_norm, 1},
      {"iteration-time-ms", ms, 1},
      {"tokens-per-second", tokens_per_sec, 1},
      {"tflops", tflops, 1},
      {"throughput", tflops_rank, 1}, /* Megatron-LM's: TFLOP/s per GPU */
      {"skipped-iterations", skipped, 1},
      {"nan-iterations", nans, 1},
      {"loss-scale", s->loss_scale, 1},
      {"batch-size", batch, 1},
  };
  return tb_write(tb, s->iteration, x, (int)(sizeof x / sizeof x[0]));
}

mgt_status mgt_report_interval(mgt_report *r, const mgt_step_stats *s) {
  const mgt_run *c = r->run;
  const int n_it = r->n + r->skipped;
  const double ms = 1e3 * r->seconds / (n_it ? n_it : 1);
  loss_means mean = {NAN, NAN, NAN, NAN, NAN, NAN};
  if (r->n)
    mean = (loss_means){r->acc.loss / r->n,    r->acc.lm / r->n, r->acc.sop / r->n,
                        r->acc.sop_acc / r->n, r->acc.lb / r->n, r->acc.z / r->n};
  /* no step counted (all skipped): no spread either, not the last interval's */
  const double spread[2] = {r->n ? r->spread[0] : NAN, r->n ? r->spread[1] : NAN};
  const double per = n_it ? r->batches / n_it : 1.0; /* of a full global batch per iteration */
  const double tps = per * r->tokens / (ms / 1e3), tflops = per * r->flops / (ms / 1e3) / 1e12;
  /* per rank (per GPU), and the tokens seen: r->tokens is a full batch's samples of a length */
  const double tflops_rank = tflops / r->ranks,
               seen = (double)s->consumed_samples * (r->tokens / c->global_batch);
  r->batches = 0;
  const int skipped = r->skipped, nans = r->nans;
  r->acc = (loss_means){0, 0, 0, 0, 0, 0};
  r->seconds = 0.0;
  r->n = r->skipped = r->nans = 0;
  if (!r->root) return MGT_OK;
  FILE *log = r->log;
  fprintf(log,
          " iteration %8lld/%8lld | consumed samples: %10llu | elapsed time per "
          "iteration (ms): %.1f | learning rate: %.3E | global batch size: %5d | lm "
          "loss: %.6E |",
          (long long)s->iteration, (long long)c->train_iters,
          (unsigned long long)s->consumed_samples, ms, s->lr, s->global_batch, mean.lm);
  if (r->sop) fprintf(log, " sop loss: %.6E | sop accuracy: %.4f |", mean.sop, mean.sop_acc);
  if (r->kind == KIND_TASK) fprintf(log, " accuracy: %.4f |", mean.sop_acc);
  if (r->moe)
    fprintf(log, " load_balancing_loss: %.6E | z_loss: %.6E | expert tokens min/max: %.2f/%.2f |",
            mean.lb, mean.z, spread[0], spread[1]);
  fprintf(log,
          " grad norm: %.3f | tokens/s: %.1f | TFLOP/s: %.4f | TFLOP/s per rank: %.4f | skipped "
          "iterations: %d | nan iterations: %d",
          s->grad_norm, tps, tflops, tflops_rank, skipped, nans);
  if (c->optim.fp16) fprintf(log, " | loss scale: %.1f", s->loss_scale);
  fputc('\n', log);
  fflush(log);
  if (r->tb)
    MGT_CHECK(tb_train(r->tb, s, &mean, r->kind, r->moe, spread, s->global_batch, ms, tps, tflops,
                       tflops_rank, seen, skipped, nans));
  if (r->metrics) {
    metrics_line(r->metrics, s, &mean, r->kind, r->moe ? spread : NULL, ms, tps, tflops,
                 tflops_rank, seen, skipped, nans);
    fflush(r->metrics);
  }
  return MGT_OK;
}

/* The values of a validation metrics line as TensorBoard scalars (Megatron-LM's "lm loss
   validation" and "lm loss validation ppl"; BERT's "loss validation" is lm + sop). */
static mgt_status tb_valid(mgt_tb *tb, int64_t iteration, const mgt_valid_stats *v, double ppl,
                           int bert) {
  const tb_scalar x[] = {
      {bert ? "loss validation" : "lm loss validation", v->loss, 1},
      {"lm loss validation ppl", ppl, 1},
      {"lm loss validation", v->lm_loss, bert},
      {"sop loss validation", v->sop_loss, bert},
      {"sop accuracy validation", v->sop_accuracy, bert},
  };
  return tb_write(tb, iteration, x, (int)(sizeof x / sizeof x[0]));
}

mgt_status mgt_report_valid(mgt_report *r, int64_t iteration, const mgt_valid_stats *v) {
  if (!r->root) return MGT_OK;
  const int bert = r->kind == KIND_MASKED;
  const double vl = v->lm_loss, ppl = isnan(vl) ? vl : exp(vl < 700 ? vl : 700);
  fprintf(r->log,
          "-----------------------------------------------------------------------------\n"
          " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |",
          (long long)iteration, vl, ppl);
  if (r->sop)
    fprintf(r->log, " sop loss value: %.6E | sop accuracy: %.4f |", v->sop_loss, v->sop_accuracy);
  fprintf(r->log,
          "\n-----------------------------------------------------------------------------\n");
  if (r->tb) MGT_CHECK(tb_valid(r->tb, iteration, v, ppl, bert));
  if (r->metrics) {
    FILE *m = r->metrics;
    fprintf(m, "{\"iteration\":%lld", (long long)iteration);
    json_num(m, "valid_loss", v->loss, 9); /* a diverged run's nan is null */
    json_num(m, "valid_ppl", ppl, 9);
    if (bert) {
      json_num(m, "valid_lm_loss", v->lm_loss, 9);
      json_num(m, "valid_sop_loss", v->sop_loss, 9);
      json_num(m, "valid_sop_accuracy", v->sop_accuracy, 9);
    }
    fputs("}\n", m);
  }
  return MGT_OK;
}

/* Adds TensorBoard scalar "<what> validation" (with several validation sets, "<what> validation
   <set>"). */
static mgt_status tb_add_valid(mgt_tb *tb, const char *what, const char *set, double v) {
  char tag[MGT_PATH_MAX + 64];
  snprintf(tag, sizeof tag, "%s validation%s%s", what, set ? " " : "", set ? set : "");
  return mgt_tb_add(tb, tag, v);
}

/* A log line, TensorBoard scalars (flushed first, so that the event file holds whatever the
   metrics file does) and a metrics line. */
mgt_status mgt_report_task_set(mgt_report *r, int64_t iteration, const char *path, int n_sets,
                               const mgt_task_score *sc) {
  if (!r->root) return MGT_OK;
  fprintf(r->log, " validation at iteration %lld | %s %s | accuracy: %.4f (%lld/%lld) | loss: %.6E",
          (long long)iteration, r->task, path, sc->accuracy, (long long)sc->correct,
          (long long)sc->examples, sc->loss);
  if (isfinite(sc->f1)) fprintf(r->log, " | F1: %.4f", sc->f1);
  fputc('\n', r->log);
  if (r->tb) {
    const char *set = n_sets > 1 ? path : NULL;
    MGT_CHECK(tb_add_valid(r->tb, "accuracy", set, sc->accuracy));
    MGT_CHECK(tb_add_valid(r->tb, "loss", set, sc->loss));
    if (isfinite(sc->f1)) MGT_CHECK(tb_add_valid(r->tb, "f1", set, sc->f1));
    MGT_CHECK(mgt_tb_commit(r->tb, iteration));
  }
  if (r->metrics) {
    FILE *m = r->metrics;
    fprintf(m, "{\"iteration\":%lld,\"task\":\"%s\",\"valid_data\":", (long long)iteration,
            r->task);
    mgt_json_write_string(m, path);
    fprintf(m, ",\"examples\":%lld,\"correct\":%lld", (long long)sc->examples,
            (long long)sc->correct);
    json_num(m, "accuracy", sc->accuracy, 9);
    json_num(m, "loss", sc->loss, 9);
    if (isfinite(sc->f1)) json_num(m, "f1", sc->f1, 9);
    fputs("}\n", m);
  }
  fflush(r->log);
  return MGT_OK;
}

mgt_status mgt_report_task_overall(mgt_report *r, int64_t iteration, int64_t right, int64_t all) {
  if (!r->root) return MGT_OK;
  fprintf(r->log, " validation at iteration %lld | %s overall | accuracy: %.4f (%lld/%lld)\n",
          (long long)iteration, r->task, (double)right / (double)all, (long long)right,
          (long long)all);
  if (r->tb) {
    MGT_CHECK(mgt_tb_add(r->tb, "accuracy validation overall", (double)right / (double)all));
    MGT_CHECK(mgt_tb_commit(r->tb, iteration));
  }
  if (r->metrics)
    fprintf(r->metrics,
            "{\"iteration\":%lld,\"task\":\"%s\",\"valid_data\":\"overall\",\"examples\":%lld,"
            "\"correct\":%lld,\"accuracy\":%.9g}\n",
            (long long)iteration, r->task, (long long)all, (long long)right,
            (double)right / (double)all);
  fflush(r->log);
  return MGT_OK;
}
