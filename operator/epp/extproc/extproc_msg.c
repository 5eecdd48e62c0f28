/*
 * ProcessingRequest decoding and ProcessingResponse encoding, with protobuf-c over our copies of
 * Envoy's protos (proto/). protobuf-c rather than upb or the C++ protobuf: it is a plain C library
 * packaged by Debian, its generated code is C structs we can fill on the stack, and it skips the
 * fields our trimmed protos leave out, so Envoy's full messages still decode.
 */
#include "operator/epp/extproc/extproc_msg.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ext_proc/v3/external_processor.pb-c.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest ProcReq;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse ProcResp;
typedef Envoy__Config__Core__V3__HeaderMap HeaderMap;
typedef Envoy__Config__Core__V3__HeaderValue HeaderValue;
typedef Envoy__Config__Core__V3__HeaderValueOption HeaderValueOption;
typedef Envoy__Service__ExtProc__V3__HeaderMutation HeaderMutation;
typedef Envoy__Service__ExtProc__V3__CommonResponse CommonResponse;
typedef Envoy__Service__ExtProc__V3__HttpBody HttpBody;
typedef Google__Protobuf__Struct PbStruct;
typedef Google__Protobuf__Value PbValue;

int extproc_headers_add(struct extproc_headers *h, const char *name, const char *value)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        struct extproc_header *v = realloc(h->v, cap * sizeof(*v));
        if (!v) {
            return -ENOMEM;
        }
        h->v = v;
        h->cap = cap;
    }
    char *n = strdup(name);
    char *val = strdup(value ? value : "");
    if (!n || !val) {
        free(n);
        free(val);
        return -ENOMEM;
    }
    h->v[h->n].name = n;
    h->v[h->n].value = val;
    h->n++;
    return 0;
}

void extproc_headers_free(struct extproc_headers *h)
{
    for (size_t i = 0; i < h->n; i++) {
        free(h->v[i].name);
        free(h->v[i].value);
    }
    free(h->v);
    memset(h, 0, sizeof(*h));
}

int extproc_decision_reject(struct extproc_decision *d, int status, const char *json_body)
{
    char *body = strdup(json_body ? json_body : "");
    if (!body) {
        return -ENOMEM;
    }
    free(d->immediate_body);
    d->immediate_body = body;
    d->immediate_status = status;
    return 0;
}

int extproc_decision_route(struct extproc_decision *d, const char *destination)
{
    char *dest = strdup(destination);
    if (!dest) {
        return -ENOMEM;
    }
    free(d->destination);
    d->destination = dest;
    return 0;
}

int extproc_decision_set_body(struct extproc_decision *d, const void *body, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        return -ENOMEM;
    }
    if (len) {
        memcpy(copy, body, len);
    }
    free(d->body);
    d->body = copy;
    d->body_len = len;
    d->replace_body = true;
    return 0;
}

void extproc_decision_free(struct extproc_decision *d)
{
    free(d->immediate_body);
    extproc_headers_free(&d->immediate_headers);
    free(d->destination);
    extproc_headers_free(&d->set_headers);
    extproc_headers_free(&d->remove_headers);
    free(d->body);
    memset(d, 0, sizeof(*d));
}

void extproc_exchange_init(struct extproc_exchange *ex, size_t max_body)
{
    memset(ex, 0, sizeof(*ex));
    ex->max_body = max_body ? max_body : EXTPROC_DEFAULT_MAX_BODY;
    ex->method = ex->path = ex->request_id = "";
    buf_init(&ex->body, ex->max_body);
    buf_init(&ex->chunk, SIZE_MAX);
}

static void free_subset(struct extproc_exchange *ex)
{
    for (size_t i = 0; i < ex->n_subset; i++) {
        free(ex->subset[i]);
    }
    free(ex->subset);
    ex->subset = NULL;
    ex->n_subset = 0;
}

void extproc_exchange_deinit(struct extproc_exchange *ex)
{
    extproc_headers_free(&ex->headers);
    extproc_headers_free(&ex->resp_headers);
    buf_free(&ex->body);
    buf_free(&ex->chunk);
    free_subset(ex);
    free(ex->served);
    memset(ex, 0, sizeof(*ex));
}

