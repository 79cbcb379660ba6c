/* The whole model's gradient against finite differences of its loss, on a tiny
   configuration with dropout on (the masks are a function of the sample, so the loss is a
   deterministic function of the parameters). Also: recomputation gives the same gradients. */
#include <mpi.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"
#include "testutil.h"

static mgt_config tiny(void) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.seq_length = 5;
  c.max_position_embeddings = 7;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  c.micro_batch_size = 2;
  c.hidden_dropout = 0.2;
  c.attention_dropout = 0.2;
  c.init_method_std = 0.3; /* large enough that every path carries gradient */
  c.mock_data = 1;
  return c;
}

static const int32_t tokens[2 * 6] = {1, 4, 7, 10, 2, 5, 3, 3, 9, 0, 6, 6};
enum { SAMPLE_BASE = 17 };

static double loss_of(mgt_gpt *m) {
  double ls = 0;
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &ls));
  return ls;
}

static void test_gradient(mgt_gpt *m) {
  int np;
  const mgt_param *params = mgt_gpt_params(m, &np);
  float *w = mgt_gpt_param_data(m), *g = mgt_gpt_grad_data(m);
  size_t n = mgt_gpt_param_count(m);
  loss_of(m);
  float *grad = malloc(n * sizeof(float));
  memcpy(grad, g, n * sizeof(float));
  const double h = 1e-2;
  for (int i = 0; i < np; i++) {
    const mgt_param *p = &params[i];
    /* direction: random unit vector inside this tensor */
    double *dir = calloc(p->numel, sizeof(double)), nrm = 0, gd = 0;
    for (size_t k = 0; k < p->numel; k++) {
      dir[k] = t_randn();
      nrm += dir[k] * dir[k];
    }
    nrm = sqrt(nrm);
    float *save = malloc(p->numel * sizeof(float));
    memcpy(save, w + p->offset, p->numel * sizeof(float));
    for (size_t k = 0; k < p->numel; k++) {
      dir[k] /= nrm;
      gd += dir[k] * grad[p->offset + k];
    }
    for (size_t k = 0; k < p->numel; k++)
      w[p->offset + k] = (float)(save[k] + h * dir[k]);
    double lp = loss_of(m);
    for (size_t k = 0; k < p->numel; k++)
      w[p->offset + k] = (float)(save[k] - h * dir[k]);
    double lm = loss_of(m);
    memcpy(w + p->offset, save, p->numel * sizeof(float));
    double fd = (lp - lm) / (2 * h);
    T_CHECK(fabs(fd - gd) <= 2e-3 + 1e-2 * fabs(gd),
            "%s: directional derivative %.6g, finite difference %.6g", p->name, gd, fd);
    /* and the element with the largest gradient */
    size_t best = 0;
    for (size_t k = 0; k < p->numel; k++)
      if (fabsf(grad[p->offset + k]) > fabsf(grad[p->offset + best])) best = k;
    float x0 = w[p->offset + best];
    w[p->offset + best] = (float)(x0 + h);
    lp = loss_of(m);
    w[p->offset + best] = (float)(x0 - h);
    lm = loss_of(m);
    w[p->offset + best] = x0;
    fd = (lp - lm) / (2 * h);
    double an = grad[p->offset + best];
    T_CHECK(fabs(fd - an) <= 2e-3 + 2e-2 * fabs(an),
            "%s[%zu]: gradient %.6g, finite difference %.6g", p->name, best, an, fd);
    free(dir), free(save);
  }
  free(grad);
}

/* Padding rows of the vocabulary get no gradient, and accumulation adds micro-batches. */
static void test_accumulate(mgt_gpt *m) {
  size_t n = mgt_gpt_param_count(m);
  float *g = mgt_gpt_grad_data(m), *one = malloc(n * sizeof(float));
  double ls;
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 0, 0, &ls));
  memcpy(one, g, n * sizeof(float));
  T_OK(mgt_gpt_forward_backward(m, tokens, SAMPLE_BASE, 1.0f, 1, 0, &ls));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += fabsf(g[i] - 2 * one[i]) > 1e-6f * (1 + fabsf(one[i]));
  T_CHECK(bad == 0, "accumulated gradient differs from twice one micro-batch in %zu places", bad);
  const mgt_gpt_dims *d = mgt_gpt_get_dims(m);
  int np;
  const mgt_param *p = mgt_gpt_params(m, &np);
  size_t nz = 0;
  for (int r = d->nv; r < d->Vl; r++)
    for (int c = 0; c < d->C; c++)
      nz += g[p[0].offset + (size_t)r * d->C + c] != 0.0f;
  T_CHECK(d->Vl > d->nv && nz == 0, "padding rows of the vocabulary got %zu nonzero gradients", nz);
  free(one);
}

static void test_recompute(mgt_grid *grid, mgt_backend *be, mgt_comm *comm) {
  mgt_config c = tiny();
  c.num_layers = 3;
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *a = NULL, *b = NULL;
  T_OK(mgt_gpt_create(&c, grid, be, comm, &a));
  c.recompute_activations = 1;
  T_OK(mgt_gpt_create(&c, grid, be, comm, &b));
  double la, lb;
  T_OK(mgt_gpt_forward_backward(a, tokens, SAMPLE_BASE, 0.1f, 0, 0, &la));
  T_OK(mgt_gpt_forward_backward(b, tokens, SAMPLE_BASE, 0.1f, 0, 0, &lb));
  size_t n = mgt_gpt_param_count(a);
  T_CHECK(la == lb, "loss with recomputation %.17g, without %.17g", lb, la);
  T_CHECK(memcmp(mgt_gpt_grad_data(a), mgt_gpt_grad_data(b), n * sizeof(float)) == 0,
          "gradients differ with --recompute-activations");
  mgt_gpt_memory mem;
  mgt_gpt_memory_plan(&c, 1, &mem);
  T_CHECK(mem.activations_recompute < mem.activations_full, "recomputation saves no memory");
  mgt_gpt_destroy(&a);
  mgt_gpt_destroy(&b);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, 1, &grid));
  T_OK(mgt_backend_cpu_create(&be));
  mgt_comm comm;
  mgt_comm_mpi_init(&comm, grid, NULL);
  mgt_config c = tiny();
  T_OK(mgt_config_finalize(&c, 1));
  mgt_gpt *m = NULL;
  T_OK(mgt_gpt_create(&c, grid, be, &comm, &m));
  test_gradient(m);
  test_accumulate(m);
  mgt_gpt_destroy(&m);
  test_recompute(grid, be, &comm);
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return t_report("test_model");
}
