/*
 * The CUDA kernels' C ABI: what engine/backend/cuda_backend.c calls. Plain C, no CUDA types, so
 * the backend compiles with the C compiler and links against libtandem_cuda (built by nvcc).
 *
 * Conventions
 *   - Pointers named d_* are device memory; h_* host memory. Row-major, f32 activations.
 *   - Every op is enqueued on the context's stream and returns at once; errors of the launch
 *     come back as a negative value (-EINVAL for bad arguments, -EIO for a CUDA error, whose text
 *     kcu_last_error() gives). kcu_sync() waits and reports errors of the kernels themselves.
 *   - A weight matrix W has `rows` output features and `cols` inputs (ggml's ne[1] and ne[0]):
 *     y[n][rows] = x[n][cols] . W^T, W stored row by row like the GGUF tensor (quantized types in
 *     blocks of TD_QK along cols).
 *   - KV pools use the layout of engine/core/batch.h:
 * [num_blocks][n_head_kv][block_size][head_dim], f32 or f16.
 *   - The per-element arithmetic of every kernel lives in kcu_math.h (__host__ __device__), so
 *     the CPU tests execute exactly what the GPU does.
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_H
#define TANDEM_KERNELS_CUDA_KCU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices and contexts (kcu_device.cu) ---- */

typedef struct kcu_device_info {
    char name[128];
    int cc_major, cc_minor; /* compute capability */
    size_t total_bytes, free_bytes;
    int sm_count;
} kcu_device_info;

/* Devices usable by this build: 0 when there is no driver, no device, or the driver is too old
 * for the runtime; why (when 0) goes to err. Never fails otherwise. */
int kcu_device_count(char *err, size_t errlen);

/* Fills *info for device dev; 0, or -ENODEV with err. */
int kcu_device_query(int dev, kcu_device_info *info, char *err, size_t errlen);

/* True when this build has code for the device's compute capability (SASS or PTX). */
bool kcu_device_supported(const kcu_device_info *info);

typedef struct kcu_ctx kcu_ctx;

/* A context on device dev: its stream and cuBLAS handle. NULL and err on failure (no device,
 * unsupported compute capability, out of memory), err naming the cause. */
kcu_ctx *kcu_ctx_create(int dev, char *err, size_t errlen);
void kcu_ctx_destroy(kcu_ctx *c);

/* Text of the last CUDA/cuBLAS error seen on this thread ("" when none). */
const char *kcu_last_error(void);

/* ---- memory ---- */

void *kcu_malloc(kcu_ctx *c, size_t bytes); /* NULL when out of device memory */
void kcu_free(kcu_ctx *c, void *d_ptr);
int kcu_memset(kcu_ctx *c, void *d_ptr, int value, size_t bytes);
int kcu_h2d(kcu_ctx *c, void *d_dst, const void *h_src, size_t bytes); /* async on the stream */
int kcu_d2h(kcu_ctx *c, void *h_dst, const void *d_src, size_t bytes); /* async on the stream */
int kcu_sync(kcu_ctx *c);                                              /* waits for the stream */

/* ---- CUDA graphs (kcu_device.cu) ---- */

/* A captured sequence of the context's stream work, replayed by one launch. Between
 * kcu_capture_begin and kcu_capture_end the ops enqueue nothing: they are recorded (with their
 * pointers and launch shapes as they are now), so nothing may allocate, synchronise or copy from
 * pageable memory meanwhile. */
typedef struct kcu_graph kcu_graph;

int kcu_capture_begin(kcu_ctx *c); /* 0, or -EIO (the stream is left as it was) */
/* Ends the capture; *out gets the instantiated graph (out NULL: discarded). 0 or -EIO. */
int kcu_capture_end(kcu_ctx *c, kcu_graph **out);
int kcu_graph_launch(kcu_ctx *c, kcu_graph *g); /* enqueues the whole graph on the stream */
void kcu_graph_free(kcu_graph *g);

/* Page-locked host memory for the async copies (falls back to malloc when pinning fails). */
void *kcu_host_alloc(size_t bytes);
void kcu_host_free(void *h_ptr);

/* ---- weights (kcu_matmul.cu) ---- */

typedef struct kcu_weight {
    tdtype type;  /* device type: TD_F16, TD_BF16 (F32/F16/BF16 sources), TD_Q8_0, TD_Q4_0 */
    int64_t rows; /* output features */
    int64_t cols; /* inputs; a multiple of TD_QK for quantized types */
    void *d_data;
} kcu_weight;

/* Uploads a host tensor of type src_type (F32, F16, BF16, Q8_0, Q4_0) as a device weight:
 * F32 and F16 become F16, BF16 stays BF16, quantized types stay quantized. */
int kcu_weight_upload(kcu_ctx *c, kcu_weight *w, tdtype src_type, const void *h_data, int64_t rows,
                      int64_t cols);
void kcu_weight_free(kcu_ctx *c, kcu_weight *w);

/* Device scratch the matmuls need for n input rows of width cols (converted activations). */
size_t kcu_matmul_workspace(const kcu_weight *w, int64_t n);

/* d_y[n][w->rows] = d_x[n][w->cols] . W^T. F16/BF16 through cuBLAS (f32 accumulation), Q8_0/Q4_0
 * through the dequantising kernels for small n (decode) and dequantise + cuBLAS for large n.
 * d_wsp: at least kcu_matmul_workspace(w, n) bytes. */
int kcu_matmul(kcu_ctx *c, const kcu_weight *w, const float *d_x, int64_t n, float *d_y,
               void *d_wsp, size_t wsp_bytes);

/* ---- token-wise ops (kcu_ops.cu) ---- */

