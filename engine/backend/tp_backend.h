/*
 * Tensor parallelism as a backend (tp_backend.c, engine/core/tp.h): create with
 * backend_config.tp_size >= 2 and tp_inner naming the backend each rank runs.
 */
#ifndef TANDEM_ENGINE_BACKEND_TP_BACKEND_H
#define TANDEM_ENGINE_BACKEND_TP_BACKEND_H

#include "engine/core/backend.h"

extern const backend_ops tp_backend_ops;

/* Bytes of KV storage one block takes on each rank when m runs on `size` ranks of inner: the
 * rank's share of the KV heads. This, not tp_backend_ops.kv_block_bytes, sizes the KV cache: a
 * KV budget is per rank (per device), as vLLM's --gpu-memory-utilization is. */
size_t tp_backend_kv_block_bytes(const backend_ops *inner, const model *m, int size,
                                 int32_t block_size, kv_dtype dt);

#endif
