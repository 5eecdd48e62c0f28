/*
 * The paged KV block manager: pure bookkeeping of which KV blocks each sequence owns, with
 * vLLM v1 semantics (vllm/v1/core/block_pool.py, kv_cache_utils.py). No tensor lives here.
 *
 * Layout contract. A block id is an index into the backend's KV pools (engine/core/batch.h):
 * per layer K[layer][block][n_head_kv][block_size][head_dim] and V likewise, so token position
 * p of a sequence lives in block blocks[p / block_size] at offset p % block_size. Ids run
 * 1 .. num_blocks-1; block 0 is vLLM's reserved null block and is never handed out, so
 * capacity is num_blocks-1 blocks and usage = 1 - free / (num_blocks - 1).
 *
 * Free blocks sit in an intrusive doubly linked LRU queue (O(1) removal from the middle). A
 * sequence's blocks are returned in reverse order, so the tail of a chain (the block covering
 * the most hashed tokens) is evicted first. Blocks with ref_cnt > 0 are never in the queue.
 *
 * Prefix caching: each FULL block i of a sequence gets a chained 64-bit hash
 *   h_i = SHA-256(h_{i-1} (the kvc's seed for i = 0), lora hash, salt hash (i = 0 only),
 *                 the block's token ids) truncated to its last 8 bytes read big-endian
 * (the same truncation vLLM applies for int KV-event hashes). Hashes are stable for a given
 * hash_seed within and across processes: they travel in KV events, so the encoding is a wire
 * contract (test_kvcache.c pins values computed independently). Byte for byte, with T(x) the
 * last 8 bytes of SHA-256(x) read as a big-endian uint64 and be64 a big-endian uint64:
 *   seed           = T("tandem-kvc-seed:" be64(hash_seed))
 *   extra(s)       = T("tandem-kvc-extra:" s)                  (cache_salt, lora name; no NUL)
 *   h_i            = T(be64(parent) flags [be64(lora)] [be64(salt)] tokens)
 * where parent is h_{i-1} (seed for i = 0), flags is one byte (1: lora present, 2: salt
 * present, or-ed), lora is extra(lora_name) in every block, salt is extra(cache_salt) in block 0
 * only, and tokens are the block's ids as 4-byte little-endian integers. A hash -> block map finds
 * cached blocks; a cached block whose ref_cnt drops to 0 stays cached (and counts as free) until it
 * is popped for reuse, which evicts it (BlockRemoved event). One block per hash: when two sequences
 * fill blocks with the same hash concurrently, only the first is registered; the second stays an
 * uncached block.
 *
 * Typical use by the scheduler, per sequence:
 *   kvc_seq_init -> [kvc_lookup -> hits] -> kvc_allocate(hits) -> (forward) -> kvc_cache_blocks
 *   -> ... -> kvc_allocate (more tokens) -> ... -> kvc_release (finish/preempt) -> kvc_seq_deinit.
 * Prefix hits go from the lookup to the allocation explicitly (vLLM's get_computed_blocks ->
 * allocate_slots(new_computed_blocks)); nothing is staged in the sequence in between.
 *
 * Not thread-safe: one engine thread drives a kvc and all of its sequences.
 */
#ifndef TANDEM_ENGINE_CACHE_KVCACHE_H
#define TANDEM_ENGINE_CACHE_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t kvc_hash;

/* Largest block size accepted (tokens per block). */
#define KVC_MAX_BLOCK_SIZE 4096
/* Largest num_blocks accepted (block 0 included). */
#define KVC_MAX_BLOCKS (1 << 24)

/* A BlockStored event: n_blocks consecutive newly cached blocks of one sequence. Every pointer
 * is borrowed and valid only during the callback. Carries what vLLM's BlockStored needs. */
typedef struct kvc_stored_event {
    const kvc_hash *block_hashes; /* [n_blocks] chained hashes, chain order */
    int32_t n_blocks;
    bool has_parent;          /* false: the first block starts the sequence (parent None) */
    kvc_hash parent_hash;     /* hash of the block before block_hashes[0] when has_parent */
    const int32_t *token_ids; /* [n_blocks * block_size] the blocks' tokens, concatenated */
    int32_t block_size;
    const int32_t *block_ids; /* [n_blocks] physical block ids (for a local mirror, if any) */
    const char *lora_name;    /* the sequence's LoRA name, NULL when none */
} kvc_stored_event;

/* Event callbacks; any may be NULL. Called synchronously from the kvc function that caused the
 * event (stored: kvc_cache_blocks; removed: kvc_allocate evicting a cached free block;
 * all_cleared: kvc_reset_prefix_cache). Callbacks must not call back into the kvc. */
typedef struct kvc_event_sink {
    void *user;
    void (*stored)(void *user, const kvc_stored_event *ev);
    /* One evicted block; hashes has n entries (always 1 today). */
    void (*removed)(void *user, const kvc_hash *hashes, int32_t n);
    void (*all_cleared)(void *user);
    /* Never called by the kvc: the engine calls it once at the end of every step and after
     * engine_reset_prefix_cache, under its lock, so that a publisher can send the events of one
     * step as one batch (vLLM publishes one KVEventBatch per engine step). Should only queue. */
    void (*flush)(void *user);
} kvc_event_sink;

