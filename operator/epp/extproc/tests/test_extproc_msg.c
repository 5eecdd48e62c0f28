/*
 * Tests of the pure half of the ext-proc server (extproc_msg.h): ProcessingRequests folded into an
 * exchange and the request view decide() gets; decisions, response headers and body chunks
 * encoded into ProcessingResponses, decoded back with protobuf-c; malformed and out-of-order input.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"
#include "operator/epp/extproc/extproc_msg.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest ProcReq;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse ProcResp;

/* A ProcessingRequest under construction: headers, metadata values, body. */
struct req_builder {
    ProcReq req;
    Envoy__Service__ExtProc__V3__HttpHeaders hh;
    Envoy__Service__ExtProc__V3__HttpBody body;
    Envoy__Service__ExtProc__V3__HttpTrailers trailers;
    Envoy__Config__Core__V3__HeaderMap map;
    Envoy__Config__Core__V3__HeaderValue hv[8];
    Envoy__Config__Core__V3__HeaderValue *hvp[8];
    Envoy__Config__Core__V3__Metadata md;
    Envoy__Config__Core__V3__Metadata__FilterMetadataEntry ns;
    Envoy__Config__Core__V3__Metadata__FilterMetadataEntry *nsp;
    Google__Protobuf__Struct fields;
    Google__Protobuf__Struct__FieldsEntry entry;
    Google__Protobuf__Struct__FieldsEntry *entryp;
    Google__Protobuf__Value value;
    Google__Protobuf__ListValue list;
    Google__Protobuf__Value items[4];
    Google__Protobuf__Value *itemp[4];
};

static void rb_init(struct req_builder *b)
{
    memset(b, 0, sizeof(*b));
    envoy__service__ext_proc__v3__processing_request__init(&b->req);
    envoy__service__ext_proc__v3__http_headers__init(&b->hh);
    envoy__service__ext_proc__v3__http_body__init(&b->body);
    envoy__service__ext_proc__v3__http_trailers__init(&b->trailers);
    envoy__config__core__v3__header_map__init(&b->map);
    b->map.headers = b->hvp;
    b->hh.headers = &b->map;
}

/* raw puts the value in raw_value as Envoy does; otherwise in value. */
static void rb_header(struct req_builder *b, const char *k, const char *v, bool raw)
{
    size_t i = b->map.n_headers++;
    envoy__config__core__v3__header_value__init(&b->hv[i]);
    b->hv[i].key = (char *)k;
    if (raw) {
        b->hv[i].raw_value.data = (uint8_t *)v;
        b->hv[i].raw_value.len = strlen(v);
    } else {
        b->hv[i].value = (char *)v;
    }
    b->hvp[i] = &b->hv[i];
}

static void rb_request_headers(struct req_builder *b, bool eos)
{
    b->hh.end_of_stream = eos;
    b->req.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
    b->req.request_headers = &b->hh;
}

static void rb_response_headers(struct req_builder *b, bool eos)
{
    b->hh.end_of_stream = eos;
    b->req.request_case =
        ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS;
    b->req.response_headers = &b->hh;
}

static void rb_body(struct req_builder *b, bool response, const char *data, bool eos)
{
    b->body.body.data = (uint8_t *)data;
    b->body.body.len = strlen(data);
    b->body.end_of_stream = eos;
    if (response) {
        b->req.request_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY;
        b->req.response_body = &b->body;
    } else {
        b->req.request_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY;
        b->req.request_body = &b->body;
    }
}

