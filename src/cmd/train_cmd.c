/* mgt train and mgt finetune: configuration, memory check, devices, the trainer, and the stop
   signals. */
#define _GNU_SOURCE
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/cli.h"
#include "mgt/config.h"
#include "mgt/dataset.h"
#include "mgt/device.h"
#include "mgt/flags.h"
#include "mgt/gpt.h"
#include "mgt/log.h"
#include "mgt/plan.h"
#include "mgt/tasks.h"
#include "mgt/tensorboard.h"
#include "mgt/tokenizer.h"
#include "mgt/train.h"
#include "mgt/watchdog.h"

#ifndef MGT_VERSION
#define MGT_VERSION "unknown"
#endif

/* Set by SIGUSR1/SIGTERM; the trainer polls it between iterations. Nothing else happens in
   the handler, so it is async-signal-safe. */
static volatile sig_atomic_t stop_signal = 0;
static double process_started; /* --exit-duration-in-mins counts from here */

static void on_stop_signal(int sig) { stop_signal = sig; }

static void install_stop_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Bytes this rank may use: the node's available memory shared by its ranks. */
static size_t available_memory(MPI_Comm world) {
  FILE *f = fopen("/proc/meminfo", "r");
  size_t kb = 0;
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
  }
  return kb * 1024 / (size_t)mgt_cli_local_ranks(world);
}

static int refuse_memory(size_t need, size_t avail, int rank, MPI_Comm world) {
  mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                "the model needs %.1f MiB per rank but %.1f MiB are available per rank "
                "(see --dry-run; try --recompute-activations, a smaller "
                "--micro-batch-size or a larger --tensor-model-parallel-size)",
                need / 1048576.0, avail / 1048576.0);
  return mgt_cli_fail(MGT_ERR_INPUT, rank, world, 1);
}

/* The vocabulary of the tokenizer the flags give (--vocab-file, or --tokenizer-type
   ByteTokenizer), or 0 when they give none; and its end-of-document id (GPT-2's 50256 without
   its files, -1 when unknown). */
static mgt_status tokenizer_vocab(const mgt_config *cfg, int *n, int *eod) {
  *n = 0, *eod = -1;
  mgt_tokenizer *tok = NULL;
  if (cfg->tokenizer_type == MGT_TOKENIZER_NULL) return MGT_OK; /* its vocabulary is the flag's */
  if (cfg->tokenizer_type != MGT_TOKENIZER_GPT2 || (cfg->vocab_file[0] && cfg->merge_file[0]))
    MGT_CHECK(mgt_tok_open(cfg->tokenizer_type, cfg->vocab_file, cfg->merge_file, &tok));
  if (tok) *n = mgt_tok_vocab_size(tok), *eod = mgt_tok_eod(tok);
  if (!tok && cfg->tokenizer_type == MGT_TOKENIZER_GPT2) *eod = 50256; /* <|endoftext|> */
  mgt_tok_destroy(&tok);
  return MGT_OK;
}

static int train_job(mgt_config *cfg_in, MPI_Comm world, const mgt_task_data *task);

/* How the device was chosen when the command line names none (for the layout line). */
static char device_why[96];

static int names_device(int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--device") || !strncmp(argv[i], "--device=", 9) ||
        !strcmp(argv[i], "--cpu-gemm") || !strncmp(argv[i], "--cpu-gemm=", 11))
      return 1; /* --cpu-gemm is the CPU's */
  return 0;
}

