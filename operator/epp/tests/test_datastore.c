/*
 * Tests of the EPP's datastore (operator/epp/datastore.h) and of the metrics extraction
 * (operator/epp/scrape.h): endpoints in and out of rotation, re-addressed pods, model mapping
 * (the oldest InferenceModel wins a name), the pod and InferenceModel objects, staleness, and
 * vLLM's /metrics text, malformed ones included.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "operator/epp/datastore.h"
#include "operator/epp/scrape.h"

struct hook_log {
    int added, removed;
    uint64_t last_removed_id;
};

static void on_added(void *ud, struct epp_endpoint *ep)
{
    (void)ep;
    ((struct hook_log *)ud)->added++;
}

static void on_removed(void *ud, struct epp_endpoint *ep)
{
    struct hook_log *h = ud;
    h->removed++;
    h->last_removed_id = ep->id;
}

static struct json_object *labels(const char *json)
{
    struct json_object *o = json_parse(json, strlen(json), NULL, 0);
    assert_non_null(o);
    return o;
}

static void test_upsert_and_remove(void **state)
{
    (void)state;
    struct hook_log h = {0};
    struct epp_ds_hooks hooks = {.on_added = on_added, .on_removed = on_removed, .ud = &h};
    struct epp_ds *ds = epp_ds_new(&hooks);
    struct json_object *l = labels("{\"llm-d.ai/role\":\"decode\",\"tandem.dev/model\":\"m1\"}");
    struct epp_pod p = {.ns = "ns",
                        .name = "a",
                        .ip = "10.0.0.1",
                        .port = 8000,
                        .labels = l,
                        .ready = true,
                        .model = "m1"};
    assert_int_equal(epp_ds_upsert(ds, &p), 0);
    struct epp_endpoint *ep = epp_ds_by_name(ds, "ns", "a");
    assert_non_null(ep);
    assert_string_equal(ep->addr, "10.0.0.1:8000");
    assert_int_equal(ep->role, EPP_ROLE_DECODE);
    assert_true(ep->stale);
    uint64_t id = ep->id;
    /* an update keeps the endpoint (and what is known about it) */
    ep->active_requests = 3;
    p.ready = false;
    assert_int_equal(epp_ds_upsert(ds, &p), 0);
    ep = epp_ds_by_addr(ds, "10.0.0.1:8000");
    assert_non_null(ep);
    assert_int_equal(ep->id, id);
    assert_false(ep->ready);
    assert_int_equal(ep->active_requests, 3);
    /* a new IP is a new endpoint */
    p.ip = "10.0.0.2";
    assert_int_equal(epp_ds_upsert(ds, &p), 0);
    assert_int_equal(h.added, 2);
    assert_int_equal(h.removed, 1);
    assert_int_equal(h.last_removed_id, id);
    assert_null(epp_ds_by_addr(ds, "10.0.0.1:8000"));
    assert_int_not_equal(epp_ds_by_name(ds, "ns", "a")->id, id);
    /* IPv6 addresses are bracketed */
    struct epp_pod p6 = {.ns = "ns", .name = "b", .ip = "fd00::5", .port = 8000, .ready = true};
    assert_int_equal(epp_ds_upsert(ds, &p6), 0);
    assert_non_null(epp_ds_by_addr(ds, "[fd00::5]:8000"));
    /* bad input */
    struct epp_pod bad = {.ns = "ns", .name = "c", .ip = "not-an-ip", .port = 8000};
    assert_int_equal(epp_ds_upsert(ds, &bad), -EINVAL);
    bad.ip = "10.0.0.9";
    bad.port = 0;
    assert_int_equal(epp_ds_upsert(ds, &bad), -EINVAL);
    assert_int_equal(epp_ds_count(ds), 2);
    epp_ds_remove(ds, "ns", "b");
    assert_int_equal(epp_ds_count(ds), 1);
    epp_ds_reset(ds);
    assert_int_equal(epp_ds_count(ds), 0);
    assert_int_equal(h.removed, 3);
    json_object_put(l);
    epp_ds_free(ds);
}