/* A NUL-terminated copy of len bytes that need not be NUL-terminated (raw_value). */
static char *dup_bytes(const void *data, size_t len)
{
    char *s = malloc(len + 1);
    if (s) {
        if (len) {
            memcpy(s, data, len);
        }
        s[len] = '\0';
    }
    return s;
}

/* Envoy puts header values in raw_value; older proxies and hand-written clients use value. */
static int copy_headers(const HeaderMap *map, struct extproc_headers *out)
{
    if (!map) {
        return 0;
    }
    for (size_t i = 0; i < map->n_headers; i++) {
        const HeaderValue *h = map->headers[i];
        char *name = strdup(h->key ? h->key : "");
        char *value = h->raw_value.len ? dup_bytes(h->raw_value.data, h->raw_value.len)
                                       : strdup(h->value ? h->value : "");
        int rc = name && value ? 0 : -ENOMEM;
        if (rc == 0) {
            for (char *p = name; *p; p++) {
                *p = (char)tolower((unsigned char)*p);
            }
            rc = extproc_headers_add(out, name, value);
        }
        free(name);
        free(value);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

static const char *find_header(const struct extproc_headers *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->v[i].name, name) == 0) {
            return h->v[i].value;
        }
    }
    return NULL;
}

static const PbValue *struct_get(const PbStruct *s, const char *key)
{
    for (size_t i = 0; s && i < s->n_fields; i++) {
        if (s->fields[i]->key && strcmp(s->fields[i]->key, key) == 0) {
            return s->fields[i]->value;
        }
    }
    return NULL;
}

static const PbValue *metadata_get(const ProcReq *req, const char *ns, const char *key)
{
    const Envoy__Config__Core__V3__Metadata *md = req->metadata_context;
    for (size_t i = 0; md && i < md->n_filter_metadata; i++) {
        if (md->filter_metadata[i]->key && strcmp(md->filter_metadata[i]->key, ns) == 0) {
            return struct_get(md->filter_metadata[i]->value, key);
        }
    }
    return NULL;
}

static int subset_add(struct extproc_exchange *ex, const char *s, size_t len)
{
    char **v = realloc(ex->subset, (ex->n_subset + 1) * sizeof(*v));
    if (!v) {
        return -ENOMEM;
    }
    ex->subset = v;
    v[ex->n_subset] = dup_bytes(s, len);
    if (!v[ex->n_subset]) {
        return -ENOMEM;
    }
    ex->n_subset++;
    return 0;
}

/* The reference reads a list of "ip:port" strings; a comma-joined string is accepted too. */
static int subset_add_value(struct extproc_exchange *ex, const PbValue *v)
{
    if (v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE || !v->string_value) {
        return 0;
    }
    const char *s = v->string_value;
    while (*s) {
        size_t len = strcspn(s, ",");
        const char *start = s;
        size_t trimmed = len;
        while (trimmed && *start == ' ') {
            start++;
            trimmed--;
        }
        while (trimmed && start[trimmed - 1] == ' ') {
            trimmed--;
        }
        if (trimmed) {
            int rc = subset_add(ex, start, trimmed);
            if (rc) {
                return rc;
            }
        }
        s += len + (s[len] == ',');
    }
    return 0;
}

