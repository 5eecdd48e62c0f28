/*
 * LoRA adapter loading (lora.h): llama.cpp's adapter GGUF and PEFT directories, both reduced to
 * per-layer (A, B, scale) triples over the base model's projections.
 */
#include "engine/model/lora.h"

#include <errno.h>
#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/gguf.h"
#include "engine/model/model_internal.h"
#include "engine/model/safetensors.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"

typedef struct lora_priv {
    gguf_ctx *gguf;
    safetensors_file *st;
    void **owned; /* permuted copies */
    size_t n_owned;
} lora_priv;

static const struct {
    const char *gguf; /* "blk.N.<gguf>.weight" */
    const char *peft; /* "model.layers.N.<peft>" */
} lora_names[LORA_N_TARGETS] = {
    [LORA_Q] = {"attn_q", "self_attn.q_proj"},   [LORA_K] = {"attn_k", "self_attn.k_proj"},
    [LORA_V] = {"attn_v", "self_attn.v_proj"},   [LORA_O] = {"attn_output", "self_attn.o_proj"},
    [LORA_GATE] = {"ffn_gate", "mlp.gate_proj"}, [LORA_UP] = {"ffn_up", "mlp.up_proj"},
    [LORA_DOWN] = {"ffn_down", "mlp.down_proj"},
};

const char *lora_target_name(lora_target t)
{
    return t < LORA_N_TARGETS ? lora_names[t].gguf : "?";
}

void lora_target_dims(const model *m, lora_target t, int64_t *in, int64_t *out)
{
    const model_config *c = &m->cfg;
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim,
                  KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    const int64_t dims[LORA_N_TARGETS][2] = {
        [LORA_Q] = {E, Q},    [LORA_K] = {E, KV}, [LORA_V] = {E, KV},   [LORA_O] = {Q, E},
        [LORA_GATE] = {E, F}, [LORA_UP] = {E, F}, [LORA_DOWN] = {F, E},
    };
    *in = dims[t][0];
    *out = dims[t][1];
}

void lora_free(lora_adapter *a)
{
    if (!a) {
        return;
    }
    lora_priv *p = a->priv;
    if (p) {
        gguf_close(p->gguf);
        safetensors_close(p->st);
        for (size_t i = 0; i < p->n_owned; i++) {
            free(p->owned[i]);
        }
        free(p->owned);
        free(p);
    }
    free(a->layers);
    free(a);
}

/* Matches "<layer>.<name><suffix>" at s: the layer and the target, or -1. */
static int parse_layer_target(const char *s, bool gguf, int *layer, lora_target *t,
                              const char **rest)
{
    if (s[0] < '0' || s[0] > '9') { /* strtol would take blanks and signs */
        return -1;
    }
    char *end;
    long l = strtol(s, &end, 10);
    if (end == s || *end != '.' || l < 0 || l > 1 << 20 || (s[0] == '0' && end - s > 1)) {
        return -1;
    }
    for (int i = 0; i < LORA_N_TARGETS; i++) {
        const char *n = gguf ? lora_names[i].gguf : lora_names[i].peft;
        size_t len = strlen(n);
        if (strncmp(end + 1, n, len) == 0 && end[1 + len] == '.') {
            *layer = (int)l;
            *t = (lora_target)i;
            *rest = end + 1 + len;
            return 0;
        }
    }
    return -1;
}

/* A buffer of n bytes owned by the adapter (freed by lora_free), or NULL. */
static void *lora_alloc(lora_adapter *a, size_t n)
{
    lora_priv *p = a->priv;
    void **grown = realloc(p->owned, sizeof(void *) * (p->n_owned + 1));
    if (!grown) {
        return NULL;
    }
    p->owned = grown;
    void *buf = malloc(n ? n : 1);
    if (buf) {
        p->owned[p->n_owned++] = buf;
    }
    return buf;
}

/* Copies B's rows into the other Q/K layout (to_gguf: HF rows to GGUF's adjacent-pair order). */
static int permute_rows(lora_adapter *a, model_tensor *b, int64_t n_head, int64_t head_dim,
                        bool to_gguf)
{
    const size_t row = td_row_bytes(b->type, b->ne[0]);
    uint8_t *dst = lora_alloc(a, b->nbytes);
    if (!dst) {
        return -ENOMEM;
    }
    const uint8_t *src = b->data;
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < n_head; h++) {
        for (int64_t i = 0; i < half; i++) {
            for (int64_t j = 0; j < 2; j++) {
                const int64_t g = h * head_dim + 2 * i + j, f = h * head_dim + j * half + i;
                const int64_t from = to_gguf ? f : g, to = to_gguf ? g : f;
                memcpy(dst + (size_t)to * row, src + (size_t)from * row, row);
            }
        }
    }
    b->data = dst;
    return 0;
}

