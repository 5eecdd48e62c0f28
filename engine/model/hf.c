/*
 * Hugging Face directory loader: config.json (hyperparameters, architecture and its features:
 * Llama/Mistral/Mixtral, Qwen2/3, Qwen3-MoE, Phi-3, Gemma 2/3 text), every *.safetensors file of
 * the directory (shards included), tensor names mapped onto the GGUF names model.h uses (gemma's
 * four norms by their role, as llama.cpp's converter names them; one "blk.L.ffn_<kind>_exps.E"
 * tensor per expert, which model.c binds in place of GGUF's stacked 3-D ones),
 * tokenizer.json / tokenizer_config.json paths, the chat template and the BOS/EOS texts.
 * Matrices stay in the mappings; 1-D F16/BF16 tensors (norms, biases) are converted to owned F32
 * copies so that model.h's "norms and biases are F32" holds for both formats, and gemma's norms
 * (HF stores w, its RMSNorm computes x (1 + w)) get their 1 added there, as the GGUF holds them.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/model_internal.h"
#include "lib/err.h"
#include "lib/json.h"

#define HF_MAX_JSON_BYTES (64u << 20) /* config.json, tokenizer_config.json */
#define HF_MAX_SHARDS     4096

/* HF per-layer suffix -> GGUF per-layer suffix. The first entry of a GGUF name is the one
 * model__hf_name reports. */
static const struct {
    const char *hf;
    const char *gguf;
} hf_layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"}, /* phi3: Q, K, V rows */
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"}, /* gemma: see hf_gemma_names */
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"}, /* phi3: gate rows, then up rows */
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},                     /* qwen2moe / qwen3moe router */
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"}, /* qwen2moe shared expert */
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, /* mixtral router */
};

/* gemma2/gemma3: four norms per layer, named as llama.cpp's converter maps them. */
static const struct {
    const char *hf;
    const char *gguf;
} hf_gemma_names[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

/* Per-expert tensors "<prefix>E<suffix>" -> "blk.L.ffn_<kind>_exps.E.weight" (model.c binds
 * them in place of GGUF's stacked 3-D tensors). */
static const struct {
    const char *prefix, *suffix, *kind;
} hf_expert_names[] = {
    {"mlp.experts.", ".gate_proj.weight", "gate"}, /* qwen2moe, qwen3moe */
    {"mlp.experts.", ".up_proj.weight", "up"},
    {"mlp.experts.", ".down_proj.weight", "down"},
    {"block_sparse_moe.experts.", ".w1.weight", "gate"}, /* mixtral */
    {"block_sparse_moe.experts.", ".w3.weight", "up"},
    {"block_sparse_moe.experts.", ".w2.weight", "down"},
};

static const struct {
    const char *hf;
    const char *gguf;
} hf_global_names[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

/* Parses "<prefix><digits>.<rest>", returning rest and the layer number, or NULL. */
static const char *layer_split(const char *name, const char *prefix, int *layer)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) {
        return NULL;
    }
    const char *p = name + pl;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) {
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || *p != '.' || (digits > 1 && name[pl] == '0')) {
        return NULL;
    }
    *layer = (int)v;
    return p + 1;
}

static bool is_gemma(model_arch a)
{
    return a == MODEL_ARCH_GEMMA2 || a == MODEL_ARCH_GEMMA3;
}

