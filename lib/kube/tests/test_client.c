/*
 * Unit tests of lib/kube/client.h against a scripted in-process HTTP server (test_client_server.h)
 * on 127.0.0.1: Status → error mapping (JSON and non-JSON bodies), paths and query escaping,
 * headers sent, retries with backoff bounds on 429/5xx, Retry-After, no retry of a POST that got
 * a 500, retries of a POST that could not connect, keep-alive reuse (one connection for many
 * calls), request timeouts, the response cap, list_all paging with a restart on 410, token-file
 * rotation (on 401 and after 60 s on a test clock), the client-side rate limit, concurrent use
 * from several threads, and the stats counters. Every wait is bounded.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/config.h"
#include "test_client_server.h"

static struct ts_server *server;

static int setup_server(void **state)
{
    (void)state;
    server = ts_start();
    return server ? 0 : -1;
}

static int teardown_server(void **state)
{
    (void)state;
    ts_stop(server);
    server = NULL;
    return 0;
}

static struct kube_client *new_client(const char *base, const struct kube_client_options *o)
{
    struct kube_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.server = (char *)base;
    cfg.token = (char *)"tok-123";
    cfg.namespace = (char *)"team-a";
    char err[256] = "";
    struct kube_client *c = kube_client_new(&cfg, o, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "kube_client_new: %s\n", err);
    }
    assert_non_null(c);
    return c;
}

static struct kube_client_options fast_opts(void)
{
    struct kube_client_options o;
    memset(&o, 0, sizeof(o));
    o.user_agent = "tandem-test/1.0";
    o.timeout_ms = 5000;
    o.max_retries = 3;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 1000;
    return o;
}

#define STATUS(code, reason, msg)                                                                  \
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","           \
    "\"message\":\"" msg "\",\"reason\":\"" reason "\",\"code\":" #code "}"

/* ---- pure functions ---- */

