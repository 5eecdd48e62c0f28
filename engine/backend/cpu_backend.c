/*
 * The CPU compute backend (cpu_backend_ops of engine/core/backend.h): a ragged batched forward
 * pass of llama / qwen2 / qwen3 models over the paged KV cache, on kernels/cpu.
 *
 * Per step: token embedding -> per layer [RMSNorm -> Q/K/V projections (+ qwen2 biases) ->
 * qwen3 per-head Q/K RMSNorm -> RoPE -> store K/V into their cache slots -> paged causal
 * attention (GQA) -> output projection + residual -> RMSNorm -> gate/up -> SwiGLU -> down +
 * residual] -> final RMSNorm + output projection for the rows that want logits. In the last layer
 * only those rows go past attention (their KV is all later steps need from the others).
 *
 * Every matmul and per-token op computes a token's values independently of the other tokens and
 * of the thread count (see kc_matmul.h), so a sequence's logits are the same alone, batched or
 * prefilled in chunks. All memory (KV pools, scratch sized by max_batch_tokens / max_seqs, the
 * thread pool) is allocated in create; forward allocates nothing.
 *
 * As one rank of tensor parallelism (backend_config.tp, engine/core/tp.h) the model is a shard:
 * the O and down projections give partial sums, added over the ranks before each residual add,
 * and the output matrix holds this rank's vocabulary rows, copied into their logits columns.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend_check.h"
#include "engine/core/backend.h"
#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cpu/kc_pool.h"
#include "lib/common.h"
#include "lib/err.h"

#define CPU_ALIGN 64

#define CPU_LORA_MAX_THREADS 256 /* pool threads the LoRA scratch is split over */
#define CPU_LORA_CHUNK       32  /* rows of one adapter multiplied together by one thread */

typedef struct cpu_layer {
    kc_weight wq, wk, wv, wo, gate, up, down;
    kc_weight router;                          /* MoE: {n_embd, n_expert} */
    kc_weight *e_gate, *e_up, *e_down;         /* MoE: [n_expert] */
    kc_weight sh_inp, sh_gate, sh_up, sh_down; /* qwen2moe's shared expert: {n_embd, 1}, ... */
    float *attn_norm, *ffn_norm;               /* [n_embd] */
    float *attn_post_norm, *ffn_post_norm;     /* [n_embd] or NULL (gemma) */
    float *q_norm, *k_norm;                    /* [head_dim] or NULL */
    float *bq, *bk, *bv;                       /* [q_dim], [kv_dim], [kv_dim] or NULL */
    void *k_pool, *v_pool;                     /* KV pools, pool_bytes each */
    bool k_external, v_external; /* adopted (cpu_kv_adopt) or a group slot's: not ours to free */
    int32_t kv_group;            /* the block table of its KV (fwd_seq.group_tables), or 0 */
} cpu_layer;

struct backend {
    const model *m;
    backend_config cfg;
    kc_pool *pool;
    int n_layer, n_embd, n_head, n_head_kv, hd, n_rot, n_ff, n_vocab, q_dim, kv_dim;
    size_t kv_esz;     /* bytes per KV element */
    size_t pool_bytes; /* bytes of one K or V pool */
    cpu_layer *layers;
    /* KV cache groups (backend_config.kv_groups, more than one): the pools of the group slots,
     * [n_slots] each, which the layers point into; NULL otherwise (a pool per layer) */
    void **slot_k, **slot_v;
    int32_t n_slots;
    kc_weight output;
    float *out_norm;
    /* scratch, T = max_batch_tokens rows */
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up; /* [T][...] */
    float *rope;                                       /* [T][n_rot] cos/sin pairs */
    float *rope_swa; /* the same for sliding-window layers when they rotate otherwise, or NULL */
    /* RoPE scaling (model.h): ggml rope's freq_scale, ext_factor, attn_factor and YaRN's ramp */
    float rope_freq_scale, rope_ext_factor, rope_attn_factor, rope_corr_dims[2];
    const float *rope_freqs; /* per-pair divisors for this context (model_rope_freqs) or NULL */
    float rope_swa_freq_scale, rope_swa_corr_dims[2];
    float attn_scale; /* model_config.attn_scale, or 1 / sqrt(head_dim) when it is 0 */
    /* MoE scratch: router probabilities [T][n_expert], each token's chosen experts and weights
     * [T][n_used], per expert the tokens routed to it [n_expert][T], gathered rows [T][E] */
    int n_expert, n_used, n_ff_exp, n_ff_shexp; /* n_ff_shexp: 0 without a shared expert */
    bool expert_weights_raw;                    /* model_config: no renormalization */
    float *probs, *sel_w, *xg, *sh_g;           /* sh_g: [T] shared expert gate logits */
    int32_t *sel_id, *e_count, *e_rows;
    int32_t *tok_pos, *tok_seq, *out_rows; /* [T], [T], [T]: rows kept past the last attention */
    kc_attn_seq *aseq;                     /* [max_seqs] */
    void *wsp;
    size_t wsp_bytes;
    const backend_tp *tp; /* NULL: the whole model */
    int32_t n_out;        /* output rows: n_vocab, or this rank's vocabulary slice */
    float *logits_local;  /* tp: [max_seqs][n_out] */
    /* LoRA (cfg.max_lora_rank > 0): each row's adapter (compacted with the rows in the last
     * layer), and per thread of the pool A x, B A x and a row's kc_matmul workspace */
    const lora_adapter **row_lora;   /* [T] */
    uint8_t *lora_done;              /* [T] rows whose deltas are added */
    int32_t *lora_rows;              /* [threads][CPU_LORA_CHUNK] rows of one adapter */
    float *lora_x, *lora_t, *lora_d; /* [threads][CPU_LORA_CHUNK] rows of: the gathered input
                                        [lora_width], A x [max_lora_rank], B A x [lora_width] */
    void *lora_wsp;                  /* [threads][lora_wsp_bytes] */
    size_t lora_wsp_bytes;
    int64_t lora_width; /* the widest projection side */
    bool any_lora;      /* this batch has a row with an adapter */
};

static void *cpu_aligned_zalloc(size_t bytes)
{
    size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
    if (p) {
        memset(p, 0, rounded ? rounded : CPU_ALIGN);
    }
    return p;
}

static size_t cpu_kv_block_bytes(const model *m, int32_t block_size, kv_dtype dt)
{
    const model_config *c = &m->cfg;
    size_t esz = dt == KV_DTYPE_F16 ? 2 : 4;
    return (size_t)c->n_layer * 2 * (size_t)c->n_head_kv * (size_t)block_size *
           (size_t)c->head_dim * esz;
}

/* Checks a 2-D weight {k, m} and fills w. */
static int cpu_weight(kc_weight *w, const model_tensor *t, int64_t k, int64_t m, const char *what,
                      char *err, size_t errlen)
{
    if (!t) {
        return tandem_fail(err, errlen, -EINVAL, "cpu backend: missing tensor %s", what);
    }
    if (!td_supported(t->type)) {
        return tandem_fail(err, errlen, -EINVAL, "cpu backend: tensor %s has unsupported type %u",
                           t->name ? t->name : what, (unsigned)t->type);
    }
    if (t->ne[0] != k || t->ne[1] < m || td_row_bytes(t->type, k) == 0 || !t->data) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cpu backend: tensor %s has shape {%lld, %lld}, want {%lld, %lld}",
                           t->name ? t->name : what, (long long)t->ne[0], (long long)t->ne[1],
                           (long long)k, (long long)m);
    }
    w->type = t->type;
    w->k = k;
    w->m = m;
    w->data = t->data;
    return 0;
}

