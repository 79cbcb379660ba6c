/* The model object: creation (parameters, buffers, the activation arena, the data-parallel
   plan), destruction and accessors. */
#include "mgt/gpt_impl.h"

/* Sequence parallelism: every rank's block of rows, of C floats each. */
static mgt_status plan_rows(mgt_gpt *m) {
  const mgt_gpt_dims *d = &m->d;
  MGT_REQUIRE((size_t)d->Nl * d->C <= INT_MAX,
              "--sequence-parallel: %d rows of %d floats exceed MPI's count limit", d->Nl, d->C);
  MGT_CHECK(mgt_calloc(sizeof(int) * (size_t)d->tp, "row blocks", (void **)&m->sp_counts));
  for (int q = 0; q < d->tp; q++)
    m->sp_counts[q] = d->Nl * d->C;
  m->tp.sp_counts = m->sp_counts;
  return MGT_OK;
}

/* Bucket b's parameters [*first, *last): 0 the final LayerNorm and heads, b = 1..L layer L - b,
   L + 1 the embeddings, the order backward completes them (src/parallel/ddp.c sums them). */
static void bucket_range(const mgt_gpt *m, int b, int *first, int *last) {
  const int L = m->d.L;
  if (b == 0) { /* final LayerNorm and the heads */
    *first = m->ix.lnf, *last = m->n_params;
  } else if (b <= L) { /* layer L - b */
    int n;
    *first = gpt_layer_first(m, L - b, &n), *last = *first + n;
  } else { /* embeddings: complete only after the embedding backward */
    *first = m->ix.wte, *last = m->ix.first_layer;
  }
}

/* The data-parallel plan of m->run (remade when a trainer gives its options). */
static mgt_status create_ddp(mgt_gpt *m) {
  mgt_ddp_destroy(&m->ddp);
  const int nb = m->d.L + 2;
  size_t *lo = NULL, *hi = NULL;
  mgt_status st = mgt_calloc(sizeof(size_t) * 2 * (size_t)nb, "buckets", (void **)&lo);
  if (st != MGT_OK) return st;
  hi = lo + nb;
  for (int b = 0; b < nb; b++) {
    int first, last;
    bucket_range(m, b, &first, &last);
    lo[b] = m->params[first].offset;
    hi[b] = m->params[last - 1].offset + m->params[last - 1].numel;
  }
  /* each expert tensor, summed over the ranks that hold the same experts */
  size_t *elo = NULL, *ehi = NULL;
  int ne = 0;
  for (int i = 0; m->grid->ep > 1 && i < m->n_params; i++) /* else the same ranks as the rest */
    ne += m->params[i].expert;
  if (ne) st = mgt_calloc(sizeof(size_t) * 2 * (size_t)ne, "expert ranges", (void **)&elo);
  if (st != MGT_OK) {
    mgt_free(lo);
    return st;
  }
  ehi = elo + ne, ne = 0;
  for (int i = 0; m->grid->ep > 1 && i < m->n_params; i++)
    if (m->params[i].expert)
      elo[ne] = m->params[i].offset, ehi[ne++] = m->params[i].offset + m->params[i].numel;
  const mgt_ddp_opts o = {m->run.ddp_bucket_size,
                          m->run.overlap_grad_reduce,
                          m->run.distributed_optimizer,
                          m->run.overlap_param_gather,
                          m->weight_copies,
                          ne,
                          elo,
                          ehi};
  st = mgt_ddp_create(m->grid, m->comm, m->be, m->w, m->g, m->n_floats, nb, lo, hi, &o, &m->ddp);
  mgt_free(lo);
  mgt_free(elo);
  return st;
}

void mgt_gpt_weights_changed(mgt_gpt *m) {
  if (m->ddp) mgt_ddp_weights_changed(m->ddp);
}

int mgt_gpt_weight_copies(const mgt_gpt *m) { return m->weight_copies; }

void mgt_gpt_copies_fresh(mgt_gpt *m) {
  if (m->ddp) mgt_ddp_copies_fresh(m->ddp);
}

float *mgt_gpt_grad_shard(mgt_gpt *m, const mgt_span **spans, int *n_spans, size_t *n) {
  return mgt_ddp_grad_shard(m->ddp, spans, n_spans, n);
}

mgt_status mgt_gpt_gather_params(mgt_gpt *m) { return mgt_ddp_gather_params(m->ddp); }

/* Gradient elements per data-parallel all-reduce until a trainer says (mgt train's default). */
enum { DEFAULT_BUCKET = 4194304 };

