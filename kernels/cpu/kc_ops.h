/*
 * Element-wise and per-row kernels of a transformer forward pass (RMSNorm, RoPE, SwiGLU, softmax,
 * residual add, embedding fetch) and paged attention over the KV layout of engine/core/batch.h.
 * Buffers are caller-owned; functions keep no state and are thread-safe on disjoint outputs.
 */
#ifndef TANDEM_KERNELS_CPU_KC_OPS_H
#define TANDEM_KERNELS_CPU_KC_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/kc_pool.h"
#include "kernels/dtype.h"

#define KC_ATTN_MAX_BLOCK    256 /* largest supported KV block size (tokens) */
#define KC_ATTN_MAX_HEAD_DIM 512 /* largest supported head dimension */

/* y = x / sqrt(mean(x^2) + eps) * w (w NULL: no weight); sum of squares in double as ggml.
 * y may equal x. */
void kc_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

/* cos/sin table of one position: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i) for
 * i < n_rot / 2, theta_i = pos * base^(-2i / n_rot) (computed as ggml does: theta *= scale). */
void kc_rope_cache(float *cs, int n_rot, int32_t pos, float base);

/* The same with RoPE scaling, as ggml's rope with freq_factors and no YaRN mixing: the angle of
 * pair i is freq_scale * (theta_i / freq_factors[i]). freq_scale is 1 / factor for linear
 * scaling (else 1); freq_factors (n_rot / 2 divisors, NULL: all 1) are Llama 3's rope_freqs.
 * Bit for bit kc_rope_cache_yarn with ext_factor 0 and attn_factor 1. */
void kc_rope_cache_ext(float *cs, int n_rot, int32_t pos, float base, float freq_scale,
                       const float *freq_factors);

/* YaRN's ramp ends, ggml_rope_yarn_corr_dims: corr_dim(beta) = n_rot * ln(n_ctx_orig / (beta *
 * 2 pi)) / (2 ln base) is the pair index whose angle turns beta times over n_ctx_orig
 * positions; in float as ggml, dims[0] = max(0, floor(corr_dim(beta_fast))) and dims[1] =
 * min(n_rot - 1, ceil(corr_dim(beta_slow))). */
void kc_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2]);

/* kc_rope_cache_ext with ggml's YaRN (rope_yarn in ggml-cpu's ops.cpp, the same float
 * operations in the same order): theta_extrap = theta_i / freq_factors[i], theta_interp =
 * freq_scale * theta_extrap, ramp_mix = (1 - clamp((i - corr_dims[0]) / max(0.001,
 * corr_dims[1] - corr_dims[0]), 0, 1)) * ext_factor, angle = theta_interp * (1 - ramp_mix) +
 * theta_extrap * ramp_mix; cos and sin are multiplied by attn_factor, and with ext_factor != 0 by
 * 1 + 0.1 ln(1 / freq_scale) too. corr_dims (2 floats) is read only with ext_factor != 0. */
void kc_rope_cache_yarn(float *cs, int n_rot, int32_t pos, float base, float freq_scale,
                        const float *freq_factors, float ext_factor, float attn_factor,
                        const float *corr_dims);

/* Rotates the first n_rot dims of each of n_heads heads (head_dim apart) in place; the rest of
 * each head is unchanged. neox false: pairs (x[2i], x[2i+1]); true: (x[i], x[i + n_rot/2]). */
void kc_rope_apply(float *x, int n_heads, int head_dim, int n_rot, const float *cs, bool neox);

/* y[i] = silu(gate[i]) * up[i]; y may equal gate or up. */
void kc_swiglu(const float *gate, const float *up, float *y, int64_t n);

/* y[i] = gelu(gate[i]) * up[i] (GeGLU), gelu's tanh approximation in float; y may equal gate
 * or up. */
void kc_geglu(const float *gate, const float *up, float *y, int64_t n);

/* Soft-capping in place: x[i] = cap * tanh(x[i] / cap), cap > 0. */
void kc_softcap(float *x, int64_t n, float cap);

/* In-place numerically stable softmax of n values. */
void kc_softmax(float *x, int64_t n);

/* y[i] += x[i]. */
void kc_add(float *y, const float *x, int64_t n);
/* y += s * x over n elements of x (f32, or IEEE halves for kc_axpy_f16), vectorised at the
 * active ISA level. */
void kc_axpy(float *y, float s, const float *x, int64_t n);
void kc_axpy_f16(float *y, float s, const uint16_t *x, int64_t n);

/* Row `row` of a weight matrix with rows of k elements of `type` at data, as floats into out.
 * 0, or -EINVAL for an unsupported type or a k that is not a whole number of blocks. */
int kc_embed_row(tdtype type, const void *data, int64_t k, int64_t row, float *out);

/* One layer's paged KV pools (engine/core/batch.h layout). */
typedef struct kc_paged_kv {
    const void *k;      /* [num_blocks][n_head_kv][block_size][head_dim] */
    const void *v;      /* same */
    bool f16;           /* elements are f16 (else f32) */
    int32_t block_size; /* 1..KC_ATTN_MAX_BLOCK */
    int32_t n_head_kv;
    int32_t head_dim; /* 1..KC_ATTN_MAX_HEAD_DIM */
} kc_paged_kv;

/* One sequence's queries: n_new tokens at positions start_pos.., their KV already stored. */
typedef struct kc_attn_seq {
    int32_t n_new;
    int32_t start_pos;
    const int32_t *block_table; /* covers [0, start_pos + n_new) */
    const float *q;             /* token i head h at q + i * q_stride + h * head_dim */
    float *out;                 /* token i head h at out + i * o_stride + h * head_dim */
} kc_attn_seq;

/*
 * Causal attention of every query token over its sequence's cached keys [0, pos]:
 * out = softmax(q.k * scale) . v, query head h reading KV head h / (n_head / n_head_kv).
 * Online softmax per (sequence, head, token), spread over the pool's threads (pool NULL: the
 * caller alone); each output depends only on its own query and the cache. 0, or -EINVAL for
 * unsupported sizes (n_head not a multiple of n_head_kv, block or head size out of range).
 */
int kc_attention(kc_pool *pool, const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs,
                 int n_seqs, int64_t q_stride, int64_t o_stride, float scale);

/* What kc_attention_ex adds: scores s = scale * q.k are soft-capped to softcap * tanh(s /
 * softcap) when softcap > 0 (gemma2), and with window > 0 a query at position p sees only the
 * keys at p - window < k <= p (sliding-window attention; the blocks wholly before the window
 * are not read, so their block-table entries may be stale). */
typedef struct kc_attn_params {
    float scale;
    float softcap;  /* 0: none */
    int32_t window; /* 0: all keys */
} kc_attn_params;

int kc_attention_ex(kc_pool *pool, const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs,
                    int n_seqs, int64_t q_stride, int64_t o_stride, const kc_attn_params *p);

#endif
