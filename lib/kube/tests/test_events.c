/* Tests for lib/kube/events against localkube's API server emulator: the Event written, its name,
 * aggregation of repeats into count/lastTimestamp patches, re-creation of a vanished event, the
 * per-object spam filter, a full queue, flush on free, cluster-scoped objects, argument checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/events.h"
#include "lib/log.h"

#include "lk_harness.h"

static struct lk g_lk;
static struct kube_client *g_client;

static int group_setup(void **state)
{
    (void)state;
    log_init("test_events", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_WARN, LOG_FORMAT_TEXT);
    if (lk_start(&g_lk) != 0) {
        return -1;
    }
    g_client = lk_client(&g_lk, NULL);
    return g_client ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kube_client_free(g_client);
    lk_stop(&g_lk);
    return 0;
}

/* Creates a ConfigMap and returns the server's object (caller puts). */
static struct json_object *make_cm(const char *ns, const char *name)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\","
             "\"namespace\":\"%s\"}}",
             name, ns);
    struct json_object *o = json_parse(text, strlen(text), NULL, 0);
    struct json_object *out = NULL;
    struct kube_error err = {0};
    int rc = kube_create(g_client, &KUBE_CONFIGMAPS, ns, o, &out, &err);
    json_object_put(o);
    if (rc != 0) {
        fail_msg("create %s/%s: %s %s", ns, name, tandem_strerror(rc), err.message);
    }
    return out;
}

/* Events about the object named name, as a list object (caller puts). */
static struct json_object *events_for(const char *ns, const char *name)
{
    char fs[256];
    snprintf(fs, sizeof(fs), "involvedObject.name=%s", name);
    struct kube_list_options o = {.field_selector = fs};
    struct json_object *list = NULL;
    struct kube_error err = {0};
    int rc = kube_list(g_client, &KUBE_EVENTS, ns, &o, &list, &err);
    if (rc != 0) {
        fail_msg("list events: %s %s", tandem_strerror(rc), err.message);
    }
    return list;
}

static size_t nitems(struct json_object *list)
{
    struct json_object *items = json_get(list, "items");
    return items ? json_object_array_length(items) : 0;
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = "";
    json_get_string(o, path, &s, NULL, 0);
    return s;
}

static long int_at(struct json_object *o, const char *path)
{
    int64_t v = -1;
    json_get_int64(o, path, &v, NULL, 0);
    return (long)v;
}