/* GGUF name for an HF name of architecture a into out; false when the name is not one we map. */
static bool hf_to_gguf(model_arch a, const char *hf, char *out, size_t outlen)
{
    for (size_t i = 0; i < ARRAY_SIZE(hf_global_names); i++) {
        if (strcmp(hf, hf_global_names[i].hf) == 0) {
            snprintf(out, outlen, "%s", hf_global_names[i].gguf);
            return true;
        }
    }
    int layer;
    const char *rest = layer_split(hf, "model.layers.", &layer);
    if (!rest) {
        return false;
    }
    for (size_t i = 0; is_gemma(a) && i < ARRAY_SIZE(hf_gemma_names); i++) {
        if (strcmp(rest, hf_gemma_names[i].hf) == 0) {
            snprintf(out, outlen, "blk.%d.%s", layer, hf_gemma_names[i].gguf);
            return true;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(hf_layer_names); i++) {
        if (strcmp(rest, hf_layer_names[i].hf) == 0) {
            snprintf(out, outlen, "blk.%d.%s", layer, hf_layer_names[i].gguf);
            return true;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(hf_expert_names); i++) {
        int e;
        const char *tail = layer_split(rest, hf_expert_names[i].prefix, &e);
        if (tail && tail[-1] == '.' && strcmp(tail - 1, hf_expert_names[i].suffix) == 0) {
            snprintf(out, outlen, "blk.%d.ffn_%s_exps.%d.weight", layer, hf_expert_names[i].kind,
                     e);
            return true;
        }
    }
    return false;
}

void model__hf_name(model_arch arch, const char *gguf_name, char *out, size_t outlen)
{
    out[0] = '\0';
    for (size_t i = 0; i < ARRAY_SIZE(hf_global_names); i++) {
        if (strcmp(gguf_name, hf_global_names[i].gguf) == 0) {
            snprintf(out, outlen, "%s", hf_global_names[i].hf);
            return;
        }
    }
    int layer;
    const char *rest = layer_split(gguf_name, "blk.", &layer);
    if (!rest) {
        return;
    }
    /* the names that differ by architecture first */
    const bool gemma = arch == MODEL_ARCH_GEMMA2 || arch == MODEL_ARCH_GEMMA3;
    for (size_t i = 0; gemma && i < ARRAY_SIZE(hf_gemma_names); i++) {
        if (strcmp(rest, hf_gemma_names[i].gguf) == 0) {
            snprintf(out, outlen, "model.layers.%d.%s", layer, hf_gemma_names[i].hf);
            return;
        }
    }
    const bool mixtral = arch == MODEL_ARCH_LLAMA;
    if (strcmp(rest, "ffn_gate_inp.weight") == 0) {
        snprintf(out, outlen, "model.layers.%d.%s", layer,
                 mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
        return;
    }
    if (arch == MODEL_ARCH_PHI3 && strcmp(rest, "ffn_up.weight") == 0) {
        snprintf(out, outlen, "model.layers.%d.mlp.gate_up_proj.weight", layer);
        return;
    }
    /* experts (qwen3moe's names, or Mixtral's); the stacked GGUF name stands for expert 0 */
    for (size_t i = mixtral ? 3 : 0; i < (mixtral ? 6u : 3u); i++) {
        char stacked[32], one[32];
        snprintf(stacked, sizeof(stacked), "ffn_%s_exps.weight", hf_expert_names[i].kind);
        snprintf(one, sizeof(one), "ffn_%s_exps.", hf_expert_names[i].kind);
        int e = 0;
        const char *tail = layer_split(rest, one, &e);
        if (strcmp(rest, stacked) == 0 || (tail && strcmp(tail, "weight") == 0)) {
            snprintf(out, outlen, "model.layers.%d.%s%d%s", layer, hf_expert_names[i].prefix, e,
                     hf_expert_names[i].suffix);
            return;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(hf_layer_names); i++) {
        if (strcmp(rest, hf_layer_names[i].gguf) == 0) {
            snprintf(out, outlen, "model.layers.%d.%s", layer, hf_layer_names[i].hf);
            return;
        }
    }
}

/* Reads a whole (bounded) file. -ENOENT when it does not exist. */
static int read_small_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int rc = errno ? -errno : -EIO;
        tandem_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return rc;
    }
    struct buf b;
    buf_init(&b, HF_MAX_JSON_BYTES);
    char chunk[8192];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = buf_append(&b, chunk, n);
        if (rc != 0) {
            tandem_set_err(err, errlen, "%s: larger than %u bytes", path, HF_MAX_JSON_BYTES);
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        tandem_set_err(err, errlen, "%s: read error", path);
        rc = -EIO;
    }
    fclose(f);
    if (rc != 0) {
        buf_free(&b);
        return rc;
    }
    *len = b.len;
    *out = b.data ? buf_detach(&b, len) : strdup("");
    return *out ? 0 : -ENOMEM;
}

int model__read_json(const char *path, struct json_object **out, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    int rc = read_small_file(path, &text, &len, err, errlen);
    if (rc != 0) {
        return rc;
    }
    char jerr[256];
    struct json_object *o = json_parse(text, len, jerr, sizeof(jerr));
    free(text);
    if (!o || !json_object_is_type(o, json_type_object)) {
        tandem_set_err(err, errlen, "%s: %s", path, o ? "expected a JSON object" : jerr);
        json_object_put(o);
        return -EINVAL;
    }
    *out = o;
    return 0;
}

static char *path_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    bool slash = dl > 0 && dir[dl - 1] == '/';
    char *p = malloc(dl + strlen(name) + 2);
    if (p) {
        sprintf(p, "%s%s%s", dir, slash ? "" : "/", name);
    }
    return p;
}

static int hf_arch(const char *label, struct json_object *cfg, model_arch *arch, char *err,
                   size_t errlen)
{
    static const struct {
        const char *name;
        model_arch arch;
    } archs[] = {
        {"LlamaForCausalLM", MODEL_ARCH_LLAMA},
        {"MistralForCausalLM", MODEL_ARCH_LLAMA},
        {"Qwen2ForCausalLM", MODEL_ARCH_QWEN2},
        {"Qwen3ForCausalLM", MODEL_ARCH_QWEN3},
        {"Qwen3MoeForCausalLM", MODEL_ARCH_QWEN3MOE},
        {"Qwen2MoeForCausalLM", MODEL_ARCH_QWEN2MOE},
        {"MixtralForCausalLM", MODEL_ARCH_LLAMA},
        {"Phi3ForCausalLM", MODEL_ARCH_PHI3},
        {"Gemma2ForCausalLM", MODEL_ARCH_GEMMA2},
        {"Gemma3ForCausalLM", MODEL_ARCH_GEMMA3},
        {"llama", MODEL_ARCH_LLAMA},
        {"mistral", MODEL_ARCH_LLAMA},
        {"mixtral", MODEL_ARCH_LLAMA},
        {"qwen2", MODEL_ARCH_QWEN2},
        {"qwen3", MODEL_ARCH_QWEN3},
        {"qwen3_moe", MODEL_ARCH_QWEN3MOE},
        {"qwen2_moe", MODEL_ARCH_QWEN2MOE},
        {"phi3", MODEL_ARCH_PHI3},
        {"gemma2", MODEL_ARCH_GEMMA2},
        {"gemma3_text", MODEL_ARCH_GEMMA3},
    };
    char e[256];
    struct json_object *list;
    const char *name = NULL;
    if (json_opt_array(cfg, "architectures", NULL, &list, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: %s", label, e);
        return -EINVAL;
    }
    if (list && json_object_array_length(list) > 0) {
        if (json_get_string(list, "[0]", &name, e, sizeof(e)) != 0) {
            tandem_set_err(err, errlen, "%s: architectures%s", label, e);
            return -EINVAL;
        }
    } else if (json_get_string(cfg, "model_type", &name, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: %s", label, e);
        return -EINVAL;
    }
    for (size_t i = 0; i < ARRAY_SIZE(archs); i++) {
        if (strcmp(name, archs[i].name) == 0) {
            *arch = archs[i].arch;
            return 0;
        }
    }
    if (strcmp(name, "Gemma3ForConditionalGeneration") == 0 || strcmp(name, "gemma3") == 0) {
        tandem_set_err(err, errlen,
                       "%s: architecture '%s' (Gemma 3 with its vision tower) is not supported: "
                       "only the text model Gemma3ForCausalLM (model_type gemma3_text) is",
                       label, name);
        return -EINVAL;
    }
    tandem_set_err(err, errlen,
                   "%s: architecture '%.64s' is not supported (supported: LlamaForCausalLM, "
                   "MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                   "Qwen3MoeForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM)",
                   label, name);
    return -EINVAL;
}

/* rope_scaling of type linear (factor) or llama3 (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings, all required, as transformers validates them). */
static int hf_rope_scaling(model *m, const char *label, struct json_object *s, const char *type,
                           double theta, char *err, size_t errlen)
{
    char e[256];
    model_config *c = &m->cfg;
    const bool llama3 = strcmp(type, "llama3") == 0;
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    double v[4] = {NAN, NAN, NAN, NAN};
    for (int i = 0; i < (llama3 ? 4 : 1); i++) {
        if (json_opt_double(s, keys[i], NAN, &v[i], e, sizeof(e)) != 0 || !(v[i] > 0.0) ||
            !(v[i] < 1e9)) {
            tandem_set_err(err, errlen, "%s: rope_scaling.%s (type %s): %s", label, keys[i], type,
                           isnan(v[i]) ? "required, a positive number" : "must be positive");
            return -EINVAL;
        }
    }
    if (!llama3) {
        c->rope_factor = (float)v[0];
        return 0;
    }
    if (!(v[2] > v[1])) {
        tandem_set_err(
            err, errlen,
            "%s: rope_scaling.high_freq_factor %g must be larger than low_freq_factor %g", label,
            v[2], v[1]);
        return -EINVAL;
    }
    if (c->head_dim < 2 || c->head_dim > 4096) {
        tandem_set_err(err, errlen, "%s: head_dim %d: rope_scaling needs 2..4096", label,
                       c->head_dim);
        return -EINVAL;
    }
    float *f = model__alloc(m, sizeof(float) * (size_t)(c->head_dim / 2));
    if (!f) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return -ENOMEM;
    }
    model_llama3_rope_freqs(f, c->head_dim, (float)theta, (float)v[0], (float)v[1], (float)v[2],
                            (float)v[3]);
    c->rope_freqs = f;
    return 0;
}

/* One of LongRoPE's factor lists (rope_scaling.long_factor / short_factor): n positive finite
 * numbers, copied into model memory. */
static int hf_rope_factor_list(model *m, const char *label, struct json_object *s, const char *key,
                               int n, const float **out, char *err, size_t errlen)
{
    struct json_object *list = NULL;
    char e[192];
    if (json_get_array(s, key, &list, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: rope_scaling.%s (type longrope): %s", label, key, e);
        return -EINVAL;
    }
    if (json_object_array_length(list) != (size_t)n) {
        tandem_set_err(err, errlen,
                       "%s: rope_scaling.%s (type longrope) has %zu values, expected %d (the "
                       "rotary dims / 2)",
                       label, key, json_object_array_length(list), n);
        return -EINVAL;
    }
    float *f = model__alloc(m, sizeof(float) * (size_t)n);
    if (!f) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        struct json_object *v = json_object_array_get_idx(list, (size_t)i);
        const bool num =
            json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int);
        const double d = num ? json_object_get_double(v) : NAN;
        if (!(d > 0.0 && d < 1e30)) {
            tandem_set_err(err, errlen,
                           "%s: rope_scaling.%s[%d] (type longrope) must be a positive number",
                           label, key, i);
            return -EINVAL;
        }
        f[i] = (float)d;
    }
    *out = f;
    return 0;
}

