/*
 * The per-element and per-row arithmetic of the token-wise and attention kernels (kcu_ops.cu,
 * kcu_attention.cu), as KCU_HD functions: the GPU kernels and the plain-C host tests call the
 * same code, so the host tests execute what the GPU computes.
 *
 * Rounding rules, so host and device agree bit for bit wherever the libm calls do:
 *   - every multiply-add is an explicit fmaf() and every product that must not fuse into a
 *     following add goes through kcu_mul_rn() (__fmul_rn on the device, which nvcc never
 *     contracts); plain `a * b + c` is avoided;
 *   - reductions over threads use one fixed order: each thread accumulates its strided
 *     elements in index order, then a warp adds with the xor butterfly (offsets 16, 8, 4, 2, 1;
 *     lane l takes v[l] + v[l ^ off]), then warp 0 does the same over the per-warp sums padded
 *     with zeros. kcu_warp_sum_emul and kcu_tree_sum replay that order on the host.
 *   - expf/sinf/cosf/powf are the only calls that may differ (CUDA's are within 2 ulp of the
 *     correctly rounded value); RoPE's theta_scale and YaRN's magnitude are therefore
 *     computed on the host (kcu_rope_theta_scale, kcu_rope_yarn_mscale, called by kcu_rope
 *     before the launch) exactly as kc_rope_cache_yarn.
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_MATH_H
#define TANDEM_KERNELS_CUDA_KCU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/kcu_hd.h"

#define KCU_WARP 32

/* ---- bits and rounding ---- */

KCU_HD float kcu_bits_f32(uint32_t w)
{
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

KCU_HD uint32_t kcu_f32_bits(float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof(w));
    return w;
}

/* a * b rounded on its own (never fused with a later add). */
KCU_HD float kcu_mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* ---- conversions: the bit-level algorithms of kc_convert.c ---- */

