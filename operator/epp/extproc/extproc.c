/*
 * The gRPC side of the ext-proc server: one thread drives one completion queue; each accepted call
 * is a small state machine whose operations come back as tags. Only that thread touches a call,
 * so calls need no locks; the readiness flag is the one thing shared with other threads.
 */
#include "operator/epp/extproc/extproc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "grpc/health/v1/health.pb-c.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "operator/epp/extproc/extproc_msg.h"

#define PROCESS_METHOD  "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
#define HEALTH_CHECK    "/grpc.health.v1.Health/Check"
#define EXTPROC_SERVICE "envoy.service.ext_proc.v3.ExternalProcessor"

enum call_kind { CALL_UNKNOWN, CALL_PROCESS, CALL_HEALTH };
enum tag_kind { TAG_NEW, TAG_RECV, TAG_SEND, TAG_CLOSE, TAG_STATUS, TAG_META, TAG_SHUTDOWN };

struct call;

struct tag {
    enum tag_kind kind;
    struct call *call;
};

struct call {
    struct extproc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    enum call_kind kind;
    int pending; /* operations started and not yet completed */
    struct tag t_new, t_recv, t_send, t_close, t_status, t_meta;
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *send_bb;
    int cancelled;
    bool closed, status_started, want_status, stop_recv;
    grpc_status_code status;
    char *status_details;
    grpc_slice status_slice;
    struct extproc_out queue;
    size_t queue_head;
    struct extproc_exchange ex;
    bool decided, done_reported, rejected;
    int reject_status;
    void *exchange;
};

struct extproc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    struct extproc_callbacks cb;
    size_t max_body;
    int port;
    atomic_bool ready;
    atomic_bool stopping;
    struct tag t_shutdown;
    /* Serving thread only: call objects alive, and whether the server's shutdown completed. The
     * queue is shut down once both say nothing can post to it any more. */
    size_t live_calls;
    bool shutdown_done;
};

static void call_free(struct call *c);

static struct call *call_new(struct extproc_server *srv)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c) {
        return NULL;
    }
    c->srv = srv;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    struct tag *tags[] = {&c->t_new, &c->t_recv, &c->t_send, &c->t_close, &c->t_status, &c->t_meta};
    enum tag_kind kinds[] = {TAG_NEW, TAG_RECV, TAG_SEND, TAG_CLOSE, TAG_STATUS, TAG_META};
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        tags[i]->kind = kinds[i];
        tags[i]->call = c;
    }
    extproc_exchange_init(&c->ex, srv->max_body);
    srv->live_calls++;
    return c;
}

/* Posts one operation; a failure to start leaves the call to be reclaimed when the rest end. */
static bool start_op(struct call *c, grpc_op *ops, size_t n, struct tag *tag)
{
    grpc_call_error err = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (err != GRPC_CALL_OK) {
        log_warn("extproc: grpc_call_start_batch failed (%d)", (int)err);
        return false;
    }
    c->pending++;
    return true;
}

static void request_next_call(struct extproc_server *srv)
{
    if (atomic_load(&srv->stopping)) {
        return;
    }
    struct call *c = call_new(srv);
    if (!c) {
        log_error("extproc: out of memory accepting a call");
        return;
    }
    grpc_call_error err = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md,
                                                   srv->cq, srv->cq, &c->t_new);
    if (err != GRPC_CALL_OK) {
        log_error("extproc: grpc_server_request_call failed (%d)", (int)err);
        call_free(c);
    }
}

static void report_done(struct call *c)
{
    struct extproc_server *srv = c->srv;
    if (c->done_reported || !(c->decided || c->rejected)) {
        return;
    }
    c->done_reported = true;
    if (!srv->cb.on_done) {
        return;
    }
    struct extproc_outcome o = {
        .end = EXTPROC_END_COMPLETE, .status = c->ex.status, .served = c->ex.served};
    if (c->rejected) {
        o.end = EXTPROC_END_REJECTED;
        o.status = c->reject_status;
    } else if (!c->ex.resp_done) {
        o.end = EXTPROC_END_CANCELLED;
    }
    srv->cb.on_done(srv->cb.ctx, c->exchange, &o);
}

