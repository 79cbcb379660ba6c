/* Flags given where they change nothing, because what they tune is off in this run: noted
   ("--flag: why"), as Megatron-LM's flags that change nothing here are, not refused, since
   Megatron-LM's scripts pass them that way. See include/mgt/config.h. */
#include "mgt/config.h"

#include <stdio.h>
#include <string.h>

#include "mgt/model.h"

typedef struct {
  const char *const *names; /* NULL-ended; a name ending in '-' is a prefix */
  int (*off)(const mgt_config *c);
  const char *why;
} unused_rule;

static int no_save(const mgt_config *c) { return !c->save[0]; }
static int no_load(const mgt_config *c) { return !c->load[0] && !c->pretrained_checkpoint[0]; }
static int no_fp16(const mgt_config *c) { return !c->fp16; }
static int no_rope(const mgt_config *c) { return c->position_embedding_type != MGT_POS_ROPE; }
static int no_scaling(const mgt_config *c) { return !c->use_rope_scaling; }
static int not_bert(const mgt_config *c) { return c->model != MGT_MODEL_BERT; }
static int dense(const mgt_config *c) { return c->num_experts == 0; }
static int with_biases(const mgt_config *c) { return !c->disable_bias_linear; }
static int fp32(const mgt_config *c) { return !c->bf16 && !c->fp16; }
static int sft(const mgt_config *c) { return c->sft; }

static const char *const saving[] = {"--save-interval", "--keep-last", "--no-save-optim",
                                     "--async-save", NULL};
static const char *const loading[] = {"--ckpt-iteration",
                                      "--no-load-optim",
                                      "--no-load-rng",
                                      "--finetune",
                                      "--exit-on-missing-checkpoint",
                                      NULL};
static const char *const scaling[] = {"--loss-scale",     "--initial-loss-scale",
                                      "--min-loss-scale", "--loss-scale-window",
                                      "--hysteresis",     NULL};
static const char *const rope[] = {"--rotary-base", NULL};
static const char *const rope_factor[] = {"--rope-scaling-factor", NULL};
static const char *const bert[] = {"--mask-prob", "--short-seq-prob", NULL};
static const char *const moe[] = {"--moe-", NULL};
static const char *const qkv_bias[] = {"--add-qkv-bias", NULL};
static const char *const copies[] = {"--no-weight-copies", NULL};
static const char *const resets[] = {"--reset-position-ids", "--reset-attention-mask",
                                     "--dataloader-inter-document-masking", NULL};

static const unused_rule rules[] = {
    {saving, no_save, "without --save no checkpoint is written"},
    {loading, no_load, "without --load (or --pretrained-checkpoint) nothing is loaded"},
    {scaling, no_fp16, "loss scaling is --fp16's (bf16 and fp32 need none)"},
    {rope, no_rope, "the model has no rotary positions (--position-embedding-type rope)"},
    {rope_factor, no_scaling, "the rotary frequencies are not rescaled without --use-rope-scaling"},
    {bert, not_bert, "BERT's samples only (--model bert)"},
    {moe, dense, "a dense model: no experts without --num-experts"},
    {qkv_bias, with_biases, "every linear layer has biases without --disable-bias-linear"},
    {copies, fp32, "an fp32 run keeps no 16-bit weight copies"},
    {resets, sft,
     "--sft keeps the packed documents apart by their starts (positions and attention), not by "
     "an end-of-document token, which in conversations ends every turn"},
};

/* Whether the list "--a, --b" holds the flag name[0..l). */
static int listed(const char *list, const char *name, size_t l) {
  for (const char *s = strstr(list, "--"); s; s = strstr(s + 2, "--"))
    if (!strncmp(s, name, l) && (s[l] == 0 || s[l] == ',')) return 1;
  return 0;
}

/* The flag of argv[i] when it is `name` or starts with the prefix `name`. */
static int names(const char *arg, const char *name) {
  const size_t n = strlen(name);
  if (name[n - 1] == '-') return !strncmp(arg, name, n);
  return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

void mgt_config_note_unused(mgt_config *c, int argc, char **argv, int first) {
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
    if (!rules[r].off(c)) continue;
    char line[512] = "";
    size_t n = 0;
    for (int i = first; i < argc; i++) {
      if (strncmp(argv[i], "--", 2)) continue;
      for (const char *const *f = rules[r].names; *f; f++) {
        const size_t l = strcspn(argv[i], "=");
        if (!names(argv[i], *f) || l + 3 >= sizeof line - n) continue;
        if (!listed(line, argv[i], l)) /* given twice: once */
          n +=
              (size_t)snprintf(line + n, sizeof line - n, "%s%.*s", n ? ", " : "", (int)l, argv[i]);
      }
    }
    const size_t used = strlen(c->notes);
    if (n && used + n + strlen(rules[r].why) + 4 < sizeof c->notes)
      snprintf(c->notes + used, sizeof c->notes - used, "%s: %s\n", line, rules[r].why);
  }
}