/* d_out[i][dim] = row d_ids[i] of a host-layout table of type type, already on the device. */
int kcu_embed(kcu_ctx *c, tdtype type, const void *d_table, int64_t dim, const int32_t *d_ids,
              int32_t n, float *d_out);

/* RMSNorm of n rows of width dim: y = x / sqrt(mean(x^2) + eps) * w. y may equal x. */
int kcu_rmsnorm(kcu_ctx *c, const float *d_x, const float *d_w, float *d_y, int64_t n, int64_t dim,
                float eps);

/* d_x[i][j] += d_b[j] for n rows of width dim (biases). */
int kcu_add_bias(kcu_ctx *c, float *d_x, const float *d_b, int64_t n, int64_t dim);

/* d_y[i] += d_x[i], i < n (residuals). */
int kcu_add(kcu_ctx *c, float *d_y, const float *d_x, int64_t n);

/* d_gate[i] = silu(d_gate[i]) * d_up[i], i < n. */
int kcu_swiglu(kcu_ctx *c, float *d_gate, const float *d_up, int64_t n);

/* RoPE scaling for kcu_rope, kc_rope_cache_yarn's arguments: freq_scale (1: none), Llama 3's
 * divisors d_freq_factors (n_rot / 2 floats on the device, or NULL), YaRN's ext_factor (0:
 * none) and ramp corr_dims (kc_rope_yarn_corr_dims; unused without YaRN), and attn_factor, the
 * multiplier of cos and sin (1: none). */
typedef struct kcu_rope_scaling {
    float freq_scale;
    const float *d_freq_factors;
    float ext_factor, attn_factor;
    float corr_dims[2];
} kcu_rope_scaling;

/* RoPE in place on n tokens of n_head heads of head_dim, the first n_rot dims rotated, token i at
 * position d_pos[i]; neox: pairs (j, j + n_rot/2), else (2j, 2j + 1) (kc_rope_apply's rules).
 * s (NULL: none) scales the angles and magnitudes as kc_rope_cache_yarn does. */
int kcu_rope(kcu_ctx *c, float *d_x, int64_t n, int n_head, int head_dim, int n_rot,
             const int32_t *d_pos, float base, bool neox, const kcu_rope_scaling *s);

/* Copies rows d_src[d_rows[i]] to d_dst[i] (i < n, width dim): the rows that produce logits. */
int kcu_gather_rows(kcu_ctx *c, float *d_dst, const float *d_src, const int32_t *d_rows, int32_t n,
                    int64_t dim);

/* ---- paged KV cache and attention (kcu_attention.cu) ---- */

typedef struct kcu_paged_kv {
    void *d_k, *d_v; /* one layer's pools */
    bool f16;
    int block_size, n_head_kv, head_dim;
} kcu_paged_kv;

/* Writes token i's K and V rows (d_k/d_v: [n][n_head_kv * head_dim]) to slot d_slot[i] =
 * block * block_size + offset of the pools. */
int kcu_store_kv(kcu_ctx *c, const kcu_paged_kv *kv, const float *d_k, const float *d_v,
                 const int32_t *d_slot, int32_t n);

/* The batch's sequences for attention, all arrays in device memory:
 *   d_seq_tok[s]    index of sequence s's first new token in q/out
 *   d_seq_new[s]    its new tokens
 *   d_seq_start[s]  its start_pos (cached tokens before them)
 *   d_seq_bt[s]     offset of its block table in d_block_tables
 * Token j of sequence s (position start + j) attends causally over positions [0, start + j]. */
typedef struct kcu_attn_batch {
    int32_t n_seqs, n_tokens;
    const int32_t *d_seq_tok, *d_seq_new, *d_seq_start, *d_seq_bt;
    const int32_t *d_block_tables;
    int32_t max_new;  /* largest d_seq_new (host-known: picks the kernel and grid) */
    int32_t max_ctx;  /* largest start + new */
    const float *d_q; /* [n_tokens][n_head * head_dim] */
    float *d_out;     /* same shape */
    int n_head;
    float scale; /* usually 1/sqrt(head_dim) */
} kcu_attn_batch;

/* Scratch bytes kcu_attention needs for a batch (split-K partial results); 0 is allowed. */
size_t kcu_attention_workspace(const kcu_paged_kv *kv, const kcu_attn_batch *a);

/* Paged GQA attention: one decode kernel that walks the block table with an online softmax for
 * sequences with one new token, a chunked prefill kernel otherwise. */
int kcu_attention(kcu_ctx *c, const kcu_paged_kv *kv, const kcu_attn_batch *a, void *d_wsp,
                  size_t wsp_bytes);

/* ---- collectives for tensor parallelism (kcu_nccl.cu) ---- */

/* One NCCL communicator per device of a clique of this process. NCCL is loaded at run time
 * (dlopen of libnccl.so.2), so a build and its single-GPU runs need no NCCL installed. */
typedef struct kcu_comm kcu_comm;

/* comms[i] for device i of 0..n-1 (ncclCommInitAll); 0, or -ENOSYS (NCCL not found, or a build
 * without nccl.h) / -EIO with err naming the cause. */
int kcu_comm_init_all(int n, kcu_comm **comms, char *err, size_t errlen);

/* In-place sum of d_buf[0..n) over the clique, enqueued on c's stream (c on comm's device). */
int kcu_all_reduce_sum(kcu_comm *comm, kcu_ctx *c, float *d_buf, size_t n);

/* Makes operations in flight on comm fail (from any thread); comm must still be destroyed. */
void kcu_comm_abort(kcu_comm *comm);
void kcu_comm_destroy(kcu_comm *comm);

#ifdef __cplusplus
}
#endif

#endif