/*
 * rope_scaling of type longrope (or its old name su: Phi-3 / Phi-3.5 / Phi-4-mini), as
 * transformers' _compute_longrope_parameters reads it: short_factor and long_factor (the rotary
 * dims / 2 each); the original context from the config's original_max_position_embeddings (or
 * rope_scaling's, transformers 5), the scale s = max_position_embeddings / that (without one:
 * the original is max_position_embeddings and s is rope_scaling.factor); the magnitude
 * attention_factor, else sqrt(1 + ln s / ln original) for s > 1, else 1. Which list applies is
 * chosen by the context (model_rope_freqs). Called once n_rot is known.
 */
static int hf_rope_longrope(model *m, const char *label, struct json_object *cfg,
                            struct json_object *s, char *err, size_t errlen)
{
    model_config *c = &m->cfg;
    char e[192];
    const int n = c->n_rot / 2;
    if (n < 1) {
        tandem_set_err(err, errlen, "%s: rope_scaling (type longrope) needs rotary dims", label);
        return -EINVAL;
    }
    int rc = hf_rope_factor_list(m, label, s, "short_factor", n, &c->rope_freqs, err, errlen);
    rc = rc ? rc
            : hf_rope_factor_list(m, label, s, "long_factor", n, &c->rope_freqs_long, err, errlen);
    if (rc != 0) {
        return rc;
    }
    const char *okey = "original_max_position_embeddings";
    struct json_object *in = json_get(cfg, okey) ? cfg : json_get(s, okey) ? s : NULL;
    double orig = (double)c->n_ctx_train, scale = 0.0, attn = NAN;
    if (in) {
        rc = json_get_double(in, okey, &orig, e, sizeof(e));
        scale = rc == 0 && orig > 0.0 ? (double)c->n_ctx_train / orig : 0.0;
    } else {
        rc = json_get_double(s, "factor", &scale, e, sizeof(e));
    }
    if (rc != 0 || !(orig >= 1.0 && orig < 1e9) || !(scale > 0.0 && scale < 1e9)) {
        tandem_set_err(err, errlen, "%s: rope_scaling (type longrope): %s", label,
                       rc ? e
                          : "original_max_position_embeddings (or, without it, factor) must be "
                            "a positive number");
        return -EINVAL;
    }
    if (json_opt_double(s, "attention_factor", NAN, &attn, e, sizeof(e)) != 0 ||
        (json_get(s, "attention_factor") && !(attn > 0.0 && attn < 1e6))) {
        tandem_set_err(err, errlen, "%s: rope_scaling.attention_factor (type longrope): %s", label,
                       json_get(s, "attention_factor") ? "must be a positive number" : e);
        return -EINVAL;
    }
    if (isnan(attn)) {
        attn = scale <= 1.0 ? 1.0 : sqrt(1.0 + log(scale) / log(orig));
    }
    c->rope_long_ctx = (int)orig;
    c->rope_attn_factor = (float)attn;
    return 0;
}

/* transformers' get_mscale: YaRN's magnitude 0.1 * mscale * ln(scale) + 1, 1 for scale <= 1. */
static double hf_get_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* transformers' find_correction_dim, in double as Python's math. */
static double hf_yarn_corr_dim(double beta, int dim, double base, double orig_ctx)
{
    return (double)dim * log(orig_ctx / (beta * 2.0 * M_PI)) / (2.0 * log(base));
}

/*
 * rope_scaling of type yarn, as transformers' _compute_yarn_parameters reads it: factor and
 * original_max_position_embeddings required (transformers 4.4x ramped over
 * max_position_embeddings instead; llama.cpp's converter needs both), beta_fast / beta_slow (null
 * or 0: 32 / 1), truncate (only true, the default: llama.cpp has no untruncated ramp), and the
 * magnitude: attention_factor, else get_mscale(factor, mscale) / get_mscale(factor,
 * mscale_all_dim) when both are set, else get_mscale(factor). The magnitude is kept as its
 * ratio to get_mscale(factor), the part llama.cpp's YaRN multiplies by itself
 * (model_rope_attn_factor), so the angles and cos/sin come out as for the GGUF conversion.
 */
