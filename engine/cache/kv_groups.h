/*
 * KV cache groups: which block table each layer's KV lives under (vLLM's hybrid KV cache
 * manager, vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size).
 *
 * A model that mixes full-attention layers with sliding-window ones (gemma2, gemma3) needs the
 * whole context only in the former: the sliding layers' blocks before their window can go back
 * to the pool. So the layers are put in groups of equal size, each group attention-type pure, and
 * every sequence holds one block table per group over one shared pool (engine/cache/kvcache.h,
 * kvc_seq_set_group). A block then stores group_size layers' K and V: the backend keeps
 * group_size pools per K and V ("slots"), and layer l reads and writes slot layer_slot[l] of the
 * blocks of table layer_group[l]. As vLLM: the group size is the smallest number of layers of
 * one attention type (the largest when that is below 1.5 times the smallest), each type's layers
 * in consecutive chunks of that size, the last padded (an unused slot). Without the hybrid
 * manager there is one group and a slot per layer, the layout of a one-table cache.
 */
#ifndef TANDEM_ENGINE_CACHE_KV_GROUPS_H
#define TANDEM_ENGINE_CACHE_KV_GROUPS_H

#include <stdbool.h>
#include <stdint.h>

/* More groups than this and the plan falls back to one group (a pattern like one full-attention
 * layer among 60 sliding ones). */
#define KVG_MAX_GROUPS 32

typedef struct kv_groups {
    int32_t n_layer;
    int32_t n_groups;   /* block tables per sequence (>= 1) */
    int32_t group_size; /* layers per group: pools per K and V */
    /* per group: 0 full attention, > 0 a sliding window of that many positions (in the one-group
     * layout: the window when every layer slides, as Mistral's) */
    int32_t window[KVG_MAX_GROUPS];
    int32_t *layer_group; /* [n_layer] */
    int32_t *layer_slot;  /* [n_layer] in [0, group_size) */
} kv_groups;

/* Plans the groups of n_layer layers whose windows are layer_window[l] (0: full attention).
 * hybrid false, or one attention type, or more than KVG_MAX_GROUPS groups: the one-group layout.
 * 0, -EINVAL or -ENOMEM; free with kv_groups_free. */
int kv_groups_plan(kv_groups *g, int32_t n_layer, const int32_t *layer_window, bool hybrid);
void kv_groups_free(kv_groups *g);

/* Blocks one sequence of max_model_len tokens may hold at once over n_groups groups of the given
 * windows (kv_groups.n_groups, .window): a full group's
 * whole context, a sliding group's window plus one step's tokens (vLLM's
 * SlidingWindowSpec.max_memory_usage_bytes: cdiv(min(window - 1 + max_batched_tokens,
 * max_model_len), block_size) + 1, at most the whole context). In the one-group layout, the whole
 * context: a sequence that keeps its KV for a remote decoder frees nothing. */
int64_t kv_groups_blocks_per_seq(int32_t n_groups, const int32_t *window, int32_t max_model_len,
                                 int32_t max_batched_tokens, int32_t block_size);

#endif