/* f32 copy of a 1-D vector of n elements (NULL tensor allowed when optional). */
static int cpu_vector(float **out, const model_tensor *t, int64_t n, bool optional,
                      const char *what, char *err, size_t errlen)
{
    *out = NULL;
    if (!t) {
        if (optional) {
            return 0;
        }
        return tandem_fail(err, errlen, -EINVAL, "cpu backend: missing tensor %s", what);
    }
    if (!td_supported(t->type) || t->ne[0] != n || !t->data) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cpu backend: tensor %s must be a vector of %lld elements",
                           t->name ? t->name : what, (long long)n);
    }
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out) {
        return tandem_fail(err, errlen, -ENOMEM, "cpu backend: out of memory");
    }
    if (kc_dequantize_row(t->type, t->data, *out, n) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cpu backend: tensor %s cannot be read as %lld floats",
                           t->name ? t->name : what, (long long)n);
    }
    return 0;
}

static void cpu_destroy(backend *b)
{
    if (!b) {
        return;
    }
    if (b->layers) {
        for (int l = 0; l < b->n_layer; l++) {
            cpu_layer *L = &b->layers[l];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->attn_post_norm);
            free(L->ffn_post_norm);
            kc_weight_release(&L->router);
            kc_weight_release(&L->sh_inp);
            kc_weight_release(&L->sh_gate);
            kc_weight_release(&L->sh_up);
            kc_weight_release(&L->sh_down);
            for (int e = 0; L->e_gate && e < b->n_expert; e++) {
                kc_weight_release(&L->e_gate[e]);
                kc_weight_release(&L->e_up[e]);
                kc_weight_release(&L->e_down[e]);
            }
            free(L->e_gate);
            free(L->e_up);
            free(L->e_down);
            free(L->q_norm);
            free(L->k_norm);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            if (!L->k_external) {
                free(L->k_pool);
            }
            if (!L->v_external) {
                free(L->v_pool);
            }
            kc_weight_release(&L->wq);
            kc_weight_release(&L->wk);
            kc_weight_release(&L->wv);
            kc_weight_release(&L->wo);
            kc_weight_release(&L->gate);
            kc_weight_release(&L->up);
            kc_weight_release(&L->down);
        }
        free(b->layers);
    }
    for (int32_t i = 0; i < b->n_slots; i++) {
        free(b->slot_k ? b->slot_k[i] : NULL);
        free(b->slot_v ? b->slot_v[i] : NULL);
    }
    free(b->slot_k);
    free(b->slot_v);
    kc_weight_release(&b->output);
    free(b->out_norm);
    free(b->x);
    free(b->xn);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->att);
    free(b->tmp);
    free(b->gate);
    free(b->up);
    free(b->rope);
    free(b->rope_swa);
    free(b->probs);
    free(b->sel_w);
    free(b->xg);
    free(b->sh_g);
    free(b->sel_id);
    free(b->e_count);
    free(b->e_rows);
    free(b->tok_pos);
    free(b->tok_seq);
    free(b->out_rows);
    free(b->aseq);
    free(b->wsp);
    free(b->logits_local);
    free(b->row_lora);
    free(b->lora_done);
    free(b->lora_rows);
    free(b->lora_x);
    free(b->lora_t);
    free(b->lora_d);
    free(b->lora_wsp);
    kc_pool_free(b->pool);
    free(b);
}

static size_t cpu_max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* LoRA scratch, per thread of the pool and for CPU_LORA_CHUNK rows: the gathered inputs, A x,
 * B A x and the kc_matmul workspace for an adapter of any type it takes (Q8_0 and BF16
 * quantise or round the activations). */