/* mgt finetune: the task's data is read first, since its size sets the iterations (--epochs). */
static mgt_status finetune_config(mgt_config *c, int size, mgt_task_data *data) {
  MGT_REQUIRE(mgt_model_kinds[c->model].finetunable,
              "mgt finetune fine-tunes a BERT (--model bert); the paper scores GPT zero-shot "
              "(mgt eval --task wikitext103 or lambada)");
  MGT_REQUIRE(c->task != MGT_TASK_NONE, "mgt finetune needs --task RACE, MNLI or QQP");
  MGT_REQUIRE(c->train_data[0], "mgt finetune needs --train-data");
  MGT_REQUIRE(c->epochs > 0, "mgt finetune needs --epochs (passes over --train-data)");
  MGT_REQUIRE(c->train_iters == 0,
              "mgt finetune sets the iterations from --epochs (Megatron-LM's rule): give --epochs "
              "without --train-iters");
  MGT_REQUIRE(c->pretrained_checkpoint[0] || c->load[0],
              "mgt finetune needs --pretrained-checkpoint (or --load to resume a fine-tuning run)");
  MGT_REQUIRE(!c->mock_data && !c->data_path[0] && !c->train_data_path[0],
              "mgt finetune reads --train-data and --valid-data, not --data-path or --mock-data");
  MGT_REQUIRE(c->vocab_file[0], "mgt finetune needs the --vocab-file of the pretrained model");
  MGT_CHECK(mgt_task_data_open(c, NULL, data));
  const int tp = c->tensor_model_parallel_size;
  MGT_REQUIRE(tp >= 1 && size % tp == 0,
              "--tensor-model-parallel-size %d does not divide the number of ranks %d", tp, size);
  if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * (size / tp);
  const int64_t per_epoch = data->train_examples / c->global_batch_size;
  MGT_REQUIRE(per_epoch > 0, "%lld training examples are fewer than one global batch of %d",
              (long long)data->train_examples, c->global_batch_size);
  c->train_iters = (int64_t)c->epochs * per_epoch;
  return MGT_OK;
}

int mgt_cli_train(int argc, char **argv, MPI_Comm world) {
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const int finetune = strcmp(argv[1], "finetune") == 0;
  /* a signal from here on asks for a stop: the run ends cleanly, never by the default action */
  process_started = mgt_now();
  install_stop_handlers();
  mgt_config cfg;
  mgt_config_defaults(&cfg);
  if (finetune) /* --train-iters 0: not given, the iterations come from --epochs */
    cfg.model = MGT_MODEL_BERT, cfg.tokenizer_type = MGT_TOKENIZER_BERT_LOWER, cfg.train_iters = 0;
  int help = 0;
  mgt_status st = mgt_config_parse(&cfg, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_config_usage(stdout);
    return 0;
  }
  if (!names_device(argc, argv)) cfg.device = mgt_device_auto(world, device_why, sizeof device_why);
  if (!finetune && (cfg.task != MGT_TASK_NONE || cfg.train_data[0] || cfg.valid_data[0])) {
    mgt_error_set(MGT_ERR_INPUT, __FILE__, __LINE__, __func__,
                  "%s is for mgt finetune (mgt train pretrains on --data-path)",
                  cfg.task != MGT_TASK_NONE
                      ? "--task"
                      : (cfg.train_data[0] ? "--train-data" : "--valid-data"));
    return mgt_cli_fail(MGT_ERR_INPUT, rank, world, 1);
  }
  mgt_task_data data;
  memset(&data, 0, sizeof data);
  if (finetune) {
    st = mgt_mpi_agree(world, finetune_config(&cfg, size, &data));
    if (st != MGT_OK) {
      mgt_task_data_close(&data);
      return mgt_cli_fail(st, rank, world, 1);
    }
    if (rank == 0)
      for (int i = 0; i < data.n_train + data.n_valid; i++) {
        const mgt_task_set *s = i < data.n_train ? data.train[i] : data.valid[i - data.n_train];
        printf("%s %s %s: %lld examples, %lld records skipped\n", mgt_task_names[cfg.task],
               i < data.n_train ? "train" : "valid", mgt_task_set_path(s),
               (long long)mgt_task_set_size(s), (long long)mgt_task_set_skipped(s));
      }
  }
  int rc = train_job(&cfg, world, finetune ? &data : NULL);
  mgt_task_data_close(&data);
  return rc;
}

/* From a parsed configuration to the end of the run. */
/* The job's configuration: the vocabulary (the tokenizer's, or the datasets'), the derived sizes,
   and the files only rank 0 writes probed by rank 0; every verdict is shared by all ranks. */