static void test_error_mapping(void **state)
{
    (void)state;
    static const struct {
        long status;
        const char *body;
        int rc;
        const char *reason;
        const char *message_part;
    } cases[] = {
        {404, STATUS(404, "NotFound", "pods \\\"x\\\" not found"), KUBE_ENOTFOUND, "NotFound",
         "pods \"x\" not found"},
        {409, STATUS(409, "Conflict", "the object has been modified"), KUBE_ECONFLICT, "Conflict",
         "modified"},
        {409, STATUS(409, "AlreadyExists", "already exists"), KUBE_EEXISTS, "AlreadyExists",
         "already"},
        {422, STATUS(422, "Invalid", "spec.x: Required value"), KUBE_EINVALID, "Invalid",
         "Required"},
        {410, STATUS(410, "Expired", "too old resource version"), KUBE_EEXPIRED, "Expired",
         "too old"},
        {410, STATUS(410, "Gone", "gone"), KUBE_EEXPIRED, "Gone", "gone"},
        {403, STATUS(403, "Forbidden", "nope"), KUBE_EFORBIDDEN, "Forbidden", "nope"},
        {401, STATUS(401, "Unauthorized", "who"), KUBE_EUNAUTHORIZED, "Unauthorized", "who"},
        {429, STATUS(429, "TooManyRequests", "slow down"), KUBE_ETOOMANY, "TooManyRequests",
         "slow"},
        {500, STATUS(500, "InternalError", "boom"), KUBE_ESERVER, "InternalError", "boom"},
        {504, STATUS(504, "Timeout", "too large resource version"), KUBE_ETIMEOUT, "Timeout",
         "too large"},
        {400, STATUS(400, "BadRequest", "bad"), KUBE_EBADREQUEST, "BadRequest", "bad"},
        {502, "<html><body>Bad Gateway from proxy</body></html>", KUBE_ESERVER, "InternalError",
         "Bad Gateway from proxy"},
        {503, "", KUBE_ESERVER, "ServiceUnavailable", "503"},
        {404, "not json at all\n\x01\x02", KUBE_ENOTFOUND, "NotFound", "not json at all"},
        {418, "{\"message\":\"teapot\"}", KUBE_EOTHER, "Unknown", "teapot"},
        {409, "{", KUBE_ECONFLICT, "Conflict", "HTTP 409: {"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct kube_error e;
        memset(&e, 0x55, sizeof(e));
        int rc =
            kube_error_from_response(cases[i].status, cases[i].body, strlen(cases[i].body), &e);
        if (rc != cases[i].rc || strcmp(e.reason, cases[i].reason) != 0 ||
            !strstr(e.message, cases[i].message_part)) {
            fail_msg("case %zu: rc %d (%s) reason '%s' message '%s'", i, rc, tandem_strerror(rc),
                     e.reason, e.message);
        }
        assert_int_equal(e.http_status, (int)cases[i].status);
    }
    struct kube_error e;
    assert_int_equal(kube_error_from_response(200, "{}", 2, &e), 0);
    assert_int_equal(kube_error_from_response(201, NULL, 0, NULL), 0);
    assert_int_equal(kube_error_from_response(404, NULL, 0, NULL), KUBE_ENOTFOUND);
    assert_string_equal(tandem_strerror(KUBE_ECONFLICT), "conflict");
    assert_string_equal(tandem_strerror(-ENOENT), strerror(ENOENT));
}

static void test_paths(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(kube_resource_path(&KUBE_DEPLOYMENTS, "ns1", "web", NULL, &b), 0);
    assert_string_equal(buf_cstr(&b), "/apis/apps/v1/namespaces/ns1/deployments/web");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "ns1", "p", "status", &b), 0);
    assert_string_equal(buf_cstr(&b), "/api/v1/namespaces/ns1/pods/p/status");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_PODS, NULL, NULL, NULL, &b), 0);
    assert_string_equal(buf_cstr(&b), "/api/v1/pods");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_NODES, "ignored", "n1", NULL, &b), 0);
    assert_string_equal(buf_cstr(&b), "/api/v1/nodes/n1");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_CRDS, NULL, "x.example.com", NULL, &b), 0);
    assert_string_equal(buf_cstr(&b),
                        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.example.com");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_HPAS, "a", "h", NULL, &b), 0);
    assert_string_equal(buf_cstr(&b),
                        "/apis/autoscaling/v2/namespaces/a/horizontalpodautoscalers/h");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_CONFIGMAPS, "ns", "a b:c", NULL, &b), 0);
    assert_string_equal(buf_cstr(&b), "/api/v1/namespaces/ns/configmaps/a%20b%3Ac");
    buf_reset(&b);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "ns", "a/b", NULL, &b), -EINVAL);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "ns", "..", NULL, &b), -EINVAL);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "ns", "", NULL, &b), -EINVAL);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "n/s", "x", NULL, &b), -EINVAL);
    assert_int_equal(kube_resource_path(&KUBE_PODS, "ns", NULL, "status", &b), -EINVAL);
    buf_reset(&b);
    buf_appends(&b, "/api/v1/pods");
    assert_int_equal(kube_query_append(&b, "labelSelector", "app in (a,b),tier!=x"), 0);
    assert_int_equal(kube_query_append(&b, "limit", "5"), 0);
    assert_int_equal(kube_query_append(&b, "skipped", NULL), 0);
    assert_string_equal(buf_cstr(&b),
                        "/api/v1/pods?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Dx&limit=5");
    buf_free(&b);
}

static void test_client_new_rejects(void **state)
{
    (void)state;
    struct kube_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    char err[256] = "";
    assert_null(kube_client_new(&cfg, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "no server"));
    cfg.server = (char *)"ftp://x";
    assert_null(kube_client_new(&cfg, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "ftp://x"));
    cfg.server = (char *)"http://127.0.0.1:1";
    struct kube_client *c = kube_client_new(&cfg, NULL, err, sizeof(err));
    assert_non_null(c);
    assert_string_equal(kube_client_namespace(c), "default");
    kube_client_free(c);
    kube_client_free(NULL);
}

/* ---- against the scripted server ---- */