static int read_subset(struct extproc_exchange *ex, const ProcReq *req)
{
    const PbValue *v = metadata_get(req, EXTPROC_SUBSET_NAMESPACE, EXTPROC_SUBSET_KEY);
    if (!v) {
        return 0;
    }
    free_subset(ex);
    ex->has_subset = true;
    if (v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE) {
        return subset_add_value(ex, v);
    }
    for (size_t i = 0; v->list_value && i < v->list_value->n_values; i++) {
        int rc = subset_add_value(ex, v->list_value->values[i]);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

static int read_served(struct extproc_exchange *ex, const ProcReq *req)
{
    const PbValue *v = metadata_get(req, EXTPROC_DEST_NAMESPACE, EXTPROC_SERVED_KEY);
    if (!v || v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE || !v->string_value) {
        return 0;
    }
    char *served = strdup(v->string_value);
    if (!served) {
        return -ENOMEM;
    }
    free(ex->served);
    ex->served = served;
    return 0;
}

static void point_request_fields(struct extproc_exchange *ex)
{
    const char *v = find_header(&ex->headers, ":method");
    ex->method = v ? v : "";
    v = find_header(&ex->headers, ":path");
    ex->path = v ? v : "";
    v = find_header(&ex->headers, "x-request-id");
    ex->request_id = v ? v : "";
}

static int on_request_headers(struct extproc_exchange *ex, const ProcReq *req,
                              enum extproc_event *ev)
{
    if (ex->phase != EXTPROC_WANT_HEADERS) {
        return -EPROTO;
    }
    int rc = copy_headers(req->request_headers->headers, &ex->headers);
    if (rc) {
        return rc;
    }
    point_request_fields(ex);
    if (req->request_headers->end_of_stream) {
        ex->phase = EXTPROC_DECIDED;
        *ev = EXTPROC_EV_DECIDE;
    } else {
        ex->had_body = true;
        ex->phase = EXTPROC_WANT_BODY;
    }
    return 0;
}

static int on_request_body(struct extproc_exchange *ex, const HttpBody *body,
                           enum extproc_event *ev)
{
    if (ex->phase != EXTPROC_WANT_BODY) {
        return -EPROTO;
    }
    if (body->body.len > ex->max_body - ex->body.len) {
        return -E2BIG;
    }
    if (body->body.len && buf_append(&ex->body, body->body.data, body->body.len)) {
        return -ENOMEM;
    }
    if (body->end_of_stream) {
        ex->phase = EXTPROC_DECIDED;
        *ev = EXTPROC_EV_DECIDE;
    }
    return 0;
}

/* :status as a number, 0 when missing or not a three-digit HTTP status. */
static int parse_status(const char *s)
{
    if (!s) {
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 100 || v > 999) {
        return 0;
    }
    return (int)v;
}

static int on_response_headers(struct extproc_exchange *ex, const ProcReq *req,
                               enum extproc_event *ev)
{
    if (ex->phase != EXTPROC_DECIDED) {
        return -EPROTO;
    }
    extproc_headers_free(&ex->resp_headers);
    int rc = copy_headers(req->response_headers->headers, &ex->resp_headers);
    if (rc) {
        return rc;
    }
    const char *status = find_header(&ex->resp_headers, ":status");
    ex->status = parse_status(status);
    if (req->response_headers->end_of_stream) {
        ex->resp_done = true;
    }
    *ev = EXTPROC_EV_RESP_HEADERS;
    return 0;
}

static int on_response_body(struct extproc_exchange *ex, const HttpBody *body,
                            enum extproc_event *ev)
{
    if (ex->phase != EXTPROC_DECIDED) {
        return -EPROTO;
    }
    buf_reset(&ex->chunk);
    if (body->body.len && buf_append(&ex->chunk, body->body.data, body->body.len)) {
        return -ENOMEM;
    }
    ex->chunk_eos = body->end_of_stream;
    if (body->end_of_stream) {
        ex->resp_done = true;
    }
    *ev = EXTPROC_EV_RESP_BODY;
    return 0;
}

static int dispatch(struct extproc_exchange *ex, const ProcReq *req, enum extproc_event *ev)
{
    switch (req->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
        return on_request_headers(ex, req, ev);
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
        return on_request_body(ex, req->request_body, ev);
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
        if (ex->phase != EXTPROC_WANT_BODY) {
            return -EPROTO;
        }
        ex->request_trailers = true;
        ex->phase = EXTPROC_DECIDED;
        *ev = EXTPROC_EV_DECIDE;
        return 0;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        return on_response_headers(ex, req, ev);
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        return on_response_body(ex, req->response_body, ev);
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        if (ex->phase != EXTPROC_DECIDED) {
            return -EPROTO;
        }
        ex->resp_done = true;
        *ev = EXTPROC_EV_RESP_TRAILERS;
        return 0;
    default:
        return -EBADMSG;
    }
}

int extproc_exchange_feed(struct extproc_exchange *ex, const uint8_t *data, size_t len,
                          enum extproc_event *ev)
{
    *ev = EXTPROC_EV_NONE;
    ProcReq *req = envoy__service__ext_proc__v3__processing_request__unpack(NULL, len, data);
    if (!req) {
        return -EBADMSG;
    }
    int rc = read_served(ex, req);
    if (rc == 0 && req->request_case ==
                       ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS) {
        rc = read_subset(ex, req);
    }
    if (rc == 0) {
        rc = dispatch(ex, req, ev);
    }
    envoy__service__ext_proc__v3__processing_request__free_unpacked(req, NULL);
    if (rc) {
        *ev = EXTPROC_EV_NONE;
    }
    return rc;
}

void extproc_exchange_request(const struct extproc_exchange *ex, struct extproc_request *req)
{
    memset(req, 0, sizeof(*req));
    req->request_id = ex->request_id;
    req->method = ex->method;
    req->path = ex->path;
    req->headers = ex->headers.v;
    req->n_headers = ex->headers.n;
    req->body = (const uint8_t *)ex->body.data;
    req->body_len = ex->body.len;
    req->subset = (const char *const *)ex->subset;
    req->n_subset = ex->n_subset;
    req->has_subset = ex->has_subset;
}

void extproc_exchange_response(const struct extproc_exchange *ex, struct extproc_response *resp)
{
    memset(resp, 0, sizeof(*resp));
    resp->status = ex->status;
    resp->headers = ex->resp_headers.v;
    resp->n_headers = ex->resp_headers.n;
    resp->served = ex->served;
}

void extproc_out_free(struct extproc_out *out)
{
    for (size_t i = 0; i < out->n; i++) {
        free(out->v[i].data);
    }
    free(out->v);
    memset(out, 0, sizeof(*out));
}

static int out_pack(struct extproc_out *out, const ProcResp *msg)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 4;
        struct extproc_bytes *v = realloc(out->v, cap * sizeof(*v));
        if (!v) {
            return -ENOMEM;
        }
        out->v = v;
        out->cap = cap;
    }
    size_t len = envoy__service__ext_proc__v3__processing_response__get_packed_size(msg);
    uint8_t *data = malloc(len ? len : 1);
    if (!data) {
        return -ENOMEM;
    }
    envoy__service__ext_proc__v3__processing_response__pack(msg, data);
    out->v[out->n].data = data;
    out->v[out->n].len = len;
    out->n++;
    return 0;
}

