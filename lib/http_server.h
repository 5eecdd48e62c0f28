/*
 * HTTP/1.1 server on a caller's libuv loop, built on libh2o 2.2 (the libuv flavour). Every Tandem
 * component that serves HTTP (the agent's OpenAI API, the EPP, health and /metrics endpoints, the
 * tandem-echo stand-in) uses it. docs/http.md explains the design and the h2o details behind it.
 *
 * What it does:
 *   - listens on host:port (IPv4 or IPv6 literal or a name; SO_REUSEADDR; port 0 picks a free port,
 *     see http_server_port), keep-alive HTTP/1.1 (and 1.0);
 *   - routes by method and exact path or path prefix; unknown paths get 404, known paths with
 *     another method 405 (with Allow); every error body is OpenAI-shaped JSON (http_respond_error),
 *     including the errors h2o itself produces (400 malformed request, 413 body too large, 417);
 *   - gives the handler the whole request body (bounded by max_body: larger → 413);
 *   - answers either at once or later (from any loop callback: a timer, an upstream client's
 *     completion), fully or as a stream of chunks (Server-Sent Events) with backpressure;
 *   - tells the producer of a late answer when the client went away (on_abort), by watching the
 *     connection while the request waits;
 *   - drains gracefully: stop accepting, close idle keep-alive connections, let in-flight requests
 *     and streams finish until a deadline, then close the rest; a callback when done;
 *   - optionally serves /metrics (a lib/metrics.h registry) and records per-request metrics:
 *     <prefix>http_requests_total and <prefix>http_request_duration_seconds labelled by
 *     route (the route's pattern, bounded cardinality), method and code, and
 *     <prefix>http_requests_in_flight.
 *
 * Threading: single-threaded. Every function must be called on the loop's thread (handlers and
 * callbacks run there). Use a uv_async_t to hand work over from other threads. h2o keeps
 * per-thread memory caches that are only released with the thread: run servers on long-lived
 * threads.
 *
 * Lifetimes and ownership:
 *   - struct http_server: http_server_new → (routes) → http_server_start → ... → http_server_drain
 *     → drained callback → http_server_free. A server that was never started may be freed at once.
 *     The loop must outlive the server; the server's handles are closed by the time the drained
 *     callback runs.
 *   - struct http_request: created by the server for each request and handed to the handler. It
 *     stays valid until the handler completes it (http_respond*, http_stream_end) or until its
 *     on_abort callback has returned, whichever comes first; after that, do not touch it. Every
 *     string and pointer obtained from it shares that lifetime. A handler that does not complete
 *     the request before returning must register on_abort to learn when to stop.
 */
#ifndef TANDEM_LIB_HTTP_SERVER_H
#define TANDEM_LIB_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lib/arena.h"
#include "lib/buf.h"
#include "lib/common.h"
#include "lib/metrics.h"

#define HTTP_SERVER_DEFAULT_MAX_BODY          (1024 * 1024) /* bytes */
#define HTTP_SERVER_DEFAULT_IDLE_TIMEOUT_MS   10000         /* keep-alive idle / request read */
#define HTTP_SERVER_DEFAULT_PROBE_MS          1000 /* client-gone check of waiting requests */
#define HTTP_SERVER_DEFAULT_MAX_STREAM_BUFFER (8 * 1024 * 1024) /* unsent stream bytes */

struct http_server;
struct http_request;

struct http_server_config {
    const char *host;         /* address or name to bind; NULL → "127.0.0.1" */
    int port;                 /* 0 → an ephemeral port */
    int backlog;              /* listen(2) backlog; 0 → 511 */
    size_t max_body;          /* request body limit; 0 → HTTP_SERVER_DEFAULT_MAX_BODY */
    uint64_t idle_timeout_ms; /* keep-alive idle and request-read timeout; 0 → default */
    uint64_t probe_ms;        /* how often waiting requests check their client; 0 → default */
    size_t max_stream_buffer; /* per streaming response, bytes queued unsent; 0 → default */
    const char *server_name;  /* "Server" header value; NULL → none */
    /* Registry for /metrics and the request metrics (not owned; must outlive the server).
     * NULL → the server keeps a private registry (see http_server_metrics). */
    struct metrics_registry *metrics;
    const char
        *metrics_prefix; /* prefix of the request metric names, e.g. "tandem_echo_"; NULL → "" */
    const char
        *metrics_path; /* built-in route rendering the registry, e.g. "/metrics"; NULL → none */
};

