#include "mgt/eval.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/backend.h"
#include "mgt/checkpoint.h"
#include "mgt/flags.h"
#include "mgt/gpt.h"
#include "mgt/grid.h"

#define OFF(f) offsetof(mgt_eval_opts, f)
#define SZ(f) sizeof(((mgt_eval_opts *)0)->f)
static const mgt_flag flags[] = {
    {"--load", MGT_FLAG_STR, OFF(load), 0, 0, "checkpoint directory (its latest) or file", NULL,
     SZ(load)},
    {"--ckpt-iteration", MGT_FLAG_INT64, OFF(ckpt_iteration), -1, 9e15,
     "load this iteration instead of the latest", NULL, 0},
    {"--input-ids", MGT_FLAG_STR, OFF(input_ids), 0, 0, "file of whitespace-separated token ids",
     NULL, SZ(input_ids)},
    {"--tensor-model-parallel-size", MGT_FLAG_INT, OFF(tensor_model_parallel_size), 1, 1 << 16,
     "ranks that split each layer", NULL, 0},
    {"--seq-length", MGT_FLAG_INT, OFF(seq_length), 1, 1 << 20,
     "window length (default: the checkpoint's sequence length)", NULL, 0},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

void mgt_eval_defaults(mgt_eval_opts *o) {
  memset(o, 0, sizeof *o);
  o->ckpt_iteration = -1;
  o->tensor_model_parallel_size = 1;
}

mgt_status mgt_eval_parse(mgt_eval_opts *o, int argc, char **argv, int first, int *help) {
  MGT_CHECK(mgt_flags_parse(flags, N_FLAGS, o, argc, argv, first, "eval", help));
  if (*help) return MGT_OK;
  MGT_REQUIRE(o->load[0], "--load: give the checkpoint to evaluate");
  MGT_REQUIRE(o->input_ids[0], "--input-ids: give the token ids to score");
  return MGT_OK;
}

void mgt_eval_usage(FILE *f) {
  mgt_eval_opts d;
  mgt_eval_defaults(&d);
  mgt_flags_usage(flags, N_FLAGS, &d, "eval", f);
}

mgt_status mgt_read_ids(const char *path, int vocab, int32_t **out, size_t *n) {
  FILE *f = fopen(path, "r");
  MGT_REQUIRE(f, "--input-ids %s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, k = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  long long v;
  int rc;
  while (ids && (rc = fscanf(f, "%lld", &v)) == 1) {
    if (v < 0 || v >= vocab) {
      fclose(f);
      free(ids);
      MGT_FAIL(MGT_ERR_INPUT,
               "--input-ids %s: id %lld (number %zu) is outside the vocabulary [0, %d)", path, v,
               k + 1, vocab);
    }
    if (k == cap) {
      int32_t *p = realloc(ids, 2 * cap * sizeof *ids);
      if (!p) break;
      ids = p, cap *= 2;
    }
    ids[k++] = (int32_t)v;
  }
  int bad = !feof(f);
  fclose(f);
  if (!ids) MGT_FAIL(MGT_ERR_NOMEM, "out of memory reading %s", path);
  if (bad) {
    free(ids);
    MGT_FAIL(MGT_ERR_INPUT, "--input-ids %s: after %zu ids, something that is not an integer", path,
             k);
  }
  *out = ids;
  *n = k;
  return MGT_OK;
}

mgt_status mgt_eval_run(const mgt_eval_opts *o, MPI_Comm world, FILE *out) {
  int rank, size;
  MGT_MPI(MPI_Comm_rank(world, &rank));
  MGT_MPI(MPI_Comm_size(world, &size));
  char path[MGT_PATH_MAX + 64];
  mgt_config cfg;
  mgt_ckpt_state state;
  mgt_status st = mgt_ckpt_resolve(o->load, o->ckpt_iteration, path, sizeof path);
  if (st == MGT_OK) st = mgt_ckpt_read_config(path, &cfg, &state);
  MGT_CHECK(mgt_mpi_agree(world, st));
  /* the model from the checkpoint, the layout from this job */
  cfg.tensor_model_parallel_size = o->tensor_model_parallel_size;
  if (o->seq_length) cfg.seq_length = o->seq_length;
  MGT_REQUIRE(cfg.seq_length <= cfg.max_position_embeddings,
              "--seq-length %d exceeds the checkpoint's %d positions", cfg.seq_length,
              cfg.max_position_embeddings);
  cfg.micro_batch_size = 1;
  cfg.global_batch_size = 0;
  cfg.recompute_activations = 0;
  cfg.mock_data = 1; /* no dataset is read: the ids come from --input-ids */
  cfg.data_path[0] = 0;
  cfg.load[0] = cfg.save[0] = 0;
  MGT_CHECK(mgt_config_finalize(&cfg, size));
  int32_t *ids = NULL;
  size_t n = 0;
  mgt_grid *grid = NULL;
  mgt_backend *be = NULL;
  mgt_gpt *m = NULL;
  float *losses = NULL;
  int32_t *win = NULL;
  st = mgt_read_ids(o->input_ids, cfg.vocab_size, &ids, &n);
  if (st == MGT_OK && n < 2) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "--input-ids %s: at least two ids are needed to score one", o->input_ids);
    st = MGT_ERR_INPUT;
  }
  MGT_TRY(mgt_mpi_agree(world, st));
  MGT_TRY(mgt_grid_create(world, cfg.tensor_model_parallel_size, &grid));
  MGT_TRY(mgt_backend_cpu_create(&be));
  mgt_comm comm;
  mgt_comm_mpi_init(&comm, grid, NULL);
  MGT_TRY(mgt_gpt_create(&cfg, grid, be, &comm, &m));
  MGT_TRY(mgt_ckpt_load(path, grid, m, NULL, &state));
  const int T = cfg.seq_length;
  MGT_TRY(mgt_calloc(sizeof(float) * (size_t)T, "losses", (void **)&losses));
  MGT_TRY(mgt_calloc(sizeof(int32_t) * (size_t)(T + 1), "window", (void **)&win));
  /* window w predicts tokens w*T+1 .. w*T+len: each token after the first exactly once */
  size_t preds = n - 1, windows = (preds + T - 1) / T;
  double sum[2] = {0, 0};
  for (size_t w = (size_t)grid->dp_rank; w < windows; w += (size_t)grid->dp) {
    size_t start = w * T, len = preds - start < (size_t)T ? preds - start : (size_t)T;
    memset(win, 0, sizeof(int32_t) * (size_t)(T + 1));
    memcpy(win, ids + start, sizeof(int32_t) * (len + 1));
    MGT_TRY(mgt_gpt_forward_losses(m, win, losses));
    for (size_t t = 0; t < len; t++)
      sum[0] += losses[t];
    sum[1] += (double)len;
  }
  MGT_MPI(MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, grid->dp_comm));
  if (rank == 0) {
    double avg = sum[0] / sum[1];
    fprintf(out,
            "{\"checkpoint\": \"%s\", \"iteration\": %lld, \"tokens\": %.0f, \"windows\": %zu, "
            "\"seq_length\": %d, \"avg_loss\": %.9g, \"ppl\": %.9g}\n",
            path, (long long)state.iteration, sum[1], windows, T, avg, exp(avg));
    fflush(out);
  }
done:
  mgt_free(win);
  mgt_free(losses);
  mgt_gpt_destroy(&m);
  mgt_backend_destroy(&be);
  mgt_grid_destroy(&grid);
  free(ids);
  return st;
}