static int cpu_lora_alloc(backend *b)
{
    const int nth = kc_pool_size(b->pool);
    if (nth > CPU_LORA_MAX_THREADS) {
        return -EINVAL;
    }
    b->lora_width = b->n_embd > b->q_dim ? b->n_embd : b->q_dim;
    b->lora_width = b->lora_width > b->n_ff ? b->lora_width : b->n_ff;
    const tdtype wtypes[] = {TD_Q8_0, TD_BF16};
    size_t ws = 0;
    for (size_t i = 0; i < ARRAY_SIZE(wtypes); i++) {
        const kc_weight probe = {.type = wtypes[i], .k = b->lora_width / TD_QK * TD_QK, .m = 1};
        ws = cpu_max_size(ws, kc_matmul_wsize(&probe, CPU_LORA_CHUNK));
    }
    b->lora_wsp_bytes = (ws + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    const int64_t T =
        b->cfg.max_batch_tokens > b->cfg.max_seqs ? b->cfg.max_batch_tokens : b->cfg.max_seqs;
    const size_t rows = (size_t)nth * CPU_LORA_CHUNK;
    b->row_lora = calloc((size_t)T, sizeof(const lora_adapter *));
    b->lora_done = calloc((size_t)T, 1);
    b->lora_rows = calloc(rows, sizeof(int32_t));
    b->lora_x = cpu_aligned_zalloc(sizeof(float) * rows * (size_t)b->lora_width);
    b->lora_t = cpu_aligned_zalloc(sizeof(float) * rows * (size_t)b->cfg.max_lora_rank);
    b->lora_d = cpu_aligned_zalloc(sizeof(float) * rows * (size_t)b->lora_width);
    b->lora_wsp = cpu_aligned_zalloc((size_t)nth * b->lora_wsp_bytes);
    return b->row_lora && b->lora_done && b->lora_rows && b->lora_x && b->lora_t && b->lora_d &&
                   b->lora_wsp
               ? 0
               : -ENOMEM;
}

static backend *cpu_create(const model *m, const backend_config *cfg, char *err, size_t errlen)
{
    if (backend_check_config("cpu", m, cfg, err, errlen) != 0) {
        return NULL;
    }
    const model_config *c = &m->cfg;
    backend *b = calloc(1, sizeof(*b));
    if (!b) {
        tandem_set_err(err, errlen, "cpu backend: out of memory");
        return NULL;
    }
    b->m = m;
    b->cfg = *cfg;
    b->n_layer = c->n_layer;
    b->n_embd = c->n_embd;
    b->n_head = c->n_head;
    b->n_head_kv = c->n_head_kv;
    b->hd = c->head_dim;
    b->n_rot = c->n_rot;
    b->rope_freq_scale = model_rope_freq_scale(c);
    b->rope_ext_factor = model_rope_ext_factor(c);
    b->rope_attn_factor = model_rope_attn_factor(c);
    b->rope_freqs =
        model_rope_freqs(c, cfg->max_model_len > 0 ? cfg->max_model_len : c->n_ctx_train);
    if (b->rope_ext_factor != 0.0f) {
        kc_rope_yarn_corr_dims(c->n_rot, c->rope_yarn_orig_ctx, c->rope_base,
                               c->rope_yarn_beta_fast, c->rope_yarn_beta_slow, b->rope_corr_dims);
    }
    bool any_swa = false;
    for (int l = 0; l < c->n_layer; l++) {
        any_swa |= m->layers[l].swa;
    }
    b->rope_swa_freq_scale = c->rope_swa_scaled ? b->rope_freq_scale : 1.0f;
    const bool swa_rope = any_swa && (c->rope_base_swa != c->rope_base ||
                                      b->rope_swa_freq_scale != b->rope_freq_scale ||
                                      (!c->rope_swa_scaled && b->rope_freqs));
    if (swa_rope && b->rope_ext_factor != 0.0f) {
        kc_rope_yarn_corr_dims(c->n_rot, c->rope_yarn_orig_ctx, c->rope_base_swa,
                               c->rope_yarn_beta_fast, c->rope_yarn_beta_slow,
                               b->rope_swa_corr_dims);
    }
    b->attn_scale = c->attn_scale > 0.0f ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim);
    b->n_expert = c->n_expert;
    b->n_used = c->n_expert_used;
    b->n_ff_shexp = c->arch == MODEL_ARCH_QWEN2MOE ? c->n_ff_shexp : 0;
    b->expert_weights_raw = c->expert_weights_raw;
    b->n_ff_exp = c->n_ff_exp;
    b->n_ff = c->n_ff;
    b->n_vocab = c->n_vocab;
    b->q_dim = c->n_head * c->head_dim;
    b->kv_dim = c->n_head_kv * c->head_dim;
    b->kv_esz = cfg->kv_dtype == KV_DTYPE_F16 ? 2 : 4;
    b->tp = cfg->tp;
    b->n_out = b->tp ? b->tp->vocab_end - b->tp->vocab_begin : b->n_vocab;
    b->pool_bytes =
        (size_t)cfg->num_blocks * (size_t)b->kv_dim * (size_t)cfg->block_size * b->kv_esz;
    b->layers = calloc((size_t)b->n_layer, sizeof(cpu_layer));
    if (!b->layers) {
        tandem_set_err(err, errlen, "cpu backend: out of memory");
        goto err_destroy;
    }
    if (cfg->kv_groups && cfg->kv_groups->n_groups > 1) {
        const kv_groups *kg = cfg->kv_groups;
        if (kg->n_layer != b->n_layer || kg->group_size < 1) {
            tandem_set_err(err, errlen, "cpu backend: KV cache groups planned for %d layers",
                           (int)kg->n_layer);
            goto err_destroy;
        }
        b->slot_k = calloc((size_t)kg->group_size, sizeof(void *));
        b->slot_v = calloc((size_t)kg->group_size, sizeof(void *));
        if (!b->slot_k || !b->slot_v) {
            tandem_set_err(err, errlen, "cpu backend: out of memory");
            goto err_destroy;
        }
        b->n_slots = kg->group_size;
        for (int32_t i = 0; i < b->n_slots; i++) {
            b->slot_k[i] = cpu_aligned_zalloc(b->pool_bytes);
            b->slot_v[i] = cpu_aligned_zalloc(b->pool_bytes);
            if (!b->slot_k[i] || !b->slot_v[i]) {
                tandem_set_err(err, errlen,
                               "cpu backend: cannot allocate %zu bytes of KV cache for group "
                               "slot %d",
                               2 * b->pool_bytes, (int)i);
                goto err_destroy;
            }
        }
    }
    const int64_t E = b->n_embd, F = b->n_ff;
    const int64_t T = cfg->max_batch_tokens > cfg->max_seqs ? cfg->max_batch_tokens : cfg->max_seqs;
    size_t ws = 0;
    for (int l = 0; l < b->n_layer; l++) {
        const model_layer *ml = &m->layers[l];
        cpu_layer *L = &b->layers[l];
        char what[64];
        snprintf(what, sizeof(what), "layer %d", l);
        const bool moe = b->n_expert > 0;
        if (cpu_weight(&L->wq, ml->wq, E, b->q_dim, what, err, errlen) ||
            cpu_weight(&L->wk, ml->wk, E, b->kv_dim, what, err, errlen) ||
            cpu_weight(&L->wv, ml->wv, E, b->kv_dim, what, err, errlen) ||
            cpu_weight(&L->wo, ml->wo, b->q_dim, E, what, err, errlen) ||
            (!moe && (cpu_weight(&L->gate, ml->w_gate, E, F, what, err, errlen) ||
                      cpu_weight(&L->up, ml->w_up, E, F, what, err, errlen) ||
                      cpu_weight(&L->down, ml->w_down, F, E, what, err, errlen))) ||
            (moe && cpu_weight(&L->router, ml->ffn_gate_inp, E, b->n_expert, what, err, errlen)) ||
            (b->n_ff_shexp > 0 &&
             (cpu_weight(&L->sh_inp, ml->ffn_gate_inp_shexp, E, 1, what, err, errlen) ||
              cpu_weight(&L->sh_gate, ml->w_gate_shexp, E, b->n_ff_shexp, what, err, errlen) ||
              cpu_weight(&L->sh_up, ml->w_up_shexp, E, b->n_ff_shexp, what, err, errlen) ||
              cpu_weight(&L->sh_down, ml->w_down_shexp, b->n_ff_shexp, E, what, err, errlen))) ||
            cpu_vector(&L->attn_norm, ml->attn_norm, E, false, what, err, errlen) ||
            cpu_vector(&L->ffn_norm, ml->ffn_norm, E, false, what, err, errlen) ||
            cpu_vector(&L->attn_post_norm, ml->attn_post_norm, E, true, what, err, errlen) ||
            cpu_vector(&L->ffn_post_norm, ml->ffn_post_norm, E, true, what, err, errlen) ||
            cpu_vector(&L->q_norm, ml->q_norm, b->hd, true, what, err, errlen) ||
            cpu_vector(&L->k_norm, ml->k_norm, b->hd, true, what, err, errlen) ||
            cpu_vector(&L->bq, ml->bq, b->q_dim, true, what, err, errlen) ||
            cpu_vector(&L->bk, ml->bk, b->kv_dim, true, what, err, errlen) ||
            cpu_vector(&L->bv, ml->bv, b->kv_dim, true, what, err, errlen)) {
            goto err_destroy;
        }
        kc_weight *all[] = {&L->wq,   &L->wk,     &L->wv,     &L->wo,      &L->gate,  &L->up,
                            &L->down, &L->router, &L->sh_inp, &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            if (!all[i]->data) {
                continue; /* a dense layer's router, a MoE layer's dense matrices, ... */
            }
            ws = cpu_max_size(ws, kc_matmul_wsize(all[i], T));
            if (kc_weight_prepare(all[i]) != 0) {
                tandem_set_err(err, errlen, "cpu backend: out of memory repacking layer %d", l);
                goto err_destroy;
            }
        }
        if (moe) {
            const int64_t FE = b->n_ff_exp;
            L->e_gate = calloc((size_t)b->n_expert, sizeof(kc_weight));
            L->e_up = calloc((size_t)b->n_expert, sizeof(kc_weight));
            L->e_down = calloc((size_t)b->n_expert, sizeof(kc_weight));
            if (!L->e_gate || !L->e_up || !L->e_down) {
                tandem_set_err(err, errlen, "cpu backend: out of memory");
                goto err_destroy;
            }
            for (int e = 0; e < b->n_expert; e++) {
                snprintf(what, sizeof(what), "layer %d expert %d", l, e);
                if (!ml->exp_gate || !ml->exp_up || !ml->exp_down ||
                    cpu_weight(&L->e_gate[e], ml->exp_gate[e], E, FE, what, err, errlen) ||
                    cpu_weight(&L->e_up[e], ml->exp_up[e], E, FE, what, err, errlen) ||
                    cpu_weight(&L->e_down[e], ml->exp_down[e], FE, E, what, err, errlen)) {
                    if (!ml->exp_gate || !ml->exp_up || !ml->exp_down) {
                        tandem_set_err(err, errlen, "cpu backend: layer %d has no experts", l);
                    }
                    goto err_destroy;
                }
                kc_weight *ew[] = {&L->e_gate[e], &L->e_up[e], &L->e_down[e]};
                for (size_t i = 0; i < 3; i++) {
                    ws = cpu_max_size(ws, kc_matmul_wsize(ew[i], T));
                    if (kc_weight_prepare(ew[i]) != 0) {
                        tandem_set_err(err, errlen, "cpu backend: out of memory repacking %s",
                                       what);
                        goto err_destroy;
                    }
                }
            }
        }
        if (b->slot_k) {
            const kv_groups *kg = cfg->kv_groups;
            L->kv_group = kg->layer_group[l];
            L->k_pool = b->slot_k[kg->layer_slot[l]];
            L->v_pool = b->slot_v[kg->layer_slot[l]];
            L->k_external = L->v_external = true;
        } else {
            L->k_pool = cpu_aligned_zalloc(b->pool_bytes);
            L->v_pool = cpu_aligned_zalloc(b->pool_bytes);
        }
        if (!L->k_pool || !L->v_pool) {
            tandem_set_err(err, errlen,
                           "cpu backend: cannot allocate %zu bytes of KV cache for layer %d",
                           2 * b->pool_bytes, l);
            goto err_destroy;
        }
    }
    const model_tensor *out_t = c->tied_output || !m->output ? m->tok_embd : m->output;
    if (cpu_weight(&b->output, out_t, E, b->n_out, "output", err, errlen) ||
        cpu_vector(&b->out_norm, m->output_norm, E, false, "output_norm", err, errlen)) {
        goto err_destroy;
    }
    kc_weight emb = {0};
    if (cpu_weight(&emb, m->tok_embd, E, b->n_vocab, "token_embd", err, errlen)) {
        goto err_destroy;
    }
    ws = cpu_max_size(ws, kc_matmul_wsize(&b->output, T));
    if (kc_weight_prepare(&b->output) != 0) {
        tandem_set_err(err, errlen, "cpu backend: out of memory repacking the output matrix");
        goto err_destroy;
    }
    const size_t fT = sizeof(float) * (size_t)T;
    b->x = cpu_aligned_zalloc(fT * (size_t)E);
    b->xn = cpu_aligned_zalloc(fT * (size_t)E);
    b->q = cpu_aligned_zalloc(fT * (size_t)b->q_dim);
    b->k = cpu_aligned_zalloc(fT * (size_t)b->kv_dim);
    b->v = cpu_aligned_zalloc(fT * (size_t)b->kv_dim);
    b->att = cpu_aligned_zalloc(fT * (size_t)b->q_dim);
    b->tmp = cpu_aligned_zalloc(fT * (size_t)E);
    int64_t FF = F > b->n_ff_exp ? F : b->n_ff_exp;
    FF = FF > b->n_ff_shexp ? FF : b->n_ff_shexp;
    b->gate = cpu_aligned_zalloc(fT * (size_t)FF);
    b->up = cpu_aligned_zalloc(fT * (size_t)FF);
    b->rope = cpu_aligned_zalloc(fT * (size_t)(b->n_rot > 0 ? b->n_rot : 1));
    if (swa_rope) {
        b->rope_swa = cpu_aligned_zalloc(fT * (size_t)b->n_rot);
    }
    if (b->n_expert > 0) {
        b->probs = cpu_aligned_zalloc(fT * (size_t)b->n_expert);
        b->sel_w = cpu_aligned_zalloc(fT * (size_t)b->n_used);
        b->xg = cpu_aligned_zalloc(fT * (size_t)E);
        b->sh_g = cpu_aligned_zalloc(fT);
        b->sel_id = calloc((size_t)T * (size_t)b->n_used, sizeof(int32_t));
        b->e_count = calloc((size_t)b->n_expert, sizeof(int32_t));
        b->e_rows = calloc((size_t)b->n_expert * (size_t)T, sizeof(int32_t));
    }
    b->tok_pos = calloc((size_t)T, sizeof(int32_t));
    b->tok_seq = calloc((size_t)T, sizeof(int32_t));
    b->out_rows = calloc((size_t)T, sizeof(int32_t));
    b->aseq = calloc((size_t)cfg->max_seqs, sizeof(kc_attn_seq));
    b->wsp_bytes = ws;
    b->wsp = ws ? cpu_aligned_zalloc(ws) : NULL;
    if (b->tp) {
        b->logits_local =
            cpu_aligned_zalloc(sizeof(float) * (size_t)cfg->max_seqs * (size_t)b->n_out);
    }
    if ((b->tp && !b->logits_local) || !b->x || !b->xn || !b->q || !b->k || !b->v || !b->att ||
        !b->tmp || !b->gate || !b->up || !b->rope || !b->tok_pos || !b->tok_seq || !b->out_rows ||
        !b->aseq || (ws && !b->wsp) || (swa_rope && !b->rope_swa) ||
        (b->n_expert > 0 && (!b->probs || !b->sel_w || !b->xg || !b->sh_g || !b->sel_id ||
                             !b->e_count || !b->e_rows))) {
        tandem_set_err(err, errlen, "cpu backend: out of memory for scratch buffers");
        goto err_destroy;
    }
    b->pool = kc_pool_new(cfg->n_threads, cfg->pin_threads);
    if (!b->pool) {
        tandem_set_err(err, errlen, "cpu backend: cannot start %d threads", cfg->n_threads);
        goto err_destroy;
    }
    if (cfg->max_lora_rank > 0 && cpu_lora_alloc(b) != 0) {
        tandem_set_err(err, errlen,
                       "cpu backend: out of memory for LoRA buffers (or more than %d "
                       "threads)",
                       CPU_LORA_MAX_THREADS);
        goto err_destroy;
    }
    return b;

err_destroy:
    cpu_destroy(b);
    return NULL;
}

