/* The learning-rate schedule and the global batch of each iteration (Megatron-LM's ramp-up and
   step schedule): see include/mgt/config.h. */
#include "mgt/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

mgt_lr_schedule mgt_lr_schedule_of(const mgt_config *cfg) {
  if (cfg->train_samples == 0 && (cfg->rampup_batch_size[0] || cfg->step_batch_size_schedule[0])) {
    /* Megatron-LM steps its scheduler by the samples: iterations of the full global batch */
    const int64_t g = cfg->global_batch_size;
    const mgt_lr_schedule s = {cfg->lr,
                               cfg->min_lr,
                               cfg->lr_decay_style,
                               cfg->lr_warmup_iters * g,
                               cfg->lr_decay_iters * g,
                               g};
    return s;
  }
  if (cfg->train_samples > 0) {
    const mgt_lr_schedule s = {cfg->lr,
                               cfg->min_lr,
                               cfg->lr_decay_style,
                               cfg->lr_warmup_samples,
                               cfg->lr_decay_samples,
                               cfg->global_batch_size};
    return s;
  }
  const mgt_lr_schedule s = {
      cfg->lr, cfg->min_lr, cfg->lr_decay_style, cfg->lr_warmup_iters, cfg->lr_decay_iters, 1};
  return s;
}

/* The three values of --rampup-batch-size into s; 0 when there is no ramp-up, -1 if malformed. */
static int rampup_values(const mgt_config *c, mgt_batch_schedule *s) {
  if (!c->rampup_batch_size[0]) return 0;
  const char *p = c->rampup_batch_size;
  for (int k = 0; k < 3; k++) {
    char *end;
    errno = 0;
    s->ramp[k] = isspace((unsigned char)*p) ? -1 : strtoll(p, &end, 10);
    if (s->ramp[k] < 0 || errno == ERANGE || end == p || (*end && *end != '\n') ||
        s->ramp[k] > (k < 2 ? (1ll << 30) : (1ll << 60)))
      return -1;
    p = *end ? end + 1 : end;
  }
  return *p ? -1 : 1;
}

/* A number of a schedule, with Megatron-LM's suffixes K, M, B, T; -1 if malformed. */
static int64_t schedule_number(const char *s, size_t len) {
  char buf[64], *end;
  if (len == 0 || len >= sizeof buf) return -1;
  snprintf(buf, sizeof buf, "%.*s", (int)len, s);
  double mult = 1;
  const char last = (char)toupper((unsigned char)buf[len - 1]);
  if (last == 'K' || last == 'M' || last == 'B' || last == 'T') {
    mult = last == 'K' ? 1e3 : last == 'M' ? 1e6 : last == 'B' ? 1e9 : 1e12;
    buf[len - 1] = 0;
  }
  const double x = strtod(buf, &end);
  return end != buf && *end == 0 && x >= 0 && x * mult < 9e18 ? (int64_t)(x * mult) : -1;
}

/* --step-batch-size-schedule as Megatron-LM parses it into s: THRESHOLD:BATCH entries (tokens,
   made samples by --seq-length), sorted; the first at 0, thresholds rising, batches positive. */
static mgt_status step_schedule(const mgt_config *c, mgt_batch_schedule *s) {
  const char *const flag = "--step-batch-size-schedule";
  int64_t *th = s->threshold, *bs = s->batch;
  int k = 0;
  for (const char *p = c->step_batch_size_schedule; *p;) {
    p += strspn(p, " ,\t\n");
    const size_t len = strcspn(p, " ,\t\n");
    if (!len) break;
    const char *colon = memchr(p, ':', len);
    MGT_REQUIRE(k < MGT_MAX_BATCH_STEPS, "%s: more than %d entries", flag, MGT_MAX_BATCH_STEPS);
    th[k] = colon ? schedule_number(p, (size_t)(colon - p)) : -1;
    MGT_REQUIRE(th[k] >= 0, "%s: '%.*s' is not THRESHOLD:BATCH", flag, (int)(len < 40 ? len : 40),
                p);
    char *end; /* a batch is a count of samples, as --global-batch-size: no suffix, no fraction */
    bs[k] = strtoll(colon + 1, &end, 10);
    MGT_REQUIRE(end == p + len && bs[k] >= 1 && bs[k] <= (1 << 30),
                "%s: '%.*s': the batch is not an integer in [1, 2^30]", flag,
                (int)(len < 40 ? len : 40), p);
    th[k] /= c->seq_length > 0 ? c->seq_length : 1;
    for (int j = k; j > 0 && th[j - 1] > th[j]; j--) { /* sorted by threshold */
      const int64_t t = th[j], b = bs[j];
      th[j] = th[j - 1], bs[j] = bs[j - 1], th[j - 1] = t, bs[j - 1] = b;
    }
    k++, p += len;
  }
  MGT_REQUIRE(!k || th[0] == 0, "%s: the first entry must be at 0", flag);
  for (int j = 1; j < k; j++)
    MGT_REQUIRE(th[j] > th[j - 1], "%s: thresholds must rise (in samples of --seq-length)", flag);
  s->steps = k;
  return MGT_OK;
}

