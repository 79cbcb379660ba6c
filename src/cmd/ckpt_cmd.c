/* mgt ckpt: info, verify, export and import of checkpoints, on rank 0. */
#define _GNU_SOURCE /* open_memstream */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/checkpoint.h"
#include "mgt/cli.h"
#include "mgt/flags.h"
#include "mgt/agree.h"
#include "mgt/gpt.h"
#include "mgt/hf.h"
#include "mgt/optim.h"
#include "mgt/train.h"

/* Iteration, layout, configuration and tensors of a checkpoint file. */
static mgt_status info(const char *path, FILE *out) {
  mgt_config cfg;
  mgt_ckpt_state s;
  mgt_model_spec spec;
  MGT_CHECK(mgt_train_read_checkpoint(path, &cfg, &spec, &s));
  char *listing = NULL;
  size_t len = 0;
  int64_t elements = 0;
  FILE *ms = open_memstream(&listing, &len);
  if (!ms) MGT_FAIL(MGT_ERR_NOMEM, "out of memory listing %s", path);
  mgt_status st = mgt_ckpt_list(path, ms, &elements);
  fclose(ms);
  if (st == MGT_OK) {
    fprintf(out, "checkpoint %s\n", path);
    fprintf(out, "  iteration %lld, consumed samples %llu, optimizer steps %lld, seed %llu\n",
            (long long)s.iteration, (unsigned long long)s.consumed_samples,
            (long long)s.optimizer_steps, (unsigned long long)s.seed);
    fprintf(out, "  saved by tensor-parallel %lld x data-parallel %lld; optimizer state: %s\n",
            (long long)s.tensor_model_parallel_size, (long long)s.data_parallel_size,
            s.has_optimizer ? "yes" : "no");
    fprintf(out,
            "  model: %s, %d layers, hidden %d, %d heads, ffn %d, vocabulary %d, %d positions, "
            "%lld parameters\n",
            mgt_model_kinds[spec.kind].title, spec.layers, spec.hidden, spec.heads, spec.ffn,
            spec.vocab, spec.positions, (long long)elements);
    char *text = mgt_model_spec_to_text(&spec);
    if (text) fprintf(out, "  spec: %s\n", text);
    free(text);
    fprintf(out, "  configuration:\n");
    mgt_config_print(&cfg, out);
    fprintf(out, "  tensors:\n");
    fputs(listing, out);
  }
  free(listing);
  return st;
}

/* Verifies a checkpoint file against what its stored configuration implies. */
static mgt_status verify(const char *path, int *damaged) {
  mgt_config cfg;
  mgt_ckpt_state state;
  MGT_CHECK(mgt_train_read_config(path, &cfg, &state));
  mgt_state model = {0}, expect = {0};
  mgt_status st = mgt_gpt_describe(&cfg, 1, 0, 0, &model);
  for (int i = 0; i < model.n && st == MGT_OK; i++)
    st = mgt_state_add(&expect, &model.t[i]);
  if (st == MGT_OK && state.has_optimizer) st = mgt_optim_describe(&model, &expect);
  if (st == MGT_OK) st = mgt_ckpt_verify(path, &expect, stdout, damaged);
  mgt_state_fini(&model);
  mgt_state_fini(&expect);
  return st;
}

typedef struct ckpt_opts {
  char load[MGT_PATH_MAX], output[MGT_PATH_MAX], input[MGT_PATH_MAX], save[MGT_PATH_MAX];
  int64_t ckpt_iteration, max_shard_size;
  int format;
} ckpt_opts;

static const char *const ckpt_formats[] = {"hf", NULL};
#define COFF(f) offsetof(ckpt_opts, f)
static const mgt_flag ckpt_flags[] = {
    {"--load", MGT_FLAG_STR, COFF(load), 0, 0, "checkpoint directory (its latest) or file", NULL,
     MGT_PATH_MAX, 0},
    {"--ckpt-iteration", MGT_FLAG_INT64, COFF(ckpt_iteration), -1, 9e15,
     "this iteration instead of the latest", NULL, 0, 0},
    {"--format", MGT_FLAG_ENUM, COFF(format), 0, 0,
     "export/import format: hf (Hugging Face GPT-2, BERT or Llama)", ckpt_formats, 0, 0},
    {"--max-shard-size", MGT_FLAG_INT64, COFF(max_shard_size), 1, 9e15,
     "export: bytes of weights per safetensors file; more go into several files with an index "
     "(save_pretrained's default, 5 GB)",
     NULL, 0, 0},
    {"--output", MGT_FLAG_STR, COFF(output), 0, 0, "export: directory to write", NULL, MGT_PATH_MAX,
     0},
    {"--input", MGT_FLAG_STR, COFF(input), 0, 0, "import: Hugging Face model directory", NULL,
     MGT_PATH_MAX, 0},
    {"--save", MGT_FLAG_STR, COFF(save), 0, 0, "import: checkpoint directory to write", NULL,
     MGT_PATH_MAX, 0},
};