static void test_candidates(void **state)
{
    (void)state;
    struct epp_ds *ds = epp_ds_new(NULL);
    const char *names[] = {"a", "b", "c", "d"};
    const char *models[] = {"m1", "m2", NULL, "m1"};
    bool ready[] = {true, true, true, false};
    for (int i = 0; i < 4; i++) {
        char ip[32];
        snprintf(ip, sizeof ip, "10.0.0.%d", i + 1);
        struct epp_pod p = {.ns = "ns",
                            .name = names[i],
                            .ip = ip,
                            .port = 8000,
                            .ready = ready[i],
                            .model = models[i]};
        assert_int_equal(epp_ds_upsert(ds, &p), 0);
    }
    struct epp_endpoint *out[8];
    /* m1: a (labelled m1) and c (no label serves any); d is not ready */
    int n = epp_ds_candidates(ds, "m1", 1000, out, 8);
    assert_int_equal(n, 2);
    assert_true(strcmp(out[0]->name, "d") != 0 && strcmp(out[1]->name, "d") != 0);
    /* any model: every ready one */
    assert_int_equal(epp_ds_candidates(ds, NULL, 1000, out, 8), 3);
    /* an ejected endpoint is out until its time is up */
    epp_ds_by_name(ds, "ns", "a")->ejected_until_ms = 2000;
    assert_int_equal(epp_ds_candidates(ds, "m1", 1500, out, 8), 1);
    assert_int_equal(epp_ds_candidates(ds, "m1", 2000, out, 8), 2);
    assert_int_equal(epp_ds_ready_count(ds), 3);
    /* staleness */
    struct epp_endpoint *a = epp_ds_by_name(ds, "ns", "a");
    a->m.valid = true;
    a->m.updated_ms = 1000;
    epp_ds_update_staleness(ds, 2500, 2000);
    assert_false(a->stale);
    assert_true(epp_ds_by_name(ds, "ns", "b")->stale);
    epp_ds_update_staleness(ds, 3001, 2000);
    assert_true(a->stale);
    epp_ds_free(ds);
}

static struct json_object *obj(const char *json)
{
    return labels(json);
}

static void test_models(void **state)
{
    (void)state;
    char err[256];
    struct epp_ds *ds = epp_ds_new(NULL);
    struct json_object *young =
        obj("{\"metadata\":{\"name\":\"young\",\"creationTimestamp\":\"2026-11-02T00:00:00Z\"},"
            "\"spec\":{\"modelName\":\"chat\",\"criticality\":\"Sheddable\","
            "\"targetModels\":[{\"name\":\"a\",\"weight\":30},{\"name\":\"b\",\"weight\":70}]}}");
    struct json_object *old =
        obj("{\"metadata\":{\"name\":\"old\",\"creationTimestamp\":\"2026-11-01T00:00:00Z\"},"
            "\"spec\":{\"modelName\":\"chat\"}}");
    struct epp_model m;
    assert_int_equal(epp_model_from_object(young, &m, err, sizeof err), 0);
    assert_int_equal(m.criticality, EPP_CRIT_SHEDDABLE);
    assert_int_equal(m.n_targets, 2);
    assert_int_equal(m.targets[1].weight, 70);
    assert_int_equal(epp_ds_model_upsert(ds, &m), 0);
    assert_ptr_equal(epp_ds_model_for(ds, "chat"), epp_ds_model_at(ds, 0));
    assert_int_equal(epp_model_from_object(old, &m, err, sizeof err), 0);
    assert_int_equal(m.criticality, EPP_CRIT_STANDARD);
    assert_int_equal(epp_ds_model_upsert(ds, &m), 0);
    assert_string_equal(epp_ds_model_for(ds, "chat")->name, "old"); /* the oldest wins */
    assert_null(epp_ds_model_for(ds, "other"));
    epp_ds_model_remove(ds, "old");
    assert_string_equal(epp_ds_model_for(ds, "chat")->name, "young");
    assert_int_equal(epp_ds_model_count(ds), 1);

    struct json_object *bad[] = {
        obj("{\"metadata\":{\"name\":\"x\"},\"spec\":{}}"),
        obj("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"modelName\":\"a\",\"criticality\":\"Low\"}"
            "}"),
        obj("{\"metadata\":{\"name\":\"x\"},\"spec\":{\"modelName\":\"a\",\"targetModels\":[{"
            "\"name\":\"t\",\"weight\":0}]}}"),
    };
    const char *want[] = {"spec.modelName", "spec.criticality", "spec.targetModels[0]"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(epp_model_from_object(bad[i], &m, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, want[i]));
        json_object_put(bad[i]);
    }
    json_object_put(young);
    json_object_put(old);
    epp_ds_free(ds);
}

