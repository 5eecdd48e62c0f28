/*
 * Model loading (model.h): dispatch on what the path is, the GGUF loader, and the checks shared
 * with the Hugging Face loader (hf.c): tensor types, presence and exact shapes against the
 * hyperparameters. GGUF tensors are used in place from the mapping; only small tokenizer arrays
 * (unaligned in the file) are copied.
 */
#include "engine/model/model.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/model_internal.h"
#include "lib/common.h"
#include "lib/err.h"

#define MODEL_MAX_DIM     (1 << 24) /* bound on any hyperparameter */
#define MODEL_MAX_LAYERS  4096
#define MODEL_MAX_EXPERTS 1024

const char *model_arch_name(model_arch a)
{
    switch (a) {
    case MODEL_ARCH_LLAMA:
        return "llama";
    case MODEL_ARCH_QWEN2:
        return "qwen2";
    case MODEL_ARCH_QWEN3:
        return "qwen3";
    case MODEL_ARCH_QWEN3MOE:
        return "qwen3moe";
    case MODEL_ARCH_PHI3:
        return "phi3";
    case MODEL_ARCH_GEMMA2:
        return "gemma2";
    case MODEL_ARCH_GEMMA3:
        return "gemma3";
    case MODEL_ARCH_QWEN2MOE:
        return "qwen2moe";
    }
    return "unknown";
}

int model__own(model *m, void *p)
{
    model_priv *priv = m->priv;
    if (!p) {
        return -ENOMEM;
    }
    void **v = tandem_grow(priv->owned, &priv->cap_owned, priv->n_owned + 1, sizeof(*v), 32);
    if (!v) {
        free(p);
        return -ENOMEM;
    }
    priv->owned = v;
    priv->owned[priv->n_owned++] = p;
    return 0;
}

void *model__alloc(model *m, size_t n)
{
    size_t size = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (!p || model__own(m, p) != 0) {
        return NULL;
    }
    memset(p, 0, size ? size : 64);
    return p;
}

char *model__strndup(model *m, const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (!p) {
        return NULL;
    }
    memcpy(p, s, len);
    p[len] = '\0';
    return model__own(m, p) == 0 ? p : NULL;
}

const model_tensor *model_find_tensor(const model *m, const char *name)
{
    if (!m || !name) {
        return NULL;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (strcmp(m->tensors[i].name, name) == 0) {
            return &m->tensors[i];
        }
    }
    return NULL;
}

void model_free(model *m)
{
    if (!m) {
        return;
    }
    model_priv *priv = m->priv;
    if (priv) {
        for (size_t i = 0; i < priv->n_owned; i++) {
            free(priv->owned[i]);
        }
        free(priv->owned);
        for (size_t i = 0; i < priv->n_st; i++) {
            safetensors_close(priv->st[i]);
        }
        free(priv->st);
        gguf_close(priv->gguf);
        free(priv);
    }
    free(m->tensors);
    free(m->layers);
    free(m->path);
    free(m->name);
    free(m->hf_tokenizer_json);
    free(m->hf_tokenizer_config);
    free(m->chat_template);
    free(m->bos_token);
    free(m->eos_token);
    free(m);
}

int model__check_config(const model *m, const char *label, char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    const struct {
        const char *name;
        int v;
        int max;
    } ranges[] = {
        {"n_layer", c->n_layer, MODEL_MAX_LAYERS},  {"n_embd", c->n_embd, MODEL_MAX_DIM},
        {"n_head", c->n_head, MODEL_MAX_DIM},       {"n_head_kv", c->n_head_kv, MODEL_MAX_DIM},
        {"head_dim", c->head_dim, MODEL_MAX_DIM},   {"n_ff", c->n_ff, MODEL_MAX_DIM},
        {"n_ctx_train", c->n_ctx_train, INT32_MAX},
    };
    for (size_t i = 0; i < ARRAY_SIZE(ranges); i++) {
        if (ranges[i].v < 1 || ranges[i].v > ranges[i].max) {
            tandem_set_err(err, errlen, "%s: %s = %d is out of range (1..%d)", label,
                           ranges[i].name, ranges[i].v, ranges[i].max);
            return -EINVAL;
        }
    }
    if (c->n_head_kv > c->n_head || c->n_head % c->n_head_kv != 0) {
        tandem_set_err(err, errlen, "%s: n_head = %d is not a multiple of n_head_kv = %d", label,
                       c->n_head, c->n_head_kv);
        return -EINVAL;
    }
    if ((int64_t)c->n_head * c->head_dim > MODEL_MAX_DIM) {
        tandem_set_err(err, errlen, "%s: n_head x head_dim is too large", label);
        return -EINVAL;
    }
    if (c->head_dim % 2 != 0) {
        tandem_set_err(err, errlen, "%s: head_dim = %d must be even for RoPE", label, c->head_dim);
        return -EINVAL;
    }
    if (c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2 != 0) {
        tandem_set_err(err, errlen, "%s: rotary dimension %d must be even and in 2..head_dim (%d)",
                       label, c->n_rot, c->head_dim);
        return -EINVAL;
    }
    if (c->n_swa < 0) {
        tandem_set_err(err, errlen, "%s: sliding window %d is negative", label, c->n_swa);
        return -EINVAL;
    }
    const struct {
        const char *name;
        float v;
    } nonneg[] = {{"attention logit soft-capping", c->attn_softcap},
                  {"final logit soft-capping", c->final_softcap},
                  {"embedding scale", c->embd_scale},
                  {"attention scale", c->attn_scale},
                  {"sliding-window rope base", c->rope_base_swa}};
    for (size_t i = 0; i < ARRAY_SIZE(nonneg); i++) {
        if (!(nonneg[i].v >= 0.0f && nonneg[i].v < 1e30f)) {
            tandem_set_err(err, errlen, "%s: %s = %g is out of range", label, nonneg[i].name,
                           (double)nonneg[i].v);
            return -EINVAL;
        }
    }
    if (c->n_expert != 0 &&
        (c->n_expert < 1 || c->n_expert > MODEL_MAX_EXPERTS || c->n_expert_used < 1 ||
         c->n_expert_used > c->n_expert || c->n_ff_exp < 1 || c->n_ff_exp > MODEL_MAX_DIM)) {
        tandem_set_err(err, errlen,
                       "%s: experts: %d in all, %d per token, hidden size %d (want 1 <= used <= "
                       "count <= %d and a hidden size >= 1)",
                       label, c->n_expert, c->n_expert_used, c->n_ff_exp, MODEL_MAX_EXPERTS);
        return -EINVAL;
    }
    if (c->arch == MODEL_ARCH_QWEN2MOE && (c->n_ff_shexp < 1 || c->n_ff_shexp > MODEL_MAX_DIM)) {
        tandem_set_err(err, errlen, "%s: shared expert hidden size %d must be >= 1", label,
                       c->n_ff_shexp);
        return -EINVAL;
    }
    if (!(c->rms_eps > 0.0f && c->rms_eps < 1.0f)) {
        tandem_set_err(err, errlen, "%s: rms_norm_eps = %g is out of range (0, 1)", label,
                       (double)c->rms_eps);
        return -EINVAL;
    }
    if (!(c->rope_base > 0.0f && c->rope_base < 1e30f)) {
        tandem_set_err(err, errlen, "%s: rope base = %g is out of range", label,
                       (double)c->rope_base);
        return -EINVAL;
    }
    return 0;
}

