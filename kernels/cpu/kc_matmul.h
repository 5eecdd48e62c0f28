/*
 * Matrix multiplication of activations by a weight matrix: Y[n][m] = X[n][k] * W^T, W holding m
 * rows of k elements of type F32, F16, BF16, Q8_0 or Q4_0 (ggml layout: row r is the r-th
 * output). X and Y are f32, row-major. For Q8_0/Q4_0 the activations are first quantized to Q8_0
 * (ggml's vec_dot_type) and dotted with integer instructions.
 *
 * Determinism: the value of Y[t][r] depends only on X[t], W's row r and the active ISA level,
 * never on n, on the other tokens or on the thread count (each (token, row) pair is computed by
 * one thread with the same instruction sequence, k never split), so batched, chunked and single
 * token evaluation give bit-identical results.
 */
#ifndef TANDEM_KERNELS_CPU_KC_MATMUL_H
#define TANDEM_KERNELS_CPU_KC_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kc_pool.h"
#include "kernels/dtype.h"

typedef struct kc_weight {
    tdtype type;
    int64_t k;        /* elements per row (a multiple of TD_QK for Q8_0/Q4_0) */
    int64_t m;        /* rows (outputs) */
    const void *data; /* m * td_row_bytes(type, k) bytes, borrowed */
    void *packed;     /* kc_weight_prepare's copy (interleaved for quantized types), or NULL */
} kc_weight;

/*
 * Optional load-time preparation, in memory aligned to and advised for transparent huge pages
 * when 2 MiB or more (decode streams every weight once per token; with 4 KiB pages it took a TLB
 * miss every 4 KiB and ran at 55-60 % of the read bandwidth for F16/BF16):
 *   - F32/F16/BF16: a copy of the rows, used instead of data; results are bit-identical.
 *   - Q8_0/Q4_0/Q4_K/Q5_K/Q6_K when the active level is AVX2 or AVX-512: an interleaved copy (8
 *     rows per group, kc_internal.h) that the kernels use for decode and prompts. Results may
 *     differ in the last bits from an unprepared weight, and stay independent of n and of the
 *     thread count.
 * data stays borrowed and unchanged (other users, e.g. an embedding lookup of a tied output
 * matrix, read it). 0 or -ENOMEM. Free with kc_weight_release.
 */
int kc_weight_prepare(kc_weight *w);

/* Frees what kc_weight_prepare allocated (packed becomes NULL). */
void kc_weight_release(kc_weight *w);

/*
 * Whether BF16 weights are multiplied with activations rounded to BF16 (vdpbf16ps: the AVX-512
 * level on a CPU with AVX512_BF16, as ggml does there) rather than with F32 activations. Results
 * of BF16 matmuls then follow ggml's rounding; they still never depend on n or the threads.
 */
bool kc_bf16_dot_active(void);

/* Workspace bytes kc_matmul needs for n tokens (0 for F32/F16, and for BF16 unless
 * kc_bf16_dot_active()). */
size_t kc_matmul_wsize(const kc_weight *w, int64_t n);

/*
 * Y = X * W^T over the threads of pool (NULL: the calling thread alone). wsp is a caller-owned
 * scratch of at least kc_matmul_wsize(w, n) bytes (may be NULL when that is 0). x and y must not
 * overlap. 0, or -EINVAL for an unsupported type, a bad shape or a too small workspace.
 */
int kc_matmul(kc_pool *pool, const kc_weight *w, const float *x, int64_t n, float *y, void *wsp,
              size_t wsp_bytes);

#define KC_MATMUL_MAX_MULTI 4

/*
 * Several matmuls of the same activations in one pass over the pool: ys[i] = X * ws[i]^T for
 * i < nw (1..KC_MATMUL_MAX_MULTI), e.g. the Q/K/V or gate/up projections. Weights of the same k
 * and type share one activation quantization and one fork/join; results are bit-identical to
 * nw separate kc_matmul calls. Workspace: kc_matmul_wsize(ws[0], n). Mixed types or k fall back
 * to separate calls. 0 or -EINVAL as kc_matmul.
 */
int kc_matmul_multi(kc_pool *pool, const kc_weight *const *ws, float *const *ys, int nw,
                    const float *x, int64_t n, void *wsp, size_t wsp_bytes);

#endif