static void test_get_ok_and_headers(void **state)
{
    (void)state;
    struct ts_reply r[] = {
        {.body =
             "{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm1\"},\"data\":{\"a\":\"1\"}}"}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    struct json_object *obj = NULL;
    struct kube_error e;
    assert_int_equal(kube_get(c, &KUBE_CONFIGMAPS, "ns1", "cm1", &obj, &e), 0);
    const char *v = NULL;
    assert_int_equal(json_get_string(obj, "data.a", &v, NULL, 0), 0);
    assert_string_equal(v, "1");
    json_object_put(obj);
    struct ts_record rec = ts_get(server, 0);
    assert_string_equal(rec.method, "GET");
    assert_string_equal(rec.target, "/api/v1/namespaces/ns1/configmaps/cm1");
    assert_string_equal(rec.auth, "Bearer tok-123");
    assert_string_equal(rec.accept, "application/json");
    assert_string_equal(rec.user_agent, "tandem-test/1.0");
    /* ns NULL on a namespaced resource → the client's namespace */
    assert_int_equal(kube_get(c, &KUBE_CONFIGMAPS, NULL, "cm1", NULL, &e), 0);
    assert_string_equal(ts_get(server, 1).target, "/api/v1/namespaces/team-a/configmaps/cm1");
    /* bad arguments never reach the server */
    assert_int_equal(kube_get(c, &KUBE_CONFIGMAPS, "ns1", NULL, &obj, &e), -EINVAL);
    assert_int_equal(kube_get(c, &KUBE_CONFIGMAPS, "ns1", "a/b", &obj, &e), -EINVAL);
    assert_int_equal(ts_count(server), 2);
    kube_client_free(c);
}

static void test_not_found_no_retry(void **state)
{
    (void)state;
    struct ts_reply r[] = {
        {.status = 404, .body = STATUS(404, "NotFound", "configmaps \\\"x\\\" not found")}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    struct json_object *obj = (struct json_object *)&o; /* must be reset to NULL */
    struct kube_error e;
    assert_int_equal(kube_get(c, &KUBE_CONFIGMAPS, "ns1", "x", &obj, &e), KUBE_ENOTFOUND);
    assert_null(obj);
    assert_int_equal(e.http_status, 404);
    assert_string_equal(e.reason, "NotFound");
    assert_string_equal(e.message, "configmaps \"x\" not found");
    assert_int_equal(ts_count(server), 1);
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.reads, 1);
    assert_int_equal(st.writes, 0);
    assert_int_equal(st.retries, 0);
    assert_int_equal(st.errors, 1);
    kube_client_free(c);
}

static void test_retry_backoff_bounds(void **state)
{
    (void)state;
    struct ts_reply r[] = {
        {.status = 503, .body = STATUS(503, "ServiceUnavailable", "later")},
        {.status = 500, .body = "oops"},
        {.status = 502, .body = ""},
        {.body = "{\"ok\":true}"},
    };
    ts_script(server, r, 4);
    struct kube_client_options o = fast_opts();
    o.max_retries = 5;
    o.backoff_base_ms = 50;
    o.backoff_max_ms = 150;
    struct kube_client *c = new_client(server->base, &o);
    struct json_object *obj = NULL;
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", &obj, NULL), 0);
    assert_non_null(obj);
    json_object_put(obj);
    assert_int_equal(ts_count(server), 4);
    /* waits: [50,100), then [100,150] capped, then capped at 150 */
    static const long lo[] = {50, 100, 150};
    static const long hi[] = {100, 150, 150};
    for (int i = 1; i < 4; i++) {
        long gap = (long)(ts_get(server, i).at_ms - ts_get(server, i - 1).at_ms);
        if (gap < lo[i - 1] - 5 || gap > hi[i - 1] + 400) {
            fail_msg("retry %d came after %ld ms, expected %ld..%ld", i, gap, lo[i - 1], hi[i - 1]);
        }
    }
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.requests, 4);
    assert_int_equal(st.retries, 3);
    assert_int_equal(st.errors, 0);
    kube_client_free(c);
}

static void test_retries_exhausted(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.status = 500, .body = STATUS(500, "InternalError", "still broken")}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    o.max_retries = 2;
    o.backoff_base_ms = 5;
    struct kube_client *c = new_client(server->base, &o);
    struct kube_error e;
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_ESERVER);
    assert_int_equal(ts_count(server), 3);
    assert_string_equal(e.message, "still broken");
    kube_client_free(c);

    o.max_retries = -1; /* no retries at all */
    c = new_client(server->base, &o);
    ts_script(server, r, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_ESERVER);
    assert_int_equal(ts_count(server), 1);
    kube_client_free(c);
}

