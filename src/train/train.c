#include "mgt/train.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgt/checkpoint.h"
#include "mgt/data_mock.h"
#include "mgt/dataset.h"
#include "mgt/log.h"
#include "mgt/report.h"
#include "mgt/tasks.h"

enum { T_ITERATION, T_FWDBWD, T_OPTIMIZER, T_DATA, N_TIMERS };
static const char *timer_names[N_TIMERS] = {"iteration", "forward-backward", "optimizer", "data"};

mgt_status mgt_train_read_checkpoint(const char *path, mgt_config *cfg, mgt_model_spec *spec,
                                     mgt_ckpt_state *state) {
  char *text = NULL, *model = NULL, diff[160];
  MGT_CHECK(mgt_ckpt_read_config_text(path, &text, &model, state));
  mgt_status st = mgt_config_from_text(cfg, text, path);
  mgt_model_spec derived = {0}, stored = {0};
  if (st == MGT_OK) st = mgt_model_describe(cfg, &derived);
  stored = derived; /* formats 1 and 2: the configuration's */
  if (st == MGT_OK && model) st = mgt_model_spec_from_text(model, &stored, path);
  if (st == MGT_OK && mgt_model_spec_diff(&stored, &derived, diff, sizeof diff))
    st = MGT_ERROR(MGT_ERR_INPUT,
                   "checkpoint %s: its model section disagrees with its configuration (%s)", path,
                   diff);
  if (st == MGT_OK && spec) *spec = stored;
  mgt_free(text);
  mgt_free(model);
  return st;
}

mgt_status mgt_train_read_config(const char *path, mgt_config *cfg, mgt_ckpt_state *state) {
  return mgt_train_read_checkpoint(path, cfg, NULL, state);
}

/* A checkpoint being written by a background thread (--async-save): a host copy of this rank's
   slabs of the saved copy, and a communicator of its own, so that the writer's collectives
   never meet the training's. */
typedef struct async_save {
  pthread_t thread;
  int running;
  MPI_Comm comm;
  mgt_state list;
  float *host; /* kept from save to save */
  size_t host_n;
  const char *config; /* the run configuration as the checkpoint stores it */
  const char *model;  /* the model's spec as the checkpoint stores it */
  mgt_ckpt_state state;
  char dir[MGT_PATH_MAX];
  FILE *log;
  int keep_last, rank;
  mgt_status status; /* the thread's outcome (its error record is its own) */
  char error[1024];
  int agreed;
} async_save;

struct mgt_trainer {
  mgt_config cfg;          /* the job's flags: the data's, and what a checkpoint stores */
  mgt_model_spec spec;     /* what the model is (mgt/model.h) */
  mgt_model_layout layout; /* how it runs on the ranks */
  mgt_run run;             /* what the trainer does with it (paths into cfg) */
  char *config;            /* cfg as the last save stored it (mgt_config_to_text) */
  char *model_text;        /* its spec as the last save stored it (mgt_model_spec_to_text) */
  const mgt_grid *grid;
  const mgt_backend *be;
  const mgt_comm *comm;
  mgt_gpt *model;
  mgt_optim *optim;
  mgt_data data, valid;
  const mgt_task_data *task; /* fine-tuning: the sets (borrowed), or NULL */
  int64_t iters_per_epoch;   /* fine-tuning */
  int32_t *tokens;           /* host staging: every micro-batch of the global batch (this rank) */
  int64_t iteration;
  uint64_t consumed;
  /* validation samples consumed: each validation scores the next --eval-iters global batches,
     as Megatron-LM's; -1 (resumed from a checkpoint that did not record it): the first ones
     every time, as the run did before */
  int64_t consumed_valid;
  /* iterations, and their samples, that skipped their update: the learning rate does not
     advance on them (Megatron-LM's scheduler steps only after an update) */
  int64_t lr_skipped_it, lr_skipped_samples;
  int64_t saved_iteration; /* of the last checkpoint written or loaded, -1 if none */
  double started;          /* mgt_now() that --exit-duration-in-mins counts from; 0: the run's */
  int save_lock;           /* this rank holds --save's lock */
  async_save async;
  FILE *log;
  mgt_timer timers[N_TIMERS];
};

/* What a checkpoint of this trainer holds: the model, and the optimizer's moments. */
static mgt_status trainer_state(mgt_trainer *tr, int with_optim, mgt_state *out) {
  MGT_CHECK(mgt_gpt_state(tr->model, out));
  if (with_optim) MGT_CHECK(mgt_optim_state(tr->optim, out));
  return MGT_OK;
}

/* Loads the tensors a fine-tuning model shares with the pretrained checkpoint (the trunk, and
   the pooler and token types when it has them); the task head starts from its initialization. */
static mgt_status load_pretrained(mgt_trainer *tr) {
  const mgt_config *cfg = &tr->cfg;
  const mgt_grid *g = tr->grid;
  char path[MGT_PATH_MAX + 64], diff[1024];
  mgt_config pcfg;
  mgt_ckpt_state ps;
  mgt_state ours = {0}, theirs = {0}, both = {0};
  mgt_status st = mgt_ckpt_resolve(tr->run.pretrained, -1, path, sizeof path);
  if (st == MGT_OK) st = mgt_train_read_config(path, &pcfg, &ps);
  if (st == MGT_OK) {
    mgt_config want = pcfg; /* the pretraining heads may differ; the trunk may not */
    want.bert_no_binary_head = cfg->bert_no_binary_head;
    if (!mgt_model_of(&pcfg).masked_lm) {
      st = MGT_ERROR(MGT_ERR_INPUT, "--pretrained-checkpoint %s is not a pretrained BERT", path);
    } else if (mgt_config_model_diff(cfg, &want, diff, sizeof diff)) {
      st = MGT_ERROR(MGT_ERR_INPUT, "--pretrained-checkpoint %s is of another model: %s", path,
                     diff);
    }
  }
  MGT_CHECK(mgt_mpi_agree(g->world, st));
  st = mgt_gpt_state(tr->model, &ours);
  if (st == MGT_OK) st = mgt_gpt_describe(&pcfg, g->tp, g->tp_rank, g->dp_rank, &theirs);
  int fresh = 0;
  for (int i = 0; st == MGT_OK && i < ours.n; i++) {
    int found = 0;
    for (int j = 0; j < theirs.n && !found; j++)
      found = !strcmp(ours.t[i].name, theirs.t[j].name);
    if (found)
      st = mgt_state_add(&both, &ours.t[i]);
    else
      fresh++;
  }
  if (st == MGT_OK) st = mgt_ckpt_load(path, g->world, &both, &ps);
  mgt_gpt_weights_changed(tr->model);
  if (st == MGT_OK && tr->log) {
    fprintf(tr->log,
            "loaded %d tensors of the pretrained checkpoint %s (iteration %lld); %d start from "
            "their initialization (the %s head)\n",
            both.n, path, (long long)ps.iteration, fresh, mgt_task_names[tr->run.task]);
    fflush(tr->log);
  }
  mgt_state_fini(&ours);
  mgt_state_fini(&theirs);
  mgt_state_fini(&both);
  return mgt_mpi_agree(g->world, st);
}

