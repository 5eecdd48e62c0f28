/*
 * HTTP/1.1 server on libh2o 2.2 + libuv (see http_server.h for the contract, docs/http.md for the
 * design).
 *
 * How it sits on h2o: one host with one path "/" whose single handler (on_req) does our own
 * routing, plus h2o's chunked encoder for streamed responses. Errors that h2o answers itself before
 * a handler runs (400, 413, 417, requests whose target is not a path) go through the host's
 * fallback path, where a filter rewrites their body into our JSON error shape and a logger counts
 * them. We accept connections ourselves (uv_tcp_t per connection, handed to h2o with
 * h2o_uv_socket_create), which lets us count them and shut idle ones down when draining.
 *
 * Each request we dispatch gets a struct http_request allocated in the h2o request's memory pool
 * with a dispose callback, so we learn when h2o is done with the request (response written or
 * connection closed) whatever the path; that is where metrics are recorded and where a producer
 * whose client vanished is told (on_abort).
 *
 * h2o 2.2 stops reading a connection while its request is being answered, so a client that goes
 * away is only noticed on the next write. For requests that wait (answered later, or streams that
 * are idle) a periodic probe peeks at each connection (recv MSG_PEEK, as nginx does) and aborts the
 * request on EOF or error.
 */
#include "lib/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <h2o.h>
#include <json-c/json.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "lib/err.h"
#include "lib/json.h"
#include "lib/list.h"
#include "lib/log.h"

enum srv_state { SRV_NEW, SRV_RUNNING, SRV_DRAINING, SRV_CLOSING, SRV_CLOSED };

enum req_state {
    REQ_WAITING,   /* dispatched, not answered yet */
    REQ_RESPONDED, /* full response handed to h2o */
    REQ_STREAMING, /* streaming response started */
    REQ_ENDED,     /* last chunk handed to h2o */
};

struct http_route {
    char *method; /* NULL = any */
    char *path;
    size_t path_len;
    int prefix;
    http_handler_fn fn;
    void *ud;
};

struct http_conn {
    uv_tcp_t tcp;                /* tcp.data belongs to h2o */
    struct http_server *srv;     /* owner */
    h2o_socket_t *sock;          /* NULL once h2o has closed the socket */
    struct http_request *active; /* the request being answered (HTTP/1: at most one) */
    struct list_node link;       /* in srv->conns */
};

struct srv_handler {
    h2o_handler_t super;
    struct http_server *srv;
};

struct srv_filter {
    h2o_filter_t super;
    struct http_server *srv;
};

struct srv_logger {
    h2o_logger_t super;
    struct http_server *srv;
};

/* The ostream that replaces the body of an error h2o generated itself. */
struct error_ostream {
    h2o_ostream_t super;
    h2o_iovec_t body;
    int sent;
};

struct http_server {
    uv_loop_t *loop;
    struct http_server_config cfg; /* strings below are our copies */
    char *host;
    char *server_name;
    char *metrics_prefix;
    char *metrics_path;
    h2o_globalconf_t globalconf;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    int ctx_inited;
    uv_tcp_t *listener; /* malloc'd so that it can be closed independently; NULL when closed */
    uv_timer_t probe_timer;
    uv_timer_t deadline_timer;
    enum srv_state state;
    int port;
    struct http_route **routes;
    size_t nroutes, cap_routes;
    http_gate_fn gate; /* runs before routing (http_server_set_gate); NULL: none */
    void *gate_ud;
    struct list_node conns;    /* open connections, newest first */
    struct list_node requests; /* live requests, newest first */
    struct http_server_stats stats;
    struct metrics_registry *metrics;
    int own_metrics;
    struct metric_family *m_requests;
    struct metric_family *m_duration;
    struct metric *m_inflight;
    http_drained_fn drained;
    void *drained_ud;
    uint64_t drain_deadline; /* uv_now() when the drain is forced */
};

struct http_request {
    h2o_req_t *h2o;
    h2o_generator_t gen; /* for streamed responses */
    struct http_server *srv;
    struct http_conn *conn;
    const char *route; /* route label (owned by the route or a literal) */
    int method_idx;    /* index into method_labels */
    char *method, *path, *target, *query;
    enum req_state state;
    int aborted;         /* on_abort was called (or the request was torn down) */
    int head;            /* HEAD request: no body bytes go out */
    int writing;         /* h2o_send outstanding, waiting for proceed */
    int end_requested;   /* http_stream_end called (or the stream was aborted) */
    struct buf pending;  /* stream bytes not handed to h2o yet */
    struct buf inflight; /* stream bytes handed to h2o, until proceed */
    http_abort_fn on_abort;
    void *abort_ud;
    http_done_fn on_done;
    void *done_ud;
    uint64_t start_ns;
    struct arena *arena;
    char *peer;
    struct list_node link; /* in srv->requests */
};

static const char *const method_labels[] = {"GET",    "HEAD",  "POST",    "PUT",
                                            "DELETE", "PATCH", "OPTIONS", "OTHER"};

static int method_index(const char *m, size_t len)
{
    for (size_t i = 0; i + 1 < ARRAY_SIZE(method_labels); i++) {
        if (strlen(method_labels[i]) == len && memcmp(method_labels[i], m, len) == 0) {
            return (int)i;
        }
    }
    return (int)ARRAY_SIZE(method_labels) - 1;
}

static const char *http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status < 400 ? "OK" : "Error";
    }
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ---- metrics ---- */

static void record_request(struct http_server *srv, const char *route, int method_idx, int status,
                           double seconds)
{
    char code[16];
    snprintf(code, sizeof(code), "%d", status);
    const char *labels[3] = {route, method_labels[method_idx], code};
    struct metric *m = metrics_child(srv->m_requests, labels);
    if (m) {
        metric_inc(m, 1);
    }
    m = metrics_child(srv->m_duration, labels);
    if (m) {
        metric_observe(m, seconds);
    }
    srv->stats.requests_total++;
}

