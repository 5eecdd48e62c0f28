/*
 * Asynchronous HTTP client: libcurl's multi interface driven by a libuv loop (one uv_poll_t per
 * socket curl uses, one uv_timer_t for curl's timeouts), so that a component can call upstream
 * servers from the same loop that runs its http_server. Connections are kept alive and reused
 * (curl's connection cache, per client). A request is either buffered (status, headers and body
 * into bounded buffers, handed over at completion) or streamed (a callback per chunk as it
 * arrives, or per Server-Sent Event with the lib/sse.h parser), and can be cancelled while in
 * flight. http_fetch_sync is a blocking convenience for tools and tests, on a private loop.
 *
 * Callbacks: on_done is called exactly once per started request, except for requests that were
 * cancelled (http_client_cancel) or still running when the client was freed: those get no
 * callback at all. No callback runs from inside http_client_start.
 *
 * Threading: a client and its requests belong to the thread running its loop; every function
 * except http_fetch_sync must be called there. http_fetch_sync may be called from any thread.
 * curl_global_init is done once, thread-safely, by the first client created.
 */
#ifndef TANDEM_LIB_HTTP_CLIENT_H
#define TANDEM_LIB_HTTP_CLIENT_H

#include <stddef.h>
#include <uv.h>

#include "lib/buf.h"
#include "lib/common.h"
#include "lib/sse.h"

#define HTTP_CLIENT_DEFAULT_MAX_RESPONSE       (16 * 1024 * 1024) /* buffered body bytes */
#define HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS 10000
#define HTTP_CLIENT_MAX_HEADER_BYTES           (64 * 1024)

struct http_client;
struct http_client_req;

/* The outcome of a request. Owned by the client during callbacks; http_response_move takes it
 * over (then release it with http_response_free). */
struct http_response {
    int status;         /* status of the final response; 0 when none was received */
    int curl_code;      /* CURLcode, 0 (CURLE_OK) on success */
    char *error;        /* NULL on success; else what went wrong (curl's text or ours) */
    struct buf headers; /* the final response's header lines, "Name: value\n" each */
    struct buf body;    /* the body, for buffered requests (and for non-2xx SSE responses) */
    double total_s;     /* time the transfer took */
};

/* First value of header name (case-insensitive) copied into out (truncated to outlen-1), or NULL
 * when absent. Returns out. */
const char *http_response_header(const struct http_response *resp, const char *name, char *out,
                                 size_t outlen);

/* Moves src's contents into dst (dst's old contents are not freed); src becomes empty. */
void http_response_move(struct http_response *dst, struct http_response *src);

/* Frees what the response owns; the struct may be reused. */
void http_response_free(struct http_response *resp);

/* Completion: resp is valid during the call (use http_response_move to keep it). */
typedef void (*http_client_done_fn)(void *ud, struct http_response *resp);
/* Status and headers of the final response are known (before any body callback). */
typedef void (*http_client_head_fn)(void *ud, const struct http_response *resp);
/* A chunk of the body as it arrives. Return 0 to go on; non-zero aborts the transfer (on_done then
 * reports "aborted by the data callback"). */
typedef int (*http_client_data_fn)(void *ud, const char *data, size_t len);
/* One Server-Sent Event. Return 0 to go on; a negative errno aborts the transfer. */
typedef int (*http_client_event_fn)(void *ud, const struct sse_event *ev);

struct http_client_opts {
    const char *method;         /* "GET", "POST", ...; NULL → POST with a body, else GET */
    const char *url;            /* http:// or https:// only */
    const char *const *headers; /* NULL-terminated "Name: value" strings (copied); may be NULL */
    const void *body;           /* request body (copied); NULL for none */
    size_t body_len;
    long timeout_ms;         /* whole transfer; 0 → none */
    long connect_timeout_ms; /* 0 → HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS */
    /* https:// only: the peer's certificate and name are verified against the system's CAs (or
     * ca_file) unless insecure_skip_verify is set (an explicit operator choice, never a
     * default). */
    const char *ca_file;
    int insecure_skip_verify;
    size_t max_response;         /* cap of the buffered body, and of one SSE event; 0 → default */
    http_client_head_fn on_head; /* optional */
    /* At most one of on_data / on_event. With neither, the body is buffered into resp->body (past
     * max_response the transfer fails with "response body exceeds N bytes"). With on_event the
     * body is parsed as SSE ("Accept: text/event-stream" is sent unless given); a non-2xx
     * response is buffered instead, so that on_done sees the error body. */
    http_client_data_fn on_data;
    http_client_event_fn on_event;
    http_client_done_fn on_done; /* required, except for http_fetch_sync */
    void *ud;
};

/* A client on loop. NULL on failure (err set). */
struct http_client *http_client_new(uv_loop_t *loop, char *err, size_t errlen);

/* Cancels every request in flight (no callbacks) and closes the client's handles; the memory is
 * released once the loop has run the close callbacks. Must not be called from a client callback.
 * NULL is allowed. */
void http_client_free(struct http_client *c);

/* Starts a request. Returns a handle valid until on_done has returned or the request is
 * cancelled; NULL on invalid options or failure (err set). */
struct http_client_req *http_client_start(struct http_client *c, const struct http_client_opts *o,
                                          char *err, size_t errlen);

/* Cancels a request in flight: no callback for it runs after this returns, the handle becomes
 * invalid, and its connection is closed (not reused). May be called from any callback of this
 * client, including the request's own data/event/head callbacks. Calling it from the request's
 * own on_done has no effect. */
void http_client_cancel(struct http_client_req *r);

/* Requests in flight (started, not finished or cancelled). */
size_t http_client_active(const struct http_client *c);

/*
 * Blocking request on a private loop and client; the body is always buffered (the callbacks and
 * ud in o are ignored). On return *out holds the response (free it with http_response_free).
 * Returns 0 when a response arrived (whatever its status), -ETIMEDOUT, -ECONNREFUSED, or -EIO
 * for other failures (out->error says what), -EINVAL for bad options.
 */
int http_fetch_sync(const struct http_client_opts *o, struct http_response *out);

#endif /* TANDEM_LIB_HTTP_CLIENT_H */