/* Error message for a missing tensor, naming the HF name too for HF models. */
static void missing_tensor(const model *m, const char *name, char *err, size_t errlen)
{
    char hf[160] = "";
    if (m->format == MODEL_FORMAT_HF) {
        model__hf_name(m->cfg.arch, name, hf, sizeof(hf));
    }
    if (hf[0]) {
        tandem_set_err(err, errlen, "%s: missing tensor '%s' (Hugging Face name '%s')", m->path,
                       name, hf);
    } else {
        tandem_set_err(err, errlen, "%s: missing tensor '%s'", m->path, name);
    }
}

/*
 * Finds the tensor `name` and checks it is {ne0} (ne1 == 0) or {ne0, ne1}; 1-D tensors must be
 * F32. With required false a missing tensor gives *out = NULL and 0.
 */
static int bind(const model *m, const char *name, int64_t ne0, int64_t ne1, bool required,
                const model_tensor **out, char *err, size_t errlen)
{
    const model_tensor *t = model_find_tensor(m, name);
    *out = t;
    if (!t) {
        if (!required) {
            return 0;
        }
        missing_tensor(m, name, err, errlen);
        return -EINVAL;
    }
    int64_t want[4] = {ne0, ne1 ? ne1 : 1, 1, 1};
    if (memcmp(t->ne, want, sizeof(want)) != 0) {
        tandem_set_err(
            err, errlen,
            "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld} from the "
            "hyperparameters",
            m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
            (long long)t->ne[3], (long long)want[0], (long long)want[1]);
        return -EINVAL;
    }
    if (ne1 == 0 && t->type != TD_F32) {
        tandem_set_err(err, errlen,
                       "%s: tensor '%s' has type %s; norm weights and biases must be F32", m->path,
                       name, td_name(t->type));
        return -EINVAL;
    }
    return 0;
}

/* Owned view of rows [r0, r0 + n) of plane `plane` of t (a 2-D or 3-D tensor: ne[1] rows of
 * ne[0] elements per plane), named "<t's name>[what]" for messages. NULL on OOM. */
static const model_tensor *row_view(model *m, const model_tensor *t, int64_t plane, int64_t r0,
                                    int64_t n, const char *what)
{
    model_tensor *v = model__alloc(m, sizeof(*v));
    char name[160];
    snprintf(name, sizeof(name), "%s[%s]", t->name, what);
    char *owned = v ? model__strndup(m, name, strlen(name)) : NULL;
    if (!owned) {
        return NULL;
    }
    const size_t row = td_row_bytes(t->type, t->ne[0]);
    *v = (model_tensor){.name = owned,
                        .type = t->type,
                        .n_dims = 2,
                        .ne = {t->ne[0], n, 1, 1},
                        .data = (const uint8_t *)t->data +
                                ((size_t)plane * (size_t)t->ne[1] + (size_t)r0) * row,
                        .nbytes = row * (size_t)n};
    return v;
}

/* The experts of one MoE layer: GGUF's stacked "blk.L.ffn_<kind>_exps.weight" {ne0, ne1,
 * n_expert} as per-expert views, or (Hugging Face) one "blk.L.ffn_<kind>_exps.E.weight" per
 * expert. */
