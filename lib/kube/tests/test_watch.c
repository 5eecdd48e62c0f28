/*
 * Unit tests of lib/kube/watch.h: the newline-delimited JSON splitter (every split point of a
 * multi-event stream, every pair of split points, 1-byte chunks, blank lines and CRLF, garbage
 * lines, a 2 MiB object, the line cap and bounded memory, callbacks stopping the stream), and
 * kube_watch against the scripted server of test_client_server.h (events across chunk borders,
 * query parameters, ERROR events, a 410 answer, the inactivity timeout, the stop flag, a garbage
 * line in the stream). Every wait is bounded.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/watch.h"
#include "test_client_server.h"

/* ---- a recording callback ---- */

struct seen {
    int n;
    enum kube_event_type types[64];
    char names[64][64];
    size_t sizes[64]; /* length of object.data.blob when present */
    int stop_at;      /* return 7 at this event (1-based); 0 = never */
};

static int record(void *ud, enum kube_event_type type, struct json_object *object)
{
    struct seen *s = ud;
    if (s->n < 64) {
        const char *name = NULL;
        json_opt_string(object, "metadata.name", "", &name, NULL, 0);
        s->types[s->n] = type;
        snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name ? name : "");
        const char *blob = NULL;
        json_opt_string(object, "data.blob", "", &blob, NULL, 0);
        s->sizes[s->n] = blob ? strlen(blob) : 0;
    }
    s->n++;
    return s->stop_at && s->n == s->stop_at ? 7 : 0;
}

static const char stream[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}}}\n"
    "\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\"},\"data\":{\"k\":\"x\\ny\"}}}"
    "\r\n"
    "   \r\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"9\"}}}"
    "\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}\n"
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\n";

static void check_stream_events(const struct seen *s)
{
    assert_int_equal(s->n, 5);
    assert_int_equal(s->types[0], KUBE_EVENT_ADDED);
    assert_string_equal(s->names[0], "a");
    assert_int_equal(s->types[1], KUBE_EVENT_MODIFIED);
    assert_string_equal(s->names[1], "b");
    assert_int_equal(s->types[2], KUBE_EVENT_BOOKMARK);
    assert_int_equal(s->types[3], KUBE_EVENT_DELETED);
    assert_string_equal(s->names[3], "c");
    assert_int_equal(s->types[4], KUBE_EVENT_ERROR);
}

static void test_every_split_point(void **state)
{
    (void)state;
    size_t len = sizeof(stream) - 1;
    struct kube_watch_splitter *sp = kube_watch_splitter_new(0);
    assert_non_null(sp);
    char err[256];
    for (size_t i = 0; i <= len; i++) {
        struct seen s;
        memset(&s, 0, sizeof(s));
        assert_int_equal(kube_watch_splitter_feed(sp, stream, i, record, &s, err, sizeof(err)), 0);
        assert_int_equal(
            kube_watch_splitter_feed(sp, stream + i, len - i, record, &s, err, sizeof(err)), 0);
        assert_int_equal(kube_watch_splitter_pending(sp), 0);
        check_stream_events(&s);
    }
    /* every pair of split points (three chunks) */
    for (size_t i = 0; i <= len; i += 3) {
        for (size_t j = i; j <= len; j += 2) {
            struct seen s;
            memset(&s, 0, sizeof(s));
            assert_int_equal(kube_watch_splitter_feed(sp, stream, i, record, &s, err, sizeof(err)),
                             0);
            assert_int_equal(
                kube_watch_splitter_feed(sp, stream + i, j - i, record, &s, err, sizeof(err)), 0);
            assert_int_equal(
                kube_watch_splitter_feed(sp, stream + j, len - j, record, &s, err, sizeof(err)), 0);
            check_stream_events(&s);
        }
    }
    kube_watch_splitter_free(sp);
}

