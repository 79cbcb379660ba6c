/* Opening a checkpoint's model and its tokenizer for a command: see src/mgt/session.h. */
#include "mgt/session.h"

#include <string.h>

#include "mgt/tasks.h"
#include "mgt/tokenizer.h"
#include "mgt/train.h"

mgt_status mgt_session_open_config(mgt_session *s, const mgt_session_opts *o, MPI_Comm world) {
  memset(s, 0, sizeof *s);
  int size;
  MGT_MPI(MPI_Comm_size(world, &size));
  mgt_status st = mgt_ckpt_resolve(o->load, o->ckpt_iteration, s->path, sizeof s->path);
  if (st == MGT_OK) st = mgt_train_read_checkpoint(s->path, &s->saved, &s->spec, &s->state);
  MGT_CHECK(mgt_mpi_agree(world, st));
  mgt_config *c = &s->cfg;
  *c = s->saved;
  const mgt_model_spec desc = s->spec; /* the checkpoint's */
  if (o->task) {
    MGT_REQUIRE(desc.task == o->task,
                "%s is not a BERT fine-tuned for %s (mgt finetune --task %s writes one)", s->path,
                mgt_task_names[o->task], mgt_task_names[o->task]);
  } else {
    MGT_REQUIRE(mgt_model_generative(&desc),
                "%s holds a %s: mgt generate and the language-model tasks of mgt eval are for "
                "causal language models such as GPT (a fine-tuned BERT is scored with mgt eval "
                "--task RACE, MNLI or QQP)",
                s->path, mgt_model_kinds[desc.kind].title);
  }
  if (o->tokenizer_type >= 0) c->tokenizer_type = o->tokenizer_type;
  if (o->vocab_file && o->vocab_file[0])
    snprintf(c->vocab_file, sizeof c->vocab_file, "%s", o->vocab_file);
  MGT_REQUIRE(!o->task || ((c->tokenizer_type == MGT_TOKENIZER_BERT_LOWER ||
                            c->tokenizer_type == MGT_TOKENIZER_BERT_CASED) &&
                           c->vocab_file[0]),
              "%s names no WordPiece vocabulary (a model imported from Hugging Face has none): "
              "give --tokenizer-type BertWordPieceLowerCase or BertWordPieceCase and --vocab-file",
              s->path);
  c->tensor_model_parallel_size = o->tensor_parallel ? o->tensor_parallel : size;
  if (o->seq_length) c->seq_length = o->seq_length;
  MGT_REQUIRE(c->seq_length <= c->max_position_embeddings,
              "--seq-length %d exceeds the checkpoint's %d positions", c->seq_length,
              c->max_position_embeddings);
  c->micro_batch_size = o->micro_batch_size > 0 ? o->micro_batch_size : 1;
  c->global_batch_size = 0;
  c->use_distributed_optimizer = 0; /* no optimizer: no gradient shard */
  c->device = o->device;
  c->distributed_backend = -1;
  c->cpu_gemm = o->cpu_gemm;
  c->bf16 = o->bf16, c->fp16 = o->fp16; /* the job's, not the training run's */
  c->mock_data = !c->task;              /* nothing is read from a dataset */
  c->data_path[0] = c->load[0] = c->save[0] = c->metrics_file[0] = 0;
  c->train_data[0] = c->valid_data[0] = c->pretrained_checkpoint[0] = 0;
  c->expert_model_parallel_size = 1;       /* every rank holds every expert */
  MGT_CHECK(mgt_config_finalize(c, size)); /* the same verdict on every rank */
  /* the job's layout: forward only (nothing to recompute), its batch, precision and device */
  mgt_model_layout *l = &s->layout;
  l->micro_batch = c->micro_batch_size;
  l->seq_length = c->seq_length;
  l->vocab_multiple = c->make_vocab_size_divisible_by;
  l->recompute = MGT_RECOMPUTE_NONE;
  l->recompute_method = MGT_RECOMPUTE_UNIFORM;
  l->recompute_layers = 1;
  l->flash = mgt_config_flash(c, NULL, 0);
  l->bf16 = c->bf16, l->fp16 = c->fp16;
  l->weight_copies = c->bf16 || c->fp16;
  l->device = c->device;
  l->cpu_gemm = c->cpu_gemm;
  l->logits_chunk_rows = c->logits_chunk_rows;
  return MGT_OK;
}

mgt_status mgt_session_open_model(mgt_session *s, MPI_Comm world) {
  MGT_CHECK(mgt_grid_create(world, s->cfg.tensor_model_parallel_size, &s->grid));
  const mgt_config *c = &s->cfg;
  const mgt_precision prec = c->bf16 ? MGT_PREC_BF16 : (c->fp16 ? MGT_PREC_FP16 : MGT_PREC_FP32);
  MGT_CHECK(mgt_device_open(&s->dev, c->device, -1, c->cpu_gemm, prec, s->grid, NULL));
  snprintf(s->precision, sizeof s->precision, "%s on %s",
           prec == MGT_PREC_BF16 ? "bf16" : (prec == MGT_PREC_FP16 ? "fp16" : "fp32"), s->dev.desc);
  MGT_CHECK(mgt_mpi_agree(
      world, mgt_gpt_create(&s->spec, &s->layout, s->grid, s->dev.be, s->dev.comm, &s->model)));
  mgt_state list = {0};
  mgt_status st = mgt_mpi_agree(world, mgt_gpt_state(s->model, &list));
  if (st == MGT_OK) st = mgt_ckpt_load(s->path, world, &list, &s->state);
  mgt_gpt_weights_changed(s->model);
  mgt_state_fini(&list);
  return st;
}

void mgt_session_close(mgt_session *s) {
  mgt_gpt_destroy(&s->model);
  if (s->dev.be) mgt_device_close(&s->dev);
  mgt_grid_destroy(&s->grid);
}

mgt_status mgt_open_tokenizer(int type, const char *vocab_file, const char *merge_file,
                              const mgt_config *ck, mgt_tokenizer **tok) {
  if (type < 0) type = ck->tokenizer_type;
  const char *v = vocab_file[0] ? vocab_file : ck->vocab_file;
  const char *m = merge_file[0] ? merge_file : ck->merge_file;
  MGT_CHECK(mgt_tok_open(type, v, m, tok));
  if (mgt_tok_vocab_size(*tok) > ck->vocab_size) {
    int n = mgt_tok_vocab_size(*tok);
    mgt_tok_destroy(tok);
    MGT_FAIL(MGT_ERR_INPUT, "the tokenizer has %d ids but the model's vocabulary only %d", n,
             ck->vocab_size);
  }
  return MGT_OK;
}