static mgt_status trainer_create(const mgt_config *cfg, const mgt_grid *grid, const mgt_backend *be,
                                 const mgt_comm *comm, FILE *log, const mgt_task_data *task,
                                 mgt_trainer **out);

mgt_status mgt_trainer_create(const mgt_config *cfg, const mgt_grid *grid, const mgt_backend *be,
                              const mgt_comm *comm, FILE *log, mgt_trainer **out) {
  MGT_REQUIRE(!cfg->task, "a fine-tuning run needs its data: mgt_trainer_create_task");
  return trainer_create(cfg, grid, be, comm, log, NULL, out);
}

mgt_status mgt_trainer_create_task(const mgt_config *cfg, const mgt_grid *grid,
                                   const mgt_backend *be, const mgt_comm *comm, FILE *log,
                                   const mgt_task_data *task, mgt_trainer **out) {
  MGT_REQUIRE(cfg->task && task && task->task == cfg->task, "fine-tuning data of another task");
  return trainer_create(cfg, grid, be, comm, log, task, out);
}

mgt_gpt_training mgt_train_model_options(const mgt_config *cfg) {
  mgt_gpt_training t = {cfg->hidden_dropout, cfg->attention_dropout, cfg->seed, cfg->weight_decay,
                        (size_t)cfg->ddp_bucket_size, cfg->overlap_grad_reduce,
                        cfg->use_distributed_optimizer, cfg->overlap_param_gather,
                        cfg->moe_router_load_balancing_type, cfg->moe_aux_loss_coeff,
                        cfg->moe_z_loss_coeff, cfg->moe_token_dispatcher_type == 1,
                        cfg->eod_mask_loss ? cfg->eod_token : -1,
                        /* --sft: the documents' starts keep them apart, not an end token
                           (a conversation's ends every turn) */
                        cfg->reset_position_ids && !cfg->sft ? cfg->eod_token : -1,
                        cfg->reset_attention_mask && !cfg->sft ? cfg->eod_token : -1, cfg->sft};
  return t;
}

mgt_run mgt_run_of(const mgt_config *cfg) {
  mgt_run r;
  memset(&r, 0, sizeof r);
  r.model = mgt_train_model_options(cfg);
  r.optim = mgt_optim_options_of(cfg);
  r.lr = mgt_lr_schedule_of(cfg);
  r.lr_decoupled = mgt_lr_schedule_decoupled(cfg);
  r.micro_batch = cfg->micro_batch_size, r.global_batch = cfg->global_batch_size;
  r.train_iters = cfg->train_iters;
  r.task = cfg->task, r.mock_data = cfg->mock_data;
  r.eval_interval = cfg->eval_interval, r.eval_iters = cfg->eval_iters;
  r.log_interval = cfg->log_interval;
  r.metrics_file = cfg->metrics_file, r.tensorboard_dir = cfg->tensorboard_dir;
  r.save = cfg->save, r.load = cfg->load, r.pretrained = cfg->pretrained_checkpoint;
  r.save_interval = cfg->save_interval, r.keep_last = cfg->keep_last;
  r.async_save = cfg->async_save, r.save_optim = !cfg->no_save_optim;
  r.load_iteration = cfg->ckpt_iteration;
  r.load_optim = !cfg->no_load_optim, r.load_rng = !cfg->no_load_rng, r.finetune = cfg->finetune;
  r.exit_on_missing_checkpoint = cfg->exit_on_missing_checkpoint;
  r.exit_duration_in_mins = cfg->exit_duration_in_mins, r.exit_interval = cfg->exit_interval;
  r.max_skipped_iterations = cfg->max_skipped_iterations;
  return r;
}

mgt_status mgt_train_model_create(const mgt_config *cfg, const mgt_grid *grid,
                                  const mgt_backend *be, const mgt_comm *comm, mgt_gpt **out) {
  mgt_model_spec spec;
  MGT_CHECK(mgt_model_describe(cfg, &spec));
  const mgt_model_layout layout = mgt_model_layout_of(cfg);
  MGT_CHECK(mgt_gpt_create(&spec, &layout, grid, be, comm, out));
  const mgt_gpt_training t = mgt_train_model_options(cfg);
  mgt_status st = mgt_gpt_train_with(*out, &t);
  if (st != MGT_OK) mgt_gpt_destroy(out);
  return st;
}

/* The training and validation sources: a fine-tuning task's epochs, mock data, or the datasets
   of --data-path. Agreed across ranks. */
static mgt_status open_data(mgt_trainer *tr, const mgt_task_data *task) {
  const mgt_config *cfg = &tr->cfg;
  const mgt_run *run = &tr->run;
  const mgt_grid *grid = tr->grid;
  mgt_status st = MGT_OK;
  if (task) {
    const int64_t per_epoch = task->train_examples / run->global_batch * run->global_batch;
    if (per_epoch <= 0)
      st = MGT_ERROR(MGT_ERR_INPUT, "%lld training examples are fewer than one global batch of %d",
                     (long long)task->train_examples, run->global_batch);
    if (st == MGT_OK)
      st = mgt_task_train_source(task->train, task->n_train, run->task, run->model.seed, per_epoch,
                                 &tr->data);
    tr->iters_per_epoch = per_epoch / run->global_batch;
  } else if (run->mock_data && tr->spec.input == MGT_INPUT_SAMPLES) {
    st = mgt_data_mock_bert_create(cfg, 0, &tr->data);
    if (st == MGT_OK) st = mgt_data_mock_bert_create(cfg, 1ull << 40, &tr->valid);
  } else if (run->mock_data) {
    st = mgt_data_mock_create(cfg, &tr->data);
    if (st == MGT_OK) st = mgt_data_mock_valid_create(cfg, &tr->valid);
  } else { /* agreed again: a rank's own failure after the last collective (--sft packing) */
    st = mgt_dataset_sources(cfg, grid->world, tr->log, &tr->data, &tr->valid);
  }
  return mgt_mpi_agree(grid->world, st);
}

