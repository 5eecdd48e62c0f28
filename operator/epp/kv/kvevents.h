/*
 * KV events as the EPP receives them: vLLM's KVEventBatch (ARCHITECTURE.md §6, reference §4.1),
 * published by our agent (agent/kv_events.h), by vLLM and by SGLang. Pure functions, no sockets:
 * kvsub.c feeds them the frames it reads, the fuzz target feeds them anything.
 *
 * A message is three frames [topic, seq (8 bytes big-endian), payload]; the payload is the
 * msgpack array [ts, [event, ...], data_parallel_rank] (the rank may be nil or absent), and each
 * event a tagged array:
 *   ["BlockStored", hashes, parent|nil, token_ids, block_size, lora_id|nil, medium|nil,
 *    lora_name|nil, extra_keys|nil, group_idx|nil, kv_cache_spec_kind|nil,
 *    kv_cache_spec_sliding_window|nil]   (everything after block_size may be missing)
 *   ["BlockRemoved", hashes, medium|nil, group_idx|nil]
 *   ["AllBlocksCleared"]
 * A hash is an unsigned integer or bytes; bytes become their last 8 bytes read big-endian
 * (llm-d's getHashAsUint64), so full 32-byte SHA-256 hashes and int hashes index alike.
 * Events with an unknown tag are skipped and counted (a newer publisher), never an error.
 */
#ifndef TANDEM_OPERATOR_EPP_KV_KVEVENTS_H
#define TANDEM_OPERATOR_EPP_KV_KVEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on what one payload may carry; past them the payload is refused, not truncated. */
#define KVEV_MAX_PAYLOAD (32u << 20) /* bytes */
#define KVEV_MAX_EVENTS  (1u << 20)  /* per batch */
#define KVEV_MAX_HASHES  (1u << 22)  /* per event */
#define KVEV_MAX_TOKENS  (1u << 26)  /* per event */
#define KVEV_MAX_STR     256         /* medium, lora_name, kv_cache_spec_kind, pod, model */
#define KVEV_SEQ_LEN     8           /* the seq frame */
#define KVEV_REPLAY_END  UINT64_MAX  /* seq of a replay's end marker (-1) */

enum kvev_type {
    KVEV_BLOCK_STORED,
    KVEV_BLOCK_REMOVED,
    KVEV_ALL_CLEARED,
};

/* One decoded event. Arrays and strings belong to the batch (kvev_batch_free). */
struct kvev_event {
    enum kvev_type type;
    const uint64_t *hashes; /* BlockStored, BlockRemoved: [n_hashes], chain order */
    uint32_t n_hashes;
    bool has_parent; /* BlockStored: false when parent is nil (the chain starts here) */
    uint64_t parent;
    const int32_t *token_ids; /* BlockStored: [n_tokens]; CPU offload may send none */
    uint32_t n_tokens;
    int32_t block_size; /* BlockStored: tokens per block */
    bool has_lora_id;   /* BlockStored: lora_id (deprecated for lora_name) */
    int64_t lora_id;
    char tier[KVEV_MAX_STR]; /* medium lowercased, "gpu" when nil or absent (llm-d DeviceTier) */
    const char *lora_name;   /* NULL when nil or absent */
    bool has_extra_keys;     /* extra_keys present and not nil (not decoded: MM/LoRA/salt) */
    bool has_group_idx;      /* group_idx (hybrid models' KV cache group) */
    int64_t group_idx;
    const char *kv_cache_spec_kind; /* NULL when nil or absent */
    bool has_sliding_window;
    int64_t sliding_window;
};

struct kvev_batch {
    double ts; /* seconds since the epoch */
    bool has_dp_rank;
    int64_t dp_rank;
    struct kvev_event *events; /* [n_events], known tags only, in order */
    uint32_t n_events;
    uint32_t n_unknown; /* events with a tag this decoder does not know, skipped */
    void *mem;          /* private: where the arrays live */
};

/* Decodes one payload into *out (zeroed first). 0, or -EINVAL with a message naming the event
 * index and field in err (which may be NULL/0), and nothing to free; -ENOMEM. On success free
 * with kvev_batch_free. Never reads past payload[len). */
int kvev_decode(const void *payload, size_t len, struct kvev_batch *out, char *err, size_t errlen);

/* Frees what kvev_decode allocated; the struct is zeroed. NULL or zeroed is fine. */
void kvev_batch_free(struct kvev_batch *b);

/* A parsed topic "kv@<pod>@<model>": both copied, NUL-terminated. */
struct kvev_topic {
    char pod[KVEV_MAX_STR];
    char model[KVEV_MAX_STR];
};

/* Splits a topic on '@' into exactly three parts, the first "kv" (llm-d drops anything else).
 * An IPv6 pod is bracketed ("kv@[fd00::1]:8000@m"); an '@' inside the brackets is refused like
 * any fourth part. Pod and model must be non-empty and shorter than KVEV_MAX_STR. 0 or -EINVAL
 * with a message. */
int kvev_parse_topic(const void *topic, size_t len, struct kvev_topic *out, char *err,
                     size_t errlen);

/* The seq frame: exactly 8 bytes, big-endian. 0 or -EINVAL. */
int kvev_parse_seq(const void *frame, size_t len, uint64_t *out, char *err, size_t errlen);

#endif
