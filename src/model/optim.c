#include "mgt/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct mgt_optim {
  mgt_optim_options opt;
  mgt_gpt *model;
  const mgt_backend *be;
  const mgt_comm *comm;
  float *m, *v; /* of the n elements this rank updates, packed from the spans of the buffers */
  size_t n;
  const mgt_span *spans; /* the distributed optimizer's (the model's) */
  int n_spans;
  float *wpack;      /* the spans' parameters packed, when there are several */
  mgt_segment *segs; /* the model's segments cut to the spans, at their packed offsets */
  int nseg;
  /* with a decoupled learning rate: the segments this rank updates, split into the rest (0) and
     the word embeddings and output layer (1), as Megatron-LM groups them */
  mgt_segment *group[2];
  int ngroup[2];
  int64_t steps;
  /* fp16 loss scaling (Megatron-LM's dynamic grad scaler) */
  double loss_scale;
  int growth_tracker, hysteresis_left;
};

mgt_optim_options mgt_optim_options_of(const mgt_config *cfg) {
  const mgt_optim_options o = {cfg->adam_beta1,
                               cfg->adam_beta2,
                               cfg->adam_eps,
                               cfg->clip_grad,
                               cfg->use_distributed_optimizer,
                               cfg->fp16,
                               cfg->loss_scale,
                               cfg->initial_loss_scale,
                               cfg->min_loss_scale,
                               cfg->loss_scale_window,
                               cfg->hysteresis,
                               cfg->decoupled_lr > 0};
  return o;
}

/* The flat-buffer offset of packed element i of the distributed optimizer's shard. */
static size_t flat_of(const mgt_optim *o, size_t i) {
  int k = 0;
  while (k + 1 < o->n_spans && o->spans[k + 1].to <= i)
    k++;
  return o->spans[k].at + (i - o->spans[k].to);
}

mgt_status mgt_optim_create(const mgt_optim_options *opt, mgt_gpt *model, const mgt_backend *be,
                            const mgt_comm *comm, mgt_optim **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_optim *o = NULL;
  MGT_CHECK(mgt_calloc(sizeof *o, "optimizer", (void **)&o));
  o->opt = *opt;
  o->model = model;
  o->be = be;
  o->comm = comm;
  o->loss_scale =
      !opt->fp16 ? 1.0 : (opt->loss_scale > 0 ? opt->loss_scale : opt->initial_loss_scale);
  o->hysteresis_left = opt->hysteresis;
  o->n = mgt_gpt_param_count(model);
  if (opt->distributed) {
    (void)mgt_gpt_grad_shard(model, &o->spans, &o->n_spans, &o->n);
    int ns;
    const mgt_segment *all = mgt_gpt_segments(model, &ns);
    MGT_TRY(mgt_calloc(sizeof(mgt_segment) * (size_t)(ns + o->n_spans + 1), "optimizer segments",
                       (void **)&o->segs));
    for (int k = 0; k < o->n_spans; k++) /* spans and segments both sorted: at most ns + spans */
      for (int i = 0; i < ns; i++) {
        const mgt_span *sp = &o->spans[k];
        const size_t a = all[i].offset > sp->at ? all[i].offset : sp->at,
                     b = all[i].offset + all[i].n < sp->at + sp->n ? all[i].offset + all[i].n
                                                                   : sp->at + sp->n;
        if (b <= a) continue;
        o->segs[o->nseg] = all[i];
        o->segs[o->nseg].offset = sp->to + (a - sp->at);
        o->segs[o->nseg++].n = b - a;
      }
    if (o->n_spans != 1)
      MGT_TRY(mgt_be_alloc(be, (o->n ? o->n : 1) * sizeof(float), "optimizer parameters",
                           (void **)&o->wpack));
  }
  if (opt->decoupled) {
    int ns, np;
    const mgt_segment *all = o->segs ? o->segs : mgt_gpt_segments(model, &ns);
    const mgt_param *params = mgt_gpt_params(model, &np);
    if (o->segs) ns = o->nseg;
    for (int g = 0; g < 2; g++)
      MGT_TRY(mgt_calloc(sizeof(mgt_segment) * (size_t)(ns ? ns : 1), "optimizer groups",
                         (void **)&o->group[g]));
    for (int i = 0; i < ns; i++) { /* the parameter whose elements the segment holds */
      const size_t at = o->segs ? flat_of(o, all[i].offset) : all[i].offset;
      int p = 0;
      while (p + 1 < np && params[p + 1].offset <= at)
        p++;
      const int g = !strcmp(params[p].name, "embedding.word_embeddings.weight") ||
                    !strcmp(params[p].name, "output_layer.weight");
      o->group[g][o->ngroup[g]++] = all[i];
    }
  }
  size_t bytes = (o->n ? o->n : 1) * sizeof(float);
  MGT_TRY(mgt_be_alloc(be, bytes, "Adam first moment", (void **)&o->m));
  MGT_TRY(mgt_be_alloc(be, bytes, "Adam second moment", (void **)&o->v));
  *out = o;
  return MGT_OK;
done:
  mgt_optim_destroy(&o);
  return st;
}

