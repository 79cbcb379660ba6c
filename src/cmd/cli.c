#define _GNU_SOURCE
#include "mgt/cli.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgt/backend.h"
#include "mgt/eval.h"
#include "mgt/plan.h"
#include "mgt/plot.h"
#include "mgt/generate.h"
#include "mgt/serve.h"
#include "mgt/flags.h"
#include "mgt/dataset.h"
#include "mgt/agree.h"
#include "mgt/tokenize.h"

#ifndef MGT_VERSION
#define MGT_VERSION "unknown"
#endif

void mgt_cli_print_notes(const char *notes, int rank) {
  for (const char *p = notes; rank == 0 && *p;) {
    const size_t len = strcspn(p, "\n");
    fprintf(stderr, "mgt: note: %.*s\n", (int)len, p);
    p += len + (p[len] == '\n');
  }
}

int mgt_cli_local_ranks(MPI_Comm world) {
  MPI_Comm node;
  int n = 1;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
  }
  return n;
}

void mgt_cli_configure_threads(MPI_Comm world) {
  int local = mgt_cli_local_ranks(world);
  if (getenv("OMP_NUM_THREADS")) return;
  cpu_set_t set;
  int bound = 0, online = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof set, &set) == 0) bound = CPU_COUNT(&set);
  if (bound <= 0) bound = online;
  int threads = bound < online ? bound : bound / local;
  omp_set_num_threads(threads < 1 ? 1 : threads);
}

int mgt_cli_fail(mgt_status st, int rank, MPI_Comm world, int agreed) {
  int size = 0;
  MPI_Comm_size(world, &size);
  if (mgt_error_agreed() == size) agreed = 1; /* every rank holds this error */
  if (agreed) {
    if (rank == 0) mgt_error_print(stderr);
    return st == MGT_ERR_INPUT ? 2 : 1;
  }
  mgt_error_print(stderr);
  fflush(stderr);
  MPI_Abort(world, st == MGT_ERR_INPUT ? 2 : 1);
  return 1;
}

static int cmd_preprocess(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_preprocess_opts o;
  mgt_preprocess_defaults(&o);
  int help = 0;
  mgt_status st = mgt_preprocess_parse(&o, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_preprocess_usage(stdout);
    return 0;
  }
  mgt_cli_print_notes(o.notes, rank);
  st = mgt_preprocess_run(&o, world, rank == 0 ? stdout : NULL);
  return st == MGT_OK ? 0 : mgt_cli_fail(st, rank, world, 1); /* errors are agreed across ranks */
}

static int cmd_tokenize(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_tokenize_opts o;
  mgt_tokenize_defaults(&o);
  int help = 0;
  mgt_status st = mgt_tokenize_parse(&o, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_tokenize_usage(stdout);
    return 0;
  }
  /* one rank does the work; the verdict is shared so every rank exits alike */
  if (rank == 0) st = mgt_tokenize_run(&o, stdout);
  fflush(stdout);
  st = mgt_mpi_agree(world, st);
  return st == MGT_OK ? 0 : mgt_cli_fail(st, rank, world, 1);
}

/* mgt plan: arithmetic only, printed by rank 0. */
static int cmd_plan(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_plan_opts o;
  mgt_plan_defaults(&o);
  int help = 0;
  mgt_status st = mgt_plan_parse(&o, argc, argv, 2, &help);
  if (st == MGT_OK && help) {
    if (rank == 0) mgt_plan_usage(stdout);
    return 0;
  }
  if (st == MGT_OK && rank == 0) st = mgt_plan_run(&o, stdout);
  MPI_Bcast(&st, sizeof st, MPI_BYTE, 0, world);
  if (st != MGT_OK) {
    if (rank == 0) mgt_error_print(stderr);
    return st == MGT_ERR_INPUT ? 2 : 1;
  }
  return 0;
}

/* mgt plot: rank 0 reads the metrics and writes the picture; every rank exits alike. */
static int cmd_plot(int argc, char **argv, MPI_Comm world) {
  int rank, help = 0;
  MPI_Comm_rank(world, &rank);
  mgt_plot_opts o;
  mgt_plot_defaults(&o);
  mgt_status st = mgt_plot_parse(&o, argc, argv, 2, &help);
  if (st == MGT_OK && rank == 0) {
    if (help)
      mgt_plot_usage(stdout);
    else
      st = mgt_plot_run(&o, stdout);
  }
  MPI_Bcast(&st, sizeof st, MPI_BYTE, 0, world);
  if (st == MGT_OK) return 0;
  if (rank == 0) mgt_error_print(stderr);
  return st == MGT_ERR_INPUT ? 2 : 1;
}