static void call_free(struct call *c)
{
    report_done(c);
    extproc_out_free(&c->queue);
    extproc_exchange_deinit(&c->ex);
    if (c->recv_bb) {
        grpc_byte_buffer_destroy(c->recv_bb);
    }
    if (c->send_bb) {
        grpc_byte_buffer_destroy(c->send_bb);
    }
    if (c->status_started) {
        grpc_slice_unref(c->status_slice);
    }
    free(c->status_details);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->call) {
        grpc_call_unref(c->call);
    }
    struct extproc_server *srv = c->srv;
    free(c);
    srv->live_calls--;
    if (srv->shutdown_done && srv->live_calls == 0) {
        grpc_completion_queue_shutdown(srv->cq);
    }
}

static void call_maybe_free(struct call *c)
{
    if (c->pending == 0 && c->closed) {
        call_free(c);
    }
}

static void send_status_now(struct call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    c->status_slice = grpc_slice_from_copied_string(c->status_details ? c->status_details : "");
    c->status_started = true;
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = c->status;
    op.data.send_status_from_server.status_details = &c->status_slice;
    (void)start_op(c, &op, 1, &c->t_status);
}

/* Sends the next queued message, or the status once the queue is drained and one is wanted. */
static void pump_send(struct call *c)
{
    if (c->send_bb || c->status_started || c->closed) {
        return;
    }
    if (c->queue_head < c->queue.n) {
        struct extproc_bytes *m = &c->queue.v[c->queue_head++];
        grpc_slice s = grpc_slice_from_copied_buffer((const char *)m->data, m->len);
        c->send_bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = c->send_bb;
        if (!start_op(c, &op, 1, &c->t_send)) {
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
        }
        return;
    }
    if (c->want_status) {
        send_status_now(c);
    }
}

static void finish(struct call *c, grpc_status_code status, const char *details)
{
    if (c->want_status) {
        return;
    }
    c->want_status = true;
    c->stop_recv = true;
    c->status = status;
    free(c->status_details);
    c->status_details = details ? strdup(details) : NULL;
    pump_send(c);
}

static void start_recv(struct call *c)
{
    if (c->stop_recv || c->closed) {
        return;
    }
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    (void)start_op(c, &op, 1, &c->t_recv);
}

static int take_message(struct call *c, struct buf *into)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, c->recv_bb)) {
        return -EBADMSG;
    }
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    int rc = buf_append(into, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    return rc;
}

static void decide(struct call *c)
{
    struct extproc_server *srv = c->srv;
    struct extproc_request req;
    struct extproc_decision d;
    memset(&d, 0, sizeof(d));
    extproc_exchange_request(&c->ex, &req);
    srv->cb.decide(srv->cb.ctx, &req, &d);
    if (!d.immediate_status && (!d.destination || !*d.destination)) {
        log_error("extproc: decide() gave neither a destination nor an immediate status");
        (void)extproc_decision_reject(&d, 500, "{\"error\":\"no routing decision\"}");
    }
    c->exchange = d.exchange;
    if (d.immediate_status) {
        c->rejected = true;
        c->reject_status = d.immediate_status;
    } else {
        c->decided = true;
    }
    int rc = extproc_encode_decision(&d, &c->ex, &c->queue);
    extproc_decision_free(&d);
    if (rc) {
        finish(c, GRPC_STATUS_INTERNAL, "encoding the routing decision failed");
        return;
    }
    if (c->rejected) {
        /* An immediate response ends the exchange; the stream ends with it. */
        report_done(c);
        finish(c, GRPC_STATUS_OK, NULL);
    }
}

static void on_response_headers(struct call *c)
{
    struct extproc_server *srv = c->srv;
    struct extproc_headers add;
    memset(&add, 0, sizeof(add));
    if (srv->cb.on_response) {
        struct extproc_response resp;
        extproc_exchange_response(&c->ex, &resp);
        srv->cb.on_response(srv->cb.ctx, c->exchange, &resp, &add);
    }
    if (extproc_encode_response_headers(&add, &c->queue)) {
        finish(c, GRPC_STATUS_INTERNAL, "encoding the response headers failed");
    }
    extproc_headers_free(&add);
}

