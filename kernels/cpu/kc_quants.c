/*
 * The block-quantized types beyond conversions: dequantization of every weight type, ggml's
 * activation quantizers for the legacy types with a minimum (Q8_1) and the K-quants (Q8_K), and
 * the scalar dot products of each weight type with its activation type (kc__vec_dot_ref).
 *
 * The dot products sum integer products per block or sub-block exactly (int32) and apply the
 * float scales per block, as ggml's do, so on the same quantized activations they agree with
 * ggml to float rounding of the per-block sums; the SIMD kernels follow the same structure.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_internal.h"

/* ---- scale decoding ---- */

/* Q4_K / Q5_K: the 8 six-bit scales and mins of a super-block (ggml's get_scale_min_k4). */
void kc__k4_scales(const uint8_t q[12], uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = q[j] & 63;
            mn[j] = q[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
            mn[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}

/* Q3_K: the 16 six-bit scales of a super-block, minus 32. */
void kc__q3k_scales(const uint8_t q[12], int8_t sc[16])
{
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? q[j] & 0xF : q[j - 8] >> 4;
        const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* IQ4_XS: the scale of sub-block ib (0..7), minus 32. */
static inline int kc_iq4xs_scale(const td_block_iq4_xs *b, int ib)
{
    const int lo = (b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    const int hi = (b->scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

static inline uint32_t kc_le32(const uint8_t b[4])
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* ---- integer quants of one block, in element order ---- */

/* The 32 integer quants of a legacy block (with Q4_0's -8 and Q5_0's -16 applied; Q4_1/Q5_1
 * unsigned, IQ4_NL through the codebook). */
void kc__legacy_quants(tdtype t, const void *blk, int8_t q[TD_QK])
{
    switch (t) {
    case TD_Q4_0: {
        const td_block_q4_0 *b = blk;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((b->qs[j] & 0xF) - 8);
            q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
        }
        return;
    }
    case TD_Q4_1: {
        const td_block_q4_1 *b = blk;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(b->qs[j] & 0xF);
            q[j + 16] = (int8_t)(b->qs[j] >> 4);
        }
        return;
    }
    case TD_Q5_0:
    case TD_Q5_1: {
        const uint8_t *qs =
            t == TD_Q5_0 ? ((const td_block_q5_0 *)blk)->qs : ((const td_block_q5_1 *)blk)->qs;
        const uint32_t qh = kc_le32(t == TD_Q5_0 ? ((const td_block_q5_0 *)blk)->qh
                                                 : ((const td_block_q5_1 *)blk)->qh);
        const int off = t == TD_Q5_0 ? 16 : 0;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - off);
            q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off);
        }
        return;
    }
    case TD_IQ4_NL: {
        const td_block_iq4_nl *b = blk;
        for (int j = 0; j < 16; j++) {
            q[j] = td_iq4nl_values[b->qs[j] & 0xF];
            q[j + 16] = td_iq4nl_values[b->qs[j] >> 4];
        }
        return;
    }
    case TD_Q8_0:
        memcpy(q, ((const td_block_q8_0 *)blk)->qs, TD_QK);
        return;
    default:
        memset(q, 0, TD_QK);
        return;
    }
}

/* The 256 integer quants of a K super-block: Q2_K 0..3, Q3_K -4..3, Q4_K 0..15, Q5_K 0..31,
 * Q6_K -32..31, IQ4_XS codebook values; scales and mins are separate. */
void kc__k_quants(tdtype t, const void *blk, int8_t q[TD_QKK])
{
    switch (t) {
    case TD_Q2_K: {
        const td_block_q2_k *b = blk;
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 4; s++) {
                for (int l = 0; l < 32; l++) {
                    q[128 * h + 32 * s + l] = (int8_t)((b->qs[32 * h + l] >> (2 * s)) & 3);
                }
            }
        }
        return;
    }
    case TD_Q3_K: {
        const td_block_q3_k *b = blk;
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 4; s++) {
                for (int l = 0; l < 32; l++) {
                    const int lo = (b->qs[32 * h + l] >> (2 * s)) & 3;
                    const int hb = (b->hmask[l] >> (4 * h + s)) & 1;
                    q[128 * h + 32 * s + l] = (int8_t)(lo - (hb ? 0 : 4));
                }
            }
        }
        return;
    }
    case TD_Q4_K:
    case TD_Q5_K: {
        const uint8_t *qs =
            t == TD_Q4_K ? ((const td_block_q4_k *)blk)->qs : ((const td_block_q5_k *)blk)->qs;
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
                if (t == TD_Q5_K) {
                    const uint8_t qh = ((const td_block_q5_k *)blk)->qh[l];
                    lo |= ((qh >> (2 * c)) & 1) << 4;
                    hi |= ((qh >> (2 * c + 1)) & 1) << 4;
                }
                q[64 * c + l] = (int8_t)lo;
                q[64 * c + 32 + l] = (int8_t)hi;
            }
        }
        return;
    }
    case TD_Q6_K: {
        const td_block_q6_k *b = blk;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            int8_t *y = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                y[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
                y[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                y[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                y[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        return;
    }
    case TD_IQ4_XS: {
        const td_block_iq4_xs *b = blk;
        for (int ib = 0; ib < 8; ib++) {
            for (int j = 0; j < 16; j++) {
                q[32 * ib + j] = td_iq4nl_values[b->qs[16 * ib + j] & 0xF];
                q[32 * ib + j + 16] = td_iq4nl_values[b->qs[16 * ib + j] >> 4];
            }
        }
        return;
    }
    default:
        memset(q, 0, TD_QKK);
        return;
    }
}

/* The integer sub-block scales and minimums of a K super-block (minimums 0 for the types without
 * them) and its float d and dmin: x[i] = d * sc[i / sub] * q[i] - dmin * mn[i / sub], sub = 16
 * (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K, IQ4_XS). Returns sub, or 0 for another type. */
static int kc_k_scales(tdtype t, const void *blk, int sc[16], int mn[16], float *d, float *dmin)
{
    memset(mn, 0, 16 * sizeof(int));
    *dmin = 0.0f;
    switch (t) {
    case TD_Q2_K: {
        const td_block_q2_k *b = blk;
        for (int j = 0; j < 16; j++) {
            sc[j] = b->scales[j] & 0xF;
            mn[j] = b->scales[j] >> 4;
        }
        *d = kc_f16_to_f32(b->d);
        *dmin = kc_f16_to_f32(b->dmin);
        return 16;
    }
    case TD_Q3_K: {
        const td_block_q3_k *b = blk;
        int8_t s8[16];
        kc__q3k_scales(b->scales, s8);
        for (int j = 0; j < 16; j++) {
            sc[j] = (int)s8[j]; /* signed: the scale minus 32 */
        }
        *d = kc_f16_to_f32(b->d);
        return 16;
    }
    case TD_Q4_K:
    case TD_Q5_K: {
        /* Q4_K and Q5_K share the d, dmin and scales offsets */
        const td_block_q4_k *b = blk;
        uint8_t s8[8], m8[8];
        kc__k4_scales(b->scales, s8, m8);
        for (int j = 0; j < 8; j++) {
            sc[j] = s8[j];
            mn[j] = m8[j];
        }
        *d = kc_f16_to_f32(b->d);
        *dmin = kc_f16_to_f32(b->dmin);
        return 32;
    }
    case TD_Q6_K: {
        const td_block_q6_k *b = blk;
        for (int j = 0; j < 16; j++) {
            sc[j] = (int)b->scales[j]; /* int8 scales */
        }
        *d = kc_f16_to_f32(b->d);
        return 16;
    }
    case TD_IQ4_XS: {
        const td_block_iq4_xs *b = blk;
        for (int j = 0; j < 8; j++) {
            sc[j] = kc_iq4xs_scale(b, j);
        }
        *d = kc_f16_to_f32(b->d);
        return 32;
    }
    default:
        return 0;
    }
}

/* ---- dequantization ---- */

int kc_dequantize_row(tdtype t, const void *src, float *dst, int64_t n)
{
    const int64_t be = td_block_elems(t);
    if (!td_supported(t) || be <= 0 || n < 0 || n % be != 0) {
        return -EINVAL;
    }
    const size_t bb = td_block_bytes(t);
    const uint8_t *p = src;
    switch (t) {
    case TD_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case TD_F16:
        kc_f16_to_f32_row(src, dst, n);
        return 0;
    case TD_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) {
            dst[i] = kc_bf16_to_f32(s[i]);
        }
        return 0;
    }
    case TD_Q4_0:
    case TD_Q4_1:
    case TD_Q5_0:
    case TD_Q5_1:
    case TD_Q8_0:
    case TD_IQ4_NL:
        for (int64_t i = 0; i < n / TD_QK; i++) {
            const uint8_t *blk = p + (size_t)i * bb;
            int8_t q[TD_QK];
            kc__legacy_quants(t, blk, q);
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const float d = kc_f16_to_f32(dh);
            if (t == TD_Q4_1 || t == TD_Q5_1) {
                uint16_t mh;
                memcpy(&mh, blk + 2, 2);
                const float m = kc_f16_to_f32(mh);
                for (int j = 0; j < TD_QK; j++) {
                    dst[i * TD_QK + j] = (float)q[j] * d + m;
                }
            } else { /* exactly q * d, as ggml (a -0 stays -0) */
                for (int j = 0; j < TD_QK; j++) {
                    dst[i * TD_QK + j] = (float)q[j] * d;
                }
            }
        }
        return 0;
    default:
        for (int64_t i = 0; i < n / TD_QKK; i++) {
            const uint8_t *blk = p + (size_t)i * bb;
            int8_t q[TD_QKK];
            int sc[16] = {0}, mn[16];
            float dd = 0.0f, dm;
            kc__k_quants(t, blk, q);
            const int sub = kc_k_scales(t, blk, sc, mn, &dd, &dm);
            if (sub == 0) {
                return -EINVAL;
            }
            float d[16] = {0}, m[16] = {0};
            for (int j = 0; j < TD_QKK / sub; j++) {
                d[j] = dd * (float)sc[j];
                m[j] = dm * (float)mn[j];
            }
            for (int j = 0; j < TD_QKK; j++) {
                dst[i * TD_QKK + j] = d[j / sub] * (float)q[j] - m[j / sub];
            }
        }
        return 0;
    }
}