/* Element i of a row of type t (F32, F16, BF16 or Q8_0, lora_type_ok's types). */
static float lora_elem(tdtype t, const uint8_t *row, int64_t i)
{
    uint16_t h;
    switch (t) {
    case TD_F32: {
        float f;
        memcpy(&f, row + 4 * i, sizeof(f));
        return f;
    }
    case TD_F16:
        memcpy(&h, row + 2 * i, 2);
        return model__f16_to_f32(h);
    case TD_BF16: {
        memcpy(&h, row + 2 * i, 2);
        const uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, sizeof(f));
        return f;
    }
    default: { /* Q8_0: blocks of an f16 scale and 32 int8 */
        const uint8_t *blk = row + (size_t)(i / TD_QK) * sizeof(td_block_q8_0);
        memcpy(&h, blk, 2);
        return model__f16_to_f32(h) * (float)((const int8_t *)(blk + 2))[i % TD_QK];
    }
    }
}

/* w->bt: B ({rank, out}) transposed to [rank][out], F16 (as it is) for an F16 B, else F32;
 * owned by the adapter. */
static int transpose_b(lora_adapter *a, lora_weights *w)
{
    const int64_t r = w->b.ne[0], out = w->b.ne[1];
    const size_t row = td_row_bytes(w->b.type, r);
    const bool f16 = w->b.type == TD_F16;
    uint8_t *bt = lora_alloc(a, (f16 ? 2 : 4) * (size_t)(r * out));
    if (!bt) {
        return -ENOMEM;
    }
    const uint8_t *src = w->b.data;
    for (int64_t o = 0; o < out; o++) {
        for (int64_t j = 0; j < r; j++) {
            if (f16) {
                memcpy(bt + 2 * (size_t)(j * out + o), src + (size_t)o * row + 2 * (size_t)j, 2);
            } else {
                const float v = lora_elem(w->b.type, src + (size_t)o * row, j);
                memcpy(bt + 4 * (size_t)(j * out + o), &v, sizeof(v));
            }
        }
    }
    w->bt = bt;
    w->bt_type = f16 ? TD_F16 : TD_F32;
    return 0;
}

/* A GGUF llama file's Q/K rows are permuted (model.h). */
static bool qk_permuted(model_format f, model_arch arch)
{
    return f == MODEL_FORMAT_GGUF && arch == MODEL_ARCH_LLAMA;
}

static bool lora_type_ok(const model_tensor *t)
{
    return (t->type == TD_F32 || t->type == TD_F16 || t->type == TD_BF16 || t->type == TD_Q8_0) &&
           td_row_bytes(t->type, t->ne[0]) != 0;
}