static int setup_metrics(struct http_server *srv, char *err, size_t errlen)
{
    static const char *const labels[] = {"route", "method", "code"};
    static const double buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                     0.5,   1,     2.5,  5,     10,   30,  60};
    const char *prefix = srv->metrics_prefix ? srv->metrics_prefix : "";
    char name[256];

    if (srv->cfg.metrics) {
        srv->metrics = srv->cfg.metrics;
    } else {
        srv->metrics = metrics_registry_new();
        srv->own_metrics = 1;
        if (!srv->metrics) {
            tandem_set_err(err, errlen, "%s", "http_server: out of memory");
            return -ENOMEM;
        }
    }
    snprintf(name, sizeof(name), "%shttp_requests_total", prefix);
    srv->m_requests = metrics_counter_new(
        srv->metrics, name, "HTTP requests served, by route, method and status code.", 3, labels);
    if (!srv->m_requests) {
        tandem_set_err(err, errlen,
                       "http_server: cannot register metric %s (invalid or duplicate name)", name);
        return -EINVAL;
    }
    snprintf(name, sizeof(name), "%shttp_request_duration_seconds", prefix);
    srv->m_duration = metrics_histogram_new(
        srv->metrics, name, "Time from the request reaching a handler to the end of its response.",
        3, labels, buckets, ARRAY_SIZE(buckets));
    if (!srv->m_duration) {
        tandem_set_err(err, errlen,
                       "http_server: cannot register metric %s (invalid or duplicate name)", name);
        return -EINVAL;
    }
    snprintf(name, sizeof(name), "%shttp_requests_in_flight", prefix);
    struct metric_family *f = metrics_gauge_new(
        srv->metrics, name, "Requests handed to a handler and not finished.", 0, NULL);
    srv->m_inflight = f ? metrics_child(f, NULL) : NULL;
    if (!srv->m_inflight) {
        tandem_set_err(err, errlen,
                       "http_server: cannot register metric %s (invalid or duplicate name)", name);
        return -EINVAL;
    }
    return 0;
}

/* ---- lists ---- */

#define conn_of(node) list_entry(node, struct http_conn, link)
#define req_of(node)  list_entry(node, struct http_request, link)

/* ---- JSON errors ---- */

int http_error_body(struct buf *out, int status, const char *type, const char *message,
                    const char *param)
{
    if (!type) {
        type = status >= 500 ? "server_error" : "invalid_request_error";
    }
    struct json_object *root = json_object_new_object();
    struct json_object *e = json_object_new_object();
    if (!root || !e) {
        json_object_put(root);
        json_object_put(e);
        return -ENOMEM;
    }
    json_object_object_add(root, "error", e);
    json_object_object_add(e, "message", json_object_new_string(message ? message : ""));
    json_object_object_add(e, "type", json_object_new_string(type));
    json_object_object_add(e, "param", param ? json_object_new_string(param) : NULL);
    json_object_object_add(e, "code", json_object_new_int(status));
    /* json_to_buf, not json-c's printer: a message that quotes a client's bytes may hold broken
     * UTF-8 (a key cut at 100 bytes), which must become U+FFFD, never invalid JSON */
    int rc = json_to_buf(root, 0, out);
    json_object_put(root);
    return rc;
}

/* ---- connections ---- */

static void maybe_finish_drain(struct http_server *srv);

static void on_conn_closed(uv_handle_t *h)
{
    struct http_conn *c = (struct http_conn *)h;
    struct http_server *srv = c->srv;
    list_unlink(&c->link);
    srv->stats.connections_open--;
    free(c);
    maybe_finish_drain(srv);
}

/* h2o calls this when it closes the socket; the h2o_socket_t is freed right after. */
static void on_sock_close(void *data)
{
    struct http_conn *c = data;
    c->sock = NULL;
}

static int conn_fd(const struct http_conn *c)
{
    uv_os_fd_t fd;
    return uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 ? fd : -1;
}

/* Ends both directions of the connection; h2o then sees EOF or a write error and closes it. */
static void conn_shutdown(struct http_conn *c)
{
    int fd = conn_fd(c);
    if (c->sock && fd >= 0) {
        shutdown(fd, SHUT_RDWR);
    }
}

static int conn_is_idle(const struct http_conn *c)
{
    return c->sock && c->active == NULL && c->sock->input->size == 0 &&
           !h2o_socket_is_writing(c->sock);
}

static void free_raw_conn(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct http_server *srv = listener->data;
    if (status < 0) {
        log_warn("http_server: accept: %s", uv_strerror(status));
        return;
    }
    struct http_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        log_error("http_server: out of memory accepting a connection");
        return;
    }
    uv_tcp_init(srv->loop, &c->tcp);
    int rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (rc != 0) {
        log_warn("http_server: accept: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)&c->tcp, free_raw_conn);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->srv = srv;
    list_push_front(&srv->conns, &c->link);
    srv->stats.connections_accepted++;
    srv->stats.connections_open++;
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_closed);
    c->sock = sock;
    sock->on_close.cb = on_sock_close;
    sock->on_close.data = c;
    h2o_accept(&srv->accept_ctx, sock);
}

/* ---- requests: completion and abort ---- */

static void notify_abort(struct http_request *r, const char *reason)
{
    if (r->aborted) {
        return;
    }
    r->aborted = 1;
    r->srv->stats.requests_aborted++;
    if (r->on_abort) {
        http_abort_fn fn = r->on_abort;
        r->on_abort = NULL;
        fn(r, r->abort_ud, reason);
    }
}

/* Pool dispose: h2o is done with the request (response written, or connection closed). */
static void request_dispose(void *p)
{
    struct http_request *r = p;
    struct http_server *srv = r->srv;

    if (r->state == REQ_WAITING || r->state == REQ_STREAMING) {
        notify_abort(r, "client disconnected");
    }
    int status = r->h2o->res.status;
    if (status == 0 || (r->state == REQ_WAITING)) {
        status = 499;
    }
    double secs = (double)(uv_hrtime() - r->start_ns) / 1e9;
    record_request(srv, r->route, r->method_idx, status, secs);
    if (r->on_done) {
        r->on_done(r->done_ud, status, secs);
    }
    metric_inc(srv->m_inflight, -1);
    srv->stats.requests_in_flight--;
    list_unlink(&r->link);
    if (r->conn && r->conn->active == r) {
        r->conn->active = NULL;
        if (srv->state == SRV_DRAINING) {
            /* the response is written: the connection has nothing left to do */
            conn_shutdown(r->conn);
        }
    }
    buf_free(&r->pending);
    buf_free(&r->inflight);
    arena_free(r->arena);
}

static void stream_flush(struct http_request *r);

