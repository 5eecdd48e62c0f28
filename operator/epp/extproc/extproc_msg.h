/*
 * The pure half of the ext-proc server: one exchange's state fed with encoded ProcessingRequest
 * messages, and the ProcessingResponse messages the EPP answers with, encoded. No gRPC here, so
 * unit tests and the fuzz target drive it directly; extproc.c moves the bytes.
 */
#ifndef TANDEM_EPP_EXTPROC_MSG_H
#define TANDEM_EPP_EXTPROC_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "operator/epp/extproc/extproc.h"

/* The reference EPP streams a body back in chunks of at most this many bytes (GIE
 * pkg/epp/handlers: bodyByteLimit), under the proxy's per-message limits. */
#define EXTPROC_BODY_CHUNK 62000

/* Request bodies above this end the stream with 413 unless configured otherwise. */
#define EXTPROC_DEFAULT_MAX_BODY (64u << 20)

/* What a fed message asks of the server. */
enum extproc_event {
    EXTPROC_EV_NONE,          /* nothing to answer yet (a request body chunk before its end) */
    EXTPROC_EV_DECIDE,        /* the request is complete: call decide() and send the decision */
    EXTPROC_EV_RESP_HEADERS,  /* response headers: answer with extproc_encode_response_headers */
    EXTPROC_EV_RESP_BODY,     /* a response body chunk (ex->chunk): pass it through */
    EXTPROC_EV_RESP_TRAILERS, /* response trailers: answer with an empty trailers response */
};

enum extproc_phase {
    EXTPROC_WANT_HEADERS,
    EXTPROC_WANT_BODY,
    EXTPROC_DECIDED,
};

/* One HTTP exchange as seen through the stream. */
struct extproc_exchange {
    size_t max_body;
    enum extproc_phase phase;
    struct extproc_headers headers;
    const char *method, *path, *request_id; /* into headers, or "" */
    struct buf body;
    bool had_body;         /* the request headers did not carry end_of_stream */
    bool request_trailers; /* the request ended with trailers (send a trailers response) */
    char **subset;
    size_t n_subset;
    bool has_subset;
    char *served;
    int status;
    struct extproc_headers resp_headers;
    bool resp_done; /* the response reached its end_of_stream (or trailers) */
    struct buf chunk;
    bool chunk_eos;
};

void extproc_exchange_init(struct extproc_exchange *ex, size_t max_body);
void extproc_exchange_deinit(struct extproc_exchange *ex);

/* Decodes one ProcessingRequest and folds it into ex. Returns 0 and sets *ev, -EBADMSG for bytes
 * that are not a ProcessingRequest, -EPROTO for a message out of order (a body before headers,
 * request messages after the decision), -E2BIG for a request body over max_body, -ENOMEM. */
int extproc_exchange_feed(struct extproc_exchange *ex, const uint8_t *data, size_t len,
                          enum extproc_event *ev);

/* The request view handed to decide(); valid while ex is unchanged. */
void extproc_exchange_request(const struct extproc_exchange *ex, struct extproc_request *req);
void extproc_exchange_response(const struct extproc_exchange *ex, struct extproc_response *resp);

/* Encoded ProcessingResponse messages, in sending order. */
struct extproc_out {
    struct extproc_bytes {
        uint8_t *data;
        size_t len;
    } * v;
    size_t n, cap;
};

void extproc_out_free(struct extproc_out *out);

/* The answer to the request: for a route the headers response (destination header + metadata,
 * Content-Length of the body sent on, the decision's headers; route cache cleared), then the body
 * in streamed body responses when the request had one, then a trailers response when it ended
 * with trailers; for a rejection one ImmediateResponse. orig is the request body, sent on unless
 * the decision replaces it. */
int extproc_encode_decision(const struct extproc_decision *d, const struct extproc_exchange *ex,
                            struct extproc_out *out);
int extproc_encode_response_headers(const struct extproc_headers *add, struct extproc_out *out);
int extproc_encode_response_body(const uint8_t *chunk, size_t len, bool eos,
                                 struct extproc_out *out);
int extproc_encode_trailers(bool request_side, struct extproc_out *out);
/* An ImmediateResponse on its own (errors found by the server itself, e.g. 413). */
int extproc_encode_immediate(int status, const char *json_body, const struct extproc_headers *hdrs,
                             struct extproc_out *out);

#endif /* TANDEM_EPP_EXTPROC_MSG_H */