static void test_one_byte_chunks(void **state)
{
    (void)state;
    struct kube_watch_splitter *sp = kube_watch_splitter_new(4096);
    struct seen s;
    memset(&s, 0, sizeof(s));
    for (size_t i = 0; i < sizeof(stream) - 1; i++) {
        assert_int_equal(kube_watch_splitter_feed(sp, stream + i, 1, record, &s, NULL, 0), 0);
    }
    check_stream_events(&s);
    assert_int_equal(kube_watch_splitter_feed(sp, "", 0, record, &s, NULL, 0), 0);
    kube_watch_splitter_free(sp);
}

static void test_garbage_lines(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        const char *msg_part;
    } cases[] = {
        {"not json\n", "invalid JSON"},
        {"{\"type\":\"ADDED\",\"object\":{}} extra\n", "JSON"},
        {"{\"type\":\"ADDED\",\"object\":{\"a\":1}\n", "truncated"},
        {"[1,2]\n", "expected a JSON object"},
        {"{\"object\":{}}\n", "type: required field is missing"},
        {"{\"type\":5,\"object\":{}}\n", "type: expected string"},
        {"{\"type\":\"UPSERTED\",\"object\":{}}\n", "unknown event type \"UPSERTED\""},
        {"{\"type\":\"ADDED\"}\n", "object: required field is missing"},
        {"{\"type\":\"ADDED\",\"object\":\"str\"}\n", "object: expected object"},
        {"{\"type\":\"ADDED\",\"object\":{\"x\":\"\xff\"}}\n", "invalid JSON"},
        {"{'type':'ADDED','object':{}}\n", "invalid JSON"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct kube_watch_splitter *sp = kube_watch_splitter_new(0);
        struct seen s;
        memset(&s, 0, sizeof(s));
        char err[256] = "";
        const char *good = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"ok\"}}}\n";
        assert_int_equal(
            kube_watch_splitter_feed(sp, good, strlen(good), record, &s, err, sizeof(err)), 0);
        int rc = kube_watch_splitter_feed(sp, cases[i].line, strlen(cases[i].line), record, &s, err,
                                          sizeof(err));
        if (rc != -EINVAL || !strstr(err, cases[i].msg_part) || !strstr(err, "watch event 2")) {
            fail_msg("case %zu: rc %d err '%s'", i, rc, err);
        }
        assert_int_equal(s.n, 1);
        /* after a reset the splitter works again */
        kube_watch_splitter_reset(sp);
        assert_int_equal(
            kube_watch_splitter_feed(sp, good, strlen(good), record, &s, err, sizeof(err)), 0);
        assert_int_equal(s.n, 2);
        kube_watch_splitter_free(sp);
    }
}

static char *event_with_blob(size_t blob_len, size_t *len_out)
{
    const char *head = "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"big\"},"
                       "\"data\":{\"blob\":\"";
    const char *tail = "\"}}}\n";
    size_t len = strlen(head) + blob_len + strlen(tail);
    char *ev = malloc(len + 1);
    assert_non_null(ev);
    memset(ev, 'z', len);
    memcpy(ev, head, strlen(head)); /* NOLINT(bugprone-not-null-terminated-result): tail ends it */
    snprintf(ev + strlen(head) + blob_len, strlen(tail) + 1, "%s", tail);
    *len_out = len;
    return ev;
}

static void test_huge_object(void **state)
{
    (void)state;
    size_t len;
    char *ev = event_with_blob(2u << 20, &len); /* a 2 MiB line */
    struct kube_watch_splitter *sp = kube_watch_splitter_new(0);
    struct seen s;
    memset(&s, 0, sizeof(s));
    char err[256] = "";
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        assert_int_equal(kube_watch_splitter_feed(sp, ev + off, n, record, &s, err, sizeof(err)),
                         0);
    }
    assert_int_equal(s.n, 1);
    assert_string_equal(s.names[0], "big");
    assert_int_equal(s.sizes[0], 2u << 20);
    /* in one piece (no carry-over) */
    assert_int_equal(kube_watch_splitter_feed(sp, ev, len, record, &s, err, sizeof(err)), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.sizes[1], 2u << 20);
    kube_watch_splitter_free(sp);
    free(ev);
}