static void on_stream_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    struct http_request *r = H2O_STRUCT_FROM_MEMBER(struct http_request, gen, gen);
    (void)req;
    r->writing = 0;
    buf_reset(&r->inflight);
    stream_flush(r);
}

static void on_stream_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    struct http_request *r = H2O_STRUCT_FROM_MEMBER(struct http_request, gen, gen);
    (void)req;
    notify_abort(r, "client disconnected");
}

static void stream_flush(struct http_request *r)
{
    if (r->writing || r->state != REQ_STREAMING) {
        return;
    }
    if (r->pending.len == 0 && !r->end_requested) {
        return;
    }
    /* swap the buffers, keeping each one's cap */
    struct buf tmp = r->inflight;
    r->inflight = r->pending;
    r->pending = tmp;
    size_t max = r->inflight.max;
    r->inflight.max = r->pending.max;
    r->pending.max = max;

    h2o_iovec_t iov = h2o_iovec_init(r->inflight.data, r->inflight.len);
    size_t n = (r->inflight.len > 0 && !r->head) ? 1 : 0;
    r->writing = 1;
    if (r->end_requested) {
        r->state = REQ_ENDED;
        h2o_send(r->h2o, &iov, n, H2O_SEND_STATE_FINAL); /* r may be gone after this */
        return;
    }
    h2o_send(r->h2o, &iov, n, H2O_SEND_STATE_IN_PROGRESS);
}

static void respond_now(struct http_request *r, int status, const char *ctype, const void *body,
                        size_t len)
{
    static h2o_generator_t no_generator = {NULL, NULL};
    h2o_req_t *req = r->h2o;

    req->res.status = status;
    req->res.reason = http_reason(status);
    if (ctype) {
        h2o_iovec_t v = h2o_strdup(&req->pool, ctype, strlen(ctype));
        h2o_set_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, v.base, v.len, 1);
    }
    h2o_iovec_t b = {NULL, 0};
    if (status == 204 || status == 304 || (status >= 100 && status < 200)) {
        len = 0;
    } else {
        req->res.content_length = len;
    }
    if (len > 0 && !r->head) {
        b.base = h2o_mem_alloc_pool(&req->pool, len);
        memcpy(b.base, body, len);
        b.len = len;
    }
    r->state = REQ_RESPONDED;
    h2o_start_response(req, &no_generator);
    h2o_send(req, &b, b.len ? 1 : 0, H2O_SEND_STATE_FINAL); /* r may be gone after this */
}

static void respond_error_now(struct http_request *r, int status, const char *type,
                              const char *message)
{
    struct buf b;
    buf_init(&b, 64 * 1024);
    if (http_error_body(&b, status, type, message, NULL) != 0) {
        buf_reset(&b);
        buf_appends(&b, "{\"error\":{\"message\":\"error\",\"type\":\"server_error\"}}");
    }
    /* the body is copied into the request pool before r may be freed */
    char *data = b.data;
    size_t len = b.len;
    respond_now(r, status, "application/json", data, len);
    free(data);
}

/* Abort a request h2o is still holding (client gone per the probe, or drain deadline): tell the
 * producer, then finish the response so that h2o closes the connection. */
static void abort_live_request(struct http_request *r, const char *reason, int status)
{
    if (r->aborted || (r->state != REQ_WAITING && r->state != REQ_STREAMING)) {
        return;
    }
    notify_abort(r, reason);
    r->h2o->http1_is_persistent = 0;
    if (r->state == REQ_WAITING) {
        respond_error_now(r, status, NULL, reason);
        return;
    }
    buf_reset(&r->pending);
    r->end_requested = 1;
    stream_flush(r);
}

/* Probe: does the client of this connection still exist? */
static int client_gone(const struct http_conn *c)
{
    int fd = c ? conn_fd(c) : -1;
    if (!c || !c->sock || fd < 0) {
        return 1;
    }
    char ch;
    ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
        return 0;
    }
    if (n == 0) {
        return 1;
    }
    return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

static void on_probe(uv_timer_t *t)
{
    struct http_server *srv = t->data;
    struct list_node *n, *tmp;
    list_for_each_safe(&srv->requests, n, tmp)
    {
        struct http_request *r = req_of(n);
        if (!r->aborted && (r->state == REQ_WAITING || r->state == REQ_STREAMING) &&
            client_gone(r->conn)) {
            log_debug("http_server: client of %s %s went away", r->method, r->target);
            abort_live_request(r, "client disconnected", 499);
        }
    }
}

/* ---- routing and dispatch ---- */

static int route_method_ok(const struct http_route *rt, const char *method)
{
    if (!rt->method) {
        return 1;
    }
    if (strcmp(rt->method, method) == 0) {
        return 1;
    }
    return strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0;
}

/* Match rank of a route for a path: 0 no match, SIZE_MAX exact, else prefix length. */
static size_t route_rank(const struct http_route *rt, const char *path, size_t len)
{
    if (!rt->prefix) {
        return (len == rt->path_len && memcmp(path, rt->path, len) == 0) ? SIZE_MAX : 0;
    }
    if (len < rt->path_len || memcmp(path, rt->path, rt->path_len) != 0) {
        return 0;
    }
    if (rt->path[rt->path_len - 1] == '/' || len == rt->path_len || path[rt->path_len] == '/') {
        return rt->path_len;
    }
    return 0;
}