static mgt_status job_config(mgt_config *cfg, MPI_Comm world, int rank, int size) {
  int tok_vocab = 0;
  /* Megatron-LM's NullTokenizer: --vocab-size ids and the end of document, id --vocab-size */
  if (cfg->tokenizer_type == MGT_TOKENIZER_NULL && cfg->vocab_size > 0) cfg->vocab_size++;
  MGT_CHECK(mgt_mpi_agree(world, tokenizer_vocab(cfg, &tok_vocab, &cfg->eod_token)));
  if (cfg->tokenizer_type == MGT_TOKENIZER_NULL && cfg->vocab_size > 0)
    cfg->eod_token = cfg->vocab_size - 1;
  MGT_REQUIRE(!cfg->eod_mask_loss || cfg->eod_token >= 0,
              "--eod-mask-loss: this tokenizer has no end-of-document token");
  MGT_REQUIRE(!cfg->reset_position_ids || cfg->sft || cfg->eod_token >= 0,
              "--reset-position-ids: this tokenizer has no end-of-document token");
  MGT_REQUIRE(!cfg->reset_attention_mask || cfg->sft || cfg->eod_token >= 0,
              "--reset-attention-mask: this tokenizer has no end-of-document token");
  if (tok_vocab && cfg->vocab_size == 0) cfg->vocab_size = tok_vocab; /* as Megatron-LM does */
  if (tok_vocab > cfg->vocab_size && rank == 0)
    fprintf(stderr,
            "mgt: note: --vocab-size %d is smaller than the tokenizer's %d ids; ids from %d up "
            "cannot be trained on or evaluated\n",
            cfg->vocab_size, tok_vocab, cfg->vocab_size);
  /* finalize reads files (--data-args-path) that a node may lack */
  MGT_CHECK(mgt_mpi_agree(world, mgt_config_finalize(cfg, size)));
  if ((cfg->data_path[0] || cfg->train_data_path[0]) && cfg->vocab_size == 0) {
    /* the vocabulary comes from the datasets; every rank reads the same attributes */
    MGT_CHECK(mgt_mpi_agree(world, mgt_dataset_vocab_size(cfg, &cfg->vocab_size)));
    MGT_CHECK(mgt_mpi_agree(world, mgt_config_finalize(cfg, size)));
  }
  /* the same arguments can still give ranks different runs, through files or the environment */
  char *text = mgt_config_to_text(cfg);
  MGT_CHECK(mgt_mpi_agree(world, text ? MGT_OK : MGT_ERROR(MGT_ERR_NOMEM, "out of memory")));
  const mgt_status same = mgt_mpi_same_bytes(world, text, strlen(text), mgt_flags_json_difference);
  free(text);
  MGT_CHECK(same);
  int ok = 1;
  if (rank == 0 && cfg->metrics_file[0]) {
    FILE *f = NULL;
    ok = mgt_create_file("--metrics-file", cfg->metrics_file, 1, &f) == MGT_OK && fclose(f) == 0;
  }
  if (rank == 0 && ok && cfg->tensorboard_dir[0])
    ok = mgt_tb_check_dir(cfg->tensorboard_dir) == MGT_OK; /* the error is set */
  MPI_Bcast(&ok, 1, MPI_INT, 0, world);
  if (ok) mgt_cli_print_notes(cfg->notes, rank);
  return ok ? MGT_OK : MGT_ERR_INPUT; /* rank 0 holds the message */
}

/* Bytes per rank and step inside a node and across nodes, from the real placement: the share
   of each parallelism's groups that span nodes. */