/* Per-token work items, run over the pool with tokens split into contiguous ranges. */
typedef enum cpu_tok_op {
    CPU_OP_EMBED,     /* x = embedding rows */
    CPU_OP_ATTN_NORM, /* xn = rmsnorm(x) * attn_norm */
    CPU_OP_QKV_POST,  /* biases, q/k norms, RoPE, store K/V */
    CPU_OP_FFN_NORM,  /* [tmp = rmsnorm(tmp) * attn_post_norm;] x += tmp; xn = rmsnorm(x) * ffn_norm
                       */
    CPU_OP_ACT,       /* gate = act(gate) * up, `width` wide */
    CPU_OP_ROUTE,     /* MoE: router logits -> chosen experts and their weights */
    CPU_OP_RESIDUAL,  /* [tmp = rmsnorm(tmp) * ffn_post_norm;] x += tmp */
    CPU_OP_OUT_NORM,  /* xn = rmsnorm(x) * output_norm */
} cpu_tok_op;

typedef struct cpu_tok_task {
    backend *b;
    const fwd_batch *batch;
    cpu_tok_op op;
    int layer;
    int32_t n;     /* rows */
    int64_t width; /* CPU_OP_ACT: row width */
} cpu_tok_task;

static void cpu_store_kv(backend *b, const cpu_layer *L, const fwd_batch *batch, int32_t t)
{
    const fwd_seq *s = &batch->seqs[b->tok_seq[t]];
    const int32_t pos = b->tok_pos[t];
    const int32_t bs = b->cfg.block_size;
    const int32_t *bt = s->group_tables ? s->group_tables[L->kv_group] : s->block_table;
    const size_t blk = (size_t)bt[pos / bs];
    const size_t off = (size_t)(pos % bs);
    for (int h = 0; h < b->n_head_kv; h++) {
        const size_t slot =
            ((blk * (size_t)b->n_head_kv + (size_t)h) * (size_t)bs + off) * (size_t)b->hd;
        const float *kr = b->k + (size_t)t * (size_t)b->kv_dim + (size_t)h * (size_t)b->hd;
        const float *vr = b->v + (size_t)t * (size_t)b->kv_dim + (size_t)h * (size_t)b->hd;
        if (b->kv_esz == 2) {
            kc_f32_to_f16_row(kr, (uint16_t *)L->k_pool + slot, b->hd);
            kc_f32_to_f16_row(vr, (uint16_t *)L->v_pool + slot, b->hd);
        } else {
            memcpy((float *)L->k_pool + slot, kr, sizeof(float) * (size_t)b->hd);
            memcpy((float *)L->v_pool + slot, vr, sizeof(float) * (size_t)b->hd);
        }
    }
}

