/*
 * Token-wise ops of kcu.h: embedding gather, RMSNorm, bias and residual adds, SwiGLU, RoPE and
 * the row gather for logits. The arithmetic of every element is a kcu_math.h / kcu_quant.h
 * function (shared with the host tests); this file only decides which thread does what.
 */
#include <errno.h>

#include "kernels/cuda/kcu_internal.h"
#include "kernels/cuda/kcu_math.h"
#include "kernels/cuda/kcu_quant.h"
#include "kernels/cuda/kcu_reduce.cuh"

enum {
    KCU_EW_THREADS = 256, /* element-wise kernels */
    KCU_EW_MAX_BLOCKS = 8192,
    KCU_ROW_THREADS = 256, /* per-row kernels (embed, gather, RoPE) */
};

/* Grid of an element-wise kernel over n elements (grid-stride loops cover the rest). */
static unsigned ew_blocks(int64_t n)
{
    int64_t b = (n + KCU_EW_THREADS - 1) / KCU_EW_THREADS;
    return (unsigned)(b > (int64_t)KCU_EW_MAX_BLOCKS ? (int64_t)KCU_EW_MAX_BLOCKS : b);
}

/* ---- embedding ---- */

/* Element j of a row of type t starting at row (host layout, kc_dequantize_row's values). */
__device__ __forceinline__ float embed_elem(tdtype t, const void *row, int64_t j)
{
    switch (t) {
    case TD_F32:
        return ((const float *)row)[j];
    case TD_F16:
        return kcu_f16_to_f32(((const uint16_t *)row)[j]);
    case TD_BF16:
        return kcu_bf16_to_f32(((const uint16_t *)row)[j]);
    case TD_Q8_0:
        return kcu_q8_0_elem((const td_block_q8_0 *)row + j / TD_QK, (int)(j % TD_QK));
    case TD_Q4_0:
        return kcu_q4_0_elem((const td_block_q4_0 *)row + j / TD_QK, (int)(j % TD_QK));
    }
    return 0.0f;
}

__global__ static void embed_kernel(tdtype t, const uint8_t *table, size_t row_bytes, int64_t dim,
                                    const int32_t *ids, float *out)
{
    const int64_t i = blockIdx.x;
    const uint8_t *row = table + (size_t)ids[i] * row_bytes;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        out[i * dim + j] = embed_elem(t, row, j);
    }
}

extern "C" int kcu_embed(kcu_ctx *c, tdtype type, const void *d_table, int64_t dim,
                         const int32_t *d_ids, int32_t n, float *d_out)
{
    const size_t row_bytes = td_row_bytes(type, dim);
    if (!c || n < 0 || dim <= 0 || row_bytes == 0 || !td_supported((uint32_t)type) ||
        (n > 0 && (!d_table || !d_ids || !d_out))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    embed_kernel<<<(unsigned)n, KCU_ROW_THREADS, 0, kcu_stream(c)>>>(type, (const uint8_t *)d_table,
                                                                     row_bytes, dim, d_ids, d_out);
    return kcu_check_launch("kcu_embed");
}

/* ---- RMSNorm ---- */

__global__ static void rmsnorm_kernel(const float *x, const float *w, float *y, int64_t dim,
                                      float eps)
{
    __shared__ float scratch[KCU_WARP];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        acc = kcu_sumsq_step(acc, xr[j]);
    }
    const float scale = kcu_rms_scale(kcu_block_sum(acc, scratch), dim, eps);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        yr[j] = kcu_rms_apply(xr[j], scale, w ? w[j] : 1.0f);
    }
}

extern "C" int kcu_rmsnorm(kcu_ctx *c, const float *d_x, const float *d_w, float *d_y, int64_t n,
                           int64_t dim, float eps)
{
    if (!c || n < 0 || dim <= 0 || n > INT32_MAX || (n > 0 && (!d_x || !d_y))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    rmsnorm_kernel<<<(unsigned)n, KCU_NORM_THREADS, 0, kcu_stream(c)>>>(d_x, d_w, d_y, dim, eps);
    return kcu_check_launch("kcu_rmsnorm");
}

/* ---- element-wise ---- */

__global__ static void add_bias_kernel(float *x, const float *b, int64_t n, int64_t dim)
{
    const int64_t total = n * dim;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        x[i] += b[i % dim];
    }
}

extern "C" int kcu_add_bias(kcu_ctx *c, float *d_x, const float *d_b, int64_t n, int64_t dim)
{
    if (!c || n < 0 || dim <= 0 || (n > 0 && (!d_x || !d_b))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    add_bias_kernel<<<ew_blocks(n * dim), KCU_EW_THREADS, 0, kcu_stream(c)>>>(d_x, d_b, n, dim);
    return kcu_check_launch("kcu_add_bias");
}

__global__ static void add_kernel(float *y, const float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        y[i] += x[i];
    }
}

