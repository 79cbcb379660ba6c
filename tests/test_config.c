/* Flag parsing, validation messages and the learning-rate schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgt/config.h"
#include "mgt/model.h"
#include "testutil.h"

static mgt_status parse(mgt_config *c, const char *line) {
  char buf[1024], *argv[64];
  int argc = 0;
  snprintf(buf, sizeof buf, "mgt train %s", line);
  for (char *t = strtok(buf, " "); t && argc < 64; t = strtok(NULL, " "))
    argv[argc++] = t;
  mgt_config_defaults(c);
  int help = 0;
  mgt_error_clear();
  return mgt_config_parse(c, argc, argv, 2, &help);
}

static void expect_error(const char *line, int world, const char *needle) {
  mgt_config c;
  mgt_status st = parse(&c, line);
  if (st == MGT_OK) st = mgt_config_finalize(&c, world);
  T_CHECK(st == MGT_ERR_INPUT, "'%s' was accepted", line);
  T_CHECK(strstr(mgt_error_message(), needle) != NULL, "'%s': message '%s' lacks '%s'", line,
          mgt_error_message(), needle);
  T_CHECK(strchr(mgt_error_message(), '\n') == NULL, "'%s': message is not one line", line);
}

static void test_parse(void) {
  mgt_config c;
  T_CHECK(parse(&c, "--num-layers 3 --hidden-size=96 --num-attention-heads 6 --lr 1e-4 "
                    "--lr-decay-style cosine --mock-data --seed 7") == MGT_OK,
          "valid flags rejected: %s", mgt_error_message());
  T_CHECK(c.num_layers == 3 && c.hidden_size == 96 && c.num_attention_heads == 6 && c.lr == 1e-4 &&
              c.lr_decay_style == MGT_LR_COSINE && c.mock_data && c.seed == 7,
          "parsed values wrong");
  T_CHECK(mgt_config_finalize(&c, 4) == MGT_OK, "finalize: %s", mgt_error_message());
  mgt_config m;
  T_CHECK(parse(&m, "--dataloader-inter-document-masking") == MGT_OK && m.reset_attention_mask,
          "Megatron-LM's --dataloader-inter-document-masking is not --reset-attention-mask");
  T_CHECK(c.ffn_hidden_size == 384 && c.global_batch_size == 4 * c.micro_batch_size &&
              c.max_position_embeddings == c.seq_length && c.lr_decay_iters == c.train_iters,
          "derived defaults wrong");
}

static void test_errors(void) {
  expect_error("--hiden-size 64 --mock-data", 1, "did you mean --hidden-size");
  expect_error("--bogus", 1, "unknown flag '--bogus'");
  expect_error("--mock-data --hidden-size", 1, "--hidden-size: missing value");
  expect_error("--mock-data --hidden-size 12x", 1, "--hidden-size: expected an integer, got '12x'");
  expect_error("--mock-data --hidden-size 0", 1, "--hidden-size: 0 is out of range");
  expect_error("--mock-data --lr abc", 1, "--lr: expected a number");
  expect_error("--mock-data --lr nan", 1, "--lr: expected a number");
  expect_error("--mock-data --hidden-dropout 1.5", 1, "--hidden-dropout");
  expect_error("--mock-data --lr-decay-style step", 1,
               "--lr-decay-style: expected one of constant, linear, cosine, got 'step'");
  expect_error("--mock-data --data-path a.h5", 1, "--mock-data and --data-path exclude each other");
  expect_error("--data-path", 1, "--data-path: missing value");
  expect_error("--data-path x --split 1,2,x", 1, "--split '1,2,x': expected up to three");
  expect_error("--data-path x --split 0,0,0", 1, "the weights sum to zero");
  expect_error("--data-path x --merge-file m.txt", 1, "--merge-file needs --vocab-file");
  expect_error("--mock-data --mock-data=1", 1, "--mock-data takes no value");
  expect_error("positional", 1, "unexpected argument 'positional'");
  expect_error("--mock-data --hidden-size 100 --num-attention-heads 3", 1,
               "--hidden-size 100 is not divisible by --num-attention-heads 3");
  expect_error("--mock-data --tensor-model-parallel-size 2", 3,
               "--tensor-model-parallel-size 2 does not divide the number of ranks 3");
  expect_error("--mock-data --num-attention-heads 4 --tensor-model-parallel-size 8", 8,
               "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 8");
  expect_error("--mock-data --ffn-hidden-size 30 --tensor-model-parallel-size 4", 4,
               "--ffn-hidden-size 30 is not divisible");
  expect_error("--mock-data --micro-batch-size 4 --global-batch-size 6", 2,
               "--global-batch-size 6 is not divisible by --micro-batch-size 4 times the "
               "data-parallel size 2");
  expect_error("--mock-data --seq-length 64 --max-position-embeddings 32", 1,
               "--seq-length 64 exceeds --max-position-embeddings 32");
  expect_error("--mock-data --lr 1e-4 --min-lr 1e-3", 1, "--min-lr 0.001 exceeds --lr 0.0001");
  expect_error("", 1, "no training data: pass --data-path or --mock-data");
}

static void test_lists(void) {
  mgt_config c;
  T_CHECK(parse(&c, "--data-path 0.3 a 0.7 b --seq-length 8 --split 90,9,1") == MGT_OK,
          "list flag rejected: %s", mgt_error_message());
  T_CHECK(strcmp(c.data_path, "0.3\na\n0.7\nb") == 0 && c.seq_length == 8, "list value '%s'",
          c.data_path);
  double w[3];
  T_CHECK(mgt_split_parse(c.split, w) == MGT_OK && fabs(w[0] - 0.9) < 1e-12 &&
              fabs(w[1] - 0.09) < 1e-12 && fabs(w[2] - 0.01) < 1e-12,
          "split fractions %g %g %g", w[0], w[1], w[2]);
  T_CHECK(mgt_split_parse("969, 30, 1", w) == MGT_OK && fabs(w[0] - 0.969) < 1e-12,
          "default split");
  T_CHECK(mgt_split_parse("1", w) == MGT_OK && w[0] == 1 && w[1] == 0, "single weight");
}

static void test_schedule(void) {
  mgt_config c;
  mgt_config_defaults(&c);
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.lr_warmup_iters = 10;
  c.lr_decay_iters = 110;
  c.lr_decay_style = MGT_LR_LINEAR;
#define LR(it) (s = mgt_lr_schedule_of(&c), mgt_lr_at(&s, it))
  mgt_lr_schedule s;
  T_CHECK(fabs(LR(1) - 0.1) < 1e-12, "warmup 1: %g", LR(1));
  T_CHECK(fabs(LR(10) - 1.0) < 1e-12, "warmup end: %g", LR(10));
  T_CHECK(fabs(LR(60) - 0.55) < 1e-12, "linear middle: %g", LR(60));
  T_CHECK(fabs(LR(110) - 0.1) < 1e-12, "linear end: %g", LR(110));
  T_CHECK(fabs(LR(500) - 0.1) < 1e-12, "after decay: %g", LR(500));
  c.lr_decay_style = MGT_LR_COSINE;
  T_CHECK(fabs(LR(60) - 0.55) < 1e-12, "cosine middle: %g", LR(60));
  T_CHECK(fabs(LR(35) - (0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * 0.25)))) < 1e-12,
          "cosine quarter: %g", LR(35));
  c.lr_decay_style = MGT_LR_CONSTANT;
  T_CHECK(LR(5) == 0.5 && LR(1000) == 1.0, "constant");
#undef LR
}

/* Megatron-LM's schedule in samples: its scheduler steps by the global batch, the warmup and
   decay counted in samples; the run is the whole global batches of --train-samples. */