static void test_line_cap(void **state)
{
    (void)state;
    size_t len;
    char *ev = event_with_blob(1000, &len);
    size_t line_len = len - 1; /* without the '\n' */
    char err[256] = "";
    struct seen s;
    memset(&s, 0, sizeof(s));

    /* exactly max_line: accepted, in pieces and whole */
    struct kube_watch_splitter *sp = kube_watch_splitter_new(line_len);
    assert_int_equal(kube_watch_splitter_feed(sp, ev, 10, record, &s, err, sizeof(err)), 0);
    assert_int_equal(kube_watch_splitter_feed(sp, ev + 10, len - 10, record, &s, err, sizeof(err)),
                     0);
    assert_int_equal(kube_watch_splitter_feed(sp, ev, len, record, &s, err, sizeof(err)), 0);
    assert_int_equal(s.n, 2);
    kube_watch_splitter_free(sp);

    /* one byte less: -E2BIG, both whole and carried over, before the newline arrives */
    sp = kube_watch_splitter_new(line_len - 1);
    assert_int_equal(kube_watch_splitter_feed(sp, ev, len, record, &s, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "longer than"));
    kube_watch_splitter_reset(sp);
    assert_int_equal(kube_watch_splitter_feed(sp, ev, 100, record, &s, err, sizeof(err)), 0);
    assert_int_equal(
        kube_watch_splitter_feed(sp, ev + 100, line_len - 100, record, &s, err, sizeof(err)),
        -E2BIG);
    assert_int_equal(s.n, 2);
    kube_watch_splitter_free(sp);

    /* memory stays bounded for an endless line: 64 MiB without a newline, 1 MiB cap */
    sp = kube_watch_splitter_new(1u << 20);
    char *junk = malloc(1u << 20);
    assert_non_null(junk);
    memset(junk, 'a', 1u << 20);
    int rc = 0;
    int fed = 0;
    for (; fed < 64 && rc == 0; fed++) {
        rc = kube_watch_splitter_feed(sp, junk, 1u << 20, record, &s, err, sizeof(err));
        assert_true(kube_watch_splitter_pending(sp) <= (1u << 20));
    }
    assert_int_equal(rc, -E2BIG);
    assert_true(fed <= 2);
    free(junk);
    kube_watch_splitter_free(sp);
    free(ev);
}