typedef struct kvc kvc;

/* Prefix-cache hits of one lookup (vLLM's new_computed_blocks): cached blocks for a sequence's
 * leading full blocks, not held by it yet. kvc_lookup fills them and kvc_allocate takes them;
 * pass them on before anything else changes the pool (kvc_allocate asserts that each hit still
 * holds its block). The array is the caller's. */
typedef struct kvc_hits {
    int32_t *blocks;      /* [cap] block ids of the hits, chain order */
    int32_t cap;          /* a sequence's max_blocks always suffices; fewer limits the hits */
    int32_t n_blocks;     /* hits found */
    int32_t query_tokens; /* tokens looked up (vllm:prefix_cache_queries once committed) */
} kvc_hits;

/* Per-sequence block state. Memory owned by the caller (typically embedded in a request);
 * contents managed by the kvc functions only — read, never write. */
typedef struct kvc_seq {
    int32_t *blocks;    /* block table [n_blocks]: physical ids for positions [0, n_blocks*bs) */
    int32_t n_blocks;   /* blocks held (each holds one reference) */
    int32_t max_blocks; /* capacity of blocks/hashes = ceil(max_tokens / block_size) */
    kvc_hash *hashes;   /* [n_hashes] chained hashes of the full blocks seen so far */
    int32_t n_hashes;
    int32_t n_cached; /* leading blocks already registered (or found) in the prefix cache */
    bool has_lora;
    kvc_hash lora_hash; /* hash of lora_name, folded into every block */
    bool has_salt;
    kvc_hash salt_hash;    /* hash of cache_salt, folded into the first block only */
    const char *lora_name; /* borrowed; reported in stored events */
    int32_t group;         /* KV cache group (kvc_seq_set_group); 0 by default */
    kvc_hash group_key;    /* mixed into the prefix-cache keys of groups other than 0 */
} kvc_seq;

/* Creates a pool of num_blocks blocks (block 0 reserved; 2 .. KVC_MAX_BLOCKS) of block_size
 * tokens (1 .. KVC_MAX_BLOCK_SIZE). With enable_prefix_caching false, nothing is hashed or cached
 * and lookups always miss. hash_seed seeds the hash chain. sink may be NULL (copied). NULL on bad
 * arguments or out of memory. */
kvc *kvc_new(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, uint64_t hash_seed,
             const kvc_event_sink *sink);
/* Frees the pool (NULL is fine). Sequences must have been released/deinitialised before. */
void kvc_free(kvc *c);

int32_t kvc_block_size(const kvc *c);
int32_t kvc_num_blocks(const kvc *c); /* including the null block */

/* Prepares s for a sequence of at most max_tokens tokens (>= 1). cache_salt and lora_name (may
 * be NULL; empty counts as NULL) change every block hash (lora) or the first one (salt) so that
 * differently salted requests never share blocks. lora_name is borrowed for events and must
 * outlive s. 0, -EINVAL or -ENOMEM. */
int kvc_seq_init(kvc_seq *s, const kvc *c, int32_t max_tokens, const char *cache_salt,
                 const char *lora_name);
/* KV cache groups (vLLM's hybrid allocator: layers with different attention types keep separate
 * block tables over one pool). Puts s in group `group` (>= 0; call right after kvc_seq_init): its
 * blocks are cached under keys of their own, so that the groups of one sequence, which share
 * every block hash, never share a block. Only group 0 counts prefix-cache queries and hits and
 * reports stored and removed events (vLLM turns KV events off with the hybrid allocator; group 0
 * alone keeps the wire format of a one-group cache). */
void kvc_seq_set_group(kvc_seq *s, int32_t group);

/* Releases s's blocks (kvc_release) and frees its arrays. Safe on a zeroed or deinitialised s. */
void kvc_seq_deinit(kvc *c, kvc_seq *s);

/* Prefix-cache lookup for a sequence holding no blocks: finds the longest run of cached blocks
 * matching tokens[0..n_tokens) from the start (stopping at the first miss), limited to
 * max_cache_hit_length = n_tokens - 1 so at least one token is recomputed; hits are whole
 * blocks. Writes them to *hits (no reference taken: neither s nor the pool changes, apart from
 * s's cached block hashes) and returns the number of hit tokens (a multiple of block_size), or
 * -EINVAL (hits empty) when s holds blocks or n_tokens is out of range. Counters are updated
 * by the kvc_allocate that takes the hits. */
int32_t kvc_lookup(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_tokens, kvc_hits *hits);

