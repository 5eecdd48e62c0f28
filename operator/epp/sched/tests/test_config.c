/*
 * Unit tests for the EndpointPickerConfig loader: GIE's defaults, both apiVersions, injected
 * handler and picker, parameters of both eras, and every load error naming what is wrong.
 */
#include "operator/epp/sched/tests/sched_test.h"

static void test_default_config(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(NULL);
    assert_int_equal(s->n_profiles, 1);
    struct profile *pr = sched_profile(s, "default");
    assert_non_null(pr);
    assert_int_equal(pr->n_scorers, 3);
    assert_string_equal(pr->scorers[0].p->ops->type, "queue-scorer");
    assert_true(pr->scorers[0].weight == 2.0);
    assert_string_equal(pr->scorers[1].p->ops->type, "kv-cache-utilization-scorer");
    assert_true(pr->scorers[1].weight == 2.0);
    assert_string_equal(pr->scorers[2].p->ops->type, "prefix-cache-scorer");
    assert_true(pr->scorers[2].weight == 3.0);
    assert_string_equal(pr->picker->ops->type, "max-score-picker");
    assert_string_equal(s->handler->ops->type, "single-profile-handler");
    assert_true(s->sat.queue_depth == 5 && s->sat.kv_util == 0.8 && s->sat.stale_ms == 200);
    const struct epp_sched_needs *nd = epp_sched_needs(s);
    assert_false(nd->precise);
    assert_true(nd->approximate);
    assert_false(nd->pd);
    epp_sched_free(s);
}

static void test_api_versions(void **state)
{
    (void)state;
    static const char *const versions[] = {"llm-d.ai/v1alpha1",
                                           "inference.networking.x-k8s.io/v1alpha1"};
    for (size_t i = 0; i < 2; i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "apiVersion: %s\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"
                 "schedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n",
                 versions[i]);
        struct epp_sched *s = load_ok(yaml);
        assert_true(sched_profile(s, "p")->scorers[0].weight == 1.0); /* default weight */
        epp_sched_free(s);
    }
    load_fails("apiVersion: v1\nkind: EndpointPickerConfig\nplugins: [{type: queue-scorer}]\n",
               "apiVersion: \"v1\" is not llm-d.ai/v1alpha1");
    load_fails("kind: EndpointPickerConfig\nplugins: [{type: queue-scorer}]\n", "apiVersion");
    load_fails("apiVersion: llm-d.ai/v1alpha1\nkind: Pod\nplugins: [{type: queue-scorer}]\n",
               "kind: \"Pod\"");
}

static void test_defaults_injected(void **state)
{
    (void)state;
    /* No schedulingProfiles: one "default" profile over every filter, scorer and picker. */
    struct epp_sched *s = load_ok(HDR "plugins:\n- type: decode-filter\n- name: q\n  type: "
                                      "queue-scorer\n- type: random-picker\n");
    struct profile *pr = sched_profile(s, "default");
    assert_non_null(pr);
    assert_int_equal(pr->n_filters, 1);
    assert_int_equal(pr->n_scorers, 1);
    assert_string_equal(pr->scorers[0].p->name, "q");
    assert_string_equal(pr->picker->ops->type, "random-picker");
    epp_sched_free(s);
    /* A picker is injected per profile without one, under a free name. */
    s = load_ok(HDR "plugins:\n- name: max-score-picker\n  type: queue-scorer\n"
                    "schedulingProfiles:\n- name: a\n  plugins: [{pluginRef: max-score-picker}]\n");
    assert_string_equal(sched_profile(s, "a")->picker->name, "max-score-picker-2");
    epp_sched_free(s);
}