static int cmd_eval(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_eval_opts o;
  mgt_eval_defaults(&o);
  int help = 0;
  mgt_status st = mgt_eval_parse(&o, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_eval_usage(stdout);
    return 0;
  }
  st = mgt_eval_run(&o, world, stdout);
  /* input errors are found in agreed phases; anything else may be on one rank only */
  return st == MGT_OK ? 0 : mgt_cli_fail(st, rank, world, st == MGT_ERR_INPUT);
}

static int cmd_generate(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_generate_opts o;
  mgt_generate_defaults(&o);
  int help = 0;
  mgt_status st = mgt_generate_parse(&o, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_generate_usage(stdout);
    return 0;
  }
  st = mgt_generate_run(&o, world, stdout, stderr);
  return st == MGT_OK ? 0 : mgt_cli_fail(st, rank, world, st == MGT_ERR_INPUT);
}

static int cmd_serve(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_serve_opts o;
  mgt_serve_defaults(&o);
  int help = 0;
  mgt_status st = mgt_serve_parse(&o, argc, argv, 2, &help);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) mgt_serve_usage(stdout);
    return 0;
  }
  st = mgt_serve_run(&o, world);
  return st == MGT_OK ? 0 : mgt_cli_fail(st, rank, world, st == MGT_ERR_INPUT);
}

static int cmd_version(int argc, char **argv, MPI_Comm world) {
  (void)argc, (void)argv;
  int rank;
  MPI_Comm_rank(world, &rank);
  if (rank == 0) {
    const char *backends = "cpu"
#ifdef MGT_HAVE_CUDA
                           ", cuda"
#ifdef MGT_HAVE_NCCL
                           " with NCCL"
#endif
#endif
        ;
    char units[128];
    const int native = mgt_cpu_bf16_units(units, sizeof units);
    printf("megatron-c %s (backends: %s; CPU bf16 GEMMs: %s%s)\n", MGT_VERSION, backends,
           native ? "native on " : "emulated, ", units);
  }
  return 0;
}

/* The commands: `mgt NAME ...` runs run(argc, argv, world) with argv[1] = NAME, and returns its
   exit status (0, 1 for a failure, 2 for bad input). */
typedef struct command {
  const char *name;
  const char *summary; /* for mgt --help */
  int (*run)(int argc, char **argv, MPI_Comm world);
  const char *doc; /* what to read next, printed after its --help */
} command;

static const command commands[] = {
    {"train", "train a GPT, BERT or Llama-style model (mgt train --help for its flags)",
     mgt_cli_train, "docs/training.md"},
    {"finetune", "fine-tune a BERT on RACE, MNLI or QQP (docs/finetune.md)", mgt_cli_train,
     "docs/finetune.md"},
    {"preprocess", "tokenize JSON lines or text files into an HDF5 token dataset", cmd_preprocess,
     "docs/data-format.md"},
    {"tokenize", "encode JSON lines to token ids, or decode ids (--decode)", cmd_tokenize,
     "docs/data-format.md"},
    {"eval",
     "evaluate a checkpoint: WikiText-103 perplexity, LAMBADA accuracy,\n"
     "              perplexity of any text or token ids",
     cmd_eval, "docs/evaluation.md"},
    {"generate", "continue a prompt with a checkpoint (sampling, key/value cache)", cmd_generate,
     "docs/evaluation.md"},
    {"ckpt", "checkpoints: info, verify, export --format hf, import --format hf", mgt_cli_ckpt,
     "docs/checkpoint-format.md"},
    {"plan", "the layouts of a model that fit a machine, ranked by estimated speed", cmd_plan,
     "docs/hpc-guide.md"},
    {"dataset", "info PREFIX: what a token dataset holds (ours or Megatron-LM's)", mgt_cli_dataset,
     "docs/data-format.md"},
    {"plot", "loss and learning-rate curves of --metrics-file runs as an SVG", cmd_plot,
     "docs/training.md"},
    {"serve", "answer prompts over HTTP (Megatron's PUT /api, OpenAI-style completions)", cmd_serve,
     "docs/serving.md"},
    {"version", "print the version", cmd_version, "docs/install.md"},
};
enum { N_COMMANDS = (int)(sizeof commands / sizeof commands[0]) };