static void test_retry_after_honoured(void **state)
{
    (void)state;
    struct ts_reply r[] = {
        {.status = 429, .retry_after = "1", .body = STATUS(429, "TooManyRequests", "slow")},
        {.body = "{}"},
    };
    ts_script(server, r, 2);
    struct kube_client_options o = fast_opts();
    o.backoff_base_ms = 10;
    o.backoff_max_ms = 20;
    struct kube_client *c = new_client(server->base, &o);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    assert_int_equal(ts_count(server), 2);
    long gap = (long)(ts_get(server, 1).at_ms - ts_get(server, 0).at_ms);
    if (gap < 990 || gap > 2500) {
        fail_msg("Retry-After: 1 gave a gap of %ld ms", gap);
    }
    /* 503 with Retry-After too */
    struct ts_reply r2[] = {{.status = 503, .retry_after = "0", .body = ""}, {.body = "{}"}};
    ts_script(server, r2, 2);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    assert_int_equal(ts_count(server), 2);
    kube_client_free(c);
}

static struct json_object *cm(const char *name)
{
    char text[256];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\"},"
             "\"data\":{\"k\":\"v\"}}",
             name);
    struct json_object *o = json_parse(text, strlen(text), NULL, 0);
    assert_non_null(o);
    return o;
}

static void test_post_not_retried_on_500(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.status = 500, .body = STATUS(500, "InternalError", "maybe applied")},
                           {.status = 201, .body = "{}"}};
    ts_script(server, r, 2);
    struct kube_client_options o = fast_opts();
    o.backoff_base_ms = 5;
    struct kube_client *c = new_client(server->base, &o);
    struct json_object *obj = cm("a");
    struct kube_error e;
    assert_int_equal(kube_create(c, &KUBE_CONFIGMAPS, "ns", obj, NULL, &e), KUBE_ESERVER);
    assert_int_equal(ts_count(server), 1);
    struct ts_record rec = ts_get(server, 0);
    assert_string_equal(rec.method, "POST");
    assert_string_equal(rec.target, "/api/v1/namespaces/ns/configmaps");
    assert_string_equal(rec.content_type, "application/json");
    assert_non_null(strstr(rec.body, "\"name\":\"a\""));

    /* 503 and 504 are not retried for POST either; 429 is */
    struct ts_reply r503[] = {{.status = 503, .body = ""}, {.status = 201, .body = "{}"}};
    ts_script(server, r503, 2);
    assert_int_equal(kube_create(c, &KUBE_CONFIGMAPS, "ns", obj, NULL, &e), KUBE_ESERVER);
    assert_int_equal(ts_count(server), 1);
    struct ts_reply r429[] = {{.status = 429, .body = ""}, {.status = 201, .body = "{}"}};
    ts_script(server, r429, 2);
    assert_int_equal(kube_create(c, &KUBE_CONFIGMAPS, "ns", obj, NULL, &e), 0);
    assert_int_equal(ts_count(server), 2);

    /* PUT, PATCH and DELETE are retried on 5xx */
    struct ts_reply r5xx[] = {{.status = 502, .body = ""}, {.body = "{}"}};
    ts_script(server, r5xx, 2);
    assert_int_equal(kube_update(c, &KUBE_CONFIGMAPS, "ns", NULL, obj, NULL, &e), 0);
    assert_int_equal(ts_count(server), 2);
    assert_string_equal(ts_get(server, 1).method, "PUT");
    assert_string_equal(ts_get(server, 1).target, "/api/v1/namespaces/ns/configmaps/a");
    ts_script(server, r5xx, 2);
    assert_int_equal(
        kube_patch(c, &KUBE_CONFIGMAPS, "ns", "a", KUBE_PATCH_MERGE, "{}", 2, NULL, NULL, &e), 0);
    assert_int_equal(ts_count(server), 2);
    assert_string_equal(ts_get(server, 1).content_type, "application/merge-patch+json");
    ts_script(server, r5xx, 2);
    assert_int_equal(kube_delete(c, &KUBE_CONFIGMAPS, "ns", "a", NULL, NULL, &e), 0);
    assert_int_equal(ts_count(server), 2);
    assert_string_equal(ts_get(server, 1).method, "DELETE");
    json_object_put(obj);

    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.writes, 6);
    assert_int_equal(st.reads, 0);
    kube_client_free(c);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd); /* nothing listens there now */
    return ntohs(a.sin_port);
}

static void test_connect_failure_retried_even_for_post(void **state)
{
    (void)state;
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", closed_port());
    struct kube_client_options o = fast_opts();
    o.max_retries = 2;
    o.backoff_base_ms = 5;
    struct kube_client *c = new_client(base, &o);
    struct json_object *obj = cm("a");
    struct kube_error e;
    assert_int_equal(kube_create(c, &KUBE_CONFIGMAPS, "ns", obj, NULL, &e), KUBE_ETRANSPORT);
    assert_int_equal(e.http_status, 0);
    assert_true(strlen(e.message) > 0);
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.retries, 2);
    assert_int_equal(st.errors, 1);
    json_object_put(obj);
    kube_client_free(c);
}