static mgt_status trainer_create(const mgt_config *cfg, const mgt_grid *grid, const mgt_backend *be,
                                 const mgt_comm *comm, FILE *log, const mgt_task_data *task,
                                 mgt_trainer **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_trainer *tr = NULL;
  char path[MGT_PATH_MAX + 64] = "";
  mgt_ckpt_state saved;
  mgt_state list = {0};
  memset(&saved, 0, sizeof saved);
  mgt_model_spec desc;
  MGT_CHECK(mgt_model_describe(cfg, &desc));
  int none_yet = cfg->load[0] && cfg->ckpt_iteration < 0 && mgt_ckpt_none_yet(cfg->load);
  /* every rank must see nothing there; one that sees a checkpoint makes the others' load fail */
  MGT_MPI_WATCHED("the --load agreement", MGT_AXIS_WORLD,
                  MPI_Allreduce(MPI_IN_PLACE, &none_yet, 1, MPI_INT, MPI_MIN, grid->world));
  MGT_CHECK(mgt_calloc(sizeof *tr, "trainer", (void **)&tr));
  tr->cfg = *cfg;
  tr->spec = desc;
  tr->layout = mgt_model_layout_of(cfg);
  tr->run = mgt_run_of(&tr->cfg);
  const mgt_run *run = &tr->run;
  MGT_TRY(mgt_batch_schedule_of(&tr->cfg, &tr->run.batches));
  tr->grid = grid;
  tr->be = be;
  tr->comm = comm;
  tr->log = grid->rank == 0 ? log : NULL;
  tr->task = task;
  tr->saved_iteration = -1;
  for (int i = 0; i < N_TIMERS; i++)
    tr->timers[i].name = timer_names[i];
  const int with_optim = run->load_optim && !run->finetune;
  if (none_yet) { /* Megatron-LM's auto-resume: the first run of --save X --load X */
    MGT_GOTO_REQUIRE(
        !run->exit_on_missing_checkpoint,
        "--exit-on-missing-checkpoint: --load %s holds no checkpoint (no 'latest' file)",
        run->load);
    MGT_GOTO_REQUIRE(!run->finetune,
                     "--finetune --load %s: no checkpoint there to start from (no 'latest' file)",
                     run->load);
    MGT_GOTO_REQUIRE(!task || run->pretrained[0],
                     "--load %s holds no checkpoint yet (no 'latest' file), and there is no "
                     "--pretrained-checkpoint to start the fine-tuning from",
                     run->load);
    if (tr->log)
      fprintf(tr->log, "--load %s: no checkpoint there yet (no 'latest' file): starting from %s\n",
              run->load, task ? "--pretrained-checkpoint" : "scratch");
  } else if (run->load[0]) {
    /* the checkpoint's seed drives dropout and data order, so it is set before they exist */
    mgt_config ccfg;
    char diff[1024];
    st = mgt_ckpt_resolve(run->load, run->load_iteration, path, sizeof path);
    if (st == MGT_OK) st = mgt_train_read_config(path, &ccfg, &saved);
    if (st == MGT_OK && mgt_config_model_diff(cfg, &ccfg, diff, sizeof diff)) {
      st = MGT_ERROR(MGT_ERR_INPUT, "checkpoint %s is of another model: %s", path, diff);
    }
    if (st == MGT_OK && with_optim && !saved.has_optimizer) {
      st = MGT_ERROR(MGT_ERR_INPUT,
                     "checkpoint %s holds no optimizer state (use --no-load-optim or --finetune)",
                     path);
    }
    MGT_TRY(mgt_mpi_agree(grid->world, st));
    if (run->load_rng && !run->finetune) tr->cfg.seed = tr->run.model.seed = saved.seed;
  }
  /* every failure below is agreed across ranks, so callers may report it once */
  st = mgt_gpt_create(&tr->spec, &tr->layout, grid, be, comm, &tr->model);
  if (st == MGT_OK) st = mgt_gpt_train_with(tr->model, &run->model);
  if (st == MGT_OK) st = mgt_optim_create(&run->optim, tr->model, be, comm, &tr->optim);
  if (st == MGT_OK) {
    const size_t B = (size_t)run->micro_batch;
    const size_t n_micro = (size_t)run->global_batch / (B * (size_t)grid->dp);
    const size_t n = n_micro * B * mgt_gpt_example_ints(tr->model); /* the global batch's */
    st = mgt_calloc(sizeof(int32_t) * n, "token batch", (void **)&tr->tokens);
  }
  MGT_TRY(mgt_mpi_agree(grid->world, st));
  if (run->async_save) { /* the writer thread and the training both call MPI */
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    MGT_GOTO_REQUIRE(level == MPI_THREAD_MULTIPLE,
                     "--async-save: the MPI library runs without MPI_THREAD_MULTIPLE, which a "
                     "background writer needs");
    MGT_GOTO_REQUIRE(run->save[0], "--async-save needs --save");
  }
  if (run->save[0]) { /* a bad --save is found now, not at the first save hours later */
    st = trainer_state(tr, run->save_optim, &list);
    uint64_t bytes = st == MGT_OK ? mgt_ckpt_bytes(&list) : 0;
    mgt_state_fini(&list);
    MGT_TRY(mgt_mpi_agree(grid->world, st));
    MGT_TRY(mgt_ckpt_prepare_dir(run->save, grid->world, bytes, &tr->save_lock));
  }
  MGT_TRY(open_data(tr, task));
  if (path[0]) {
    double t0 = mgt_now();
    MGT_TRY(trainer_state(tr, with_optim, &list));
    MGT_TRY(mgt_ckpt_load(path, grid->world, &list, &saved));
    mgt_gpt_weights_changed(tr->model);
    double dt = mgt_now() - t0;
    if (!run->finetune) {
      tr->iteration = saved.iteration;
      tr->consumed = saved.consumed_samples;
      tr->consumed_valid = saved.consumed_valid_samples;
      tr->lr_skipped_it = saved.lr_skipped_iterations;
      tr->lr_skipped_samples = saved.lr_skipped_samples;
      tr->saved_iteration = saved.iteration;
      if (with_optim) {
        mgt_optim_set_step_count(tr->optim, saved.optimizer_steps);
        mgt_optim_set_scaler(tr->optim, saved.loss_scale, saved.loss_scale_growth,
                             saved.loss_scale_hysteresis);
      }
    }
    if (tr->log) {
      struct stat sb;
      double gb = stat(path, &sb) == 0 ? sb.st_size / 1e9 : 0.0;
      fprintf(tr->log,
              "loaded checkpoint %s: iteration %lld, %llu samples consumed%s%s; %.3f GB in "
              "%.2f s\n",
              path, (long long)saved.iteration, (unsigned long long)saved.consumed_samples,
              with_optim ? "" : ", optimizer restarted",
              run->finetune ? " (fine-tuning from iteration 0)" : "", gb, dt);
      fflush(tr->log);
    }
  }
  if (!path[0] && run->pretrained[0]) MGT_TRY(load_pretrained(tr));
  mgt_state_fini(&list);
  *out = tr;
  return MGT_OK;
done:
  mgt_state_fini(&list);
  mgt_trainer_destroy(&tr);
  return st;
}