static void print_traffic(const mgt_config *cfg, const mgt_grid *g) {
  mgt_plan_bytes b;
  mgt_plan_traffic(cfg, g->dp, 4, &b);
  const double dp_b = b.dp + b.edp, out = b.tp * g->tp_spanning / g->dp +
                                          b.dp * g->dp_spanning / g->tp +
                                          b.edp * g->edp_spanning / ((double)g->tp * g->ep) +
                                          b.a2a * g->ep_spanning / ((double)g->tp * g->edp);
  mgt_grid_print_placement(g, stdout);
  char experts[160] = "";
  if (g->ep > 1)
    snprintf(experts, sizeof experts,
             ", of which the experts' %.3f GB over %d ranks; expert all-to-all %.3f GB (%d of %d "
             "groups span nodes)",
             b.edp / 1e9, g->edp, b.a2a / 1e9, g->ep_spanning, g->tp * g->edp);
  printf("traffic per rank and step (fp32): %.3f GB inside a node, %.3f GB across nodes; "
         "tensor-parallel %.3f GB (%d of %d groups span nodes), data-parallel %.3f GB (%d of %d "
         "groups span nodes)%s\n",
         (b.tp + dp_b + b.a2a - out) / 1e9, out / 1e9, b.tp / 1e9, g->tp_spanning, g->dp,
         dp_b / 1e9, g->dp_spanning, g->tp, experts);
}

/* --dry-run: the memory plan, and what fits here (the smallest share over the ranks). */
static void dry_run(const mgt_config *cfg, MPI_Comm world, int rank, int size) {
  size_t avail = 0;
  char where[160];
  if (cfg->device == MGT_DEVICE_CPU) {
    avail = available_memory(world);
    snprintf(where, sizeof where, "this node's available memory over its %d ranks",
             mgt_cli_local_ranks(world));
  } else {
    mgt_device_probe_gpu(world, &avail, where, sizeof where);
  }
  MPI_Allreduce(MPI_IN_PLACE, &avail, 1, MPI_UNSIGNED_LONG, MPI_MIN, world);
  mgt_grid *grid = NULL; /* where the ranks are, for the traffic */
  mgt_status st = mgt_grid_create(world, cfg->tensor_model_parallel_size, &grid);
  if (st == MGT_OK) st = mgt_grid_set_experts(grid, cfg->expert_model_parallel_size);
  if (rank == 0) {
    const int tp = cfg->tensor_model_parallel_size;
    printf("megatron-c %s\n", MGT_VERSION);
    mgt_config_print(cfg, stdout);
    mgt_print_memory_plan(cfg, tp, size / tp, stdout);
    mgt_print_memory_fit(cfg, tp, size / tp, avail, where, stdout);
    if (st == MGT_OK) print_traffic(cfg, grid);
  }
  mgt_grid_destroy(&grid);
}