void mgt_optim_destroy(mgt_optim **opt) {
  mgt_optim *o = *opt;
  if (!o) return;
  if (o->m) mgt_be_free(o->be, o->m);
  if (o->v) mgt_be_free(o->be, o->v);
  if (o->wpack) mgt_be_free(o->be, o->wpack);
  mgt_free(o->segs);
  mgt_free(o->group[0]);
  mgt_free(o->group[1]);
  mgt_free(o);
  *opt = NULL;
}

/* The norm with expert parallelism: the experts' sum of squares over the expert-parallel ranks
   too (each holds other experts), the rest's over the tensor-parallel ranks only, so that every
   element counts once. */
static mgt_status expert_norm(mgt_optim *o, const mgt_segment *segs, int nseg, double *norm) {
  mgt_segment *part = NULL;
  MGT_CHECK(mgt_calloc(sizeof *part * (size_t)(nseg ? nseg : 1), "norm segments", (void **)&part));
  double ss[2] = {0, 0};
  mgt_status st = MGT_OK;
  for (int e = 0; e < 2 && st == MGT_OK; e++) {
    int n = 0;
    for (int i = 0; i < nseg; i++)
      if (segs[i].expert == e) part[n++] = segs[i];
    if (n) st = mgt_be_sumsq(o->be, mgt_gpt_grad_data(o->model), part, n, &ss[e]);
  }
  mgt_free(part);
  MGT_CHECK(st);
  MGT_CHECK(mgt_comm_allreduce_f64(o->comm, MGT_AXIS_TP, ss, 2, MGT_SUM));
  MGT_CHECK(mgt_comm_allreduce_f64(o->comm, MGT_AXIS_EP, &ss[1], 1, MGT_SUM));
  *norm = sqrt(ss[0] + ss[1]);
  return MGT_OK;
}

mgt_status mgt_optim_grad_norm(mgt_optim *o, double *norm) {
  double ss = 0.0;
  if (o->segs) { /* each shard once: the sum is over the whole grid */
    const mgt_span *spans;
    int ns;
    size_t n;
    const float *g = mgt_gpt_grad_shard(o->model, &spans, &ns, &n);
    if (o->nseg) MGT_CHECK(mgt_be_sumsq(o->be, g, o->segs, o->nseg, &ss));
    MGT_CHECK(mgt_comm_allreduce_f64(o->comm, MGT_AXIS_WORLD, &ss, 1, MGT_SUM));
    *norm = sqrt(ss);
    return MGT_OK;
  }
  int nseg;
  const mgt_segment *segs = mgt_gpt_segments(o->model, &nseg);
  if (mgt_comm_grid(o->comm)->ep > 1) return expert_norm(o, segs, nseg, norm);
  MGT_CHECK(mgt_be_sumsq(o->be, mgt_gpt_grad_data(o->model), segs, nseg, &ss));
  MGT_CHECK(mgt_comm_allreduce_f64(o->comm, MGT_AXIS_TP, &ss, 1, MGT_SUM));
  *norm = sqrt(ss);
  return MGT_OK;
}