static void *async_main(void *arg) {
  async_save *a = arg;
  (void)mgt_watch_thread(1);
  mgt_status st = mgt_ckpt_save(a->dir, a->comm, &a->list, a->config, a->model, &a->state, a->log);
  if (st == MGT_OK && a->keep_last > 0 && a->rank == 0)
    st = mgt_ckpt_prune(a->dir, a->keep_last, a->log);
  st = mgt_mpi_agree(a->comm, st);
  a->status = st;
  if (st != MGT_OK) {
    snprintf(a->error, sizeof a->error, "%s", mgt_error_message());
    a->agreed = mgt_error_agreed();
  }
  return NULL;
}

/* Waits for a background save; its error becomes the caller's. Not collective by itself, but
   the save it waits for ends with an agreement over the world. */
static mgt_status async_wait(mgt_trainer *tr) {
  async_save *a = &tr->async;
  if (!a->running) return MGT_OK;
  pthread_join(a->thread, NULL);
  a->running = 0;
  MPI_Comm_free(&a->comm);
  mgt_state_fini(&a->list); /* the host copy stays for the next save: no page faults again */
  if (a->status != MGT_OK) {
    mgt_error_set(a->status, __FILE__, __LINE__, __func__, "%s (the background save)", a->error);
    mgt_error_set_agreed(a->agreed);
    return a->status;
  }
  return MGT_OK;
}

/* Copies this rank's slabs of the saved copy to host memory and starts the writer thread. */
static mgt_status async_start(mgt_trainer *tr, const char *dir, const mgt_state *list,
                              const mgt_ckpt_state *s) {
  async_save *a = &tr->async;
  double t0 = mgt_now();
  size_t total = 0;
  for (int i = 0; i < list->n; i++)
    if (list->t[i].replica == MGT_REPLICA_PRIMARY) total += mgt_state_local_numel(&list->t[i]);
  mgt_status st = MGT_OK;
  if (a->host && a->host_n != total) {
    mgt_free(a->host);
    a->host = NULL;
  }
  if (!a->host) {
    st = mgt_calloc((total ? total : 1) * sizeof(float), "background checkpoint copy",
                    (void **)&a->host);
    a->host_n = st == MGT_OK ? total : 0;
  }
  memset(&a->list, 0, sizeof a->list);
  size_t off = 0;
  for (int i = 0; i < list->n && st == MGT_OK; i++) {
    mgt_state_tensor t = list->t[i];
    const size_t n = mgt_state_local_numel(&t);
    if (t.replica == MGT_REPLICA_PRIMARY) {
      float *dst = a->host + off;
      off += n;
      if (t.mem)
        st = mgt_be_download(t.mem, dst, t.data, n * sizeof(float));
      else
        memcpy(dst, t.data, n * sizeof(float));
      t.data = dst;
    } else {
      t.data = NULL; /* only the saved copy is written */
    }
    t.mem = NULL;
    if (st == MGT_OK) st = mgt_state_add(&a->list, &t);
  }
  st = mgt_mpi_agree(tr->grid->world, st);
  if (st == MGT_OK)
    st = mgt_mpi_status(MPI_Comm_dup(tr->grid->world, &a->comm), __FILE__, __LINE__, __func__,
                        "MPI_Comm_dup");
  if (st != MGT_OK) {
    mgt_state_fini(&a->list);
    return st;
  }
  a->config = tr->config;
  a->model = tr->model_text;
  a->state = *s;
  snprintf(a->dir, sizeof a->dir, "%s", dir);
  a->log = tr->log;
  a->keep_last = tr->run.keep_last;
  a->rank = tr->grid->rank;
  a->status = MGT_OK;
  int rc = pthread_create(&a->thread, NULL, async_main, a);
  /* a thread that cannot start on one rank would leave the others waiting in its collectives */
  st = mgt_mpi_agree(
      tr->grid->world,
      rc == 0 ? MGT_OK
              : MGT_ERROR(MGT_ERR_INTERNAL, "cannot start the save thread: %s", strerror(rc)));
  if (rc == 0) a->running = 1;
  if (st != MGT_OK) return st;
  if (tr->log) {
    fprintf(tr->log,
            "checkpoint of iteration %lld copied to host memory in %.3f s (%.1f MB on rank 0); "
            "writing it in the background\n",
            (long long)s->iteration, mgt_now() - t0, total * 4 / 1e6);
    fflush(tr->log);
  }
  return MGT_OK;
}

