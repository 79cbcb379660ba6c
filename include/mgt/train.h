/* The training loop: micro-batches with gradient accumulation, data-parallel averaging,
   clipping and AdamW, the learning-rate schedule, logs and metrics. */
#pragma once

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "mgt/backend.h"
#include "mgt/checkpoint.h"
#include "mgt/config.h"
#include "mgt/data.h"
#include "mgt/gpt.h"
#include "mgt/comm.h"
#include "mgt/grid.h"
#include "mgt/optim.h"
#include "mgt/tasks.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_trainer mgt_trainer;

/* The configuration a checkpoint file was saved with (parsed, checked and derived as flags
   are: mgt_config_from_text) and its training state (may be NULL). Not collective. */
MGT_NODISCARD mgt_status mgt_train_read_config(const char *path, mgt_config *cfg,
                                               mgt_ckpt_state *state);
/* The same, and the model's spec: the stored one (format 3, which must agree with the
   configuration's) or the configuration's (formats 1 and 2). */
MGT_NODISCARD mgt_status mgt_train_read_checkpoint(const char *path, mgt_config *cfg,
                                                   mgt_model_spec *spec, mgt_ckpt_state *state);

/* What one iteration did. Identical on every rank. */
typedef struct mgt_step_stats {
  int64_t iteration;
  uint64_t consumed_samples; /* after the iteration */
  int global_batch;          /* its samples (less than --global-batch-size in a ramp-up) */
  double loss;               /* GPT: mean token loss over the global batch; BERT: lm + sop */
  double lm_loss;            /* BERT: mean over the masked positions of the global batch */
  double sop_loss;           /* BERT: mean over the samples (NaN without the binary head) */
  double sop_accuracy;       /* BERT: share of samples whose order was predicted right */
  double accuracy;           /* fine-tuning: share of the global batch classified right */
  double grad_norm;          /* before clipping */
  double lr;
  double seconds;
  double targets;    /* GPT: the tokens of the global batch with a loss (0: the update skipped) */
  int skipped;       /* the update was skipped: non-finite loss or gradients, or no target (its loss
                        is then left out of the log's means, as a skipped step's) */
  int nonfinite;     /* skipped for a non-finite loss or norm that is no fp16 overflow */
  double loss_scale; /* after the step (1 unless --fp16) */
  /* Mixture-of-Experts: the load-balancing and z-losses of the global batch, means over the
     MoE layers (NaN without experts) */
  double moe_lb_loss, moe_z_loss;
  /* the fewest and most tokens an expert of any MoE layer got in a micro-batch, over the mean */
  double moe_tokens_min, moe_tokens_max;
} mgt_step_stats;

/* The run: what mgt train does with a model, as the job's flags say, apart from what the model
   is (its spec) and how it runs on the ranks (its layout). The paths point into the
   configuration it was made from. */
typedef struct mgt_run {
  mgt_gpt_training model;  /* what the model carries of it: dropout, seed, weight decay, DDP */
  mgt_optim_options optim; /* AdamW, clipping, fp16 loss scaling */
  mgt_lr_schedule lr, lr_decoupled; /* the second: the word embeddings and output layer */
  /* batches */
  int micro_batch, global_batch; /* examples; the global batch over all data-parallel ranks */
  mgt_batch_schedule batches;    /* each iteration's global batch (a ramp-up's or schedule's) */
  int64_t train_iters;
  /* data: a fine-tuning task's sets, mock data, or --data-path (mgt_dataset_sources) */
  int task; /* MGT_TASK_*; 0 for pretraining */
  int mock_data;
  /* validation and logging */
  int eval_interval, eval_iters, log_interval;
  const char *metrics_file, *tensorboard_dir; /* "" for none */
  /* checkpoints */
  const char *save, *load, *pretrained; /* "" for none */
  int save_interval, keep_last, async_save, save_optim;
  int64_t load_iteration; /* -1: the latest */
  int load_optim, load_rng, finetune, exit_on_missing_checkpoint;
  /* stopping early */
  int exit_duration_in_mins, exit_interval, max_skipped_iterations;
} mgt_run;
/* The run cfg (finalized) asks for; its paths point into *cfg. */
mgt_run mgt_run_of(const mgt_config *cfg);
/* What the run of cfg gives its model: dropout, the seed, weight decay, data-parallel options. */
mgt_gpt_training mgt_train_model_options(const mgt_config *cfg);
/* The model of cfg (finalized) as mgt train makes it: cfg's spec in cfg's layout, trained with
   cfg's options and initialized from cfg->seed. Not collective. */
MGT_NODISCARD mgt_status mgt_train_model_create(const mgt_config *cfg, const mgt_grid *grid,
                                                const mgt_backend *be, const mgt_comm *comm,
                                                mgt_gpt **out);

/* Builds the model, optimizer and data sources of `cfg` (already finalized) over `grid`,
   computing on `be` and communicating through `comm`, and resumes from cfg->load if set
   (the checkpoint's seed unless --no-load-rng; weights only with --finetune). Rank 0 notes
   what it builds and loads on `log`, which may be NULL. Failures are agreed: every rank
   returns the same status and message. Collective over the world. */
MGT_NODISCARD mgt_status mgt_trainer_create(const mgt_config *cfg, const mgt_grid *grid,
                                            const mgt_backend *be, const mgt_comm *comm, FILE *log,
                                            mgt_trainer **out);