static int is_rfc3339(const char *s)
{
    static const char pat[] = "dddd-dd-ddTdd:dd:ddZ";
    if (strlen(s) != sizeof(pat) - 1) {
        return 0;
    }
    for (size_t i = 0; pat[i]; i++) {
        if (pat[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != pat[i]) {
            return 0;
        }
    }
    return 1;
}

static struct kube_event_recorder *recorder(int burst, size_t queue)
{
    struct kube_event_recorder_options o = {
        .component = "tandem-operator",
        .host = "node-7",
        .queue_size = queue,
        .burst = burst,
    };
    struct kube_event_recorder *r = kube_event_recorder_new(g_client, &o);
    assert_non_null(r);
    return r;
}

static void test_event_and_aggregation(void **state)
{
    (void)state;
    struct json_object *cm = make_cm("default", "ev-target");
    struct kube_event_recorder *r = recorder(0, 0);
    assert_int_equal(kube_event_record(r, cm, "Normal", "Scaled", "scaled to %d replicas", 3), 0);
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);

    struct json_object *list = events_for("default", "ev-target");
    assert_int_equal(nitems(list), 1);
    struct json_object *ev = json_object_array_get_idx(json_get(list, "items"), 0);
    const char *name = str_at(ev, "metadata.name");
    /* <object>.<16 hex> */
    assert_int_equal(strncmp(name, "ev-target.", 10), 0);
    assert_int_equal(strlen(name), 10 + 16);
    for (size_t i = 10; i < 26; i++) {
        assert_non_null(strchr("0123456789abcdef", name[i]));
    }
    char first_name[64];
    snprintf(first_name, sizeof(first_name), "%s", name);
    assert_string_equal(str_at(ev, "metadata.namespace"), "default");
    assert_string_equal(str_at(ev, "involvedObject.kind"), "ConfigMap");
    assert_string_equal(str_at(ev, "involvedObject.apiVersion"), "v1");
    assert_string_equal(str_at(ev, "involvedObject.namespace"), "default");
    assert_string_equal(str_at(ev, "involvedObject.uid"), str_at(cm, "metadata.uid"));
    assert_string_equal(str_at(ev, "involvedObject.resourceVersion"),
                        str_at(cm, "metadata.resourceVersion"));
    assert_string_equal(str_at(ev, "reason"), "Scaled");
    assert_string_equal(str_at(ev, "message"), "scaled to 3 replicas");
    assert_string_equal(str_at(ev, "type"), "Normal");
    assert_string_equal(str_at(ev, "source.component"), "tandem-operator");
    assert_string_equal(str_at(ev, "source.host"), "node-7");
    assert_string_equal(str_at(ev, "reportingComponent"), "tandem-operator");
    assert_string_equal(str_at(ev, "reportingInstance"), "node-7");
    assert_int_equal(int_at(ev, "count"), 1);
    assert_true(is_rfc3339(str_at(ev, "firstTimestamp")));
    assert_string_equal(str_at(ev, "firstTimestamp"), str_at(ev, "lastTimestamp"));
    json_object_put(list);

    /* repeats are aggregated into the same Event */
    lk_sleep_ms(1100); /* so lastTimestamp moves (seconds resolution) */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kube_event_record(r, cm, "Normal", "Scaled", "scaled to %d replicas", 3),
                         0);
    }
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);
    list = events_for("default", "ev-target");
    assert_int_equal(nitems(list), 1);
    ev = json_object_array_get_idx(json_get(list, "items"), 0);
    assert_string_equal(str_at(ev, "metadata.name"), first_name);
    assert_int_equal(int_at(ev, "count"), 4);
    assert_true(strcmp(str_at(ev, "lastTimestamp"), str_at(ev, "firstTimestamp")) > 0);
    json_object_put(list);

    /* a different message or type is another Event */
    assert_int_equal(kube_event_record(r, cm, "Normal", "Scaled", "scaled to %d replicas", 4), 0);
    assert_int_equal(kube_event_record(r, cm, "Warning", "Scaled", "scaled to %d replicas", 3), 0);
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);
    list = events_for("default", "ev-target");
    assert_int_equal(nitems(list), 3);
    json_object_put(list);

    /* an aggregated Event that vanished (TTL, deletion) is written again with the running count */
    struct kube_error err = {0};
    assert_int_equal(kube_delete(g_client, &KUBE_EVENTS, "default", first_name, NULL, NULL, &err),
                     0);
    assert_int_equal(kube_event_record(r, cm, "Normal", "Scaled", "scaled to %d replicas", 3), 0);
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);
    struct json_object *again = NULL;
    assert_int_equal(kube_get(g_client, &KUBE_EVENTS, "default", first_name, &again, &err), 0);
    assert_int_equal(int_at(again, "count"), 5);
    json_object_put(again);

    struct kube_event_recorder_stats st;
    kube_event_recorder_get_stats(r, &st);
    assert_int_equal(st.queued, 7);
    assert_int_equal(st.created, 4); /* first, two variants, the re-creation */
    assert_int_equal(st.patched, 3);
    assert_int_equal(st.failed, 0);
    assert_int_equal(st.dropped_full + st.dropped_spam, 0);
    kube_event_recorder_free(r);
    json_object_put(cm);
}

static void test_spam_filter(void **state)
{
    (void)state;
    struct json_object *cm = make_cm("default", "ev-spam");
    struct json_object *other = make_cm("default", "ev-quiet");
    struct kube_event_recorder *r = recorder(5, 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(kube_event_record(r, cm, "Warning", "Failed", "attempt %d", i), 0);
    }
    assert_int_equal(kube_event_record(r, other, "Normal", "Ok", "fine"), 0);
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);
    struct kube_event_recorder_stats st;
    kube_event_recorder_get_stats(r, &st);
    assert_int_equal(st.created, 6); /* the burst of 5, and the other object's */
    assert_int_equal(st.dropped_spam, 3);
    struct json_object *list = events_for("default", "ev-spam");
    assert_int_equal(nitems(list), 5);
    json_object_put(list);
    kube_event_recorder_free(r);
    json_object_put(cm);
    json_object_put(other);
}