static mgt_status trainer_save(mgt_trainer *tr, const char *dir) {
  MGT_CHECK(async_wait(tr)); /* one save at a time: no writer reads tr->config now */
  free(tr->config);          /* the configuration as it is now (a load may have changed it) */
  tr->config = mgt_config_to_text(&tr->cfg);
  free(tr->model_text);
  tr->model_text = mgt_model_spec_to_text(&tr->spec);
  MGT_CHECK(mgt_mpi_agree(tr->grid->world, tr->config && tr->model_text
                                               ? MGT_OK
                                               : MGT_ERROR(MGT_ERR_NOMEM, "out of memory saving")));
  mgt_ckpt_state s;
  memset(&s, 0, sizeof s);
  s.iteration = tr->iteration;
  s.consumed_samples = tr->consumed;
  s.optimizer_steps = mgt_optim_step_count(tr->optim);
  s.seed = tr->run.model.seed;
  mgt_optim_get_scaler(tr->optim, &s.loss_scale, &s.loss_scale_growth, &s.loss_scale_hysteresis);
  s.has_optimizer = tr->run.save_optim;
  s.tensor_model_parallel_size = tr->grid->tp;
  s.data_parallel_size = tr->grid->dp;
  s.consumed_valid_samples = tr->consumed_valid;
  s.lr_skipped_iterations = tr->lr_skipped_it;
  s.lr_skipped_samples = tr->lr_skipped_samples;
  mgt_state list = {0};
  mgt_status st = trainer_state(tr, (int)s.has_optimizer, &list);
  if (st == MGT_OK && tr->run.async_save) {
    st = async_start(tr, dir, &list, &s);
    mgt_state_fini(&list);
    MGT_CHECK(st);
    tr->saved_iteration = tr->iteration;
    return MGT_OK;
  }
  if (st == MGT_OK)
    st = mgt_ckpt_save(dir, tr->grid->world, &list, tr->config, tr->model_text, &s, tr->log);
  mgt_state_fini(&list);
  if (st == MGT_OK && tr->run.keep_last > 0 && tr->grid->rank == 0)
    st = mgt_ckpt_prune(dir, tr->run.keep_last, tr->log);
  MGT_CHECK(mgt_mpi_agree(tr->grid->world, st));
  tr->saved_iteration = tr->iteration;
  return MGT_OK;
}

/* Unwatched: the ranks that do not write wait in the save's agreement for as long as the
   writers take (docs/hpc-guide.md: checkpoint I/O is not watched). */
mgt_status mgt_trainer_save(mgt_trainer *tr, const char *dir) {
  const int was = mgt_watch_thread(1);
  const mgt_status st = trainer_save(tr, dir);
  (void)mgt_watch_thread(was);
  return st;
}

mgt_status mgt_trainer_finish_saves(mgt_trainer *tr) { return async_wait(tr); }

void mgt_trainer_started_at(mgt_trainer *tr, double t) { tr->started = t; }

int64_t mgt_trainer_iteration(const mgt_trainer *tr) { return tr->iteration; }

void mgt_trainer_destroy(mgt_trainer **ptr) {
  mgt_trainer *tr = *ptr;
  if (!tr) return;
  if (async_wait(tr) != MGT_OK) mgt_error_clear(); /* reported by mgt_trainer_run if it ran */
  mgt_free(tr->async.host);
  mgt_ckpt_unlock(tr->run.save, &tr->save_lock);
  mgt_data_destroy(&tr->data);
  mgt_data_destroy(&tr->valid);
  mgt_optim_destroy(&tr->optim);
  mgt_gpt_destroy(&tr->model);
  mgt_free(tr->tokens);
  free(tr->config);
  free(tr->model_text);
  mgt_free(tr);
  *ptr = NULL;
}

/* The means of the head's losses from the global batch's sums and units (mgt_gpt_train_micro,
   mgt_gpt_loss_units); returns the loss the optimizer minimizes (BERT's: MLM + SOP). */
static double head_means(const mgt_model_spec *d, const double *sums, const double units[2],
                         mgt_step_stats *stats) {
  stats->sop_loss = stats->sop_accuracy = NAN;
  switch (d->head) {
  case MGT_HEAD_CAUSAL_LM: /* 0 when --eod-mask-loss left no token with a loss */
    stats->lm_loss = units[0] > 0 ? sums[0] / units[0] : 0.0;
    return stats->lm_loss;
  case MGT_HEAD_MLM_SOP:
  case MGT_HEAD_MLM: {
    const int sop = d->head == MGT_HEAD_MLM_SOP;
    stats->lm_loss = units[0] > 0 ? sums[0] / units[0] : 0.0;
    if (sop) stats->sop_loss = sums[1] / units[1], stats->sop_accuracy = sums[2] / units[1];
    return stats->lm_loss + (sop ? stats->sop_loss : 0.0);
  }
  case MGT_HEAD_CLASSIFY:
  case MGT_HEAD_MULTIPLE_CHOICE:
    stats->lm_loss = sums[0] / units[0];
    stats->accuracy = sums[1] / units[0];
    return stats->lm_loss;
  }
  return NAN;
}

/* The micro-batches of one iteration, whatever the head. Data-parallel rank d takes examples
   consumed + m*B*dp + d*B ... (so the global batch is the same set of examples for any dp), all
   of them first, so that what the losses are means over (tokens, BERT's masked positions and
   samples, examples) is known for the global batch before any gradient is scaled: the losses
   are means over the global batch, the same for any layout and micro-batch split (Megatron-LM
   averages BERT's per micro-batch instead). */