/* Metadata ns/key = a string value, or (n >= 0) a list of n strings. */
static void rb_metadata(struct req_builder *b, const char *ns, const char *key, const char *str,
                        const char *const *list, int n)
{
    envoy__config__core__v3__metadata__init(&b->md);
    envoy__config__core__v3__metadata__filter_metadata_entry__init(&b->ns);
    google__protobuf__struct__init(&b->fields);
    google__protobuf__struct__fields_entry__init(&b->entry);
    google__protobuf__value__init(&b->value);
    if (n >= 0) {
        google__protobuf__list_value__init(&b->list);
        for (int i = 0; i < n; i++) {
            google__protobuf__value__init(&b->items[i]);
            b->items[i].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
            b->items[i].string_value = (char *)list[i];
            b->itemp[i] = &b->items[i];
        }
        b->list.n_values = (size_t)n;
        b->list.values = b->itemp;
        b->value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
        b->value.list_value = &b->list;
    } else {
        b->value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        b->value.string_value = (char *)str;
    }
    b->entry.key = (char *)key;
    b->entry.value = &b->value;
    b->entryp = &b->entry;
    b->fields.n_fields = 1;
    b->fields.fields = &b->entryp;
    b->ns.key = (char *)ns;
    b->ns.value = &b->fields;
    b->nsp = &b->ns;
    b->md.n_filter_metadata = 1;
    b->md.filter_metadata = &b->nsp;
    b->req.metadata_context = &b->md;
}

static int rb_feed(struct req_builder *b, struct extproc_exchange *ex, enum extproc_event *ev)
{
    size_t len = envoy__service__ext_proc__v3__processing_request__get_packed_size(&b->req);
    uint8_t *data = malloc(len + 1);
    assert_non_null(data);
    envoy__service__ext_proc__v3__processing_request__pack(&b->req, data);
    int rc = extproc_exchange_feed(ex, data, len, ev);
    free(data);
    return rc;
}

static int feed_headers(struct extproc_exchange *ex, bool eos)
{
    struct req_builder b;
    enum extproc_event ev;
    rb_init(&b);
    rb_header(&b, ":method", "POST", true);
    rb_header(&b, ":path", "/v1/completions", true);
    rb_request_headers(&b, eos);
    return rb_feed(&b, ex, &ev);
}

static int feed_body(struct extproc_exchange *ex, bool response, const char *data, bool eos,
                     enum extproc_event *ev)
{
    struct req_builder b;
    rb_init(&b);
    rb_body(&b, response, data, eos);
    return rb_feed(&b, ex, ev);
}

static void test_streamed_request(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    extproc_exchange_init(&ex, 0);
    struct req_builder b;
    enum extproc_event ev;
    rb_init(&b);
    rb_header(&b, ":method", "POST", true);
    rb_header(&b, ":path", "/v1/completions", true);
    rb_header(&b, "X-Request-Id", "req-7", false);
    static const char *const subset[] = {"10.0.0.1:8000", "10.0.0.2:8000"};
    rb_metadata(&b, EXTPROC_SUBSET_NAMESPACE, EXTPROC_SUBSET_KEY, NULL, subset, 2);
    rb_request_headers(&b, false);
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_NONE);
    assert_int_equal(feed_body(&ex, false, "{\"model\":", false, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_NONE);
    assert_int_equal(feed_body(&ex, false, "\"m\"}", true, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_DECIDE);

    struct extproc_request req;
    extproc_exchange_request(&ex, &req);
    assert_string_equal(req.method, "POST");
    assert_string_equal(req.path, "/v1/completions");
    assert_string_equal(req.request_id, "req-7");
    assert_int_equal(req.n_headers, 3);
    assert_string_equal(req.headers[2].name, "x-request-id");
    assert_int_equal(req.body_len, 13);
    assert_memory_equal(req.body, "{\"model\":\"m\"}", 13);
    assert_true(req.has_subset);
    assert_int_equal(req.n_subset, 2);
    assert_string_equal(req.subset[1], "10.0.0.2:8000");
    extproc_exchange_deinit(&ex);
}

static void test_subset_forms(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    struct req_builder b;
    enum extproc_event ev;
    struct extproc_request req;

    extproc_exchange_init(&ex, 0);
    rb_init(&b);
    rb_metadata(&b, EXTPROC_SUBSET_NAMESPACE, EXTPROC_SUBSET_KEY, " a:1 ,b:2,,", NULL, -1);
    rb_request_headers(&b, true);
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_DECIDE);
    extproc_exchange_request(&ex, &req);
    assert_true(req.has_subset);
    assert_int_equal(req.n_subset, 2);
    assert_string_equal(req.subset[0], "a:1");
    assert_string_equal(req.subset[1], "b:2");
    assert_string_equal(req.method, "");
    extproc_exchange_deinit(&ex);

    extproc_exchange_init(&ex, 0);
    rb_init(&b);
    rb_metadata(&b, EXTPROC_SUBSET_NAMESPACE, EXTPROC_SUBSET_KEY, NULL, NULL, 0);
    rb_request_headers(&b, true);
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    extproc_exchange_request(&ex, &req);
    assert_true(req.has_subset);
    assert_int_equal(req.n_subset, 0);
    extproc_exchange_deinit(&ex);

    /* Another namespace is not a hint. */
    extproc_exchange_init(&ex, 0);
    rb_init(&b);
    rb_metadata(&b, "envoy.lb", EXTPROC_SUBSET_KEY, "a:1", NULL, -1);
    rb_request_headers(&b, true);
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    extproc_exchange_request(&ex, &req);
    assert_false(req.has_subset);
    extproc_exchange_deinit(&ex);
}

