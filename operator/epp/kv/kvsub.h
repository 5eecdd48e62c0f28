/*
 * The KV-event subscriber: llm-d's pod-discovery mode (reference §4.2). One thread holds a SUB
 * socket per pod, connected to the pod's publisher (tcp://<ip>:5557, topic filter "kv@"), decodes
 * each batch (kvevents.h) and applies it to the index (kvindex.h) under the pod's id — the
 * endpoint address "ip:port" the EPP schedules on, which is also the pod part of the topic our
 * agent publishes (a topic naming another pod is counted, and indexed under the subscribed id).
 *
 * Sequence numbers, per pod: a publisher numbers its batches 0, 1, 2, ... from its start and keeps
 * the last ones for replay on its ROUTER socket (tcp://<ip>:5558). So:
 *  - on joining (a pod is added), the subscriber asks for a replay from seq 0: it ingests what the
 *    pod still keeps (its history since start, unless the ring wrapped) and is "synced" when the
 *    end marker comes. A publisher without a replay socket (vLLM's default) fails the replay
 *    (counted), and the pod becomes synced at its first live batch, whatever its seq;
 *  - a live batch past the expected seq is a gap: the SUB socket is set aside (its messages wait
 *    in ZeroMQ's queue), a replay from the expected seq is asked for, its batches are ingested in
 *    order, then the held batch and the queued ones, duplicates skipped; a failed or short replay
 *    leaves the gap in place (counted) and ingestion goes on;
 *  - a batch below the expected seq outside that duplicate window means the publisher restarted:
 *    the pod is purged and joined again (our agent starts every run with AllBlocksCleared anyway).
 * A replay is bounded by replay_timeout_ms, and other pods are served while it runs.
 * Batches that do not decode (poison pills) are dropped and counted; their seq still counts.
 * AllBlocksCleared and removing a pod purge the pod from the index.
 *
 * Threading: every function here may be called from any thread; the socket work happens on the
 * subscriber's own thread, which add/remove wake through an eventfd.
 */
#ifndef TANDEM_OPERATOR_EPP_KV_KVSUB_H
#define TANDEM_OPERATOR_EPP_KV_KVSUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "operator/epp/kv/kvindex.h"

#define KVSUB_DEFAULT_PORT        5557
#define KVSUB_DEFAULT_REPLAY_PORT 5558
#define KVSUB_DEFAULT_FILTER      "kv@"
#define KVSUB_DEFAULT_REPLAY_MS   2000
#define KVSUB_DEFAULT_RCVHWM      100000

struct kvsub_config {
    struct kvidx *index;      /* borrowed; must outlive the subscriber */
    const char *topic_filter; /* SUB prefix; NULL → "kv@" (llm-d topicFilter) */
    int replay_timeout_ms;    /* a whole replay; 0 → 2000 */
    int rcvhwm;               /* per-pod SUB queue, in messages; 0 → 100000 */
};

struct kvsub;

/* Starts the thread. NULL with a message when c is bad or a resource is missing. */
struct kvsub *kvsub_start(const struct kvsub_config *c, char *err, size_t errlen);

/* Stops the thread, closes every socket and frees; the index keeps what was ingested. NULL ok. */
void kvsub_stop(struct kvsub *s);

/* Subscribes to a pod: pod is its id in the index ("ip:port"), ip the address to connect to
 * (IPv4 or IPv6 text, no brackets), port its publisher (0 → 5557), replay_port its ROUTER
 * (0 → 5558, -1 → none). 0, -EEXIST (already subscribed), -EINVAL (bad name/address/port),
 * -ENOMEM. The sockets are opened on the subscriber thread soon after. */
int kvsub_add_pod(struct kvsub *s, const char *pod, const char *ip, int port, int replay_port);

/* Unsubscribes and purges the pod from the index (on the subscriber thread, soon after).
 * 0 or -ENOENT. */
int kvsub_remove_pod(struct kvsub *s, const char *pod);

struct kvsub_pod_stats {
    bool synced;               /* joined and following the stream (see above) */
    bool replaying;            /* a replay is in flight */
    uint64_t next_seq;         /* the seq expected next */
    uint64_t batches;          /* batches applied (live or replayed) */
    uint64_t events;           /* events applied */
    uint64_t blocks_stored;    /* hashes in BlockStored events applied */
    uint64_t blocks_removed;   /* hashes in BlockRemoved events applied */
    uint64_t clears;           /* AllBlocksCleared applied */
    uint64_t unknown_events;   /* events with an unknown tag, skipped */
    uint64_t decode_errors;    /* messages dropped: bad frames, topic, seq or payload */
    uint64_t index_errors;     /* events the index refused (bad tier name, out of memory) */
    uint64_t gaps;             /* live batches past the expected seq */
    uint64_t gaps_unrepaired;  /* gaps a replay could not close */
    uint64_t replays;          /* replays asked for (joins included) */
    uint64_t replay_failures;  /* timed out, malformed answers, or no replay socket */
    uint64_t replayed;         /* batches ingested from replays */
    uint64_t duplicates;       /* batches skipped as already ingested */
    uint64_t restarts;         /* publisher restarts seen (seq went back) */
    uint64_t topic_mismatches; /* batches whose topic named another pod */
};

/* 0 and *out for a subscribed pod, -ENOENT otherwise. */
int kvsub_pod_stats(struct kvsub *s, const char *pod, struct kvsub_pod_stats *out);

/* Sums over the subscribed pods; *n_pods and *n_synced say how many and how many are synced. */
void kvsub_stats(struct kvsub *s, struct kvsub_pod_stats *sum, size_t *n_pods, size_t *n_synced);

#endif