static mgt_status train_batch(mgt_trainer *tr, double *loss, mgt_step_stats *stats) {
  const mgt_run *r = &tr->run;
  const mgt_grid *g = tr->grid;
  const int B = r->micro_batch, T = tr->layout.seq_length;
  const int gb = stats->global_batch; /* a ramp-up's, or the whole */
  const int n_micro = gb / (B * g->dp);
  const size_t E = mgt_gpt_example_ints(tr->model);
  mgt_timer_start(&tr->timers[T_DATA]);
  mgt_status st = MGT_OK;
  for (int mb = 0; mb < n_micro && st == MGT_OK; mb++) {
    uint64_t first = tr->consumed + (uint64_t)mb * B * g->dp + (uint64_t)g->dp_rank * B;
    st = tr->data.get(tr->data.ctx, first, B, T, tr->tokens + (size_t)mb * B * E);
  }
  /* a bad sample is read by some ranks only: agree, so the job stops once, with its file */
  MGT_CHECK(mgt_mpi_agree(g->world, st));
  double units[2] = {0, 0};
  mgt_gpt_loss_units(tr->model, tr->tokens, n_micro * B, units);
  MGT_CHECK(mgt_comm_allreduce_f64(tr->comm, MGT_AXIS_DP, units, 2, MGT_SUM));
  stats->targets = units[0];
  mgt_timer_stop(&tr->timers[T_DATA]);
  const double ls = mgt_optim_loss_scale(tr->optim);
  double sums[3] = {0, 0, 0}, aux[2];
  mgt_gpt_set_micro_batches(tr->model, n_micro * g->dp);
  mgt_gpt_aux_losses(tr->model, aux); /* from 0 */
  mgt_gpt_expert_spread(tr->model, aux);
  for (int mb = 0; mb < n_micro; mb++) {
    uint64_t first = tr->consumed + (uint64_t)mb * B * g->dp + (uint64_t)g->dp_rank * B;
    mgt_timer_start(&tr->timers[T_FWDBWD]);
    MGT_CHECK(mgt_gpt_train_micro(tr->model, tr->tokens + (size_t)mb * B * E, first, units, ls,
                                  mb > 0, mb == n_micro - 1, sums));
    mgt_timer_stop(&tr->timers[T_FWDBWD]);
  }
  MGT_CHECK(
      mgt_comm_allreduce_f64(tr->comm, MGT_AXIS_DP, sums, mgt_gpt_head_sums(tr->model), MGT_SUM));
  *loss = head_means(&tr->spec, sums, units, stats);
  stats->moe_lb_loss = stats->moe_z_loss = stats->moe_tokens_min = stats->moe_tokens_max = NAN;
  if (tr->spec.experts) {
    mgt_gpt_aux_losses(tr->model, aux);
    MGT_CHECK(mgt_comm_allreduce_f64(tr->comm, MGT_AXIS_DP, aux, 2, MGT_SUM));
    stats->moe_lb_loss = aux[0], stats->moe_z_loss = aux[1];
    double spread[2];
    mgt_gpt_expert_spread(tr->model, spread);
    spread[0] = -spread[0]; /* the minimum as a maximum */
    MGT_CHECK(mgt_comm_allreduce_f64(tr->comm, MGT_AXIS_DP, spread, 2, MGT_MAX));
    stats->moe_tokens_min = -spread[0], stats->moe_tokens_max = spread[1];
  }
  return MGT_OK;
}

mgt_status mgt_trainer_step(mgt_trainer *tr, mgt_step_stats *stats) {
  const mgt_run *r = &tr->run;
  mgt_timer_start(&tr->timers[T_ITERATION]);
  int64_t it = tr->iteration + 1;
  /* a sample-based schedule steps by the samples consumed, as Megatron-LM's */
  stats->global_batch = mgt_batch_at(&r->batches, tr->consumed);
  /* the schedule counts the iterations (samples) that updated, and this one */
  const int64_t after = (int64_t)tr->consumed + stats->global_batch - tr->lr_skipped_samples,
                at = it - tr->lr_skipped_it;
  const int samples = r->lr.per_iteration > 1;
  double lr = samples ? mgt_lr_at_step(&r->lr, after) : mgt_lr_at(&r->lr, at),
         lr_dec =
             samples ? mgt_lr_at_step(&r->lr_decoupled, after) : mgt_lr_at(&r->lr_decoupled, at);
  double loss = 0.0;
  stats->accuracy = NAN;
  MGT_CHECK(train_batch(tr, &loss, stats));
  mgt_timer_start(&tr->timers[T_OPTIMIZER]);
  double norm = NAN;
  int skipped = 1;
  /* The loss is the same on every rank (summed over both axes), so all take the same branch.
     A non-finite loss skips the update whatever the gradients look like. */
  /* A global batch with no target (every token masked, --sft) has no gradient: nothing to step
     on, and AdamW's moments would still move the weights. */
  const int no_target = tr->spec.head == MGT_HEAD_CAUSAL_LM && stats->targets == 0;
  if (isfinite(loss) && !no_target)
    MGT_CHECK(mgt_optim_step(tr->optim, lr, lr_dec, &norm, &skipped));
  if (tr->spec.expert_bias) /* after the update, as Megatron-LM's */
    MGT_CHECK(
        mgt_gpt_update_expert_bias(tr->model, skipped ? 0.0 : tr->cfg.moe_router_bias_update_rate));
  /* under dynamic fp16 loss scaling an overflowing norm is expected, and lowers the scale */
  const int dynamic_fp16 = r->optim.fp16 && r->optim.loss_scale == 0;
  MGT_CHECK(mgt_be_sync(tr->be));
  mgt_timer_stop(&tr->timers[T_OPTIMIZER]);
  mgt_timer_stop(&tr->timers[T_ITERATION]);
  tr->iteration = it;
  tr->consumed += (uint64_t)stats->global_batch;
  if (skipped) tr->lr_skipped_it++, tr->lr_skipped_samples += stats->global_batch;
  stats->iteration = it;
  stats->consumed_samples = tr->consumed;
  stats->loss = loss;
  stats->grad_norm = norm;
  stats->lr = lr;
  stats->seconds = tr->timers[T_ITERATION].total;
  stats->skipped = skipped;
  stats->nonfinite = !isfinite(loss) || (skipped && !dynamic_fp16 && !no_target);
  stats->loss_scale = mgt_optim_loss_scale(tr->optim);
  return MGT_OK;
}

int mgt_trainer_has_validation(const mgt_trainer *tr) {
  if (tr->task) return tr->task->n_valid > 0;
  return tr->valid.get != NULL && tr->run.eval_iters > 0;
}