static void ckpt_usage(FILE *f) {
  fprintf(f,
          "usage: mgt ckpt info DIR|FILE [--ckpt-iteration K]\n"
          "       mgt ckpt verify DIR|FILE [--ckpt-iteration K]\n"
          "       mgt ckpt export --format hf --load DIR|FILE --output OUT [--max-shard-size B]\n"
          "       mgt ckpt import --format hf --input HF_DIR --save DIR\n");
}

/* Checkpoint tools run on rank 0; the verdict is shared so every rank exits alike. */
int mgt_cli_ckpt(int argc, char **argv, MPI_Comm world) {
  int rank;
  MPI_Comm_rank(world, &rank);
  if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
    if (rank == 0) ckpt_usage(argc < 3 ? stderr : stdout);
    return argc < 3 ? 2 : 0;
  }
  const char *sub = argv[2];
  ckpt_opts o;
  memset(&o, 0, sizeof o);
  o.ckpt_iteration = -1;
  o.max_shard_size = 5000000000; /* Hugging Face's "5GB" */
  int first = 3, help = 0, bad_sub = 0;
  if (!strcmp(sub, "info") || !strcmp(sub, "verify")) {
    if (argc > 3 && strncmp(argv[3], "--", 2) != 0) {
      snprintf(o.load, sizeof o.load, "%s", argv[3]);
      first = 4;
    }
  } else if (strcmp(sub, "export") != 0 && strcmp(sub, "import") != 0) {
    bad_sub = 1;
  }
  mgt_status st = MGT_OK;
  if (bad_sub) {
    static const char *const subs[] = {"info", "verify", "export", "import"};
    const char *near = mgt_nearest(sub, subs, 4);
    if (near)
      st = MGT_ERROR(MGT_ERR_INPUT, "unknown ckpt command '%s' (did you mean mgt ckpt %s?)", sub,
                     near);
    else
      st =
          MGT_ERROR(MGT_ERR_INPUT, "unknown ckpt command '%s' (info, verify, export, import)", sub);
  } else {
    st = mgt_flags_parse(ckpt_flags, sizeof ckpt_flags / sizeof ckpt_flags[0], &o, argc, argv,
                         first, "ckpt", &help);
  }
  if (st == MGT_OK && !help) {
    if (!strcmp(sub, "import")) {
      if (!o.input[0] || !o.save[0]) {
        st = MGT_ERROR(MGT_ERR_INPUT, "mgt ckpt import needs --input HF_DIR and --save DIR");
      }
    } else if (!o.load[0]) {
      st = MGT_ERROR(MGT_ERR_INPUT, "mgt ckpt %s needs a checkpoint%s", sub,
                     !strcmp(sub, "export") ? " (--load)" : " (DIR or FILE)");
    } else if (!strcmp(sub, "export") && !o.output[0]) {
      st = MGT_ERROR(MGT_ERR_INPUT, "mgt ckpt export needs --output");
    }
  }
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  if (help) {
    if (rank == 0) ckpt_usage(stdout);
    return 0;
  }
  int damaged = 0;
  if (rank == 0) {
    char path[MGT_PATH_MAX + 64];
    if (!strcmp(sub, "import")) {
      st = mgt_hf_import(o.input, o.save, stdout);
    } else {
      st = mgt_ckpt_resolve(o.load, o.ckpt_iteration, path, sizeof path);
      if (st == MGT_OK && !strcmp(sub, "info")) st = info(path, stdout);
      if (st == MGT_OK && !strcmp(sub, "verify")) st = verify(path, &damaged);
      if (st == MGT_OK && !strcmp(sub, "export"))
        st = mgt_hf_export(path, o.output, (size_t)o.max_shard_size, stdout);
    }
    fflush(stdout);
  }
  st = mgt_mpi_agree(world, st);
  if (st != MGT_OK) return mgt_cli_fail(st, rank, world, 1);
  MPI_Bcast(&damaged, 1, MPI_INT, 0, world);
  return damaged ? 1 : 0;
}