static void test_schedule_samples(void) {
  mgt_config c;
  T_CHECK(parse(&c,
                "--mock-data --micro-batch-size 2 --global-batch-size 4 --train-samples 402 "
                "--lr 1.0 --min-lr 0.1 --lr-warmup-samples 40 --lr-decay-samples 400") == MGT_OK &&
              mgt_config_finalize(&c, 1) == MGT_OK,
          "sample-based flags: %s", mgt_error_message());
  T_CHECK(c.train_iters == 100, "402 samples of 4 per batch: %lld iterations",
          (long long)c.train_iters);
  const mgt_lr_schedule s = mgt_lr_schedule_of(&c);
  /* iteration i has consumed 4 i samples: warmup 4i/40, then linear from 40 to 400 */
  const double want[][2] = {{1, 0.1},   {5, 0.5},  {10, 1.0}, {55, 0.1 + 0.9 * (1 - 180.0 / 360)},
                            {100, 0.1}, {101, 0.1}};
  for (int k = 0; k < 6; k++)
    T_CHECK(fabs(mgt_lr_at(&s, (int64_t)want[k][0]) - want[k][1]) < 1e-12,
            "iteration %g: lr %g, want %g", want[k][0], mgt_lr_at(&s, (int64_t)want[k][0]),
            want[k][1]);
  T_CHECK(parse(&c, "--mock-data --micro-batch-size 2 --global-batch-size 4 --train-samples 400 "
                    "--lr-warmup-fraction 0.25") == MGT_OK &&
              mgt_config_finalize(&c, 1) == MGT_OK && mgt_config_finalize(&c, 1) == MGT_OK,
          "--lr-warmup-fraction with samples: %s", mgt_error_message());
  T_CHECK(c.lr_decay_samples == 400 && c.lr_warmup_samples == 100 && c.lr_decay_iters == 0,
          "decay %lld, warmup %lld samples", (long long)c.lr_decay_samples,
          (long long)c.lr_warmup_samples);
  T_CHECK(parse(&c, "--mock-data --micro-batch-size 2 --global-batch-size 4 --train-samples 400 "
                    "--lr 1.0 --min-lr 0.1 --lr-warmup-samples 40 --decoupled-lr 3.0 "
                    "--decoupled-min-lr 0.3") == MGT_OK &&
              mgt_config_finalize(&c, 1) == MGT_OK,
          "--decoupled-lr: %s", mgt_error_message());
  const mgt_lr_schedule dec = mgt_lr_schedule_decoupled(&c);
  /* the same warmup and decay, from 3.0 to 0.3 */
  T_CHECK(fabs(mgt_lr_at(&dec, 5) - 1.5) < 1e-12 && fabs(mgt_lr_at(&dec, 55) - 1.65) < 1e-12 &&
              fabs(mgt_lr_at(&dec, 100) - 0.3) < 1e-12,
          "decoupled: %g %g %g", mgt_lr_at(&dec, 5), mgt_lr_at(&dec, 55), mgt_lr_at(&dec, 100));
  expect_error("--mock-data --train-samples 400 --train-iters 10", 1,
               "give one of --train-iters and --train-samples");
  expect_error("--mock-data --train-samples 400 --lr-warmup-iters 10", 1,
               "--train-samples schedules the learning rate in samples");
  expect_error("--mock-data --lr-decay-samples 400", 1,
               "--lr-decay-samples and --lr-warmup-samples need --train-samples");
  expect_error("--mock-data --micro-batch-size 4 --train-samples 3", 1,
               "--train-samples 3 is less than one global batch of 4");
}