static void test_malformed_and_out_of_order(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    enum extproc_event ev;
    extproc_exchange_init(&ex, 16);
    static const uint8_t junk[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    assert_int_equal(extproc_exchange_feed(&ex, junk, sizeof(junk), &ev), -EBADMSG);
    /* A message with no oneof set names nothing to process. */
    assert_int_equal(extproc_exchange_feed(&ex, (const uint8_t *)"", 0, &ev), -EBADMSG);
    assert_int_equal(feed_body(&ex, false, "x", true, &ev), -EPROTO);
    assert_int_equal(feed_body(&ex, true, "x", true, &ev), -EPROTO);
    assert_int_equal(feed_headers(&ex, false), 0);
    assert_int_equal(feed_headers(&ex, false), -EPROTO);
    assert_int_equal(feed_body(&ex, false, "0123456789", false, &ev), 0);
    assert_int_equal(feed_body(&ex, false, "0123456789", false, &ev), -E2BIG);
    assert_int_equal(ev, EXTPROC_EV_NONE);
    extproc_exchange_deinit(&ex);

    extproc_exchange_init(&ex, 0);
    struct req_builder b;
    rb_init(&b);
    rb_response_headers(&b, false);
    assert_int_equal(rb_feed(&b, &ex, &ev), -EPROTO);
    extproc_exchange_deinit(&ex);
}

static ProcResp *unpack(const struct extproc_out *out, size_t i)
{
    assert_true(i < out->n);
    ProcResp *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, out->v[i].len,
                                                                            out->v[i].data);
    assert_non_null(r);
    return r;
}

static const char *set_header(const Envoy__Service__ExtProc__V3__HeaderMutation *m, const char *k,
                              char *out, size_t cap)
{
    for (size_t i = 0; i < m->n_set_headers; i++) {
        const Envoy__Config__Core__V3__HeaderValue *h = m->set_headers[i]->header;
        if (strcmp(h->key, k) == 0) {
            assert_true(h->raw_value.len < cap);
            memcpy(out, h->raw_value.data, h->raw_value.len);
            out[h->raw_value.len] = '\0';
            return out;
        }
    }
    return NULL;
}

static void check_headers_response(const ProcResp *r, const char *dest, const char *length)
{
    char v[64];
    assert_int_equal(r->response_case,
                     ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS);
    const Envoy__Service__ExtProc__V3__CommonResponse *c = r->request_headers->response;
    assert_true(c->clear_route_cache);
    assert_string_equal(set_header(c->header_mutation, EXTPROC_DEST_HEADER, v, sizeof(v)), dest);
    if (length) {
        assert_string_equal(set_header(c->header_mutation, "Content-Length", v, sizeof(v)), length);
    } else {
        assert_null(set_header(c->header_mutation, "Content-Length", v, sizeof(v)));
    }
    const Google__Protobuf__Struct *md = r->dynamic_metadata;
    assert_int_equal(md->n_fields, 1);
    assert_string_equal(md->fields[0]->key, "envoy.lb");
    const Google__Protobuf__Struct *lb = md->fields[0]->value->struct_value;
    assert_string_equal(lb->fields[0]->key, EXTPROC_DEST_HEADER);
    assert_string_equal(lb->fields[0]->value->string_value, dest);
}

