/*
 * Weights and matmuls of kcu.h: y[n][rows] = x[n][cols] . W^T.
 *
 *   F16 / BF16 weights: x is converted to the weight's type in the workspace and multiplied by
 *     cublasGemmEx (FP32 compute, f32 output, tensor cores).
 *   Q8_0 / Q4_0, n <= KCU_MMQ_MAX_N (decode): kcu_mmq_gemv, one warp per output row (a few rows
 *     per warp), the activations staged in shared memory 32 blocks (1024 columns) at a time,
 *     lane l dotting blocks l, l + 32, ... with kcu_quant.h's block dots, then the warp's xor
 *     butterfly: the order kcu_q_row_dot_emul replays on the host.
 *   Q8_0 / Q4_0, larger n (prefill): W is dequantised to F16 in the workspace a tile of rows at a
 *     time and multiplied like an F16 weight.
 *
 * cuBLAS is column-major: a row-major W[rows][cols] is the column-major cols x rows matrix W^T, so
 * Y^T (column-major rows x n, i.e. row-major Y[n][rows]) = op_T(W^T) . X^T with X^T the column-
 * major cols x n matrix that row-major X[n][cols] is: cublasGemmEx(T, N, m = rows, n, k = cols,
 * A = W (lda = cols), B = X (ldb = cols), C = Y (ldc = rows)).
 */
#include "kernels/cuda/kcu_internal.h"
#include "kernels/cuda/kcu_math.h"
#include "kernels/cuda/kcu_quant.h"
#include "kernels/cuda/kcu_reduce.cuh"

#include <errno.h>
#include <limits.h>
#include <string.h>

#define KCU_MMQ_MAX_N         8 /* largest n of the GEMV kernel */
#define KCU_MMQ_WARPS         8 /* warps per thread block */
#define KCU_MMQ_ROWS_PER_WARP 4
#define KCU_MMQ_THREADS       (KCU_MMQ_WARPS * KCU_WARP)
#define KCU_MMQ_ROWS          (KCU_MMQ_WARPS * KCU_MMQ_ROWS_PER_WARP) /* rows per thread block */
#define KCU_MMQ_XPAD          (TD_QK + 1) /* shared-memory stride of one block's activations */

#define KCU_UPLOAD_CHUNK (4 << 20)  /* F32 elements converted per staging round (16 MiB) */
#define KCU_DQ_TILE      (16 << 20) /* F16 elements of a dequantised weight tile (32 MiB) */
#define KCU_WSP_ALIGN    256

static size_t align_up(size_t v)
{
    return (v + KCU_WSP_ALIGN - 1) / KCU_WSP_ALIGN * KCU_WSP_ALIGN;
}

/* ---- kernels ---- */

__global__ static void kcu_f32_to_f16_kernel(const float *__restrict__ x, uint16_t *__restrict__ y,
                                             int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = kcu_f32_to_f16(x[i]);
    }
}

__global__ static void kcu_f32_to_bf16_kernel(const float *__restrict__ x, uint16_t *__restrict__ y,
                                              int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = kcu_f32_to_bf16(x[i]);
    }
}

__device__ __forceinline__ float kcu_block_dot(const td_block_q8_0 *b, const float *x)
{
    return kcu_q8_0_dot(b, x);
}

__device__ __forceinline__ float kcu_block_dot(const td_block_q4_0 *b, const float *x)
{
    return kcu_q4_0_dot(b, x);
}

__device__ __forceinline__ float kcu_block_elem(const td_block_q8_0 *b, int j)
{
    return kcu_q8_0_elem(b, j);
}

__device__ __forceinline__ float kcu_block_elem(const td_block_q4_0 *b, int j)
{
    return kcu_q4_0_elem(b, j);
}

/* Rows [r0, r0 + n_rows) of a quantised weight of nb blocks per row, as F16, row-major. */
template <typename B>
__global__ static void kcu_dequant_f16_kernel(const B *__restrict__ w, uint16_t *__restrict__ out,
                                              int64_t r0, int64_t n_rows, int64_t nb)
{
    const int64_t cols = nb * TD_QK;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * cols) {
        return;
    }
    const int64_t r = i / cols, c = i % cols;
    const B *blk = w + (r0 + r) * nb + c / TD_QK;
    out[i] = kcu_f32_to_f16(kcu_block_elem(blk, (int)(c % TD_QK)));
}