/* Checks every pair against m and finishes the adapter: ranks, scales, Q/K layout. */
static int lora_finish(lora_adapter *a, const model *m, const char *path, float alpha, bool rslora,
                       char *err, size_t errlen)
{
    const bool moe = m->cfg.n_expert > 0;
    const bool permute = qk_permuted(a->format, m->cfg.arch) != !m->cfg.rope_neox;
    for (int l = 0; l < a->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            lora_weights *w = &a->layers[l][t];
            if (!w->a.data && !w->b.data) {
                continue;
            }
            const char *tn = w->a.data ? w->a.name : w->b.name;
            if (!w->a.data || !w->b.data) {
                return tandem_fail(err, errlen, -EINVAL, "%s: tensor %s has no %s pair", path, tn,
                                   w->a.data ? "B (lora_b)" : "A (lora_a)");
            }
            if (moe && t >= LORA_GATE) {
                return tandem_fail(
                    err, errlen, -EINVAL,
                    "%s: tensor %s: LoRA on the feed-forward of a mixture-of-experts "
                    "model is not supported",
                    path, tn);
            }
            int64_t in, out;
            lora_target_dims(m, (lora_target)t, &in, &out);
            const int64_t r = w->a.ne[1];
            if (w->a.n_dims != 2 || w->b.n_dims != 2 || w->a.ne[0] != in || w->b.ne[0] != r ||
                w->b.ne[1] != out || r < 1) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "%s: tensors %s {%lld, %lld} and %s {%lld, %lld} do not fit "
                                   "layer %d's %s {%lld in, %lld out}: want A {%lld, rank} and B "
                                   "{rank, %lld}",
                                   path, w->a.name, (long long)w->a.ne[0], (long long)w->a.ne[1],
                                   w->b.name, (long long)w->b.ne[0], (long long)w->b.ne[1], l,
                                   lora_target_name((lora_target)t), (long long)in, (long long)out,
                                   (long long)in, (long long)out);
            }
            if (r > LORA_MAX_RANK) {
                return tandem_fail(err, errlen, -EINVAL, "%s: tensor %s: rank %lld is above %d",
                                   path, w->a.name, (long long)r, LORA_MAX_RANK);
            }
            if (!lora_type_ok(&w->a) || !lora_type_ok(&w->b)) {
                const model_tensor *bad = lora_type_ok(&w->a) ? &w->b : &w->a;
                return tandem_fail(err, errlen, -EINVAL,
                                   "%s: tensor %s has type %u; LoRA weights must be F32, F16, "
                                   "BF16 or Q8_0 (rows a multiple of 32)",
                                   path, bad->name, (unsigned)bad->type);
            }
            if (alpha == 0.0f && a->format == MODEL_FORMAT_GGUF) {
                w->scale = 1.0f; /* llama.cpp: no alpha means the adapter's own scale */
            } else {
                w->scale = alpha / (rslora ? sqrtf((float)r) : (float)r);
            }
            if (permute && (t == LORA_Q || t == LORA_K)) {
                const int64_t heads = t == LORA_Q ? m->cfg.n_head : m->cfg.n_head_kv;
                if (permute_rows(a, &w->b, heads, m->cfg.head_dim, !m->cfg.rope_neox) != 0) {
                    return tandem_fail(err, errlen, -ENOMEM, "%s: out of memory", path);
                }
            }
            if (transpose_b(a, w) != 0) {
                return tandem_fail(err, errlen, -ENOMEM, "%s: out of memory", path);
            }
            a->rank = r > a->rank ? (int32_t)r : a->rank;
            a->n_adapted++;
            a->bytes += w->a.nbytes + td_row_bytes(w->bt_type, r) * (size_t)out;
        }
    }
    if (a->n_adapted == 0) {
        return tandem_fail(err, errlen, -EINVAL, "%s: no LoRA weights", path);
    }
    return 0;
}

static int lora_load_gguf(lora_adapter *a, const model *m, const char *path, char *err,
                          size_t errlen)
{
    lora_priv *p = a->priv;
    gguf_ctx *g = p->gguf = gguf_open(path, err, errlen);
    if (!g) {
        return -EINVAL;
    }
    model_str s;
    if (gguf_get_str(g, "general.type", &s, NULL, 0) != 0 || s.len != 7 ||
        memcmp(s.s, "adapter", 7) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s: general.type: expected \"adapter\" (is this a LoRA adapter GGUF?)",
                           path);
    }
    if (gguf_get_str(g, "adapter.type", &s, NULL, 0) != 0 || s.len != 4 ||
        memcmp(s.s, "lora", 4) != 0) {
        return tandem_fail(err, errlen, -EINVAL, "%s: adapter.type: expected \"lora\"", path);
    }
    if (gguf_get_str(g, "general.architecture", &s, NULL, 0) == 0) {
        const char *want = model_arch_name(m->cfg.arch);
        if (s.len != strlen(want) || memcmp(s.s, want, s.len) != 0) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s: general.architecture \"%.*s\" does not match the model's "
                               "\"%s\"",
                               path, (int)s.len, s.s, want);
        }
    }
    float alpha = 0.0f;
    char e[256];
    int rc = gguf_get_f32(g, "adapter.lora.alpha", &alpha, e, sizeof(e));
    if (rc == -EINVAL || !isfinite(alpha)) {
        return tandem_fail(err, errlen, -EINVAL, "%s: %s", path,
                           rc ? e : "adapter.lora.alpha: not a finite number");
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_info *ti = &g->tensors[i];
        int layer;
        lora_target t;
        const char *rest;
        if (strncmp(ti->name, "blk.", 4) != 0 ||
            parse_layer_target(ti->name + 4, true, &layer, &t, &rest) != 0 ||
            (strcmp(rest, ".weight.lora_a") != 0 && strcmp(rest, ".weight.lora_b") != 0)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s: tensor %s: not a LoRA tensor of an attention or feed-forward "
                               "projection (blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,"
                               "ffn_up,ffn_down}.weight.lora_{a,b})",
                               path, ti->name);
        }
        if (layer >= a->n_layer) {
            return tandem_fail(err, errlen, -EINVAL, "%s: tensor %s: the model has %d layers", path,
                               ti->name, a->n_layer);
        }
        model_tensor *mt = rest[13] == 'a' ? &a->layers[layer][t].a : &a->layers[layer][t].b;
        *mt = (model_tensor){.name = ti->name,
                             .type = (tdtype)ti->type,
                             .n_dims = ti->n_dims,
                             .data = ti->data,
                             .nbytes = ti->nbytes};
        memcpy(mt->ne, ti->ne, sizeof(mt->ne));
        if (!td_supported(ti->type) || !ti->data) {
            return tandem_fail(err, errlen, -EINVAL, "%s: tensor %s has unsupported type %u", path,
                               ti->name, (unsigned)ti->type);
        }
    }
    return lora_finish(a, m, path, alpha, false, err, errlen);
}