static void dispatch(struct http_server *srv, struct http_request *r)
{
    if (srv->gate && srv->gate(r, srv->gate_ud) != 0) {
        r->route = "gate";
        return; /* answered by the gate */
    }
    const struct http_route *best = NULL;
    size_t best_rank = 0;
    int path_known = 0;
    size_t len = strlen(r->path);

    for (size_t i = 0; i < srv->nroutes; i++) {
        const struct http_route *rt = srv->routes[i];
        size_t rank = route_rank(rt, r->path, len);
        if (rank == 0) {
            continue;
        }
        path_known = 1;
        if (route_method_ok(rt, r->method) && rank > best_rank) {
            best = rt;
            best_rank = rank;
        }
    }
    if (best) {
        r->route = best->path;
        best->fn(r, best->ud);
        return;
    }
    r->route = "none";
    char msg[512];
    if (!path_known) {
        snprintf(msg, sizeof(msg), "Invalid URL (%s %s)", r->method, r->path);
        http_respond_error(r, 404, "invalid_request_error", msg, NULL);
        return;
    }
    /* 405 with the methods this path accepts */
    struct buf allow;
    buf_init(&allow, 1024);
    int any_get = 0;
    for (size_t i = 0; i < srv->nroutes; i++) {
        const struct http_route *rt = srv->routes[i];
        if (route_rank(rt, r->path, len) == 0 || !rt->method) {
            continue;
        }
        size_t ml = strlen(rt->method);
        const char *hit = allow.data ? strstr(allow.data, rt->method) : NULL;
        int dup =
            hit && (hit == allow.data || hit[-1] == ' ') && (hit[ml] == ',' || hit[ml] == '\0');
        if (!dup) {
            buf_appendf(&allow, "%s%s", allow.len ? ", " : "", rt->method);
        }
        any_get |= strcmp(rt->method, "GET") == 0;
    }
    if (any_get && (!allow.data || !strstr(allow.data, "HEAD"))) {
        buf_appends(&allow, ", HEAD");
    }
    snprintf(msg, sizeof(msg), "Method %s is not allowed for %s (allowed: %s)", r->method, r->path,
             buf_cstr(&allow));
    http_add_header(r, "allow", buf_cstr(&allow));
    buf_free(&allow);
    http_respond_error(r, 405, "invalid_request_error", msg, NULL);
}

static char *pool_strndup(h2o_mem_pool_t *pool, const char *s, size_t n)
{
    return h2o_strdup(pool, s ? s : "", s ? n : 0).base;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    struct http_server *srv = ((struct srv_handler *)self)->srv;
    h2o_socket_t *sock =
        req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    struct http_request *r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), request_dispose);

    memset(r, 0, sizeof(*r));
    r->h2o = req;
    r->srv = srv;
    r->conn = sock ? sock->on_close.data : NULL;
    r->route = "none";
    r->state = REQ_WAITING;
    r->start_ns = uv_hrtime();
    r->method = pool_strndup(&req->pool, req->method.base, req->method.len);
    r->method_idx = method_index(req->method.base, req->method.len);
    r->head = strcmp(r->method, "HEAD") == 0;
    r->path = pool_strndup(&req->pool, req->path_normalized.base, req->path_normalized.len);
    r->target = pool_strndup(&req->pool, req->path.base, req->path.len);
    if (req->query_at != SIZE_MAX && req->query_at < req->path.len) {
        r->query = pool_strndup(&req->pool, req->path.base + req->query_at + 1,
                                req->path.len - req->query_at - 1);
    } else {
        r->query = pool_strndup(&req->pool, "", 0);
    }
    buf_init(&r->pending, srv->cfg.max_stream_buffer);
    buf_init(&r->inflight, SIZE_MAX);
    list_push_front(&srv->requests, &r->link);
    if (r->conn) {
        r->conn->active = r;
    }
    srv->stats.requests_in_flight++;
    metric_inc(srv->m_inflight, 1);
    if (srv->state != SRV_RUNNING) {
        req->http1_is_persistent = 0;
    }
    dispatch(srv, r); /* r may be gone after this */
    return 0;
}

/* ---- errors generated by h2o itself (fallback path) ---- */

static void error_ostream_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs,
                               size_t bufcnt, h2o_send_state_t state)
{
    struct error_ostream *e = (struct error_ostream *)self;
    (void)bufs;
    (void)bufcnt;
    if (!e->sent && e->body.len > 0) {
        e->sent = 1;
        h2o_ostream_send_next(self, req, &e->body, 1, state);
        return;
    }
    h2o_ostream_send_next(self, req, NULL, 0, state);
}

static void error_filter_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    struct http_server *srv = ((struct srv_filter *)self)->srv;
    int status = req->res.status;

    if (status >= 400) {
        char msg[256];
        if (status == 413) {
            snprintf(msg, sizeof(msg), "request body exceeds the limit of %zu bytes",
                     srv->cfg.max_body);
        } else if (status == 404) {
            snprintf(msg, sizeof(msg), "Invalid URL (%.*s %.*s)", (int)req->input.method.len,
                     req->input.method.base, (int)req->input.path.len, req->input.path.base);
        } else {
            snprintf(msg, sizeof(msg), "%s", req->res.reason ? req->res.reason : "error");
        }
        struct buf b;
        buf_init(&b, 64 * 1024);
        if (http_error_body(&b, status, NULL, msg, NULL) == 0) {
            h2o_iovec_t body = h2o_strdup(&req->pool, b.data, b.len);
            int head = h2o_memis(req->input.method.base, req->input.method.len, H2O_STRLIT("HEAD"));
            h2o_set_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
                           H2O_STRLIT("application/json"), 1);
            req->res.content_length = body.len;
            struct error_ostream *e = (void *)h2o_add_ostream(req, sizeof(*e), slot);
            e->super.do_send = error_ostream_send;
            e->body = head ? h2o_iovec_init(NULL, 0) : body;
            e->sent = 0;
            slot = &e->super.next;
        }
        buf_free(&b);
    }
    h2o_setup_next_ostream(req, slot);
}

static void error_logger(h2o_logger_t *self, h2o_req_t *req)
{
    struct http_server *srv = ((struct srv_logger *)self)->srv;
    struct timeval now;
    gettimeofday(&now, NULL);
    const struct timeval *t0 = &req->timestamps.request_begin_at;
    double secs = 0;
    if (t0->tv_sec != 0) {
        secs = (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_usec - t0->tv_usec) / 1e6;
    }
    record_request(srv, "none", method_index(req->input.method.base, req->input.method.len),
                   req->res.status ? req->res.status : 400, secs < 0 ? 0 : secs);
}

/* ---- the built-in /metrics route ---- */

static void metrics_handler(struct http_request *r, void *ud)
{
    struct http_server *srv = ud;
    struct buf out;
    buf_init(&out, 64 * 1024 * 1024);
    if (metrics_render(srv->metrics, &out) != 0) {
        buf_free(&out);
        http_respond_error(r, 500, NULL, "cannot render metrics", NULL);
        return;
    }
    http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
    buf_free(&out);
}

/* ---- the server ---- */