static void test_other_sections(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(
        HDR "featureGates: [dataLayer, flowControl]\n"
            "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n"
            "- type: core-metrics-extractor\n- type: openai-parser\n"
            "- name: sat\n  type: utilization-detector\n  parameters: {queueDepthThreshold: 7, "
            "kvCacheUtilThreshold: 0.5, metricsStalenessThreshold: 1s}\n"
            "saturationDetector: {pluginRef: sat}\n"
            "dataLayer: {sources: [{pluginRef: metrics-data-source, extractors: "
            "[{pluginRef: core-metrics-extractor}]}]}\n"
            "flowControl: {maxBytes: 1Gi}\nparser: {pluginRef: openai-parser}\n");
    assert_true(s->sat.queue_depth == 7 && s->sat.kv_util == 0.5 && s->sat.stale_ms == 1000);
    epp_sched_free(s);
    /* GIE v1.0 wrote the thresholds in the section itself. */
    s = load_ok(HDR "plugins: [{type: queue-scorer}]\nsaturationDetector: {queueDepthThreshold: "
                    "3, kvCacheUtilThreshold: 0.9, metricsStalenessThreshold: 250ms}\n");
    assert_true(s->sat.queue_depth == 3 && s->sat.kv_util == 0.9 && s->sat.stale_ms == 250);
    epp_sched_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    load_fails("", "empty");
    load_fails("a: [", "EndpointPickerConfig: line");
    load_fails("[1, 2]", "must be a mapping");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nbogus: 1\n", "unknown field \"bogus\"");
    load_fails(HDR "schedulingProfiles: []\n", "plugins");
    load_fails(HDR "plugins: []\n", "plugins: needs 1 to 256");
    load_fails(HDR "plugins: [{type: no-such-scorer}]\n",
               "plugins[0].type: unknown plugin type \"no-such-scorer\"");
    load_fails(HDR "plugins: [{type: queue-scorer}, {type: no-hit-lru-scorer}]\n",
               "plugins[1].type: plugin type \"no-hit-lru-scorer\" is not supported");
    load_fails(HDR "plugins: [{name: x}]\n", "plugins[0].type");
    load_fails(HDR "plugins: [{type: queue-scorer, extra: 1}]\n", "unknown field \"extra\"");
    load_fails(HDR "plugins: [{type: queue-scorer}, {type: queue-scorer}]\n",
               "plugins[1].name: duplicate plugin name \"queue-scorer\"");
    load_fails(HDR "plugins: [{type: queue-scorer, parameters: [1]}]\n",
               "parameters: expected an object");
    load_fails(ONE_PROFILE("- type: queue-scorer\n", "  - pluginRef: nope\n"),
               "schedulingProfiles[0].plugins[0].pluginRef: no plugin named \"nope\"");
    load_fails(ONE_PROFILE("- type: queue-scorer\n", "  - weight: 2\n"),
               "schedulingProfiles[0].plugins[0]: pluginRef");
    load_fails(ONE_PROFILE("- type: queue-scorer\n", "  - {pluginRef: queue-scorer, weight: -1}\n"),
               "schedulingProfiles[0].plugins[0]: weight: -1 is out of range");
    load_fails(ONE_PROFILE("- type: queue-scorer\n", "  - {pluginRef: queue-scorer, weight: x}\n"),
               "weight");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nschedulingProfiles:\n- name: a\n  plugins: "
                   "[]\n- name: a\n  plugins: []\n",
               "schedulingProfiles[1].name: duplicate profile name \"a\"");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{plugins: []}]\n",
               "schedulingProfiles[0].name");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nschedulingProfiles:\n- name: a\n  plugins: "
                   "[]\n- name: b\n  plugins: []\n",
               "single-profile-handler needs exactly one scheduling profile");
    load_fails(HDR "plugins: [{type: single-profile-handler}, {type: pd-profile-handler}]\n",
               "two profile handlers");
    load_fails(HDR "plugins: [{type: pd-profile-handler}, {type: decode-filter}]\n"
                   "schedulingProfiles: [{name: decode, plugins: [{pluginRef: decode-filter}]}]\n",
               "prefill profile \"prefill\" is not in schedulingProfiles");
    load_fails(HDR "plugins: [{type: pd-profile-handler, parameters: {decodeProfile: d}}]\n"
                   "schedulingProfiles: [{name: prefill, plugins: []}]\n",
               "decode profile \"d\"");
    load_fails(HDR "plugins: [{type: disagg-profile-handler, parameters: {deciders: {prefill: "
                   "x}}}, {type: queue-scorer, name: x}]\n"
                   "schedulingProfiles: [{name: prefill, plugins: []}, {name: decode, plugins: "
                   "[]}]\n",
               "decider \"x\" is not a P/D decider plugin");
    load_fails(ONE_PROFILE("- type: random-picker\n- type: max-score-picker\n",
                           "  - pluginRef: random-picker\n  - pluginRef: max-score-picker\n"),
               "profile already has picker \"random-picker\"");
    load_fails(ONE_PROFILE("- type: prefix-based-pd-decider\n",
                           "  - pluginRef: prefix-based-pd-decider\n"),
               "cannot be used in a scheduling profile");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nsaturationDetector: {pluginRef: "
                   "queue-scorer}\n",
               "saturationDetector.pluginRef");
    load_fails(HDR "plugins: [{type: queue-scorer}]\nfeatureGates: [1]\n", "featureGates");
    load_fails(HDR "plugins: [{type: queue-scorer}]\ndataLayer: [1]\n", "dataLayer");
}

