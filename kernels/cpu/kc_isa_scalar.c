/* Portable C kernels: the fallback level and the shape of what the SIMD files do. */
#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_internal.h"

static float kc_dot_row(const kc__mm *a, const void *wrow, int64_t t)
{
    const int64_t k = a->k;
    float sum = 0.0f;
    switch (a->type) {
    case TD_F32: {
        const float *w = (const float *)wrow;
        const float *x = a->x + t * k;
        for (int64_t i = 0; i < k; i++) {
            sum += w[i] * x[i];
        }
        break;
    }
    case TD_F16: {
        const uint16_t *w = (const uint16_t *)wrow;
        const float *x = a->x + t * k;
        for (int64_t i = 0; i < k; i++) {
            sum += kc_f16_to_f32(w[i]) * x[i];
        }
        break;
    }
    case TD_BF16: {
        const uint16_t *w = (const uint16_t *)wrow;
        const float *x = a->x + t * k;
        for (int64_t i = 0; i < k; i++) {
            sum += kc_bf16_to_f32(w[i]) * x[i];
        }
        break;
    }
    case TD_Q8_0: {
        const td_block_q8_0 *w = (const td_block_q8_0 *)wrow;
        const td_block_q8_0 *x = a->xq + t * (k / TD_QK);
        for (int64_t b = 0; b < k / TD_QK; b++) {
            int32_t isum = 0;
            for (int j = 0; j < TD_QK; j++) {
                isum += (int32_t)w[b].qs[j] * (int32_t)x[b].qs[j];
            }
            sum += kc_f16_to_f32(w[b].d) * kc_f16_to_f32(x[b].d) * (float)isum;
        }
        break;
    }
    case TD_Q4_0: {
        const td_block_q4_0 *w = (const td_block_q4_0 *)wrow;
        const td_block_q8_0 *x = a->xq + t * (k / TD_QK);
        for (int64_t b = 0; b < k / TD_QK; b++) {
            int32_t isum = 0;
            for (int j = 0; j < TD_QK / 2; j++) {
                isum += ((int32_t)(w[b].qs[j] & 0x0F) - 8) * (int32_t)x[b].qs[j];
                isum += ((int32_t)(w[b].qs[j] >> 4) - 8) * (int32_t)x[b].qs[j + TD_QK / 2];
            }
            sum += kc_f16_to_f32(w[b].d) * kc_f16_to_f32(x[b].d) * (float)isum;
        }
        break;
    }
    default:
        return kc__vec_dot_ref(a->type, wrow, kc__mm_xq(a, t), k);
    }
    return sum;
}

static void kc_mm_rows_scalar(const kc__mm *a, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < a->n; t++) {
        for (int64_t r = r0; r < r1; r++) {
            a->y[t * a->m + r] = kc_dot_row(a, a->w + (size_t)r * a->w_row_bytes, t);
        }
    }
}

static float kc_dot_f32_scalar(const float *x, const float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        s += x[i] * y[i];
    }
    return s;
}

static float kc_dot_f16_scalar(const float *x, const uint16_t *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        s += x[i] * kc_f16_to_f32(y[i]);
    }
    return s;
}

static void kc_axpy_f32_scalar(float *y, float s, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        y[i] += s * x[i];
    }
}

static void kc_axpy_f16_scalar(float *y, float s, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        y[i] += s * kc_f16_to_f32(x[i]);
    }
}

const kc__isa_ops kc__ops_scalar = {
    .mm_rows = kc_mm_rows_scalar,
    .dot_f32 = kc_dot_f32_scalar,
    .dot_f16 = kc_dot_f16_scalar,
    .axpy_f32 = kc_axpy_f32_scalar,
    .axpy_f16 = kc_axpy_f16_scalar,
    .quant_q8 = kc__quantize_q8_ref,
    .quant_q8k = kc__quantize_q8k_ref,
};