/* The iterations of --train-samples under a ramp-up or a step schedule, counted in bands,
   against Megatron-LM's count one iteration at a time, on random schedules. */
static int64_t iterations_one_by_one(const mgt_batch_schedule *s, int64_t samples, int gbs) {
  int64_t it = 0, consumed = 0;
  if (s->has_ramp) {
    while (consumed <= s->ramp[2] && consumed <= samples)
      consumed += mgt_batch_at(s, (uint64_t)consumed), it++;
    if (samples > consumed) it += (samples - consumed) / gbs;
  } else {
    while (consumed < samples)
      consumed += mgt_batch_at(s, (uint64_t)consumed), it++;
  }
  return it;
}

static void test_batch_counts(void) {
  srand(7);
  for (int trial = 0; trial < 3000; trial++) {
    mgt_config c;
    mgt_config_defaults(&c);
    c.micro_batch_size = 1, c.seq_length = 8, c.mock_data = 1;
    c.train_samples = 1 + rand() % 5000;
    if (trial % 2) {
      const int start = 1 + rand() % 9, inc = 1 + rand() % 7, steps = rand() % 12;
      c.global_batch_size = start + inc * steps;
      snprintf(c.rampup_batch_size, sizeof c.rampup_batch_size, "%d\n%d\n%d", start, inc,
               1 + rand() % 3000);
    } else {
      int th = 0, n = 0, batch = 0; /* batches that never fall */
      for (int k = 0, k_n = 1 + rand() % 5; k < k_n; k++, th += 8 * (1 + rand() % 400))
        n += snprintf(c.step_batch_size_schedule + n, sizeof c.step_batch_size_schedule - n,
                      "%s%d:%d", k ? "\n" : "", th, batch += 1 + rand() % 10);
      c.global_batch_size = 0;
    }
    mgt_batch_schedule s;
    const mgt_status st = mgt_config_batches(&c, 1, &s);
    T_CHECK(st == MGT_OK, "trial %d: %s", trial, mgt_error_message());
    if (st != MGT_OK) continue;
    const int64_t want = iterations_one_by_one(&s, c.train_samples, c.global_batch_size);
    T_CHECK(c.train_iters == want, "trial %d (%s%s): %lld iterations, one by one %lld", trial,
            c.rampup_batch_size, c.step_batch_size_schedule, (long long)c.train_iters,
            (long long)want);
  }
  /* 9e15 samples counted at once, not looped over (this test would not end) */
  mgt_config c;
  T_CHECK(parse(&c, "--mock-data --micro-batch-size 1 --global-batch-size 8 --train-samples "
                    "9000000000000000 --rampup-batch-size 1 1 8999999999999999") == MGT_OK &&
              mgt_config_finalize(&c, 1) == MGT_OK,
          "a ramp of 9e15 samples: %s", mgt_error_message());
  /* 1000 samples (8000 tokens of 8) one at a time, then batches of 8 */
  T_CHECK(parse(&c, "--mock-data --micro-batch-size 1 --seq-length 8 --train-samples "
                    "9000000000000000 --step-batch-size-schedule 0:1 8000:8") == MGT_OK &&
              mgt_config_finalize(&c, 1) == MGT_OK &&
              c.train_iters == 1000 + (9000000000000000 - 1000 + 7) / 8,
          "a step schedule over 9e15 samples: %lld iterations (%s)", (long long)c.train_iters,
          mgt_error_message());
  expect_error("--mock-data --step-batch-size-schedule 0:4294967296", 1,
               "the batch is not an integer in [1, 2^30]");
  expect_error("--mock-data --step-batch-size-schedule 0:2.9", 1, "the batch is not an integer");
  expect_error("--mock-data --micro-batch-size 2 --step-batch-size-schedule 0:64,512:2", 1,
               "the batch 64 before the last exceeds it (2)");
  expect_error("--mock-data --train-samples 8 --global-batch-size 4 --rampup-batch-size 2 2 "
               "99999999999999999999",
               1, "three integers");
}