mgt_status mgt_task_score_set(mgt_gpt *model, const mgt_grid *grid, const mgt_comm *comm,
                              const mgt_task_set *set, mgt_task_score *out) {
  const mgt_gpt_dims *d = mgt_gpt_get_dims(model);
  const int B = d->B / d->spec.rows, T = d->T, task = d->spec.task; /* examples, not rows */
  const size_t stride = (size_t)mgt_task_rows(task) * mgt_bert_row_ints(T);
  const int64_t n = mgt_task_set_size(set), chunks = (n + B - 1) / B;
  int32_t *rows = NULL, *pred = NULL;
  mgt_status st = mgt_calloc(sizeof(int32_t) * stride * (size_t)B, "scoring batch", (void **)&rows);
  if (st == MGT_OK) st = mgt_calloc(sizeof(int32_t) * (size_t)B, "predictions", (void **)&pred);
  double sums[5] = {0, 0, 0, 0,
                    0}; /* loss, correct, true positives, false positives, false negatives */
  /* chunk k goes to data-parallel group k mod dp: forward has no data-parallel collective */
  for (int64_t k = grid->dp_rank; st == MGT_OK && k < chunks; k += grid->dp) {
    const int64_t e0 = k * B;
    const int real = (int)(n - e0 < B ? n - e0 : B);
    for (int j = 0; j < B; j++)
      mgt_task_set_encode(set, e0 + (j < real ? j : real - 1), T, rows + (size_t)j * stride);
    mgt_task_result r;
    st = mgt_task_forward(model, rows, real, pred, &r);
    sums[0] += r.loss_sum, sums[1] += (double)r.correct;
    for (int j = 0; st == MGT_OK && j < real; j++) {
      const int y = mgt_task_set_label(set, e0 + j);
      sums[2] += pred[j] == 1 && y == 1, sums[3] += pred[j] == 1 && y != 1;
      sums[4] += pred[j] != 1 && y == 1;
    }
  }
  mgt_free(rows);
  mgt_free(pred);
  MGT_CHECK(mgt_mpi_agree(grid->world, st));
  MGT_CHECK(mgt_comm_allreduce_f64(comm, MGT_AXIS_DP, sums, 5, MGT_SUM));
  out->examples = n;
  out->correct = (int64_t)sums[1];
  out->loss = sums[0] / (double)n;
  out->accuracy = sums[1] / (double)n;
  const double denom = 2 * sums[2] + sums[3] + sums[4];
  out->f1 = task == MGT_TASK_QQP ? (denom > 0 ? 2 * sums[2] / denom : 0.0) : NAN;
  return MGT_OK;
}

/* Scores every validation set of a fine-tuning run (and, with several, all of them together)
   and reports each. */
static mgt_status task_validate(mgt_trainer *tr, int64_t iteration, mgt_report *rep) {
  const mgt_task_data *d = tr->task;
  int64_t all = 0, right = 0;
  for (int i = 0; i < d->n_valid; i++) {
    mgt_task_score sc;
    MGT_CHECK(mgt_task_score_set(tr->model, tr->grid, tr->comm, d->valid[i], &sc));
    all += sc.examples, right += sc.correct;
    MGT_CHECK(mgt_report_task_set(rep, iteration, mgt_task_set_path(d->valid[i]), d->n_valid, &sc));
  }
  if (d->n_valid > 1) MGT_CHECK(mgt_report_task_overall(rep, iteration, right, all));
  return MGT_OK;
}

mgt_status mgt_trainer_evaluate(mgt_trainer *tr, mgt_valid_stats *v) {
  const mgt_run *r = &tr->run;
  const mgt_grid *g = tr->grid;
  MGT_REQUIRE(mgt_trainer_has_validation(tr),
              "no validation data (a valid split in --split and --eval-iters > 0 are needed)");
  const int B = r->micro_batch, T = tr->layout.seq_length;
  const int n_micro = r->global_batch / (B * g->dp);
  /* the validation samples the run planned (mgt_valid_samples_planned), used in turn */
  const int64_t per = (int64_t)r->eval_iters * r->global_batch,
                planned = mgt_valid_samples_planned(r->train_iters, r->eval_interval, per);
  const int64_t base = tr->consumed_valid >= 0 ? tr->consumed_valid % planned : 0;
  double sum[5] = {0, 0, 0, 0, 0}; /* the head's sums, then its units */
  for (int it = 0; it < r->eval_iters; it++)
    for (int mb = 0; mb < n_micro; mb++) {
      uint64_t first = (uint64_t)base + (uint64_t)it * r->global_batch + (uint64_t)mb * B * g->dp +
                       (uint64_t)g->dp_rank * B;
      MGT_CHECK(mgt_mpi_agree(g->world, tr->valid.get(tr->valid.ctx, first, B, T, tr->tokens)));
      MGT_CHECK(mgt_gpt_eval_micro(tr->model, tr->tokens, sum, sum + 3));
    }
  MGT_CHECK(mgt_comm_allreduce_f64(tr->comm, MGT_AXIS_DP, sum, 5, MGT_SUM));
  if (tr->consumed_valid >= 0) tr->consumed_valid += per;
  mgt_step_stats s = {0};
  v->loss = head_means(&tr->spec, sum, sum + 3, &s);
  v->lm_loss = s.lm_loss, v->sop_loss = s.sop_loss, v->sop_accuracy = s.sop_accuracy;
  return MGT_OK;
}

/* Whether iteration `it` validates: every --eval-interval, at the end, and a fine-tuning run at
   each epoch's end too. */
static int validation_due(const mgt_trainer *tr, int64_t it) {
  const mgt_run *r = &tr->run;
  const int epoch_end = tr->task && tr->iters_per_epoch > 0 && it % tr->iters_per_epoch == 0;
  return mgt_trainer_has_validation(tr) &&
         (it % r->eval_interval == 0 || it == r->train_iters || epoch_end);
}

static mgt_status validate(mgt_trainer *tr, int64_t it, mgt_report *rep) {
  if (tr->task) return task_validate(tr, it, rep);
  mgt_valid_stats v;
  MGT_CHECK(mgt_trainer_evaluate(tr, &v));
  return mgt_report_valid(rep, it, &v);
}

/* Why the run stops after iteration `it`, if it does: a signal on any rank or the time budget
   (every rank must agree), or --exit-interval. */
