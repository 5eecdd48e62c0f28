/*
 * Number formats and randomness for the test-model generator (tandem-genmodel): FP32 -> FP16 /
 * BF16 rounding and the Q8_0 / Q4_0 block quantizers, each bit-for-bit equal to ggml's reference
 * functions (ggml_compute_fp32_to_fp16, ggml_compute_fp32_to_bf16, quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref), so a file written with those is the file llama.cpp's own tools would
 * write from the same floats.
 *
 * The quantizers of the other ggml weight types (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS)
 * write valid ggml blocks (kernels/dtype.h; kc_dequantize_row and ggml decode them alike) but
 * their choice of scales and rounding is our own search for a small squared error, so their bytes
 * may differ from llama-quantize's on the same floats.
 *
 * Also a small seeded PRNG and the Q/K row permutation that convert_hf_to_gguf.py applies to
 * llama attention weights.
 *
 * Pure functions over caller-owned buffers; nothing here allocates.
 */
#ifndef TANDEM_ENGINE_TOOLS_GENQUANT_H
#define TANDEM_ENGINE_TOOLS_GENQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* IEEE binary16 bits of f, rounded to nearest even (NaN -> quiet NaN 0x7e00 with f's sign,
 * overflow -> infinity), exactly as ggml_compute_fp32_to_fp16. */
uint16_t genq_fp32_to_fp16(float f);

/* The float value of binary16 bits h. */
float genq_fp16_to_fp32(uint16_t h);

/* bfloat16 bits of f, rounded to nearest even (NaN -> quiet NaN), as ggml_compute_fp32_to_bf16. */
uint16_t genq_fp32_to_bf16(float f);

/* Quantizes n floats (n a multiple of TD_QK) into n / TD_QK blocks, as ggml's reference
 * quantizers do. */
void genq_quantize_q8_0(const float *x, td_block_q8_0 *y, int64_t n);
void genq_quantize_q4_0(const float *x, td_block_q4_0 *y, int64_t n);

/* Our quantizers of the other weight types: n a multiple of the type's block (TD_QK for Q4_1,
 * Q5_0, Q5_1 and IQ4_NL, TD_QKK for the K-quants and IQ4_XS), n / block blocks written.
 *   Q4_1, Q5_1: d = (max - min) / (2^bits - 1), m = min, codes rounded against the f16 d and m.
 *   Q5_0: d = (value of largest magnitude) / -16, codes rounded against the f16 d.
 *   IQ4_NL: the least-squares scale of the best of a few candidate scales, refined.
 *   K-quants, IQ4_XS: per sub-block float scale (and min) fitted as above, then the sub-block
 *   scales quantized against the super-block's f16 d (and dmin), each integer scale chosen among
 *   its three nearest by the error of the sub-block re-quantized with it.
 * All-zero blocks are written with zero scales (they decode to exact zeros). */
void genq_quantize_q4_1(const float *x, td_block_q4_1 *y, int64_t n);
void genq_quantize_q5_0(const float *x, td_block_q5_0 *y, int64_t n);
void genq_quantize_q5_1(const float *x, td_block_q5_1 *y, int64_t n);
void genq_quantize_iq4_nl(const float *x, td_block_iq4_nl *y, int64_t n);
void genq_quantize_q2_k(const float *x, td_block_q2_k *y, int64_t n);
void genq_quantize_q3_k(const float *x, td_block_q3_k *y, int64_t n);
void genq_quantize_q4_k(const float *x, td_block_q4_k *y, int64_t n);
void genq_quantize_q5_k(const float *x, td_block_q5_k *y, int64_t n);
void genq_quantize_q6_k(const float *x, td_block_q6_k *y, int64_t n);
void genq_quantize_iq4_xs(const float *x, td_block_iq4_xs *y, int64_t n);

/*
 * Converts rows x cols floats (row-major, cols innermost) into type t (F32, F16, BF16 or any
 * quantized weight type above) at out, which must hold td_row_bytes(t, cols) * rows bytes.
 * Returns that byte count, or 0 when cols is not a whole number of blocks of t or t is not a
 * weight type (Q8_1, Q8_K).
 */
size_t genq_convert(tdtype t, const float *x, int64_t rows, int64_t cols, void *out);

/* Seeded PRNG (xoshiro256** seeded through splitmix64): the same seed gives the same stream on
 * every platform. */
typedef struct genq_rng {
    uint64_t s[4];
} genq_rng;

void genq_rng_seed(genq_rng *r, uint64_t seed);
uint64_t genq_rng_next(genq_rng *r);
/* Uniform in [-1, 1), 24-bit resolution. */
float genq_rng_uniform(genq_rng *r);

/*
 * convert_hf_to_gguf.py's LlamaModel.permute for one attention weight of rows = n_head * head_dim
 * rows and cols columns: out = W.reshape(n_head, 2, head_dim/2, cols).swapaxes(1, 2).reshape(...)
 * i.e. GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i (j in {0,1}). With inverse != 0 the
 * inverse mapping (GGUF rows -> HF rows). head_dim must be even; in and out must not overlap.
 */
void genq_permute_qk(const float *in, float *out, int64_t n_head, int64_t head_dim, int64_t cols,
                     int inverse);

#endif
