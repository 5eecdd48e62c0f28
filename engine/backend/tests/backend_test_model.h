/*
 * Shared by the backend tests and fwd_bench: builds a random-weight model entirely in memory (a
 * `model` filled by hand, tensors in any of the five weight types) and frees it. Header-only,
 * static functions.
 */
#ifndef TANDEM_ENGINE_BACKEND_TESTS_BACKEND_TEST_MODEL_H
#define TANDEM_ENGINE_BACKEND_TESTS_BACKEND_TEST_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model.h"
#include "kernels/cpu/kc_convert.h"

typedef struct tm_spec {
    model_arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    tdtype wtype; /* type of the 2-D weights (norms and biases stay F32) */
    bool tied;
    uint64_t seed;
    /* features of the newer architectures (model.h), whatever `arch` says: gemma's scaled
     * embeddings, GeGLU, post-norms, soft-capping and an attention scale of its own; sliding
     * windows of n_swa on the even layers with their own RoPE base; n_expert experts (n_used
     * per token) of hidden size n_ff in place of the dense FFN; n_rot < head_dim rotary dims */
    bool gemma;
    int n_swa;
    int n_expert, n_used;
    int n_rot;
} tm_spec;

typedef struct tm_state {
    uint64_t rng;
} tm_state;

static float tm_frand(tm_state *s)
{
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (float)((double)(s->rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* ggml's reference Q4_0 quantization of one row. */
static void tm_quantize_q4_0(const float *x, td_block_q4_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / TD_QK; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            const float v = x[i * TD_QK + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = kc_f32_to_f16(d);
        for (int j = 0; j < TD_QK / 2; j++) {
            const float x0 = x[i * TD_QK + j] * id;
            const float x1 = x[i * TD_QK + TD_QK / 2 + j] * id;
            int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Fills tensor t ({k, m} of type ty) with uniform values in [-scale, scale] (+ offset). */
static int tm_fill(tm_state *s, model_tensor *t, const char *name, tdtype ty, int64_t k, int64_t m,
                   float scale, float offset)
{
    size_t rb = td_row_bytes(ty, k);
    t->name = name;
    t->type = ty;
    t->n_dims = m > 1 ? 2 : 1;
    t->ne[0] = k;
    t->ne[1] = m;
    t->ne[2] = t->ne[3] = 1;
    t->nbytes = rb * (size_t)m;
    uint8_t *data = aligned_alloc(64, (t->nbytes + 63) / 64 * 64);
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!data || !row) {
        free(data);
        free(row);
        return -1;
    }
    for (int64_t r = 0; r < m; r++) {
        for (int64_t i = 0; i < k; i++) {
            row[i] = offset + scale * tm_frand(s);
        }
        uint8_t *dst = data + (size_t)r * rb;
        switch (ty) {
        case TD_F32:
            memcpy(dst, row, rb);
            break;
        case TD_F16:
            kc_f32_to_f16_row(row, (uint16_t *)dst, k);
            break;
        case TD_BF16:
            for (int64_t i = 0; i < k; i++) {
                ((uint16_t *)dst)[i] = kc_f32_to_bf16(row[i]);
            }
            break;
        case TD_Q8_0:
            kc_quantize_row_q8_0(row, (td_block_q8_0 *)dst, k);
            break;
        case TD_Q4_0:
            tm_quantize_q4_0(row, (td_block_q4_0 *)dst, k);
            break;
        default: /* the generated test models use the types above */
            free(data);
            free(row);
            return -1;
        }
    }
    free(row);
    t->data = data;
    return 0;
}

static void tm_free(model *m)
{
    if (!m) {
        return;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        free((void *)m->tensors[i].data);
    }
    free(m->tensors);
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        free((void *)m->layers[l].exp_gate);
        free((void *)m->layers[l].exp_up);
        free((void *)m->layers[l].exp_down);
    }
    free(m->layers);
    free(m);
}

/* max |a[i] - b[i]| over n floats. */
static inline float tm_max_abs_diff(const float *a, const float *b, int n)
{
    float d = 0.0f;
    for (int i = 0; i < n; i++) {
        d = fmaxf(d, fabsf(a[i] - b[i]));
    }
    return d;
}

static model *tm_build(const tm_spec *sp)
{
    model *m = calloc(1, sizeof(*m));
    if (!m) {
        return NULL;
    }
    tm_state st = {.rng = sp->seed ? sp->seed : 0x1234567ull};
    model_config *c = &m->cfg;
    c->arch = sp->arch;
    c->n_layer = sp->n_layer;
    c->n_embd = sp->n_embd;
    c->n_head = sp->n_head;
    c->n_head_kv = sp->n_head_kv;
    c->head_dim = sp->head_dim;
    c->n_rot = sp->n_rot > 0 ? sp->n_rot : sp->head_dim;
    c->n_ff = sp->n_ff;
    c->n_vocab = sp->n_vocab;
    c->n_ctx_train = 4096;
    c->rope_base = sp->arch == MODEL_ARCH_LLAMA ? 10000.0f : 1000000.0f;
    c->rms_eps = 1e-5f;
    c->rope_neox = sp->arch != MODEL_ARCH_LLAMA;
    c->tied_output = sp->tied;
    if (sp->gemma) {
        c->ffn_act = MODEL_ACT_GELU_TANH;
        c->embd_scale = sqrtf((float)sp->n_embd);
        c->attn_scale = 0.3f;
        c->attn_softcap = 5.0f;
        c->final_softcap = 3.0f;
    }
    c->n_swa = sp->n_swa;
    c->rope_base_swa = 500.0f;
    c->n_expert = sp->n_expert;
    c->n_expert_used = sp->n_used;
    c->n_ff_exp = sp->n_expert > 0 ? sp->n_ff : 0;
    const int64_t E = sp->n_embd, F = sp->n_ff, hd = sp->head_dim;
    const int64_t qd = (int64_t)sp->n_head * hd, kvd = (int64_t)sp->n_head_kv * hd;
    size_t cap = 3 + (size_t)sp->n_layer * (16 + 3 * (size_t)sp->n_expert);
    m->tensors = calloc(cap, sizeof(model_tensor));
    m->layers = calloc((size_t)sp->n_layer, sizeof(model_layer));
    if (!m->tensors || !m->layers) {
        tm_free(m);
        return NULL;
    }
    size_t n = 0;
    int bad = 0;
#define TM_T(ptr, nm, ty, k, rows, sc, off)                                                        \
    do {                                                                                           \
        bad |= tm_fill(&st, &m->tensors[n], nm, ty, k, rows, sc, off);                             \
        m->n_tensors = ++n;                                                                        \
        (ptr) = &m->tensors[n - 1];                                                                \
    } while (0)
    TM_T(m->tok_embd, "token_embd.weight", sp->wtype, E, sp->n_vocab, 1.0f, 0.0f);
    TM_T(m->output_norm, "output_norm.weight", TD_F32, E, 1, 0.2f, 1.0f);
    if (sp->tied) {
        m->output = m->tok_embd;
    } else {
        TM_T(m->output, "output.weight", sp->wtype, E, sp->n_vocab, 1.0f / sqrtf((float)E), 0.0f);
    }
    for (int l = 0; l < sp->n_layer; l++) {
        model_layer *L = &m->layers[l];
        const float se = 1.7f / sqrtf((float)E), sq = 1.7f / sqrtf((float)qd);
        const float sf = 1.7f / sqrtf((float)F);
        TM_T(L->attn_norm, "attn_norm", TD_F32, E, 1, 0.2f, 1.0f);
        TM_T(L->wq, "attn_q", sp->wtype, E, qd, se, 0.0f);
        TM_T(L->wk, "attn_k", sp->wtype, E, kvd, se, 0.0f);
        TM_T(L->wv, "attn_v", sp->wtype, E, kvd, se, 0.0f);
        TM_T(L->wo, "attn_output", sp->wtype, qd, E, sq, 0.0f);
        TM_T(L->ffn_norm, "ffn_norm", TD_F32, E, 1, 0.2f, 1.0f);
        if (sp->n_expert > 0) {
            const size_t ne = (size_t)sp->n_expert;
            L->exp_gate = calloc(ne, sizeof(*L->exp_gate));
            L->exp_up = calloc(ne, sizeof(*L->exp_up));
            L->exp_down = calloc(ne, sizeof(*L->exp_down));
            bad |= !L->exp_gate || !L->exp_up || !L->exp_down;
            TM_T(L->ffn_gate_inp, "ffn_gate_inp", sp->wtype, E, sp->n_expert, 4.0f * se, 0.0f);
            for (size_t e = 0; !bad && e < ne; e++) {
                TM_T(L->exp_gate[e], "ffn_gate_exps", sp->wtype, E, F, se, 0.0f);
                TM_T(L->exp_up[e], "ffn_up_exps", sp->wtype, E, F, se, 0.0f);
                TM_T(L->exp_down[e], "ffn_down_exps", sp->wtype, F, E, sf, 0.0f);
            }
        } else {
            TM_T(L->w_gate, "ffn_gate", sp->wtype, E, F, se, 0.0f);
            TM_T(L->w_up, "ffn_up", sp->wtype, E, F, se, 0.0f);
            TM_T(L->w_down, "ffn_down", sp->wtype, F, E, sf, 0.0f);
        }
        if (sp->gemma) {
            TM_T(L->attn_post_norm, "post_attention_norm", TD_F32, E, 1, 0.2f, 1.0f);
            TM_T(L->ffn_post_norm, "post_ffw_norm", TD_F32, E, 1, 0.2f, 1.0f);
        }
        L->swa = sp->n_swa > 0 && l % 2 == 0;
        if (sp->arch == MODEL_ARCH_QWEN2) {
            TM_T(L->bq, "attn_q.bias", TD_F32, qd, 1, 0.3f, 0.0f);
            TM_T(L->bk, "attn_k.bias", TD_F32, kvd, 1, 0.3f, 0.0f);
            TM_T(L->bv, "attn_v.bias", TD_F32, kvd, 1, 0.3f, 0.0f);
        }
        if (sp->arch == MODEL_ARCH_QWEN3) {
            TM_T(L->q_norm, "attn_q_norm", TD_F32, hd, 1, 0.2f, 1.0f);
            TM_T(L->k_norm, "attn_k_norm", TD_F32, hd, 1, 0.2f, 1.0f);
        }
    }
#undef TM_T
    if (bad) {
        tm_free(m);
        return NULL;
    }
    return m;
}

#endif
