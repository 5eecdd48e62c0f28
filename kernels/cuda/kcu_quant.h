/*
 * Q8_0 / Q4_0 arithmetic shared by the CUDA kernels and the host tests (KCU_HD): element and
 * whole-block dequantisation (ggml's formulas, the same float operations as kc_dequantize_row),
 * the dot product of one quantised block with 32 f32 activations, and the order in which the
 * decode GEMV kernel (kcu_matmul.cu) sums a row, so a host function reproduces the GPU's rounding.
 *
 * Every multiply-add here is an explicit fmaf, and the products that are added later go through
 * kcu_math.h's kcu_mul_rn (__fmul_rn on the device, never fused into an FMA): nvcc contracts
 * a*b + c on its own and a host compiler for baseline x86-64 does not, so spelling it out gives
 * the host and the device the same bits.
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_QUANT_H
#define TANDEM_KERNELS_CUDA_KCU_QUANT_H

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/kcu_hd.h"
#include "kernels/cuda/kcu_math.h"
#include "kernels/dtype.h"

/* ---- dequantisation ---- */

/* Element j (0..31) of a Q8_0 block: q * d. */
KCU_HD float kcu_q8_0_elem(const td_block_q8_0 *b, int j)
{
    return (float)b->qs[j] * kcu_f16_to_f32(b->d);
}

/* The quantised value (-8..7) of element j (0..31) of a Q4_0 block: low nibbles hold elements
 * 0..15, high nibbles 16..31. */
KCU_HD int kcu_q4_0_q(const td_block_q4_0 *b, int j)
{
    const int byte = b->qs[j & 15];
    return (j < TD_QK / 2 ? (byte & 0x0F) : (byte >> 4)) - 8;
}

/* Element j (0..31) of a Q4_0 block: (q - 8) * d. */
KCU_HD float kcu_q4_0_elem(const td_block_q4_0 *b, int j)
{
    return (float)kcu_q4_0_q(b, j) * kcu_f16_to_f32(b->d);
}

/* The 32 elements of a block. */
KCU_HD void kcu_q8_0_dequant(const td_block_q8_0 *b, float *out)
{
    const float d = kcu_f16_to_f32(b->d);
    for (int j = 0; j < TD_QK; j++) {
        out[j] = (float)b->qs[j] * d;
    }
}

KCU_HD void kcu_q4_0_dequant(const td_block_q4_0 *b, float *out)
{
    const float d = kcu_f16_to_f32(b->d);
    for (int j = 0; j < TD_QK; j++) {
        out[j] = (float)kcu_q4_0_q(b, j) * d;
    }
}

/* ---- block dot products ---- */

/* d * sum_j q_j x_j for one block and 32 activations x[0..31]: the integer-valued products are
 * accumulated in element order j = 0..31 (fmaf), then scaled once by d. */
KCU_HD float kcu_q8_0_dot(const td_block_q8_0 *b, const float *x)
{
    float s = 0.0f;
    for (int j = 0; j < TD_QK; j++) {
        s = fmaf((float)b->qs[j], x[j], s);
    }
    return kcu_mul_rn(s, kcu_f16_to_f32(b->d));
}

KCU_HD float kcu_q4_0_dot(const td_block_q4_0 *b, const float *x)
{
    float s = 0.0f;
    for (int j = 0; j < TD_QK; j++) {
        s = fmaf((float)kcu_q4_0_q(b, j), x[j], s);
    }
    return kcu_mul_rn(s, kcu_f16_to_f32(b->d));
}

/* ---- the GEMV kernel's summation order, for the host ---- */

#ifndef __CUDA_ARCH__
/* One output of the decode GEMV (kcu_matmul.cu): the dot of a quantised row of nb blocks (type
 * TD_Q8_0 or TD_Q4_0) with x[nb * 32], in exactly the kernel's order: lane l of the warp adds
 * the block dots of blocks l, l + 32, l + 64, ... in that order (acc = acc + dot), then the
 * warp's xor butterfly (kcu_math.h's kcu_warp_sum_emul) combines the 32 lane sums. */
static inline float kcu_q_row_dot_emul(tdtype type, const void *row, const float *x, int64_t nb)
{
    float lane[KCU_WARP];
    for (int l = 0; l < KCU_WARP; l++) {
        lane[l] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * TD_QK;
        const float d = type == TD_Q8_0 ? kcu_q8_0_dot((const td_block_q8_0 *)row + b, xb)
                                        : kcu_q4_0_dot((const td_block_q4_0 *)row + b, xb);
        lane[b % KCU_WARP] = lane[b % KCU_WARP] + d;
    }
    return kcu_warp_sum_emul(lane);
}
#endif

#endif
