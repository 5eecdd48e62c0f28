/*
 * Element conversions: f16 and bf16 <-> f32, quantization of f32 activation rows to Q8_0 (ggml's
 * x86 formula: d = amax / 127 stored as f16, q = round-half-even(x * 127 / amax)), Q8_1 and Q8_K,
 * and dequantization of rows of any supported weight type (kc_quants.c). Pure functions on
 * caller-owned buffers; thread-safe.
 */
#ifndef TANDEM_KERNELS_CPU_KC_CONVERT_H
#define TANDEM_KERNELS_CPU_KC_CONVERT_H

#include <stdint.h>

#include "kernels/dtype.h"

/* IEEE half <-> single (round to nearest even; inf/NaN/subnormals preserved). */
float kc_f16_to_f32(uint16_t h);
uint16_t kc_f32_to_f16(float f);

/* bfloat16 <-> single (round to nearest even; NaN stays NaN). */
float kc_bf16_to_f32(uint16_t h);
uint16_t kc_f32_to_bf16(float f);

/* n-element row conversions. */
void kc_f16_to_f32_row(const uint16_t *x, float *y, int64_t n);
void kc_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);

/* Quantizes k floats (k a multiple of TD_QK) into k / TD_QK Q8_0 blocks. */
void kc_quantize_row_q8_0(const float *x, td_block_q8_0 *y, int64_t k);

/* ggml's activation quantizers for the other vec_dot types: Q8_1 (as Q8_0, plus s = d * sum(q))
 * for Q4_1/Q5_1 weights, Q8_K (float d, the largest-magnitude value maps to -127, sums of each
 * 16) for K-quants and IQ4_XS. k a multiple of the block size. */
void kc_quantize_row_q8_1(const float *x, td_block_q8_1 *y, int64_t k);
void kc_quantize_row_q8_k(const float *x, td_block_q8_k *y, int64_t k);

/* The activation type a weight type is dotted with (ggml's vec_dot_type on x86): Q8_0, Q8_1 or
 * Q8_K for quantized types, the type itself for float types. */
tdtype kc_vec_dot_type(tdtype t);

/* Converts one row of n elements of type t at src into floats; n must be a whole number of
 * blocks. 0, or -EINVAL for an unsupported type or a bad n. */
int kc_dequantize_row(tdtype t, const void *src, float *dst, int64_t n);

#endif