static void usage(FILE *f) {
  fprintf(f, "usage: mgt <command> [flags]\n\ncommands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s  %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\nRun under MPI for several ranks: mpiexec -n 4 mgt train "
          "--tensor-model-parallel-size 2 ...\n"
          "Read next: README.md (a first run), docs/training.md, docs/hpc-guide.md (clusters)\n");
}

static int asks_help(int argc, char **argv) {
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

/* The k-th of the NUL-terminated strings in s[0..n), or NULL. */
static const char *nth_string(const char *s, size_t n, int k) {
  for (size_t i = 0; i < n; i += strlen(s + i) + 1)
    if (k-- == 0) return s + i;
  return NULL;
}

static void describe_args(const char *mine, size_t mine_n, const char *root, size_t root_n,
                          char *why, size_t cap) {
  int k = 0;
  const char *a, *b;
  while ((a = nth_string(mine, mine_n, k)) && (b = nth_string(root, root_n, k)) && !strcmp(a, b))
    k++;
  a = nth_string(mine, mine_n, k), b = nth_string(root, root_n, k);
  snprintf(why, cap,
           "started with other arguments than rank 0: its argument %d is %s%.200s%s, rank 0's "
           "%s%.200s%s (every rank runs the same command)",
           k + 1, a ? "'" : "", a ? a : "missing", a ? "'" : "", b ? "'" : "", b ? b : "missing",
           b ? "'" : "");
}

/* Ranks started with different arguments would parse different configurations and part ways
   at the first collective: refused first, on every rank. */
static mgt_status same_args(int argc, char **argv, MPI_Comm world) {
  size_t n = 0;
  for (int i = 1; i < argc; i++)
    n += strlen(argv[i]) + 1;
  char *all = malloc(n + 1), *p = all;
  if (!all) return mgt_mpi_agree(world, MGT_ERROR(MGT_ERR_NOMEM, "out of memory"));
  for (int i = 1; i < argc; i++)
    p = stpcpy(p, argv[i]) + 1;
  const mgt_status st = mgt_mpi_same_bytes(world, all, n, describe_args);
  free(all);
  return st;
}

/* mgt's own environment variables, which nothing else would check (docs/training.md,
   docs/gpu.md). */
static mgt_status check_env(void) {
  const char *e = getenv("MGT_CUDA_AWARE_MPI");
  MGT_REQUIRE(!e || !*e || !strcmp(e, "0") || !strcmp(e, "1"),
              "MGT_CUDA_AWARE_MPI=%.40s: 0 (stage through the host) or 1 (CUDA-aware MPI)", e);
  e = getenv("MGT_PROGRESS_SECONDS");
  char *end = NULL;
  const double s = e && *e ? strtod(e, &end) : 1;
  MGT_REQUIRE(!e || !*e || (end != e && *end == 0 && s > 0 && s < 1e9),
              "MGT_PROGRESS_SECONDS=%.40s: not a positive number of seconds", e);
  return MGT_OK;
}

int mgt_cli_main(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  mgt_status st = same_args(argc, argv, world);
  if (st == MGT_OK) st = mgt_mpi_agree(world, check_env());
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    if (rank == 0) usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *name = strcmp(argv[1], "--version") == 0 ? "version" : argv[1];
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(name, commands[i].name) == 0) {
      const int rc = commands[i].run(argc, argv, world);
      if (rc == 0 && rank == 0 && asks_help(argc, argv)) {
        printf("\nRead next: %s (in the source tree)\n", commands[i].doc);
        fflush(stdout);
      }
      return rc;
    }
  const char *names[N_COMMANDS];
  for (int i = 0; i < N_COMMANDS; i++)
    names[i] = commands[i].name;
  const char *near = mgt_nearest(name, names, N_COMMANDS);
  if (rank == 0 && near)
    fprintf(stderr, "mgt: error: unknown command '%s' (did you mean mgt %s?)\n", name, near);
  else if (rank == 0)
    fprintf(stderr, "mgt: error: unknown command '%s' (see mgt --help)\n", name);
  return 2;
}