static void handle_event(struct call *c, enum extproc_event ev)
{
    int rc = 0;
    switch (ev) {
    case EXTPROC_EV_NONE:
        break;
    case EXTPROC_EV_DECIDE:
        decide(c);
        break;
    case EXTPROC_EV_RESP_HEADERS:
        on_response_headers(c);
        break;
    case EXTPROC_EV_RESP_BODY:
        rc = extproc_encode_response_body((const uint8_t *)c->ex.chunk.data, c->ex.chunk.len,
                                          c->ex.chunk_eos, &c->queue);
        break;
    case EXTPROC_EV_RESP_TRAILERS:
        rc = extproc_encode_trailers(false, &c->queue);
        break;
    }
    if (rc) {
        finish(c, GRPC_STATUS_INTERNAL, "encoding a response failed");
    }
}

static void process_message(struct call *c, const struct buf *msg)
{
    enum extproc_event ev;
    int rc = extproc_exchange_feed(&c->ex, (const uint8_t *)msg->data, msg->len, &ev);
    if (rc == -E2BIG) {
        /* Refused before decide(): there is no exchange for on_done to close. */
        if (extproc_encode_immediate(413, "{\"error\":\"request body too large\"}", NULL,
                                     &c->queue) == 0) {
            finish(c, GRPC_STATUS_OK, NULL);
        } else {
            finish(c, GRPC_STATUS_INTERNAL, "encoding a response failed");
        }
        return;
    }
    if (rc) {
        log_warn("extproc: rejecting a ProcessingRequest: %s", strerror(-rc));
        finish(c, GRPC_STATUS_INVALID_ARGUMENT,
               rc == -EPROTO ? "ProcessingRequest out of order" : "malformed ProcessingRequest");
        return;
    }
    handle_event(c, ev);
}

static void on_recv(struct call *c, bool ok)
{
    if (!ok || !c->recv_bb) {
        /* The proxy half-closed (or the call failed): end our side once the queue drains. */
        finish(c, GRPC_STATUS_OK, NULL);
        return;
    }
    struct buf msg;
    buf_init(&msg, SIZE_MAX);
    int rc = take_message(c, &msg);
    if (rc) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "unreadable message");
    } else if (c->kind == CALL_PROCESS) {
        process_message(c, &msg);
    }
    buf_free(&msg);
    if (c->kind == CALL_PROCESS) {
        pump_send(c);
        start_recv(c);
    }
}

static int health_status(struct extproc_server *srv, const char *service)
{
    bool ready = atomic_load(&srv->ready);
    if (strcmp(service, "") == 0 || strcmp(service, "liveness") == 0) {
        return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    }
    if (strcmp(service, "readiness") == 0 || strcmp(service, EXTPROC_SERVICE) == 0) {
        return ready ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                     : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    }
    return -1;
}

/* Answers a Check: the message, then OK; NOT_FOUND for a service we do not serve (the gRPC
 * health protocol's answer). */