static int hf_rope_yarn(model *m, const char *label, struct json_object *s, double theta, char *err,
                        size_t errlen)
{
    char e[256];
    model_config *c = &m->cfg;
    double factor = NAN, orig = NAN, bf = 0.0, bs = 0.0, attn = 0.0, ms = 0.0, ms_all = 0.0;
    int truncate = 1;
    static const char *const keys[] = {"factor", "original_max_position_embeddings"};
    double *req[] = {&factor, &orig};
    for (int i = 0; i < 2; i++) {
        if (json_opt_double(s, keys[i], NAN, req[i], e, sizeof(e)) != 0) {
            tandem_set_err(err, errlen, "%s: rope_scaling.%s (type yarn)", label, e);
            return -EINVAL;
        }
        if (!(*req[i] > 0.0) || !(*req[i] < (i == 0 ? 1e6 : 1e9))) {
            tandem_set_err(err, errlen, "%s: rope_scaling.%s (type yarn): %s", label, keys[i],
                           isnan(*req[i]) ? "required, a positive number" : "out of range");
            return -EINVAL;
        }
    }
    if (orig != floor(orig)) {
        tandem_set_err(err, errlen,
                       "%s: rope_scaling.original_max_position_embeddings (type yarn): %g is not "
                       "an integer",
                       label, orig);
        return -EINVAL;
    }
    static const char *const opt[] = {"beta_fast", "beta_slow", "attention_factor", "mscale",
                                      "mscale_all_dim"};
    double *ov[] = {&bf, &bs, &attn, &ms, &ms_all};
    for (int i = 0; i < 5; i++) {
        if (json_opt_double(s, opt[i], 0.0, ov[i], e, sizeof(e)) != 0) {
            tandem_set_err(err, errlen, "%s: rope_scaling.%s", label, e);
            return -EINVAL;
        }
        /* 0 means unset for all but attention_factor, which transformers would use as is */
        if (!(*ov[i] >= 0.0 && *ov[i] < 1e6) || (i == 2 && *ov[i] == 0.0 && json_get(s, opt[i]))) {
            tandem_set_err(err, errlen,
                           "%s: rope_scaling.%s (type yarn): %g is not a positive number", label,
                           opt[i], *ov[i]);
            return -EINVAL;
        }
    }
    if (json_opt_bool(s, "truncate", 1, &truncate, e, sizeof(e)) != 0 || !truncate) {
        tandem_set_err(err, errlen, "%s: rope_scaling.truncate (type yarn): %s", label,
                       truncate ? e : "false is not supported (llama.cpp truncates the ramp)");
        return -EINVAL;
    }
    bf = bf != 0.0 ? bf : 32.0; /* Python's `or`: null and 0 take the default */
    bs = bs != 0.0 ? bs : 1.0;
    const double lo = fmax(0.0, floor(hf_yarn_corr_dim(bf, c->head_dim, theta, orig)));
    const double hi =
        fmin((double)(c->head_dim - 1), ceil(hf_yarn_corr_dim(bs, c->head_dim, theta, orig)));
    if (!(lo <= hi)) {
        tandem_set_err(err, errlen,
                       "%s: rope_scaling.beta_fast %g / beta_slow %g (type yarn): the ramp's ends "
                       "%g > %g (head_dim %d, original_max_position_embeddings %g) are not "
                       "supported",
                       label, bf, bs, lo, hi, c->head_dim, orig);
        return -EINVAL;
    }
    if (attn == 0.0) {
        attn = ms != 0.0 && ms_all != 0.0
                   ? hf_get_mscale(factor, ms) / hf_get_mscale(factor, ms_all)
                   : hf_get_mscale(factor, 1.0);
    }
    if (!(attn > 0.0 && attn < 1e6)) {
        tandem_set_err(err, errlen,
                       "%s: rope_scaling.mscale %g / mscale_all_dim %g (type yarn): the "
                       "magnitude %g is not positive",
                       label, ms, ms_all, attn);
        return -EINVAL;
    }
    c->rope_factor = (float)factor;
    c->rope_yarn_orig_ctx = (int)orig;
    c->rope_yarn_beta_fast = (float)bf;
    c->rope_yarn_beta_slow = (float)bs;
    c->rope_attn_factor = (float)(attn / hf_get_mscale(factor, 1.0));
    return 0;
}

/* Whether cfg has key, null included (transformers tells "absent: the default" from "null"). */
static bool has_key(struct json_object *cfg, const char *key)
{
    return json_object_object_get_ex(cfg, key, NULL);
}