/* The decode GEMV: y[t][r] = row r of W . x[t] for t < N. A thread block owns KCU_MMQ_ROWS
 * rows, warp w rows w * KCU_MMQ_ROWS_PER_WARP + i. */
template <typename B, int N>
__global__ static void __launch_bounds__(KCU_MMQ_THREADS)
    kcu_mmq_gemv(const B *__restrict__ w, const float *__restrict__ x, float *__restrict__ y,
                 int64_t rows, int64_t nb)
{
    __shared__ float xs[N][KCU_WARP * KCU_MMQ_XPAD];
    const int lane = (int)threadIdx.x % KCU_WARP;
    const int warp = (int)threadIdx.x / KCU_WARP;
    const int64_t row0 = (int64_t)blockIdx.x * KCU_MMQ_ROWS + warp * KCU_MMQ_ROWS_PER_WARP;
    const int64_t cols = nb * TD_QK;

    float acc[KCU_MMQ_ROWS_PER_WARP][N];
#pragma unroll
    for (int r = 0; r < KCU_MMQ_ROWS_PER_WARP; r++) {
#pragma unroll
        for (int t = 0; t < N; t++) {
            acc[r][t] = 0.0f;
        }
    }

    for (int64_t c0 = 0; c0 < nb; c0 += KCU_WARP) {
        const int cb = nb - c0 < KCU_WARP ? (int)(nb - c0) : KCU_WARP; /* blocks this chunk */
        const int ce = cb * TD_QK;                                     /* elements */
        __syncthreads(); /* the previous chunk's readers are done */
        for (int i = (int)threadIdx.x; i < N * ce; i += (int)blockDim.x) {
            const int t = i / ce, e = i % ce;
            xs[t][e / TD_QK * KCU_MMQ_XPAD + e % TD_QK] = x[t * cols + c0 * TD_QK + e];
        }
        __syncthreads();
        if (lane < cb) {
#pragma unroll
            for (int r = 0; r < KCU_MMQ_ROWS_PER_WARP; r++) {
                const int64_t row = row0 + r;
                if (row < rows) {
                    const B blk = w[row * nb + c0 + lane];
#pragma unroll
                    for (int t = 0; t < N; t++) {
                        acc[r][t] = acc[r][t] + kcu_block_dot(&blk, &xs[t][lane * KCU_MMQ_XPAD]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < KCU_MMQ_ROWS_PER_WARP; r++) {
#pragma unroll
        for (int t = 0; t < N; t++) {
            const float v = kcu_warp_sum(acc[r][t]);
            const int64_t row = row0 + r;
            if (lane == 0 && row < rows) {
                y[t * rows + row] = v;
            }
        }
    }
}

/* ---- launches ---- */

static unsigned grid_1d(int64_t n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

template <typename B, int N>
static void launch_gemv(cudaStream_t s, const kcu_weight *w, const float *d_x, float *d_y)
{
    const unsigned grid = grid_1d(w->rows, KCU_MMQ_ROWS);
    kcu_mmq_gemv<B, N>
        <<<grid, KCU_MMQ_THREADS, 0, s>>>((const B *)w->d_data, d_x, d_y, w->rows, w->cols / TD_QK);
}

template <typename B>
static void launch_gemv_n(cudaStream_t s, const kcu_weight *w, const float *d_x, int64_t n,
                          float *d_y)
{
    switch (n) {
    case 1:
        launch_gemv<B, 1>(s, w, d_x, d_y);
        break;
    case 2:
        launch_gemv<B, 2>(s, w, d_x, d_y);
        break;
    case 3:
        launch_gemv<B, 3>(s, w, d_x, d_y);
        break;
    case 4:
        launch_gemv<B, 4>(s, w, d_x, d_y);
        break;
    case 5:
        launch_gemv<B, 5>(s, w, d_x, d_y);
        break;
    case 6:
        launch_gemv<B, 6>(s, w, d_x, d_y);
        break;
    case 7:
        launch_gemv<B, 7>(s, w, d_x, d_y);
        break;
    default:
        launch_gemv<B, 8>(s, w, d_x, d_y);
        break;
    }
}

static_assert(KCU_MMQ_MAX_N == 8, "launch_gemv_n covers n = 1..8");

/* Rows of a dequantised tile: as many as fit KCU_DQ_TILE elements (at least 128, at most all). */
static int64_t dq_tile_rows(const kcu_weight *w)
{
    int64_t tr = KCU_DQ_TILE / (w->cols > 0 ? w->cols : 1);
    if (tr < 128) {
        tr = 128;
    }
    return tr < w->rows ? tr : w->rows;
}

static bool is_quant(tdtype t)
{
    return t == TD_Q8_0 || t == TD_Q4_0;
}

extern "C" size_t kcu_matmul_workspace(const kcu_weight *w, int64_t n)
{
    if (!w || n <= 0) {
        return 0;
    }
    const size_t x16 = align_up((size_t)n * (size_t)w->cols * 2);
    if (!is_quant(w->type)) {
        return x16;
    }
    if (n <= KCU_MMQ_MAX_N) {
        return 0;
    }
    return x16 + align_up((size_t)dq_tile_rows(w) * (size_t)w->cols * 2);
}

/* y (rows x n, ldc ldy) = A (m rows of w_cols) . x^T via cuBLAS; a and b of type dt. */
static int gemm(kcu_ctx *c, cudaDataType_t dt, const void *a, int64_t m, int64_t k, const void *b,
                int64_t n, float *y, int64_t ldy)
{
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasGemmEx(
        kcu_blas(c), CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &alpha, a, dt, (int)k, b, dt,
        (int)k, &beta, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return kcu_blas_fail(st, "cublasGemmEx");
}

extern "C" int kcu_matmul(kcu_ctx *c, const kcu_weight *w, const float *d_x, int64_t n, float *d_y,
                          void *d_wsp, size_t wsp_bytes)
{
    if (!c || !w || !w->d_data || n < 0 || (n > 0 && (!d_x || !d_y))) {
        kcu_set_error("kcu_matmul: bad arguments");
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    if (w->rows <= 0 || w->cols <= 0 || w->rows > INT_MAX || w->cols > INT_MAX || n > INT_MAX ||
        (is_quant(w->type) && w->cols % TD_QK != 0)) {
        kcu_set_error("kcu_matmul: unsupported shape %lld x %lld, n %lld", (long long)w->rows,
                      (long long)w->cols, (long long)n);
        return -EINVAL;
    }
    const size_t need = kcu_matmul_workspace(w, n);
    if (wsp_bytes < need || (need && !d_wsp)) {
        kcu_set_error("kcu_matmul: workspace of %zu bytes, %zu needed", wsp_bytes, need);
        return -EINVAL;
    }
    cudaStream_t s = kcu_stream(c);
    const int64_t nx = n * w->cols;
    uint16_t *x16 = (uint16_t *)d_wsp;

    switch (w->type) {
    case TD_F16:
    case TD_BF16:
        if (w->type == TD_F16) {
            kcu_f32_to_f16_kernel<<<grid_1d(nx, 256), 256, 0, s>>>(d_x, x16, nx);
        } else {
            kcu_f32_to_bf16_kernel<<<grid_1d(nx, 256), 256, 0, s>>>(d_x, x16, nx);
        }
        if (kcu_check_launch("kcu_matmul: activation conversion") != 0) {
            return -EIO;
        }
        return gemm(c, w->type == TD_F16 ? CUDA_R_16F : CUDA_R_16BF, w->d_data, w->rows, w->cols,
                    x16, n, d_y, w->rows);
    case TD_Q8_0:
    case TD_Q4_0:
        break;
    default:
        kcu_set_error("kcu_matmul: unsupported weight type %s", td_name(w->type));
        return -EINVAL;
    }

    if (n <= KCU_MMQ_MAX_N) {
        if (w->type == TD_Q8_0) {
            launch_gemv_n<td_block_q8_0>(s, w, d_x, n, d_y);
        } else {
            launch_gemv_n<td_block_q4_0>(s, w, d_x, n, d_y);
        }
        return kcu_check_launch("kcu_matmul: quantized GEMV");
    }

    kcu_f32_to_f16_kernel<<<grid_1d(nx, 256), 256, 0, s>>>(d_x, x16, nx);
    if (kcu_check_launch("kcu_matmul: activation conversion") != 0) {
        return -EIO;
    }
    uint16_t *tile = (uint16_t *)((char *)d_wsp + align_up((size_t)nx * 2));
    const int64_t tr = dq_tile_rows(w), nb = w->cols / TD_QK;
    for (int64_t r0 = 0; r0 < w->rows; r0 += tr) {
        const int64_t m = w->rows - r0 < tr ? w->rows - r0 : tr;
        const int64_t ne = m * w->cols;
        if (w->type == TD_Q8_0) {
            kcu_dequant_f16_kernel<td_block_q8_0><<<grid_1d(ne, 256), 256, 0, s>>>(
                (const td_block_q8_0 *)w->d_data, tile, r0, m, nb);
        } else {
            kcu_dequant_f16_kernel<td_block_q4_0><<<grid_1d(ne, 256), 256, 0, s>>>(
                (const td_block_q4_0 *)w->d_data, tile, r0, m, nb);
        }
        if (kcu_check_launch("kcu_matmul: weight dequantization") != 0) {
            return -EIO;
        }
        const int rc = gemm(c, CUDA_R_16F, tile, m, w->cols, x16, n, d_y + r0, w->rows);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* ---- weights ---- */

extern "C" int kcu_weight_upload(kcu_ctx *c, kcu_weight *w, tdtype src_type, const void *h_data,
                                 int64_t rows, int64_t cols)
{
    if (!c || !w || !h_data || rows <= 0 || cols <= 0) {
        kcu_set_error("kcu_weight_upload: bad arguments");
        return -EINVAL;
    }
    tdtype dev_type;
    switch (src_type) {
    case TD_F32:
    case TD_F16:
        dev_type = TD_F16;
        break;
    case TD_BF16:
    case TD_Q8_0:
    case TD_Q4_0:
        dev_type = src_type;
        break;
    default:
        kcu_set_error("kcu_weight_upload: unsupported weight type %s", td_name(src_type));
        return -EINVAL;
    }
    const size_t row_bytes = td_row_bytes(dev_type, cols);
    if (row_bytes == 0 || (size_t)rows > SIZE_MAX / row_bytes) {
        kcu_set_error("kcu_weight_upload: bad shape %lld x %lld for %s", (long long)rows,
                      (long long)cols, td_name(src_type));
        return -EINVAL;
    }
    const size_t bytes = row_bytes * (size_t)rows;
    void *d = kcu_malloc(c, bytes);
    if (!d) {
        return -ENOMEM;
    }
    int rc;
    if (src_type != TD_F32) {
        rc = kcu_h2d(c, d, h_data, bytes);
    } else {
        /* through a device staging buffer, converted there; the copy of the next chunk is
         * ordered after the conversion of the previous one on the stream */
        const int64_t total = rows * cols;
        const int64_t chunk = total < KCU_UPLOAD_CHUNK ? total : KCU_UPLOAD_CHUNK;
        float *stage = (float *)kcu_malloc(c, (size_t)chunk * sizeof(float));
        if (!stage) {
            kcu_free(c, d);
            return -ENOMEM;
        }
        rc = 0;
        for (int64_t o = 0; o < total && rc == 0; o += chunk) {
            const int64_t ne = total - o < chunk ? total - o : chunk;
            rc = kcu_h2d(c, stage, (const float *)h_data + o, (size_t)ne * sizeof(float));
            if (rc == 0) {
                kcu_f32_to_f16_kernel<<<grid_1d(ne, 256), 256, 0, kcu_stream(c)>>>(
                    stage, (uint16_t *)d + o, ne);
                rc = kcu_check_launch("kcu_weight_upload: F32 to F16");
            }
        }
        if (rc == 0) {
            rc = kcu_sync(c);
        }
        kcu_free(c, stage);
    }
    if (rc == 0) {
        rc = kcu_sync(c); /* the caller may free h_data on return */
    }
    if (rc != 0) {
        kcu_free(c, d);
        return rc;
    }
    w->type = dev_type;
    w->rows = rows;
    w->cols = cols;
    w->d_data = d;
    return 0;
}

extern "C" void kcu_weight_free(kcu_ctx *c, kcu_weight *w)
{
    if (!w) {
        return;
    }
    kcu_free(c, w->d_data);
    memset(w, 0, sizeof(*w));
}