/*
 * MoE routing of token t, as llama.cpp's build_moe_ffn with softmax gating: the softmax of the
 * router's logits (in b->probs), the n_used most probable experts (highest first, the lower id
 * on a tie), their probabilities divided by their sum (norm_w; clamped below at f16's smallest
 * normal, as llama.cpp), or kept as they are (qwen2moe: expert_weights_raw).
 */
static void cpu_route(backend *b, int32_t t)
{
    float *p = b->probs + (int64_t)t * b->n_expert;
    int32_t *id = b->sel_id + (int64_t)t * b->n_used;
    float *w = b->sel_w + (int64_t)t * b->n_used;
    kc_softmax(p, b->n_expert);
    for (int j = 0; j < b->n_used; j++) {
        int best = -1;
        for (int e = 0; e < b->n_expert; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) {
                taken = id[i] == e;
            }
            if (!taken && (best < 0 || p[e] > p[best])) {
                best = e;
            }
        }
        id[j] = best;
        w[j] = p[best];
    }
    if (b->expert_weights_raw) {
        return;
    }
    float sum = 0.0f;
    for (int j = 0; j < b->n_used; j++) {
        sum += w[j];
    }
    sum = sum < 6.103515625e-5f ? 6.103515625e-5f : sum;
    for (int j = 0; j < b->n_used; j++) {
        w[j] /= sum;
    }
}

static void cpu_tok_one(const cpu_tok_task *tt, int32_t t)
{
    backend *b = tt->b;
    const int64_t E = b->n_embd;
    const float eps = b->m->cfg.rms_eps;
    const cpu_layer *L = tt->layer >= 0 ? &b->layers[tt->layer] : NULL;
    float *x = b->x + t * E;
    float *xn = b->xn + t * E;
    switch (tt->op) {
    case CPU_OP_EMBED:
        kc_embed_row(b->m->tok_embd->type, b->m->tok_embd->data, E, tt->batch->tokens[t], x);
        if (b->m->cfg.embd_scale != 0.0f) {
            const float sc = b->m->cfg.embd_scale;
            for (int64_t i = 0; i < E; i++) {
                x[i] *= sc;
            }
        }
        break;
    case CPU_OP_ATTN_NORM:
        kc_rmsnorm(x, L->attn_norm, xn, E, eps);
        break;
    case CPU_OP_QKV_POST: {
        float *q = b->q + (int64_t)t * b->q_dim;
        float *k = b->k + (int64_t)t * b->kv_dim;
        float *v = b->v + (int64_t)t * b->kv_dim;
        if (L->bq) {
            kc_add(q, L->bq, b->q_dim);
        }
        if (L->bk) {
            kc_add(k, L->bk, b->kv_dim);
        }
        if (L->bv) {
            kc_add(v, L->bv, b->kv_dim);
        }
        if (L->q_norm) {
            for (int h = 0; h < b->n_head; h++) {
                kc_rmsnorm(q + h * b->hd, L->q_norm, q + h * b->hd, b->hd, eps);
            }
        }
        if (L->k_norm) {
            for (int h = 0; h < b->n_head_kv; h++) {
                kc_rmsnorm(k + h * b->hd, L->k_norm, k + h * b->hd, b->hd, eps);
            }
        }
        if (b->n_rot > 0) {
            const model_config *c = &b->m->cfg;
            if (tt->layer == 0) {
                kc_rope_cache_yarn(b->rope + (int64_t)t * b->n_rot, b->n_rot, b->tok_pos[t],
                                   c->rope_base, b->rope_freq_scale, b->rope_freqs,
                                   b->rope_ext_factor, b->rope_attn_factor, b->rope_corr_dims);
                if (b->rope_swa) {
                    kc_rope_cache_yarn(b->rope_swa + (int64_t)t * b->n_rot, b->n_rot, b->tok_pos[t],
                                       c->rope_base_swa, b->rope_swa_freq_scale,
                                       c->rope_swa_scaled ? b->rope_freqs : NULL,
                                       b->rope_ext_factor, b->rope_attn_factor,
                                       b->rope_swa_corr_dims);
                }
            }
            const float *table = b->rope_swa && b->m->layers[tt->layer].swa ? b->rope_swa : b->rope;
            const float *cs = table + (int64_t)t * b->n_rot;
            kc_rope_apply(q, b->n_head, b->hd, b->n_rot, cs, b->m->cfg.rope_neox);
            kc_rope_apply(k, b->n_head_kv, b->hd, b->n_rot, cs, b->m->cfg.rope_neox);
        }
        cpu_store_kv(b, L, tt->batch, t);
        break;
    }
    case CPU_OP_FFN_NORM:
        if (L->attn_post_norm) {
            kc_rmsnorm(b->tmp + t * E, L->attn_post_norm, b->tmp + t * E, E, eps);
        }
        kc_add(x, b->tmp + t * E, E);
        kc_rmsnorm(x, L->ffn_norm, xn, E, eps);
        break;
    case CPU_OP_ACT: {
        float *g = b->gate + (int64_t)t * tt->width;
        const float *u = b->up + (int64_t)t * tt->width;
        if (b->m->cfg.ffn_act == MODEL_ACT_GELU_TANH) {
            kc_geglu(g, u, g, tt->width);
        } else {
            kc_swiglu(g, u, g, tt->width);
        }
        break;
    }
    case CPU_OP_ROUTE:
        cpu_route(b, t);
        break;
    case CPU_OP_RESIDUAL:
        if (L->ffn_post_norm) {
            kc_rmsnorm(b->tmp + t * E, L->ffn_post_norm, b->tmp + t * E, E, eps);
        }
        kc_add(x, b->tmp + t * E, E);
        break;
    case CPU_OP_OUT_NORM:
        kc_rmsnorm(x, b->out_norm, xn, E, eps);
        break;
    }
}

static void cpu_tok_worker(void *arg, int ith, int nth)
{
    const cpu_tok_task *tt = arg;
    const int32_t t0 = (int32_t)((int64_t)tt->n * ith / nth);
    const int32_t t1 = (int32_t)((int64_t)tt->n * (ith + 1) / nth);
    for (int32_t t = t0; t < t1; t++) {
        cpu_tok_one(tt, t);
    }
}

static void cpu_tok_run_w(backend *b, const fwd_batch *batch, cpu_tok_op op, int layer, int32_t n,
                          int64_t width)
{
    cpu_tok_task tt = {.b = b, .batch = batch, .op = op, .layer = layer, .n = n, .width = width};
    if (n >= 4) {
        kc_pool_run(b->pool, cpu_tok_worker, &tt);
    } else {
        cpu_tok_worker(&tt, 0, 1);
    }
}