static void test_bad_parameters(void **state)
{
    (void)state;
    static const struct {
        const char *plugin, *want;
    } cases[] = {
        {"{type: load-aware-scorer, parameters: {threshold: 0}}", "parameters.threshold: 0 is out"},
        {"{type: load-aware-scorer, parameters: {threshold: x}}", "parameters.threshold"},
        {"{type: prefix-cache-scorer, parameters: {maxPrefixBlocksToMatch: -1}}",
         "maxPrefixBlocksToMatch"},
        {"{type: prefix-cache-scorer, parameters: {autoTune: maybe}}", "autoTune"},
        {"{type: prefix-cache-scorer, parameters: {lruCapacityPerServer: 0}}",
         "lruCapacityPerServer"},
        {"{type: max-score-picker, parameters: {maxNumOfEndpoints: 0}}", "maxNumOfEndpoints"},
        {"{type: pd-profile-handler, parameters: {threshold: -5}}", "parameters.threshold"},
        {"{type: prefix-based-pd-decider, parameters: {nonCachedTokens: a}}", "nonCachedTokens"},
        {"{type: utilization-detector, parameters: {kvCacheUtilThreshold: 2}}",
         "kvCacheUtilThreshold"},
        {"{type: utilization-detector, parameters: {metricsStalenessThreshold: soon}}",
         "metricsStalenessThreshold"},
        {"{type: active-request-scorer, parameters: {requestTimeout: 5x}}", "requestTimeout"},
        {"{type: label-selector-filter, parameters: {matchLabels: {a: [1]}}}",
         "parameters.matchLabels.a"},
        {"{type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: In}]}}",
         "values: required for operator In"},
        {"{type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: In, "
         "values: x}]}}",
         "matchExpressions[0].values: expected a list of strings"},
        {"{type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: "
         "Exists, values: x}]}}",
         "matchExpressions[0].values: expected a list of strings"},
        {"{type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: Gt, "
         "values: [1]}]}}",
         "is not In, NotIn, Exists or DoesNotExist"},
        {"{type: label-selector-filter, parameters: {matchExpressions: [{key: a, operator: "
         "Exists, values: [x]}]}}",
         "must be empty"},
        {"{type: by-label, parameters: {validValues: [a]}}", "parameters.label: required"},
        {"{type: precise-prefix-cache-scorer, parameters: {tokenProcessorConfig: {blockSize: 0}}}",
         "blockSize"},
        {"{type: precise-prefix-cache-scorer, parameters: {kvEventsConfig: {podDiscoveryConfig: "
         "{socketPort: 70000}}}}",
         "socketPort"},
        {"{type: precise-prefix-cache-scorer, parameters: {kvCacheBackendConfigs: [{weight: 1}]}}",
         "kvCacheBackendConfigs[0]"},
        {"{type: precise-prefix-cache-scorer, parameters: {speculativeTTL: forever}}",
         "speculativeTTL"},
        {"{type: prefix-cache-affinity-filter, parameters: {affinityThreshold: 1.5}}",
         "affinityThreshold"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), HDR "plugins: [%s]\n", cases[i].plugin);
        load_fails(yaml, cases[i].want);
    }
}