static void test_encode_route_chunks_body(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    enum extproc_event ev;
    extproc_exchange_init(&ex, 0);
    assert_int_equal(feed_headers(&ex, false), 0);
    size_t total = EXTPROC_BODY_CHUNK * 2 + 5;
    char *big = malloc(total + 1);
    assert_non_null(big);
    memset(big, 'x', total);
    big[total] = '\0';
    assert_int_equal(feed_body(&ex, false, big, true, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_DECIDE);

    struct extproc_decision d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(extproc_decision_route(&d, "10.0.0.1:8000,10.0.0.2:8000"), 0);
    assert_int_equal(extproc_headers_add(&d.set_headers, "x-prefiller-host-port", "p:1"), 0);
    assert_int_equal(extproc_headers_add(&d.remove_headers, "x-drop", NULL), 0);
    struct extproc_out out = {0};
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), 0);
    assert_int_equal(out.n, 4);
    ProcResp *r = unpack(&out, 0);
    char length[32];
    (void)snprintf(length, sizeof(length), "%zu", total);
    check_headers_response(r, "10.0.0.1:8000,10.0.0.2:8000", length);
    char v[32];
    const Envoy__Service__ExtProc__V3__HeaderMutation *m =
        r->request_headers->response->header_mutation;
    assert_string_equal(set_header(m, "x-prefiller-host-port", v, sizeof(v)), "p:1");
    assert_int_equal(m->n_remove_headers, 1);
    assert_string_equal(m->remove_headers[0], "x-drop");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    size_t seen = 0;
    for (size_t i = 1; i < out.n; i++) {
        r = unpack(&out, i);
        assert_int_equal(r->response_case,
                         ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY);
        const Envoy__Service__ExtProc__V3__StreamedBodyResponse *s =
            r->request_body->response->body_mutation->streamed_response;
        assert_true(s->body.len <= EXTPROC_BODY_CHUNK);
        assert_memory_equal(s->body.data, big + seen, s->body.len);
        seen += s->body.len;
        assert_int_equal(s->end_of_stream, i == out.n - 1);
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    }
    assert_int_equal(seen, total);
    extproc_out_free(&out);

    /* A replaced body is what goes on, with its own length. */
    assert_int_equal(extproc_decision_set_body(&d, "{}", 2), 0);
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), 0);
    assert_int_equal(out.n, 2);
    r = unpack(&out, 0);
    check_headers_response(r, "10.0.0.1:8000,10.0.0.2:8000", "2");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_decision_free(&d);

    /* No destination and no immediate status is not a decision. */
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), -EINVAL);
    free(big);
    extproc_exchange_deinit(&ex);
}

static void test_encode_without_body_and_with_trailers(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    extproc_exchange_init(&ex, 0);
    assert_int_equal(feed_headers(&ex, true), 0);
    struct extproc_decision d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(extproc_decision_route(&d, "10.0.0.1:8000"), 0);
    struct extproc_out out = {0};
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), 0);
    assert_int_equal(out.n, 1);
    ProcResp *r = unpack(&out, 0);
    check_headers_response(r, "10.0.0.1:8000", NULL);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_exchange_deinit(&ex);

    /* Body then trailers: the body goes back without end_of_stream, then a trailers response. */
    enum extproc_event ev;
    extproc_exchange_init(&ex, 0);
    assert_int_equal(feed_headers(&ex, false), 0);
    assert_int_equal(feed_body(&ex, false, "{}", false, &ev), 0);
    struct req_builder b;
    rb_init(&b);
    envoy__config__core__v3__header_map__init(&b.map);
    b.trailers.trailers = &b.map;
    b.req.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS;
    b.req.request_trailers = &b.trailers;
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_DECIDE);
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), 0);
    assert_int_equal(out.n, 3);
    r = unpack(&out, 1);
    assert_false(r->request_body->response->body_mutation->streamed_response->end_of_stream);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    r = unpack(&out, 2);
    assert_int_equal(r->response_case,
                     ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_decision_free(&d);
    extproc_exchange_deinit(&ex);
}