void http_server_config_init(struct http_server_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = "127.0.0.1";
    c->max_body = HTTP_SERVER_DEFAULT_MAX_BODY;
    c->idle_timeout_ms = HTTP_SERVER_DEFAULT_IDLE_TIMEOUT_MS;
    c->probe_ms = HTTP_SERVER_DEFAULT_PROBE_MS;
    c->max_stream_buffer = HTTP_SERVER_DEFAULT_MAX_STREAM_BUFFER;
}

struct http_server *http_server_new(uv_loop_t *loop, const struct http_server_config *cfg,
                                    char *err, size_t errlen)
{
    TANDEM_ASSERT(loop != NULL && cfg != NULL);
    if (cfg->port < 0 || cfg->port > 65535) {
        tandem_set_err(err, errlen, "http_server: port %d out of range", cfg->port);
        return NULL;
    }
    if (cfg->metrics_path && cfg->metrics_path[0] != '/') {
        tandem_set_err(err, errlen, "%s", "http_server: metrics_path must start with '/'");
        return NULL;
    }
    struct http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        tandem_set_err(err, errlen, "%s", "http_server: out of memory");
        return NULL;
    }
    srv->loop = loop;
    list_init(&srv->conns);
    list_init(&srv->requests);
    srv->cfg = *cfg;
    srv->port = -1;
    srv->host = xstrdup(cfg->host ? cfg->host : "127.0.0.1");
    srv->server_name = xstrdup(cfg->server_name ? cfg->server_name : "");
    srv->metrics_prefix = xstrdup(cfg->metrics_prefix ? cfg->metrics_prefix : "");
    srv->metrics_path = xstrdup(cfg->metrics_path);
    if (!srv->host || !srv->server_name || !srv->metrics_prefix ||
        (cfg->metrics_path && !srv->metrics_path)) {
        tandem_set_err(err, errlen, "%s", "http_server: out of memory");
        goto err_free;
    }
    srv->cfg.host = srv->host;
    srv->cfg.server_name = srv->server_name;
    srv->cfg.metrics_prefix = srv->metrics_prefix;
    srv->cfg.metrics_path = srv->metrics_path;
    if (!srv->cfg.max_body) {
        srv->cfg.max_body = HTTP_SERVER_DEFAULT_MAX_BODY;
    }
    if (!srv->cfg.idle_timeout_ms) {
        srv->cfg.idle_timeout_ms = HTTP_SERVER_DEFAULT_IDLE_TIMEOUT_MS;
    }
    if (!srv->cfg.probe_ms) {
        srv->cfg.probe_ms = HTTP_SERVER_DEFAULT_PROBE_MS;
    }
    if (!srv->cfg.max_stream_buffer) {
        srv->cfg.max_stream_buffer = HTTP_SERVER_DEFAULT_MAX_STREAM_BUFFER;
    }
    if (!srv->cfg.backlog) {
        srv->cfg.backlog = 511;
    }
    if (setup_metrics(srv, err, errlen) != 0) {
        goto err_free;
    }

    h2o_config_init(&srv->globalconf);
    srv->globalconf.max_request_entity_size = srv->cfg.max_body;
    srv->globalconf.http1.req_timeout = srv->cfg.idle_timeout_ms;
    srv->globalconf.http1.upgrade_to_http2 = 0;
    srv->globalconf.server_name = h2o_iovec_init(srv->server_name, strlen(srv->server_name));
    h2o_hostconf_t *host =
        h2o_config_register_host(&srv->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    struct srv_handler *h = (void *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_req;
    h->srv = srv;
    h2o_chunked_register(path);
    struct srv_filter *f = (void *)h2o_create_filter(&host->fallback_path, sizeof(*f));
    f->super.on_setup_ostream = error_filter_setup;
    f->srv = srv;
    struct srv_logger *l = (void *)h2o_create_logger(&host->fallback_path, sizeof(*l));
    l->super.log_access = error_logger;
    l->srv = srv;

    if (srv->metrics_path &&
        http_server_route(srv, "GET", srv->metrics_path, 0, metrics_handler, srv) != 0) {
        tandem_set_err(err, errlen, "%s", "http_server: out of memory");
        http_server_free(srv);
        return NULL;
    }
    return srv;

err_free:
    if (srv->own_metrics) {
        metrics_registry_free(srv->metrics);
    }
    free(srv->host);
    free(srv->server_name);
    free(srv->metrics_prefix);
    free(srv->metrics_path);
    free(srv);
    return NULL;
}

void http_server_set_gate(struct http_server *srv, http_gate_fn fn, void *ud)
{
    srv->gate = fn;
    srv->gate_ud = ud;
}

int http_server_route(struct http_server *srv, const char *method, const char *path, int prefix,
                      http_handler_fn fn, void *ud)
{
    if (!srv || !path || path[0] != '/' || !fn) {
        return -EINVAL;
    }
    if (method) {
        for (const char *p = method; *p; p++) {
            if (*p < 'A' || *p > 'Z') {
                return -EINVAL;
            }
        }
        if (!*method) {
            return -EINVAL;
        }
    }
    if (srv->nroutes == srv->cap_routes) {
        size_t cap = srv->cap_routes ? srv->cap_routes * 2 : 8;
        struct http_route **nr = realloc(srv->routes, cap * sizeof(struct http_route *));
        if (!nr) {
            return -ENOMEM;
        }
        srv->routes = nr;
        srv->cap_routes = cap;
    }
    struct http_route *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        return -ENOMEM;
    }
    rt->method = xstrdup(method);
    rt->path = xstrdup(path);
    if ((method && !rt->method) || !rt->path) {
        free(rt->method);
        free(rt->path);
        free(rt);
        return -ENOMEM;
    }
    rt->path_len = strlen(path);
    rt->prefix = prefix;
    rt->fn = fn;
    rt->ud = ud;
    srv->routes[srv->nroutes++] = rt;
    return 0;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *sslen,
                   char *err, size_t errlen)
{
    char h[256];
    size_t n = strlen(host);
    if (n >= sizeof(h)) {
        tandem_set_err(err, errlen, "%s", "http_server: host name too long");
        return -EINVAL;
    }
    memcpy(h, host, n + 1);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        memmove(h, h + 1, n - 2);
        h[n - 2] = '\0';
    }
    memset(ss, 0, sizeof(*ss));
    if (uv_ip4_addr(h, port, (struct sockaddr_in *)ss) == 0) {
        *sslen = sizeof(struct sockaddr_in);
        return 0;
    }
    if (uv_ip6_addr(h, port, (struct sockaddr_in6 *)ss) == 0) {
        *sslen = sizeof(struct sockaddr_in6);
        return 0;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(h, portstr, &hints, &res);
    if (rc != 0 || !res) {
        tandem_set_err(err, errlen, "http_server: cannot resolve %s: %s", host, gai_strerror(rc));
        return -EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* libuv writes to sockets with write(2): a peer that closed would kill the process with SIGPIPE.
 * Ignore it (unless the application installed a handler of its own). */
static void ignore_sigpipe(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
        signal(SIGPIPE, SIG_IGN);
    }
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void on_listener_closed(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    free(h);
    srv->listener = NULL;
    maybe_finish_drain(srv);
}

int http_server_start(struct http_server *srv, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (srv->state != SRV_NEW) {
        tandem_set_err(err, errlen, "%s", "http_server: already started");
        return -EINVAL;
    }
    int rc = resolve(srv->host, srv->cfg.port, &ss, &sslen, err, errlen);
    if (rc) {
        return rc;
    }
    ignore_sigpipe();
    /* the socket is set up with plain system calls, so that a failure leaves no uv handle */
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = -errno;
        tandem_set_err(err, errlen, "http_server: socket: %s", strerror(errno));
        return rc;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sslen) != 0 || listen(fd, srv->cfg.backlog) != 0) {
        rc = -errno;
        tandem_set_err(err, errlen, "http_server: bind/listen %s:%d: %s", srv->host, srv->cfg.port,
                       strerror(errno));
        close(fd);
        return rc;
    }
    struct sockaddr_storage bound;
    memset(&bound, 0, sizeof(bound));
    socklen_t blen = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0) {
        srv->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                      : ((struct sockaddr_in *)&bound)->sin_port);
    }
    uv_tcp_t *l = malloc(sizeof(*l));
    if (!l) {
        close(fd);
        tandem_set_err(err, errlen, "%s", "http_server: out of memory");
        return -ENOMEM;
    }
    uv_tcp_init(srv->loop, l);
    l->data = srv;
    rc = uv_tcp_open(l, fd);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)l, srv->cfg.backlog, on_connection);
    }
    if (rc != 0) {
        tandem_set_err(err, errlen, "http_server: listen: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)l, free_handle); /* closes fd too */
        srv->port = -1;
        return rc;
    }
    srv->listener = l;

    h2o_context_init(&srv->ctx, srv->loop, &srv->globalconf);
    srv->ctx_inited = 1;
    srv->accept_ctx.ctx = &srv->ctx;
    srv->accept_ctx.hosts = srv->globalconf.hosts;
    uv_timer_init(srv->loop, &srv->probe_timer);
    srv->probe_timer.data = srv;
    uv_timer_init(srv->loop, &srv->deadline_timer);
    srv->deadline_timer.data = srv;
    uv_timer_start(&srv->probe_timer, on_probe, srv->cfg.probe_ms, srv->cfg.probe_ms);
    uv_unref((uv_handle_t *)&srv->probe_timer);
    srv->state = SRV_RUNNING;
    log_debug("http_server: listening on %s port %d", srv->host, srv->port);
    return 0;
}