static void test_keepalive_reuse(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.body = "{\"kind\":\"PodList\",\"items\":[]}"}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    uint64_t before = 0;
    for (int i = 0; i < 8; i++) {
        struct json_object *list = NULL;
        assert_int_equal(kube_list(c, &KUBE_PODS, "ns", NULL, &list, NULL), 0);
        json_object_put(list);
        if (i == 0) {
            before = ts_get(server, 0).connections;
        }
    }
    assert_int_equal(ts_count(server), 8);
    /* all 8 requests on one connection */
    assert_int_equal(ts_get(server, 7).connections, before);
    kube_client_free(c);
}

static void test_timeout(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.hang = 1}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    o.timeout_ms = 300;
    o.max_retries = 1;
    o.backoff_base_ms = 10;
    struct kube_client *c = new_client(server->base, &o);
    struct kube_error e;
    uint64_t t0 = ts_now_ms();
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_ETIMEOUT);
    uint64_t took = ts_now_ms() - t0;
    assert_true(took >= 550 && took < 3000); /* two attempts of 300 ms */
    assert_int_equal(ts_count(server), 2);
    assert_string_equal(e.reason, "Timeout");
    /* a slow answer within the timeout is fine */
    struct ts_reply slow[] = {{.delay_ms = 100, .body = "{}"}};
    ts_script(server, slow, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), 0);
    kube_client_free(c);
}

static void test_response_cap_and_bad_json(void **state)
{
    (void)state;
    char *big = malloc(5001);
    assert_non_null(big);
    big[0] = '"';
    memset(big + 1, 'x', 4998);
    big[4999] = '"';
    big[5000] = '\0';
    struct ts_reply r[] = {{.body = big}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    kube_client_set_max_response(c, 4096);
    struct kube_error e;
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), -EFBIG);
    assert_non_null(strstr(e.message, "larger than 4096"));
    assert_int_equal(ts_count(server), 1); /* not retried */
    kube_client_set_max_response(c, 0);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), 0);
    free(big);

    struct ts_reply bad[] = {{.body = "{\"a\":1} trailing"}};
    ts_script(server, bad, 1);
    struct json_object *obj = NULL;
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", &obj, &e), -EINVAL);
    assert_null(obj);
    assert_non_null(strstr(e.message, "not JSON"));
    kube_client_free(c);
}

static void test_list_all_paging_and_restart(void **state)
{
    (void)state;
    struct ts_reply r[] = {
        {.body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"10\",\"continue\":"
                 "\"c1\",\"remainingItemCount\":3},\"items\":[{\"metadata\":{\"name\":\"a\"}},"
                 "{\"metadata\":{\"name\":\"b\"}}]}"},
        {.status = 410, .body = STATUS(410, "Expired", "continue token expired")},
        {.body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"20\",\"continue\":"
                 "\"c2\"},\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{\"name\":"
                 "\"b\"}}]}"},
        {.body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"20\",\"continue\":"
                 "\"c3\"},\"items\":[{\"metadata\":{\"name\":\"c\"}},{\"metadata\":{\"name\":"
                 "\"d\"}}]}"},
        {.body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"20\"},\"items\":["
                 "{\"metadata\":{\"name\":\"e\"}}]}"},
    };
    ts_script(server, r, 5);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    struct kube_list_options lo = {
        .label_selector = "app=x,tier in (a,b)", .limit = 2, .resource_version = "5"};
    struct json_object *list = NULL;
    struct kube_error e;
    assert_int_equal(kube_list_all(c, &KUBE_PODS, "ns", &lo, &list, &e), 0);
    struct json_object *items = NULL;
    assert_int_equal(json_get_array(list, "items", &items, NULL, 0), 0);
    assert_int_equal(json_object_array_length(items), 5);
    const char *name = NULL;
    assert_int_equal(json_get_string(list, "items[4].metadata.name", &name, NULL, 0), 0);
    assert_string_equal(name, "e");
    assert_null(json_get(list, "metadata.continue"));
    assert_null(json_get(list, "metadata.remainingItemCount"));
    assert_int_equal(json_get_string(list, "metadata.resourceVersion", &name, NULL, 0), 0);
    assert_string_equal(name, "20");
    json_object_put(list);
    assert_int_equal(ts_count(server), 5);
    assert_string_equal(ts_get(server, 0).label_selector, "app=x,tier in (a,b)");
    assert_non_null(strstr(ts_get(server, 0).target, "resourceVersion=5"));
    assert_non_null(strstr(ts_get(server, 0).target, "limit=2"));
    assert_non_null(strstr(ts_get(server, 1).target, "continue=c1"));
    assert_null(strstr(ts_get(server, 1).target, "resourceVersion"));
    /* the restart: no continue token, no resourceVersion, same selector and limit */
    assert_null(strstr(ts_get(server, 2).target, "continue="));
    assert_null(strstr(ts_get(server, 2).target, "resourceVersion"));
    assert_string_equal(ts_get(server, 2).label_selector, "app=x,tier in (a,b)");
    assert_non_null(strstr(ts_get(server, 4).target, "continue=c3"));

    /* a second 410 after the restart is returned */
    struct ts_reply twice[] = {
        {.body = "{\"metadata\":{\"continue\":\"c1\"},\"items\":[]}"},
        {.status = 410, .body = STATUS(410, "Expired", "expired")},
        {.body = "{\"metadata\":{\"continue\":\"c2\"},\"items\":[]}"},
        {.status = 410, .body = STATUS(410, "Expired", "expired again")},
    };
    ts_script(server, twice, 4);
    assert_int_equal(kube_list_all(c, &KUBE_PODS, "ns", &lo, &list, &e), KUBE_EEXPIRED);
    assert_null(list);
    assert_string_equal(e.message, "expired again");
    assert_int_equal(ts_count(server), 4);
    kube_client_free(c);
}