static void test_encode_immediate(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    extproc_exchange_init(&ex, 0);
    struct extproc_decision d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(extproc_decision_reject(&d, 429, "{\"error\":\"shed\"}"), 0);
    assert_int_equal(extproc_headers_add(&d.immediate_headers, "retry-after", "1"), 0);
    struct extproc_out out = {0};
    assert_int_equal(extproc_encode_decision(&d, &ex, &out), 0);
    assert_int_equal(out.n, 1);
    ProcResp *r = unpack(&out, 0);
    assert_int_equal(
        r->response_case,
        ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    const Envoy__Service__ExtProc__V3__ImmediateResponse *ir = r->immediate_response;
    assert_int_equal(ir->status->code, 429);
    assert_memory_equal(ir->body.data, "{\"error\":\"shed\"}", ir->body.len);
    char v[32];
    assert_string_equal(set_header(ir->headers, "content-type", v, sizeof(v)), "application/json");
    assert_string_equal(set_header(ir->headers, "retry-after", v, sizeof(v)), "1");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_decision_free(&d);
    extproc_exchange_deinit(&ex);
}

static void test_response_side(void **state)
{
    (void)state;
    struct extproc_exchange ex;
    enum extproc_event ev;
    extproc_exchange_init(&ex, 0);
    assert_int_equal(feed_headers(&ex, true), 0);
    struct req_builder b;
    rb_init(&b);
    rb_header(&b, ":status", "200", true);
    rb_metadata(&b, EXTPROC_DEST_NAMESPACE, EXTPROC_SERVED_KEY, "10.0.0.1:8000", NULL, -1);
    rb_response_headers(&b, false);
    assert_int_equal(rb_feed(&b, &ex, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_RESP_HEADERS);
    struct extproc_response resp;
    extproc_exchange_response(&ex, &resp);
    assert_int_equal(resp.status, 200);
    assert_string_equal(resp.served, "10.0.0.1:8000");
    assert_false(ex.resp_done);

    struct extproc_headers add = {0};
    assert_int_equal(extproc_headers_add(&add, "x-session-token", "t"), 0);
    struct extproc_out out = {0};
    assert_int_equal(extproc_encode_response_headers(&add, &out), 0);
    ProcResp *r = unpack(&out, 0);
    assert_int_equal(r->response_case,
                     ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS);
    char v[8];
    assert_string_equal(
        set_header(r->response_headers->response->header_mutation, "x-session-token", v, sizeof(v)),
        "t");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_headers_free(&add);

    assert_int_equal(feed_body(&ex, true, "data: x\n\n", true, &ev), 0);
    assert_int_equal(ev, EXTPROC_EV_RESP_BODY);
    assert_true(ex.resp_done);
    assert_int_equal(extproc_encode_response_body((const uint8_t *)ex.chunk.data, ex.chunk.len,
                                                  ex.chunk_eos, &out),
                     0);
    r = unpack(&out, 0);
    const Envoy__Service__ExtProc__V3__StreamedBodyResponse *s =
        r->response_body->response->body_mutation->streamed_response;
    assert_memory_equal(s->body.data, "data: x\n\n", s->body.len);
    assert_true(s->end_of_stream);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    extproc_out_free(&out);
    extproc_exchange_deinit(&ex);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_request),
        cmocka_unit_test(test_subset_forms),
        cmocka_unit_test(test_malformed_and_out_of_order),
        cmocka_unit_test(test_encode_route_chunks_body),
        cmocka_unit_test(test_encode_without_body_and_with_trailers),
        cmocka_unit_test(test_encode_immediate),
        cmocka_unit_test(test_response_side),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