/* Fills c with the defaults above (host 127.0.0.1, port 0, no /metrics route). */
void http_server_config_init(struct http_server_config *c);

/* A handler: called once per request routed to it. It may answer before returning or later. */
typedef void (*http_handler_fn)(struct http_request *req, void *ud);

/* Called when a request that has not been completed can no longer be answered: the client went
 * away (reason "client disconnected") or the server is closing (reason "server shutting down").
 * The request is invalid once this returns; do not call any function on it from here. */
typedef void (*http_abort_fn)(struct http_request *req, void *ud, const char *reason);

/* Called once when a drain has finished and every handle is closed. The server may be freed here.
 */
typedef void (*http_drained_fn)(struct http_server *srv, void *ud);

/* A new server on loop (config copied). NULL on failure, with err set (bad config, OOM, metric
 * names already registered in a shared registry). Nothing is bound until http_server_start. */
struct http_server *http_server_new(uv_loop_t *loop, const struct http_server_config *cfg,
                                    char *err, size_t errlen);

/*
 * Adds a route (before or after start). method: "GET", "POST", ... or NULL for any method (GET
 * routes also answer HEAD, without a body). path must start with '/'. prefix 0: exact match;
 * prefix 1: path is a prefix that matches itself and anything below it at a '/' boundary
 * ("/v1" matches "/v1" and "/v1/x", not "/v1x"; "/v1/" matches "/v1/x"). Matching uses the
 * normalized path (no query, dot segments resolved). Exact routes win over prefixes, longer
 * prefixes over shorter ones; among routes for the same pattern the first registered for the
 * method wins. Returns 0, -EINVAL or -ENOMEM.
 */
int http_server_route(struct http_server *srv, const char *method, const char *path, int prefix,
                      http_handler_fn fn, void *ud);

/* A gate: looks at every request before routing (method, path, headers) and either lets it
 * through (returns 0) or answers it itself (returns nonzero; the request then counts under the
 * route label "gate"). Authentication (an API key) is one. */
typedef int (*http_gate_fn)(struct http_request *req, void *ud);

/* Installs the gate (NULL removes it); one per server, the last call wins. */
void http_server_set_gate(struct http_server *srv, http_gate_fn fn, void *ud);

/* Binds and listens. 0, or a negative errno (e.g. -EADDRINUSE) with err set. Also sets SIGPIPE to
 * SIG_IGN process-wide when it has the default action (libuv writes with write(2), so a client
 * that went away would otherwise kill the process). */
int http_server_start(struct http_server *srv, char *err, size_t errlen);

/* The bound port (useful with port 0), or -1 before start. */
int http_server_port(const struct http_server *srv);

/* The registry given in the config, or the server's own. */
struct metrics_registry *http_server_metrics(struct http_server *srv);

struct http_server_stats {
    uint64_t connections_accepted; /* since start */
    uint64_t connections_open;
    uint64_t requests_total;     /* requests that reached a handler or an error page */
    uint64_t requests_in_flight; /* handed to a handler and not finished yet */
    uint64_t requests_aborted;   /* on_abort calls */
};
void http_server_get_stats(const struct http_server *srv, struct http_server_stats *out);

/*
 * Graceful shutdown: stops accepting (new connections are refused), closes idle keep-alive
 * connections, marks in-flight responses "Connection: close", and waits for them (streams
 * included) to finish. After deadline_ms, requests still waiting or streaming are aborted
 * (on_abort, reason "server shutting down"; a waiting one is answered 503) and every connection
 * is shut down. deadline_ms 0 closes everything now. drained (may be NULL) runs once when every
 * connection and handle is closed. A second call only shortens the deadline. On a server that
 * was never started it calls drained at once (synchronously). Returns 0, or -EINVAL after the
 * drain has completed.
 */
int http_server_drain(struct http_server *srv, uint64_t deadline_ms, http_drained_fn drained,
                      void *ud);

/* 1 once http_server_drain has been called. */
int http_server_draining(const struct http_server *srv);

/* Frees a server that was never started, or whose drain has completed (else asserts). */
void http_server_free(struct http_server *srv);

/* ---- the request ---- */

const char *http_request_method(const struct http_request *req); /* "GET", ... */
const char *http_request_path(const struct http_request *req);   /* normalized, no query */
const char *http_request_target(const struct http_request *req); /* as sent: path?query */
const char *http_request_query(const struct http_request *req);  /* after '?', "" if none */

