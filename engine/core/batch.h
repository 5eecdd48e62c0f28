/*
 * One engine step's work for a compute backend: a ragged batch of tokens from several sequences,
 * each sequence with its block table into the paged KV cache. The scheduler produces it, the
 * backend (CPU now, CUDA later) consumes it; neither knows how the other works.
 *
 * Sequence i contributes seqs[i].n_new consecutive tokens of `tokens` (sequences in order, no
 * gaps), at positions start_pos .. start_pos + n_new - 1. Its KV for positions [0, start_pos) is
 * already in the cache; the backend writes the KV of the new tokens into their slots
 * (block_table[pos / block_size], offset pos % block_size) and attends causally over
 * [0, pos]. block_table must cover [0, start_pos + n_new).
 *
 * KV storage (owned by the backend, addressed by block index, one pool per layer and K/V):
 *   K[layer]: [num_blocks][n_head_kv][block_size][head_dim]   (vLLM's HND layout per block)
 *   V[layer]: same shape; element type f32 or f16 (kv_dtype).
 * Block 0 is never handed out by the block manager (vLLM's null block), so its contents are
 * unspecified.
 *
 * With KV cache groups (engine/cache/kv_groups.h; backend_config.kv_groups) a sequence has one
 * block table per group (group_tables) and there is one pool per group slot instead of per
 * layer: layer l stores its KV in pool layer_slot[l], at the blocks of table layer_group[l].
 * A sliding-window group's table holds the null block 0 for blocks before the window.
 */
#ifndef TANDEM_ENGINE_CORE_BATCH_H
#define TANDEM_ENGINE_CORE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

/* Hidden states a sequence wants out of a batch (embeddings): the final-normed hidden state (the
 * input of the LM head) of its last new token, or the sum of those of all its new tokens. */
typedef enum fwd_pool {
    FWD_POOL_NONE = 0,
    FWD_POOL_LAST, /* the last new token's */
    FWD_POOL_SUM,  /* summed over the new tokens (the engine averages over the chunks) */
} fwd_pool;

struct lora_adapter;

typedef struct fwd_seq {
    int32_t n_new;              /* tokens of this sequence in this batch (>= 1) */
    int32_t start_pos;          /* position of its first new token == tokens already cached */
    const int32_t *block_table; /* physical block ids for positions [0, start_pos + n_new) */
    /* with several KV cache groups: each group's table ([0] == block_table), n_blocks entries
     * each; NULL with one group */
    const int32_t *const *group_tables;
    int32_t n_blocks; /* entries in block_table */
    bool want_logits; /* produce logits for the last new token of this sequence */
    /* also the logits of every new token, into fwd_batch.row_logits (prompt logprobs); the
     * last one's go there as well as into logits when want_logits */
    bool all_logits;
    fwd_pool pool; /* hidden states into fwd_batch.hidden (FWD_POOL_NONE: none) */
    /* LoRA adapter of this sequence's tokens (engine/model/lora.h), NULL: the base model. Rows
     * of different adapters may share a batch; each row gets only its own adapter's deltas. */
    const struct lora_adapter *lora;
} fwd_seq;

typedef struct fwd_batch {
    int32_t n_tokens;      /* sum of seqs[i].n_new */
    const int32_t *tokens; /* [n_tokens] token ids */
    int32_t n_seqs;
    const fwd_seq *seqs; /* [n_seqs] */
    float *logits;       /* out: [number of seqs with want_logits][n_vocab], in seq order */
    float *hidden;       /* out: [number of seqs with a pool][n_embd], in seq order */
    float *row_logits;   /* out: [sum of n_new of the all_logits seqs][n_vocab], in seq order */
} fwd_batch;

#endif