KCU_HD float kcu_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = kcu_mul_rn(kcu_bits_f32((two_w >> 4) + exp_offset), 0x1.0p-112f);
    const float denormalized = kcu_bits_f32((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
    const uint32_t result = sign | (two_w < (UINT32_C(1) << 27) ? kcu_f32_bits(denormalized)
                                                                : kcu_f32_bits(normalized));
    return kcu_bits_f32(result);
}

KCU_HD uint16_t kcu_f32_to_f16(float f)
{
    float base = kcu_mul_rn(kcu_mul_rn(fabsf(f), 0x1.0p+112f), 0x1.0p-110f);
    const uint32_t w = kcu_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) {
        bias = UINT32_C(0x71000000);
    }
    base = kcu_bits_f32((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = kcu_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

KCU_HD float kcu_bf16_to_f32(uint16_t h)
{
    return kcu_bits_f32((uint32_t)h << 16);
}

KCU_HD uint16_t kcu_f32_to_bf16(float f)
{
    const uint32_t u = kcu_f32_bits(f);
    if ((u & UINT32_C(0x7fffffff)) > UINT32_C(0x7f800000)) {
        return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    }
    return (uint16_t)((u + (UINT32_C(0x7fff) + ((u >> 16) & 1))) >> 16);
}

/* ---- activations ---- */

/* silu(g) = g / (1 + e^-g), as kc_swiglu. */
KCU_HD float kcu_silu(float g)
{
    return g / (1.0f + expf(-g));
}

KCU_HD float kcu_swiglu_elem(float gate, float up)
{
    return kcu_mul_rn(kcu_silu(gate), up);
}

/* ---- RoPE ---- */

/* base^(-2 / n_rot), kc_rope_cache's theta_scale (host side: powf differs on the device). */
KCU_HD float kcu_rope_theta_scale(float base, int n_rot)
{
    return powf(base, -2.0f / (float)n_rot);
}

/* Angle of pair i at position pos: (float)pos multiplied i times by theta_scale, the product
 * sequence kc_rope_cache runs, so the angles are identical. */
KCU_HD float kcu_rope_theta(int32_t pos, float theta_scale, int i)
{
    float theta = (float)pos;
    for (int k = 0; k < i; k++) {
        theta = kcu_mul_rn(theta, theta_scale);
    }
    return theta;
}

/* RoPE scaling of pair i's angle theta as kc_rope_cache_yarn (ggml's rope_yarn):
 * theta_extrap = theta / ff[i] (ff NULL: no factors), theta_interp = freq_scale *
 * theta_extrap; with ext_factor != 0 YaRN's ramp mixes them, ramp_mix = (1 - clamp((i - lo) /
 * span, 0, 1)) * ext_factor with lo = corr_dims[0] and span = kcu_rope_yarn_span(corr_dims). */
KCU_HD float kcu_rope_yarn(float theta, float freq_scale, const float *ff, int i, float ext_factor,
                           float lo, float span)
{
    const float extrap = theta / (ff ? ff[i] : 1.0f);
    const float interp = kcu_mul_rn(freq_scale, extrap);
    if (ext_factor == 0.0f) {
        return interp;
    }
    const float y = ((float)i - lo) / span;
    const float ramp_mix = kcu_mul_rn(1.0f - fminf(1.0f, fmaxf(0.0f, y)), ext_factor);
    return kcu_mul_rn(interp, 1.0f - ramp_mix) + kcu_mul_rn(extrap, ramp_mix);
}

/* The ramp's width, max(0.001, corr_dims[1] - corr_dims[0]) (ggml's rope_yarn_ramp). */
KCU_HD float kcu_rope_yarn_span(float lo, float hi)
{
    return fmaxf(0.001f, hi - lo);
}

/* The multiplier of cos and sin, kc_rope_cache_yarn's: attn_factor, and with ext_factor != 0
 * times YaRN's 1 + 0.1 ln(1 / freq_scale) (host side: logf differs on the device). */
KCU_HD float kcu_rope_yarn_mscale(float attn_factor, float freq_scale, float ext_factor)
{
    if (ext_factor == 0.0f) {
        return attn_factor;
    }
    return kcu_mul_rn(attn_factor, 1.0f + kcu_mul_rn(0.1f, logf(1.0f / freq_scale)));
}

/* Rotates one pair by the angle whose cosine and sine are c and s (kc_rope_apply). */
KCU_HD void kcu_rope_pair(float *x0, float *x1, float c, float s)
{
    const float a = *x0;
    const float b = *x1;
    *x0 = kcu_mul_rn(a, c) - kcu_mul_rn(b, s);
    *x1 = kcu_mul_rn(a, s) + kcu_mul_rn(b, c);
}

/* Indices of pair i of a head: neox (i, i + n_rot/2), else (2i, 2i + 1). */
KCU_HD void kcu_rope_index(int i, int n_rot, int neox, int *i0, int *i1)
{
    *i0 = neox ? i : 2 * i;
    *i1 = neox ? i + n_rot / 2 : 2 * i + 1;
}

/* ---- RMSNorm ---- */

#define KCU_NORM_THREADS 256 /* threads per row of kcu_rmsnorm (kcu_tree_sum's n) */

/* One step of a thread's sum of squares. */
KCU_HD float kcu_sumsq_step(float acc, float x)
{
    return fmaf(x, x, acc);
}

/* 1 / sqrt(sumsq / n + eps): the factor every element of the row is multiplied by. */
KCU_HD float kcu_rms_scale(float sumsq, int64_t n, float eps)
{
    const float mean = sumsq / (float)n;
    return 1.0f / sqrtf(mean + eps);
}

/* y = x * scale * w (w: the weight, 1 when there is none). */
KCU_HD float kcu_rms_apply(float x, float scale, float w)
{
    return kcu_mul_rn(kcu_mul_rn(x, scale), w);
}

/* ---- dot products (attention scores) ---- */

/* One step of a lane's partial dot product. */
KCU_HD float kcu_dot_step(float acc, float q, float k)
{
    return fmaf(q, k, acc);
}

/* ---- online softmax ----
 * State of one query: running max m and sum l; the accumulator (one float per output dim) is
 * held by the caller. Keys come in tiles: kcu_os_rescale with the tile's largest score, every
 * accumulator multiplied by the factor it returns, then per key p = kcu_os_weight(score, m),
 * l += p and acc = kcu_os_axpy(acc, p, v). Partial states of disjoint key ranges merge with
 * kcu_os_merge / kcu_os_merge_acc; kcu_os_out finishes. */

typedef struct kcu_os {
    float m; /* largest score so far (-inf: none) */
    float l; /* sum of e^(score - m) */
} kcu_os;

KCU_HD kcu_os kcu_os_init(void)
{
    kcu_os st;
    st.m = -INFINITY;
    st.l = 0.0f;
    return st;
}

/* New tile with largest score tile_max: the factor the accumulators are multiplied by (1 when
 * the maximum does not move; 0 on the first tile). Scales l itself. */
KCU_HD float kcu_os_rescale(kcu_os *st, float tile_max)
{
    if (!(tile_max > st->m)) {
        return 1.0f;
    }
    const float corr = expf(st->m - tile_max);
    st->l = kcu_mul_rn(st->l, corr);
    st->m = tile_max;
    return corr;
}

KCU_HD float kcu_os_weight(float score, float m)
{
    return expf(score - m);
}

KCU_HD float kcu_os_axpy(float acc, float p, float v)
{
    return fmaf(p, v, acc);
}

/* Merges partial state b into *a; *ca and *cb are the factors of a's and b's accumulators
 * (kcu_os_merge_acc). An empty state (m = -inf) contributes nothing. */
KCU_HD void kcu_os_merge(kcu_os *a, kcu_os b, float *ca, float *cb)
{
    const float m = fmaxf(a->m, b.m);
    if (m == -INFINITY) {
        *ca = 1.0f;
        *cb = 0.0f;
        return;
    }
    *ca = a->m == -INFINITY ? 0.0f : expf(a->m - m);
    *cb = b.m == -INFINITY ? 0.0f : expf(b.m - m);
    a->l = fmaf(b.l, *cb, kcu_mul_rn(a->l, *ca));
    a->m = m;
}

KCU_HD float kcu_os_merge_acc(float acc_a, float ca, float acc_b, float cb)
{
    return fmaf(acc_b, cb, kcu_mul_rn(acc_a, ca));
}

/* Output element from an accumulator: acc / l as acc * (1 / l) (kc_attention); 0 for no keys. */
KCU_HD float kcu_os_out(float acc, float l)
{
    return l > 0.0f ? kcu_mul_rn(acc, 1.0f / l) : 0.0f;
}

/* ---- split-K of the decode attention ---- */

#define KCU_ATTN_SPLIT_TOKENS 512 /* keys per split (rounded to whole KV blocks) */

/* KV blocks (block-table entries) one split covers. */
KCU_HD int kcu_attn_split_blocks(int block_size)
{
    const int b = KCU_ATTN_SPLIT_TOKENS / block_size;
    return b < 1 ? 1 : b;
}

/* Splits for contexts of up to max_ctx keys (1: no split). */
KCU_HD int kcu_attn_n_splits(int32_t max_ctx, int block_size)
{
    const int32_t blocks = (max_ctx + block_size - 1) / block_size;
    const int per = kcu_attn_split_blocks(block_size);
    const int32_t n = (blocks + per - 1) / per;
    return n < 1 ? 1 : (int)n;
}

/* ---- host emulation of the cooperative reductions ---- */

#ifndef __CUDA_ARCH__
/* The warp's xor-butterfly sum of v[0..31], in the order the shuffles add. */
static inline float kcu_warp_sum_emul(const float *v)
{
    float a[KCU_WARP];
    float b[KCU_WARP];
    memcpy(a, v, sizeof(a));
    for (int off = KCU_WARP / 2; off > 0; off >>= 1) {
        for (int l = 0; l < KCU_WARP; l++) {
            b[l] = a[l] + a[l ^ off];
        }
        memcpy(a, b, sizeof(a));
    }
    return a[0];
}

/* A block's sum of one value per thread (n threads, a multiple of 32, at most 1024): the warp
 * sums, then warp 0's sum of them padded with zeros (kcu_block_sum in kcu_reduce.cuh). */
static inline float kcu_tree_sum(const float *v, int n)
{
    float w[KCU_WARP] = {0};
    for (int i = 0; i < n / KCU_WARP; i++) {
        w[i] = kcu_warp_sum_emul(v + (size_t)i * KCU_WARP);
    }
    return kcu_warp_sum_emul(w);
}

/* A warp's dot product of q and k (n elements): lane l sums elements l, l + 32, ... with
 * kcu_dot_step, then the xor butterfly (the attention kernels' score). */
static inline float kcu_warp_dot_emul(const float *q, const float *k, int n)
{
    float lane[KCU_WARP];
    for (int l = 0; l < KCU_WARP; l++) {
        float acc = 0.0f;
        for (int d = l; d < n; d += KCU_WARP) {
            acc = kcu_dot_step(acc, q[d], k[d]);
        }
        lane[l] = acc;
    }
    return kcu_warp_sum_emul(lane);
}
#endif

#endif