/* The set_headers of a mutation, as protobuf-c structs pointing into the caller's strings. */
struct mutation {
    HeaderMutation msg;
    HeaderValueOption *opts;
    HeaderValue *values;
    HeaderValueOption **opt_ptrs;
    char **removes;
};

static int mutation_init(struct mutation *m, size_t n_set, size_t n_remove)
{
    memset(m, 0, sizeof(*m));
    envoy__service__ext_proc__v3__header_mutation__init(&m->msg);
    m->opts = calloc(n_set + 1, sizeof(*m->opts));
    m->values = calloc(n_set + 1, sizeof(*m->values));
    m->opt_ptrs = calloc(n_set + 1, sizeof(HeaderValueOption *));
    m->removes = calloc(n_remove + 1, sizeof(*m->removes));
    if (!m->opts || !m->values || !m->opt_ptrs || !m->removes) {
        return -ENOMEM;
    }
    m->msg.set_headers = m->opt_ptrs;
    m->msg.remove_headers = m->removes;
    return 0;
}

static void mutation_set(struct mutation *m, const char *name, const char *value)
{
    size_t i = m->msg.n_set_headers++;
    envoy__config__core__v3__header_value__init(&m->values[i]);
    m->values[i].key = (char *)name;
    m->values[i].raw_value.data = (uint8_t *)value;
    m->values[i].raw_value.len = strlen(value);
    envoy__config__core__v3__header_value_option__init(&m->opts[i]);
    m->opts[i].header = &m->values[i];
    m->opt_ptrs[i] = &m->opts[i];
}

static void mutation_deinit(struct mutation *m)
{
    free(m->opts);
    free(m->values);
    free(m->opt_ptrs);
    free(m->removes);
}

