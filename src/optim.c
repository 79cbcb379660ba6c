#include "mgt/optim.h"

#include <math.h>

struct mgt_optim {
  mgt_config cfg;
  mgt_gpt *model;
  const mgt_backend *be;
  const mgt_comm *comm;
  float *m, *v;
  int64_t steps;
};

mgt_status mgt_optim_create(const mgt_config *cfg, mgt_gpt *model, const mgt_backend *be,
                            const mgt_comm *comm, mgt_optim **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_optim *o = NULL;
  MGT_CHECK(mgt_calloc(sizeof *o, "optimizer", (void **)&o));
  o->cfg = *cfg;
  o->model = model;
  o->be = be;
  o->comm = comm;
  size_t bytes = mgt_gpt_param_count(model) * sizeof(float);
  MGT_TRY(be->alloc(be->ctx, bytes, "Adam first moment", (void **)&o->m));
  MGT_TRY(be->alloc(be->ctx, bytes, "Adam second moment", (void **)&o->v));
  *out = o;
  return MGT_OK;
done:
  mgt_optim_destroy(&o);
  return st;
}

void mgt_optim_destroy(mgt_optim **opt) {
  mgt_optim *o = *opt;
  if (!o) return;
  if (o->m) o->be->free(o->be->ctx, o->m);
  if (o->v) o->be->free(o->be->ctx, o->v);
  mgt_free(o);
  *opt = NULL;
}

mgt_status mgt_optim_grad_norm(mgt_optim *o, double *norm) {
  int nseg;
  const mgt_segment *segs = mgt_gpt_segments(o->model, &nseg);
  double ss = 0.0;
  MGT_CHECK(o->be->sumsq(o->be->ctx, mgt_gpt_grad_data(o->model), segs, nseg, &ss));
  MGT_CHECK(o->comm->allreduce_f64(o->comm->ctx, o->comm->grid, MGT_AXIS_TP, &ss, 1, MGT_SUM));
  *norm = sqrt(ss);
  return MGT_OK;
}

mgt_status mgt_optim_step(mgt_optim *o, double lr, double *grad_norm, int *skipped) {
  double norm = 0.0;
  MGT_CHECK(mgt_optim_grad_norm(o, &norm));
  *grad_norm = norm;
  *skipped = !isfinite(norm);
  if (*skipped) return MGT_OK;
  double scale = 1.0;
  if (o->cfg.clip_grad > 0.0 && norm > o->cfg.clip_grad) scale = o->cfg.clip_grad / (norm + 1e-6);
  o->steps++;
  mgt_adamw_step s;
  s.lr = (float)lr;
  s.beta1 = (float)o->cfg.adam_beta1;
  s.beta2 = (float)o->cfg.adam_beta2;
  s.eps = (float)o->cfg.adam_eps;
  s.bias_correction1 = (float)(1.0 - pow(o->cfg.adam_beta1, (double)o->steps));
  s.bias_correction2 = (float)(1.0 - pow(o->cfg.adam_beta2, (double)o->steps));
  s.grad_scale = (float)scale;
  int nseg;
  const mgt_segment *segs = mgt_gpt_segments(o->model, &nseg);
  MGT_CHECK(o->be->adamw(o->be->ctx, mgt_gpt_param_data(o->model), mgt_gpt_grad_data(o->model),
                         o->m, o->v, segs, nseg, &s));
  return MGT_OK;
}

int64_t mgt_optim_step_count(const mgt_optim *o) { return o->steps; }
void mgt_optim_set_step_count(mgt_optim *o, int64_t steps) { o->steps = steps; }
float *mgt_optim_exp_avg(mgt_optim *o) { return o->m; }
float *mgt_optim_exp_avg_sq(mgt_optim *o) { return o->v; }