static void cpu_tok_run(backend *b, const fwd_batch *batch, cpu_tok_op op, int layer, int32_t n)
{
    cpu_tok_run_w(b, batch, op, layer, n, 0);
}

static int cpu_mm(backend *b, const kc_weight *w, const float *x, int32_t n, float *y)
{
    return kc_matmul(b->pool, w, x, n, y, b->wsp, b->wsp_bytes);
}

/* Tensor parallelism: sums the rank's partial rows over the ranks (no-op on one rank). */
static int cpu_tp_sum(backend *b, float *y, int32_t n_rows)
{
    if (!b->tp) {
        return 0;
    }
    return b->tp->comm->ops->all_reduce_sum(b->tp->comm, b->tp->rank, y,
                                            (size_t)n_rows * (size_t)b->n_embd, NULL);
}

/* The final projection of n_rows rows of x into logits ([n_rows][n_vocab]); one rank of
 * several writes its own logits columns (through logits_local, max_seqs rows at a time). */
static int cpu_logits(backend *b, const float *x, int32_t n_rows, float *logits)
{
    const float cap = b->m->cfg.final_softcap;
    if (!b->tp) {
        int rc = cpu_mm(b, &b->output, x, n_rows, logits);
        if (rc == 0 && cap > 0.0f) {
            kc_softcap(logits, (int64_t)n_rows * b->n_vocab, cap);
        }
        return rc;
    }
    int rc = 0;
    for (int32_t r0 = 0; rc == 0 && r0 < n_rows; r0 += b->cfg.max_seqs) {
        const int32_t n = n_rows - r0 < b->cfg.max_seqs ? n_rows - r0 : b->cfg.max_seqs;
        rc = cpu_mm(b, &b->output, x + (int64_t)r0 * b->n_embd, n, b->logits_local);
        if (rc == 0 && cap > 0.0f) {
            kc_softcap(b->logits_local, (int64_t)n * b->n_out, cap);
        }
        for (int32_t r = 0; rc == 0 && r < n; r++) {
            memcpy(logits + (int64_t)(r0 + r) * b->n_vocab + b->tp->vocab_begin,
                   b->logits_local + (int64_t)r * b->n_out, sizeof(float) * (size_t)b->n_out);
        }
    }
    return rc;
}

/* LoRA deltas of up to three projections of layer l that read the same input (cpu_lora). */
typedef struct cpu_lora_task {
    backend *b;
    int l;
    int n_tg;
    lora_target tg[3];
    float *y[3]; /* n rows of each target's outputs */
    const float *x;
    int32_t n;
    int rc[CPU_LORA_MAX_THREADS];
} cpu_lora_task;

static void cpu_lora_worker(void *arg, int ith, int nth)
{
    cpu_lora_task *lt = arg;
    backend *b = lt->b;
    /* rows split over the threads; with fewer rows than threads (decode of one or two
     * sequences) every thread takes all rows and a share of each projection's outputs instead:
     * A x is small, B's rows are most of the work */
    const bool by_cols = lt->n < nth;
    const int32_t t0 = by_cols ? 0 : (int32_t)((int64_t)lt->n * ith / nth);
    const int32_t t1 = by_cols ? lt->n : (int32_t)((int64_t)lt->n * (ith + 1) / nth);
    const int64_t W = b->lora_width, R = b->cfg.max_lora_rank;
    void *wsp = (uint8_t *)b->lora_wsp + (size_t)ith * b->lora_wsp_bytes;
    float *xg = b->lora_x + (size_t)ith * CPU_LORA_CHUNK * (size_t)W;
    float *tv = b->lora_t + (size_t)ith * CPU_LORA_CHUNK * (size_t)R;
    float *d = b->lora_d + (size_t)ith * CPU_LORA_CHUNK * (size_t)W;
    int32_t *rows = b->lora_rows + (size_t)ith * CPU_LORA_CHUNK;
    uint8_t local[CPU_LORA_MAX_THREADS];
    uint8_t *done = by_cols ? local : b->lora_done;
    memset(done + t0, 0, (size_t)(t1 - t0));
    for (int32_t t = t0; t < t1; t++) {
        const lora_adapter *ad = b->row_lora[t];
        if (!ad || done[t]) {
            continue;
        }
        /* up to CPU_LORA_CHUNK of this thread's rows with this adapter, from t on */
        int32_t cnt = 0;
        for (int32_t j = t; j < t1 && cnt < CPU_LORA_CHUNK; j++) {
            if (b->row_lora[j] == ad && !done[j]) {
                done[j] = 1;
                rows[cnt++] = j;
            }
        }
        const bool contiguous = rows[cnt - 1] - rows[0] == cnt - 1;
        for (int i = 0; i < lt->n_tg; i++) {
            const lora_weights *w = &ad->layers[lt->l][lt->tg[i]];
            if (!w->a.data) {
                continue; /* this adapter leaves the projection alone */
            }
            const int64_t in = w->a.ne[0], r = w->a.ne[1], out = w->b.ne[1];
            /* a share of the outputs, split at multiples of 16 so that every output is computed
             * by the same vector lane position as in the whole row (kc_axpy's tails) */
            const int64_t o0 = by_cols ? out * ith / nth / 16 * 16 : 0;
            const int64_t o1 = by_cols && ith + 1 < nth ? out * (ith + 1) / nth / 16 * 16 : out;
            if (o1 <= o0) {
                continue;
            }
            const float *xs = lt->x + (int64_t)rows[0] * in;
            if (!contiguous) {
                for (int32_t k = 0; k < cnt; k++) {
                    memcpy(xg + (int64_t)k * in, lt->x + (int64_t)rows[k] * in,
                           sizeof(float) * (size_t)in);
                }
                xs = xg;
            }
            const kc_weight wa = {.type = w->a.type, .k = in, .m = r, .data = w->a.data};
            const int rc = kc_matmul(NULL, &wa, xs, cnt, tv, wsp, b->lora_wsp_bytes);
            if (rc != 0) {
                lt->rc[ith] = rc;
                return;
            }
            /* B (A x) as r axpys of B's transposed rows (lora_weights.bt), then y += scale d */
            for (int32_t k = 0; k < cnt; k++) {
                memset(d, 0, sizeof(float) * (size_t)(o1 - o0));
                for (int64_t j = 0; j < r; j++) {
                    if (w->bt_type == TD_F16) {
                        kc_axpy_f16(d, tv[k * r + j], (const uint16_t *)w->bt + j * out + o0,
                                    o1 - o0);
                    } else {
                        kc_axpy(d, tv[k * r + j], (const float *)w->bt + j * out + o0, o1 - o0);
                    }
                }
                kc_axpy(lt->y[i] + (int64_t)rows[k] * out + o0, w->scale, d, o1 - o0);
            }
        }
    }
}

/*
 * LoRA deltas of the projections tg[0..n_tg) of layer l, which all read x (n rows): each row
 * with an adapter gets y += scale * B (A x) (llama.cpp's build_lora_mm: the product scaled, then
 * added), in one dispatch: each thread takes its rows and multiplies those of one adapter
 * together, CPU_LORA_CHUNK at a time, on its own (kc_matmul without the pool). kc_matmul's values
 * do not depend on the row count, so a row's result depends on that row only, and batches mixing
 * adapters give every sequence what it gets alone.
 */
