/*
 * The EPP's Envoy ext-proc server (envoy.service.ext_proc.v3.ExternalProcessor,
 * FULL_DUPLEX_STREAMED request and response bodies), speaking the Endpoint Picker protocol of the
 * Gateway API Inference Extension (docs/proposals/004-endpoint-picker-protocol): the proxy streams
 * a request's headers and body; once the body is complete the integrator's decide() picks; the
 * server answers with the destination as both the x-gateway-destination-endpoint header and the
 * envoy.lb dynamic metadata, then streams the (possibly replaced) body back; or it answers with an
 * ImmediateResponse (503, 429, 400). On the way back, response headers may gain headers
 * (on_response()), the response body passes through unchanged, and on_done() reports how the
 * exchange ended. The same listener serves grpc.health.v1.Health/Check for `liveness`, `readiness`
 * and the ExternalProcessor service.
 *
 * Threads: the server runs one thread of its own that drives gRPC's completion queue. Every
 * callback runs on that thread, one at a time; it must not block (marshal work to the integrator's
 * loop and copy what it keeps: the pointers it is given live only for the call). extproc_set_ready
 * may be called from any thread.
 */
#ifndef TANDEM_EPP_EXTPROC_H
#define TANDEM_EPP_EXTPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Keys of the protocol (GIE pkg/epp/metadata/consts.go). */
#define EXTPROC_DEST_HEADER      "x-gateway-destination-endpoint"
#define EXTPROC_DEST_NAMESPACE   "envoy.lb"
#define EXTPROC_SERVED_KEY       "x-gateway-destination-endpoint-served"
#define EXTPROC_SUBSET_NAMESPACE "envoy.lb.subset_hint"
#define EXTPROC_SUBSET_KEY       "x-gateway-destination-endpoint-subset"
#define EXTPROC_DEFAULT_PORT     9002

/* A header: name lower-case as the proxy sends it. */
struct extproc_header {
    char *name;
    char *value;
};

/* A growable list of headers the caller owns (value unused for lists of names to remove). */
struct extproc_headers {
    struct extproc_header *v;
    size_t n, cap;
};

/* Appends copies of name and value (value may be NULL: stored as ""). 0 or -ENOMEM. */
int extproc_headers_add(struct extproc_headers *h, const char *name, const char *value);
void extproc_headers_free(struct extproc_headers *h);

/* What decide() sees of one request. All pointers are valid only during the call; strings are
 * "" when absent. subset lists the endpoints of envoy.lb.subset_hint; has_subset says whether the
 * proxy sent the hint at all (an empty list then means no endpoint may be picked: answer 503). */
struct extproc_request {
    const char *request_id; /* x-request-id */
    const char *method;     /* :method */
    const char *path;       /* :path */
    const struct extproc_header *headers;
    size_t n_headers;
    const uint8_t *body;
    size_t body_len;
    const char *const *subset;
    size_t n_subset;
    bool has_subset;
};

/* What decide() answers; zeroed before the call and freed by the server after it. Either
 * immediate_status (400, 429, 503, ...) with immediate_body/immediate_headers, or destination
 * ("ip:port" or "ip:port,ip:port,..." in order of preference) with headers to set and remove and,
 * when replace_body, a new body. exchange is the integrator's own pointer for this exchange,
 * handed back to on_response() and on_done(). */
struct extproc_decision {
    int immediate_status;
    char *immediate_body;
    struct extproc_headers immediate_headers;
    char *destination;
    struct extproc_headers set_headers;
    struct extproc_headers remove_headers;
    bool replace_body;
    uint8_t *body;
    size_t body_len;
    void *exchange;
};

/* Helpers that copy into a decision: 0 or -ENOMEM. */
int extproc_decision_reject(struct extproc_decision *d, int status, const char *json_body);
int extproc_decision_route(struct extproc_decision *d, const char *destination);
int extproc_decision_set_body(struct extproc_decision *d, const void *body, size_t len);
void extproc_decision_free(struct extproc_decision *d);

/* The upstream's response headers: status is :status (0 when missing); served is the endpoint the
 * proxy reports in metadata envoy.lb/x-gateway-destination-endpoint-served, or NULL. */
struct extproc_response {
    int status;
    const struct extproc_header *headers;
    size_t n_headers;
    const char *served;
};

enum extproc_end {
    EXTPROC_END_COMPLETE,  /* the response went through to its end */
    EXTPROC_END_REJECTED,  /* decide() answered with an immediate response */
    EXTPROC_END_CANCELLED, /* the stream ended before the response did (client gone, proxy reset) */
};

struct extproc_outcome {
    enum extproc_end end;
    int status;         /* the response's :status, or the immediate status; 0 if none was seen */
    const char *served; /* as in extproc_response; NULL if the proxy did not report it */
};

/* on_response and on_done may be NULL. on_done is called exactly once for each decide() call. */
struct extproc_callbacks {
    void *ctx;
    void (*decide)(void *ctx, const struct extproc_request *req, struct extproc_decision *d);
    void (*on_response)(void *ctx, void *exchange, const struct extproc_response *resp,
                        struct extproc_headers *add);
    void (*on_done)(void *ctx, void *exchange, const struct extproc_outcome *outcome);
};

struct extproc_config {
    const char *address;   /* host to bind, NULL: "127.0.0.1" */
    int port;              /* 0: an ephemeral port (see extproc_port) */
    size_t max_body_bytes; /* 0: 64 MiB; a larger request body ends the stream with 413 */
};

struct extproc_server;

/* Binds, starts the server thread and serves until extproc_stop. Not ready until
 * extproc_set_ready(s, true): readiness and the ExternalProcessor health service answer
 * NOT_SERVING meanwhile (liveness SERVING). 0 or -EINVAL / -EADDRINUSE / -ENOMEM. */
int extproc_start(const struct extproc_config *cfg, const struct extproc_callbacks *cb,
                  struct extproc_server **out);
int extproc_port(const struct extproc_server *s);
void extproc_set_ready(struct extproc_server *s, bool ready);
/* Cancels open streams (their on_done runs, as EXTPROC_END_CANCELLED), joins the thread, frees s.
 * NULL is a no-op. */
void extproc_stop(struct extproc_server *s);

#endif /* TANDEM_EPP_EXTPROC_H */
