/* Hugging Face's LlamaForCausalLM (src/mgt/hf.h): its tensor names, config.json both ways, and
   the tokenizer files that travel with it. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgt/hf_impl.h"
#include "mgt/tokenizer.h"

/* Rows [row0, row0 + rows) of our tensor `ours` as `hf`: a slice of a fused tensor (q, k or v
   of attention.qkv). A weight's rows are its last dimension; a bias's are its elements. */
static mgt_status plan_rows(hf_plan *pl, const hf_names *w, const char *hf, const char *ours,
                            int64_t row0, int64_t rows, int bias) {
  int i = hf_find(w, ours);
  if (i < 0) MGT_FAIL(MGT_ERR_INTERNAL, "the model has no tensor %s", ours);
  const mgt_shard *s = &w->s->t[i].shard;
  const int64_t cols = bias ? 1 : s->full[s->ndim - 1];
  const int64_t shape[2] = {rows, cols};
  return hf_plan_add(pl, hf, i, row0 * cols, bias ? 1 : 2, shape, 0);
}

/* The Hugging Face class of a Llama-style spec: Qwen 3 with q/k norms (no bias), Qwen 2 with
   biases in q, k and v only (and a head size of hidden / heads), Llama with all biases or none;
   NULL for a spec none of them has, with why in *why. */
static const char *hf_llama_family(const mgt_model_spec *d, const char **model_type,
                                   const char **why) {
  *why = NULL;
  if (d->qk_norm < 0 || d->qk_norm > 2) {
    *why = "the checkpoint's q/k norms are of no kind mgt knows";
    return NULL;
  }
  if (d->experts) { /* Mixtral; Qwen3-MoE with q/k norms, OLMoE with full-width ones */
    static const char *const types[3] = {"mixtral", "qwen3_moe", "olmoe"};
    static const char *const classes[3] = {"MixtralForCausalLM", "Qwen3MoeForCausalLM",
                                           "OlmoeForCausalLM"};
    *model_type = types[d->qk_norm];
    if (d->router_score != MGT_MOE_SOFTMAX || (d->router_scale != 0 && d->router_scale != 1))
      *why = "a sigmoid or scaled MoE router: Hugging Face's Mixtral and Qwen3-MoE route by "
             "softmax";
    else if (d->bias || d->qkv_bias)
      *why = "--num-experts with linear biases: Hugging Face's Mixtral and Qwen3-MoE have none";
    else if (!d->qk_norm && (d->moe_first != 0 || d->moe_every != 1 || d->router_pre))
      *why = "Hugging Face's Mixtral has experts in every layer, their top-k renormalized (no "
             "--moe-layer-freq, no --moe-router-pre-softmax; with --qk-layernorm: Qwen3-MoE)";
    else if (d->qk_norm == 2 && (d->moe_first != 0 || d->moe_every != 1))
      *why = "Hugging Face's OLMoE has experts in every layer (no --moe-layer-freq)";
    else if (d->qk_norm == 1 && d->moe_first % d->moe_every != d->moe_every - 1)
      *why = "--moe-layer-freq: Qwen3-MoE's MoE layers are those l with l + 1 a multiple of its "
             "decoder_sparse_step (layers 1, 3, 5, ... for 2)";
    else if (d->shared_ffn || d->expert_bias)
      *why = "a shared expert or an expert bias: Hugging Face's Mixtral and Qwen3-MoE have none";
    return *why ? NULL : classes[d->qk_norm];
  }
  if (d->qk_norm == 2) {
    *why = "--qk-layernorm-full without experts: Hugging Face's OLMoE has experts (OLMo 2's "
           "block differs)";
    return NULL;
  }
  if (d->qk_norm) {
    *model_type = "qwen3";
    if (!d->bias && !d->qkv_bias) return "Qwen3ForCausalLM";
    *why = "--qk-layernorm with linear biases: Hugging Face's Qwen 3 has neither QKV biases nor "
           "MLP biases";
    return NULL;
  }
  if (d->qkv_bias) {
    *model_type = "qwen2";
    if (d->head_size * d->heads == d->hidden) return "Qwen2ForCausalLM";
    *why = "--add-qkv-bias with --kv-channels: Hugging Face's Qwen 2 has a head size of hidden / "
           "heads";
    return NULL;
  }
  *model_type = "llama";
  return "LlamaForCausalLM";
}