static int train_job(mgt_config *cfg_in, MPI_Comm world, const mgt_task_data *task) {
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  mgt_config cfg = *cfg_in;
  mgt_status st = job_config(&cfg, world, rank, size);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (cfg.dry_run) {
    dry_run(&cfg, world, rank, size);
    return 0;
  }
  /* Refuse before allocating: every rank sees the same plan, the node the same memory. */
  mgt_gpt_memory plan;
  mgt_gpt_memory_plan_grid(&cfg, cfg.tensor_model_parallel_size,
                           size / cfg.tensor_model_parallel_size, &plan);
  size_t need = plan.total;
  if (cfg.device == MGT_DEVICE_CPU) {
    size_t avail = available_memory(world);
    MPI_Allreduce(MPI_IN_PLACE, &avail, 1, MPI_UNSIGNED_LONG, MPI_MIN, world);
    if (avail > 0 && need > avail) return refuse_memory(need, avail, rank, world);
  }

  mgt_grid *grid = NULL;
  mgt_device dev = {0};
  mgt_trainer *tr = NULL;
  int rc = 0;
  st = mgt_grid_create(world, cfg.tensor_model_parallel_size, &grid);
  if (st == MGT_OK) st = mgt_grid_set_experts(grid, cfg.expert_model_parallel_size);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 0);
  st = mgt_grid_check_nodes(grid, cfg.require_node_local_tp);
  if (st == MGT_OK) st = mgt_watchdog_start(60.0 * cfg.distributed_timeout_minutes, grid);
  if (st != MGT_OK) {
    mgt_grid_destroy(&grid);
    return mgt_cli_fail(st, rank, world, 1); /* every rank has the same placement */
  }
  const mgt_precision prec = cfg.bf16 ? MGT_PREC_BF16 : (cfg.fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32);
  st = mgt_device_open(&dev, cfg.device, cfg.distributed_backend, cfg.cpu_gemm, prec, grid, NULL);
  if (st == MGT_OK) { /* a layer's GEMMs per rank: the micro-batch's rows, the widths over tp */
    const int tp = cfg.tensor_model_parallel_size, C = cfg.hidden_size;
    const int dense = cfg.ffn_hidden_size ? cfg.ffn_hidden_size : 4 * C;
    const int F =
        (cfg.num_experts && cfg.moe_ffn_hidden_size ? cfg.moe_ffn_hidden_size : dense) / tp;
    st = mgt_device_fp32_gemm(&dev, cfg.cpu_gemm_fp32, cfg.micro_batch_size * cfg.seq_length, C,
                              3 * C / tp, cfg.swiglu ? 2 * F : F, prec, grid);
    if (st != MGT_OK) mgt_device_close(&dev);
  }
  if (st != MGT_OK) {
    mgt_watchdog_stop();
    mgt_grid_destroy(&grid);
    return mgt_cli_fail(st, rank, world, 1); /* agreed */
  }
  if (cfg.device == MGT_DEVICE_CUDA) {
    size_t avail = 0, total = 0;
    mgt_device_memory(&dev, &avail, &total);
    MPI_Allreduce(MPI_IN_PLACE, &avail, 1, MPI_UNSIGNED_LONG, MPI_MIN, world);
    if (avail > 0 && need > avail) {
      mgt_watchdog_stop();
      mgt_device_close(&dev);
      mgt_grid_destroy(&grid);
      return refuse_memory(need, avail, rank, world);
    }
  }
  st = task ? mgt_trainer_create_task(&cfg, grid, dev.be, dev.comm, stdout, task, &tr)
            : mgt_trainer_create(&cfg, grid, dev.be, dev.comm, stdout, &tr);
  if (st != MGT_OK) {
    rc = mgt_cli_fail(st, rank, world, 1); /* creation failures are agreed */
  } else {
    if (rank == 0) { /* once every input is accepted: a refusal is one line, not a dump */
      printf("megatron-c %s\n", MGT_VERSION);
      mgt_config_print(&cfg, stdout);
      char why[96];
      const int flash = mgt_config_flash(&cfg, why, sizeof why);
      printf("layout: %d ranks = tensor-parallel %d x data-parallel %d; %d OpenMP threads per "
             "rank; backend %s%s%s%s%s; attention %s (%s)\n",
             grid->size, grid->tp, grid->dp, omp_get_max_threads(), dev.desc,
             device_why[0] ? " (" : "", device_why, device_why[0] ? ")" : "",
             prec == MGT_PREC_BF16 ? "; bf16 GEMM inputs"
                                   : (prec == MGT_PREC_FP16 ? "; fp16 GEMM inputs" : ""),
             flash ? "flash" : "unfused", why);
      if (grid->ep > 1)
        printf("experts: %d a rank over %d expert-parallel ranks (%d groups of them), rows by %s\n",
               cfg.num_experts / grid->ep, grid->ep, grid->edp,
               cfg.moe_token_dispatcher_type == 1 ? "all-gather and reduce-scatter" : "all-to-all");
      mgt_grid_print_placement(grid, stdout);
      mgt_print_memory_plan(&cfg, grid->tp, grid->dp, stdout);
      fflush(stdout);
    }
    mgt_run_end end = MGT_RUN_FINISHED;
    mgt_trainer_started_at(tr, process_started);
    st = mgt_trainer_run(tr, stdout, &stop_signal, &end);
    if (st != MGT_OK)
      rc = mgt_cli_fail(st, rank, world, 0);
    else if (end == MGT_RUN_NONFINITE)
      rc = MGT_EXIT_DIVERGED; /* not to be requeued */
    else if (end == MGT_RUN_SIGNALED || end == MGT_RUN_DURATION)
      rc = MGT_EXIT_REQUEUE;
  }
  mgt_watchdog_stop();
  mgt_trainer_destroy(&tr);
  mgt_device_close(&dev);
  mgt_grid_destroy(&grid);
  return rc;
}