static uint64_t fake_now;
static uint64_t fake_clock(void *ud)
{
    (void)ud;
    return fake_now;
}

static void test_token_file_rotation(void **state)
{
    (void)state;
    char dir[] = "/tmp/kube-token-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/token", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("old-token\n", f);
    fclose(f);
    struct kube_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.server = server->base;
    cfg.token = (char *)"old-token";
    cfg.token_file = path;
    struct kube_client_options o = fast_opts();
    char err[256];
    struct kube_client *c = kube_client_new(&cfg, &o, err, sizeof(err));
    assert_non_null(c);
    fake_now = 1000000;
    kube_client_set_clock(c, fake_clock, NULL);

    struct ts_reply old_ok[] = {{.require_token = "old-token", .body = "{}"}};
    ts_script(server, old_ok, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);

    /* the file rotates; within 60 s the cached token is still used (no re-read) */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("new-token\n", f);
    fclose(f);
    fake_now += 30000;
    ts_script(server, old_ok, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    assert_string_equal(ts_get(server, 0).auth, "Bearer old-token");

    /* a 401 forces a re-read and one more attempt */
    struct ts_reply new_ok[] = {{.require_token = "new-token", .body = "{}"}};
    ts_script(server, new_ok, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    assert_int_equal(ts_count(server), 2);
    assert_string_equal(ts_get(server, 0).auth, "Bearer old-token");
    assert_string_equal(ts_get(server, 1).auth, "Bearer new-token");

    /* after 60 s the file is re-read without a 401 */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("third-token", f);
    fclose(f);
    fake_now += 61000;
    struct ts_reply third_ok[] = {{.require_token = "third-token", .body = "{}"}};
    ts_script(server, third_ok, 1);
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    assert_int_equal(ts_count(server), 1);

    /* a token that stays wrong: one re-read, then 401 comes back */
    struct ts_reply never[] = {{.require_token = "something-else", .body = "{}"}};
    ts_script(server, never, 1);
    struct kube_error e;
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_EUNAUTHORIZED);
    assert_int_equal(ts_count(server), 2);
    assert_int_equal(e.http_status, 401);
    kube_client_free(c);
    unlink(path);
    rmdir(dir);
}

static void test_rate_limit(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.body = "{}"}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    o.qps = 20;
    o.burst = 2;
    struct kube_client *c = new_client(server->base, &o);
    uint64_t t0 = ts_now_ms();
    for (int i = 0; i < 6; i++) {
        assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, NULL), 0);
    }
    uint64_t took = ts_now_ms() - t0;
    /* 2 from the burst, then 4 at 50 ms each */
    assert_true(took >= 180);
    assert_true(took < 3000);
    kube_client_free(c);
}