static int cpu_lora(backend *b, int l, const lora_target *tg, float *const *y, int n_tg,
                    const float *x, int32_t n)
{
    if (!b->any_lora) {
        return 0;
    }
    cpu_lora_task lt = {.b = b, .l = l, .n_tg = n_tg, .x = x, .n = n};
    for (int i = 0; i < n_tg; i++) {
        lt.tg[i] = tg[i];
        lt.y[i] = y[i];
    }
    kc_pool_run(b->pool, cpu_lora_worker, &lt);
    for (int i = 0; i < CPU_LORA_MAX_THREADS; i++) {
        if (lt.rc[i] != 0) {
            return lt.rc[i];
        }
    }
    return 0;
}

static int cpu_lora1(backend *b, int l, lora_target tg, float *y, const float *x, int32_t n)
{
    return cpu_lora(b, l, &tg, &y, 1, x, n);
}

/* One gated feed-forward of layer l's activation (model_config.ffn_act) over n rows of x:
 * out = down(act(gate(x)) * up(x)), `width` hidden units, through b->gate / b->up. */
static int cpu_glu(backend *b, const fwd_batch *batch, int l, const kc_weight *gate,
                   const kc_weight *up, const kc_weight *down, int64_t width, const float *x,
                   int32_t n, float *out, bool lora)
{
    const kc_weight *gu_w[2] = {gate, up};
    float *const gu_y[2] = {b->gate, b->up};
    int rc = kc_matmul_multi(b->pool, gu_w, gu_y, 2, x, n, b->wsp, b->wsp_bytes);
    if (rc == 0 && lora) {
        const lora_target tg[2] = {LORA_GATE, LORA_UP};
        rc = cpu_lora(b, l, tg, gu_y, 2, x, n);
    }
    if (rc != 0) {
        return rc;
    }
    cpu_tok_run_w(b, batch, CPU_OP_ACT, l, n, width);
    rc = cpu_mm(b, down, b->gate, n, out);
    return rc == 0 && lora ? cpu_lora1(b, l, LORA_DOWN, out, b->gate, n) : rc;
}

static int cpu_ffn(backend *b, const fwd_batch *batch, int l, int32_t n_rows)
{
    const cpu_layer *L = &b->layers[l];
    return cpu_glu(b, batch, l, &L->gate, &L->up, &L->down, b->n_ff, b->xn, n_rows, b->tmp, true);
}

/* qwen2moe's shared expert, added to every token's routed experts in b->tmp: a SwiGLU of
 * hidden size n_ff_shexp scaled by sigmoid(ffn_gate_inp_shexp . x), as llama.cpp's qwen2moe
 * graph (which forms the sigmoid as silu(g) / g). */
static int cpu_shared_expert(backend *b, const fwd_batch *batch, int l, int32_t n_rows)
{
    const cpu_layer *L = &b->layers[l];
    const int64_t E = b->n_embd;
    int rc = cpu_mm(b, &L->sh_inp, b->xn, n_rows, b->sh_g);
    rc = rc ? rc
            : cpu_glu(b, batch, l, &L->sh_gate, &L->sh_up, &L->sh_down, b->n_ff_shexp, b->xn,
                      n_rows, b->xg, false);
    if (rc != 0) {
        return rc;
    }
    for (int32_t t = 0; t < n_rows; t++) {
        const float g = 1.0f / (1.0f + expf(-b->sh_g[t]));
        float *y = b->tmp + (int64_t)t * E;
        const float *xe = b->xg + (int64_t)t * E;
        for (int64_t d = 0; d < E; d++) {
            y[d] += g * xe[d];
        }
    }
    return 0;
}

/*
 * The MoE feed-forward of layer l: route every token (cpu_route), then expert by expert run
 * the SwiGLU on the rows routed to it (gathered in token order) and add each row's output times
 * its weight into tmp. A token's experts are summed in expert-id order, whatever the batch, so
 * its result does not depend on the other tokens. qwen2moe then adds its shared expert.
 */
static int cpu_moe(backend *b, const fwd_batch *batch, int l, int32_t n_rows)
{
    const cpu_layer *L = &b->layers[l];
    const int64_t E = b->n_embd;
    const int64_t T =
        b->cfg.max_batch_tokens > b->cfg.max_seqs ? b->cfg.max_batch_tokens : b->cfg.max_seqs;
    int rc = cpu_mm(b, &L->router, b->xn, n_rows, b->probs);
    if (rc != 0) {
        return rc;
    }
    cpu_tok_run(b, batch, CPU_OP_ROUTE, l, n_rows);
    memset(b->e_count, 0, sizeof(int32_t) * (size_t)b->n_expert);
    for (int32_t t = 0; t < n_rows; t++) {
        for (int j = 0; j < b->n_used; j++) {
            const int32_t e = b->sel_id[(int64_t)t * b->n_used + j];
            b->e_rows[(int64_t)e * T + b->e_count[e]++] = t * b->n_used + j;
        }
    }
    memset(b->tmp, 0, sizeof(float) * (size_t)n_rows * (size_t)E);
    for (int e = 0; e < b->n_expert; e++) {
        const int32_t n = b->e_count[e];
        const int32_t *rows = b->e_rows + (int64_t)e * T;
        if (n == 0) {
            continue;
        }
        for (int32_t i = 0; i < n; i++) {
            memcpy(b->xg + (int64_t)i * E, b->xn + (int64_t)(rows[i] / b->n_used) * E,
                   sizeof(float) * (size_t)E);
        }
        rc = cpu_glu(b, batch, l, &L->e_gate[e], &L->e_up[e], &L->e_down[e], b->n_ff_exp, b->xg, n,
                     b->xg, false);
        if (rc != 0) {
            return rc;
        }
        for (int32_t i = 0; i < n; i++) {
            float *y = b->tmp + (int64_t)(rows[i] / b->n_used) * E;
            const float w = b->sel_w[rows[i]];
            const float *xe = b->xg + (int64_t)i * E;
            for (int64_t d = 0; d < E; d++) {
                y[d] += w * xe[d];
            }
        }
    }
    return b->n_ff_shexp > 0 ? cpu_shared_expert(b, batch, l, n_rows) : 0;
}

/* Rows of a sequence kept past the last attention (cpu_forward's out_rows, in batch order):
 * all of them when it sums hidden states or wants every row's logits, else its last one when
 * that makes logits or is pooled. */
static int32_t cpu_kept_rows(const fwd_seq *s)
{
    if (s->pool == FWD_POOL_SUM || s->all_logits) {
        return s->n_new;
    }
    return s->want_logits || s->pool == FWD_POOL_LAST ? 1 : 0;
}

/* After the final norm, xn holds the kept rows: runs the LM head over the rows of the
 * sequences that want every row's logits (in place, before anything moves), writes the pooled
 * hidden states, then gathers the rows that make logits to the front and runs the LM head over
 * them. */