static void test_pod_object(void **state)
{
    (void)state;
    struct epp_pod p;
    struct json_object *pod =
        obj("{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"labels\":{\"tandem.dev/model\":"
            "\"m\",\"llm-d.ai/role\":\"prefill\"}},\"status\":{\"phase\":\"Running\",\"podIP\":"
            "\"10.1.2.3\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}");
    assert_int_equal(epp_pod_from_object(pod, 8000, &p), 0);
    assert_true(p.ready);
    assert_string_equal(p.model, "m");
    assert_string_equal(p.ip, "10.1.2.3");
    json_object_put(pod);
    /* terminating: out of rotation at once */
    pod = obj("{\"metadata\":{\"name\":\"p\",\"deletionTimestamp\":\"2026-11-27T00:00:00Z\"},"
              "\"status\":{\"podIP\":\"10.1.2.3\",\"conditions\":[{\"type\":\"Ready\","
              "\"status\":\"True\"}]}}");
    assert_int_equal(epp_pod_from_object(pod, 8000, &p), 0);
    assert_false(p.ready);
    json_object_put(pod);
    pod = obj("{\"metadata\":{\"name\":\"p\"},\"status\":{\"podIP\":\"10.1.2.3\","
              "\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}]}}");
    assert_int_equal(epp_pod_from_object(pod, 8000, &p), 0);
    assert_false(p.ready);
    json_object_put(pod);
    pod = obj("{\"metadata\":{\"name\":\"p\"},\"status\":{}}");
    assert_int_equal(epp_pod_from_object(pod, 8000, &p), -EINVAL); /* no IP yet */
    json_object_put(pod);
}

static void test_metrics_parse(void **state)
{
    (void)state;
    char err[256];
    const char *text = "# HELP vllm:num_requests_waiting Waiting\n"
                       "# TYPE vllm:num_requests_waiting gauge\n"
                       "vllm:num_requests_waiting{model_name=\"a\",engine=\"0\"} 3\n"
                       "vllm:num_requests_waiting{model_name=\"b\",engine=\"0\"} 2\n"
                       "vllm:num_requests_running{model_name=\"a\"} 7\n"
                       "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n"
                       "vllm:kv_cache_usage_perc{model_name=\"b\"} 0.5\n"
                       "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\"} 1\n"
                       "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"x,y\","
                       "waiting_lora_adapters=\"\"} 1.7e9\n"
                       "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old\","
                       "waiting_lora_adapters=\"z\"} 1.6e9\n"
                       "tandem_engine_kv_held_requests 4\n";
    struct epp_metrics m = {0};
    assert_int_equal(epp_metrics_parse(text, strlen(text), &m, err, sizeof err), 0);
    assert_true(m.waiting == 5.0);
    assert_true(m.running == 7.0);
    assert_true(m.kv_usage == 0.5);
    assert_int_equal(m.block_size, 16);
    assert_int_equal(m.num_gpu_blocks, 2048);
    assert_int_equal(m.max_lora, 4);
    assert_string_equal(m.running_loras, "x,y"); /* the newest sample */
    assert_null(m.waiting_loras);
    /* the older KV gauge name (GIE <= v0.5 servers) */
    const char *old = "vllm:gpu_cache_usage_perc 0.75\n";
    assert_int_equal(epp_metrics_parse(old, strlen(old), &m, err, sizeof err), 0);
    assert_true(m.kv_usage == 0.75);
    assert_true(m.waiting == 5.0); /* absent: unchanged */
    /* malformed text leaves m as it was */
    const char *bad[] = {"vllm:num_requests_waiting{model_name=\"a} 3\n",
                         "vllm:num_requests_waiting 3 4 5 6\n", "{} 1\n"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(epp_metrics_parse(bad[i], strlen(bad[i]), &m, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "line 1"));
    }
    assert_true(m.waiting == 5.0);
    assert_string_equal(m.running_loras, "x,y");
    free(m.running_loras);
    free(m.waiting_loras);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upsert_and_remove),
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_pod_object),
        cmocka_unit_test(test_metrics_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