static mgt_status stop_requested(mgt_trainer *tr, const volatile sig_atomic_t *stop, double started,
                                 int64_t it, FILE *log, mgt_run_end *end) {
  const mgt_run *r = &tr->run;
  const int root = tr->grid->rank == 0;
  /* at the last iteration the run is finished, whatever came: nothing is left to requeue for */
  if ((stop || r->exit_duration_in_mins > 0) && it < r->train_iters) {
    int want[2] = {stop && *stop ? (int)*stop : 0,
                   r->exit_duration_in_mins > 0 &&
                       mgt_now() - started >= 60.0 * r->exit_duration_in_mins};
    MGT_MPI_WATCHED("the stop agreement", 2,
                    MPI_Allreduce(MPI_IN_PLACE, want, 2, MPI_INT, MPI_MAX, tr->grid->world));
    if (want[0] || want[1]) {
      *end = want[0] ? MGT_RUN_SIGNALED : MGT_RUN_DURATION;
      if (root)
        fprintf(log, "%s after iteration %lld: saving and exiting for a restart\n",
                want[0] == SIGTERM ? "SIGTERM" : (want[0] ? "SIGUSR1" : "--exit-duration-in-mins"),
                (long long)it);
      return MGT_OK;
    }
  }
  if (r->exit_interval > 0 && it % r->exit_interval == 0 && it < r->train_iters) {
    *end = MGT_RUN_INTERVAL;
    if (root) fprintf(log, "--exit-interval: exiting after iteration %lld\n", (long long)it);
  }
  return MGT_OK;
}

/* SAVE_DIR/mgt.started, after the first step of a run: a launcher that removed it before the
   start tells a start that failed before training (jobs/launch.sh starts it again) from a
   failure in training. Failing to write it stops nothing. */
static void note_started(const char *dir, int64_t iteration, FILE *log) {
  char path[MGT_PATH_MAX + 32], text[64];
  snprintf(path, sizeof path, "%s/mgt.started", dir);
  const int n = snprintf(text, sizeof text, "iteration %lld\n", (long long)iteration);
  if (mgt_write_file("--save", path, text, (size_t)n) != MGT_OK) {
    if (log) fprintf(log, "note: %s\n", mgt_error_message());
    mgt_error_clear();
  }
}

mgt_status mgt_trainer_run(mgt_trainer *tr, FILE *log, const volatile sig_atomic_t *stop,
                           mgt_run_end *end) {
  const mgt_run *r = &tr->run;
  const int root = tr->grid->rank == 0;
  mgt_report *rep = NULL;
  const double flops = mgt_gpt_flops_per_iteration(&tr->cfg),
               tokens = (double)r->global_batch * tr->layout.seq_length;
  MGT_CHECK(mgt_report_open(r, &tr->spec, flops, tokens, tr->grid->size, root, log, &rep));
  mgt_status st = MGT_OK;
  int nan_row = 0; /* non-finite iterations in a row */
  const double started = tr->started > 0 ? tr->started : mgt_now();
  const int64_t resumed = tr->iteration; /* the iteration this run starts from */
  *end = MGT_RUN_FINISHED;
  /* a signal while the run started (loading, building indices): nothing trained, nothing to
     save, the same checkpoint to resume from (the time budget gets one step at least) */
  if (stop && tr->iteration < r->train_iters) {
    int sig = *stop;
    MGT_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, tr->grid->world));
    if (sig) {
      *end = MGT_RUN_SIGNALED;
      if (root)
        fprintf(log, "%s before the first step: exiting for a restart, nothing to save\n",
                sig == SIGTERM ? "SIGTERM" : "SIGUSR1");
    }
  }
  while (tr->iteration < r->train_iters && *end == MGT_RUN_FINISHED) {
    mgt_step_stats s;
    mgt_watch_iteration(tr->iteration + 1);
    const double t0 = mgt_now();
    MGT_TRY(mgt_trainer_step(tr, &s));
    mgt_report_step(rep, &s, mgt_now() - t0);
    if (s.iteration == resumed + 1 && root && r->save[0]) note_started(r->save, s.iteration, log);
    nan_row = s.nonfinite ? nan_row + 1 : 0;
    if (validation_due(tr, s.iteration)) MGT_TRY(validate(tr, s.iteration, rep));
    if (s.iteration % r->log_interval == 0 || s.iteration == r->train_iters)
      MGT_TRY(mgt_report_interval(rep, &s));
    if (r->max_skipped_iterations > 0 && nan_row >= r->max_skipped_iterations) {
      *end = MGT_RUN_NONFINITE; /* every rank saw the same losses and norms */
      if (root)
        fprintf(log,
                "stopping after iteration %lld: %d iterations in a row had a non-finite loss or "
                "gradient norm (--max-skipped-iterations %d)\n",
                (long long)s.iteration, nan_row, r->max_skipped_iterations);
      break;
    }
    if (r->save[0] && r->save_interval > 0 && s.iteration % r->save_interval == 0)
      MGT_TRY(mgt_trainer_save(tr, r->save));
    MGT_TRY(stop_requested(tr, stop, started, s.iteration, log, end));
  }
  /* (a run stopped before its first step has nothing new; --train-iters 0 saves the start) */
  if (r->save[0] && tr->saved_iteration != tr->iteration &&
      !(tr->iteration == resumed && *end == MGT_RUN_SIGNALED))
    MGT_TRY(mgt_trainer_save(tr, r->save));
  MGT_TRY(async_wait(tr)); /* the exit waits for a background save */
  if (*end != MGT_RUN_FINISHED && !r->save[0] && root)
    fprintf(log, "warning: stopped early without --save: nothing was saved\n");
  MGT_TRY(mgt_timers_report(tr->timers, N_TIMERS, tr->grid->world, log));
done:
  if (st != MGT_OK && tr->async.running) { /* wait for the writer, but report the first error */
    char first[1024];
    snprintf(first, sizeof first, "%s", mgt_error_message());
    int agreed = mgt_error_agreed();
    (void)async_wait(tr);
    mgt_error_set(st, __FILE__, __LINE__, __func__, "%s", first);
    mgt_error_set_agreed(agreed);
  }
  return mgt_report_close(&rep, st);
}

mgt_gpt *mgt_trainer_model(mgt_trainer *tr) { return tr->model; }
mgt_optim *mgt_trainer_optim(mgt_trainer *tr) { return tr->optim; }