static void on_health_request(struct call *c, bool ok)
{
    if (!ok || !c->recv_bb) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "missing HealthCheckRequest");
        return;
    }
    struct buf msg;
    buf_init(&msg, SIZE_MAX);
    Grpc__Health__V1__HealthCheckRequest *req = NULL;
    if (take_message(c, &msg) == 0) {
        req = grpc__health__v1__health_check_request__unpack(NULL, msg.len,
                                                             (const uint8_t *)msg.data);
    }
    buf_free(&msg);
    if (!req) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed HealthCheckRequest");
        return;
    }
    int status = health_status(c->srv, req->service ? req->service : "");
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    if (status < 0) {
        finish(c, GRPC_STATUS_NOT_FOUND, "unknown service");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse resp;
    grpc__health__v1__health_check_response__init(&resp);
    resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    uint8_t out[16];
    size_t len = grpc__health__v1__health_check_response__pack(&resp, out);
    struct extproc_out *q = &c->queue;
    q->v = calloc(1, sizeof(*q->v));
    if (q->v) {
        q->v[0].data = malloc(len ? len : 1);
    }
    if (!q->v || !q->v[0].data) {
        finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(q->v[0].data, out, len);
    q->v[0].len = len;
    q->n = q->cap = 1;
    finish(c, GRPC_STATUS_OK, NULL);
}

static void on_new_call(struct call *c, bool ok)
{
    struct extproc_server *srv = c->srv;
    if (!ok) {
        /* The server is shutting down: this slot never got a call. */
        c->closed = true;
        call_maybe_free(c);
        return;
    }
    request_next_call(srv);
    char *method = grpc_slice_to_c_string(c->details.method);
    if (strcmp(method, PROCESS_METHOD) == 0) {
        c->kind = CALL_PROCESS;
    } else if (strcmp(method, HEALTH_CHECK) == 0) {
        c->kind = CALL_HEALTH;
    }
    gpr_free(method);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (!start_op(c, &op, 1, &c->t_close)) {
        c->closed = true;
        call_maybe_free(c);
        return;
    }
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    (void)start_op(c, &op, 1, &c->t_meta);
    if (c->kind == CALL_UNKNOWN) {
        finish(c, GRPC_STATUS_UNIMPLEMENTED, "method not served here");
        return;
    }
    start_recv(c);
}

static void on_tag(struct tag *t, bool ok)
{
    struct call *c = t->call;
    if (t->kind == TAG_NEW) {
        on_new_call(c, ok);
        return;
    }
    c->pending--;
    switch (t->kind) {
    case TAG_RECV:
        if (c->kind == CALL_HEALTH) {
            on_health_request(c, ok);
        } else {
            on_recv(c, ok);
        }
        break;
    case TAG_SEND:
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
        if (!ok) {
            c->stop_recv = true;
        } else {
            pump_send(c);
        }
        break;
    case TAG_CLOSE:
        c->closed = true;
        break;
    default:
        break;
    }
    call_maybe_free(c);
}

static void *serve(void *arg)
{
    struct extproc_server *srv = arg;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
        if (ev.type != GRPC_OP_COMPLETE) {
            continue;
        }
        struct tag *t = ev.tag;
        if (t->kind == TAG_SHUTDOWN) {
            srv->shutdown_done = true;
            if (srv->live_calls == 0) {
                grpc_completion_queue_shutdown(srv->cq);
            }
            continue;
        }
        on_tag(t, ev.success != 0);
    }
    return NULL;
}

static int bind_server(struct extproc_server *srv, const struct extproc_config *cfg)
{
    char addr[300];
    const char *host = cfg->address && *cfg->address ? cfg->address : "127.0.0.1";
    int n = snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, cfg->port);
    if (n < 0 || (size_t)n >= sizeof(addr)) {
        return -EINVAL;
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    srv->port = grpc_server_add_http2_port(srv->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (srv->port <= 0) {
        log_error("extproc: cannot listen on %s", addr);
        return -EADDRINUSE;
    }
    return 0;
}

int extproc_start(const struct extproc_config *cfg, const struct extproc_callbacks *cb,
                  struct extproc_server **out)
{
    *out = NULL;
    if (!cfg || !cb || !cb->decide || cfg->port < 0 || cfg->port > 65535) {
        return -EINVAL;
    }
    struct extproc_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        return -ENOMEM;
    }
    grpc_init();
    srv->cb = *cb;
    srv->max_body = cfg->max_body_bytes ? cfg->max_body_bytes : EXTPROC_DEFAULT_MAX_BODY;
    srv->t_shutdown.kind = TAG_SHUTDOWN;
    srv->server = grpc_server_create(NULL, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
    int rc = bind_server(srv, cfg);
    if (rc == 0) {
        grpc_server_start(srv->server);
        request_next_call(srv);
        rc = -pthread_create(&srv->thread, NULL, serve, srv);
        if (rc) {
            /* No thread to drain the queue: stop the server from here. */
            grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
            grpc_server_cancel_all_calls(srv->server);
            (void)serve(srv);
        }
    } else {
        grpc_completion_queue_shutdown(srv->cq);
        (void)serve(srv);
    }
    if (rc) {
        grpc_server_destroy(srv->server);
        grpc_completion_queue_destroy(srv->cq);
        grpc_shutdown();
        free(srv);
        return rc;
    }
    *out = srv;
    return 0;
}

int extproc_port(const struct extproc_server *s)
{
    return s->port;
}

void extproc_set_ready(struct extproc_server *s, bool ready)
{
    atomic_store(&s->ready, ready);
}

void extproc_stop(struct extproc_server *s)
{
    if (!s) {
        return;
    }
    atomic_store(&s->stopping, true);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->server);
    pthread_join(s->thread, NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    free(s);
}
