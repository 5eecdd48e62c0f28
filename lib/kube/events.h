/*
 * Event recorder: core/v1 Events about objects, as client-go's record.EventRecorder +
 * EventCorrelator write them (what `kubectl describe` shows under "Events").
 *
 * kube_event_record only queues (never blocks on the network); the recorder's thread writes:
 *   - a new event is POSTed as "<object name>.<16 hex digits of the unix time in ns>" in the
 *     object's namespace ("default" for cluster-scoped objects), with involvedObject (apiVersion,
 *     kind, namespace, name, uid, resourceVersion), reason, message, type (Normal|Warning),
 *     source.component/host, reportingComponent/reportingInstance, firstTimestamp =
 *     lastTimestamp = now, count 1;
 *   - a repeat (same object, type, reason, message and source, remembered for the last 4096
 *     distinct events) PATCHes the existing event's count and lastTimestamp (strategic merge
 *     patch); if that event is gone it is created again with the running count;
 *   - a per-object token bucket (client-go's spam filter: burst 25, one more every 5 minutes)
 *     drops the excess.
 * The queue is bounded (default 1000 events); when full, new events are dropped and counted.
 * Freeing the recorder writes what is still queued, then joins the thread.
 *
 * All functions are thread-safe.
 */
#ifndef TANDEM_LIB_KUBE_EVENTS_H
#define TANDEM_LIB_KUBE_EVENTS_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/common.h"
#include "lib/kube/client.h"

struct kube_event_recorder_options {
    const char *component; /* source.component / reportingComponent, required */
    const char *host;      /* source.host / reportingInstance; NULL = none */
    size_t queue_size;     /* 0 → 1000 */
    int burst;             /* per-object spam filter burst; 0 → 25, negative = no filter */
    double refill_qps;     /* per-object refill rate; 0 → 1/300 */
};

struct kube_event_recorder;

/* A new recorder writing through c (which must outlive it); o is copied. NULL on OOM, a missing
 * component, or when the thread cannot be started. */
struct kube_event_recorder *kube_event_recorder_new(struct kube_client *c,
                                                    const struct kube_event_recorder_options *o);

/* Writes what is queued, stops the thread and frees. NULL allowed. */
void kube_event_recorder_free(struct kube_event_recorder *r);

/*
 * Queues an event about obj (a Kubernetes object; its apiVersion, kind and metadata are copied
 * now, obj is not kept). type is "Normal" or "Warning"; reason a short CamelCase word (truncated
 * at 128 bytes); the message (printf format) is truncated at 1024 bytes on a UTF-8 boundary.
 * 0 queued, -ENOSPC dropped because the queue is full, -EINVAL for a bad type/reason or an object
 * without kind or metadata.name, -ESHUTDOWN while the recorder is being freed, -ENOMEM.
 */
int kube_event_record(struct kube_event_recorder *r, struct json_object *obj, const char *type,
                      const char *reason, const char *fmt, ...) TANDEM_PRINTF(5, 6);

struct kube_event_recorder_stats {
    unsigned long queued;       /* accepted by kube_event_record */
    unsigned long created;      /* POSTed */
    unsigned long patched;      /* repeats PATCHed */
    unsigned long dropped_full; /* the queue was full */
    unsigned long dropped_spam; /* the per-object bucket was empty */
    unsigned long failed;       /* writes the API server refused */
};
void kube_event_recorder_get_stats(struct kube_event_recorder *r,
                                   struct kube_event_recorder_stats *out);

/* Waits until every queued event has been written (or dropped): 0, or -ETIMEDOUT after
 * timeout_ms (-1 = no limit). */
int kube_event_recorder_flush(struct kube_event_recorder *r, long timeout_ms);

#endif /* TANDEM_LIB_KUBE_EVENTS_H */