/* The model description of each kind and head against a hand-written table, and the
   combinations no code runs refused by name. */
static void test_model_desc(void) {
  static const struct {
    const char *flags;
    int kind, input, head, causal, token_types, pooler, logits, classes, rows, masked, post_ln;
  } want[] = {
      {"--mock-data", MGT_MODEL_GPT, MGT_INPUT_WINDOWS, MGT_HEAD_CAUSAL_LM, 1, 0, 0, 0, 0, 1, 0, 0},
      {"--model bert --mock-data --seq-length 64", MGT_MODEL_BERT, MGT_INPUT_SAMPLES,
       MGT_HEAD_MLM_SOP, 0, 1, 1, 2, 2, 1, 1, 0},
      {"--model bert --mock-data --bert-no-binary-head --apply-residual-connection-post-layernorm",
       MGT_MODEL_BERT, MGT_INPUT_SAMPLES, MGT_HEAD_MLM, 0, 0, 0, 2, 2, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    mgt_config c;
    mgt_model_spec d;
    T_CHECK(parse(&c, want[i].flags) == MGT_OK && mgt_config_finalize(&c, 1) == MGT_OK, "'%s': %s",
            want[i].flags, mgt_error_message());
    T_CHECK(mgt_model_describe(&c, &d) == MGT_OK, "'%s': %s", want[i].flags, mgt_error_message());
    T_CHECK(d.kind == want[i].kind && (int)d.input == want[i].input &&
                (int)d.head == want[i].head && d.causal == want[i].causal &&
                d.token_types == want[i].token_types && d.pooler == want[i].pooler &&
                d.logits == want[i].logits && d.classes == want[i].classes &&
                d.rows == want[i].rows && (d.max_predictions > 0) == want[i].masked &&
                d.post_ln == want[i].post_ln,
            "'%s': description differs from the table", want[i].flags);
    T_CHECK(mgt_model_has_lm(&d) && mgt_model_generative(&d) == (want[i].head == 0),
            "'%s': LM and generative", want[i].flags);
  }
  /* fine-tuning heads: RACE scores 4 rows of one logit, MNLI 3 classes, QQP 2 */
  const int tasks[3] = {MGT_TASK_RACE, MGT_TASK_MNLI, MGT_TASK_QQP};
  const int heads[3] = {MGT_HEAD_MULTIPLE_CHOICE, MGT_HEAD_CLASSIFY, MGT_HEAD_CLASSIFY};
  const int rows[3] = {4, 1, 1}, logits[3] = {1, 3, 2}, classes[3] = {4, 3, 2};
  for (int k = 0; k < 3; k++) {
    mgt_config c;
    mgt_model_spec d;
    mgt_config_defaults(&c);
    c.model = MGT_MODEL_BERT, c.task = tasks[k];
    T_CHECK(mgt_model_describe(&c, &d) == MGT_OK, "task %d: %s", k, mgt_error_message());
    T_CHECK((int)d.head == heads[k] && d.rows == rows[k] && d.logits == logits[k] &&
                d.classes == classes[k] && d.pooler && d.token_types && !d.masked_lm &&
                !mgt_model_has_lm(&d),
            "task %s: description differs", mgt_task_names[tasks[k]]);
  }
  /* refused: a task on a kind without one, BERT flags on GPT, a kind not in the table */
  mgt_config c;
  mgt_model_spec d;
  mgt_config_defaults(&c);
  c.task = MGT_TASK_MNLI;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "takes no fine-tuning head"),
          "a task on GPT: %s", mgt_error_message());
  mgt_config_defaults(&c);
  c.apply_residual_connection_post_layernorm = 1;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT && strstr(mgt_error_message(), "BERT flags"),
          "post-LN on GPT: %s", mgt_error_message());
  mgt_config_defaults(&c);
  c.model = MGT_MODEL_BERT, c.untie_embeddings_and_output_weights = 1;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "only a causal language model"),
          "an untied BERT: %s", mgt_error_message());
  mgt_config_defaults(&c);
  c.untie_embeddings_and_output_weights = 1;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_OK && d.untied, "an untied GPT: %s",
          mgt_error_message());
  /* Llama's block: the description, SwiGLU's default width (Megatron-LM's: 8/3 of the hidden
     size rounded down to a multiple of 64; 4096 gives 10880), and the groups' divisibility */
  mgt_config_defaults(&c);
  c.normalization = MGT_NORM_RMSNORM, c.swiglu = 1, c.disable_bias_linear = 1;
  c.num_attention_heads = 32, c.group_query_attention = 1, c.num_query_groups = 8;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_OK && d.norm == MGT_NORM_RMSNORM &&
              d.mlp == MGT_MLP_SWIGLU && !d.bias && d.groups == 8,
          "Llama's block described: %s", mgt_error_message());
  const int widths[][2] = {{4096, 10880}, {64, 128}, {16, 64}, {2048, 5440}};
  for (int i = 0; i < 4; i++) {
    c.hidden_size = widths[i][0], c.ffn_hidden_size = 0;
    mgt_config_derive(&c);
    T_CHECK(c.ffn_hidden_size == widths[i][1], "SwiGLU's width at hidden %d: %d, want %d",
            widths[i][0], c.ffn_hidden_size, widths[i][1]);
  }
  c.hidden_size = 256, c.mock_data = 1, c.vocab_size = 64, c.tensor_model_parallel_size = 16;
  T_CHECK(mgt_config_finalize(&c, 16) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "--num-query-groups 8 is not divisible by "
                                          "--tensor-model-parallel-size 16"),
          "8 groups on 16 ranks: %s", mgt_error_message());
  c.num_query_groups = 5;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "--num-query-groups 5 does not divide"),
          "5 groups of 32 heads: %s", mgt_error_message());
  c.group_query_attention = 0;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "needs --group-query-attention"),
          "groups without grouped attention: %s", mgt_error_message());
  mgt_config_defaults(&c);
  c.model = mgt_n_model_kinds;
  T_CHECK(mgt_model_describe(&c, &d) == MGT_ERR_INPUT &&
              strstr(mgt_error_message(), "no model kind"),
          "an unknown kind: %s", mgt_error_message());
  T_CHECK(strcmp(mgt_model_kinds[MGT_MODEL_GPT].name, mgt_model_names[MGT_MODEL_GPT]) == 0 &&
              strcmp(mgt_model_kinds[MGT_MODEL_BERT].name, mgt_model_names[MGT_MODEL_BERT]) == 0,
          "the kinds table and the --model names disagree");
}