static void test_callback_stops_and_finish(void **state)
{
    (void)state;
    struct kube_watch_splitter *sp = kube_watch_splitter_new(0);
    struct seen s;
    memset(&s, 0, sizeof(s));
    s.stop_at = 2;
    assert_int_equal(kube_watch_splitter_feed(sp, stream, sizeof(stream) - 1, record, &s, NULL, 0),
                     7);
    assert_int_equal(s.n, 2);
    kube_watch_splitter_reset(sp);

    /* a last line without '\n' is held until finish */
    memset(&s, 0, sizeof(s));
    const char *tail = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"t\"}}}";
    assert_int_equal(kube_watch_splitter_feed(sp, tail, strlen(tail), record, &s, NULL, 0), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(kube_watch_splitter_pending(sp), strlen(tail));
    assert_int_equal(kube_watch_splitter_finish(sp, record, &s, NULL, 0), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.names[0], "t");
    assert_int_equal(kube_watch_splitter_finish(sp, record, &s, NULL, 0), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(kube_event_type_name(KUBE_EVENT_BOOKMARK), "BOOKMARK");
    kube_watch_splitter_free(sp);
    kube_watch_splitter_free(NULL);
}

/* ---- kube_watch against the scripted server ---- */

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

static struct kube_client *new_client(void)
{
    struct kube_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.server = server->base;
    cfg.namespace = (char *)"default";
    struct kube_client_options o;
    memset(&o, 0, sizeof(o));
    o.timeout_ms = 2000;
    struct kube_client *c = kube_client_new(&cfg, &o, NULL, 0);
    assert_non_null(c);
    return c;
}

static void test_watch_stream_and_query(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.chunks = {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"na",
                                       "me\":\"a\"}}}\n{\"type\":\"MODIFIED\",\"obj",
                                       "ect\":{\"metadata\":{\"name\":\"a\"}}}\r\n\n",
                                       "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":"
                                       "\"a\"}}}"},
                            .chunk_interval_ms = 5}};
    ts_script(server, r, 1);
    struct kube_client *c = new_client();
    struct seen s;
    memset(&s, 0, sizeof(s));
    struct kube_watch_options o = {.label_selector = "app=web,tier!=db",
                                   .field_selector = "metadata.name=a",
                                   .resource_version = "42",
                                   .allow_bookmarks = 1,
                                   .timeout_seconds = 300};
    struct kube_error e;
    assert_int_equal(kube_watch(c, &KUBE_PODS, "ns1", &o, record, &s, &e), 0);
    assert_int_equal(s.n, 3); /* the last event had no newline: delivered at the end */
    assert_int_equal(s.types[0], KUBE_EVENT_ADDED);
    assert_int_equal(s.types[1], KUBE_EVENT_MODIFIED);
    assert_int_equal(s.types[2], KUBE_EVENT_DELETED);
    struct ts_record rec = ts_get(server, 0);
    assert_string_equal(rec.method, "GET");
    assert_non_null(strstr(rec.target, "/api/v1/namespaces/ns1/pods?watch=1"));
    assert_non_null(strstr(rec.target, "allowWatchBookmarks=true"));
    assert_non_null(strstr(rec.target, "timeoutSeconds=300"));
    assert_non_null(strstr(rec.target, "resourceVersion=42"));
    assert_non_null(strstr(rec.target, "fieldSelector=metadata.name%3Da"));
    assert_string_equal(rec.label_selector, "app=web,tier!=db");
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.watches, 1);
    assert_int_equal(st.writes, 0);
    kube_client_free(c);
}

static void test_watch_error_event_and_410(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.chunks = {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                                       "\"code\":410,\"reason\":\"Expired\"}}\n"}}};
    ts_script(server, r, 1);
    struct kube_client *c = new_client();
    struct seen s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(kube_watch(c, &KUBE_PODS, NULL, NULL, record, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.types[0], KUBE_EVENT_ERROR);
    assert_string_equal(ts_get(server, 0).target, "/api/v1/pods?watch=1");

    struct ts_reply gone[] = {{.status = 410,
                               .body = "{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":"
                                       "\"too old resource version: 1 (5)\",\"code\":410}"}};
    ts_script(server, gone, 1);
    struct kube_error e;
    memset(&s, 0, sizeof(s));
    assert_int_equal(kube_watch(c, &KUBE_PODS, NULL, NULL, record, &s, &e), KUBE_EEXPIRED);
    assert_int_equal(s.n, 0);
    assert_int_equal(e.http_status, 410);
    assert_string_equal(e.message, "too old resource version: 1 (5)");

    struct ts_reply garbage[] = {{.chunks = {"{\"type\":\"ADDED\",\"object\":{}}\n", "garbage\n",
                                             "{\"type\":\"ADDED\",\"object\":{}}\n"},
                                  .chunk_interval_ms = 5}};
    ts_script(server, garbage, 1);
    memset(&s, 0, sizeof(s));
    assert_int_equal(kube_watch(c, &KUBE_PODS, NULL, NULL, record, &s, &e), -EINVAL);
    assert_int_equal(s.n, 1);
    assert_non_null(strstr(e.message, "watch event 2"));

    /* a callback's non-zero value ends the watch and comes back */
    struct ts_reply two[] = {{.chunks = {"{\"type\":\"ADDED\",\"object\":{}}\n"
                                         "{\"type\":\"ADDED\",\"object\":{}}\n"},
                              .keep_open = 1}};
    ts_script(server, two, 1);
    memset(&s, 0, sizeof(s));
    s.stop_at = 1;
    assert_int_equal(kube_watch(c, &KUBE_PODS, NULL, NULL, record, &s, &e), 7);
    assert_int_equal(s.n, 1);
    kube_client_free(c);
}