int http_server_port(const struct http_server *srv)
{
    return srv->port;
}

struct metrics_registry *http_server_metrics(struct http_server *srv)
{
    return srv->metrics;
}

void http_server_get_stats(const struct http_server *srv, struct http_server_stats *out)
{
    *out = srv->stats;
}

int http_server_draining(const struct http_server *srv)
{
    return srv->state != SRV_NEW && srv->state != SRV_RUNNING;
}

static void on_closed_stage2(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    srv->state = SRV_CLOSED;
    log_debug("http_server: drained");
    if (srv->drained) {
        srv->drained(srv, srv->drained_ud);
    }
}

static void on_closed_stage1(uv_handle_t *h)
{
    struct http_server *srv = h->data;
    /* h2o closed its own timers (without callbacks) in h2o_context_dispose during the previous
     * closing pass; closing one more handle here lands after all of them. */
    uv_close((uv_handle_t *)&srv->deadline_timer, on_closed_stage2);
}

static void maybe_finish_drain(struct http_server *srv)
{
    if (srv->state != SRV_DRAINING || srv->listener || !list_empty(&srv->conns)) {
        return;
    }
    srv->state = SRV_CLOSING;
    uv_timer_stop(&srv->probe_timer);
    uv_timer_stop(&srv->deadline_timer);
    /* h2o_context_dispose asserts that no timeout entry is linked; the only one that can be is
     * HTTP/2's graceful-shutdown timer (see http_server_drain), which we never start */
    if (h2o_timeout_is_linked(&srv->ctx.http2._graceful_shutdown_timeout)) {
        h2o_timeout_unlink(&srv->ctx.http2._graceful_shutdown_timeout);
    }
    h2o_context_dispose(&srv->ctx);
    srv->ctx_inited = 0;
    uv_close((uv_handle_t *)&srv->probe_timer, on_closed_stage1);
}

static void force_close(struct http_server *srv)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&srv->requests, n, tmp)
    {
        abort_live_request(req_of(n), "server shutting down", 503);
    }
    list_for_each_safe(&srv->conns, n, tmp)
    {
        conn_shutdown(conn_of(n));
    }
}

static void on_deadline(uv_timer_t *t)
{
    struct http_server *srv = t->data;
    log_warn("http_server: drain deadline reached; closing %llu connection(s)",
             (unsigned long long)srv->stats.connections_open);
    force_close(srv);
}