/* An MoE layer's router and experts: expert e's slices of our [E, F, C] and [E, C, F] tensors,
   under Mixtral's names (block_sparse_moe: gate, experts.e.w1, w3, w2) or Qwen3-MoE's and
   OLMoE's (mlp: gate, experts.e.gate_proj, up_proj, down_proj). */
static mgt_status plan_experts(hf_plan *pl, const mgt_model_spec *d, const hf_names *w, int l) {
  const int qwen = d->qk_norm != 0; /* Qwen3-MoE's names, and OLMoE's */
  const char *block = qwen ? "mlp" : "block_sparse_moe";
  static const char *const names[2][3] = {{"w1", "w3", "w2"},
                                          {"gate_proj", "up_proj", "down_proj"}};
  static const char *const ours[3] = {"gate", "up", "dense_4h_to_h"};
  char hf[160], our[96];
  snprintf(hf, sizeof hf, "model.layers.%d.%s.gate.weight", l, block);
  snprintf(our, sizeof our, "layers.%d.mlp.router.weight", l);
  MGT_CHECK(hf_plan_whole(pl, w, hf, our, 0, 0));
  for (int e = 0; e < d->experts; e++)
    for (int k = 0; k < 3; k++) {
      snprintf(hf, sizeof hf, "model.layers.%d.%s.experts.%d.%s.weight", l, block, e,
               names[qwen][k]);
      snprintf(our, sizeof our, "layers.%d.mlp.experts.%s.weight", l, ours[k]);
      const int64_t rows = k == 2 ? d->hidden : d->moe_ffn; /* [E, C, F]: C rows of F */
      MGT_CHECK(plan_rows(pl, w, hf, our, (int64_t)e * rows, rows, 0));
    }
  return MGT_OK;
}

/* LlamaForCausalLM: q_proj, k_proj and v_proj are the query and key_value tensors (grouped
   attention) or the thirds of attention.qkv; gate_proj and up_proj the SwiGLU halves. Biases,
   where the model has them, are Llama's attention_bias and mlp_bias, or Qwen 2's on q, k and v;
   Qwen 3's q_norm and k_norm are the q/k norms. */
mgt_status hf_plan_llama(hf_plan *pl, const mgt_config *c, const mgt_model_spec *d,
                         const hf_names *w) {
  const char *model_type, *why;
  if (!hf_llama_family(d, &model_type, &why)) MGT_FAIL(MGT_ERR_INPUT, "%s", why);
  const int64_t A = (int64_t)c->num_attention_heads * d->head_size,
                KV = (int64_t)d->groups * d->head_size;
  const int grouped = d->groups != c->num_attention_heads;
  MGT_CHECK(
      hf_plan_whole(pl, w, "model.embed_tokens.weight", "embedding.word_embeddings.weight", 0, 0));
  for (int l = 0; l < c->num_layers; l++) {
    char hf[128], ours[128], q[96], kv[96];
    const char *sfx[2] = {"weight", "bias"};
    for (int b = 0; b < (d->bias || d->qkv_bias ? 2 : 1); b++) {
      snprintf(q, sizeof q, "layers.%d.attention.%s.%s", l, grouped ? "query" : "qkv", sfx[b]);
      snprintf(kv, sizeof kv, "layers.%d.attention.%s.%s", l, grouped ? "key_value" : "qkv",
               sfx[b]);
      const int64_t k0 = grouped ? 0 : A; /* the first key row in kv */
      snprintf(hf, sizeof hf, "model.layers.%d.self_attn.q_proj.%s", l, sfx[b]);
      MGT_CHECK(plan_rows(pl, w, hf, q, 0, A, b));
      snprintf(hf, sizeof hf, "model.layers.%d.self_attn.k_proj.%s", l, sfx[b]);
      MGT_CHECK(plan_rows(pl, w, hf, kv, k0, KV, b));
      snprintf(hf, sizeof hf, "model.layers.%d.self_attn.v_proj.%s", l, sfx[b]);
      MGT_CHECK(plan_rows(pl, w, hf, kv, k0 + KV, KV, b));
    }
    static const char *const same[][2] = {
        {"input_layernorm.weight", "input_layernorm.weight"},
        {"self_attn.o_proj.weight", "attention.dense.weight"},
        {"post_attention_layernorm.weight", "post_attention_layernorm.weight"},
        {"mlp.gate_proj.weight", "mlp.gate.weight"},
        {"mlp.up_proj.weight", "mlp.up.weight"},
        {"mlp.down_proj.weight", "mlp.dense_4h_to_h.weight"},
        {"self_attn.o_proj.bias", "attention.dense.bias"}, /* the biases, when present */
        {"mlp.gate_proj.bias", "mlp.gate.bias"},
        {"mlp.up_proj.bias", "mlp.up.bias"},
        {"mlp.down_proj.bias", "mlp.dense_4h_to_h.bias"},
    };
    const int moe = mgt_model_is_moe_layer(d, l);
    for (int k = 0; k < (d->bias ? 10 : 6); k++) {
      if (moe && (k >= 3 && k <= 5)) continue; /* the experts instead */
      snprintf(hf, sizeof hf, "model.layers.%d.%s", l, same[k][0]);
      snprintf(ours, sizeof ours, "layers.%d.%s", l, same[k][1]);
      MGT_CHECK(hf_plan_whole(pl, w, hf, ours, 0, 0));
    }
    for (int k = 0; d->qk_norm && k < 2; k++) {
      snprintf(hf, sizeof hf, "model.layers.%d.self_attn.%s_norm.weight", l, k ? "k" : "q");
      snprintf(ours, sizeof ours, "layers.%d.attention.%s_layernorm.weight", l, k ? "k" : "q");
      MGT_CHECK(hf_plan_whole(pl, w, hf, ours, 0, 0));
    }
    if (moe) MGT_CHECK(plan_experts(pl, d, w, l));
  }
  MGT_CHECK(hf_plan_whole(pl, w, "model.norm.weight", "final_layernorm.weight", 0, 0));
  return d->untied ? hf_plan_whole(pl, w, "lm_head.weight", "output_layer.weight", 0, 0) : MGT_OK;
}

