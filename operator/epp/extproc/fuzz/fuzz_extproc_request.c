/*
 * Fuzz target for ProcessingRequest decoding and what is read out of it (extproc_msg.h): the input
 * is a sequence of frames (2-byte big-endian length, then that many bytes), each fed as one
 * ProcessingRequest into one exchange, the way a stream would; the whole input is also fed alone
 * to a fresh exchange. Every event is answered as the server would (a routed decision and an
 * immediate one, response headers, body pass-through), and every encoded answer must decode.
 * The request view must stay within what was fed: body no larger than the cap, strings NUL-ended.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "operator/epp/extproc/extproc_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BODY 4096

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_extproc_request: check failed: %s (line %d)\n", #cond,           \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_decodes(struct extproc_out *out)
{
    for (size_t i = 0; i < out->n; i++) {
        Envoy__Service__ExtProc__V3__ProcessingResponse *r =
            envoy__service__ext_proc__v3__processing_response__unpack(NULL, out->v[i].len,
                                                                      out->v[i].data);
        CHECK(r != NULL);
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    }
    extproc_out_free(out);
}

static void answer_decide(const struct extproc_exchange *ex)
{
    struct extproc_request req;
    extproc_exchange_request(ex, &req);
    CHECK(req.body_len <= MAX_BODY);
    CHECK(strlen(req.method) + strlen(req.path) + strlen(req.request_id) < 1u << 20);
    for (size_t i = 0; i < req.n_headers; i++) {
        for (const char *p = req.headers[i].name; *p; p++) {
            CHECK(*p < 'A' || *p > 'Z');
        }
    }
    for (size_t i = 0; i < req.n_subset; i++) {
        CHECK(req.subset[i][0] != '\0');
    }
    struct extproc_decision d;
    memset(&d, 0, sizeof(d));
    struct extproc_out out = {0};
    CHECK(extproc_decision_route(&d, req.n_subset ? req.subset[0] : "10.0.0.1:8000") == 0);
    CHECK(extproc_encode_decision(&d, ex, &out) == 0);
    CHECK(out.n >= 1);
    check_decodes(&out);
    CHECK(extproc_decision_reject(&d, 503, "{}") == 0);
    CHECK(extproc_encode_decision(&d, ex, &out) == 0 && out.n == 1);
    check_decodes(&out);
    extproc_decision_free(&d);
}

static void answer(const struct extproc_exchange *ex, enum extproc_event ev)
{
    struct extproc_out out = {0};
    struct extproc_response resp;
    switch (ev) {
    case EXTPROC_EV_DECIDE:
        answer_decide(ex);
        return;
    case EXTPROC_EV_RESP_HEADERS:
        extproc_exchange_response(ex, &resp);
        CHECK(extproc_encode_response_headers(NULL, &out) == 0);
        break;
    case EXTPROC_EV_RESP_BODY:
        CHECK(extproc_encode_response_body((const uint8_t *)ex->chunk.data, ex->chunk.len,
                                           ex->chunk_eos, &out) == 0);
        break;
    case EXTPROC_EV_RESP_TRAILERS:
        CHECK(extproc_encode_trailers(false, &out) == 0);
        break;
    case EXTPROC_EV_NONE:
        break;
    }
    check_decodes(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct extproc_exchange ex;
    enum extproc_event ev;
    extproc_exchange_init(&ex, MAX_BODY);
    size_t off = 0;
    while (size - off >= 2) {
        size_t len = ((size_t)data[off] << 8) | data[off + 1];
        off += 2;
        if (len > size - off) {
            break;
        }
        if (extproc_exchange_feed(&ex, data + off, len, &ev) == 0) {
            answer(&ex, ev);
        } else {
            CHECK(ev == EXTPROC_EV_NONE);
        }
        off += len;
    }
    extproc_exchange_deinit(&ex);

    extproc_exchange_init(&ex, MAX_BODY);
    if (extproc_exchange_feed(&ex, data, size, &ev) == 0) {
        answer(&ex, ev);
    }
    extproc_exchange_deinit(&ex);
    return 0;
}