int http_server_drain(struct http_server *srv, uint64_t deadline_ms, http_drained_fn drained,
                      void *ud)
{
    if (srv->state == SRV_NEW) {
        srv->state = SRV_CLOSED;
        if (drained) {
            drained(srv, ud);
        }
        return 0;
    }
    if (srv->state == SRV_CLOSING || srv->state == SRV_CLOSED) {
        return -EINVAL;
    }
    uint64_t now = uv_now(srv->loop);
    if (srv->state == SRV_DRAINING) {
        if (now + deadline_ms < srv->drain_deadline) {
            srv->drain_deadline = now + deadline_ms;
            if (deadline_ms == 0) {
                uv_timer_stop(&srv->deadline_timer);
                force_close(srv);
            } else {
                uv_timer_start(&srv->deadline_timer, on_deadline, deadline_ms, 0);
            }
        }
        return 0;
    }
    srv->state = SRV_DRAINING;
    srv->drained = drained;
    srv->drained_ud = ud;
    srv->drain_deadline = now + deadline_ms;
    log_info("http_server: draining %llu connection(s), %llu request(s) in flight",
             (unsigned long long)srv->stats.connections_open,
             (unsigned long long)srv->stats.requests_in_flight);
    uv_close((uv_handle_t *)srv->listener, on_listener_closed);
    /* What h2o_context_request_shutdown does for HTTP/1 (responses to requests parsed from now on
     * say "Connection: close"), without its HTTP/2 GOAWAY timer, which would hold a one-second
     * timeout entry that h2o_context_dispose asserts on. */
    srv->ctx.shutdown_requested = 1;
    struct list_node *n, *tmp;
    list_for_each_safe(&srv->requests, n, tmp)
    {
        req_of(n)->h2o->http1_is_persistent = 0;
    }
    list_for_each_safe(&srv->conns, n, tmp)
    {
        if (conn_is_idle(conn_of(n))) {
            conn_shutdown(conn_of(n));
        }
    }
    if (deadline_ms == 0) {
        force_close(srv);
    } else {
        uv_timer_start(&srv->deadline_timer, on_deadline, deadline_ms, 0);
    }
    return 0;
}

void http_server_free(struct http_server *srv)
{
    if (!srv) {
        return;
    }
    TANDEM_ASSERT(srv->state == SRV_NEW || srv->state == SRV_CLOSED);
    TANDEM_ASSERT(!srv->ctx_inited);
    h2o_config_dispose(&srv->globalconf);
    for (size_t i = 0; i < srv->nroutes; i++) {
        free(srv->routes[i]->method);
        free(srv->routes[i]->path);
        free(srv->routes[i]);
    }
    free(srv->routes);
    if (srv->own_metrics) {
        metrics_registry_free(srv->metrics);
    }
    free(srv->host);
    free(srv->server_name);
    free(srv->metrics_prefix);
    free(srv->metrics_path);
    free(srv);
}

/* ---- request accessors ---- */

const char *http_request_method(const struct http_request *req)
{
    return req->method;
}

const char *http_request_path(const struct http_request *req)
{
    return req->path;
}

const char *http_request_target(const struct http_request *req)
{
    return req->target;
}

const char *http_request_query(const struct http_request *req)
{
    return req->query;
}

const char *http_request_route(const struct http_request *req)
{
    return req->route;
}

