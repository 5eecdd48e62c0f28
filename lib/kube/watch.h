/*
 * Watch streams: the splitter that turns a chunked newline-delimited JSON stream into events
 * ({"type":"ADDED","object":{...}} per line, the Kubernetes watch protocol), and kube_watch, which
 * opens a streaming ?watch=1 request and feeds the splitter from the curl write callback.
 *
 * Memory is bounded: the splitter keeps at most one partial line of up to max_line bytes.
 */
#ifndef TANDEM_LIB_KUBE_WATCH_H
#define TANDEM_LIB_KUBE_WATCH_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"

/* Default line cap for kube_watch (the API server's largest object is ~1.5 MiB by default, a
 * watch event wraps one). */
#define KUBE_WATCH_MAX_LINE (16u << 20)

struct kube_watch_splitter; /* newline-delimited JSON with partial-line carry-over */

/* A new splitter keeping at most max_line bytes of one line (0 → KUBE_WATCH_MAX_LINE). NULL on
 * OOM. */
struct kube_watch_splitter *kube_watch_splitter_new(size_t max_line);
void kube_watch_splitter_free(struct kube_watch_splitter *s);
/* Drops any partial line (for reuse on a new stream). */
void kube_watch_splitter_reset(struct kube_watch_splitter *s);
/* Bytes of a partial line held. */
size_t kube_watch_splitter_pending(const struct kube_watch_splitter *s);

enum kube_event_type {
    KUBE_EVENT_ADDED,
    KUBE_EVENT_MODIFIED,
    KUBE_EVENT_DELETED,
    KUBE_EVENT_BOOKMARK,
    KUBE_EVENT_ERROR, /* object is a metav1.Status (code 410 → relist) */
};

/* "ADDED", ... */
const char *kube_event_type_name(enum kube_event_type t);

/* Called once per event; object is borrowed (valid during the call; json_object_get to keep it).
 * Returning non-zero stops the stream and is returned by feed / kube_watch. */
typedef int (*kube_event_cb)(void *ud, enum kube_event_type type, struct json_object *object);

/* Feeds len bytes. Calls cb for each complete line (blank lines ignored, "\r\n" tolerated).
 * Returns 0, cb's non-zero value, -EINVAL with err naming the problem for a malformed line (not
 * JSON, no "type"/"object", unknown type), -E2BIG for a line over max_line, -ENOMEM. After an
 * error the splitter must be reset before reuse. */
int kube_watch_splitter_feed(struct kube_watch_splitter *s, const char *data, size_t len,
                             kube_event_cb cb, void *ud, char *err, size_t errlen);

/* End of stream: a final line without its '\n' is processed like a complete one. Same returns as
 * feed. */
int kube_watch_splitter_finish(struct kube_watch_splitter *s, kube_event_cb cb, void *ud, char *err,
                               size_t errlen);

struct kube_watch_options {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version; /* NULL/"" = start from "most recent" (synthetic ADDEDs) */
    int allow_bookmarks;          /* allowWatchBookmarks=true */
    long timeout_seconds;         /* timeoutSeconds=N server-side; 0 = unset */
    long inactivity_timeout_ms;   /* no bytes for this long → -ETIMEDOUT; 0 = off */
    const volatile int *stop;     /* polled at least every 200 ms; non-zero → return 0 */
};

/* Opens a watch and blocks until the stream ends (0), *stop is set (0), cb returns non-zero (that
 * value), or an error: a KUBE_E* code for a non-2xx answer (410 → KUBE_EEXPIRED) or a transport
 * failure, -ETIMEDOUT for inactivity, -EINVAL / -E2BIG from the splitter. ERROR events are
 * passed to cb (the informer maps code 410 to a relist). No overall curl timeout applies. */
int kube_watch(struct kube_client *c, const struct kube_resource *r, const char *ns,
               const struct kube_watch_options *o, kube_event_cb cb, void *ud,
               struct kube_error *err);

#endif /* TANDEM_LIB_KUBE_WATCH_H */