/* The same for a fine-tuning run (cfg->task): trains on task->train over cfg->train_iters
   iterations of shuffled epochs and validates on each of task->valid; starts from
   cfg->pretrained_checkpoint (its trunk, and pooler and token types where it has them) unless
   cfg->load resumes a fine-tuning run. `task` is borrowed and must outlive the trainer. */
MGT_NODISCARD mgt_status mgt_trainer_create_task(const mgt_config *cfg, const mgt_grid *grid,
                                                 const mgt_backend *be, const mgt_comm *comm,
                                                 FILE *log, const mgt_task_data *task,
                                                 mgt_trainer **out);
void mgt_trainer_destroy(mgt_trainer **tr);

/* Runs one iteration. Collective over the world. */
MGT_NODISCARD mgt_status mgt_trainer_step(mgt_trainer *tr, mgt_step_stats *stats);

/* Validation over cfg->eval_iters global batches, dropout off: the next ones of the validation
   data each time (as Megatron-LM; from the first again once the planned ones are used), or the
   first ones every time in a run resumed from a checkpoint that did not record them. */
typedef struct mgt_valid_stats {
  double loss;         /* GPT: mean token loss; BERT: lm_loss + sop_loss */
  double lm_loss;      /* BERT: mean over all masked positions */
  double sop_loss;     /* BERT: mean over all samples (NaN without the binary head) */
  double sop_accuracy; /* BERT */
} mgt_valid_stats;
/* Fails with MGT_ERR_INPUT if the run has no validation data. Collective over the world. */
MGT_NODISCARD mgt_status mgt_trainer_evaluate(mgt_trainer *tr, mgt_valid_stats *v);

/* A fine-tuning task scored on one set: every example once, dropout off. */
typedef struct mgt_task_score {
  int64_t examples, correct;
  double loss;     /* mean cross-entropy */
  double accuracy; /* correct / examples */
  double f1;       /* QQP: of class 1 (duplicate); NaN for the other tasks */
} mgt_task_score;
/* Scores `set` with `model` (a task head): micro-batches of the model's micro-batch size
   dealt round-robin to the data-parallel groups, the last one filled up and its filler not
   counted. The same result for any layout. Collective over the world. */
MGT_NODISCARD mgt_status mgt_task_score_set(mgt_gpt *model, const mgt_grid *grid,
                                            const mgt_comm *comm, const mgt_task_set *set,
                                            mgt_task_score *out);
int mgt_trainer_has_validation(const mgt_trainer *tr);

/* Why a run ended. */
typedef enum mgt_run_end {
  MGT_RUN_FINISHED,  /* cfg->train_iters reached */
  MGT_RUN_SIGNALED,  /* *stop was set (SIGUSR1/SIGTERM) on some rank */
  MGT_RUN_DURATION,  /* --exit-duration-in-mins elapsed */
  MGT_RUN_INTERVAL,  /* --exit-interval reached */
  MGT_RUN_NONFINITE, /* --max-skipped-iterations non-finite iterations in a row */
} mgt_run_end;

/* The exit status `mgt train` uses for a run that stopped early but is not finished (signal,
   --exit-duration-in-mins): job scripts turn it into `scontrol requeue` (EX_TEMPFAIL). */
enum { MGT_EXIT_REQUEUE = 75 };
/* The exit status of a run stopped by --max-skipped-iterations: diverged, not to be requeued
   (jobs/launch.sh stops on it as on a refused configuration). */
enum { MGT_EXIT_DIVERGED = 3 };

/* Runs iterations until cfg->train_iters, logging on rank 0 to `log` every
   --log-interval iterations and appending to --metrics-file; validates every
   --eval-interval iterations and at the end. After every iteration it checks `stop` (may be
   NULL; a signal handler sets it, nothing else happens in the handler) and the elapsed time,
   agreeing over all ranks; on a stop, or at --exit-interval, it finishes the iteration, saves a
   checkpoint to --save if given, and returns with *end saying why. Collective. */
MGT_NODISCARD mgt_status mgt_trainer_run(mgt_trainer *tr, FILE *log,
                                         const volatile sig_atomic_t *stop, mgt_run_end *end);

/* Saves a checkpoint of the current iteration into dir (see mgt/checkpoint.h), removing all
   but the newest --keep-last. With --async-save the slabs are copied to host memory and
   written by a background thread while training goes on; the next save waits for it, as does
   mgt_trainer_finish_saves. Collective. */
MGT_NODISCARD mgt_status mgt_trainer_save(mgt_trainer *tr, const char *dir);
/* Waits for a background save and returns its outcome. Collective. */
MGT_NODISCARD mgt_status mgt_trainer_finish_saves(mgt_trainer *tr);
int64_t mgt_trainer_iteration(const mgt_trainer *tr);
/* The mgt_now() --exit-duration-in-mins counts from: the process's start, so that loading and
   building count (Megatron-LM's); unset, the start of mgt_trainer_run. */
void mgt_trainer_started_at(mgt_trainer *tr, double t);

mgt_gpt *mgt_trainer_model(mgt_trainer *tr);
mgt_optim *mgt_trainer_optim(mgt_trainer *tr);

/* Prints the per-rank memory plan (rank 0). */
void mgt_print_memory_plan(const mgt_config *cfg, int tp, int dp, FILE *f);
/* Which recomputation choices fit in `avail` bytes per rank (0: unknown, `where` says why, or
   names the memory), and the least recomputation that fits: what --dry-run advises. */
void mgt_print_memory_fit(const mgt_config *cfg, int tp, int dp, size_t avail, const char *where,
                          FILE *f);

#ifdef __cplusplus
}
#endif
