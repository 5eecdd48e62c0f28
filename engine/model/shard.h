/*
 * One rank's share of a model for tensor parallelism (engine/core/tp.h, docs/tensor-parallel.md).
 *
 * model_shard returns a model whose layers hold rank `rank` of `size`:
 *   wq, bq:           the rank's n_head / size query heads (rows of wq)
 *   wk, wv, bk, bv:   its key/value heads: n_head_kv / size of them, or, when size is a multiple of
 *                     n_head_kv, the one head its query heads use (replicated, as vLLM does)
 *   wo:               the matching input columns (a copy: columns are not contiguous)
 *   w_gate, w_up:     rows [n_ff * rank / size, n_ff * (rank + 1) / size) ...
 *   w_down:           ... and the same input columns
 *   output:           vocabulary rows [vocab_begin, vocab_end) (of the token embedding when tied)
 * Norms, q/k norms and the token embedding are shared with the full model. cfg gets the local
 * n_head, n_head_kv and n_ff; n_vocab stays the full vocabulary (the embedding is replicated) and
 * tied_output is false. Row slices point into the full model's data: it must outlive the shard.
 */
#ifndef TANDEM_ENGINE_MODEL_SHARD_H
#define TANDEM_ENGINE_MODEL_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

/* Whether m can be split over size ranks: n_head divisible by size, n_head_kv by size (or size by
 * n_head_kv), n_ff by size, quantised column slices whole blocks, size <= n_vocab. 0 or -EINVAL
 * with err naming the dimension. */
int model_shard_check(const model *m, int size, char *err, size_t errlen);

/* Rank rank's shard of m (see above); vocab_begin/vocab_end get its logits columns. NULL with err
 * on failure. */
model *model_shard(const model *m, int rank, int size, int32_t *vocab_begin, int32_t *vocab_end,
                   char *err, size_t errlen);

/* The same shard's shapes and types without copying anything (for memory plans): the O and down
 * tensors' data point at the full tensors' and must not be read. */
model *model_shard_shapes(const model *m, int rank, int size, char *err, size_t errlen);

void model_shard_free(model *s);

/* The KV heads rank `rank` of `size` holds: [*first, *first + *count). */
void model_shard_kv_heads(const model_config *c, int rank, int size, int *first, int *count);

#endif