/* A soft-capping value: absent gives def, null 0 (none), else a positive number. */
static int hf_softcap(const char *label, struct json_object *cfg, const char *key, double def,
                      float *out, char *err, size_t errlen)
{
    char e[256];
    double v = 0.0;
    if (json_opt_double(cfg, key, has_key(cfg, key) ? 0.0 : def, &v, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: %s", label, e);
        return -EINVAL;
    }
    if (!(v >= 0.0 && v < 1e30)) {
        tandem_set_err(err, errlen, "%s: %s: %g is not a positive number or null", label, key, v);
        return -EINVAL;
    }
    *out = (float)v;
    return 0;
}

/* gemma's layer_types: one "sliding_attention" or "full_attention" per layer. */
static int hf_layer_types(model *m, const char *label, struct json_object *types, char *err,
                          size_t errlen)
{
    model_priv *priv = m->priv;
    const int n = m->cfg.n_layer;
    if (n < 1 || json_object_array_length(types) != (size_t)n) {
        tandem_set_err(err, errlen, "%s: layer_types: %zu entries for %d layers", label,
                       json_object_array_length(types), n);
        return -EINVAL;
    }
    uint8_t *slides = model__alloc(m, (size_t)n);
    if (!slides) {
        tandem_set_err(err, errlen, "%s: out of memory", label);
        return -ENOMEM;
    }
    for (int il = 0; il < n; il++) {
        struct json_object *v = json_object_array_get_idx(types, (size_t)il);
        const char *t = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
        if (strcmp(t, "sliding_attention") != 0 && strcmp(t, "full_attention") != 0) {
            tandem_set_err(err, errlen,
                           "%s: layer_types[%d]: expected \"sliding_attention\" or "
                           "\"full_attention\"",
                           label, il);
            return -EINVAL;
        }
        slides[il] = t[0] == 's';
    }
    priv->swa_layers = slides;
    return 0;
}

/*
 * Sliding-window attention as transformers and vLLM apply it: gemma's local layers
 * (sliding_window, default 4096; which layers: layer_types, else gemma3's
 * sliding_window_pattern (default 6: five local layers, then a global one), else gemma2's every
 * other layer from the first); the other architectures' sliding_window (Mistral, Phi-3,
 * Mixtral) on every layer; qwen2/qwen3/qwen3moe only with use_sliding_window, which is not
 * supported (their sliding_window is ignored without it). Null or 0: none.
 */
static int hf_sliding_window(model *m, const char *label, struct json_object *cfg, char *err,
                             size_t errlen)
{
    model_config *c = &m->cfg;
    model_priv *priv = m->priv;
    char e[256];
    const bool gemma = is_gemma(c->arch);
    if (c->arch == MODEL_ARCH_QWEN2 || c->arch == MODEL_ARCH_QWEN3 ||
        c->arch == MODEL_ARCH_QWEN3MOE || c->arch == MODEL_ARCH_QWEN2MOE) {
        int sliding = 0;
        if (json_opt_bool(cfg, "use_sliding_window", 0, &sliding, e, sizeof(e)) != 0 || sliding) {
            tandem_set_err(err, errlen, "%s: %s", label,
                           sliding ? "use_sliding_window: sliding-window attention is not "
                                     "supported for this architecture"
                                   : e);
            return -EINVAL;
        }
        return 0;
    }
    int window = 0;
    if (json_opt_int(cfg, "sliding_window", gemma && !has_key(cfg, "sliding_window") ? 4096 : 0,
                     &window, e, sizeof(e)) != 0 ||
        window < 0) {
        tandem_set_err(err, errlen, "%s: %s", label,
                       window < 0 ? "sliding_window: must be >= 0 or null" : e);
        return -EINVAL;
    }
    c->n_swa = window;
    /* gemma3's local layers rotate with their own base and without the global scaling */
    c->rope_swa_scaled = window > 0 && c->arch != MODEL_ARCH_GEMMA3;
    priv->swa_pattern = 0; /* every layer */
    if (window == 0 || !gemma) {
        return 0;
    }
    struct json_object *types;
    if (json_opt_array(cfg, "layer_types", NULL, &types, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: %s", label, e);
        return -EINVAL;
    }
    if (types) {
        return hf_layer_types(m, label, types, err, errlen);
    }
    int pattern = 2;
    if (c->arch == MODEL_ARCH_GEMMA3 &&
        (json_opt_int(cfg, "sliding_window_pattern", 6, &pattern, e, sizeof(e)) != 0 ||
         pattern < 1)) {
        tandem_set_err(err, errlen, "%s: %s", label,
                       pattern < 1 ? "sliding_window_pattern: must be >= 1" : e);
        return -EINVAL;
    }
    priv->swa_pattern = pattern;
    return 0;
}

/*
 * Experts: Qwen3-MoE's num_experts, num_experts_per_tok and moe_intermediate_size, with every
 * layer sparse (decoder_sparse_step 1, no mlp_only_layers) and the top experts' weights
 * renormalized (norm_topk_prob true, as llama.cpp computes qwen3moe); Mixtral's
 * num_local_experts and num_experts_per_tok, its experts intermediate_size wide.
 */
static int hf_experts(model *m, const char *label, struct json_object *cfg, char *err,
                      size_t errlen)
{
    model_config *c = &m->cfg;
    char e[256];
    int rc = 0;
    if (c->arch == MODEL_ARCH_QWEN3MOE || c->arch == MODEL_ARCH_QWEN2MOE) {
        const bool q2 = c->arch == MODEL_ARCH_QWEN2MOE;
        int norm = 0, step = 1;
        struct json_object *dense;
        rc = json_get_int(cfg, "num_experts", &c->n_expert, e, sizeof(e));
        rc = rc ? rc : json_get_int(cfg, "num_experts_per_tok", &c->n_expert_used, e, sizeof(e));
        rc = rc ? rc : json_get_int(cfg, "moe_intermediate_size", &c->n_ff_exp, e, sizeof(e));
        rc = rc ? rc : json_opt_bool(cfg, "norm_topk_prob", 0, &norm, e, sizeof(e));
        rc = rc || !q2 ? rc
                       : json_get_int(cfg, "shared_expert_intermediate_size", &c->n_ff_shexp, e,
                                      sizeof(e));
        rc = rc ? rc : json_opt_int(cfg, "decoder_sparse_step", 1, &step, e, sizeof(e));
        rc = rc ? rc : json_opt_array(cfg, "mlp_only_layers", NULL, &dense, e, sizeof(e));
        if (rc != 0) {
            tandem_set_err(err, errlen, "%s: %s", label, e);
            return -EINVAL;
        }
        if (norm == q2) {
            tandem_set_err(err, errlen,
                           q2 ? "%s: norm_topk_prob: true is not supported: the chosen experts "
                                "keep their probabilities, as llama.cpp computes qwen2moe"
                              : "%s: norm_topk_prob: false (or absent) is not supported: the "
                                "chosen experts' weights are renormalized, as llama.cpp does for "
                                "qwen3moe",
                           label);
            return -EINVAL;
        }
        c->expert_weights_raw = q2;
        if (step != 1 || (dense && json_object_array_length(dense) > 0)) {
            tandem_set_err(err, errlen,
                           "%s: %s: dense layers between the MoE layers are not "
                           "supported",
                           label, step != 1 ? "decoder_sparse_step" : "mlp_only_layers");
            return -EINVAL;
        }
    } else if (c->arch == MODEL_ARCH_LLAMA && has_key(cfg, "num_local_experts")) {
        rc = json_get_int(cfg, "num_local_experts", &c->n_expert, e, sizeof(e));
        rc = rc ? rc : json_opt_int(cfg, "num_experts_per_tok", 2, &c->n_expert_used, e, sizeof(e));
        if (rc != 0) {
            tandem_set_err(err, errlen, "%s: %s", label, e);
            return -EINVAL;
        }
        c->n_ff_exp = c->n_ff;
    } else {
        return 0;
    }
    if (c->n_expert < 1 || c->n_expert_used < 1) {
        tandem_set_err(err, errlen, "%s: %s: must be > 0", label,
                       c->n_expert < 1
                           ? (c->arch == MODEL_ARCH_LLAMA ? "num_local_experts" : "num_experts")
                           : "num_experts_per_tok");
        return -EINVAL;
    }
    return 0;
}

/*
 * What sets the architectures apart (model_config's features): gemma's embedding scale
 * sqrt(hidden_size), GeGLU, attention scale query_pre_attn_scalar^-0.5 (as llama.cpp computes
 * it, in float), soft-caps (gemma2 default 50 / 30, gemma3 none; null: none) and gemma3's local
 * RoPE base rope_local_base_freq (default 10000) or rope_local's rope_theta (transformers 5's
 * rope_parameters.sliding_attention); partial_rotary_factor (Phi-3 / Phi-4-mini:
 * n_rot = int(head_dim x factor), as transformers); the experts; the sliding window.
 */
static int hf_arch_features(model *m, const char *label, struct json_object *cfg, double theta,
                            struct json_object *rope_local, char *err, size_t errlen)
{
    model_config *c = &m->cfg;
    char e[256];
    double rot = 1.0;
    c->rope_base_swa = (float)theta;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (json_opt_double(cfg, "partial_rotary_factor", 1.0, &rot, e, sizeof(e)) != 0 ||
        !(rot > 0.0 && rot <= 1.0)) {
        tandem_set_err(
            err, errlen, "%s: %s", label,
            isnan(rot) || rot <= 0.0 || rot > 1.0 ? "partial_rotary_factor: must be in (0, 1]" : e);
        return -EINVAL;
    }
    c->n_rot = (int)((double)c->head_dim * rot);
    int rc = 0;
    if (is_gemma(c->arch)) {
        const bool g2 = c->arch == MODEL_ARCH_GEMMA2;
        double scalar = 0.0, local = 0.0;
        c->embd_scale = sqrtf((float)c->n_embd);
        rc = json_opt_double(cfg, "query_pre_attn_scalar", 256.0, &scalar, e, sizeof(e));
        rc = rc ? rc : json_opt_double(cfg, "rope_local_base_freq", 10000.0, &local, e, sizeof(e));
        /* transformers 5: rope_parameters.sliding_attention, unscaled */
        const char *type = "default";
        rc = rc || !rope_local
                 ? rc
                 : json_opt_double(rope_local, "rope_theta", local, &local, e, sizeof(e));
        rc = rc || !rope_local
                 ? rc
                 : json_opt_string(rope_local, "rope_type", "default", &type, e, sizeof(e));
        if (rc == 0 && strcmp(type, "default") != 0) {
            tandem_set_err(err, errlen,
                           "%s: rope_parameters.sliding_attention.rope_type '%.32s' is not "
                           "supported (only default)",
                           label, type);
            return -EINVAL;
        }
        if (rc != 0 || !(scalar > 0.0 && scalar < 1e9) || !(local > 0.0 && local < 1e30)) {
            tandem_set_err(err, errlen, "%s: %s", label,
                           rc != 0 ? e
                           : !(scalar > 0.0 && scalar < 1e9)
                               ? "query_pre_attn_scalar: must be a positive number"
                               : "rope_local_base_freq: must be a positive number");
            return -EINVAL;
        }
        c->attn_scale = 1.0f / sqrtf((float)scalar);
        int bidirectional = 0; /* EmbeddingGemma's encoder */
        if (json_opt_bool(cfg, "use_bidirectional_attention", 0, &bidirectional, e, sizeof(e)) !=
                0 ||
            bidirectional) {
            tandem_set_err(err, errlen, "%s: %s", label,
                           bidirectional ? "use_bidirectional_attention: true (an embedding "
                                           "model) is not supported"
                                         : e);
            return -EINVAL;
        }
        if (!g2) {
            c->rope_base_swa = (float)local;
        }
        rc = hf_softcap(label, cfg, "attn_logit_softcapping", g2 ? 50.0 : 0.0, &c->attn_softcap,
                        err, errlen);
        rc = rc ? rc
                : hf_softcap(label, cfg, "final_logit_softcapping", g2 ? 30.0 : 0.0,
                             &c->final_softcap, err, errlen);
    }
    rc = rc ? rc : hf_experts(m, label, cfg, err, errlen);
    return rc ? rc : hf_sliding_window(m, label, cfg, err, errlen);
}

static int hf_config(model *m, const char *label, struct json_object *cfg, char *err, size_t errlen)
{
    char e[256];
    model_config *c = &m->cfg;
    int rc = hf_arch(label, cfg, &c->arch, err, errlen);
    if (rc != 0) {
        return rc;
    }
    c->rope_neox = true;
    const bool gemma = is_gemma(c->arch);
    double theta, eps;
    int tie, attn_bias, mlp_bias;
    const char *act;
    rc = json_get_int(cfg, "hidden_size", &c->n_embd, e, sizeof(e));
    rc = rc ? rc : json_get_int(cfg, "num_hidden_layers", &c->n_layer, e, sizeof(e));
    rc = rc ? rc : json_get_int(cfg, "num_attention_heads", &c->n_head, e, sizeof(e));
    rc = rc ? rc : json_get_int(cfg, "intermediate_size", &c->n_ff, e, sizeof(e));
    rc = rc ? rc : json_get_int(cfg, "vocab_size", &c->n_vocab, e, sizeof(e));
    rc = rc ? rc : json_get_int(cfg, "max_position_embeddings", &c->n_ctx_train, e, sizeof(e));
    if (rc == 0 && c->n_head < 1) {
        snprintf(e, sizeof(e), "num_attention_heads: must be > 0");
        rc = -EINVAL;
    }
    rc = rc ? rc : json_opt_int(cfg, "num_key_value_heads", c->n_head, &c->n_head_kv, e, sizeof(e));
    rc = rc ? rc
            : json_opt_int(cfg, "head_dim",
                           gemma           ? 256
                           : c->n_head > 0 ? c->n_embd / c->n_head
                                           : 0,
                           &c->head_dim, e, sizeof(e));
    rc = rc ? rc : json_opt_double(cfg, "rope_theta", 10000.0, &theta, e, sizeof(e));
    rc = rc ? rc : json_opt_double(cfg, "rms_norm_eps", 1e-6, &eps, e, sizeof(e));
    rc = rc ? rc : json_opt_bool(cfg, "tie_word_embeddings", gemma, &tie, e, sizeof(e));
    rc = rc ? rc : json_opt_bool(cfg, "attention_bias", 0, &attn_bias, e, sizeof(e));
    rc = rc ? rc : json_opt_bool(cfg, "mlp_bias", 0, &mlp_bias, e, sizeof(e));
    /* gemma's activation is hidden_activation (gemma2 configs carry hidden_act too) */
    const char *act_key =
        gemma && has_key(cfg, "hidden_activation") ? "hidden_activation" : "hidden_act";
    rc = rc ? rc
            : json_opt_string(cfg, act_key, gemma ? "gelu_pytorch_tanh" : "silu", &act, e,
                              sizeof(e));
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", label, e);
        return -EINVAL;
    }
    if (strcmp(act, gemma ? "gelu_pytorch_tanh" : "silu") != 0) {
        tandem_set_err(err, errlen, "%s: %s '%.32s' is not supported (only %s for %s)", label,
                       act_key, act, gemma ? "gelu_pytorch_tanh" : "silu",
                       model_arch_name(c->arch));
        return -EINVAL;
    }
    c->ffn_act = gemma ? MODEL_ACT_GELU_TANH : MODEL_ACT_SILU;
    if (c->arch != MODEL_ARCH_QWEN2 && c->arch != MODEL_ARCH_QWEN3 &&
        c->arch != MODEL_ARCH_QWEN2MOE && (attn_bias || mlp_bias)) {
        tandem_set_err(err, errlen, "%s: %s is true, which is not supported for %s", label,
                       attn_bias ? "attention_bias" : "mlp_bias", model_arch_name(c->arch));
        return -EINVAL;
    }
    /* transformers 5 writes rope_parameters in place of rope_theta and rope_scaling, per
     * attention type where they differ (gemma3: full_attention, sliding_attention) */
    struct json_object *scaling = NULL, *params = NULL, *full = NULL, *local = NULL;
    struct json_object *longrope = NULL;
    rc = json_opt_object(cfg, "rope_parameters", NULL, &params, e, sizeof(e));
    rc = rc || !params ? rc : json_opt_object(params, "full_attention", NULL, &full, e, sizeof(e));
    rc = rc || !params ? rc
                       : json_opt_object(params, "sliding_attention", NULL, &local, e, sizeof(e));
    params = full ? full : params;
    rc = rc || !params ? rc : json_opt_double(params, "rope_theta", theta, &theta, e, sizeof(e));
    rc = rc || params ? rc : json_opt_object(cfg, "rope_scaling", NULL, &scaling, e, sizeof(e));
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s%s", label, params ? "rope_parameters." : "", e);
        return -EINVAL;
    }
    if (params) {
        scaling = params;
    }
    if (scaling) {
        const char *type = NULL;
        if (json_opt_string(scaling, "rope_type", NULL, &type, e, sizeof(e)) != 0 ||
            (!type && json_opt_string(scaling, "type", NULL, &type, e, sizeof(e)) != 0)) {
            tandem_set_err(err, errlen, "%s: rope_scaling.%s", label, e);
            return -EINVAL;
        }
        if (!type && params) {
            type = "default"; /* rope_parameters with only rope_theta */
        }
        if (!type || (strcmp(type, "default") != 0 && strcmp(type, "linear") != 0 &&
                      strcmp(type, "llama3") != 0 && strcmp(type, "yarn") != 0 &&
                      strcmp(type, "longrope") != 0 && strcmp(type, "su") != 0)) {
            tandem_set_err(err, errlen,
                           "%s: rope_scaling type '%.32s' is not supported (null, 'default', "
                           "'linear', 'llama3', 'yarn' or 'longrope')",
                           label, type ? type : "(none)");
            return -EINVAL;
        }
        if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
            longrope = scaling; /* read once the rotary dims are known */
        } else if (strcmp(type, "yarn") == 0) {
            rc = hf_rope_yarn(m, label, scaling, theta, err, errlen);
        } else if (strcmp(type, "default") != 0) {
            rc = hf_rope_scaling(m, label, scaling, type, theta, err, errlen);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (c->n_vocab < 1) {
        tandem_set_err(err, errlen, "%s: vocab_size: must be > 0", label);
        return -EINVAL;
    }
    if (c->n_head > 0 && c->n_embd % c->n_head != 0 && !json_get(cfg, "head_dim")) {
        tandem_set_err(err, errlen,
                       "%s: hidden_size %d is not a multiple of num_attention_heads %d", label,
                       c->n_embd, c->n_head);
        return -EINVAL;
    }
    c->rope_base = (float)theta;
    c->rms_eps = (float)eps;
    c->tied_output = tie != 0;
    rc = hf_arch_features(m, label, cfg, theta, local, err, errlen);
    if (rc == 0 && longrope) {
        rc = hf_rope_longrope(m, label, cfg, longrope, err, errlen);
    }
    return rc ? rc : model__check_config(m, label, err, errlen);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted *.safetensors names of dir (caller frees each and the array). */
static int list_shards(const char *dir, char ***out, size_t *n_out, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        int rc = errno ? -errno : -EIO;
        tandem_set_err(err, errlen, "%s: cannot open directory: %s", dir, tandem_strerror(rc));
        return rc;
    }
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= 12 ||
            strcmp(de->d_name + len - 12, ".safetensors") != 0) {
            continue;
        }
        if (n == HF_MAX_SHARDS) {
            tandem_set_err(err, errlen, "%s: more than %d *.safetensors files", dir, HF_MAX_SHARDS);
            rc = -EINVAL;
            break;
        }
        char **v = realloc(names, (n + 1) * sizeof(*v));
        if (v) {
            names = v;
        }
        char *s = v ? strdup(de->d_name) : NULL;
        if (!s) {
            tandem_set_err(err, errlen, "%s: out of memory", dir);
            rc = -ENOMEM;
            break;
        }
        names[n++] = s;
    }
    closedir(d);
    if (rc == 0 && n == 0) {
        tandem_set_err(err, errlen, "%s: no *.safetensors files in the directory", dir);
        rc = -ENOENT;
    }
    if (rc != 0) {
        for (size_t i = 0; i < n; i++) {
            free(names[i]);
        }
        free(names);
        return rc;
    }
    qsort(names, n, sizeof(*names), cmp_str);
    *out = names;
    *n_out = n;
    return 0;
}