/* The first value of a header (name case-insensitive), NUL-terminated, or NULL if absent. */
const char *http_request_header(struct http_request *req, const char *name);

/* The value of query parameter name, percent- and '+'-decoded, or NULL if absent. Decoded values
 * containing NUL are cut there. */
const char *http_request_query_param(struct http_request *req, const char *name);

/* The request body (fully read; not NUL-terminated; NULL and 0 when there is none). */
const void *http_request_body(const struct http_request *req, size_t *len);

/* The client's address as "ip:port" ("[ip6]:port"), or "unknown". */
const char *http_request_peer(struct http_request *req);

/* The route pattern that matched ("/v1/"), used as the metrics label. */
const char *http_request_route(const struct http_request *req);

/* Request-scoped memory, freed with the request. NULL on OOM. */
struct arena *http_request_arena(struct http_request *req);

/* Registers the abort callback (replaces a previous one). See http_abort_fn. */
void http_request_on_abort(struct http_request *req, http_abort_fn fn, void *ud);

/* Called once when the server is done with a request (response written, or the client gone),
 * with the status that went out (499 when none did) and the seconds since it arrived. The request
 * is gone by then: ud is all the callback gets. One per request (replaces a previous one). */
typedef void (*http_done_fn)(void *ud, int status, double seconds);
void http_request_on_done(struct http_request *req, http_done_fn fn, void *ud);

/* ---- handing a request on in-process (a proxy in front of handlers of the same process) ---- */

/* Replaces the request body handlers see (copied, NUL-terminated in the copy). Before the
 * response starts; 0 or -EINVAL. */
int http_request_set_body(struct http_request *req, const void *body, size_t len);

/* Sets a request header handlers see (replacing the first of that name). 0 or -EINVAL (bad name
 * or value, or the response started). */
int http_request_set_header(struct http_request *req, const char *name, const char *value);

/* Routes req by srv's routes, as if it had arrived there (404/405 included); srv must run on the
 * same loop. The request still belongs to its own server: its connection, /metrics series,
 * drain and on_done stay there. req may be gone when this returns. 0, or -EINVAL (answered
 * already, or another loop). */
int http_server_dispatch(struct http_server *srv, struct http_request *req);

/* Ends a request from the server side (a deadline passed): on_abort runs with reason, then a
 * waiting request is answered status (4xx/5xx) with an OpenAI error naming reason, and a stream
 * is cut off and its connection closed. 0, or -EINVAL (answered already, bad status). */
int http_request_abort(struct http_request *req, int status, const char *reason);

/* ---- answering ---- */

/* Adds a response header before the response starts (-EINVAL after, or on CR/LF in either). */
int http_add_header(struct http_request *req, const char *name, const char *value);

/* Full response: status, Content-Type (NULL → none), body copied (len bytes). Completes the
 * request. -EINVAL if it was already answered. */
int http_respond(struct http_request *req, int status, const char *content_type, const void *body,
                 size_t len);

/* http_respond with "application/json" and a NUL-terminated body. */
int http_respond_json(struct http_request *req, int status, const char *json);

/*
 * OpenAI-style error: {"error":{"message":message,"type":type,"param":param|null,"code":status}}
 * with Content-Type application/json. type NULL → "invalid_request_error" for 4xx,
 * "server_error" for 5xx. Completes the request.
 */
int http_respond_error(struct http_request *req, int status, const char *type, const char *message,
                       const char *param);

/* The same body appended to out (for components that build error bodies themselves).
 * Returns 0, -ENOSPC or -ENOMEM. */
int http_error_body(struct buf *out, int status, const char *type, const char *message,
                    const char *param);

/*
 * Starts a streaming response (chunked transfer encoding): status, Content-Type (e.g.
 * "text/event-stream", which also sets Cache-Control: no-cache). Headers go out at once.
 */
int http_stream_start(struct http_request *req, int status, const char *content_type);

/* Queues len bytes (copied) and flushes them as soon as the connection can take them; each call
 * is written as its own chunk when the socket is free. -ENOSPC when more than max_stream_buffer
 * bytes would be waiting (a slow client: slow down or give up), -EINVAL if not streaming. */
int http_stream_send(struct http_request *req, const void *data, size_t len);

/* Bytes queued and not yet written (for producers that pace themselves). */
size_t http_stream_pending(const struct http_request *req);

/* Ends the stream after the queued bytes. Completes the request. */
int http_stream_end(struct http_request *req);

#endif /* TANDEM_LIB_HTTP_SERVER_H */
