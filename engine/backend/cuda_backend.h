/*
 * The CUDA backend's extras beyond backend_ops (engine/core/backend.h declares cuda_backend_ops
 * itself): device probing and KV-cache sizing for --device and --gpu-memory-utilization
 * (engine/cli/flags.c). Only in builds with TANDEM_HAVE_CUDA.
 */
#ifndef TANDEM_ENGINE_BACKEND_CUDA_BACKEND_H
#define TANDEM_ENGINE_BACKEND_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/backend.h"

/* Usable CUDA devices (the backend runs on device 0: CUDA_VISIBLE_DEVICES picks it); 0 with the
 * cause in err (no driver, no device, driver older than the runtime). */
int cuda_backend_device_count(char *err, size_t errlen);

/* CUDA graphs the backend holds (decode steps captured so far); for tests and the log. */
int cuda_backend_graphs(const backend *b);

/* Device memory the backend needs for m besides the KV pools, with max_batch_tokens rows of
 * scratch, max_seqs sequences and an attention context of max_ctx tokens: the weights as stored
 * on the device, plus scratch and workspaces. */
typedef struct cuda_mem_plan {
    size_t weight_bytes;  /* matrices, embedding table, norms and biases */
    size_t scratch_bytes; /* activations, matmul and attention workspaces, batch metadata */
} cuda_mem_plan;

int cuda_backend_mem_plan(const model *m, int32_t max_batch_tokens, int32_t max_seqs,
                          int32_t block_size, kv_dtype dt, int32_t max_ctx, cuda_mem_plan *plan,
                          char *err, size_t errlen);

/* The KV cache budget --gpu-memory-utilization util leaves on device 0:
 *   util * total - (memory in use now) - weights - scratch
 * 0 and *kv_bytes, or -ENODEV / -ENOMEM with err saying how much is needed and available. When
 * info is not NULL it gets a one-line summary for the startup log. With tp_size > 1, each of
 * devices 0..tp_size-1 holds one rank's shard (engine/model/shard.h) and the budget is the
 * smallest over them (one block count for all ranks). */
int cuda_backend_kv_budget(const model *m, int tp_size, int32_t max_batch_tokens, int32_t max_seqs,
                           int32_t block_size, kv_dtype dt, int32_t max_ctx, double util,
                           size_t *kv_bytes, char *info, size_t infolen, char *err, size_t errlen);

#endif