float model__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while ((mant & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* Converts a 1-D F32/F16/BF16 tensor to an owned F32 copy, plus `add` (gemma's norms: HF
 * stores w and computes x (1 + w), in float), in place of t's data. */
static int to_f32(model *m, model_tensor *t, float add)
{
    size_t n = (size_t)t->ne[0];
    float *dst = model__alloc(m, n * sizeof(float));
    if (!dst) {
        return -ENOMEM;
    }
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (t->type == TD_F32) {
            memcpy(&dst[i], src + 4 * i, sizeof(float));
        } else if (t->type == TD_BF16) {
            memcpy(&h, src + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, sizeof(float));
        } else {
            memcpy(&h, src + 2 * i, 2);
            dst[i] = model__f16_to_f32(h);
        }
        dst[i] += add;
    }
    t->type = TD_F32;
    t->data = dst;
    t->nbytes = n * sizeof(float);
    return 0;
}

/* qsort_r comparator of indexes into the model_tensor array arg, by name. */
static int cmp_tensor_name(const void *a, const void *b, void *arg)
{
    const model_tensor *t = arg;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Opens every shard and fills m->tensors with GGUF-named views. */
static int hf_tensors(model *m, char *err, size_t errlen)
{
    model_priv *priv = m->priv;
    char **names = NULL;
    size_t n_names = 0;
    int rc = list_shards(m->path, &names, &n_names, err, errlen);
    if (rc != 0) {
        return rc;
    }
    priv->st = calloc(n_names ? n_names : 1, sizeof(void *)); /* safetensors_file *[] */
    if (!priv->st) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        rc = -ENOMEM;
        goto out_names;
    }
    size_t total = 0;
    for (size_t i = 0; i < n_names; i++) {
        char *p = path_join(m->path, names[i]);
        if (!p) {
            rc = -ENOMEM;
            goto out_names;
        }
        priv->st[i] = safetensors_open(p, err, errlen);
        free(p);
        if (!priv->st[i]) {
            rc = -EINVAL;
            goto out_names;
        }
        priv->n_st++;
        total += priv->st[i]->n_tensors;
    }
    m->tensors = calloc(total ? total : 1, sizeof(*m->tensors));
    if (!m->tensors) {
        rc = -ENOMEM;
        goto out_names;
    }
    for (size_t i = 0; i < priv->n_st; i++) {
        const safetensors_file *f = priv->st[i];
        TANDEM_ASSERT(f != NULL);
        for (size_t j = 0; j < f->n_tensors; j++) {
            const safetensors_tensor *st = &f->tensors[j];
            model_tensor *t = &m->tensors[m->n_tensors++];
            char gname[160];
            const char *name =
                hf_to_gguf(m->cfg.arch, st->name, gname, sizeof(gname)) ? gname : st->name;
            t->name = model__strndup(m, name, strlen(name));
            if (!t->name) {
                rc = -ENOMEM;
                goto out_names;
            }
            t->type = st->type;
            t->n_dims = st->n_dims > 0 ? st->n_dims : 1;
            for (int d = 0; d < 4; d++) {
                t->ne[d] = d < st->n_dims ? st->shape[st->n_dims - 1 - d] : 1;
            }
            t->data = st->data;
            t->nbytes = st->nbytes;
            /* gemma: every *norm.weight (llama.cpp's converter adds the 1 too) */
            const size_t hl = strlen(st->name);
            const bool plus_one =
                is_gemma(m->cfg.arch) && hl >= 11 && strcmp(st->name + hl - 11, "norm.weight") == 0;
            /* qwen2moe's shared_expert_gate is one row [1, hidden]: a vector like a norm */
            const bool vec = t->n_dims == 1 || (t->n_dims == 2 && t->ne[1] == 1);
            if (vec && (t->type != TD_F32 || plus_one) &&
                (t->type == TD_F32 || t->type == TD_F16 || t->type == TD_BF16)) {
                rc = to_f32(m, t, plus_one ? 1.0f : 0.0f);
                if (rc != 0) {
                    goto out_names;
                }
            }
        }
    }
    size_t *sorted = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*sorted));
    if (!sorted) {
        rc = -ENOMEM;
        goto out_names;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        sorted[i] = i;
    }
    qsort_r(sorted, m->n_tensors, sizeof(*sorted), cmp_tensor_name, m->tensors);
    for (size_t i = 1; i < m->n_tensors; i++) {
        const char *name = m->tensors[sorted[i]].name;
        if (strcmp(name, m->tensors[sorted[i - 1]].name) == 0) {
            tandem_set_err(err, errlen,
                           "%s: tensor '%s' appears more than once in the *.safetensors files",
                           m->path, name);
            rc = -EINVAL;
            break;
        }
    }
    free(sorted);
