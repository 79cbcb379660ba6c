/* AdamW with decoupled weight decay over the flat buffers, and clipping by global norm. */
#pragma once

#include "mgt/backend.h"
#include "mgt/config.h"
#include "mgt/gpt.h"
#include "mgt/comm.h"
#include "mgt/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mgt_optim mgt_optim;

/* What the optimizer does: AdamW's constants, clipping, and fp16's loss scaling (Megatron-LM's
   dynamic grad scaler unless loss_scale is fixed). Weight decay is the model's (its segments). */
typedef struct mgt_optim_options {
  double beta1, beta2, eps;
  double clip_grad;  /* the global norm's bound; 0: no clipping */
  int distributed;   /* the moments of this rank's data-parallel shard only */
  int fp16;          /* the gradients carry a loss scale */
  double loss_scale; /* fp16: a fixed scale; 0: dynamic from initial_loss_scale */
  double initial_loss_scale, min_loss_scale;
  int loss_scale_window; /* iterations without overflow before the scale doubles */
  int hysteresis;        /* overflows tolerated before the scale halves */
  int decoupled;         /* the word embeddings and output layer at a learning rate of their own */
} mgt_optim_options;
/* The options cfg's flags give. */
mgt_optim_options mgt_optim_options_of(const mgt_config *cfg);

/* Allocates the two moment buffers (zeroed) for `model`. Not collective. */
MGT_NODISCARD mgt_status mgt_optim_create(const mgt_optim_options *opt, mgt_gpt *model,
                                          const mgt_backend *be, const mgt_comm *comm,
                                          mgt_optim **out);
void mgt_optim_destroy(mgt_optim **opt);

/* The global gradient norm: each tensor-parallel shard once, each replicated tensor once.
   Gradients must already be averaged over data parallelism. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_optim_grad_norm(mgt_optim *opt, double *norm);

/* Clips by the options' clip_grad and applies one AdamW step at learning rate `lr` (with the
   options' decoupled, the word embeddings and output layer at lr_decoupled). A non-finite
   norm skips the update (*skipped = 1) and leaves the step count. With --fp16 the gradients
   are taken to carry mgt_optim_loss_scale(): the norm reported and clipped is unscaled, and
   the dynamic scale is updated. Collective over tp_comm. */
MGT_NODISCARD mgt_status mgt_optim_step(mgt_optim *opt, double lr, double lr_decoupled,
                                        double *grad_norm, int *skipped);

int64_t mgt_optim_step_count(const mgt_optim *opt);
/* The factor the loss is multiplied by before backward (1 unless --fp16). */
double mgt_optim_loss_scale(const mgt_optim *opt);
/* The dynamic scaler's state for checkpoints (scale 0 unless --fp16), and its restoration
   (ignored without --fp16 or with a fixed --loss-scale). */
void mgt_optim_get_scaler(const mgt_optim *opt, double *scale, int64_t *growth,
                          int64_t *hysteresis);
void mgt_optim_set_scaler(mgt_optim *opt, double scale, int64_t growth, int64_t hysteresis);
void mgt_optim_set_step_count(mgt_optim *opt, int64_t steps);
/* Appends the AdamW moments to `out`: "optimizer/exp_avg/<name>" for every parameter, then
   "optimizer/exp_avg_sq/<name>", with the parameters' slabs and copies. Not collective. */
MGT_NODISCARD mgt_status mgt_optim_state(mgt_optim *opt, mgt_state *out);
/* The same entries for a described model list (mgt_gpt_describe), data NULL. */
MGT_NODISCARD mgt_status mgt_optim_describe(const mgt_state *model, mgt_state *out);

#ifdef __cplusplus
}
#endif
