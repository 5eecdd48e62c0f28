/*
 * KV cache events: vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py) in C, so that
 * llm-d-kv-cache's indexer and any other vLLM KV-event consumer can follow what this pod has
 * cached.
 *
 * The engine reports block events through a kvc_event_sink (engine/cache/kvcache.h) on its
 * stepping thread; the sink's callbacks only encode into a pending batch, and flush (once per
 * engine step) hands the finished batch to the publisher's thread through a bounded queue. That
 * thread owns both ZeroMQ sockets, numbers the batches and keeps the replay buffer.
 *
 * Wire format (a contract: llm-d-kv-cache's vllm_adapter.go and vLLM's own subscribers parse it):
 *   PUB message, three frames: [topic, seq (8 bytes, big-endian unsigned; 0, 1, 2, ... one per
 *   batch), payload]. payload is msgpack, the array_like form of vLLM's KVEventBatch:
 *     [ts (float64, seconds since the epoch), [event, ...], data_parallel_rank (int)]
 *   and each event a tagged array:
 *     ["BlockStored", [hash u64, ...], parent u64 | nil, [token id, ...], block_size,
 *      nil (lora_id), medium, lora_name | nil]
 *         (n hashes and n * block_size tokens; parent nil when the chain starts the sequence)
 *     ["BlockRemoved", [hash u64, ...], medium]
 *     ["AllBlocksCleared"]
 *   Replay (optional ROUTER socket): a DEALER client sends ["", start seq (8 bytes BE)] and gets,
 *   for every kept batch with seq >= start, ["", seq, payload], then the end marker
 *   ["", ff ff ff ff ff ff ff ff (-1), ""]. Only the last buffer_steps batches are kept. A request
 *   without the "" gets answers without it. (A REQ client, as in vLLM's example subscriber, can
 *   read only the first answer: REQ takes one reply per request.)
 *
 * Delivery is best effort, as in vLLM: a PUB socket drops what a slow or absent subscriber cannot
 * take (past hwm), and a full queue drops whole batches (counted; they get no seq).
 */
#ifndef TANDEM_AGENT_KV_EVENTS_H
#define TANDEM_AGENT_KV_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cache/kvcache.h"

/* End marker of a replay: -1 as an 8-byte big-endian signed integer. */
#define KV_EVENTS_END_SEQ UINT64_MAX

struct kv_events_config {
    const char *endpoint;        /* PUB endpoint (required); vLLM's default: tcp, any host, 5557 */
    const char *replay_endpoint; /* ROUTER endpoint, always bound (vLLM: port 5558); NULL: none */
    const char *topic;           /* first frame of every message, e.g. "kv@10.0.0.7:8000@model";
                                    copied; NULL → "" (vLLM's default) */
    const char *medium;          /* storage tier named in every event; copied; NULL → "GPU" */
    int data_parallel_rank;      /* stamped on every batch (0) */
    int buffer_steps;            /* batches kept for replay; 0 → 10000 */
    int hwm;                     /* ZMQ_SNDHWM of the PUB socket, in messages; 0 → 100000 */
    int max_queue_size;          /* batches waiting for the thread; 0 → 100000 */
    size_t max_batch_bytes;      /* a pending batch that grows past this is queued early, so one
                                    step may span two batches; 0 → 16 MiB */
    int force_bind;              /* 1: bind endpoint whatever its form (vLLM's rule below would
                                    connect "tcp://10.0.0.7:5557") */
};

/* vLLM's rule for the PUB endpoint: bind when it contains "*" or "::" or starts with ipc:// or
 * inproc://; otherwise connect (the indexer binds, as in llm-d's centralized mode). */
bool kv_events_endpoint_binds(const char *endpoint);

struct kv_events;

/* Creates the sockets (binds or connects now, so a taken port fails here with an error naming the
 * endpoint) and starts the publisher thread. c and its strings are copied. NULL on failure, with
 * a message in err (which may be NULL/0). */
struct kv_events *kv_events_new(const struct kv_events_config *c, char *err, size_t errlen);

/* Fills out with callbacks feeding p, for engine_config.kv_events. The callbacks may run on any
 * one thread at a time together with kv_events_publish_all_cleared; they never block on the
 * network. After kv_events_close they discard what they are given. p must outlive their use. */
void kv_events_sink(struct kv_events *p, kvc_event_sink *out);

/* Queues one batch holding only AllBlocksCleared ("this pod's cache is gone": on start-up and on
 * a clean shutdown). Events still pending from an unfinished step are queued first as their own
 * batch, so order is kept. Thread-safe w.r.t. the sink callbacks. No-op after kv_events_close. */
void kv_events_publish_all_cleared(struct kv_events *p);

/* Queues what is pending, publishes everything queued, stops the thread and closes the sockets,
 * giving the network up to timeout_ms (ZMQ_LINGER) to take the last messages. Idempotent (not
 * to be called from two threads at once); the stats stay readable. */
void kv_events_close(struct kv_events *p, int timeout_ms);

/* Closes (timeout 1000 ms) if needed and frees. NULL is fine. */
void kv_events_free(struct kv_events *p);

struct kv_events_stats {
    uint64_t batches_published;   /* sent on the PUB socket (a PUB drops past its HWM unseen) */
    uint64_t events_published;    /* events in those batches */
    uint64_t batches_dropped;     /* lost: the queue was full, or out of memory */
    uint64_t replay_requests;     /* well-formed replay requests answered */
    uint64_t bad_replay_requests; /* malformed ones, ignored */
    uint64_t next_seq;            /* seq the next published batch gets */
};
void kv_events_get_stats(struct kv_events *p, struct kv_events_stats *out);

/* ---- encoding without sockets (unit tests, fuzz corpus) ---- */

enum kv_event_type { KV_EVENT_BLOCK_STORED, KV_EVENT_BLOCK_REMOVED, KV_EVENT_ALL_CLEARED };

/* One event for kv_events_encode_batch; pointers are borrowed. */
struct kv_event {
    enum kv_event_type type;
    kvc_stored_event stored; /* KV_EVENT_BLOCK_STORED (block_ids unused) */
    const kvc_hash *hashes;  /* KV_EVENT_BLOCK_REMOVED: [n_hashes] evicted blocks */
    int32_t n_hashes;
};

/* Encodes one payload exactly as the publisher sends it: ts, events[0..n_events), medium (NULL →
 * "GPU") and data_parallel_rank. On success *out is a malloc'd buffer of *out_len bytes that the
 * caller frees, and 0 is returned; -EINVAL for a malformed event (negative counts, NULL arrays,
 * block_size < 1 for a non-empty BlockStored), -ENOMEM. */
int kv_events_encode_batch(double ts, const struct kv_event *events, size_t n_events,
                           const char *medium, int data_parallel_rank, char **out, size_t *out_len);

/* Test hook: while paused, the thread takes nothing from the queue (so a test can fill it). */
void kv_events__pause(struct kv_events *p, bool paused);

#endif /* TANDEM_AGENT_KV_EVENTS_H */