/* Whether a description is Llama's: a causal LM with rotary positions, RMSNorm and SwiGLU (the
   rest: groups, biases, tying, are LlamaConfig's options). */
int hf_is_llama(const mgt_model_spec *d) {
  return d->kind == MGT_MODEL_GPT && d->pos == MGT_POS_ROPE && d->norm == MGT_NORM_RMSNORM &&
         d->mlp == MGT_MLP_SWIGLU;
}

/* config.json of LlamaForCausalLM: the token ids are the tokenizer's business (its
   tokenizer_config.json), so none are claimed here. */
char *hf_llama_config_json(const mgt_config *c, const mgt_model_spec *d, int64_t iteration,
                           int32_t bos, int32_t eos) {
  char scaling[256] = "null", b[16] = "null", e[16] = "null"; /* the tokenizer's ids, if known */
  if (bos >= 0) snprintf(b, sizeof b, "%d", (int)bos);
  if (eos >= 0) snprintf(e, sizeof e, "%d", (int)eos);
  if (c->use_rope_scaling) /* Llama 3.1's, the band mgt_gpt_rope_frequencies uses */
    snprintf(scaling, sizeof scaling,
             "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": 1.0, "
             "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
             c->rope_scaling_factor);
  const char *model_type, *why, *cls = hf_llama_family(d, &model_type, &why);
  if (!cls) return NULL; /* the plan refused it first */
  char moe[1024] = "", dense[768] = "";
  if (d->experts && d->qk_norm == 2) { /* OLMoE: every layer, its top-k renormalized or not */
    snprintf(moe, sizeof moe,
             "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
             "  \"norm_topk_prob\": %s,\n  \"router_aux_loss_coef\": %.9g,\n"
             "  \"output_router_logits\": false,\n  \"clip_qkv\": null,\n",
             d->experts, d->topk, d->router_pre ? "false" : "true", c->moe_aux_loss_coeff);
  } else if (d->experts && d->qk_norm) { /* Qwen3-MoE: dense layers l + 1 not a multiple of the
                                            step */
    for (int l = 0; l < d->moe_first && strlen(dense) + 16 < sizeof dense; l++)
      if ((l + 1) % d->moe_every == 0)
        snprintf(dense + strlen(dense), sizeof dense - strlen(dense), "%s%d", dense[0] ? ", " : "",
                 l);
    snprintf(moe, sizeof moe,
             "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
             "  \"moe_intermediate_size\": %d,\n  \"decoder_sparse_step\": %d,\n"
             "  \"mlp_only_layers\": [%s],\n  \"norm_topk_prob\": %s,\n"
             "  \"router_aux_loss_coef\": %.9g,\n  \"output_router_logits\": false,\n",
             d->experts, d->topk, d->moe_ffn, d->moe_every, dense, d->router_pre ? "false" : "true",
             c->moe_aux_loss_coeff);
  } else if (d->experts) {
    snprintf(moe, sizeof moe,
             "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
             "  \"router_aux_loss_coef\": %.9g,\n  \"output_router_logits\": false,\n"
             "  \"sliding_window\": null,\n",
             d->experts, d->topk, c->moe_aux_loss_coeff);
  }
  const int ffn = /* Mixtral's and OLMoE's: the experts' */
      d->experts && d->qk_norm != 1 ? d->moe_ffn : c->ffn_hidden_size;
  char *s = NULL;
  if (asprintf(&s,
               "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
               "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
               "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
               "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n"
               "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.9g,\n"
               "  \"rope_theta\": %.17g,\n  \"rope_scaling\": %s,\n"
               "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n  \"tie_word_embeddings\": %s,\n"
               "  \"initializer_range\": %.9g,\n  \"attention_dropout\": %.9g,\n"
               "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n  \"torch_dtype\": \"float32\",\n"
               "  \"use_sliding_window\": false,\n%s"
               "  \"megatron_c\": {\"iteration\": %lld, \"seq_length\": %d}\n}\n",
               cls, model_type, c->vocab_size, c->hidden_size, ffn, c->num_layers,
               c->num_attention_heads, d->groups, d->head_size, c->max_position_embeddings,
               c->layernorm_epsilon, c->rotary_base, scaling, d->bias ? "true" : "false",
               d->bias ? "true" : "false", d->untied ? "false" : "true", c->init_method_std,
               c->attention_dropout, b, e, moe, (long long)iteration, c->seq_length) < 0)
    return NULL;
  return s;
}

