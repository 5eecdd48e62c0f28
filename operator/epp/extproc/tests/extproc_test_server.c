/*
 * The ext-proc server with a deterministic decision, for tests/extproc_e2e.js (which plays Envoy
 * with @grpc/grpc-js). It prints "PORT <n>", then one line per callback:
 *   DECIDE <method> <path> <request-id> <body bytes> <subset size or -1>
 *   DONE <complete|rejected|cancelled> <status> <served or ->
 * Commands on stdin: "ready", "unready"; end of input stops the server.
 * The decision: header x-test-shed -> 429; an empty subset hint -> 503; a malformed body (not
 * starting with '{') -> 400; else the first subset entry (or 10.0.0.1:8000 without a hint, plus
 * 10.0.0.2:8000 as fallback when x-test-fallback is set), with x-request-id and
 * x-prefiller-host-port set and x-test-remove removed; path /v1/replace replaces the body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "operator/epp/extproc/extproc.h"

static const char *header(const struct extproc_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++) {
        if (strcmp(req->headers[i].name, name) == 0) {
            return req->headers[i].value;
        }
    }
    return NULL;
}

static int route(const struct extproc_request *req, struct extproc_decision *d)
{
    char dest[256];
    if (req->n_subset > 0) {
        (void)snprintf(dest, sizeof(dest), "%s", req->subset[0]);
    } else if (header(req, "x-test-fallback")) {
        (void)snprintf(dest, sizeof(dest), "10.0.0.1:8000,10.0.0.2:8000");
    } else {
        (void)snprintf(dest, sizeof(dest), "10.0.0.1:8000");
    }
    int rc = extproc_decision_route(d, dest);
    rc = rc ? rc
            : extproc_headers_add(&d->set_headers, "x-request-id",
                                  *req->request_id ? req->request_id : "generated-id");
    rc = rc ? rc : extproc_headers_add(&d->set_headers, "x-prefiller-host-port", "10.0.0.9:8000");
    rc = rc ? rc : extproc_headers_add(&d->remove_headers, "x-test-remove", NULL);
    if (rc == 0 && strcmp(req->path, "/v1/replace") == 0) {
        static const char replaced[] = "{\"replaced\":true}";
        rc = extproc_decision_set_body(d, replaced, sizeof(replaced) - 1);
    }
    return rc;
}

static void decide(void *ctx, const struct extproc_request *req, struct extproc_decision *d)
{
    (void)ctx;
    printf("DECIDE %s %s %s %zu %ld\n", req->method, req->path,
           *req->request_id ? req->request_id : "-", req->body_len,
           req->has_subset ? (long)req->n_subset : -1L);
    fflush(stdout);
    int rc = 0;
    if (header(req, "x-test-shed")) {
        rc = extproc_decision_reject(d, 429, "{\"error\":\"request shed\"}");
    } else if (req->has_subset && req->n_subset == 0) {
        rc = extproc_decision_reject(d, 503, "{\"error\":\"no endpoint in the subset\"}");
    } else if (req->body_len > 0 && req->body[0] != '{') {
        rc = extproc_decision_reject(d, 400, "{\"error\":\"body is not JSON\"}");
    } else {
        rc = route(req, d);
    }
    if (rc) {
        fprintf(stderr, "extproc_test_server: out of memory\n");
        abort();
    }
    /* A heap token: ASan reports it if on_done is not called exactly once. */
    d->exchange = malloc(1);
}

static void on_response(void *ctx, void *exchange, const struct extproc_response *resp,
                        struct extproc_headers *add)
{
    (void)ctx;
    (void)exchange;
    char token[64];
    (void)snprintf(token, sizeof(token), "tok-%d-%s", resp->status,
                   resp->served ? resp->served : "none");
    if (extproc_headers_add(add, "x-session-token", token)) {
        abort();
    }
}

static void on_done(void *ctx, void *exchange, const struct extproc_outcome *o)
{
    (void)ctx;
    static const char *const ends[] = {"complete", "rejected", "cancelled"};
    printf("DONE %s %d %s\n", ends[o->end], o->status, o->served ? o->served : "-");
    fflush(stdout);
    free(exchange);
}

int main(void)
{
    struct extproc_config cfg = {.address = "127.0.0.1", .port = 0, .max_body_bytes = 1 << 20};
    struct extproc_callbacks cb = {
        .decide = decide, .on_response = on_response, .on_done = on_done};
    struct extproc_server *srv;
    int rc = extproc_start(&cfg, &cb, &srv);
    if (rc) {
        fprintf(stderr, "extproc_test_server: start failed (%d)\n", rc);
        return 1;
    }
    printf("PORT %d\n", extproc_port(srv));
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        if (strncmp(line, "ready", 5) == 0) {
            extproc_set_ready(srv, true);
        } else if (strncmp(line, "unready", 7) == 0) {
            extproc_set_ready(srv, false);
        }
        printf("OK %s", line);
        fflush(stdout);
    }
    extproc_stop(srv);
    return 0;
}