static void test_precise_params_v03(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(ONE_PROFILE(
        "- type: precise-prefix-cache-scorer\n  parameters:\n    kvCacheIndexerConfig:\n"
        "      tokenProcessorConfig: {blockSize: 64, hashSeed: \"12345\"}\n"
        "      kvBlockIndexConfig: {inMemoryConfig: {size: 1000, podCacheSize: 4}}\n"
        "    kvEventsConfig: {zmqEndpoint: \"tcp://*:6000\", topicFilter: \"kv@x\", "
        "concurrency: 8}\n",
        "  - pluginRef: precise-prefix-cache-scorer\n"));
    const struct epp_sched_needs *nd = epp_sched_needs(s);
    assert_true(nd->precise);
    assert_int_equal(nd->block_size, 64);
    assert_int_equal(nd->hash_seed, 12345);
    assert_string_equal(nd->hash_seed_text, "12345");
    assert_int_equal(nd->index_size, 1000);
    assert_int_equal(nd->pod_cache_size, 4);
    assert_string_equal(nd->zmq_endpoint, "tcp://*:6000");
    assert_string_equal(nd->topic_filter, "kv@x");
    assert_int_equal(nd->concurrency, 8);
    assert_int_equal(nd->socket_port, 5556);
    assert_true(nd->gpu_weight == 1.0 && nd->cpu_weight == 0.8);
    assert_false(nd->approximate);
    epp_sched_free(s);
}

static void test_precise_params_head(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(ONE_PROFILE(
        "- type: precise-prefix-cache-scorer\n  parameters:\n"
        "    tokenProcessorConfig: {blockSize: 32}\n"
        "    indexerConfig:\n      kvBlockIndexConfig: {inMemoryConfig: {size: 77}}\n"
        "      kvCacheBackendConfigs: [{name: gpu, weight: 1.0}, {name: CPU, weight: 0.5}]\n"
        "    kvEventsConfig: {topicFilter: kv, discoverPods: true, podDiscoveryConfig: "
        "{socketPort: 7000}}\n"
        "    speculativeIndexing: true\n    speculativeTTL: 1m30s\n"
        "- type: session-affinity-scorer\n",
        "  - pluginRef: precise-prefix-cache-scorer\n  - pluginRef: session-affinity-scorer\n"));
    const struct epp_sched_needs *nd = epp_sched_needs(s);
    assert_true(nd->precise);
    assert_int_equal(nd->block_size, 32);
    assert_string_equal(nd->hash_seed_text, "");
    assert_int_equal(nd->index_size, 77);
    assert_int_equal(nd->pod_cache_size, 10);
    assert_true(nd->cpu_weight == 0.5);
    assert_true(nd->discover_pods);
    assert_int_equal(nd->socket_port, 7000);
    assert_string_equal(nd->zmq_endpoint, "tcp://*:5557");
    assert_true(nd->speculative);
    assert_int_equal(nd->speculative_ttl_ms, 90000);
    assert_true(nd->session_affinity);
    epp_sched_free(s);
}

static void test_metrics_and_reload(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    char err[256];
    struct epp_sched *s = epp_sched_new(NULL, 0, reg, err, sizeof(err));
    assert_non_null(s);
    struct epp_sched *s2 = epp_sched_new_like(s, NULL, 0, err, sizeof(err));
    assert_non_null(s2);
    struct fixture f;
    fixture_init(&f, 2);
    struct epp_request r = {.model = "m"};
    struct epp_sched_result res;
    assert_int_equal(epp_schedule(s2, &r, f.ptrs, NULL, 2, &res), 0);
    f.eps[0].ready = f.eps[1].ready = false;
    assert_int_equal(epp_schedule(s2, &r, f.ptrs, NULL, 2, &res), 503);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(metrics_render(reg, &b), 0);
    const char *text = buf_cstr(&b);
    assert_non_null(
        strstr(text, "inference_extension_scheduler_attempts_total{status=\"success\"} 1"));
    assert_non_null(
        strstr(text, "inference_extension_scheduler_attempts_total{status=\"failure\"} 1"));
    assert_non_null(strstr(text, "inference_extension_scheduler_e2e_duration_seconds_count 2"));
    assert_non_null(
        strstr(text, "inference_extension_plugin_duration_seconds_count{extension_point="
                     "\"Scorer\",plugin_type=\"queue-scorer\",plugin_name=\"queue-scorer\"} 1"));
    buf_free(&b);
    epp_sched_free(s);
    epp_sched_free(s2);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_config),
        cmocka_unit_test(test_api_versions),
        cmocka_unit_test(test_defaults_injected),
        cmocka_unit_test(test_other_sections),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_parameters),
        cmocka_unit_test(test_precise_params_v03),
        cmocka_unit_test(test_precise_params_head),
        cmocka_unit_test(test_metrics_and_reload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
