/* Training on --mock-data: a correct model drives the loss under 0.5 within 800 iterations
   and never below the entropy floor of the data (the first position cannot know the stride:
   ln(8)/T). An attention that leaks the next token (a causal mask off by one) breaks the
   floor, so the check can fail. Same seed, same results, bit for bit. */
#include <mpi.h>
#include <string.h>

#include "backend_impl.h" /* a backend of its own: one with a broken attention */
#include "mgt/backend.h"
#include "mgt/train.h"
#include "testutil.h"

static int attention = MGT_ATTN_UNFUSED; /* the broken backend replaces this one */

static mgt_config test_config(int iters) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.attention_backend = attention;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = 128;
  c.micro_batch_size = 16;
  c.train_iters = iters;
  c.lr = 3e-3;
  c.lr_decay_style = MGT_LR_CONSTANT;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.mock_data = 1;
  return c;
}

/* Mean loss of the last 20 of `iters` iterations. */
static double train(const mgt_grid *g, const mgt_backend *be, const mgt_comm *comm, int iters,
                    double *losses, float **params) {
  mgt_config c = test_config(iters);
  T_OK(mgt_config_finalize(&c, 1));
  mgt_trainer *tr = NULL;
  T_OK(mgt_trainer_create(&c, g, be, comm, NULL, &tr));
  double tail = 0;
  for (int i = 0; i < iters; i++) {
    mgt_step_stats s;
    T_OK(mgt_trainer_step(tr, &s));
    if (losses) losses[i] = s.loss;
    if (i >= iters - 20) tail += s.loss / 20;
  }
  if (params) {
    mgt_gpt *m = mgt_trainer_model(tr);
    size_t n = mgt_gpt_param_count(m);
    *params = malloc(n * sizeof(float));
    memcpy(*params, mgt_gpt_param_data(m), n * sizeof(float));
  }
  mgt_trainer_destroy(&tr);
  return tail;
}

/* ---- a broken attention: keys and values shifted one position into the future ---- */
static mgt_backend real;
static float *shift_buf;

static void shift_kv(float *dst, const float *qkv, int B, int T, int Cl) {
  size_t ld = 3 * (size_t)Cl;
  memcpy(dst, qkv, (size_t)B * T * ld * sizeof(float));
  for (int b = 0; b < B; b++)
    for (int t = 0; t + 1 < T; t++)
      memcpy(dst + ((size_t)b * T + t) * ld + Cl, qkv + ((size_t)b * T + t + 1) * ld + Cl,
             2 * (size_t)Cl * sizeof(float));
}

static mgt_status leak_forward(void *ctx, float *out, float *P, const float *qkv, int B, int T,
                               int Hl, int hd, int ho, int H, const int32_t *kl, const int32_t *kf,
                               const mgt_dropout *d, float *scr) {
  shift_kv(shift_buf, qkv, B, T, Hl * hd);
  return real.attention_forward(ctx, out, P, shift_buf, B, T, Hl, hd, ho, H, kl, kf, d, scr);
}

static mgt_status leak_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                const float *P, int B, int T, int Hl, int hd, int ho, int H,
                                const int32_t *kl, const int32_t *kf, const mgt_dropout *d,
                                float *scr) {
  int Cl = Hl * hd;
  size_t ld = 3 * (size_t)Cl;
  shift_kv(shift_buf, qkv, B, T, Cl);
  MGT_CHECK(
      real.attention_backward(ctx, dqkv, dout, shift_buf, P, B, T, Hl, hd, ho, H, kl, kf, d, scr));
  /* the gradient of a shifted key/value belongs to the position it came from */
  for (int b = 0; b < B; b++) {
    for (int t = T - 1; t >= 1; t--) {
      float *dst = dqkv + ((size_t)b * T + t) * ld + Cl;
      const float *src = dqkv + ((size_t)b * T + t - 1) * ld + Cl;
      if (t == T - 1)
        for (int k = 0; k < 2 * Cl; k++)
          dst[k] += src[k];
      else
        memcpy(dst, src, 2 * (size_t)Cl * sizeof(float));
    }
    memset(dqkv + (size_t)b * T * ld + Cl, 0, 2 * (size_t)Cl * sizeof(float));
  }
  return MGT_OK;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  T_OK(mgt_grid_create(MPI_COMM_WORLD, 1, &grid));
  T_OK(mgt_backend_cpu_create(&be));
  mgt_comm *comm = NULL;
  T_OK(mgt_comm_mpi_create(grid, NULL, &comm));
  const double floor = log(8.0) / 32.0;

  double losses[800];
  double tail = train(grid, be, comm, 800, losses, NULL);
  printf(
      "correct attention: loss %.4f at 1, %.4f at 400, %.4f over the last 20 of 800 (floor %.4f)\n",
      losses[0], losses[399], tail, floor);
  T_CHECK(tail < 0.5, "loss %.4f after 800 iterations, expected < 0.5", tail);
  T_CHECK(tail > 0.8 * floor,
          "loss %.4f is below the data's entropy floor %.4f: the model sees the "
          "future",
          tail, floor);

  /* the same checks on a broken attention must fail */
  real = *be;
  mgt_backend broken = *be;
  broken.attention_forward = leak_forward;
  broken.attention_backward = leak_backward;
  shift_buf = malloc(sizeof(float) * 16 * 32 * 3 * 64);
  double btail = train(grid, &broken, comm, 800, NULL, NULL);
  printf("leaking attention: loss %.4f over the last 20 of 800\n", btail);
  T_CHECK(!(btail > 0.8 * floor && btail < 0.5),
          "a leaking attention passed the convergence checks (loss %.4f)", btail);
  free(shift_buf);
  attention = MGT_ATTN_FLASH; /* the tiles learn the same task, within the same bounds */
  double ftail = train(grid, be, comm, 800, NULL, NULL);
  printf("flash attention: loss %.4f over the last 20 of 800\n", ftail);
  T_CHECK(ftail < 0.5 && ftail > 0.8 * floor, "flash attention: loss %.4f after 800 iterations",
          ftail);
  attention = MGT_ATTN_UNFUSED;

  /* determinism */
  double l1[30], l2[30];
  float *p1 = NULL, *p2 = NULL;
  train(grid, be, comm, 30, l1, &p1);
  train(grid, be, comm, 30, l2, &p2);
  mgt_config c = test_config(30);
  T_OK(mgt_config_finalize(&c, 1));
  T_CHECK(memcmp(l1, l2, sizeof l1) == 0, "losses differ between two runs with the same seed");
  mgt_trainer *tr = NULL;
  T_OK(mgt_trainer_create(&c, grid, be, comm, NULL, &tr));
  size_t n = mgt_gpt_param_count(mgt_trainer_model(tr));
  mgt_trainer_destroy(&tr);
  T_CHECK(memcmp(p1, p2, n * sizeof(float)) == 0, "parameters differ between two runs");
  free(p1), free(p2);

  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  MPI_Finalize();
  return t_report("test_train");
}