struct worker {
    struct kube_client *c;
    int ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 20; i++) {
        struct json_object *obj = NULL;
        if (kube_get(w->c, &KUBE_PODS, "ns", "p", &obj, NULL) == 0 && obj) {
            w->ok++;
        }
        json_object_put(obj);
    }
    return NULL;
}

static void test_concurrent_threads(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.body = "{\"kind\":\"Pod\"}"}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i].c = c;
        w[i].ok = 0;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].ok, 20);
    }
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.requests, 80);
    assert_int_equal(st.reads, 80);
    assert_int_equal(ts_count(server), 80);
    /* at most one connection per concurrent caller */
    assert_true(ts_get(server, 79).connections - ts_get(server, 0).connections <= 4);
    kube_client_free(c);
}

static void test_raw_request_and_patch_options(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.body = "{\"major\":\"1\",\"minor\":\"32\"}"}};
    ts_script(server, r, 1);
    struct kube_client_options o = fast_opts();
    struct kube_client *c = new_client(server->base, &o);
    struct buf body;
    buf_init(&body, 1 << 20);
    long status = 0;
    assert_int_equal(kube_request(c, "GET", "/version", NULL, NULL, 0, &status, &body, NULL), 0);
    assert_int_equal(status, 200);
    assert_string_equal(buf_cstr(&body), "{\"major\":\"1\",\"minor\":\"32\"}");
    assert_int_equal(kube_request(c, "GET", "version", NULL, NULL, 0, &status, &body, NULL),
                     -EINVAL);
    buf_free(&body);

    ts_script(server, r, 1);
    struct kube_patch_options po = {.force = 1, .subresource = "status", .dry_run = 1};
    assert_int_equal(kube_patch(c, &KUBE_DEPLOYMENTS, "ns", "web", KUBE_PATCH_APPLY,
                                "{\"apiVersion\":\"apps/v1\"}", 24, &po, NULL, NULL),
                     0);
    struct ts_record rec = ts_get(server, 0);
    assert_string_equal(rec.method, "PATCH");
    assert_string_equal(rec.content_type, "application/apply-patch+yaml");
    assert_string_equal(rec.target, "/apis/apps/v1/namespaces/ns/deployments/web/status"
                                    "?fieldManager=tandem-test&force=true&dryRun=All");
    struct kube_delete_options d = {.propagation_policy = "Foreground",
                                    .grace_period_seconds = 0,
                                    .precondition_uid = "u-1",
                                    .precondition_rv = "7"};
    ts_script(server, r, 1);
    assert_int_equal(kube_delete(c, &KUBE_DEPLOYMENTS, "ns", "web", &d, NULL, NULL), 0);
    rec = ts_get(server, 0);
    struct json_object *sent = json_parse(rec.body, rec.body_len, NULL, 0);
    assert_non_null(sent);
    const char *s = NULL;
    int64_t grace = -1;
    assert_int_equal(json_get_string(sent, "propagationPolicy", &s, NULL, 0), 0);
    assert_string_equal(s, "Foreground");
    assert_int_equal(json_get_int64(sent, "gracePeriodSeconds", &grace, NULL, 0), 0);
    assert_int_equal(grace, 0);
    assert_int_equal(json_get_string(sent, "preconditions.uid", &s, NULL, 0), 0);
    assert_string_equal(s, "u-1");
    assert_int_equal(json_get_string(sent, "preconditions.resourceVersion", &s, NULL, 0), 0);
    assert_string_equal(s, "7");
    json_object_put(sent);
    kube_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_mapping),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_client_new_rejects),
        cmocka_unit_test(test_get_ok_and_headers),
        cmocka_unit_test(test_not_found_no_retry),
        cmocka_unit_test(test_retry_backoff_bounds),
        cmocka_unit_test(test_retries_exhausted),
        cmocka_unit_test(test_retry_after_honoured),
        cmocka_unit_test(test_post_not_retried_on_500),
        cmocka_unit_test(test_connect_failure_retried_even_for_post),
        cmocka_unit_test(test_keepalive_reuse),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_response_cap_and_bad_json),
        cmocka_unit_test(test_list_all_paging_and_restart),
        cmocka_unit_test(test_token_file_rotation),
        cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_concurrent_threads),
        cmocka_unit_test(test_raw_request_and_patch_options),
    };
    return cmocka_run_group_tests(tests, setup_server, teardown_server);
}