out_names:
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
    }
    for (size_t i = 0; i < n_names; i++) {
        free(names[i]);
    }
    free(names);
    return rc;
}

/* A special token entry of tokenizer_config.json: a string, {"content": ...} or null. */
static int token_text(const char *label, struct json_object *tc, const char *key, char **out,
                      char *err, size_t errlen)
{
    struct json_object *v = json_get(tc, key);
    *out = NULL;
    if (!v) {
        return 0;
    }
    const char *s = NULL;
    char e[256];
    if (json_object_is_type(v, json_type_string)) {
        s = json_object_get_string(v);
    } else if (json_object_is_type(v, json_type_object)) {
        if (json_get_string(v, "content", &s, e, sizeof(e)) != 0) {
            tandem_set_err(err, errlen, "%s: %s.%s", label, key, e);
            return -EINVAL;
        }
    } else {
        tandem_set_err(err, errlen, "%s: %s: expected string or object, got %s", label, key,
                       json_type_label(v));
        return -EINVAL;
    }
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

static int chat_template(const char *label, struct json_object *tc, char **out, char *err,
                         size_t errlen)
{
    struct json_object *v = json_get(tc, "chat_template");
    *out = NULL;
    if (!v) {
        return 0;
    }
    char e[256];
    const char *s = NULL;
    if (json_object_is_type(v, json_type_string)) {
        s = json_object_get_string(v);
    } else if (json_object_is_type(v, json_type_array)) {
        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n; i++) {
            char path[48];
            const char *name, *tmpl;
            snprintf(path, sizeof(path), "[%zu].name", i);
            if (json_get_string(v, path, &name, e, sizeof(e)) != 0) {
                tandem_set_err(err, errlen, "%s: chat_template%s", label, e);
                return -EINVAL;
            }
            snprintf(path, sizeof(path), "[%zu].template", i);
            if (json_get_string(v, path, &tmpl, e, sizeof(e)) != 0) {
                tandem_set_err(err, errlen, "%s: chat_template%s", label, e);
                return -EINVAL;
            }
            if (strcmp(name, "default") == 0) {
                s = tmpl;
            }
        }
        if (!s) {
            return 0;
        }
    } else {
        tandem_set_err(err, errlen, "%s: chat_template: expected string or array, got %s", label,
                       json_type_label(v));
        return -EINVAL;
    }
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

/* tokenizer.json (required), tokenizer_config.json (optional): paths, template, BOS/EOS. */
static int hf_tokenizer(model *m, char *err, size_t errlen)
{
    m->hf_tokenizer_json = path_join(m->path, "tokenizer.json");
    char *tc_path = path_join(m->path, "tokenizer_config.json");
    char *jinja_path = path_join(m->path, "chat_template.jinja");
    int rc = 0;
    struct stat st;
    struct json_object *tc = NULL;
    if (!m->hf_tokenizer_json || !tc_path || !jinja_path) {
        rc = -ENOMEM;
        goto out;
    }
    if (stat(m->hf_tokenizer_json, &st) != 0 || !S_ISREG(st.st_mode)) {
        tandem_set_err(err, errlen, "%s: missing tokenizer.json", m->path);
        rc = -ENOENT;
        goto out;
    }
    if (stat(tc_path, &st) == 0) {
        rc = model__read_json(tc_path, &tc, err, errlen);
        rc = rc ? rc : chat_template(tc_path, tc, &m->chat_template, err, errlen);
        rc = rc ? rc : token_text(tc_path, tc, "bos_token", &m->bos_token, err, errlen);
        rc = rc ? rc : token_text(tc_path, tc, "eos_token", &m->eos_token, err, errlen);
        if (rc != 0) {
            goto out;
        }
        m->hf_tokenizer_config = tc_path;
        tc_path = NULL;
    }
    if (!m->chat_template && stat(jinja_path, &st) == 0) {
        size_t len;
        rc = read_small_file(jinja_path, &m->chat_template, &len, err, errlen);
    }
out:
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
    }
    json_object_put(tc);
    free(tc_path);
    free(jinja_path);
    return rc;
}

int model__load_hf(model *m, char *err, size_t errlen)
{
    m->format = MODEL_FORMAT_HF;
    char *cfg_path = path_join(m->path, "config.json");
    if (!cfg_path) {
        return -ENOMEM;
    }
    struct json_object *cfg = NULL;
    int rc = model__read_json(cfg_path, &cfg, err, errlen);
    if (rc == 0) {
        rc = hf_config(m, cfg_path, cfg, err, errlen);
    }
    json_object_put(cfg);
    free(cfg_path);
    rc = rc ? rc : hf_tensors(m, err, errlen);
    rc = rc ? rc : hf_tokenizer(m, err, errlen);
    return rc;
}