extern "C" int kcu_add(kcu_ctx *c, float *d_y, const float *d_x, int64_t n)
{
    if (!c || n < 0 || (n > 0 && (!d_y || !d_x))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    add_kernel<<<ew_blocks(n), KCU_EW_THREADS, 0, kcu_stream(c)>>>(d_y, d_x, n);
    return kcu_check_launch("kcu_add");
}

__global__ static void swiglu_kernel(float *gate, const float *up, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        gate[i] = kcu_swiglu_elem(gate[i], up[i]);
    }
}

extern "C" int kcu_swiglu(kcu_ctx *c, float *d_gate, const float *d_up, int64_t n)
{
    if (!c || n < 0 || (n > 0 && (!d_gate || !d_up))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    swiglu_kernel<<<ew_blocks(n), KCU_EW_THREADS, 0, kcu_stream(c)>>>(d_gate, d_up, n);
    return kcu_check_launch("kcu_swiglu");
}

/* ---- RoPE ---- */

/* One block per token: the token's cos/sin table into shared memory (the angle sequence of
 * kc_rope_cache_yarn, YaRN's ramp and magnitude included), then every (head, pair) rotated. */
__global__ static void rope_kernel(float *x, int n_head, int head_dim, int n_rot,
                                   const int32_t *pos, float theta_scale, int neox,
                                   float freq_scale, const float *ff, float ext_factor, float lo,
                                   float span, float mscale)
{
    extern __shared__ float cs[];
    const int half = n_rot / 2;
    const int32_t p = pos[blockIdx.x];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float theta = kcu_rope_yarn(kcu_rope_theta(p, theta_scale, i), freq_scale, ff, i,
                                          ext_factor, lo, span);
        cs[2 * i] = kcu_mul_rn(cosf(theta), mscale);
        cs[2 * i + 1] = kcu_mul_rn(sinf(theta), mscale);
    }
    __syncthreads();
    float *xt = x + (int64_t)blockIdx.x * n_head * head_dim;
    for (int k = threadIdx.x; k < n_head * half; k += blockDim.x) {
        const int h = k / half;
        const int i = k % half;
        int i0, i1;
        kcu_rope_index(i, n_rot, neox, &i0, &i1);
        float *xh = xt + (int64_t)h * head_dim;
        kcu_rope_pair(&xh[i0], &xh[i1], cs[2 * i], cs[2 * i + 1]);
    }
}

extern "C" int kcu_rope(kcu_ctx *c, float *d_x, int64_t n, int n_head, int head_dim, int n_rot,
                        const int32_t *d_pos, float base, bool neox, const kcu_rope_scaling *s)
{
    if (!c || n < 0 || n > INT32_MAX || n_head <= 0 || head_dim <= 0 || n_rot <= 0 ||
        n_rot > head_dim || n_rot % 2 != 0 || (n > 0 && (!d_x || !d_pos))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    const kcu_rope_scaling none = {1.0f, nullptr, 0.0f, 1.0f, {0.0f, 0.0f}};
    if (!s) {
        s = &none;
    }
    /* on the host: powf and logf differ on the device (see kcu_math.h) */
    const float theta_scale = kcu_rope_theta_scale(base, n_rot);
    const float mscale = kcu_rope_yarn_mscale(s->attn_factor, s->freq_scale, s->ext_factor);
    const float lo = s->ext_factor != 0.0f ? s->corr_dims[0] : 0.0f;
    const float span =
        s->ext_factor != 0.0f ? kcu_rope_yarn_span(s->corr_dims[0], s->corr_dims[1]) : 0.001f;
    const size_t smem = (size_t)n_rot * sizeof(float);
    rope_kernel<<<(unsigned)n, KCU_ROW_THREADS, smem, kcu_stream(c)>>>(
        d_x, n_head, head_dim, n_rot, d_pos, theta_scale, neox ? 1 : 0, s->freq_scale,
        s->d_freq_factors, s->ext_factor, lo, span, mscale);
    return kcu_check_launch("kcu_rope");
}

/* ---- row gather ---- */

__global__ static void gather_rows_kernel(float *dst, const float *src, const int32_t *rows,
                                          int64_t dim)
{
    const int64_t i = blockIdx.x;
    const float *s = src + (int64_t)rows[i] * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        dst[i * dim + j] = s[j];
    }
}

extern "C" int kcu_gather_rows(kcu_ctx *c, float *d_dst, const float *d_src, const int32_t *d_rows,
                               int32_t n, int64_t dim)
{
    if (!c || n < 0 || dim <= 0 || (n > 0 && (!d_dst || !d_src || !d_rows))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    gather_rows_kernel<<<(unsigned)n, KCU_ROW_THREADS, 0, kcu_stream(c)>>>(d_dst, d_src, d_rows,
                                                                           dim);
    return kcu_check_launch("kcu_gather_rows");
}