/* A present value other than {} or []. */
static bool nonempty(struct json_object *o)
{
    if (json_object_is_type(o, json_type_object)) {
        return json_object_object_length(o) > 0;
    }
    if (json_object_is_type(o, json_type_array)) {
        return json_object_array_length(o) > 0;
    }
    return o != NULL;
}

/* adapter_config.json: the fields that change what the weights mean. */
static int peft_config(const char *dir, const char *cfg_path, float *alpha, bool *rslora,
                       int64_t *r, char *err, size_t errlen)
{
    struct json_object *cfg = NULL;
    int rc = model__read_json(cfg_path, &cfg, err, errlen);
    if (rc != 0) {
        return rc;
    }
    char e[256] = "";
    const char *type = "LORA", *bias = "none";
    int fan = 0, rs = 0;
    double al = 0;
    struct json_object *save = json_get(cfg, "modules_to_save");
    struct json_object *rp = json_get(cfg, "rank_pattern"), *ap = json_get(cfg, "alpha_pattern");
    rc = json_opt_string(cfg, "peft_type", "LORA", &type, e, sizeof(e));
    rc = rc ? rc : json_get_int64(cfg, "r", r, e, sizeof(e));
    rc = rc ? rc : json_get_double(cfg, "lora_alpha", &al, e, sizeof(e));
    rc = rc ? rc : json_opt_string(cfg, "bias", "none", &bias, e, sizeof(e));
    rc = rc ? rc : json_opt_bool(cfg, "fan_in_fan_out", 0, &fan, e, sizeof(e));
    rc = rc ? rc : json_opt_bool(cfg, "use_rslora", 0, &rs, e, sizeof(e));
    if (rc == 0) {
        if (strcmp(type, "LORA") != 0) {
            snprintf(e, sizeof(e), "peft_type: \"%s\" is not LORA", type);
        } else if (*r < 1 || *r > LORA_MAX_RANK) {
            snprintf(e, sizeof(e), "r: %lld is outside 1..%d", (long long)*r, LORA_MAX_RANK);
        } else if (!isfinite(al) || fabs(al) > FLT_MAX) {
            snprintf(e, sizeof(e), "lora_alpha: not a finite number of float range");
        } else if (strcmp(bias, "none") != 0) {
            snprintf(e, sizeof(e), "bias: \"%s\": adapter biases are not supported", bias);
        } else if (fan) {
            snprintf(e, sizeof(e), "fan_in_fan_out: true is not supported (Conv1D models)");
        } else if (nonempty(save)) {
            snprintf(e, sizeof(e), "modules_to_save: fully trained modules are not supported");
        } else if (nonempty(rp) || nonempty(ap)) {
            snprintf(e, sizeof(e), "%s: per-module ranks or alphas are not supported",
                     nonempty(rp) ? "rank_pattern" : "alpha_pattern");
        }
        rc = e[0] ? -EINVAL : 0;
    }
    json_object_put(cfg);
    *alpha = (float)al;
    *rslora = rs != 0;
    if (rc != 0) {
        return tandem_fail(err, errlen, rc, "%s: adapter_config.json: %s", dir, e);
    }
    return 0;
}