static int bind_experts(model *m, int il, const char *kind, int64_t ne0, int64_t ne1,
                        const model_tensor ***out, char *err, size_t errlen)
{
    const int ne = m->cfg.n_expert;
    const model_tensor **v = model__alloc(m, sizeof(model_tensor *) * (size_t)ne);
    if (!v) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    *out = v;
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, kind);
    const model_tensor *t = model_find_tensor(m, name);
    if (t) {
        const int64_t want[4] = {ne0, ne1, ne, 1};
        if (memcmp(t->ne, want, sizeof(want)) != 0) {
            tandem_set_err(err, errlen,
                           "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected {%lld, "
                           "%lld, %d} from the hyperparameters",
                           m->path, name, (long long)t->ne[0], (long long)t->ne[1],
                           (long long)t->ne[2], (long long)t->ne[3], (long long)ne0, (long long)ne1,
                           ne);
            return -EINVAL;
        }
        for (int e = 0; e < ne; e++) {
            char what[24];
            snprintf(what, sizeof(what), "expert %d", e);
            if (!(v[e] = row_view(m, t, e, 0, ne1, what))) {
                tandem_set_err(err, errlen, "%s: out of memory", m->path);
                return -ENOMEM;
            }
        }
        return 0;
    }
    for (int e = 0; e < ne; e++) {
        char one[96];
        snprintf(one, sizeof(one), "blk.%d.ffn_%s_exps.%d.weight", il, kind, e);
        if (e == 0 && !model_find_tensor(m, one)) {
            missing_tensor(m, name, err, errlen);
            return -EINVAL;
        }
        int rc = bind(m, one, ne0, ne1, true, &v[e], err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    char extra[96];
    snprintf(extra, sizeof(extra), "blk.%d.ffn_%s_exps.%d.weight", il, kind, ne);
    if (model_find_tensor(m, extra)) {
        tandem_set_err(err, errlen, "%s: tensor '%s' found but the model has %d experts", m->path,
                       extra, ne);
        return -EINVAL;
    }
    return 0;
}

/* Per-architecture tensor presence: required, allowed, or (absent from the table) an error
 * naming the tensor when present. */
enum { T_NO, T_REQ, T_OPT };

static int bind_layer(model *m, int il, char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    model_layer *l = &m->layers[il];
    const model_arch a = c->arch;
    int64_t q_dim = (int64_t)c->n_head * c->head_dim;
    int64_t kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    const bool gemma = a == MODEL_ARCH_GEMMA2 || a == MODEL_ARCH_GEMMA3;
    const bool qk_norm =
        a == MODEL_ARCH_QWEN3 || a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_GEMMA3;
    const bool moe = c->n_expert > 0;
    const bool shexp = a == MODEL_ARCH_QWEN2MOE;
    /* qwen2: q/k/v biases; qwen2moe: where the file has them (llama.cpp's optional biases) */
    const int bias = a == MODEL_ARCH_QWEN2 ? T_REQ : a == MODEL_ARCH_QWEN2MOE ? T_OPT : T_NO;
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.attn_qkv.weight", il);
    /* phi3: Q, K and V as one matrix (its checkpoints' qkv_proj), or three */
    const bool fused_qkv = a == MODEL_ARCH_PHI3 && model_find_tensor(m, name) != NULL;
    const bool fused_up = a == MODEL_ARCH_PHI3 && !moe;
    const model_tensor *qkv = NULL, *up2 = NULL;
    const struct {
        const char *suffix;
        int64_t ne0, ne1;
        int want;
        const model_tensor **out;
    } specs[] = {
        {"attn_norm.weight", c->n_embd, 0, T_REQ, &l->attn_norm},
        {"attn_qkv.weight", c->n_embd, q_dim + 2 * kv_dim, fused_qkv ? T_REQ : T_NO, &qkv},
        {"attn_q.weight", c->n_embd, q_dim, fused_qkv ? T_NO : T_REQ, &l->wq},
        {"attn_k.weight", c->n_embd, kv_dim, fused_qkv ? T_NO : T_REQ, &l->wk},
        {"attn_v.weight", c->n_embd, kv_dim, fused_qkv ? T_NO : T_REQ, &l->wv},
        {"attn_q.bias", q_dim, 0, bias, &l->bq},
        {"attn_k.bias", kv_dim, 0, bias, &l->bk},
        {"attn_v.bias", kv_dim, 0, bias, &l->bv},
        {"attn_q_norm.weight", c->head_dim, 0, qk_norm ? T_REQ : T_NO, &l->q_norm},
        {"attn_k_norm.weight", c->head_dim, 0, qk_norm ? T_REQ : T_NO, &l->k_norm},
        {"attn_output.weight", q_dim, c->n_embd, T_REQ, &l->wo},
        {"post_attention_norm.weight", c->n_embd, 0, gemma ? T_REQ : T_NO, &l->attn_post_norm},
        {"ffn_norm.weight", c->n_embd, 0, T_REQ, &l->ffn_norm},
        {"ffn_gate_inp.weight", c->n_embd, c->n_expert, moe ? T_REQ : T_NO, &l->ffn_gate_inp},
        {"ffn_gate.weight", c->n_embd, c->n_ff, moe || fused_up ? T_NO : T_REQ, &l->w_gate},
        {"ffn_up.weight", c->n_embd, fused_up ? 2 * (int64_t)c->n_ff : c->n_ff, moe ? T_NO : T_REQ,
         fused_up ? &up2 : &l->w_up},
        {"ffn_down.weight", c->n_ff, c->n_embd, moe ? T_NO : T_REQ, &l->w_down},
        {"post_ffw_norm.weight", c->n_embd, 0, gemma ? T_REQ : T_NO, &l->ffn_post_norm},
        {"ffn_gate_inp_shexp.weight", c->n_embd, 0, shexp ? T_REQ : T_NO, &l->ffn_gate_inp_shexp},
        {"ffn_gate_shexp.weight", c->n_embd, c->n_ff_shexp, shexp ? T_REQ : T_NO, &l->w_gate_shexp},
        {"ffn_up_shexp.weight", c->n_embd, c->n_ff_shexp, shexp ? T_REQ : T_NO, &l->w_up_shexp},
        {"ffn_down_shexp.weight", c->n_ff_shexp, c->n_embd, shexp ? T_REQ : T_NO, &l->w_down_shexp},
    };
    for (size_t i = 0; i < ARRAY_SIZE(specs); i++) {
        snprintf(name, sizeof(name), "blk.%d.%s", il, specs[i].suffix);
        if (specs[i].want == T_NO) {
            if (model_find_tensor(m, name)) {
                /* present but not used by this architecture: say so instead of ignoring it */
                tandem_set_err(err, errlen, "%s: tensor '%s' is not used by architecture %s%s",
                               m->path, name, model_arch_name(a), moe ? " with experts" : "");
                return -EINVAL;
            }
            continue;
        }
        int rc = bind(m, name, specs[i].ne0, specs[i].ne1, specs[i].want == T_REQ, specs[i].out,
                      err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    if (qkv) {
        l->wq = row_view(m, qkv, 0, 0, q_dim, "q");
        l->wk = row_view(m, qkv, 0, q_dim, kv_dim, "k");
        l->wv = row_view(m, qkv, 0, q_dim + kv_dim, kv_dim, "v");
    }
    if (up2) {
        /* phi3's gate_up_proj: the gate's rows first, then the up rows */
        l->w_gate = row_view(m, up2, 0, 0, c->n_ff, "gate");
        l->w_up = row_view(m, up2, 0, c->n_ff, c->n_ff, "up");
    }
    if ((qkv && (!l->wq || !l->wk || !l->wv)) || (up2 && (!l->w_gate || !l->w_up))) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    if (moe) {
        int rc = bind_experts(m, il, "gate", c->n_embd, c->n_ff_exp, &l->exp_gate, err, errlen);
        rc = rc ? rc : bind_experts(m, il, "up", c->n_embd, c->n_ff_exp, &l->exp_up, err, errlen);
        rc = rc ? rc
                : bind_experts(m, il, "down", c->n_ff_exp, c->n_embd, &l->exp_down, err, errlen);
        if (rc != 0) {
            return rc;
        }
    } else {
        static const char *const kinds[] = {"gate", "up", "down"};
        for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
            snprintf(name, sizeof(name), "blk.%d.ffn_%s_exps.weight", il, kinds[k]);
            if (model_find_tensor(m, name)) {
                tandem_set_err(err, errlen,
                               "%s: tensor '%s' found but the model has no expert_count", m->path,
                               name);
                return -EINVAL;
            }
        }
    }
    const model_priv *priv = m->priv;
    if (c->n_swa > 0) {
        const int n = priv->swa_pattern;
        l->swa = priv->swa_layers ? priv->swa_layers[il] != 0 : n == 0 || il % n < n - 1;
    }
    return 0;
}

/* A GGUF table of RoPE divisors (rope_freqs / rope_factors_long / rope_factors_short .weight):
 * n_rot / 2 F32 values, positive and finite; *out stays NULL when the tensor is absent. */
static int bind_rope_table(model *m, const char *name, const float **out, char *err, size_t errlen)
{
    const model_tensor *t = model_find_tensor(m, name);
    if (!t) {
        return 0;
    }
    const int64_t n = m->cfg.n_rot / 2;
    if (t->type != TD_F32 || t->ne[0] != n || t->ne[1] != 1 || !t->data) {
        tandem_set_err(err, errlen,
                       "%s: tensor '%s' must be F32 of %lld elements (n_rot / 2), got %s {%lld, "
                       "%lld}",
                       m->path, name, (long long)n, td_name((uint32_t)t->type), (long long)t->ne[0],
                       (long long)t->ne[1]);
        return -EINVAL;
    }
    const float *f = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (!(f[i] > 0.0f && f[i] < 1e30f)) {
            tandem_set_err(err, errlen,
                           "%s: tensor '%s'[%lld] = %g is not a positive finite divisor", m->path,
                           name, (long long)i, (double)f[i]);
            return -EINVAL;
        }
    }
    *out = f;
    return 0;
}

/* Llama 3's rope_freqs.weight, or LongRoPE's pair rope_factors_short / _long.weight (phi3 only,
 * as llama.cpp loads them; both or neither, and not with rope_freqs). */
static int bind_rope_freqs(model *m, char *err, size_t errlen)
{
    model_config *c = &m->cfg;
    const float *freqs = NULL, *shrt = NULL, *lng = NULL;
    int rc = bind_rope_table(m, "rope_freqs.weight", &freqs, err, errlen);
    rc = rc ? rc : bind_rope_table(m, "rope_factors_short.weight", &shrt, err, errlen);
    rc = rc ? rc : bind_rope_table(m, "rope_factors_long.weight", &lng, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (freqs) {
        c->rope_freqs = freqs;
    }
    if (!shrt && !lng) {
        return 0;
    }
    const char *name = lng ? "rope_factors_long.weight" : "rope_factors_short.weight";
    if (c->arch != MODEL_ARCH_PHI3) {
        tandem_set_err(err, errlen, "%s: tensor '%s' is not used by architecture %s", m->path, name,
                       model_arch_name(c->arch));
        return -EINVAL;
    }
    if (!shrt || !lng || freqs) {
        tandem_set_err(err, errlen, "%s: tensor '%s' needs %s", m->path, name,
                       freqs ? "no rope_freqs.weight beside it (LongRoPE or Llama 3 factors)"
                       : lng ? "rope_factors_short.weight (LongRoPE has both)"
                             : "rope_factors_long.weight (LongRoPE has both)");
        return -EINVAL;
    }
    c->rope_freqs = shrt;
    c->rope_freqs_long = lng;
    return 0;
}

void model_llama3_rope_freqs(float *out, int head_dim, float base, float factor, float low_freq,
                             float high_freq, float original_ctx)
{
    const float low_wavelen = original_ctx / low_freq;
    const float high_wavelen = original_ctx / high_freq;
    for (int i = 0; i < head_dim / 2; i++) {
        /* torch: 1.0 / (base ** (arange(0, dim, 2) / dim)), all float32 */
        const float freq = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
        const float wavelen = (float)(2.0 * M_PI) / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            const float smooth = (original_ctx / wavelen - low_freq) / (high_freq - low_freq);
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

int model__finish(model *m, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        if (!td_supported((uint32_t)t->type)) {
            tandem_set_err(
                err, errlen,
                "%s: tensor '%s' has type %s (%u), which is not supported (supported: F32, F16, "
                "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                "IQ4_XS)",
                m->path, t->name, td_name((uint32_t)t->type), (unsigned)t->type);
            return -EINVAL;
        }
        m->n_params += (size_t)t->ne[0] * (size_t)t->ne[1] * (size_t)t->ne[2] * (size_t)t->ne[3];
        m->weight_bytes += t->nbytes;
    }
    const model_tensor *embd = model_find_tensor(m, "token_embd.weight");
    if (!embd) {
        missing_tensor(m, "token_embd.weight", err, errlen);
        return -EINVAL;
    }
    if (embd->ne[1] < 1 || embd->ne[1] > INT32_MAX) {
        tandem_set_err(err, errlen, "%s: tensor 'token_embd.weight' has an invalid vocabulary size",
                       m->path);
        return -EINVAL;
    }
    if (m->cfg.n_vocab != 0 && m->cfg.n_vocab != embd->ne[1]) {
        tandem_set_err(err, errlen,
                       "%s: vocabulary size %d differs from the %lld rows of 'token_embd.weight'",
                       m->path, m->cfg.n_vocab, (long long)embd->ne[1]);
        return -EINVAL;
    }
    m->cfg.n_vocab = (int)embd->ne[1];
    int rc = bind(m, "token_embd.weight", m->cfg.n_embd, m->cfg.n_vocab, true, &m->tok_embd, err,
                  errlen);
    if (rc == 0) {
        rc = bind(m, "output_norm.weight", m->cfg.n_embd, 0, true, &m->output_norm, err, errlen);
    }
    if (rc == 0 && m->cfg.tied_output) {
        m->output = m->tok_embd;
    } else if (rc == 0) {
        rc = bind(m, "output.weight", m->cfg.n_embd, m->cfg.n_vocab, true, &m->output, err, errlen);
    }
    if (rc != 0) {
        return rc;
    }
    if (m->cfg.attn_scale == 0.0f) {
        m->cfg.attn_scale = 1.0f / sqrtf((float)m->cfg.head_dim);
    }
    if (m->cfg.rope_base_swa == 0.0f) {
        m->cfg.rope_base_swa = m->cfg.rope_base;
    }
    m->layers = calloc((size_t)m->cfg.n_layer, sizeof(*m->layers));
    if (!m->layers) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    for (int il = 0; il < m->cfg.n_layer; il++) {
        rc = bind_layer(m, il, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    if ((rc = bind_rope_freqs(m, err, errlen)) != 0) {
        return rc;
    }
    char name[64];
    snprintf(name, sizeof(name), "blk.%d.attn_norm.weight", m->cfg.n_layer);
    if (model_find_tensor(m, name)) {
        tandem_set_err(err, errlen, "%s: tensor '%s' found but the model has %d layers", m->path,
                       name, m->cfg.n_layer);
        return -EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* GGUF                                                                                        */

/* u32 hyperparameter "<arch>.<key>" into an int; def < 0 means required. */
static int gguf_hparam(const model *m, const gguf_ctx *g, const char *arch, const char *key,
                       int def, int *out, char *err, size_t errlen)
{
    char full[128], e[192];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    uint32_t v;
    int rc = gguf_get_u32(g, full, &v, e, sizeof(e));
    if (rc == -ENOENT && def >= 0) {
        *out = def;
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    if (v > INT32_MAX) {
        tandem_set_err(err, errlen, "%s: %s = %u is out of range", m->path, full, v);
        return -EINVAL;
    }
    *out = (int)v;
    return 0;
}

static int gguf_hparam_f32(const model *m, const gguf_ctx *g, const char *arch, const char *key,
                           float def, bool required, float *out, char *err, size_t errlen)
{
    char full[128], e[192];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int rc = gguf_get_f32(g, full, out, e, sizeof(e));
    if (rc == -ENOENT && !required) {
        *out = def;
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
    }
    return rc;
}

/*
 * YaRN keys this llama.cpp reads only for other architectures (grok, mistral3, deepseek2; its
 * converter writes them from a config.json's beta_fast, beta_slow, attention_factor,
 * extrapolation_factor): llama, qwen2 and qwen3 run with ext_factor 1, beta_fast 32, beta_slow
 * 1 and the default magnitude whatever they say, while transformers applies the config's values.
 * A key holding the value llama.cpp uses anyway is accepted; any other value is a load error.
 */
static int gguf_yarn_unread_key(const model *m, const gguf_ctx *g, const char *a, const char *key,
                                float used, char *err, size_t errlen)
{
    float v;
    int rc = gguf_hparam_f32(m, g, a, key, used, false, &v, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (!(fabsf(v - used) <= 1e-6f * fabsf(used))) {
        tandem_set_err(err, errlen,
                       "%s: %s.%s = %g is not supported: llama.cpp ignores it for %s (it uses %g) "
                       "where transformers applies it",
                       m->path, a, key, (double)v, a, (double)used);
        return -EINVAL;
    }
    return 0;
}

/*
 * <arch>.rope.scaling.*, read as llama.cpp's llama_model::load_hparams and llama_context do:
 * type none (never scaled, whatever the factor), linear (the default when absent), yarn; the
 * factor (or the old rope.scale_linear key); attn_factor for every type; for yarn the original
 * context length (context_length when absent, as llama.cpp).
 */
static int gguf_rope_scaling(model *m, const gguf_ctx *g, const char *a, char *err, size_t errlen)
{
    model_config *c = &m->cfg;
    char key[96], e[192];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    model_str st;
    bool none = false, yarn = false;
    if (gguf_get_str(g, key, &st, e, sizeof(e)) == 0) {
        none = st.len == 4 && memcmp(st.s, "none", 4) == 0;
        yarn = st.len == 4 && memcmp(st.s, "yarn", 4) == 0;
        if (!none && !yarn && !(st.len == 6 && memcmp(st.s, "linear", 6) == 0)) {
            tandem_set_err(
                err, errlen,
                "%s: %s '%.*s' is not supported (none, linear, yarn, or Llama 3's rope_freqs)",
                m->path, key, (int)(st.len < 32 ? st.len : 32), st.s);
            return -EINVAL;
        }
    }
    int rc =
        gguf_hparam_f32(m, g, a, "rope.scaling.factor", 0.0f, false, &c->rope_factor, err, errlen);
    if (rc == 0 && c->rope_factor == 0.0f) {
        rc = gguf_hparam_f32(m, g, a, "rope.scale_linear", 0.0f, false, &c->rope_factor, err,
                             errlen);
    }
    rc = rc ? rc
            : gguf_hparam_f32(m, g, a, "rope.scaling.attn_factor", 1.0f, false,
                              &c->rope_attn_factor, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (!(c->rope_factor >= 0.0f && c->rope_factor < 1e6f) || (yarn && !(c->rope_factor > 0.0f))) {
        tandem_set_err(err, errlen, "%s: %s.rope.scaling.factor = %g is out of range%s", m->path, a,
                       (double)c->rope_factor, yarn ? " (yarn needs a positive factor)" : "");
        return -EINVAL;
    }
    if (!(c->rope_attn_factor > 0.0f && c->rope_attn_factor < 1e6f)) {
        tandem_set_err(err, errlen, "%s: %s.rope.scaling.attn_factor = %g is out of range", m->path,
                       a, (double)c->rope_attn_factor);
        return -EINVAL;
    }
    if (none) {
        c->rope_factor = 0.0f; /* llama_context: "never scale if scaling type is none" */
    }
    if (!yarn) {
        return 0;
    }
    /* absent: the training context, as llama.cpp falls back to */
    rc = gguf_hparam(m, g, a, "rope.scaling.original_context_length", c->n_ctx_train,
                     &c->rope_yarn_orig_ctx, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (c->rope_yarn_orig_ctx < 1) {
        tandem_set_err(err, errlen, "%s: %s.rope.scaling.original_context_length must be > 0",
                       m->path, a);
        return -EINVAL;
    }
    c->rope_yarn_beta_fast = 32.0f;
    c->rope_yarn_beta_slow = 1.0f;
    rc = gguf_yarn_unread_key(m, g, a, "rope.scaling.yarn_beta_fast", 32.0f, err, errlen);
    rc = rc ? rc : gguf_yarn_unread_key(m, g, a, "rope.scaling.yarn_beta_slow", 1.0f, err, errlen);
    rc = rc ? rc : gguf_yarn_unread_key(m, g, a, "rope.scaling.yarn_ext_factor", 1.0f, err, errlen);
    rc = rc ? rc
            : gguf_yarn_unread_key(m, g, a, "rope.scaling.yarn_log_multiplier", 0.0f, err, errlen);
    rc = rc ? rc
            : gguf_yarn_unread_key(m, g, a, "rope.scaling.yarn_attn_factor",
                                   model_yarn_mscale(c->rope_factor), err, errlen);
    return rc;
}

/* Which layers slide (llama.cpp's load_swa_pattern): <arch>.attention.sliding_window_pattern as
 * a per-layer bool array, or as the period n (default def_pattern). */
static int gguf_swa_pattern(model *m, const gguf_ctx *g, const char *a, int def_pattern, char *err,
                            size_t errlen)
{
    model_priv *priv = m->priv;
    char key[96];
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a);
    const gguf_kv *kv = gguf_find_kv(g, key);
    priv->swa_pattern = def_pattern;
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        /* bools, or (as llama.cpp's get_arr also takes) 32-bit integers, one per layer */
        const gguf_type t = kv->arr_type;
        const size_t esz = t == GGUF_TYPE_BOOL ? 1 : 4;
        if ((t != GGUF_TYPE_BOOL && t != GGUF_TYPE_INT32 && t != GGUF_TYPE_UINT32) ||
            kv->n != (uint64_t)m->cfg.n_layer) {
            tandem_set_err(err, errlen,
                           "%s: %s must hold %d bools or 32-bit integers (one per layer)", m->path,
                           key, m->cfg.n_layer);
            return -EINVAL;
        }
        uint8_t *flags = model__alloc(m, (size_t)m->cfg.n_layer);
        if (!flags) {
            tandem_set_err(err, errlen, "%s: out of memory", m->path);
            return -ENOMEM;
        }
        for (int il = 0; il < m->cfg.n_layer; il++) {
            const uint8_t *e = kv->data + (size_t)il * esz;
            flags[il] = esz == 1 ? e[0] != 0 : (e[0] | e[1] | e[2] | e[3]) != 0;
        }
        priv->swa_layers = flags;
        return 0;
    }
    return gguf_hparam(m, g, a, "attention.sliding_window_pattern", def_pattern, &priv->swa_pattern,
                       err, errlen);
}

/*
 * What sets the architectures apart, from llama.cpp's load_arch_hparams: gemma's embedding
 * scale, GeGLU, soft-capping, sliding windows and attention scale (1 / sqrt(n_embd / n_head)
 * for the 27B models, which llama.cpp recognises by their layer count, else 1 / sqrt(head
 * size)); the experts of llama (Mixtral), qwen2moe (and its shared expert) and qwen3moe. phi3's
 * sliding_window is read and not applied, as llama.cpp does ("Phi SWA is currently disabled"); its
 * LongRoPE switch point is rope.scaling.original_context_length.
 */
static int gguf_arch_features(model *m, const gguf_ctx *g, const char *a, char *err, size_t errlen)
{
    model_config *c = &m->cfg;
    const model_arch arch = c->arch;
    int rc = 0;
    c->ffn_act = MODEL_ACT_SILU;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->rope_base_swa = c->rope_base;
    if (arch == MODEL_ARCH_GEMMA2 || arch == MODEL_ARCH_GEMMA3) {
        const bool g2 = arch == MODEL_ARCH_GEMMA2;
        c->ffn_act = MODEL_ACT_GELU_TANH;
        c->embd_scale = sqrtf((float)c->n_embd);
        if (c->n_layer == (g2 ? 46 : 62)) {
            const int per_head = c->n_embd / c->n_head; /* integer division, as llama.cpp */
            c->attn_scale = 1.0f / sqrtf((float)per_head);
        }
        rc =
            gguf_hparam(m, g, a, "attention.sliding_window", g2 ? 4096 : 0, &c->n_swa, err, errlen);
        rc = rc ? rc
                : gguf_hparam_f32(m, g, a, "attn_logit_softcapping", g2 ? 50.0f : 0.0f, false,
                                  &c->attn_softcap, err, errlen);
        rc = rc ? rc
                : gguf_hparam_f32(m, g, a, "final_logit_softcapping", g2 ? 30.0f : 0.0f, false,
                                  &c->final_softcap, err, errlen);
        if (!g2) {
            c->attn_softcap = 0.0f; /* read for its type only: llama.cpp's gemma3 never caps */
        }
        if (rc == 0 && c->n_swa > 0) {
            c->rope_swa_scaled = g2;
            rc = gguf_hparam_f32(m, g, a, "rope.freq_base_swa", g2 ? c->rope_base : 10000.0f, false,
                                 &c->rope_base_swa, err, errlen);
            rc = rc ? rc : gguf_swa_pattern(m, g, a, g2 ? 2 : 6, err, errlen);
        }
    }
    if (rc == 0 && arch == MODEL_ARCH_PHI3) {
        int ignored;
        rc = gguf_hparam(m, g, a, "attention.sliding_window", 0, &ignored, err, errlen);
        /* LongRoPE's switch point (llama.cpp's n_ctx_orig_yarn; the training context when
         * absent); its factors are bound with the tensors (bind_rope_freqs) */
        rc = rc ? rc
                : gguf_hparam(m, g, a, "rope.scaling.original_context_length", c->n_ctx_train,
                              &c->rope_long_ctx, err, errlen);
        if (rc == 0 && c->rope_long_ctx < 1) {
            tandem_set_err(err, errlen, "%s: %s.rope.scaling.original_context_length must be > 0",
                           m->path, a);
            rc = -EINVAL;
        }
    }
    if (rc == 0 &&
        (arch == MODEL_ARCH_LLAMA || arch == MODEL_ARCH_QWEN3MOE || arch == MODEL_ARCH_QWEN2MOE)) {
        const bool need = arch != MODEL_ARCH_LLAMA;
        rc = gguf_hparam(m, g, a, "expert_count", need ? -1 : 0, &c->n_expert, err, errlen);
        rc = rc ? rc
                : gguf_hparam(m, g, a, "expert_used_count", c->n_expert > 0 ? -1 : 0,
                              &c->n_expert_used, err, errlen);
        if (rc == 0 && c->n_expert > 0) {
            /* Mixtral's experts are n_ff wide; qwen2moe / qwen3moe say, or n_ff / n_expert_used */
            const int def = arch == MODEL_ARCH_LLAMA
                                ? c->n_ff
                                : (c->n_expert_used > 0 ? c->n_ff / c->n_expert_used : 0);
            rc = gguf_hparam(m, g, a, "expert_feed_forward_length", def, &c->n_ff_exp, err, errlen);
            float scale = 0.0f;
            rc = rc ? rc
                    : gguf_hparam_f32(m, g, a, "expert_weights_scale", 0.0f, false, &scale, err,
                                      errlen);
            if (rc == 0 && scale != 0.0f && scale != 1.0f) {
                tandem_set_err(err, errlen, "%s: %s.expert_weights_scale = %g is not supported",
                               m->path, a, (double)scale);
                rc = -EINVAL;
            }
        }
        if (rc == 0 && arch == MODEL_ARCH_QWEN2MOE) {
            /* llama.cpp's qwen2moe: no renormalization, a shared expert n_ff wide by default */
            c->expert_weights_raw = true;
            rc = gguf_hparam(m, g, a, "expert_shared_feed_forward_length", c->n_ff, &c->n_ff_shexp,
                             err, errlen);
        }
        if (rc == 0 && need && c->n_expert == 0) {
            tandem_set_err(err, errlen, "%s: %s.expert_count must be > 0", m->path, a);
            rc = -EINVAL;
        }
    }
    if (rc == 0 && c->n_expert == 0 && gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight")) {
        tandem_set_err(err, errlen,
                       "%s: tensor 'blk.0.ffn_gate_inp.weight' (experts) is not supported for "
                       "architecture %s without %s.expert_count",
                       m->path, a, a);
        rc = -EINVAL;
    }
    return rc;
}

static int gguf_config(model *m, const gguf_ctx *g, char *err, size_t errlen)
{
    char e[192];
    model_str arch;
    if (gguf_get_str(g, "general.architecture", &arch, e, sizeof(e)) != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return -EINVAL;
    }
    char a[32];
    snprintf(a, sizeof(a), "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.s);
    model_config *c = &m->cfg;
    static const model_arch archs[] = {MODEL_ARCH_LLAMA,    MODEL_ARCH_QWEN2,    MODEL_ARCH_QWEN3,
                                       MODEL_ARCH_QWEN3MOE, MODEL_ARCH_QWEN2MOE, MODEL_ARCH_PHI3,
                                       MODEL_ARCH_GEMMA2,   MODEL_ARCH_GEMMA3};
    size_t ai = 0;
    while (ai < ARRAY_SIZE(archs) && strcmp(a, model_arch_name(archs[ai])) != 0) {
        ai++;
    }
    if (ai == ARRAY_SIZE(archs) || arch.len != strlen(a)) {
        tandem_set_err(err, errlen,
                       "%s: general.architecture '%s' is not supported (supported: llama, qwen2, "
                       "qwen3, qwen2moe, qwen3moe, phi3, gemma2, gemma3)",
                       m->path, a);
        return -EINVAL;
    }
    c->arch = archs[ai];
    c->rope_neox = c->arch != MODEL_ARCH_LLAMA;
    int rc = gguf_hparam(m, g, a, "context_length", -1, &c->n_ctx_train, err, errlen);
    rc = rc ? rc : gguf_hparam(m, g, a, "embedding_length", -1, &c->n_embd, err, errlen);
    rc = rc ? rc : gguf_hparam(m, g, a, "block_count", -1, &c->n_layer, err, errlen);
    rc = rc ? rc : gguf_hparam(m, g, a, "feed_forward_length", -1, &c->n_ff, err, errlen);
    rc = rc ? rc : gguf_hparam(m, g, a, "attention.head_count", -1, &c->n_head, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (c->n_head < 1) {
        tandem_set_err(err, errlen, "%s: %s.attention.head_count must be > 0", m->path, a);
        return -EINVAL;
    }
    rc = gguf_hparam(m, g, a, "attention.head_count_kv", c->n_head, &c->n_head_kv, err, errlen);
    rc = rc ? rc
            : gguf_hparam(m, g, a, "attention.key_length", c->n_embd / c->n_head, &c->head_dim, err,
                          errlen);
    if (rc != 0) {
        return rc;
    }
    char key[96];
    snprintf(key, sizeof(key), "%s.attention.key_length", a);
    if (!gguf_find_kv(g, key) && c->n_embd % c->n_head != 0) {
        tandem_set_err(
            err, errlen,
            "%s: embedding_length %d is not a multiple of head_count %d and %s is absent", m->path,
            c->n_embd, c->n_head, key);
        return -EINVAL;
    }
    int v_len;
    rc = gguf_hparam(m, g, a, "attention.value_length", c->head_dim, &v_len, err, errlen);
    if (rc == 0 && v_len != c->head_dim) {
        tandem_set_err(err, errlen, "%s: %s.attention.value_length %d differs from key_length %d",
                       m->path, a, v_len, c->head_dim);
        return -EINVAL;
    }
    rc =
        rc ? rc : gguf_hparam(m, g, a, "rope.dimension_count", c->head_dim, &c->n_rot, err, errlen);
    rc = rc ? rc
            : gguf_hparam_f32(m, g, a, "attention.layer_norm_rms_epsilon", 0, true, &c->rms_eps,
                              err, errlen);
    rc = rc ? rc
            : gguf_hparam_f32(m, g, a, "rope.freq_base", 10000.0f, false, &c->rope_base, err,
                              errlen);
    if (rc != 0) {
        return rc;
    }
    rc = gguf_rope_scaling(m, g, a, err, errlen);
    rc = rc ? rc : gguf_arch_features(m, g, a, err, errlen);
    if (rc != 0) {
        return rc;
    }
    c->tied_output = gguf_find_tensor(g, "output.weight") == NULL;
    snprintf(key, sizeof(key), "%s.vocab_size", a);
    if (gguf_find_kv(g, key)) {
        rc = gguf_hparam(m, g, a, "vocab_size", -1, &c->n_vocab, err, errlen);
    }
    return rc != 0 ? rc : model__check_config(m, m->path, err, errlen);
}

/* Optional token id key: -1 when absent; must index the token list. */
static int vocab_id(model *m, const gguf_ctx *g, const char *key, int32_t *out, char *err,
                    size_t errlen)
{
    char e[192];
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, e, sizeof(e));
    *out = -1;
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    if (v >= m->vocab.n_tokens) {
        tandem_set_err(err, errlen, "%s: %s = %u is out of range (%zu tokens)", m->path, key, v,
                       m->vocab.n_tokens);
        return -EINVAL;
    }
    *out = (int32_t)v;
    return 0;
}

static int vocab_flag(model *m, const gguf_ctx *g, const char *key, int *out, char *err,
                      size_t errlen)
{
    char e[192];
    bool b;
    int rc = gguf_get_bool(g, key, &b, e, sizeof(e));
    *out = -1;
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    *out = b ? 1 : 0;
    return 0;
}

/* Optional string key as an owned NUL-terminated copy (NULL when absent). */
static int gguf_opt_cstr(model *m, const gguf_ctx *g, const char *key, char **out, bool owned,
                         char *err, size_t errlen)
{
    char e[192];
    model_str s;
    int rc = gguf_get_str(g, key, &s, e, sizeof(e));
    *out = NULL;
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    if (memchr(s.s, '\0', s.len)) {
        tandem_set_err(err, errlen, "%s: %s contains a NUL byte", m->path, key);
        return -EINVAL;
    }
    if (owned) {
        *out = model__strndup(m, s.s, s.len);
    } else {
        *out = strndup(s.s, s.len);
    }
    if (!*out) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    return 0;
}

/* An optional per-token array of elem type, copied into owned aligned memory. */
static int vocab_array(model *m, const gguf_ctx *g, const char *key, gguf_type elem,
                       const void **out, char *err, size_t errlen)
{
    char e[192];
    const gguf_kv *kv;
    int rc = gguf_get_arr(g, key, elem, &kv, e, sizeof(e));
    *out = NULL;
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    if (kv->n != m->vocab.n_tokens) {
        tandem_set_err(err, errlen, "%s: %s has %llu entries but tokenizer.ggml.tokens has %zu",
                       m->path, key, (unsigned long long)kv->n, m->vocab.n_tokens);
        return -EINVAL;
    }
    void *p = model__alloc(m, (size_t)kv->n * 4);
    if (!p) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    memcpy(p, kv->data, (size_t)kv->n * 4);
    *out = p;
    return 0;
}

static int gguf_vocab(model *m, const gguf_ctx *g, char *err, size_t errlen)
{
    model_gguf_vocab *v = &m->vocab;
    char *model_name, *pre;
    int rc = gguf_opt_cstr(m, g, "tokenizer.ggml.model", &model_name, true, err, errlen);
    rc = rc ? rc : gguf_opt_cstr(m, g, "tokenizer.ggml.pre", &pre, true, err, errlen);
    if (rc != 0) {
        return rc;
    }
    v->model = model_name;
    v->pre = pre;
    char e[192];
    const gguf_kv *kv;
    rc = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, e, sizeof(e));
    if (rc == 0) {
        v->tokens = kv->strs;
        v->n_tokens = (size_t)kv->n;
    } else if (rc != -ENOENT || model_name) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return -EINVAL;
    }
    if (v->n_tokens > (size_t)m->cfg.n_vocab && m->cfg.n_vocab > 0) {
        tandem_set_err(err, errlen,
                       "%s: tokenizer.ggml.tokens has %zu tokens but the model has %d rows",
                       m->path, v->n_tokens, m->cfg.n_vocab);
        return -EINVAL;
    }
    const void *scores, *types;
    rc = vocab_array(m, g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores, err, errlen);
    rc = rc ? rc
            : vocab_array(m, g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types, err, errlen);
    if (rc != 0) {
        return rc;
    }
    v->scores = scores;
    v->token_types = types;
    rc = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kv, e, sizeof(e));
    if (rc == 0) {
        v->merges = kv->strs;
        v->n_merges = (size_t)kv->n;
    } else if (rc != -ENOENT) {
        tandem_set_err(err, errlen, "%s: %s", m->path, e);
        return rc;
    }
    rc = vocab_id(m, g, "tokenizer.ggml.bos_token_id", &v->bos_id, err, errlen);
    rc = rc ? rc : vocab_id(m, g, "tokenizer.ggml.eos_token_id", &v->eos_id, err, errlen);
    rc = rc ? rc : vocab_id(m, g, "tokenizer.ggml.unknown_token_id", &v->unk_id, err, errlen);
    rc = rc ? rc : vocab_id(m, g, "tokenizer.ggml.padding_token_id", &v->pad_id, err, errlen);
    rc = rc ? rc : vocab_id(m, g, "tokenizer.ggml.eot_token_id", &v->eot_id, err, errlen);
    rc = rc ? rc : vocab_flag(m, g, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen);
    rc = rc ? rc : vocab_flag(m, g, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen);
    rc =
        rc ? rc
           : vocab_flag(m, g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err, errlen);
    rc = rc ? rc : vocab_id(m, g, "tokenizer.ggml.seperator_token_id", &v->sep_id, err, errlen);
    rc = rc ? rc : vocab_flag(m, g, "tokenizer.ggml.add_sep_token", &v->add_sep, err, errlen);
    rc = rc ? rc
            : vocab_flag(m, g, "tokenizer.ggml.remove_extra_whitespaces",
                         &v->remove_extra_whitespaces, err, errlen);
    rc = rc ? rc
            : vocab_flag(m, g, "tokenizer.ggml.normalizer.lowercase", &v->lowercase, err, errlen);
    rc = rc ? rc
            : vocab_flag(m, g, "tokenizer.ggml.normalizer.strip_accents", &v->strip_accents, err,
                         errlen);
    rc = rc ? rc
            : gguf_opt_cstr(m, g, "tokenizer.chat_template", &m->chat_template, false, err, errlen);
    if (rc != 0) {
        return rc;
    }
    kv = gguf_find_kv(g, "tokenizer.ggml.precompiled_charsmap");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY ||
            (kv->arr_type != GGUF_TYPE_UINT8 && kv->arr_type != GGUF_TYPE_INT8)) {
            tandem_set_err(err, errlen,
                           "%s: tokenizer.ggml.precompiled_charsmap must be an array of bytes",
                           m->path);
            return -EINVAL;
        }
        v->precompiled_charsmap = kv->data;
        v->charsmap_len = (size_t)kv->n;
    }
    if (v->bos_id >= 0) {
        m->bos_token = strndup(v->tokens[v->bos_id].s, v->tokens[v->bos_id].len);
    }
    if (v->eos_id >= 0) {
        m->eos_token = strndup(v->tokens[v->eos_id].s, v->tokens[v->eos_id].len);
    }
    if ((v->bos_id >= 0 && !m->bos_token) || (v->eos_id >= 0 && !m->eos_token)) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    return 0;
}

static char *base_name(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') {
        len--;
    }
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') {
        start--;
    }
    return strndup(path + start, len - start);
}

static int load_gguf(model *m, char *err, size_t errlen)
{
    model_priv *priv = m->priv;
    m->format = MODEL_FORMAT_GGUF;
    priv->gguf = gguf_open(m->path, err, errlen);
    if (!priv->gguf) {
        return -EINVAL;
    }
    const gguf_ctx *g = priv->gguf;
    int rc = gguf_config(m, g, err, errlen);
    if (rc != 0) {
        return rc;
    }
    m->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*m->tensors));
    if (!m->tensors) {
        tandem_set_err(err, errlen, "%s: out of memory", m->path);
        return -ENOMEM;
    }
    m->n_tensors = g->n_tensors;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_info *ti = &g->tensors[i];
        model_tensor *t = &m->tensors[i];
        t->name = ti->name;
        t->type = (tdtype)ti->type;
        t->n_dims = ti->n_dims;
        memcpy(t->ne, ti->ne, sizeof(t->ne));
        t->data = ti->data;
        t->nbytes = ti->nbytes;
        if ((uintptr_t)t->data % 32 != 0 && td_supported(ti->type)) {
            /* general.alignment below 32: copy so that model.h's alignment promise holds */
            void *copy = model__alloc(m, t->nbytes);
            if (!copy) {
                tandem_set_err(err, errlen, "%s: out of memory", m->path);
                return -ENOMEM;
            }
            memcpy(copy, t->data, t->nbytes);
            t->data = copy;
        }
    }
    rc = model__finish(m, err, errlen);
    if (rc != 0) {
        return rc;
    }
    rc = gguf_vocab(m, g, err, errlen);
    if (rc != 0) {
        return rc;
    }
    char *name = NULL;
    rc = gguf_opt_cstr(m, g, "general.name", &name, false, err, errlen);
    if (rc != 0) {
        return rc;
    }
    m->name = name ? name : base_name(m->path);
    return m->name ? 0 : -ENOMEM;
}