/* Prefix-cache lookup for a sliding-window group (vLLM's SlidingWindowManager): tokens beyond
 * the window of the last hit position are never read again, so a hit needs only the last
 * ceil((window - 1) / block_size) blocks before it cached. Searches from the right among the
 * first min(max_hit_tokens, n_tokens - 1) / block_size blocks for the rightmost run of that many
 * cached blocks and reports the hit up to its end, with the null block 0 for the blocks before
 * the run; without such a run, the cached blocks from position 0 (a shorter hit). Returns the
 * hit tokens (hits->n_blocks entries, nulls included) or -EINVAL as kvc_lookup. */
int32_t kvc_lookup_window(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_tokens,
                          int32_t max_hit_tokens, int32_t window, kvc_hits *hits);

/* Free blocks kvc_allocate(c, s, n_total_tokens, hits) would consume: the fresh ones plus the
 * hits that sit in the free queue. -EINVAL where kvc_allocate would fail so. For allocating
 * several groups all or nothing: when the sum over the groups fits kvc_num_free_blocks, take
 * every group's hits first (kvc_allocate with the hits' tokens), then the fresh blocks. */
int32_t kvc_blocks_needed(const kvc *c, const kvc_seq *s, int32_t n_total_tokens,
                          const kvc_hits *hits);

/* Makes s hold blocks for positions [0, n_total_tokens): first takes the prefix hits of
 * kvc_lookup when hits is not NULL (touching them: out of the free queue, ref_cnt++), then pops
 * fresh blocks from the LRU head (evicting a cached one from the hash map -> removed event). All
 * or nothing: -ENOSPC (s unchanged) when not enough free blocks; -EINVAL when n_total_tokens
 * exceeds s's max_tokens or is below the hits, or hits are given for an s that holds blocks.
 * Taking hits commits their lookup: the query counter grows by hits->query_tokens and the hit
 * counter by the hit tokens (also for a lookup that found nothing). Null entries among the hits
 * (kvc_lookup_window) go into the table as 0. The caller may shorten a lookup's hits (lower
 * n_blocks) before taking them. */
int kvc_allocate(kvc *c, kvc_seq *s, int32_t n_total_tokens, const kvc_hits *hits);

/* Registers the full blocks of s among positions [0, n_computed) that are not cached yet
 * (their KV is now computed): hashes them from tokens (the sequence's tokens, at least
 * n_computed of them) and emits one stored event per run of consecutive newly cached blocks.
 * No-op without prefix caching. n_computed is clamped to the blocks s holds. */
void kvc_cache_blocks(kvc *c, kvc_seq *s, const int32_t *tokens, int32_t n_computed);

/* Drops s's references, returning blocks whose ref_cnt reaches 0 to the free queue tail in
 * reverse order (chain tail first in line for eviction). Cached blocks stay cached. s keeps its
 * hashes (tokens only ever grow, so they stay valid) and can allocate again. */
void kvc_release(kvc *c, kvc_seq *s);

/* Sliding-window attention (vLLM's SlidingWindowManager.remove_skipped_blocks): drops s's
 * references to the blocks wholly before position n_tokens (no query will read them again),
 * last first, and puts the null block 0 in their table entries; cached ones stay cached.
 * Entries already null are skipped; kvc_allocate and kvc_release handle null entries. Returns
 * the number of blocks dropped (0 when n_tokens <= block_size). */
int32_t kvc_release_before(kvc *c, kvc_seq *s, int32_t n_tokens);

/* Forgets every cached block and emits all_cleared; -EBUSY (nothing changes) while any block is
 * held by a sequence. 0 on success (also when prefix caching is off, without an event). */
int kvc_reset_prefix_cache(kvc *c);

/* Stats. Free blocks include cached blocks that nobody holds (they are evictable). */
int32_t kvc_num_free_blocks(const kvc *c);
int32_t kvc_num_cached_blocks(const kvc *c);      /* blocks in the hash map (held or free) */
double kvc_usage(const kvc *c);                   /* 1 - free / (num_blocks - 1) */
uint64_t kvc_prefix_queries(const kvc *c);        /* tokens looked up (vLLM prefix_cache_queries) */
uint64_t kvc_prefix_hits(const kvc *c);           /* tokens found (vLLM prefix_cache_hits) */
int32_t kvc_ref_cnt(const kvc *c, int32_t block); /* for tests and debugging; -1 if out of range */
/* Free queue order for tests: writes up to cap ids from the LRU head; returns the count. */
int32_t kvc_free_queue(const kvc *c, int32_t *ids, int32_t cap);

/* Hash of one block as the chain defines it (parent = NULL for the first block). For tests and
 * for anyone who must reproduce the engine's block keys. */
kvc_hash kvc_hash_block(const kvc *c, const kvc_hash *parent, const int32_t *tokens,
                        int32_t n_tokens, const kvc_hash *lora_hash, const kvc_hash *salt_hash);
/* Hash of a string extra key (cache_salt, lora name) as folded into block hashes. */
kvc_hash kvc_hash_string(const char *s);

/* Verifies the pool's internal invariants (free queue links and count, ref counts vs queue
 * membership, hash map vs block hashes). 0 when consistent, -EFAULT otherwise. O(num_blocks). */
int kvc_check(const kvc *c);

#endif