static int cpu_outputs(backend *b, const fwd_batch *batch, int32_t n_rows)
{
    const int64_t E = b->n_embd;
    int32_t row = 0, n_pooled = 0, n_logit = 0;
    int64_t n_all = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        if (s->all_logits) {
            int rc = cpu_logits(b, b->xn + (int64_t)row * E, s->n_new,
                                batch->row_logits + n_all * b->n_vocab);
            if (rc != 0) {
                return rc;
            }
            n_all += s->n_new;
        }
        row += cpu_kept_rows(s);
    }
    row = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        const int32_t rows = cpu_kept_rows(s);
        if (rows == 0) {
            continue;
        }
        const int32_t last = row + rows - 1;
        if (s->pool != FWD_POOL_NONE) {
            float *h = batch->hidden + (int64_t)n_pooled++ * E;
            memcpy(h, b->xn + (int64_t)last * E, sizeof(float) * (size_t)E);
            for (int32_t r = row; s->pool == FWD_POOL_SUM && r < last; r++) {
                kc_add(h, b->xn + (int64_t)r * E, E);
            }
        }
        if (s->want_logits) {
            if (n_logit != last) { /* n_logit <= last: moving rows down never overwrites one */
                memmove(b->xn + (int64_t)n_logit * E, b->xn + (int64_t)last * E,
                        sizeof(float) * (size_t)E);
            }
            n_logit++;
        }
        row += rows;
    }
    TANDEM_ASSERT(row == n_rows);
    return n_logit > 0 ? cpu_logits(b, b->xn, n_logit, batch->logits) : 0;
}

static int cpu_check_batch(const backend *b, const fwd_batch *batch)
{
    return backend_check_batch(&b->cfg, b->n_vocab, b->n_layer, batch);
}

static int cpu_forward(backend *b, const fwd_batch *batch)
{
    int rc = cpu_check_batch(b, batch);
    if (rc != 0) {
        return rc;
    }
    const int32_t T = batch->n_tokens;
    const int64_t E = b->n_embd;
    int32_t n_out = 0;
    int32_t t = 0;
    b->any_lora = false;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        b->any_lora |= s->lora != NULL;
        b->aseq[i] = (kc_attn_seq){.n_new = s->n_new,
                                   .start_pos = s->start_pos,
                                   .block_table = s->block_table,
                                   .q = b->q + (int64_t)t * b->q_dim,
                                   .out = b->att + (int64_t)t * b->q_dim};
        for (int32_t j = 0; j < s->n_new; j++, t++) {
            b->tok_pos[t] = s->start_pos + j;
            b->tok_seq[t] = i;
            if (b->row_lora) {
                b->row_lora[t] = s->lora;
            }
            /* rows kept past the last attention (cpu_kept_rows), in batch order */
            if (j >= s->n_new - cpu_kept_rows(s)) {
                b->out_rows[n_out++] = t;
            }
        }
    }
    cpu_tok_run(b, batch, CPU_OP_EMBED, -1, T);
    const model_config *c = &b->m->cfg;
    int32_t n_rows = T;
    for (int l = 0; l < b->n_layer; l++) {
        const cpu_layer *L = &b->layers[l];
        cpu_tok_run(b, batch, CPU_OP_ATTN_NORM, l, T);
        const kc_weight *qkv_w[3] = {&L->wq, &L->wk, &L->wv};
        float *const qkv_y[3] = {b->q, b->k, b->v};
        static const lora_target qkv_tg[3] = {LORA_Q, LORA_K, LORA_V};
        if ((rc = kc_matmul_multi(b->pool, qkv_w, qkv_y, 3, b->xn, T, b->wsp, b->wsp_bytes)) != 0 ||
            (rc = cpu_lora(b, l, qkv_tg, qkv_y, 3, b->xn, T)) != 0) {
            return rc;
        }
        cpu_tok_run(b, batch, CPU_OP_QKV_POST, l, T);
        for (int32_t i = 0; b->slot_k && i < batch->n_seqs; i++) {
            b->aseq[i].block_table = batch->seqs[i].group_tables[L->kv_group];
        }
        kc_paged_kv kv = {.k = L->k_pool,
                          .v = L->v_pool,
                          .f16 = b->kv_esz == 2,
                          .block_size = b->cfg.block_size,
                          .n_head_kv = b->n_head_kv,
                          .head_dim = b->hd};
        const kc_attn_params ap = {.scale = b->attn_scale,
                                   .softcap = c->attn_softcap,
                                   .window = b->m->layers[l].swa ? c->n_swa : 0};
        rc = kc_attention_ex(b->pool, &kv, b->n_head, b->aseq, batch->n_seqs, b->q_dim, b->q_dim,
                             &ap);
        if (rc != 0) {
            return rc;
        }
        if (l == b->n_layer - 1) {
            /* only the rows that produce logits matter past the last attention */
            if (n_out == 0) {
                return 0;
            }
            for (int32_t j = 0; j < n_out; j++) {
                int32_t r = b->out_rows[j];
                memmove(b->att + (int64_t)j * b->q_dim, b->att + (int64_t)r * b->q_dim,
                        sizeof(float) * (size_t)b->q_dim);
                memmove(b->x + j * E, b->x + (int64_t)r * E, sizeof(float) * (size_t)E);
                if (b->row_lora) {
                    b->row_lora[j] = b->row_lora[r];
                }
            }
            n_rows = n_out;
        }
        if ((rc = cpu_mm(b, &L->wo, b->att, n_rows, b->tmp)) != 0 ||
            (rc = cpu_lora1(b, l, LORA_O, b->tmp, b->att, n_rows)) != 0 ||
            (rc = cpu_tp_sum(b, b->tmp, n_rows)) != 0) {
            return rc;
        }
        cpu_tok_run(b, batch, CPU_OP_FFN_NORM, l, n_rows);
        rc = b->n_expert > 0 ? cpu_moe(b, batch, l, n_rows) : cpu_ffn(b, batch, l, n_rows);
        if (rc != 0 || (rc = cpu_tp_sum(b, b->tmp, n_rows)) != 0) {
            return rc;
        }
        cpu_tok_run(b, batch, CPU_OP_RESIDUAL, l, n_rows);
    }
    cpu_tok_run(b, batch, CPU_OP_OUT_NORM, -1, n_rows);
    return cpu_outputs(b, batch, n_rows);
}

static void *cpu_kv_pool(backend *b, int layer, int kv, size_t *bytes)
{
    if (layer < 0 || layer >= b->n_layer || (kv != 0 && kv != 1)) {
        if (bytes) {
            *bytes = 0;
        }
        return NULL;
    }
    if (bytes) {
        *bytes = b->pool_bytes;
    }
    return kv == 0 ? b->layers[layer].k_pool : b->layers[layer].v_pool;
}

static int cpu_kv_adopt(backend *b, int layer, int kv, void *mem, size_t bytes)
{
    if (layer < 0 || layer >= b->n_layer || (kv != 0 && kv != 1) || !mem ||
        bytes != b->pool_bytes || (uintptr_t)mem % CPU_ALIGN != 0 || b->slot_k) {
        return -EINVAL; /* with KV cache groups, layers share pools: nothing to adopt per layer */
    }
    cpu_layer *L = &b->layers[layer];
    void **pool = kv == 0 ? &L->k_pool : &L->v_pool;
    bool *external = kv == 0 ? &L->k_external : &L->v_external;
    if (!*external) {
        free(*pool);
    }
    *pool = mem;
    *external = true;
    return 0;
}

static tp_comm *cpu_tp_comm_new(int size, char *err, size_t errlen)
{
    tp_comm *c = tp_comm_host_new(size);
    if (!c) {
        tandem_set_err(err, errlen, "cpu backend: out of memory for the tensor-parallel group");
    }
    return c;
}

const backend_ops cpu_backend_ops = {
    .name = "cpu",
    .pooling = true,
    .lora = true,
    .all_logits = true,
    .kv_groups = true,
    .kv_block_bytes = cpu_kv_block_bytes,
    .create = cpu_create,
    .forward = cpu_forward,
    .kv_pool = cpu_kv_pool,
    .kv_adopt = cpu_kv_adopt,
    .destroy = cpu_destroy,
    .tp_comm_new = cpu_tp_comm_new,
};