/* {"envoy.lb": {"x-gateway-destination-endpoint": destination}} */
struct dest_metadata {
    PbStruct outer, inner;
    Google__Protobuf__Struct__FieldsEntry outer_entry, inner_entry;
    Google__Protobuf__Struct__FieldsEntry *outer_ptr, *inner_ptr;
    PbValue outer_value, inner_value;
};

static void dest_metadata_init(struct dest_metadata *md, const char *destination)
{
    google__protobuf__value__init(&md->inner_value);
    md->inner_value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
    md->inner_value.string_value = (char *)destination;
    google__protobuf__struct__fields_entry__init(&md->inner_entry);
    md->inner_entry.key = EXTPROC_DEST_HEADER;
    md->inner_entry.value = &md->inner_value;
    md->inner_ptr = &md->inner_entry;
    google__protobuf__struct__init(&md->inner);
    md->inner.n_fields = 1;
    md->inner.fields = &md->inner_ptr;

    google__protobuf__value__init(&md->outer_value);
    md->outer_value.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
    md->outer_value.struct_value = &md->inner;
    google__protobuf__struct__fields_entry__init(&md->outer_entry);
    md->outer_entry.key = EXTPROC_DEST_NAMESPACE;
    md->outer_entry.value = &md->outer_value;
    md->outer_ptr = &md->outer_entry;
    google__protobuf__struct__init(&md->outer);
    md->outer.n_fields = 1;
    md->outer.fields = &md->outer_ptr;
}

static int encode_headers_response(const struct extproc_decision *d, size_t body_len, bool has_body,
                                   struct extproc_out *out)
{
    struct mutation m;
    int rc = mutation_init(&m, d->set_headers.n + 2, d->remove_headers.n);
    if (rc == 0) {
        char length[32];
        mutation_set(&m, EXTPROC_DEST_HEADER, d->destination);
        if (has_body && body_len > 0) {
            /* The body may change, so the proxy must not forward the client's length. */
            (void)snprintf(length, sizeof(length), "%zu", body_len);
            mutation_set(&m, "Content-Length", length);
        }
        for (size_t i = 0; i < d->set_headers.n; i++) {
            mutation_set(&m, d->set_headers.v[i].name, d->set_headers.v[i].value);
        }
        for (size_t i = 0; i < d->remove_headers.n; i++) {
            m.removes[m.msg.n_remove_headers++] = d->remove_headers.v[i].name;
        }
        CommonResponse common;
        envoy__service__ext_proc__v3__common_response__init(&common);
        common.header_mutation = &m.msg;
        common.clear_route_cache = 1;
        Envoy__Service__ExtProc__V3__HeadersResponse hr;
        envoy__service__ext_proc__v3__headers_response__init(&hr);
        hr.response = &common;
        struct dest_metadata md;
        dest_metadata_init(&md, d->destination);
        ProcResp resp;
        envoy__service__ext_proc__v3__processing_response__init(&resp);
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS;
        resp.request_headers = &hr;
        resp.dynamic_metadata = &md.outer;
        rc = out_pack(out, &resp);
    }
    mutation_deinit(&m);
    return rc;
}

static int encode_body_chunk(bool request_side, const uint8_t *chunk, size_t len, bool eos,
                             struct extproc_out *out)
{
    Envoy__Service__ExtProc__V3__StreamedBodyResponse streamed;
    envoy__service__ext_proc__v3__streamed_body_response__init(&streamed);
    streamed.body.data = (uint8_t *)chunk;
    streamed.body.len = len;
    streamed.end_of_stream = eos;
    Envoy__Service__ExtProc__V3__BodyMutation mutation;
    envoy__service__ext_proc__v3__body_mutation__init(&mutation);
    mutation.mutation_case =
        ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_STREAMED_RESPONSE;
    mutation.streamed_response = &streamed;
    CommonResponse common;
    envoy__service__ext_proc__v3__common_response__init(&common);
    common.body_mutation = &mutation;
    Envoy__Service__ExtProc__V3__BodyResponse body;
    envoy__service__ext_proc__v3__body_response__init(&body);
    body.response = &common;
    ProcResp resp;
    envoy__service__ext_proc__v3__processing_response__init(&resp);
    if (request_side) {
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY;
        resp.request_body = &body;
    } else {
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
        resp.response_body = &body;
    }
    return out_pack(out, &resp);
}