mgt_status mgt_batch_schedule_of(const mgt_config *c, mgt_batch_schedule *s) {
  memset(s, 0, sizeof *s);
  s->has_ramp = rampup_values(c, s);
  MGT_REQUIRE(s->has_ramp >= 0,
              "--rampup-batch-size: give START INCREMENT SAMPLES, three integers (START and "
              "INCREMENT up to 2^30, SAMPLES up to 2^60)");
  MGT_CHECK(step_schedule(c, s));
  MGT_REQUIRE(!s->has_ramp || !s->steps,
              "give one of --rampup-batch-size and --step-batch-size-schedule");
  s->global_batch = s->steps ? (int)s->batch[s->steps - 1] : c->global_batch_size;
  return MGT_OK;
}

int mgt_batch_at(const mgt_batch_schedule *s, uint64_t consumed) {
  if (s->steps) {
    int64_t b = s->batch[0];
    for (int k = 0; k < s->steps && (int64_t)consumed >= s->threshold[k]; k++)
      b = s->batch[k];
    return (int)b;
  }
  if (!s->has_ramp || (int64_t)consumed > s->ramp[2]) return s->global_batch;
  /* Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator */
  const int64_t increments = (s->global_batch - s->ramp[0]) / s->ramp[1];
  const double per = increments > 0 ? (double)s->ramp[2] / (double)increments : 1.0;
  const int64_t b = s->ramp[0] + (int64_t)((double)consumed / per) * s->ramp[1];
  return (int)(b < s->global_batch ? b : s->global_batch);
}

/* The iterations from *consumed on whose batch is the same as at *consumed and which start
   below `limit`, taken at once: a count of samples up to 2^60 in a few steps, not one by one. */
static void same_batch(const mgt_batch_schedule *s, int64_t limit, int64_t *consumed, int64_t *it) {
  const int64_t c = *consumed, b = mgt_batch_at(s, (uint64_t)c);
  int64_t end = limit; /* where the batch may change next */
  if (s->steps) {
    for (int k = 0; k < s->steps; k++)
      if (s->threshold[k] > c && s->threshold[k] < end) end = s->threshold[k];
  } else if (s->has_ramp && c <= s->ramp[2] && b < s->global_batch && s->ramp[2] > 0) {
    /* mgt_batch_at's band (double)x / per; its end found by that same expression */
    const int64_t increments = (s->global_batch - s->ramp[0]) / s->ramp[1];
    const double per = increments > 0 ? (double)s->ramp[2] / (double)increments : 1.0;
    const int64_t band = per > 0 ? (int64_t)((double)c / per) : -1;
    int64_t x = (int64_t)ceil((double)(band + 1) * per);
    if (x <= c) x = c + 1;
    while (x > c + 1 && (int64_t)((double)(x - 1) / per) > band)
      x--;
    while ((int64_t)((double)x / per) <= band)
      x++;
    if (x < end) end = x;
  }
  const int64_t n = end > c ? (end - c + b - 1) / b : 1;
  *consumed = c + n * b, *it += n;
}