mgt_status mgt_gpt_create(const mgt_model_spec *spec, const mgt_model_layout *layout,
                          const mgt_grid *grid, const mgt_backend *be, const mgt_comm *comm,
                          mgt_gpt **out) {
  *out = NULL;
  mgt_status st = MGT_OK;
  mgt_gpt *m = NULL;
  MGT_CHECK(mgt_calloc(sizeof *m, "model", (void **)&m));
  m->layout = *layout;
  m->run.ddp_bucket_size = DEFAULT_BUCKET;
  m->run.eod_mask = m->run.reset_positions = m->run.reset_attention = -1; /* as in one document,
                                                                            until a trainer says */
  m->grid = grid;
  m->be = be;
  m->comm = comm;
  m->tp.be = be;
  m->tp.comm = comm;
  m->tp.grid = grid;
  mgt_gpt_dims_of(spec, layout, grid->tp, grid->tp_rank, &m->d);
  /* the CPU keeps them in floats, or in bf16 itself under native bf16 GEMMs: its backend says */
  if (m->d.act16 && layout->device == MGT_DEVICE_CPU && !strcmp(mgt_be_name(be), "cpu"))
    m->d.act16 = mgt_be_act16_bytes(be);
  MGT_GOTO_REQUIRE(m->d.ep == grid->ep, "a model of %d expert-parallel ranks on a grid of %d",
                   m->d.ep, grid->ep);
  gpt_dims_set_expert_rank(&m->d, grid->ep_rank);
  const mgt_gpt_dims *d = &m->d;
  if (layout->flash && !mgt_be_has(be, MGT_BE_FLASH_ATTENTION_FORWARD))
    MGT_GOTO_FAIL(MGT_ERR_INPUT, "--attention-backend flash: this backend has no flash attention");

  gpt_build_params(d, NULL, &m->n_params, &m->n_floats, NULL);
  MGT_TRY(
      mgt_calloc(sizeof *m->params * (size_t)m->n_params, "parameter table", (void **)&m->params));
  gpt_build_params(d, m->params, &m->n_params, &m->n_floats, &m->ix);
  MGT_TRY(
      mgt_calloc(sizeof *m->segs * (size_t)m->n_params, "optimizer segments", (void **)&m->segs));
  for (int i = 0; i < m->n_params; i++) {
    const mgt_param *p = &m->params[i];
    m->segs[i].offset = p->offset;
    m->segs[i].n = p->numel;
    m->segs[i].count_in_norm = gpt_replica_of(p, grid->tp_rank, 0, 1) != MGT_REPLICA_DUPLICATE;
    m->segs[i].expert = p->expert;
  }
  size_t bytes = m->n_floats * sizeof(float);
  MGT_TRY(mgt_be_alloc(be, bytes, "parameters", (void **)&m->w));
  MGT_TRY(mgt_be_alloc(be, bytes, "gradients", (void **)&m->g));
  MGT_TRY(mgt_be_zero(be, m->w, bytes));

  MGT_TRY(mgt_calloc(sizeof(float *) * (size_t)(d->L + 1), "residual views", (void **)&m->res));
  m->rp = gpt_recompute_plan(layout, d->L);
  MGT_TRY(mgt_calloc(sizeof(layer_acts) * (size_t)(m->rp.nsets ? m->rp.nsets : 1),
                     "activation views", (void **)&m->acts));
  {
    mgt_gpt probe;
    memset(&probe, 0, sizeof probe);
    size_t floats = gpt_layout_activations(&probe, d, &m->rp);
    MGT_TRY(mgt_be_alloc(be, floats * sizeof(float), "activations", &m->arena));
    gpt_layout_activations(m, d, &m->rp);
  }
  MGT_TRY(gpt_moe_create(m));
  const int widest = d->C > d->Cl ? d->C : d->Cl; /* full-width q/k norms: Cl at tp = 1 */
  if (d->spec.norm_1p)
    MGT_TRY(mgt_be_alloc(be, sizeof(float) * (size_t)(widest > d->hd ? widest : d->hd),
                         "norm gains", (void **)&m->gain));
  if (d->act16) {
    if (!mgt_be_has(be, MGT_BE_SET_ACT16) || mgt_be_act16_bytes(be) != d->act16)
      MGT_GOTO_FAIL(MGT_ERR_INPUT,
                    "--bf16/--fp16: backend %s keeps 16-bit activations in %d bytes, --device %s "
                    "in %d: create the model on the backend of its --device",
                    mgt_be_name(be), mgt_be_act16_bytes(be), mgt_device_names[layout->device],
                    d->act16);
    MGT_TRY(mgt_be_set_act16(be, m->act16, m->act16_bytes));
  }
  MGT_TRY(mgt_calloc(sizeof(int32_t) * 3 * (size_t)d->B * d->T, "token staging",
                     (void **)&m->host_tokens));
  if (m->inv_freq) {
    float f[d->hd / 2];
    mgt_gpt_rope_frequencies(&d->spec, f);
    MGT_TRY(mgt_be_upload(be, m->inv_freq, f, sizeof f));
  }
  if (d->spec.input == MGT_INPUT_SAMPLES) {
    MGT_TRY(mgt_calloc(sizeof(int32_t) * (2 * (size_t)d->B * d->spec.max_predictions + 1),
                       "masked-row staging", (void **)&m->host_rows));
    MGT_TRY(mgt_calloc(sizeof(int32_t) * 4 * (size_t)d->B, "sample staging", (void **)&m->host_b));
    for (int b = 0; b < d->B; b++) /* [CLS] is position 0 of every sample */
      m->host_b[b] = b * d->T;
    MGT_TRY(mgt_be_upload(be, m->cls_rows, m->host_b, sizeof(int32_t) * (size_t)d->B));
  }
  if (d->sp) MGT_TRY(plan_rows(m));
  m->weight_copies = layout->weight_copies && mgt_be_has(be, MGT_BE_SET_WEIGHTS);
  MGT_TRY(create_ddp(m));
  if (m->weight_copies) MGT_TRY(mgt_be_set_weights(be, m->w, m->n_floats));
  mgt_gpt_weights_changed(m);
  *out = m;
  return MGT_OK;
done:
  mgt_gpt_destroy(&m);
  return st;
}

