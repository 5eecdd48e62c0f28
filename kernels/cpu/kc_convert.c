/* Scalar element conversions; see kc_convert.h. Exact bit-level algorithms (after Maratyszcza's
 * FP16 library, as ggml uses) so every ISA level sees the same values. */
#include "kernels/cpu/kc_convert.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"

static inline float kc_bits_f32(uint32_t w)
{
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

static inline uint32_t kc_f32_bits(float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof(w));
    return w;
}

float kc_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float normalized = kc_bits_f32((two_w >> 4) + exp_offset) * 0x1.0p-112f;
    const float denormalized = kc_bits_f32((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
    const uint32_t result =
        sign | (two_w < (UINT32_C(1) << 27) ? kc_f32_bits(denormalized) : kc_f32_bits(normalized));
    return kc_bits_f32(result);
}

uint16_t kc_f32_to_f16(float f)
{
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = kc_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) {
        bias = UINT32_C(0x71000000);
    }
    base = kc_bits_f32((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = kc_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT32_C(0x7E00) : nonsign));
}

float kc_bf16_to_f32(uint16_t h)
{
    return kc_bits_f32((uint32_t)h << 16);
}

uint16_t kc_f32_to_bf16(float f)
{
    uint32_t u = kc_f32_bits(f);
    if ((u & UINT32_C(0x7fffffff)) > UINT32_C(0x7f800000)) {
        return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    }
    return (uint16_t)((u + (UINT32_C(0x7fff) + ((u >> 16) & 1))) >> 16);
}

void kc_f16_to_f32_row(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        y[i] = kc_f16_to_f32(x[i]);
    }
}

void kc_f32_to_f16_row(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        y[i] = kc_f32_to_f16(x[i]);
    }
}

void kc_quantize_row_q8_0(const float *x, td_block_q8_0 *y, int64_t k)
{
    kc__ops()->quant_q8(x, y, k);
}

void kc__quantize_q8_ref(const float *x, td_block_q8_0 *y, int64_t k)
{
    const int64_t nb = k / TD_QK;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * TD_QK;
        float amax = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            const float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        /* as ggml's x86 quantize_row_q8_0 (the path llama.cpp runs for activations):
         * id = 127 / amax and round half to even, so Q8_0/Q4_0 matmuls see the same
         * quantized activations as llama.cpp's */
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = kc_f32_to_f16(d);
        for (int j = 0; j < TD_QK; j++) {
            y[i].qs[j] = (int8_t)nearbyintf(xb[j] * id);
        }
    }
}