mgt_status mgt_config_batches(mgt_config *c, int dp, mgt_batch_schedule *s) {
  MGT_CHECK(mgt_batch_schedule_of(c, s));
  const int64_t unit = (int64_t)c->micro_batch_size * dp;
  if (s->steps) {
    MGT_REQUIRE(c->global_batch_size == 0 || c->global_batch_size == s->global_batch,
                "--step-batch-size-schedule ends at a global batch of %d: --global-batch-size "
                "%d differs",
                s->global_batch, c->global_batch_size);
    c->global_batch_size = s->global_batch;
    for (int k = 0; k < s->steps; k++)
      MGT_REQUIRE(s->batch[k] <= s->global_batch,
                  "--step-batch-size-schedule: the batch %lld before the last exceeds it (%d): "
                  "the run's buffers and planned samples are sized by the last",
                  (long long)s->batch[k], s->global_batch);
    for (int k = 0; k < s->steps; k++)
      MGT_REQUIRE(s->batch[k] % unit == 0,
                  "--step-batch-size-schedule: the batch %lld is not a multiple of "
                  "--micro-batch-size %d times the data-parallel size %d",
                  (long long)s->batch[k], c->micro_batch_size, dp);
  }
  if (c->num_microbatches_in_minibatch > 0) { /* Megatron-LM 2020's accumulation count */
    const int64_t g = unit * c->num_microbatches_in_minibatch;
    MGT_REQUIRE(g <= (1 << 30) && (c->global_batch_size == 0 || c->global_batch_size == g),
                "--num-microbatches-in-minibatch %d makes a global batch of %lld "
                "(--micro-batch-size %d x it x the data-parallel size %d): --global-batch-size %d "
                "differs",
                c->num_microbatches_in_minibatch, (long long)g, c->micro_batch_size, dp,
                c->global_batch_size);
    c->global_batch_size = (int)g;
  }
  if (c->global_batch_size == 0) c->global_batch_size = (int)unit;
  s->global_batch = c->global_batch_size;
  const int64_t *ramp = s->ramp;
  if (s->has_ramp) {
    MGT_REQUIRE(ramp[0] > 0 && ramp[1] > 0 && ramp[2] > 0 && ramp[0] <= c->global_batch_size,
                "--rampup-batch-size %lld %lld %lld: a start in [1, --global-batch-size %d], a "
                "positive increment and a positive number of samples",
                (long long)ramp[0], (long long)ramp[1], (long long)ramp[2], c->global_batch_size);
    MGT_REQUIRE((c->global_batch_size - ramp[0]) % ramp[1] == 0,
                "--rampup-batch-size: --global-batch-size %d minus the start %lld is not a "
                "multiple of the increment %lld",
                c->global_batch_size, (long long)ramp[0], (long long)ramp[1]);
    MGT_REQUIRE(ramp[0] % unit == 0 && ramp[1] % unit == 0,
                "--rampup-batch-size: the start %lld and increment %lld must be multiples of "
                "--micro-batch-size %d times the data-parallel size %d",
                (long long)ramp[0], (long long)ramp[1], c->micro_batch_size, dp);
  }
  int64_t it = 0, consumed = 0;
  if (c->train_samples > 0 && s->has_ramp) { /* Megatron-LM's count: the ramp, whole batches */
    while (consumed <= ramp[2] && consumed <= c->train_samples)
      same_batch(s, ramp[2] < c->train_samples ? ramp[2] + 1 : c->train_samples + 1, &consumed,
                 &it);
    if (c->train_samples > consumed) it += (c->train_samples - consumed) / c->global_batch_size;
    c->train_iters = it;
  } else if (c->train_samples > 0 && s->steps) { /* its count under a step schedule */
    while (consumed < c->train_samples)
      same_batch(s, c->train_samples, &consumed, &it);
    c->train_iters = it;
  }
  return MGT_OK;
}

int64_t mgt_valid_samples_planned(int64_t train_iters, int eval_interval, int64_t per) {
  const int64_t n = (eval_interval > 0 ? train_iters / eval_interval : 0) + 1;
  return per > 0 ? n * per : 1;
}

mgt_lr_schedule mgt_lr_schedule_decoupled(const mgt_config *cfg) {
  mgt_lr_schedule s = mgt_lr_schedule_of(cfg);
  if (cfg->decoupled_lr > 0) {
    s.lr = cfg->decoupled_lr;
    s.min_lr = cfg->decoupled_min_lr >= 0 ? cfg->decoupled_min_lr : cfg->min_lr;
  }
  return s;
}

double mgt_lr_at(const mgt_lr_schedule *s, int64_t iter) {
  return mgt_lr_at_step(s, iter * s->per_iteration);
}

double mgt_lr_at_step(const mgt_lr_schedule *s, int64_t step) {
  if (s->warmup > 0 && step <= s->warmup) return s->lr * (double)step / (double)s->warmup;
  if (s->style == MGT_LR_CONSTANT) return s->lr;
  if (step > s->decay) return s->min_lr;
  double span = (double)(s->decay - s->warmup);
  double ratio = span > 0 ? (double)(step - s->warmup) / span : 1.0;
  double coeff =
      s->style == MGT_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(3.14159265358979323846 * ratio) + 1.0);
  return s->min_lr + coeff * (s->lr - s->min_lr);
}