double mgt_optim_loss_scale(const mgt_optim *o) { return o->loss_scale; }

void mgt_optim_get_scaler(const mgt_optim *o, double *scale, int64_t *growth, int64_t *hysteresis) {
  *scale = o->opt.fp16 ? o->loss_scale : 0.0;
  *growth = o->growth_tracker;
  *hysteresis = o->hysteresis_left;
}

void mgt_optim_set_scaler(mgt_optim *o, double scale, int64_t growth, int64_t hysteresis) {
  if (!o->opt.fp16 || o->opt.loss_scale > 0 || scale <= 0) return; /* a fixed scale wins */
  o->loss_scale = scale;
  o->growth_tracker = (int)growth;
  o->hysteresis_left = (int)hysteresis;
}

/* After each step: an overflow (non-finite norm) spends one unit of hysteresis and, when
   none is left, halves the scale down to its floor; `window` clean steps in a row double it. */
static void update_loss_scale(mgt_optim *o, int overflow) {
  if (!o->opt.fp16 || o->opt.loss_scale > 0) return;
  if (overflow) {
    o->growth_tracker = 0;
    if (--o->hysteresis_left <= 0) {
      o->loss_scale = fmax(o->loss_scale * 0.5, o->opt.min_loss_scale);
      o->hysteresis_left = 0;
    }
  } else if (++o->growth_tracker == o->opt.loss_scale_window) {
    o->growth_tracker = 0;
    o->hysteresis_left = o->opt.hysteresis;
    o->loss_scale *= 2.0;
  }
}

/* One AdamW update of the elements this rank updates: at lr, or with a decoupled learning rate
   the word embeddings and output layer at lr_decoupled. */
static mgt_status adamw(mgt_optim *o, float *w, float *g, const mgt_segment *segs, int nseg,
                        mgt_adamw_step *s, double lr, double lr_decoupled) {
  if (!o->opt.decoupled)
    return nseg ? mgt_be_adamw(o->be, w, g, o->m, o->v, segs, nseg, s) : MGT_OK;
  for (int k = 0; k < 2; k++) {
    s->lr = (float)(k ? lr_decoupled : lr);
    if (o->ngroup[k])
      MGT_CHECK(mgt_be_adamw(o->be, w, g, o->m, o->v, o->group[k], o->ngroup[k], s));
  }
  return MGT_OK;
}

mgt_status mgt_optim_step(mgt_optim *o, double lr, double lr_decoupled, double *grad_norm,
                          int *skipped) {
  double norm = 0.0;
  MGT_CHECK(mgt_optim_grad_norm(o, &norm));
  const double used = o->loss_scale; /* the scale the gradients carry, before it changes */
  norm /= used;
  *grad_norm = norm;
  *skipped = !isfinite(norm);
  update_loss_scale(o, *skipped); /* after the unscaling, as Megatron-LM's */
  if (*skipped) return MGT_OK;
  double scale = 1.0;
  if (o->opt.clip_grad > 0.0 && norm > o->opt.clip_grad) scale = o->opt.clip_grad / (norm + 1e-6);
  scale /= used;
  o->steps++;
  mgt_adamw_step s = {0};
  s.lr = (float)lr;
  s.beta1 = (float)o->opt.beta1;
  s.beta2 = (float)o->opt.beta2;
  s.eps = (float)o->opt.eps;
  s.bias_correction1 = (float)(1.0 - pow(o->opt.beta1, (double)o->steps));
  s.bias_correction2 = (float)(1.0 - pow(o->opt.beta2, (double)o->steps));
  s.grad_scale = (float)scale;
  if (o->segs) { /* this rank's shard, then every shard to every data-parallel rank */
    const mgt_span *sp;
    int ns;
    size_t n;
    float *g = mgt_gpt_grad_shard(o->model, &sp, &ns, &n), *w = mgt_gpt_param_data(o->model);
    if (!o->wpack) {
      MGT_CHECK(adamw(o, w + sp[0].at, g, o->segs, o->nseg, &s, lr, lr_decoupled));
      return mgt_gpt_gather_params(o->model);
    }
    for (int k = 0; k < ns; k++) /* several spans: the update on a packed copy */
      MGT_CHECK(mgt_be_copy(o->be, o->wpack + sp[k].to, w + sp[k].at, sizeof(float) * sp[k].n));
    MGT_CHECK(adamw(o, o->wpack, g, o->segs, o->nseg, &s, lr, lr_decoupled));
    for (int k = 0; k < ns; k++)
      MGT_CHECK(mgt_be_copy(o->be, w + sp[k].at, o->wpack + sp[k].to, sizeof(float) * sp[k].n));
    return mgt_gpt_gather_params(o->model);
  }
  int nseg;
  const mgt_segment *segs = mgt_gpt_segments(o->model, &nseg);
  /* every parameter updated here: their 16-bit copies written in the same pass, not remade
     before the next forward */
  s.copies = mgt_gpt_weight_copies(o->model);
  MGT_CHECK(adamw(o, mgt_gpt_param_data(o->model), mgt_gpt_grad_data(o->model), segs, nseg, &s, lr,
                  lr_decoupled));
  if (s.copies) mgt_gpt_copies_fresh(o->model);
  return MGT_OK;
}