const char *http_request_header(struct http_request *req, const char *name)
{
    size_t n = strlen(name);
    if (n == 0) {
        return NULL;
    }
    char *lc = h2o_mem_alloc_pool(&req->h2o->pool, n + 1);
    memcpy(lc, name, n + 1);
    h2o_strtolower(lc, n);
    ssize_t i;
    const h2o_token_t *tok = h2o_lookup_token(lc, n);
    if (tok) {
        i = h2o_find_header(&req->h2o->headers, tok, -1);
    } else {
        i = h2o_find_header_by_str(&req->h2o->headers, lc, n, -1);
    }
    if (i < 0) {
        return NULL;
    }
    const h2o_iovec_t *v = &req->h2o->headers.entries[i].value;
    return pool_strndup(&req->h2o->pool, v->base, v->len);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Decodes %XX and '+' of s[0..n) into out (room for n + 1); returns the decoded length. */
static size_t url_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            out[o++] = ' ';
        } else if (s[i] == '%' && i + 2 < n && hexval((unsigned char)s[i + 1]) >= 0 &&
                   hexval((unsigned char)s[i + 2]) >= 0) {
            out[o++] =
                (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

const char *http_request_query_param(struct http_request *req, const char *name)
{
    const char *q = req->query;
    size_t name_len = strlen(name);
    while (*q) {
        const char *end = strchr(q, '&');
        size_t seg = end ? (size_t)(end - q) : strlen(q);
        const char *eq = memchr(q, '=', seg);
        size_t klen = eq ? (size_t)(eq - q) : seg;
        char *key = h2o_mem_alloc_pool(&req->h2o->pool, klen + 1);
        size_t kdec = url_decode(q, klen, key);
        if (kdec == name_len && memcmp(key, name, name_len) == 0) {
            size_t vlen = eq ? seg - klen - 1 : 0;
            char *val = h2o_mem_alloc_pool(&req->h2o->pool, vlen + 1);
            url_decode(eq ? eq + 1 : "", vlen, val);
            return val;
        }
        if (!end) {
            break;
        }
        q = end + 1;
    }
    return NULL;
}

const void *http_request_body(const struct http_request *req, size_t *len)
{
    if (len) {
        *len = req->h2o->entity.base ? req->h2o->entity.len : 0;
    }
    return req->h2o->entity.base;
}

const char *http_request_peer(struct http_request *req)
{
    if (req->peer) {
        return req->peer;
    }
    struct sockaddr_storage ss;
    char ip[INET6_ADDRSTRLEN] = "";
    int port = 0;
    socklen_t n = 0;
    if (req->h2o->conn->callbacks->get_peername) {
        n = req->h2o->conn->callbacks->get_peername(req->h2o->conn, (struct sockaddr *)&ss);
    }
    req->peer = h2o_mem_alloc_pool(&req->h2o->pool, INET6_ADDRSTRLEN + 16);
    if (n > 0 && ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        port = ntohs(a->sin_port);
        snprintf(req->peer, INET6_ADDRSTRLEN + 16, "%s:%d", ip, port);
    } else if (n > 0 && ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        port = ntohs(a->sin6_port);
        snprintf(req->peer, INET6_ADDRSTRLEN + 16, "[%s]:%d", ip, port);
    } else {
        snprintf(req->peer, INET6_ADDRSTRLEN + 16, "unknown");
    }
    return req->peer;
}

struct arena *http_request_arena(struct http_request *req)
{
    if (!req->arena) {
        req->arena = arena_new(4096);
    }
    return req->arena;
}

static int bad_header_text(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

void http_request_on_abort(struct http_request *req, http_abort_fn fn, void *ud)
{
    req->on_abort = fn;
    req->abort_ud = ud;
}

void http_request_on_done(struct http_request *req, http_done_fn fn, void *ud)
{
    req->on_done = fn;
    req->done_ud = ud;
}

int http_request_set_body(struct http_request *req, const void *body, size_t len)
{
    if (req->state != REQ_WAITING || req->aborted || (len > 0 && !body)) {
        return -EINVAL;
    }
    char *copy = h2o_mem_alloc_pool(&req->h2o->pool, len + 1);
    if (len > 0) {
        memcpy(copy, body, len);
    }
    copy[len] = '\0';
    req->h2o->entity = h2o_iovec_init(copy, len);
    return 0;
}

/* A header name and value a handler may set before the response starts: the name lower-cased
 * in the request's pool (its length in *n), or NULL when either is unusable or it is too late. */
static char *header_name(struct http_request *req, const char *name, const char *value, size_t *n)
{
    if (req->state != REQ_WAITING || req->aborted || !name || !*name || !value ||
        bad_header_text(name) || bad_header_text(value) || strchr(name, ':') || strchr(name, ' ')) {
        return NULL;
    }
    *n = strlen(name);
    char *lc = h2o_mem_alloc_pool(&req->h2o->pool, *n + 1);
    memcpy(lc, name, *n + 1);
    h2o_strtolower(lc, *n);
    return lc;
}

int http_request_set_header(struct http_request *req, const char *name, const char *value)
{
    size_t n;
    char *lc = header_name(req, name, value, &n);
    if (!lc) {
        return -EINVAL;
    }
    h2o_iovec_t v = h2o_strdup(&req->h2o->pool, value, strlen(value));
    const h2o_token_t *tok = h2o_lookup_token(lc, n);
    if (tok) {
        h2o_set_header(&req->h2o->pool, &req->h2o->headers, tok, v.base, v.len, 1);
    } else {
        h2o_set_header_by_str(&req->h2o->pool, &req->h2o->headers, lc, n, 1, v.base, v.len, 1);
    }
    return 0;
}

int http_server_dispatch(struct http_server *srv, struct http_request *req)
{
    if (req->state != REQ_WAITING || req->aborted || srv->loop != req->srv->loop) {
        return -EINVAL;
    }
    dispatch(srv, req); /* req may be gone after this */
    return 0;
}

int http_request_abort(struct http_request *req, int status, const char *reason)
{
    if (req->aborted || (req->state != REQ_WAITING && req->state != REQ_STREAMING) ||
        status < 400 || status > 599 || !reason) {
        return -EINVAL;
    }
    abort_live_request(req, reason, status);
    return 0;
}

/* ---- answering ---- */

int http_add_header(struct http_request *req, const char *name, const char *value)
{
    size_t n;
    char *lc = header_name(req, name, value, &n);
    if (!lc) {
        return -EINVAL;
    }
    if (strcmp(lc, "content-length") == 0 || strcmp(lc, "transfer-encoding") == 0 ||
        strcmp(lc, "connection") == 0) {
        return -EINVAL;
    }
    h2o_iovec_t v = h2o_strdup(&req->h2o->pool, value, strlen(value));
    h2o_add_header_by_str(&req->h2o->pool, &req->h2o->res.headers, lc, n, 1, NULL, v.base, v.len);
    return 0;
}

int http_respond(struct http_request *req, int status, const char *content_type, const void *body,
                 size_t len)
{
    if (req->state != REQ_WAITING || req->aborted || status < 100 || status > 999 ||
        (len > 0 && !body)) {
        return -EINVAL;
    }
    respond_now(req, status, content_type, body, len);
    return 0;
}

int http_respond_json(struct http_request *req, int status, const char *json)
{
    return http_respond(req, status, "application/json", json, json ? strlen(json) : 0);
}

int http_respond_error(struct http_request *req, int status, const char *type, const char *message,
                       const char *param)
{
    if (req->state != REQ_WAITING || req->aborted || status < 400 || status > 599) {
        return -EINVAL;
    }
    struct buf b;
    buf_init(&b, 1024 * 1024);
    int rc = http_error_body(&b, status, type, message, param);
    if (rc == 0) {
        respond_now(req, status, "application/json", b.data, b.len);
    }
    buf_free(&b);
    return rc;
}

int http_stream_start(struct http_request *req, int status, const char *content_type)
{
    if (req->state != REQ_WAITING || req->aborted || status < 200 || status > 999) {
        return -EINVAL;
    }
    h2o_req_t *h = req->h2o;
    h->res.status = status;
    h->res.reason = http_reason(status);
    if (content_type) {
        h2o_iovec_t v = h2o_strdup(&h->pool, content_type, strlen(content_type));
        h2o_set_header(&h->pool, &h->res.headers, H2O_TOKEN_CONTENT_TYPE, v.base, v.len, 1);
        if (strncmp(content_type, "text/event-stream", 17) == 0) {
            h2o_set_header(&h->pool, &h->res.headers, H2O_TOKEN_CACHE_CONTROL,
                           H2O_STRLIT("no-cache"), 1);
        }
    }
    if (req->head) {
        h->res.content_length = 0;
    }
    if (h->version < 0x101) {
        /* no chunked encoding in HTTP/1.0: the end of the body is the end of the connection */
        h->http1_is_persistent = 0;
    }
    req->gen.proceed = on_stream_proceed;
    req->gen.stop = on_stream_stop;
    req->state = REQ_STREAMING;
    h2o_start_response(h, &req->gen);
    req->writing = 1;
    h2o_send(h, NULL, 0, H2O_SEND_STATE_IN_PROGRESS); /* the headers */
    return 0;
}

int http_stream_send(struct http_request *req, const void *data, size_t len)
{
    if (req->aborted) {
        return -EPIPE;
    }
    if (req->state != REQ_STREAMING || req->end_requested || (len > 0 && !data)) {
        return -EINVAL;
    }
    if (len == 0 || req->head) {
        return 0;
    }
    int rc = buf_append(&req->pending, data, len);
    if (rc) {
        return rc;
    }
    stream_flush(req);
    return 0;
}

size_t http_stream_pending(const struct http_request *req)
{
    return req->pending.len + req->inflight.len;
}

int http_stream_end(struct http_request *req)
{
    if (req->aborted) {
        return -EPIPE;
    }
    if (req->state != REQ_STREAMING || req->end_requested) {
        return -EINVAL;
    }
    req->end_requested = 1;
    stream_flush(req); /* req may be gone after this */
    return 0;
}