static void test_watch_inactivity_timeout(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.chunks = {"{\"type\":\"ADDED\",\"object\":{}}\n"}, .keep_open = 1}};
    ts_script(server, r, 1);
    struct kube_client *c = new_client();
    struct seen s;
    memset(&s, 0, sizeof(s));
    struct kube_watch_options o = {.inactivity_timeout_ms = 400};
    struct kube_error e;
    uint64_t t0 = ts_now_ms();
    assert_int_equal(kube_watch(c, &KUBE_PODS, "ns", &o, record, &s, &e), -ETIMEDOUT);
    uint64_t took = ts_now_ms() - t0;
    assert_int_equal(s.n, 1);
    assert_true(took >= 380 && took < 3000);
    assert_string_equal(e.reason, "Timeout");
    /* a server that never answers at all trips it too */
    struct ts_reply hang[] = {{.hang = 1}};
    ts_script(server, hang, 1);
    memset(&s, 0, sizeof(s));
    assert_int_equal(kube_watch(c, &KUBE_PODS, "ns", &o, record, &s, &e), -ETIMEDOUT);
    kube_client_free(c);
}

struct stopper {
    volatile int *flag;
    int after_ms;
};

static void *stopper_main(void *arg)
{
    struct stopper *st = arg;
    usleep((useconds_t)st->after_ms * 1000);
    *st->flag = 1;
    return NULL;
}

static void test_watch_stop_flag(void **state)
{
    (void)state;
    struct ts_reply r[] = {{.chunks = {"{\"type\":\"ADDED\",\"object\":{}}\n"}, .keep_open = 1}};
    ts_script(server, r, 1);
    struct kube_client *c = new_client();
    struct seen s;
    memset(&s, 0, sizeof(s));
    volatile int stop = 0;
    struct kube_watch_options o = {.stop = &stop};
    struct stopper st = {.flag = &stop, .after_ms = 300};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stopper_main, &st), 0);
    uint64_t t0 = ts_now_ms();
    assert_int_equal(kube_watch(c, &KUBE_PODS, "ns", &o, record, &s, NULL), 0);
    uint64_t took = ts_now_ms() - t0;
    pthread_join(t, NULL);
    assert_int_equal(s.n, 1);
    assert_true(took >= 280 && took < 300 + 200 + 300); /* polled at least every 200 ms */
    /* already set: returns at once */
    t0 = ts_now_ms();
    assert_int_equal(kube_watch(c, &KUBE_PODS, "ns", &o, record, &s, NULL), 0);
    assert_true(ts_now_ms() - t0 < 1000);
    kube_client_free(c);
}

int main(void)
{
    const struct CMUnitTest splitter[] = {
        cmocka_unit_test(test_every_split_point), cmocka_unit_test(test_one_byte_chunks),
        cmocka_unit_test(test_garbage_lines),     cmocka_unit_test(test_huge_object),
        cmocka_unit_test(test_line_cap),          cmocka_unit_test(test_callback_stops_and_finish),
    };
    const struct CMUnitTest watch[] = {
        cmocka_unit_test(test_watch_stream_and_query),
        cmocka_unit_test(test_watch_error_event_and_410),
        cmocka_unit_test(test_watch_inactivity_timeout),
        cmocka_unit_test(test_watch_stop_flag),
    };
    int failed = cmocka_run_group_tests_name("splitter", splitter, NULL, NULL);
    failed += cmocka_run_group_tests_name("watch", watch, setup_server, teardown_server);
    return failed;
}