mgt_status mgt_gpt_train_with(mgt_gpt *m, const mgt_gpt_training *t) {
  m->run = *t;
  for (int i = 0; i < m->n_params; i++)
    m->segs[i].weight_decay = m->params[i].decay ? (float)t->weight_decay : 0.0f;
  MGT_CHECK(create_ddp(m));
  MGT_CHECK(gpt_init_params(m, t->seed));
  mgt_gpt_weights_changed(m);
  return MGT_OK;
}

void mgt_gpt_destroy(mgt_gpt **model) {
  mgt_gpt *m = *model;
  if (!m) return;
  mgt_ddp_destroy(&m->ddp); /* waits for collectives still writing into the buffers */
  if (m->be) (void)!mgt_be_sync(m->be);
  if (m->weight_copies) (void)!mgt_be_set_weights(m->be, m->w, 0);
  if (m->act16_bytes && mgt_be_has(m->be, MGT_BE_SET_ACT16))
    (void)!mgt_be_set_act16(m->be, m->act16, 0);
  if (m->be) {
    if (m->w) mgt_be_free(m->be, m->w);
    if (m->g) mgt_be_free(m->be, m->g);
    if (m->arena) mgt_be_free(m->be, m->arena);
    if (m->gain) mgt_be_free(m->be, m->gain);
  }
  gpt_moe_destroy(m);
  mgt_free(m->params);
  mgt_free(m->segs);
  mgt_free(m->res);
  mgt_free(m->acts);
  mgt_free(m->host_tokens);
  mgt_free(m->host_rows);
  mgt_free(m->host_b);
  mgt_free(m->sp_counts);
  mgt_free(m);
  *model = NULL;
}

const mgt_gpt_dims *mgt_gpt_get_dims(const mgt_gpt *m) { return &m->d; }

const mgt_backend *mgt_gpt_backend(const mgt_gpt *m) { return m->be; }

const mgt_param *mgt_gpt_params(const mgt_gpt *m, int *count) {
  *count = m->n_params;
  return m->params;
}

float *mgt_gpt_param_data(mgt_gpt *m) {
  (void)!mgt_ddp_params_ready(m->ddp, -1); /* the caller reads them: a failed wait aborted MPI */
  mgt_gpt_weights_changed(m);              /* or writes them */
  return m->w;
}

float *mgt_gpt_grad_data(mgt_gpt *m) { return m->g; }

size_t mgt_gpt_param_count(const mgt_gpt *m) { return m->n_floats; }

const mgt_segment *mgt_gpt_segments(const mgt_gpt *m, int *count) {
  *count = m->n_params;
  return m->segs;
}