/* ---- activation quantizers ---- */

void kc_quantize_row_q8_1(const float *x, td_block_q8_1 *y, int64_t k)
{
    for (int64_t i = 0; i < k / TD_QK; i++) {
        const float *xb = x + i * TD_QK;
        float amax = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            const float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        /* ggml's x86 quantize_row_q8_1: as Q8_0, plus s = d * sum(q) */
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < TD_QK; j++) {
            y[i].qs[j] = (int8_t)nearbyintf(xb[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = kc_f32_to_f16(d);
        y[i].s = kc_f32_to_f16(d * (float)sum);
    }
}

void kc_quantize_row_q8_k(const float *x, td_block_q8_k *y, int64_t k)
{
    kc__ops()->quant_q8k(x, y, k);
}

void kc__quantize_q8k_ref(const float *x, td_block_q8_k *y, int64_t k)
{
    for (int64_t i = 0; i < k / TD_QKK; i++) {
        const float *xb = x + i * TD_QKK;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < TD_QKK; j++) {
            const float a = fabsf(xb[j]);
            if (a > amax) {
                amax = a;
                max = xb[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* ggml's quantize_row_q8_K: the value of largest magnitude maps to -127 */
        const float iscale = -127.0f / max;
        for (int j = 0; j < TD_QKK; j++) {
            const int v = (int)nearbyintf(iscale * xb[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < TD_QKK / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                sum += y[i].qs[16 * j + l];
            }
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

tdtype kc_vec_dot_type(tdtype t)
{
    switch (t) {
    case TD_Q4_0:
    case TD_Q5_0:
    case TD_Q8_0:
    case TD_IQ4_NL:
        return TD_Q8_0;
    case TD_Q4_1:
    case TD_Q5_1:
        return TD_Q8_1;
    case TD_Q2_K:
    case TD_Q3_K:
    case TD_Q4_K:
    case TD_Q5_K:
    case TD_Q6_K:
    case TD_IQ4_XS:
        return TD_Q8_K;
    default:
        return t;
    }
}

/* ---- scalar dot products ---- */

static float kc_dot_legacy(tdtype t, const uint8_t *w, const void *xq, int64_t nb)
{
    const size_t bb = td_block_bytes(t);
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        int8_t q[TD_QK];
        kc__legacy_quants(t, blk, q);
        uint16_t dh;
        memcpy(&dh, blk, 2);
        const int8_t *xs;
        float dx, sx = 0.0f;
        if (t == TD_Q4_1 || t == TD_Q5_1) {
            const td_block_q8_1 *x = (const td_block_q8_1 *)xq + b;
            xs = x->qs;
            dx = kc_f16_to_f32(x->d);
            sx = kc_f16_to_f32(x->s);
        } else {
            const td_block_q8_0 *x = (const td_block_q8_0 *)xq + b;
            xs = x->qs;
            dx = kc_f16_to_f32(x->d);
        }
        int32_t isum = 0;
        for (int j = 0; j < TD_QK; j++) {
            isum += (int32_t)q[j] * (int32_t)xs[j];
        }
        sum += kc_f16_to_f32(dh) * dx * (float)isum;
        if (t == TD_Q4_1 || t == TD_Q5_1) {
            uint16_t mh;
            memcpy(&mh, blk + 2, 2);
            sum += kc_f16_to_f32(mh) * sx;
        }
    }
    return sum;
}

/* One K super-block against a Q8_K block: d_x * (sum_j d_j * isum_j - sum_j m_j * xsum_j), with
 * the per-sub-block integer sums exact and the super-block's integer scales applied in int32
 * before the float scale, as ggml does. */
static float kc_dot_k_block(tdtype t, const uint8_t *blk, const td_block_q8_k *x)
{
    int sc[16] = {0}, mn[16];
    float dd = 0.0f, dm;
    const int sub = kc_k_scales(t, blk, sc, mn, &dd, &dm);
    if (sub == 0) {
        return 0.0f;
    }
    int8_t q[TD_QKK];
    kc__k_quants(t, blk, q);
    int32_t isum[16] = {0};
    for (int j = 0; j < TD_QKK; j++) {
        isum[j / sub] += (int32_t)q[j] * (int32_t)x->qs[j];
    }
    int32_t si = 0, sm = 0;
    for (int j = 0; j < TD_QKK / sub; j++) {
        const int32_t xsum = sub == 16 ? x->bsums[j] : x->bsums[2 * j] + x->bsums[2 * j + 1];
        si += sc[j] * isum[j];
        sm += mn[j] * xsum;
    }
    return x->d * (dd * (float)si - dm * (float)sm);
}

float kc__vec_dot_ref(tdtype t, const void *w, const void *xq, int64_t k)
{
    if (td_block_elems(t) == TD_QK) {
        return kc_dot_legacy(t, w, xq, k / TD_QK);
    }
    const size_t bb = td_block_bytes(t);
    const td_block_q8_k *x = xq;
    float sum = 0.0f;
    for (int64_t b = 0; b < k / TD_QKK; b++) {
        sum += kc_dot_k_block(t, (const uint8_t *)w + (size_t)b * bb, x + b);
    }
    return sum;
}