int64_t mgt_optim_step_count(const mgt_optim *o) { return o->steps; }
void mgt_optim_set_step_count(mgt_optim *o, int64_t steps) { o->steps = steps; }

/* The moments have the parameters' layout: each model entry gives one entry per moment, at the
   same offset in the moment's flat buffer. A distributed optimizer holds the elements of its
   spans of those buffers, packed: each entry is the range of its slab that falls there, parts
   of one copy over the data-parallel (an expert's: expert-data-parallel) ranks. */
static mgt_status list_moments(const mgt_state *model, const float *w, float *const mom[2],
                               const mgt_optim *dist, mgt_state *out) {
  static const char *const names[2] = {"exp_avg", "exp_avg_sq"};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < model->n; i++) {
      mgt_state_tensor t = model->t[i];
      const char *name = model->t[i].name;
      const char *base = strncmp(name, "model/", 6) == 0 ? name + 6 : name;
      if (snprintf(t.name, sizeof t.name, "optimizer/%s/%s", names[k], base) >= (int)sizeof t.name)
        MGT_FAIL(MGT_ERR_INTERNAL, "tensor name too long: %s", model->t[i].name);
      if (mom && t.data) t.data = mom[k] + ((const float *)model->t[i].data - w);
      if (dist && t.data) { /* a tensor's part lies in one span: the rest's or the experts' */
        const size_t at = (size_t)((const float *)model->t[i].data - w),
                     len = mgt_state_local_numel(&model->t[i]);
        size_t a = 0, b = 0, to = 0;
        for (int q = 0; q < dist->n_spans; q++) {
          const mgt_span *sp = &dist->spans[q];
          const size_t lo = at > sp->at ? at : sp->at,
                       hi = at + len < sp->at + sp->n ? at + len : sp->at + sp->n;
          if (hi <= lo) continue;
          if (b > a) MGT_FAIL(MGT_ERR_INTERNAL, "%s: two parts in a shard", t.name);
          a = lo, b = hi, to = sp->to + (lo - sp->at);
        }
        t.ranged = 1;
        t.first = b > a ? (int64_t)(a - at) : 0;
        t.count = b > a ? (int64_t)(b - a) : 0;
        t.data = mom[k] + to;
        if (t.replica > 0) t.replica = MGT_REPLICA_PRIMARY; /* one copy, in parts */
      }
      MGT_CHECK(mgt_state_add(out, &t));
    }
  return MGT_OK;
}

mgt_status mgt_optim_describe(const mgt_state *model, mgt_state *out) {
  return list_moments(model, NULL, NULL, NULL, out);
}

mgt_status mgt_optim_state(mgt_optim *o, mgt_state *out) {
  mgt_state model = {0};
  mgt_status st = mgt_gpt_state(o->model, &model);
  float *const mom[2] = {o->m, o->v};
  if (st == MGT_OK)
    st = list_moments(&model, mgt_gpt_param_data(o->model), mom, o->segs ? o : NULL, out);
  mgt_state_fini(&model);
  return st;
}