int extproc_encode_immediate(int status, const char *json_body, const struct extproc_headers *hdrs,
                             struct extproc_out *out)
{
    size_t n_hdrs = hdrs ? hdrs->n : 0;
    struct mutation m;
    int rc = mutation_init(&m, n_hdrs + 1, 0);
    if (rc == 0) {
        if (json_body && *json_body) {
            mutation_set(&m, "content-type", "application/json");
        }
        for (size_t i = 0; i < n_hdrs; i++) {
            mutation_set(&m, hdrs->v[i].name, hdrs->v[i].value);
        }
        Envoy__Type__V3__HttpStatus code;
        envoy__type__v3__http_status__init(&code);
        code.code = (Envoy__Type__V3__StatusCode)status;
        Envoy__Service__ExtProc__V3__ImmediateResponse ir;
        envoy__service__ext_proc__v3__immediate_response__init(&ir);
        ir.status = &code;
        ir.headers = &m.msg;
        ir.body.data = (uint8_t *)json_body;
        ir.body.len = json_body ? strlen(json_body) : 0;
        ProcResp resp;
        envoy__service__ext_proc__v3__processing_response__init(&resp);
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
        resp.immediate_response = &ir;
        rc = out_pack(out, &resp);
    }
    mutation_deinit(&m);
    return rc;
}

static int encode_body(const uint8_t *body, size_t len, bool eos, struct extproc_out *out)
{
    size_t off = 0;
    do {
        size_t n = len - off < EXTPROC_BODY_CHUNK ? len - off : EXTPROC_BODY_CHUNK;
        int rc = encode_body_chunk(true, body + off, n, eos && off + n == len, out);
        if (rc) {
            return rc;
        }
        off += n;
    } while (off < len);
    return 0;
}

int extproc_encode_decision(const struct extproc_decision *d, const struct extproc_exchange *ex,
                            struct extproc_out *out)
{
    if (d->immediate_status) {
        return extproc_encode_immediate(d->immediate_status, d->immediate_body,
                                        &d->immediate_headers, out);
    }
    if (!d->destination || !*d->destination) {
        return -EINVAL;
    }
    const uint8_t *body = d->replace_body ? d->body : (const uint8_t *)ex->body.data;
    size_t len = d->replace_body ? d->body_len : ex->body.len;
    int rc = encode_headers_response(d, len, ex->had_body, out);
    if (rc == 0 && ex->had_body) {
        rc = encode_body(body, len, !ex->request_trailers, out);
    }
    if (rc == 0 && ex->request_trailers) {
        rc = extproc_encode_trailers(true, out);
    }
    return rc;
}

int extproc_encode_response_headers(const struct extproc_headers *add, struct extproc_out *out)
{
    size_t n = add ? add->n : 0;
    struct mutation m;
    int rc = mutation_init(&m, n, 0);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            mutation_set(&m, add->v[i].name, add->v[i].value);
        }
        CommonResponse common;
        envoy__service__ext_proc__v3__common_response__init(&common);
        common.header_mutation = &m.msg;
        Envoy__Service__ExtProc__V3__HeadersResponse hr;
        envoy__service__ext_proc__v3__headers_response__init(&hr);
        hr.response = &common;
        ProcResp resp;
        envoy__service__ext_proc__v3__processing_response__init(&resp);
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS;
        resp.response_headers = &hr;
        rc = out_pack(out, &resp);
    }
    mutation_deinit(&m);
    return rc;
}

int extproc_encode_response_body(const uint8_t *chunk, size_t len, bool eos,
                                 struct extproc_out *out)
{
    return encode_body_chunk(false, chunk, len, eos, out);
}

int extproc_encode_trailers(bool request_side, struct extproc_out *out)
{
    Envoy__Service__ExtProc__V3__TrailersResponse tr;
    envoy__service__ext_proc__v3__trailers_response__init(&tr);
    ProcResp resp;
    envoy__service__ext_proc__v3__processing_response__init(&resp);
    if (request_side) {
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS;
        resp.request_trailers = &tr;
    } else {
        resp.response_case =
            ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_TRAILERS;
        resp.response_trailers = &tr;
    }
    return out_pack(out, &resp);
}