model *model_load(const char *path, char *err, size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    if (!path) {
        tandem_set_err(err, errlen, "model path is NULL");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        tandem_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    model *m = calloc(1, sizeof(*m));
    model_priv *priv = calloc(1, sizeof(*priv));
    if (!m || !priv || !(m->path = strdup(path))) {
        free(priv);
        if (m) {
            free(m->path);
        }
        free(m);
        tandem_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    m->priv = priv;
    m->vocab.bos_id = m->vocab.eos_id = m->vocab.unk_id = m->vocab.pad_id = m->vocab.eot_id = -1;
    m->vocab.sep_id = -1;
    m->vocab.add_bos = m->vocab.add_eos = m->vocab.add_space_prefix = -1;
    m->vocab.add_sep = m->vocab.remove_extra_whitespaces = -1;
    m->vocab.lowercase = m->vocab.strip_accents = -1;
    int rc;
    if (S_ISDIR(st.st_mode)) {
        rc = model__load_hf(m, err, errlen);
        if (rc == 0) {
            rc = model__finish(m, err, errlen);
        }
        if (rc == 0 && !m->name) {
            m->name = base_name(m->path);
            rc = m->name ? 0 : -ENOMEM;
        }
    } else {
        rc = load_gguf(m, err, errlen);
    }
    if (rc != 0) {
        if (err && errlen && err[0] == '\0') {
            tandem_set_err(err, errlen, "%s: cannot load model: %s", path, tandem_strerror(rc));
        }
        model_free(m);
        return NULL;
    }
    return m;
}