static void test_queue_full_and_flush_on_free(void **state)
{
    (void)state;
    struct json_object *cm = make_cm("default", "ev-slow");
    /* every event write takes 400 ms */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"latency\",\"ms\":400,\"verb\":\"create\","
                                        "\"resource\":\"events\"}"),
                     0);
    struct kube_event_recorder *r = recorder(0, 2);
    assert_int_equal(kube_event_record(r, cm, "Normal", "One", "1"), 0);
    lk_sleep_ms(150); /* the thread is now writing "One" */
    long long t0 = lk_now_ms();
    assert_int_equal(kube_event_record(r, cm, "Normal", "Two", "2"), 0);
    assert_int_equal(kube_event_record(r, cm, "Normal", "Three", "3"), 0);
    assert_int_equal(kube_event_record(r, cm, "Normal", "Four", "4"), -ENOSPC);
    assert_true(lk_now_ms() - t0 < 200); /* recording never waits for the API server */
    assert_int_equal(kube_event_recorder_flush(r, 100), -ETIMEDOUT);
    kube_event_recorder_free(r); /* writes Two and Three first */
    assert_int_equal(lk_clear_faults(g_client), 0);
    struct json_object *list = events_for("default", "ev-slow");
    assert_int_equal(nitems(list), 3);
    json_object_put(list);
    json_object_put(cm);
}

static void test_cluster_scoped_and_arguments(void **state)
{
    (void)state;
    struct json_object *ns = NULL;
    assert_int_equal(kube_get(g_client, &KUBE_NAMESPACES, NULL, "kube-public", &ns, NULL), 0);
    struct kube_event_recorder *r = recorder(0, 0);
    assert_int_equal(kube_event_record(r, ns, "Normal", "Seen", "namespace %s", "kube-public"), 0);
    /* a message over 1024 bytes is cut on a character boundary */
    char big[1100];
    memset(big, 'a', 1023);
    strcpy(big + 1023, "\xc3\xa9tail"); /* é straddles byte 1024 */
    assert_int_equal(kube_event_record(r, ns, "Normal", "Long", "%s", big), 0);
    assert_int_equal(kube_event_record(r, ns, "Info", "Bad", "x"), -EINVAL);
    assert_int_equal(kube_event_record(r, ns, "Normal", "", "x"), -EINVAL);
    struct json_object *nokind = json_parse("{\"metadata\":{\"name\":\"x\"}}", 27, NULL, 0);
    assert_int_equal(kube_event_record(r, nokind, "Normal", "R", "x"), -EINVAL);
    json_object_put(nokind);
    assert_int_equal(kube_event_recorder_flush(r, 10000), 0);
    /* events about cluster-scoped objects live in "default" */
    struct json_object *list = events_for("default", "kube-public");
    assert_int_equal(nitems(list), 2);
    struct json_object *items = json_get(list, "items");
    for (size_t i = 0; i < 2; i++) {
        struct json_object *ev = json_object_array_get_idx(items, i);
        assert_string_equal(str_at(ev, "involvedObject.kind"), "Namespace");
        assert_string_equal(str_at(ev, "involvedObject.namespace"), "");
        if (strcmp(str_at(ev, "reason"), "Long") == 0) {
            assert_int_equal(strlen(str_at(ev, "message")), 1023);
        } else {
            assert_string_equal(str_at(ev, "message"), "namespace kube-public");
        }
    }
    json_object_put(list);
    kube_event_recorder_free(r);
    json_object_put(ns);

    struct kube_event_recorder_options bad = {.component = ""};
    assert_null(kube_event_recorder_new(g_client, &bad));
    kube_event_recorder_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_and_aggregation),
        cmocka_unit_test(test_spam_filter),
        cmocka_unit_test(test_queue_full_and_flush_on_free),
        cmocka_unit_test(test_cluster_scoped_and_arguments),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