/* The spec as text (a checkpoint's model section) reads back as the same spec for every kind
   and head, and any field changed is found by mgt_model_spec_diff. */
static void test_spec_text(void) {
  const char *const runs[] = {
      "--mock-data",
      "--mock-data --num-layers 3 --hidden-size 64 --num-attention-heads 8 --swiglu "
      "--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
      "--use-rope-scaling --rope-scaling-factor 32 --group-query-attention --num-query-groups 2 "
      "--disable-bias-linear --untie-embeddings-and-output-weights --norm-epsilon 1e-5",
      "--model bert --mock-data --seq-length 64 --init-method-std 0.0125",
      "--model bert --mock-data --bert-no-binary-head --apply-residual-connection-post-layernorm",
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    mgt_config c;
    mgt_model_spec a, b;
    char diff[160];
    T_CHECK(parse(&c, runs[i]) == MGT_OK && mgt_config_finalize(&c, 1) == MGT_OK &&
                mgt_model_describe(&c, &a) == MGT_OK,
            "'%s': %s", runs[i], mgt_error_message());
    char *text = mgt_model_spec_to_text(&a);
    T_CHECK(text && mgt_model_spec_from_text(text, &b, "test") == MGT_OK, "'%s': %s", runs[i],
            mgt_error_message());
    T_CHECK(!mgt_model_spec_diff(&a, &b, diff, sizeof diff), "'%s': read back with %s", runs[i],
            diff);
    b.rope_factor += 1e-9;
    T_CHECK(mgt_model_spec_diff(&a, &b, diff, sizeof diff) &&
                strncmp(diff, "rope_factor ", 12) == 0,
            "'%s': a changed rope_factor is not found", runs[i]);
    free(text);
  }
}

int main(void) {
  test_parse();
  test_errors();
  test_lists();
  test_schedule();
  test_schedule_samples();
  test_batch_counts();
  test_model_desc();
  test_spec_text();
  return t_report("test_config");
}