static int lora_load_peft(lora_adapter *a, const model *m, const char *dir, char *err,
                          size_t errlen)
{
    lora_priv *p = a->priv;
    char cfg_path[4096], st_path[4096];
    if ((size_t)snprintf(cfg_path, sizeof(cfg_path), "%s/adapter_config.json", dir) >=
            sizeof(cfg_path) ||
        (size_t)snprintf(st_path, sizeof(st_path), "%s/adapter_model.safetensors", dir) >=
            sizeof(st_path)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    }
    float alpha;
    bool rslora;
    int64_t r;
    int rc = peft_config(dir, cfg_path, &alpha, &rslora, &r, err, errlen);
    if (rc != 0) {
        return rc;
    }
    struct stat sb;
    if (stat(st_path, &sb) != 0) {
        return tandem_fail(err, errlen, -ENOENT,
                           "%s: no adapter_model.safetensors (only safetensors adapters are read)",
                           dir);
    }
    safetensors_file *f = p->st = safetensors_open(st_path, err, errlen);
    if (!f) {
        return -EINVAL;
    }
    static const char prefix[] = "base_model.model.model.layers.";
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *st = &f->tensors[i];
        int layer;
        lora_target t;
        const char *rest;
        if (strncmp(st->name, prefix, sizeof(prefix) - 1) != 0 ||
            parse_layer_target(st->name + sizeof(prefix) - 1, false, &layer, &t, &rest) != 0 ||
            (strcmp(rest, ".lora_A.weight") != 0 && strcmp(rest, ".lora_B.weight") != 0)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s: tensor %s: expected LoRA weights of the attention and MLP "
                               "projections (base_model.model.model.layers.N.{self_attn.{q,k,v,o}"
                               "_proj,mlp.{gate,up,down}_proj}.lora_{A,B}.weight)",
                               st_path, st->name);
        }
        if (layer >= a->n_layer || st->n_dims != 2) {
            return tandem_fail(err, errlen, -EINVAL,
                               layer >= a->n_layer ? "%s: tensor %s: the model has %d layers"
                                                   : "%s: tensor %s: expected 2 dimensions",
                               st_path, st->name, a->n_layer);
        }
        model_tensor *mt = rest[6] == 'A' ? &a->layers[layer][t].a : &a->layers[layer][t].b;
        *mt = (model_tensor){.name = st->name,
                             .type = st->type,
                             .n_dims = 2,
                             .ne = {st->shape[1], st->shape[0], 1, 1},
                             .data = st->data,
                             .nbytes = st->nbytes};
    }
    rc = lora_finish(a, m, st_path, alpha, rslora, err, errlen);
    for (int l = 0; rc == 0 && l < a->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *w = &a->layers[l][t];
            if (w->a.data && w->a.ne[1] != r) { /* without rank_pattern every module has rank r */
                return tandem_fail(err, errlen, -EINVAL,
                                   "%s: adapter_config.json says r = %lld but tensor %s has rank "
                                   "%lld",
                                   dir, (long long)r, w->a.name, (long long)w->a.ne[1]);
            }
        }
    }
    return rc;
}

lora_adapter *lora_load(const model *m, const char *path, char *err, size_t errlen)
{
    if (!m || !path || !path[0]) {
        tandem_set_err(err, errlen, "LoRA adapter: no path");
        return NULL;
    }
    if (m->cfg.arch == MODEL_ARCH_PHI3) {
        tandem_set_err(err, errlen,
                       "%s: LoRA adapters are not supported for phi3 (fused QKV and gate/up "
                       "projections)",
                       path);
        return NULL;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tandem_set_err(err, errlen, "%s: No adapter found (%s)", path, strerror(errno));
        return NULL;
    }
    lora_adapter *a = calloc(1, sizeof(*a));
    if (a) {
        a->priv = calloc(1, sizeof(lora_priv));
        a->n_layer = m->cfg.n_layer;
        a->layers = calloc((size_t)a->n_layer, sizeof(*a->layers));
    }
    if (!a || !a->priv || !a->layers) {
        lora_free(a);
        tandem_set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    int rc;
    if (S_ISDIR(sb.st_mode)) {
        a->format = MODEL_FORMAT_HF;
        rc = lora_load_peft(a, m, path, err, errlen);
    } else {
        a->format = MODEL_FORMAT_GGUF;
        rc = lora_load_gguf(a, m, path, err, errlen);
    }
    if (rc != 0) {
        lora_free(a);
        return NULL;
    }
    return a;
}