/* The path of the file `name` beside `path`. */
static void beside(const char *path, const char *name, char *out, size_t n) {
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(out, n, "%.*s/%s", (int)(slash - path), path, name);
  else
    snprintf(out, n, "%s", name);
}

/* The Hugging Face tokenizer a model was trained with, beside its export (tokenizer.json and
   tokenizer_config.json), and its bos and eos ids. A tokenizer that can no longer be read is
   left out with a note: the weights are the export. */
void hf_copy_tokenizer(const char *path, const char *out_dir, FILE *log, int32_t *bos,
                       int32_t *eos) {
  mgt_tokenizer *tok = NULL;
  char dst[MGT_PATH_MAX + 64], src[MGT_PATH_MAX + 64], *text = NULL;
  size_t n = 0;
  mgt_status st = mgt_tok_open(MGT_TOKENIZER_HF, path, NULL, &tok);
  if (st == MGT_OK) {
    *bos = mgt_tok_bos(tok), *eos = mgt_tok_eod(tok);
    mgt_tok_destroy(&tok);
  }
  for (int k = 0; k < 2 && st == MGT_OK; k++) {
    const char *name = k ? "tokenizer_config.json" : "tokenizer.json";
    beside(path, name, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", out_dir, name);
    st = mgt_read_file("--tokenizer-model", k ? src : path, &text, &n);
    if (st == MGT_OK) st = hf_write_text(dst, text);
    free(text), text = NULL;
  }
  if (st != MGT_OK && log)
    fprintf(log, "note: the tokenizer %s is not exported beside the weights: %s\n", path,
            mgt_error_message());
}

mgt_status hf_bool(const mgt_json *conf, const char *path, const char *key, int dflt, int *out) {
  const mgt_json *v = mgt_json_get(conf, key);
  MGT_REQUIRE(!v || v->type == MGT_JSON_NULL || v->type == MGT_JSON_BOOL,
              "%s: %s must be true or false", path, key);
  *out = v && v->type == MGT_JSON_BOOL ? (int)v->number : dflt;
  return MGT_OK;
}

/* The rotary positions: rope_theta, and Llama 3.1's scaling (rope_type llama3 with the band
   mgt_gpt_rope_frequencies uses) or none ("default"). transformers 4 writes them as rope_theta
   and rope_scaling, transformers 5 as one object, rope_parameters (its theta inside). */
static mgt_status read_rope(const mgt_json *conf, const char *path, double theta, mgt_config *cfg) {
  const mgt_json *rp = mgt_json_get(conf, "rope_parameters"),
                 *rs = mgt_json_get(conf, "rope_scaling");
  const char *key = "rope_scaling";
  MGT_CHECK(hf_num(conf, path, "rope_theta", theta, 1, 1e12, &cfg->rotary_base));
  if (rp && rp->type != MGT_JSON_NULL) {
    MGT_REQUIRE(rp->type == MGT_JSON_OBJECT, "%s: rope_parameters is not an object", path);
    MGT_REQUIRE(!rs || rs->type == MGT_JSON_NULL || rs == rp,
                "%s: both rope_parameters and rope_scaling: give one", path);
    MGT_CHECK(hf_num(rp, path, "rope_theta", cfg->rotary_base, 1, 1e12, &cfg->rotary_base));
    rs = rp, key = "rope_parameters";
  }
  if (!rs || rs->type == MGT_JSON_NULL) return MGT_OK;
  const mgt_json *type = rs->type == MGT_JSON_OBJECT ? mgt_json_get(rs, "rope_type") : NULL;
  if (!type && rs->type == MGT_JSON_OBJECT) type = mgt_json_get(rs, "type"); /* the older key */
  if (type && mgt_json_is(type, "default")) return MGT_OK;
  MGT_REQUIRE(rs->type == MGT_JSON_OBJECT && type && type->type == MGT_JSON_STRING &&
                  mgt_json_is(type, "llama3"),
              "%s: %s is implemented for rope_type \"default\" and \"llama3\" only (Llama 3.1)",
              path, key);
  double lo, hi, orig;
  MGT_CHECK(hf_num(rs, path, "factor", 0, 1, 1e6, &cfg->rope_scaling_factor));
  MGT_CHECK(hf_num(rs, path, "low_freq_factor", 1, 0, 1e6, &lo));
  MGT_CHECK(hf_num(rs, path, "high_freq_factor", 4, 0, 1e6, &hi));
  MGT_CHECK(hf_num(rs, path, "original_max_position_embeddings", 8192, 1, 1e9, &orig));
  MGT_REQUIRE(lo == 1 && hi == 4 && orig == 8192,
              "%s: %s with low_freq_factor %g, high_freq_factor %g and "
              "original_max_position_embeddings %g: only Llama 3.1's 1, 4 and 8192 are implemented",
              path, key, lo, hi, orig);
  cfg->use_rope_scaling = 1;
  return MGT_OK;
}

/* MixtralConfig's or Qwen3MoeConfig's experts: all layers MoE (Mixtral), or those l with l + 1 a
   multiple of decoder_sparse_step and not in mlp_only_layers; the top-k renormalized (Mixtral,
   Qwen3-MoE's norm_topk_prob) or not (softmax before the top-k). */
static mgt_status read_moe(const mgt_json *conf, const char *path, int qwen, int olmoe,
                           mgt_config *cfg) {
  int norm = 1, step = 1;
  /* absent keys default as transformers' MixtralConfig (8 experts, top 2), Qwen3MoeConfig (128,
     top 8) and OlmoeConfig (64, top 8) do */
  MGT_CHECK(hf_int(conf, path, qwen || olmoe ? "num_experts" : "num_local_experts",
                   qwen ? 128 : (olmoe ? 64 : 8), 1, 1 << 16, &cfg->num_experts));
  MGT_CHECK(hf_int(conf, path, "num_experts_per_tok", qwen || olmoe ? 8 : 2, 1, cfg->num_experts,
                   &cfg->moe_router_topk));
  MGT_CHECK(hf_num(conf, path, "router_aux_loss_coef", 0.001, 0, 1e6, &cfg->moe_aux_loss_coeff));
  cfg->moe_ffn_hidden_size = cfg->ffn_hidden_size;
  if (olmoe) { /* every layer; OlmoeConfig's norm_topk_prob defaults to false */
    MGT_CHECK(hf_bool(conf, path, "norm_topk_prob", 0, &norm));
    cfg->moe_router_pre_softmax = !norm;
    const mgt_json *clip = mgt_json_get(conf, "clip_qkv");
    MGT_REQUIRE(!clip || clip->type == MGT_JSON_NULL,
                "%s: clip_qkv: OLMoE with clipped q, k and v is not implemented", path);
    return MGT_OK;
  }
  if (!qwen) return MGT_OK;
  MGT_CHECK(
      hf_int(conf, path, "moe_intermediate_size", 0, 1, HF_MAX_FFN, &cfg->moe_ffn_hidden_size));
  MGT_CHECK(hf_int(conf, path, "decoder_sparse_step", 1, 1, HF_MAX_LAYERS, &step));
  MGT_CHECK(hf_bool(conf, path, "norm_topk_prob", 0, &norm)); /* Qwen3MoeConfig's default */
  cfg->moe_router_pre_softmax = !norm;
  const mgt_json *dense = mgt_json_get(conf, "mlp_only_layers");
  MGT_REQUIRE(!dense || dense->type == MGT_JSON_NULL || dense->type == MGT_JSON_ARRAY,
              "%s: mlp_only_layers must be a list of layers", path);
  const int L = cfg->num_layers;
  MGT_REQUIRE(2 * (size_t)L + 3 <= sizeof cfg->moe_layer_freq,
              "%s: %d layers: at most %zu with Qwen3-MoE's layer list", path, L,
              (sizeof cfg->moe_layer_freq - 3) / 2);
  char *f = cfg->moe_layer_freq;
  f[0] = '[', f[1] = 0;
  for (int l = 0; l < L; l++) {
    int moe = (l + 1) % step == 0;
    for (size_t i = 0; dense && dense->type == MGT_JSON_ARRAY && i < dense->len; i++)
      moe &= !(dense->items[i].type == MGT_JSON_NUMBER && dense->items[i].number == l);
    snprintf(f + strlen(f), 3, "%d%s", moe, l + 1 < L ? "," : "");
  }
  strcat(f, "]");
  return MGT_OK;
}

/* A LlamaConfig (model_type llama), Qwen3Config (qwen3: q/k norms) or Qwen2Config (qwen2: biases
   in q, k and v): RMSNorm, SwiGLU, rotary positions; grouped attention, biases and tying as it
   says. Training windows default to 4096 positions at most (Llama 3.1 declares 131072). */
mgt_status hf_read_llama_config(const mgt_json *conf, const char *path, const char *model_type,
                                mgt_config *cfg) {
  const int qmoe = !strcmp(model_type, "qwen3_moe"), mixtral = !strcmp(model_type, "mixtral");
  const int olmoe = !strcmp(model_type, "olmoe");
  const int qwen3 = !strcmp(model_type, "qwen3") || qmoe || olmoe; /* q/k norms, no bias */
  const int qwen2 = !strcmp(model_type, "qwen2");
  const mgt_json *act = mgt_json_get(conf, "hidden_act");
  MGT_REQUIRE(!act || mgt_json_is(act, "silu"), "%s: hidden_act must be \"silu\" (SwiGLU's gate)",
              path);
  mgt_config_defaults(cfg);
  cfg->normalization = MGT_NORM_RMSNORM, cfg->swiglu = 1;
  cfg->position_embedding_type = MGT_POS_ROPE;
  MGT_CHECK(hf_int(conf, path, "hidden_size", 0, 1, HF_MAX_HIDDEN, &cfg->hidden_size));
  MGT_CHECK(hf_int(conf, path, "num_hidden_layers", 0, 1, HF_MAX_LAYERS, &cfg->num_layers));
  MGT_CHECK(hf_int(conf, path, "num_attention_heads", 0, 1, 65536, &cfg->num_attention_heads));
  MGT_CHECK(hf_int(conf, path, "intermediate_size", 0, 1, HF_MAX_FFN, &cfg->ffn_hidden_size));
  MGT_CHECK(hf_int(conf, path, "vocab_size", 0, 1, HF_MAX_VOCAB, &cfg->vocab_size));
  MGT_CHECK(hf_int(conf, path, "max_position_embeddings", 2048, 1, HF_MAX_POSITIONS,
                   &cfg->max_position_embeddings));
  int kv, hd, attn_bias, mlp_bias, tied;
  MGT_CHECK(hf_int(conf, path, "num_key_value_heads", cfg->num_attention_heads, 1, 65536, &kv));
  if (kv != cfg->num_attention_heads) cfg->group_query_attention = 1, cfg->num_query_groups = kv;
  MGT_CHECK(hf_int(conf, path, "head_dim", cfg->hidden_size / cfg->num_attention_heads, 1,
                   HF_MAX_HIDDEN, &hd));
  if ((int64_t)hd * cfg->num_attention_heads != cfg->hidden_size) cfg->kv_channels = hd;
  /* what a config.json leaves out is its class's default: MixtralConfig's rope_theta 1e6 and
     rms_norm_eps 1e-5, OlmoeConfig's 1e-5, the others' (Llama's, Qwen's) 10000 and 1e-6 */
  MGT_CHECK(hf_num(conf, path, "rms_norm_eps", mixtral || olmoe ? 1e-5 : 1e-6, 1e-12, 1,
                   &cfg->layernorm_epsilon));
  MGT_CHECK(read_rope(conf, path, mixtral ? 1e6 : 10000, cfg));
  int window;
  MGT_CHECK(hf_bool(conf, path, "use_sliding_window", 0, &window));
  MGT_REQUIRE(!window, "%s: use_sliding_window: sliding-window attention is not implemented", path);
  if (qwen2 || qwen3) { /* Qwen 2: biases in q, k and v; Qwen 3: its q and k norms */
    MGT_CHECK(hf_bool(conf, path, "attention_bias", 0, &attn_bias));
    MGT_REQUIRE(qwen2 || !attn_bias,
                "%s: attention_bias true: Qwen 3 with biases in the attention only is not "
                "implemented",
                path);
    cfg->disable_bias_linear = 1, cfg->add_qkv_bias = qwen2, cfg->qk_layernorm = qwen3;
    cfg->qk_layernorm_full = olmoe; /* over the whole projections */
    MGT_REQUIRE(!qwen2 || cfg->kv_channels == 0,
                "%s: head_dim %d: Qwen 2's head size is hidden_size / num_attention_heads", path,
                hd);
  } else {
    MGT_CHECK(hf_bool(conf, path, "attention_bias", 0, &attn_bias));
    MGT_CHECK(hf_bool(conf, path, "mlp_bias", 0, &mlp_bias));
  }
  MGT_REQUIRE(qwen2 || qwen3 || attn_bias == mlp_bias,
              "%s: attention_bias %s and mlp_bias %s: biases in some linear layers only are not "
              "implemented (--disable-bias-linear is all or none)",
              path, attn_bias ? "true" : "false", mlp_bias ? "true" : "false");
  if (!qwen2 && !qwen3) cfg->disable_bias_linear = !attn_bias;
  MGT_CHECK(hf_bool(conf, path, "tie_word_embeddings", 0, &tied)); /* LlamaConfig's default */
  cfg->untie_embeddings_and_output_weights = !tied;
  cfg->seq_length = cfg->max_position_embeddings < 4096 ? cfg->max_position_embeddings : 4096;
  return mixtral || qmoe || olmoe ? read_moe(conf, path, qmoe, olmoe, cfg) : MGT_OK;
}

/* A Llama directory's tokenizer.json becomes the checkpoint's tokenizer (by its absolute path),
   so that eval and generate use it; one that cannot be read is left out with a note, one with
   ids beyond the embeddings refused. */
mgt_status hf_adopt_tokenizer(const char *hf_dir, mgt_config *cfg, FILE *log) {
  char path[MGT_PATH_MAX + 64], abs[PATH_MAX];
  snprintf(path, sizeof path, "%s/tokenizer.json", hf_dir);
  if (access(path, F_OK) != 0) return MGT_OK;
  mgt_tokenizer *tok = NULL;
  if (!realpath(path, abs) || strlen(abs) >= sizeof cfg->vocab_file ||
      mgt_tok_open(MGT_TOKENIZER_HF, abs, NULL, &tok) != MGT_OK) {
    if (log)
      fprintf(log, "note: %s is not the checkpoint's tokenizer: %s\n", path, mgt_error_message());
    return MGT_OK;
  }
  const int n = mgt_tok_vocab_size(tok);
  mgt_tok_destroy(&tok);
  MGT_REQUIRE(n <= cfg->vocab_size, "%s has %d ids, more than the model's vocab_size %d", path, n,
              cfg->vocab_size);
  cfg->tokenizer_type = MGT_TOKENIZER_HF;
  snprintf(cfg->vocab_file, sizeof cfg->vocab_file, "%s", abs);
  if (log) fprintf(log, "tokenizer: %s (HuggingFaceTokenizer)\n", abs);
  return MGT_OK;
}
