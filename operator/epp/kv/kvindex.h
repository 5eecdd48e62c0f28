/*
 * The precise KV-block index: which pods hold which KV block, as their KV events say
 * (llm-d-kv-cache's in-memory index, reference §4.4-4.5). A key is a block hash (u64, as
 * kvevents.c decodes it); its value is a small set of (pod, tier) entries.
 *
 * Bounds, as llm-d's two-level LRU: at most `size` keys (the least recently stored key goes
 * first) and at most `pod_cache_size` entries per key (the least recently stored entry goes).
 * Keys live in shards, each with its own LRU and an equal part of `size`; an index under 2048
 * keys has one shard and so an exact LRU. Lookups do not refresh a key's recency.
 *
 * A reverse index (pod → its entries) makes purging a pod O(its entries).
 *
 * Threading: every call is thread-safe. Writers (add/remove/purge) are serialised by one mutex;
 * readers (score and the queries) take only a shard's read lock for one key at a time, so a
 * score waits at most for one key's update, never for a whole batch or a purge.
 */
#ifndef TANDEM_OPERATOR_EPP_KV_KVINDEX_H
#define TANDEM_OPERATOR_EPP_KV_KVINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "operator/epp/endpoint.h"

#define KVIDX_DEFAULT_SIZE           100000000 /* keys (llm-d inMemoryConfig.size) */
#define KVIDX_DEFAULT_POD_CACHE_SIZE 10        /* entries per key (podCacheSize) */
#define KVIDX_MAX_POD_CACHE_SIZE     255
#define KVIDX_MAX_TIERS              8
#define KVIDX_MAX_NAME               128 /* pod ids and tier names: shorter than this */
#define KVIDX_MAX_PODS               65535

struct kvidx_tier_weight {
    const char *name; /* lowercase, e.g. "gpu" */
    double weight;
};

struct kvidx_config {
    uint64_t size;           /* max keys; 0 → KVIDX_DEFAULT_SIZE */
    uint32_t pod_cache_size; /* max entries per key; 0 → 10 */
    /* tier weights (llm-d kvCacheBackendConfigs); n_tiers 0 → gpu 1.0, cpu 0.8. A tier that
     * events name but that is not here gets weight 1.0, and counts against KVIDX_MAX_TIERS. */
    const struct kvidx_tier_weight *tiers;
    size_t n_tiers;
};

struct kvidx;

/* NULL with a message on a bad config (naming the field) or out of memory. */
struct kvidx *kvidx_new(const struct kvidx_config *c, char *err, size_t errlen);
void kvidx_free(struct kvidx *idx);

/* BlockStored: (pod, tier) now holds each of keys[0..n). Keys become most recently used; keys
 * past the bound evict the least recently used. tier NULL → "gpu". 0, or -EINVAL (pod/tier name
 * empty or too long, too many tiers or pods), -ENOMEM (the keys before the failing one stay). */
int kvidx_add(struct kvidx *idx, const char *pod, const char *tier, const uint64_t *keys, size_t n);

/* BlockRemoved: (pod, tier) no longer holds keys (unknown ones are ignored). A key left with no
 * entry is dropped. 0 or -EINVAL (bad name). */
int kvidx_remove(struct kvidx *idx, const char *pod, const char *tier, const uint64_t *keys,
                 size_t n);

/* AllBlocksCleared, or the pod is gone: drops every entry of pod and forgets it. 0 (also for an
 * unknown pod). */
int kvidx_purge_pod(struct kvidx *idx, const char *pod);

/* llm-d's LongestPrefix scoring of candidates pods[0..n_pods) against the request's keys
 * (chain order): a pod counts while it holds every key so far (block 0 first), and each held
 * key adds the largest weight among that pod's tiers for it. out[i] is for pods[i]; unknown pods
 * and pods without key 0 get {0, 0}. Returns the longest match over all candidates (blocks). */
int32_t kvidx_score(struct kvidx *idx, const uint64_t *keys, size_t n_keys, const char *const *pods,
                    size_t n_pods, struct epp_prefix_match *out);

struct kvidx_stats {
    uint64_t keys, entries, pods;
    uint64_t evicted_keys;    /* keys dropped by the size bound */
    uint64_t evicted_entries; /* entries dropped by the pod_cache_size bound */
};
void kvidx_stats(struct kvidx *idx, struct kvidx_stats *out);

struct kvidx_pod_info {
    char pod[KVIDX_MAX_NAME];
    uint64_t entries; /* over all tiers */
    char tier[KVIDX_MAX_TIERS][KVIDX_MAX_NAME];
    uint64_t tier_entries[KVIDX_MAX_TIERS];
    int n_tiers; /* tiers with entries */
};

/* Fills out[0..cap) with the known pods (any order); returns how many there are (may be > cap).
 * One pod: kvidx_pod(); 0 and out zeroed when unknown, else 1. */
size_t kvidx_pods(struct kvidx *idx, struct kvidx_pod_info *out, size_t cap);
int kvidx_pod(struct kvidx *idx, const char *pod, struct kvidx_pod_info *out);

struct kvidx_holder {
    char pod[KVIDX_MAX_NAME];
    char tier[KVIDX_MAX_NAME];
};

/* Which (pod, tier) entries hold key, oldest first: fills out[0..cap), returns how many. */
size_t kvidx_lookup(struct kvidx *idx, uint64_t key, struct kvidx_holder *out, size_t cap);

#endif
