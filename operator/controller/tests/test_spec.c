/*
 * Unit tests for operator/controller/spec: the example manifests and server-defaulted objects
 * parse, defaults are applied without the API server, and each invalid spec yields an error that
 * names the field. Runs from operator/controller/tests (ctest WORKING_DIRECTORY).
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

#include "lib/json.h"
#include "lib/yaml.h"
#include "operator/controller/spec.h"

#define EXAMPLES "../../../manifests/examples/"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot open %s", path);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* Every document of a YAML (or JSON List) file, as an array. */
static struct json_object *load_docs(const char *path)
{
    size_t len;
    char *text = slurp(path, &len);
    char err[256];
    struct json_object *docs = NULL;
    if (yaml_parse_all(text, len, &docs, err, sizeof(err)) != 0) {
        fail_msg("%s: %s", path, err);
    }
    free(text);
    if (json_object_array_length(docs) == 1) {
        struct json_object *items = json_get(json_object_array_get_idx(docs, 0), "items");
        if (items) {
            json_object_get(items);
            json_object_put(docs);
            return items;
        }
    }
    return docs;
}

/* The document of a kind with metadata.name, borrowed from docs. */
static struct json_object *find_doc(struct json_object *docs, const char *kind, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(docs); i++) {
        struct json_object *d = json_object_array_get_idx(docs, i);
        const char *k = json_object_get_string(json_get(d, "kind"));
        const char *n = json_object_get_string(json_get(d, "metadata.name"));
        if (k && n && strcmp(k, kind) == 0 && strcmp(n, name) == 0) {
            return d;
        }
    }
    fail_msg("no %s %s", kind, name);
    return NULL;
}

static struct json_object *yaml_obj(const char *text)
{
    char err[256];
    struct json_object *o = NULL;
    if (yaml_parse_one(text, strlen(text), &o, err, sizeof(err)) != 0 || !o) {
        fail_msg("bad test YAML (%s): %s", err, text);
    }
    return o;
}

static void dump_errors(const struct spec_errors *errs)
{
    char text[4096];
    spec_errors_format(errs, text, sizeof(text));
    print_message("errors: %s\n", text);
}

static void parse_pool_ok(struct json_object *obj, struct spec_pool *pool)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_pool_parse(obj, pool, &errs);
    if (rc != 0) {
        dump_errors(&errs);
        fail_msg("pool parse failed: %d", rc);
    }
    assert_int_equal(errs.n, 0);
}

static void parse_model_ok(struct json_object *obj, struct spec_model *model)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_model_parse(obj, model, &errs);
    if (rc != 0) {
        dump_errors(&errs);
        fail_msg("model parse failed: %d", rc);
    }
    assert_int_equal(errs.n, 0);
}

/* Asserts that errs has an error on exactly field whose message contains msg. */
static void assert_error(const struct spec_errors *errs, const char *field, const char *msg)
{
    for (int i = 0; i < errs->n; i++) {
        if (strcmp(errs->e[i].field, field) == 0 && strstr(errs->e[i].message, msg)) {
            return;
        }
    }
    dump_errors(errs);
    fail_msg("expected error \"%s: ...%s...\"", field, msg);
}

static void expect_pool_error(const char *yaml, const char *field, const char *msg)
{
    struct json_object *o = yaml_obj(yaml);
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_pool_parse(o, &pool, &errs);
    if (rc != -EINVAL) {
        dump_errors(&errs);
        fail_msg("pool parse returned %d, want -EINVAL, for:\n%s", rc, yaml);
    }
    assert_error(&errs, field, msg);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void expect_model_error_rc(const char *yaml, int want_rc, const char *field, const char *msg)
{
    struct json_object *o = yaml_obj(yaml);
    struct spec_model model;
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_model_parse(o, &model, &errs);
    if (rc != want_rc) {
        dump_errors(&errs);
        fail_msg("model parse returned %d, want %d, for:\n%s", rc, want_rc, yaml);
    }
    assert_error(&errs, field, msg);
    spec_model_free(&model);
    json_object_put(o);
}

static void expect_model_error(const char *yaml, const char *field, const char *msg)
{
    expect_model_error_rc(yaml, -EINVAL, field, msg);
}

/* ---- the examples ---- */

static void test_example_disaggregated(void **state)
{
    (void)state;
    struct json_object *docs = load_docs(EXAMPLES "disaggregated.yaml");
    struct spec_pool pool;
    struct spec_model model;
    parse_pool_ok(find_doc(docs, "InferencePool", "llama-pd"), &pool);
    assert_string_equal(pool.name, "llama-pd");
    assert_string_equal(pool.ns, "default");
    assert_int_equal(pool.target_port, 8000);
    assert_int_equal(pool.routing.type, ROUTING_DYNAMIC);
    assert_true(pool.routing.has_weights);
    assert_int_equal(pool.routing.w_cache_hit, 3);
    assert_int_equal(pool.routing.w_load, 2);
    assert_int_equal(pool.routing.w_latency, 2);
    assert_true(pool.disagg.enabled);
    assert_int_equal(pool.disagg.threshold, 512);
    assert_string_equal(pool.disagg.connector_type, "nixlv2");
    assert_false(pool.disagg.has_prefill_selector);
    assert_string_equal(pool.health.endpoint, "/health");
    assert_int_equal(pool.health.interval_s, 5);
    assert_int_equal(pool.health.failure_threshold, 3);
    assert_false(pool.autoscaling.enabled);
    assert_int_equal(pool.epp.replicas, 1);

    parse_model_ok(find_doc(docs, "InferenceModel", "llama-1b"), &model);
    assert_string_equal(model.pool_name, "llama-pd");
    assert_string_equal(model.model_name, "meta-llama/Llama-3.2-1B-Instruct");
    assert_int_equal(model.source.kind, SOURCE_HF);
    assert_string_equal(model.source.file_name, "Llama-3.2-1B-Instruct-Q8_0.gguf");
    assert_int_equal(model.format, FORMAT_GGUF);
    assert_int_equal(model.runtime.max_model_len, 8192);
    assert_int_equal(model.runtime.max_num_seqs, 32);
    assert_int_equal(model.runtime.max_num_batched_tokens, 2048);
    assert_int_equal(model.runtime.block_size, 16);
    assert_string_equal(model.runtime.kv_cache_dtype, "auto");
    assert_true(model.runtime.enable_chunked_prefill);
    assert_null(model.runtime.image);
    assert_int_equal(model.criticality, CRITICALITY_CRITICAL);
    assert_true(model.params.temperature.set);
    assert_true(model.params.temperature.value > 0.69 && model.params.temperature.value < 0.71);
    assert_int_equal(model.params.max_tokens, 512);
    assert_false(model.params.top_k_set);
    assert_int_equal(model.deployment.type, DEPLOY_DISAGGREGATED);
    assert_true(model.deployment.prefill.present);
    assert_int_equal(model.deployment.prefill.replicas, 2);
    assert_int_equal(model.deployment.decode.replicas, 3);
    assert_false(model.deployment.unified.present);
    assert_false(model.deployment.max_surge.is_percent);
    assert_int_equal(model.deployment.max_surge.value, 1);
    assert_int_equal(model.deployment.max_unavailable.value, 0);
    assert_non_null(model.resources);

    enum spec_role roles[3];
    assert_int_equal(spec_model_roles(&model, roles), 2);
    assert_int_equal(roles[0], ROLE_PREFILL);
    assert_int_equal(roles[1], ROLE_DECODE);
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), 0);
    /* P/D KV transfer moves one pool per layer: no tensor parallelism in a disaggregated pool */
    model.deployment.tp_size = 2;
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "spec.deployment.tensorParallelism.size", "one KV pool per layer");
    model.deployment.tp_size = 1;
    spec_errors_init(&errs);

    /* The operator's pod labels satisfy the pool selector and keep the roles apart. */
    struct json_object *pl = spec_pod_labels(&pool, &model, ROLE_PREFILL);
    struct json_object *dl = spec_pod_labels(&pool, &model, ROLE_DECODE);
    assert_true(spec_selector_matches(&pool.selector, pl));
    assert_true(spec_selector_matches(&pool.selector, dl));
    assert_string_equal(json_object_get_string(json_get(pl, "app")), "llama-pd");
    assert_string_equal(json_object_get_string(json_object_object_get(pl, LABEL_ROLE)), "prefill");
    assert_string_equal(json_object_get_string(json_object_object_get(dl, LABEL_ROLE)), "decode");
    assert_string_equal(json_object_get_string(json_object_object_get(dl, LABEL_ENGINE_TYPE)),
                        "vllm");
    json_object_put(pl);
    json_object_put(dl);
    spec_model_free(&model);
    spec_pool_free(&pool);
    json_object_put(docs);
}

static void test_example_unified(void **state)
{
    (void)state;
    struct json_object *docs = load_docs(EXAMPLES "unified.yaml");
    struct spec_pool pool;
    struct spec_model model;
    parse_pool_ok(find_doc(docs, "InferencePool", "qwen"), &pool);
    /* Defaults applied without the API server. */
    assert_int_equal(pool.target_port, 8000);
    assert_int_equal(pool.routing.type, ROUTING_DYNAMIC);
    assert_false(pool.routing.has_weights);
    assert_int_equal(pool.routing.w_cache_hit, 3);
    assert_string_equal(pool.routing.scheduler_profile, "default");
    assert_false(pool.disagg.enabled);
    assert_int_equal(pool.disagg.threshold, 512);
    assert_string_equal(pool.health.endpoint, "/health");
    assert_int_equal(pool.health.interval_s, 5);
    assert_int_equal(pool.health.timeout_s, 2);
    assert_int_equal(pool.health.success_threshold, 1);
    assert_int_equal(pool.health.failure_threshold, 3);
    assert_int_equal(pool.epp.replicas, 1);
    assert_null(pool.epp.image);

    parse_model_ok(find_doc(docs, "InferenceModel", "qwen-0-5b"), &model);
    assert_int_equal(model.source.kind, SOURCE_PVC);
    assert_string_equal(model.source.claim, "models");
    assert_string_equal(model.source.sub_path, "qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_string_equal(model.source.file_name, "qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_int_equal(model.format, FORMAT_GGUF); /* inferred from the .gguf name */
    assert_int_equal(model.deployment.type, DEPLOY_UNIFIED);
    assert_int_equal(model.deployment.unified.replicas, 2);
    assert_true(model.deployment.max_surge.is_percent);
    assert_int_equal(model.deployment.max_surge.value, 25);
    assert_int_equal(model.deployment.max_unavailable.value, 25);
    assert_int_equal(model.criticality, CRITICALITY_STANDARD);
    assert_int_equal(model.runtime.block_size, 16);
    assert_int_equal(model.runtime.max_num_batched_tokens, 0);
    assert_int_equal(spec_model_tp_size(&model), 1);
    enum spec_role roles[3];
    assert_int_equal(spec_model_roles(&model, roles), 1);
    assert_int_equal(roles[0], ROLE_BOTH);
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), 0);
    spec_model_free(&model);
    spec_pool_free(&pool);
    json_object_put(docs);
}

static void test_example_two_models(void **state)
{
    (void)state;
    struct json_object *docs = load_docs(EXAMPLES "two-models-weighted.yaml");
    struct spec_pool pool;
    struct spec_model stable, canary;
    parse_pool_ok(find_doc(docs, "InferencePool", "chat"), &pool);
    assert_int_equal(pool.routing.w_cache_hit, 2);
    assert_int_equal(pool.routing.w_load, 1);
    assert_int_equal(pool.routing.w_latency, 1);
    parse_model_ok(find_doc(docs, "InferenceModel", "chat-stable"), &stable);
    parse_model_ok(find_doc(docs, "InferenceModel", "chat-canary"), &canary);
    assert_int_equal(stable.n_targets, 2);
    assert_string_equal(stable.targets[0].name, "chat");
    assert_int_equal(stable.targets[0].weight, 90);
    assert_string_equal(stable.targets[1].name, "chat-canary");
    assert_int_equal(stable.targets[1].weight, 10);
    assert_int_equal(stable.source.kind, SOURCE_FILE);
    assert_string_equal(stable.source.host_path,
                        "/var/lib/tandem/models/qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_int_equal(canary.source.kind, SOURCE_HTTP);
    assert_string_equal(canary.source.file_name, "qwen2.5-0.5b-instruct-q4_0.gguf");
    assert_int_equal(canary.criticality, CRITICALITY_SHEDDABLE);
    assert_int_equal(canary.n_targets, 0);
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &stable, &errs), 0);
    assert_int_equal(spec_model_check_pool(&pool, &canary, &errs), 0);
    spec_model_free(&stable);
    spec_model_free(&canary);
    spec_pool_free(&pool);
    json_object_put(docs);
}

/* Objects exactly as the API server (localkube) returned them, defaults filled in. */
static void test_server_objects(void **state)
{
    (void)state;
    struct json_object *docs = load_docs("data/crs.json");
    int pools = 0, models = 0;
    for (size_t i = 0; i < json_object_array_length(docs); i++) {
        struct json_object *d = json_object_array_get_idx(docs, i);
        const char *kind = json_object_get_string(json_get(d, "kind"));
        if (strcmp(kind, "InferencePool") == 0) {
            struct spec_pool pool;
            parse_pool_ok(d, &pool);
            assert_true(pool.uid[0] != '\0');
            assert_true(pool.generation >= 1);
            spec_pool_free(&pool);
            pools++;
        } else {
            struct spec_model model;
            parse_model_ok(d, &model);
            assert_string_equal(model.pool_group, "tandem.dev");
            assert_string_equal(model.pool_kind, "InferencePool");
            spec_model_free(&model);
            models++;
        }
    }
    assert_int_equal(pools, 4);
    assert_int_equal(models, 6);

    struct spec_pool scaled;
    parse_pool_ok(find_doc(docs, "InferencePool", "scaled"), &scaled);
    assert_true(scaled.autoscaling.enabled);
    assert_int_equal(scaled.autoscaling.min_replicas, 2);
    assert_int_equal(scaled.autoscaling.max_replicas, 8);
    assert_int_equal(scaled.autoscaling.target_queue_depth, 4);
    assert_int_equal(scaled.autoscaling.target_kv_util, 85);
    assert_int_equal(scaled.autoscaling.target_cpu_util, 70);
    assert_string_equal(scaled.routing.cm_name, "my-epp-config");
    assert_string_equal(scaled.routing.cm_key, "config.yaml");
    assert_true(scaled.disagg.has_prefill_selector);
    assert_true(scaled.disagg.has_decode_selector);
    assert_int_equal(scaled.target_port, 8001);
    assert_string_equal(scaled.epp.image, "registry.example.com/tandem-epp:v1");
    struct spec_model sm;
    parse_model_ok(find_doc(docs, "InferenceModel", "scaled-model"), &sm);
    assert_int_equal(sm.source.kind, SOURCE_PVC);
    assert_string_equal(sm.source.claim, "model-store");
    assert_string_equal(sm.source.sub_path, "");
    assert_string_equal(sm.source.file_name, "model-store");
    assert_int_equal(spec_model_tp_size(&sm), 1);
    assert_false(sm.runtime.enable_chunked_prefill);
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&scaled, &sm, &errs), 0);
    struct json_object *pl = spec_pod_labels(&scaled, &sm, ROLE_PREFILL);
    /* derived from the selectors: matchLabels, the first value of In */
    assert_string_equal(json_object_get_string(json_object_object_get(pl, "stage")), "p");
    assert_string_equal(json_object_get_string(json_object_object_get(pl, "tier")), "gpu");
    json_object_put(pl);
    spec_model_free(&sm);
    /* the DaemonSet model as the server defaulted it (deployment.type DaemonSet) */
    parse_model_ok(find_doc(docs, "InferenceModel", "node-model"), &sm);
    assert_int_equal(sm.deployment.type, DEPLOY_DAEMONSET);
    assert_true(sm.deployment.daemon.present);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&scaled, &sm, &errs), 0);
    spec_model_free(&sm);
    spec_pool_free(&scaled);
    json_object_put(docs);
}

/* ---- invalid InferencePools ---- */

#define POOL_HEAD  "{apiVersion: tandem.dev/v1alpha1, kind: InferencePool, metadata: {name: p}, "
#define POOL(spec) POOL_HEAD "spec: {selector: {matchLabels: {app: p}}, " spec "}}"

static void test_pool_invalid(void **state)
{
    (void)state;
    expect_pool_error(POOL_HEAD "spec: {targetPort: 8000}}", "spec.selector",
                      "required field is missing");
    expect_pool_error(POOL_HEAD "spec: {selector: {}}}", "spec.selector", "empty selector");
    expect_pool_error(POOL_HEAD "metadata2: 1}", "spec", "required field is missing");
    expect_pool_error("{kind: InferencePool, spec: {selector: {matchLabels: {a: b}}}}", "metadata",
                      "required field is missing");
    expect_pool_error(POOL("targetPort: 0"), "spec.targetPort", "must be >= 1");
    expect_pool_error(POOL("targetPort: 65536"), "spec.targetPort", "must be <= 65535");
    expect_pool_error(POOL("targetPort: '8000'"), "spec.targetPort",
                      "expected integer, got string");
    expect_pool_error(POOL("targetPort: 8200"), "spec.targetPort", "used inside the pod");
    expect_pool_error(POOL("targetPort: 5600"), "spec.targetPort", "used inside the pod");
    expect_pool_error(POOL("routingPolicy: {type: Random}"), "spec.routingPolicy.type",
                      "unsupported value \"Random\"");
    expect_pool_error(POOL("routingPolicy: {schedulerProfile: 'a b'}"),
                      "spec.routingPolicy.schedulerProfile", "alphanumerics");
    expect_pool_error(POOL("routingPolicy: {loadBalancing: {weights: {cacheHit: 0, load: 0, "
                           "latency: 0}}}"),
                      "spec.routingPolicy.loadBalancing.weights", "at least one weight");
    expect_pool_error(POOL("routingPolicy: {loadBalancing: {weights: {cacheHit: 101}}}"),
                      "spec.routingPolicy.loadBalancing.weights.cacheHit", "must be <= 100");
    expect_pool_error(POOL("routingPolicy: {loadBalancing: {weights: {load: -1}}}"),
                      "spec.routingPolicy.loadBalancing.weights.load", "must be >= 0");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {inline: 'a: b', "
                           "configMapRef: {name: c}}}"),
                      "spec.routingPolicy.endpointPickerConfig", "not both");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {}}"),
                      "spec.routingPolicy.endpointPickerConfig", "set inline or configMapRef");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {configMapRef: {}}}"),
                      "spec.routingPolicy.endpointPickerConfig.configMapRef.name",
                      "required field is missing");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {configMapRef: {name: c, key: "
                           "'a/b'}}}"),
                      "spec.routingPolicy.endpointPickerConfig.configMapRef.key", "ConfigMap key");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {configMapRef: {name: c}}, "
                           "loadBalancing: {weights: {load: 1}}}"),
                      "spec.routingPolicy.loadBalancing", "cannot be combined");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {inline: 7}}"),
                      "spec.routingPolicy.endpointPickerConfig.inline", "object or string");
    expect_pool_error(POOL("routingPolicy: {endpointPickerConfig: {inline: 'plugins: ['}}"),
                      "spec.routingPolicy.endpointPickerConfig.inline", "invalid YAML");
    expect_pool_error(
        POOL("routingPolicy: {endpointPickerConfig: {inline: {apiVersion: llm-d.ai/v1alpha1, "
             "kind: EndpointPickerConfig, plugins: [{type: magic-scorer}], schedulingProfiles: "
             "[{name: default, plugins: [{pluginRef: magic-scorer}]}]}}}"),
        "spec.routingPolicy.endpointPickerConfig.inline.plugins[0].type",
        "unknown plugin type \"magic-scorer\"");
    expect_pool_error(
        POOL("routingPolicy: {schedulerProfile: fast, endpointPickerConfig: {inline: {apiVersion: "
             "llm-d.ai/v1alpha1, kind: EndpointPickerConfig, plugins: [{type: queue-scorer}], "
             "schedulingProfiles: [{name: default, plugins: [{pluginRef: queue-scorer}]}]}}}"),
        "spec.routingPolicy.endpointPickerConfig.inline.schedulingProfiles",
        "no profile named \"fast\"");
    expect_pool_error(POOL("routingPolicy: {type: RoundRobin, loadBalancing: {weights: {load: "
                           "1}}}"),
                      "spec.routingPolicy.type", "remove loadBalancing");
    expect_pool_error(POOL("routingPolicy: {type: RoundRobin}, disaggregation: {enabled: true}"),
                      "spec.routingPolicy.type", "cannot be used with disaggregation");
    expect_pool_error(POOL("routingPolicy: {loadBalancing: {weights: {cacheHit: 0}}}, "
                           "disaggregation: {enabled: true}"),
                      "spec.routingPolicy.loadBalancing.weights.cacheHit",
                      "disaggregation.threshold > 0");
    expect_pool_error(POOL("routingPolicy: {schedulerProfile: prefill}, disaggregation: {enabled: "
                           "true}"),
                      "spec.routingPolicy.schedulerProfile", "must not be \"prefill\"");
    expect_pool_error(POOL("disaggregation: {enabled: 'yes'}"), "spec.disaggregation.enabled",
                      "expected boolean, got string");
    expect_pool_error(POOL("disaggregation: {threshold: -1}"), "spec.disaggregation.threshold",
                      "must be >= 0");
    expect_pool_error(POOL("disaggregation: {threshold: 1.5}"), "spec.disaggregation.threshold",
                      "expected integer, got number");
    expect_pool_error(POOL("disaggregation: {connector: {type: lmcache}}"),
                      "spec.disaggregation.connector.type", "supported values: \"nixlv2\"");
    expect_pool_error(POOL("disaggregation: {connector: {config: [1]}}"),
                      "spec.disaggregation.connector.config", "expected object, got array");
    expect_pool_error(POOL("disaggregation: {prefillSelector: {}}"),
                      "spec.disaggregation.prefillSelector", "empty selector");
    expect_pool_error(POOL("healthCheck: {endpoint: health}"), "spec.healthCheck.endpoint",
                      "absolute HTTP path");
    expect_pool_error(POOL("healthCheck: {endpoint: '/a b'}"), "spec.healthCheck.endpoint",
                      "without spaces");
    expect_pool_error(POOL("healthCheck: {intervalSeconds: 0}"), "spec.healthCheck.intervalSeconds",
                      "must be >= 1");
    expect_pool_error(POOL("healthCheck: {failureThreshold: 101}"),
                      "spec.healthCheck.failureThreshold", "must be <= 100");
    expect_pool_error(POOL("autoscaling: {minReplicas: 1, targetQueueDepth: 3}"),
                      "spec.autoscaling.maxReplicas", "required field is missing");
    expect_pool_error(POOL("autoscaling: {minReplicas: 5, maxReplicas: 2, targetQueueDepth: 3}"),
                      "spec.autoscaling.maxReplicas", "must be >= minReplicas (5)");
    expect_pool_error(POOL("autoscaling: {maxReplicas: 2}"), "spec.autoscaling",
                      "set at least one of targetQueueDepth");
    expect_pool_error(POOL("autoscaling: {maxReplicas: 2, targetKVCacheUtilization: 101}"),
                      "spec.autoscaling.targetKVCacheUtilization", "must be <= 100");
    expect_pool_error(POOL("autoscaling: {maxReplicas: 2, minReplicas: 0, targetQueueDepth: 1}"),
                      "spec.autoscaling.minReplicas", "must be >= 1");
    expect_pool_error(POOL("epp: {replicas: -1}"), "spec.epp.replicas", "must be >= 0");
    expect_pool_error(POOL("epp: {image: ''}"), "spec.epp.image", "non-empty image");
    expect_pool_error(POOL("epp: {resources: {requests: {cpu: lots}}}"),
                      "spec.epp.resources.requests.cpu", "invalid quantity \"lots\"");
    expect_pool_error(POOL("epp: {resources: {requests: {cpu: -1}}}"),
                      "spec.epp.resources.requests.cpu", "must be >= 0");
    expect_pool_error(POOL("epp: {resources: {limits: {memory: 1Gi}, requests: {memory: 2Gi}}}"),
                      "spec.epp.resources.requests.memory",
                      "less than or equal to the memory limit");
    expect_pool_error(POOL("epp: {resources: {limits: {'bad name': 1}}}"),
                      "spec.epp.resources.limits.bad name", "invalid resource name");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchLabels: {'bad key!': x}}}}",
                      "spec.selector.matchLabels.bad key!", "invalid label key");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchLabels: {app: 'no spaces'}}}}",
                      "spec.selector.matchLabels.app", "invalid label value");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchLabels: {app: 3}}}}",
                      "spec.selector.matchLabels.app", "expected string, got integer");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchExpressions: [{key: app, operator: In}]}}}",
                      "spec.selector.matchExpressions[0].values", "must be non-empty");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchExpressions: [{key: app, operator: "
                                "Exists, values: [a]}]}}}",
                      "spec.selector.matchExpressions[0].values", "must be empty");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchExpressions: [{key: app, operator: "
                                "Near, values: [a]}]}}}",
                      "spec.selector.matchExpressions[0].operator", "unsupported value \"Near\"");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchExpressions: [{operator: Exists}]}}}",
                      "spec.selector.matchExpressions[0].key", "required field is missing");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchExpressions: [7]}}}",
                      "spec.selector.matchExpressions[0]", "expected object, got integer");
    expect_pool_error(POOL_HEAD "spec: {selector: {matchLabels: {tandem.dev/pool: p}}}}",
                      "spec.selector", "also selects the pool's EPP pods");
    expect_pool_error("{metadata: {name: 9pool}, spec: {selector: {matchLabels: {a: b}}}}",
                      "metadata.name", "DNS-1035 label");
    expect_pool_error("{metadata: {name: "
                      "a234567890123456789012345678901234567890123456789012345678901}, spec: "
                      "{selector: {matchLabels: {a: b}}}}",
                      "metadata.name", "at most 59");
    expect_pool_error("{metadata: {name: p, namespace: 'Bad_NS'}, spec: {selector: {matchLabels: "
                      "{a: b}}}}",
                      "metadata.namespace", "DNS-1123 label");
    expect_pool_error(POOL_HEAD "spec: [1]}", "spec", "expected object, got array");

    /* Not an object at all. */
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(NULL, &pool, &errs), -EINVAL);
    assert_true(errs.n == 1 && strstr(errs.e[0].message, "expected an InferencePool object"));
    spec_pool_free(&pool);
}

static void test_pool_valid_variants(void **state)
{
    (void)state;
    static const char *const ok[] = {
        POOL("routingPolicy: {type: RoundRobin}"),
        POOL("routingPolicy: {endpointPickerConfig: {configMapRef: {name: cfg, key: epp.yaml}}}"),
        POOL("routingPolicy: {endpointPickerConfig: {inline: \"apiVersion: "
             "inference.networking.x-k8s.io/v1alpha1\\nkind: EndpointPickerConfig\\nplugins:\\n- "
             "type: queue-scorer\\nschedulingProfiles:\\n- name: default\\n  plugins:\\n  - "
             "pluginRef: queue-scorer\\n\"}}"),
        POOL("disaggregation: {enabled: true, threshold: 0, prefillSelector: {matchLabels: {pool: "
             "prefill}}}"),
        POOL("autoscaling: {maxReplicas: 3, targetCPUUtilization: 50}"),
        POOL_HEAD "spec: {selector: {matchExpressions: [{key: app, operator: Exists}]}}}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        struct json_object *o = yaml_obj(ok[i]);
        struct spec_pool pool;
        parse_pool_ok(o, &pool);
        spec_pool_free(&pool);
        json_object_put(o);
    }
    struct json_object *o = yaml_obj(ok[1]);
    struct spec_pool pool;
    parse_pool_ok(o, &pool);
    assert_string_equal(pool.routing.cm_key, "epp.yaml");
    spec_pool_free(&pool);
    json_object_put(o);
}

/* ---- invalid InferenceModels ---- */

#define MODEL_HEAD "{kind: InferenceModel, metadata: {name: m, namespace: ns}, "
#define MODEL(spec)                                                                                \
    MODEL_HEAD "spec: {poolRef: {name: p}, modelName: m, modelSource: {storageUri: "               \
               "'file:///models/m.gguf'}, " spec "}}"
#define MODEL_URI(uri)                                                                             \
    MODEL_HEAD "spec: {poolRef: {name: p}, modelName: m, modelSource: {storageUri: '" uri "'}}}"

static void test_model_invalid(void **state)
{
    (void)state;
    expect_model_error(MODEL("deployment: {type: Disaggregated, prefillWorkers: {replicas: 1}, "
                             "decodeWorkers: {replicas: -1}}"),
                       "spec.deployment.decodeWorkers.replicas", "must be >= 0");
    expect_model_error(MODEL("deployment: {type: Disaggregated, decodeWorkers: {}}"),
                       "spec.deployment.prefillWorkers", "required when type is Disaggregated");
    expect_model_error(MODEL("deployment: {type: Disaggregated, prefillWorkers: {}}"),
                       "spec.deployment.decodeWorkers", "required when type is Disaggregated");
    expect_model_error(MODEL("deployment: {type: Disaggregated, prefillWorkers: {}, "
                             "decodeWorkers: {}, unifiedWorkers: {}}"),
                       "spec.deployment.unifiedWorkers", "only valid when type is Unified");
    expect_model_error(MODEL("deployment: {prefillWorkers: {replicas: 1}}"),
                       "spec.deployment.prefillWorkers", "only valid when type is Disaggregated");
    expect_model_error(MODEL("deployment: {type: Split}"), "spec.deployment.type",
                       "supported values: \"Unified\", \"Disaggregated\", \"MultiNode\"");
    expect_model_error(MODEL("deployment: x"), "spec.deployment", "expected object, got string");
    expect_model_error(MODEL("deployment: {tensorParallelism: {nodesPerReplica: 2}}"),
                       "spec.deployment.tensorParallelism.nodesPerReplica", "needs type MultiNode");
    expect_model_error(MODEL("deployment: {tensorParallelism: {size: 0}}"),
                       "spec.deployment.tensorParallelism.size", "must be >= 1");
    expect_model_error(MODEL("runtime: {config: {tensorParallelSize: 4}}, deployment: "
                             "{tensorParallelism: {size: 2}}"),
                       "spec.runtime.config.tensorParallelSize", "disagrees");
    expect_model_error(MODEL("runtime: {config: {maxModelLen: 8192, maxNumBatchedTokens: 2048, "
                             "enableChunkedPrefill: false}}"),
                       "spec.runtime.config.maxNumBatchedTokens", "must be >= maxModelLen (8192)");
    expect_model_error(MODEL("runtime: {config: {maxNumSeqs: 256, maxNumBatchedTokens: 128}}"),
                       "spec.runtime.config.maxNumBatchedTokens", "must be >= maxNumSeqs (256)");
    expect_model_error(MODEL("runtime: {config: {blockSize: 12}}"), "spec.runtime.config.blockSize",
                       "one of 8, 16, 32, 64, 128");
    expect_model_error(MODEL("runtime: {config: {kvCacheDtype: int8}}"),
                       "spec.runtime.config.kvCacheDtype", "unsupported value \"int8\"");
    expect_model_error(MODEL("runtime: {config: {gpuMemoryUtilization: 0}}"),
                       "spec.runtime.config.gpuMemoryUtilization", "must be > 0");
    expect_model_error(MODEL("runtime: {config: {gpuMemoryUtilization: 1.5}}"),
                       "spec.runtime.config.gpuMemoryUtilization", "must be <= 1");
    expect_model_error(MODEL("runtime: {config: {maxModelLen: 0}}"),
                       "spec.runtime.config.maxModelLen", "must be >= 1");
    expect_model_error(MODEL("runtime: {config: {enableChunkedPrefill: 1}}"),
                       "spec.runtime.config.enableChunkedPrefill", "expected boolean");
    expect_model_error(MODEL("runtime: {image: 'a b'}"), "spec.runtime.image", "without spaces");
    expect_model_error(MODEL_URI("s3://bucket/m"), "spec.modelSource.storageUri",
                       "unsupported scheme");
    expect_model_error(MODEL_URI("file://models/m.gguf"), "spec.modelSource.storageUri",
                       "absolute path");
    expect_model_error(MODEL_URI("file:///models/../etc/passwd"), "spec.modelSource.storageUri",
                       "'..'");
    expect_model_error(MODEL_URI("file:///"), "spec.modelSource.storageUri", "last path segment");
    expect_model_error(MODEL_URI("pvc://Bad_Claim/m"), "spec.modelSource.storageUri",
                       "not a valid claim name");
    expect_model_error(MODEL_URI("pvc://claim/../m"), "spec.modelSource.storageUri", "'..'");
    expect_model_error(MODEL_URI("pvc://claim//m"), "spec.modelSource.storageUri", "'//'");
    expect_model_error(MODEL_URI("hf://org"), "spec.modelSource.storageUri", "hf://<org>/<repo>");
    expect_model_error(MODEL_URI("hf://org/repo?rev=1"), "spec.modelSource.storageUri",
                       "hf://<org>/<repo>");
    expect_model_error(MODEL_URI("https://host.example"), "spec.modelSource.storageUri",
                       "a host and a path");
    expect_model_error(MODEL_URI("https://host.example/dir/"), "spec.modelSource.storageUri",
                       "a host and a path");
    expect_model_error(MODEL_URI("https://host/m m.gguf"), "spec.modelSource.storageUri", "spaces");
    expect_model_error(MODEL_URI("http://host/%2e%2e"), "spec.modelSource.storageUri",
                       "last path segment");
    expect_model_error(MODEL("modelFormat: safetensors"), "spec.modelFormat",
                       "does not match the .gguf file");
    expect_model_error(MODEL("modelFormat: onnx"), "spec.modelFormat", "unsupported value");
    expect_model_error(MODEL("targetModels: [{name: a}, {name: a}]"), "spec.targetModels[1].name",
                       "duplicate target model \"a\"");
    expect_model_error(MODEL("targetModels: [{name: a, weight: 0}, {name: b, weight: 0}]"),
                       "spec.targetModels", "must not all be 0");
    expect_model_error(MODEL("targetModels: [{name: a, weight: 1000001}]"),
                       "spec.targetModels[0].weight", "must be <= 1000000");
    expect_model_error(MODEL("targetModels: [{weight: 3}]"), "spec.targetModels[0].name",
                       "required field is missing");
    expect_model_error(MODEL("targetModels: [{name: a}, {name: b}, {name: c}, {name: d}, {name: "
                             "e}, {name: f}, {name: g}, {name: h}, {name: i}, {name: j}, {name: "
                             "k}]"),
                       "spec.targetModels", "at most 10 items");
    expect_model_error(MODEL("targetModels: {name: a}"), "spec.targetModels",
                       "expected array, got object");
    expect_model_error(MODEL("criticality: Low"), "spec.criticality",
                       "\"Critical\", \"Standard\", \"Sheddable\"");
    expect_model_error(MODEL("inferenceParams: {temperature: 3}"),
                       "spec.inferenceParams.temperature", "must be <= 2");
    expect_model_error(MODEL("inferenceParams: {topP: 0}"), "spec.inferenceParams.topP",
                       "must be > 0");
    expect_model_error(MODEL("inferenceParams: {topK: 0}"), "spec.inferenceParams.topK",
                       "-1 (disabled) or >= 1");
    expect_model_error(MODEL("inferenceParams: {maxTokens: 0}"), "spec.inferenceParams.maxTokens",
                       "must be >= 1");
    expect_model_error(MODEL("inferenceParams: {temperature: hot}"),
                       "spec.inferenceParams.temperature", "expected number, got string");
    expect_model_error(MODEL("deployment: {rollout: {maxSurge: '150%'}}"),
                       "spec.deployment.rollout.maxSurge", "percentage from 0% to 100%");
    expect_model_error(MODEL("deployment: {rollout: {maxSurge: 'x'}}"),
                       "spec.deployment.rollout.maxSurge", "percentage");
    expect_model_error(MODEL("deployment: {rollout: {maxSurge: -1}}"),
                       "spec.deployment.rollout.maxSurge", "between 0 and 10000");
    expect_model_error(MODEL("deployment: {rollout: {maxSurge: 0, maxUnavailable: '0%'}}"),
                       "spec.deployment.rollout.maxUnavailable", "may not be 0 when maxSurge is 0");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {tolerations: [{key: k, operator: "
                             "Exists, value: v}]}}"),
                       "spec.deployment.unifiedWorkers.tolerations[0].value",
                       "must be empty when operator is Exists");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {tolerations: [{key: k, value: v, "
                             "effect: NoSchedule, tolerationSeconds: 5}]}}"),
                       "spec.deployment.unifiedWorkers.tolerations[0].effect", "must be NoExecute");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {tolerations: [{value: v}]}}"),
                       "spec.deployment.unifiedWorkers.tolerations[0].operator",
                       "must be Exists when key is empty");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {tolerations: [{key: k, effect: "
                             "Sometimes}]}}"),
                       "spec.deployment.unifiedWorkers.tolerations[0].effect", "unsupported value");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {nodeSelector: {gpu: 1}}}"),
                       "spec.deployment.unifiedWorkers.nodeSelector.gpu", "expected string");
    expect_model_error(MODEL("deployment: {unifiedWorkers: {resources: {limits: {cpu: 2x}}}}"),
                       "spec.deployment.unifiedWorkers.resources.limits.cpu", "invalid quantity");
    expect_model_error(MODEL("resources: {requests: {memory: 1.5}}"),
                       "spec.resources.requests.memory", "expected quantity");
    expect_model_error(MODEL_HEAD "spec: {modelName: m, modelSource: {storageUri: "
                                  "'file:///m.gguf'}}}",
                       "spec.poolRef", "required field is missing");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p, kind: Service}, modelName: m, "
                                  "modelSource: {storageUri: 'file:///m.gguf'}}}",
                       "spec.poolRef.kind", "supported values: \"InferencePool\"");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p, group: other.io}, modelName: m, "
                                  "modelSource: {storageUri: 'file:///m.gguf'}}}",
                       "spec.poolRef.group", "supported values: \"tandem.dev\"");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: 'Bad Pool'}, modelName: m, "
                                  "modelSource: {storageUri: 'file:///m.gguf'}}}",
                       "spec.poolRef.name", "DNS subdomain");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p}, modelSource: {storageUri: "
                                  "'file:///m.gguf'}}}",
                       "spec.modelName", "required field is missing");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p}, modelName: \"a\\nb\", modelSource: "
                                  "{storageUri: 'file:///m.gguf'}}}",
                       "spec.modelName", "control characters");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p}, modelName: ''}}", "spec.modelName",
                       "1-253 characters");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p}, modelName: m}}", "spec.modelSource",
                       "required field is missing");
    expect_model_error(MODEL_HEAD "spec: {poolRef: {name: p}, modelName: m, modelSource: {}}}",
                       "spec.modelSource.storageUri", "required field is missing");
    expect_model_error("{metadata: {name: "
                       "a234567890123456789012345678901234567890123456789012345678901234}, spec: "
                       "{poolRef: {name: p}, modelName: m, modelSource: {storageUri: "
                       "'file:///m.gguf'}}}",
                       "metadata.name", "at most 63");
    expect_model_error("{metadata: {name: m}}", "spec", "required field is missing");

    /* MultiNode: a distinct code while the rest is valid; invalid wins otherwise. */
    expect_model_error_rc(MODEL("deployment: {type: MultiNode, tensorParallelism: "
                                "{nodesPerReplica: 2}}"),
                          -ENOTSUP, "spec.deployment.type", "not supported yet");
    expect_model_error_rc(MODEL("deployment: {type: MultiNode}, criticality: Low"), -EINVAL,
                          "spec.deployment.type", "not supported yet");
    expect_model_error_rc(MODEL("deployment: {type: MultiNode}, criticality: Low"), -EINVAL,
                          "spec.criticality", "unsupported value");
}

static void test_model_valid_variants(void **state)
{
    (void)state;
    struct json_object *o;
    struct spec_model m;

    /* Chunked prefill allows a budget below the context length. */
    o = yaml_obj(MODEL("runtime: {config: {maxModelLen: 8192, maxNumBatchedTokens: 2048}}"));
    parse_model_ok(o, &m);
    assert_int_equal(m.runtime.max_num_batched_tokens, 2048);
    spec_model_free(&m);
    json_object_put(o);

    /* Integral doubles are integers (JSON numbers from other encoders). */
    o = yaml_obj(
        MODEL("runtime: {config: {maxModelLen: 4096.0, tensorParallelSize: 2}}, "
              "deployment: {tensorParallelism: {size: 2}, unifiedWorkers: {replicas: 3}}"));
    parse_model_ok(o, &m);
    assert_int_equal(m.runtime.max_model_len, 4096);
    assert_int_equal(spec_model_tp_size(&m), 2);
    assert_int_equal(m.deployment.unified.replicas, 3);
    spec_model_free(&m);
    json_object_put(o);

    /* one GPU per tensor-parallel rank: enough is fine, fewer is named, none (CPU) is fine */
    o = yaml_obj(MODEL("deployment: {tensorParallelism: {size: 2}}, "
                       "resources: {limits: {nvidia.com/gpu: \"2\"}}"));
    parse_model_ok(o, &m);
    spec_model_free(&m);
    json_object_put(o);
    o = yaml_obj(MODEL("deployment: {tensorParallelism: {size: 2}}"));
    parse_model_ok(o, &m);
    spec_model_free(&m);
    json_object_put(o);
    expect_model_error(MODEL("deployment: {tensorParallelism: {size: 4}, unifiedWorkers: "
                             "{resources: {limits: {nvidia.com/gpu: 2}}}}"),
                       "spec.deployment.unifiedWorkers.resources",
                       "nvidia.com/gpu 2 is fewer than the tensor parallel size 4");

    /* Sources. */
    o = yaml_obj(MODEL_URI("hf://Qwen/Qwen2.5-0.5B-Instruct"));
    parse_model_ok(o, &m);
    assert_int_equal(m.source.kind, SOURCE_HF);
    assert_string_equal(m.source.file_name, "Qwen2.5-0.5B-Instruct");
    assert_int_equal(m.format, FORMAT_SAFETENSORS);
    spec_model_free(&m);
    json_object_put(o);

    o = yaml_obj(MODEL_URI("https://example.com/a/b/model.GGUF?download=1"));
    parse_model_ok(o, &m);
    assert_int_equal(m.source.kind, SOURCE_HTTP);
    assert_string_equal(m.source.file_name, "model.GGUF");
    assert_int_equal(m.format, FORMAT_GGUF);
    spec_model_free(&m);
    json_object_put(o);

    o = yaml_obj(MODEL_URI("file:///srv/models/llama/"));
    parse_model_ok(o, &m);
    assert_string_equal(m.source.host_path, "/srv/models/llama");
    assert_string_equal(m.source.file_name, "llama");
    spec_model_free(&m);
    json_object_put(o);

    o = yaml_obj(MODEL_URI("pvc://store/org/model-dir/"));
    parse_model_ok(o, &m);
    assert_string_equal(m.source.claim, "store");
    assert_string_equal(m.source.sub_path, "org/model-dir");
    assert_string_equal(m.source.file_name, "model-dir");
    spec_model_free(&m);
    json_object_put(o);

    /* inferenceParams. */
    o = yaml_obj(MODEL("inferenceParams: {topK: -1, topP: 1, minP: 0.05, repetitionPenalty: 1.1}"));
    parse_model_ok(o, &m);
    assert_true(m.params.top_k_set);
    assert_int_equal(m.params.top_k, -1);
    assert_true(m.params.top_p.set && m.params.min_p.set && m.params.repetition_penalty.set);
    assert_false(m.params.temperature.set);
    spec_model_free(&m);
    json_object_put(o);
}

/* deployment.type DaemonSet: one agent (role both) per picked node, placed by
 * deployment.daemonSet; replicas and the Deployment forms' worker blocks are refused. */
static void test_model_daemonset(void **state)
{
    (void)state;
    struct json_object *o;
    struct spec_model m;
    enum spec_role roles[3];

    o = yaml_obj(MODEL("deployment: {type: DaemonSet, daemonSet: {nodeSelector: "
                       "{tandem.dev/node-agent: 'true'}, tolerations: [{key: nvidia.com/gpu, "
                       "operator: Exists, effect: NoSchedule}], resources: {limits: {memory: "
                       "8Gi}}}}"));
    parse_model_ok(o, &m);
    assert_int_equal(m.deployment.type, DEPLOY_DAEMONSET);
    assert_string_equal(spec_deploy_type_name(m.deployment.type), "DaemonSet");
    assert_int_equal(spec_model_roles(&m, roles), 1);
    assert_int_equal(roles[0], ROLE_BOTH);
    const struct spec_workers *w = spec_model_workers(&m, ROLE_BOTH);
    assert_ptr_equal(w, &m.deployment.daemon);
    assert_true(w->present);
    assert_string_equal(
        json_object_get_string(json_object_object_get(w->node_selector, "tandem.dev/node-agent")),
        "true");
    assert_int_equal(json_object_array_length(w->tolerations), 1);
    assert_non_null(w->resources);
    spec_model_free(&m);
    json_object_put(o);

    /* No daemonSet block: every node (an empty nodeSelector). */
    o = yaml_obj(MODEL("deployment: {type: DaemonSet}"));
    parse_model_ok(o, &m);
    assert_false(m.deployment.daemon.present);
    assert_null(spec_model_workers(&m, ROLE_BOTH)->node_selector);
    spec_model_free(&m);
    json_object_put(o);

    /* A Unified model still uses unifiedWorkers. */
    o = yaml_obj(MODEL("deployment: {unifiedWorkers: {replicas: 2}}"));
    parse_model_ok(o, &m);
    assert_ptr_equal(spec_model_workers(&m, ROLE_BOTH), &m.deployment.unified);
    spec_model_free(&m);
    json_object_put(o);

    expect_model_error(MODEL("deployment: {type: DaemonSet, daemonSet: {replicas: 2}}"),
                       "spec.deployment.daemonSet.replicas",
                       "not allowed: a DaemonSet runs one pod on each node");
    expect_model_error(MODEL("deployment: {type: DaemonSet, unifiedWorkers: {replicas: 2}}"),
                       "spec.deployment.unifiedWorkers", "only valid when type is Unified");
    expect_model_error(MODEL("deployment: {type: DaemonSet, prefillWorkers: {}}"),
                       "spec.deployment.prefillWorkers", "only valid when type is Disaggregated");
    expect_model_error(MODEL("deployment: {type: DaemonSet, decodeWorkers: {}}"),
                       "spec.deployment.decodeWorkers", "only valid when type is Disaggregated");
    expect_model_error(MODEL("deployment: {daemonSet: {}}"), "spec.deployment.daemonSet",
                       "only valid when type is DaemonSet");
    expect_model_error(MODEL("deployment: {type: Disaggregated, prefillWorkers: {}, "
                             "decodeWorkers: {}, daemonSet: {}}"),
                       "spec.deployment.daemonSet", "only valid when type is DaemonSet");
    expect_model_error(MODEL("deployment: {type: DaemonSet, daemonSet: {nodeSelector: {a: 1}}}"),
                       "spec.deployment.daemonSet.nodeSelector.a", "expected string");
    expect_model_error(MODEL("deployment: {type: DaemonSet, daemonSet: {nodeSelector: x}}"),
                       "spec.deployment.daemonSet.nodeSelector", "expected object");
    expect_model_error(MODEL("deployment: {type: DaemonSet, daemonSet: {tolerations: [{operator: "
                             "Maybe}]}}"),
                       "spec.deployment.daemonSet.tolerations[0].operator", "unsupported value");
    expect_model_error(MODEL("deployment: {type: DaemonSet, tensorParallelism: "
                             "{nodesPerReplica: 2}}"),
                       "spec.deployment.tensorParallelism.nodesPerReplica", "needs type MultiNode");

    /* In a disaggregated pool its pods are decode-side ("both"), as a Unified model's. */
    struct json_object *po = yaml_obj(POOL("disaggregation: {enabled: true}"));
    struct spec_pool pool;
    struct spec_errors errs;
    parse_pool_ok(po, &pool);
    o = yaml_obj("{metadata: {name: m}, spec: {poolRef: {name: p}, modelName: m, modelSource: "
                 "{storageUri: 'file:///m.gguf'}, deployment: {type: DaemonSet}}}");
    parse_model_ok(o, &m);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &m, &errs), 0);
    struct json_object *labels = spec_pod_labels(&pool, &m, ROLE_BOTH);
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_ROLE)), "both");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, "app")), "p");
    json_object_put(labels);
    spec_model_free(&m);
    json_object_put(o);
    spec_pool_free(&pool);
    json_object_put(po);
}

static void test_check_pool(void **state)
{
    (void)state;
    struct json_object *po, *mo;
    struct spec_pool pool;
    struct spec_model model;
    struct spec_errors errs;

    /* A Disaggregated model in a pool without disaggregation. */
    po = yaml_obj(POOL(""));
    mo = yaml_obj(MODEL("deployment: {type: Disaggregated, prefillWorkers: {}, decodeWorkers: "
                        "{}}"));
    parse_pool_ok(po, &pool);
    parse_model_ok(mo, &model);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "spec.poolRef.name", "namespace default, not ns");
    spec_model_free(&model);
    json_object_put(mo);
    mo = yaml_obj("{metadata: {name: m}, spec: {poolRef: {name: p}, modelName: m, modelSource: "
                  "{storageUri: 'file:///m.gguf'}, deployment: {type: Disaggregated, "
                  "prefillWorkers: {}, decodeWorkers: {}}}}");
    parse_model_ok(mo, &model);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "spec.deployment.type", "disaggregation.enabled: true on InferencePool p");
    spec_pool_free(&pool);
    json_object_put(po);

    /* A pool selector the operator's pods cannot satisfy. */
    po = yaml_obj(POOL_HEAD "spec: {selector: {matchLabels: {app: p}, matchExpressions: [{key: "
                            "llm-d.ai/role, operator: NotIn, values: [prefill]}]}, "
                            "disaggregation: {enabled: true}}}");
    parse_pool_ok(po, &pool);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "InferencePool p spec.selector", "the prefill pods of this model");
    spec_pool_free(&pool);
    json_object_put(po);

    /* A custom prefill selector asking for another role value. */
    po = yaml_obj(POOL("disaggregation: {enabled: true, prefillSelector: {matchLabels: "
                       "{llm-d.ai/role: p}}}"));
    parse_pool_ok(po, &pool);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "InferencePool p spec.disaggregation.prefillSelector",
                 "does not select this model's prefill pods");
    spec_pool_free(&pool);
    json_object_put(po);

    /* A decode selector that also picks the prefill pods. */
    po = yaml_obj(POOL("disaggregation: {enabled: true, decodeSelector: {matchLabels: {app: p}}}"));
    parse_pool_ok(po, &pool);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), -EINVAL);
    assert_error(&errs, "InferencePool p spec.disaggregation.decodeSelector",
                 "also selects this model's prefill pods");
    spec_pool_free(&pool);
    json_object_put(po);

    /* Exists / In expressions are satisfied by derived labels. */
    po = yaml_obj(POOL_HEAD "spec: {selector: {matchExpressions: [{key: team, operator: Exists}, "
                            "{key: zone, operator: In, values: [a, b]}, {key: legacy, operator: "
                            "DoesNotExist}]}, disaggregation: {enabled: true}}}");
    parse_pool_ok(po, &pool);
    spec_errors_init(&errs);
    assert_int_equal(spec_model_check_pool(&pool, &model, &errs), 0);
    struct json_object *labels = spec_pod_labels(&pool, &model, ROLE_DECODE);
    assert_string_equal(json_object_get_string(json_object_object_get(labels, "team")), "");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, "zone")), "a");
    assert_null(json_object_object_get(labels, "legacy"));
    json_object_put(labels);
    spec_pool_free(&pool);
    json_object_put(po);
    spec_model_free(&model);
    json_object_put(mo);
}

static void test_selector_matches(void **state)
{
    (void)state;
    struct json_object *sel_o =
        yaml_obj("{matchLabels: {a: '1'}, matchExpressions: [{key: b, "
                 "operator: In, values: [x, yy]}, {key: c, operator: NotIn, "
                 "values: [z]}, {key: d, operator: Exists}, {key: e, "
                 "operator: DoesNotExist}]}");
    struct spec_selector sel = {json_object_object_get(sel_o, "matchLabels"),
                                json_object_object_get(sel_o, "matchExpressions")};
    struct {
        const char *labels;
        int want;
    } cases[] = {
        {"{a: '1', b: x, d: ''}", 1},        {"{a: '1', b: yy, c: w, d: v}", 1},
        {"{a: '2', b: x, d: ''}", 0},        {"{b: x, d: ''}", 0},
        {"{a: '1', b: q, d: ''}", 0},        {"{a: '1', d: ''}", 0},
        {"{a: '1', b: x, c: z, d: ''}", 0},  {"{a: '1', b: x}", 0},
        {"{a: '1', b: x, d: '', e: ''}", 0},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_object *l = yaml_obj(cases[i].labels);
        if (spec_selector_matches(&sel, l) != cases[i].want) {
            fail_msg("selector on %s: want %d", cases[i].labels, cases[i].want);
        }
        json_object_put(l);
    }
    struct spec_selector empty = {NULL, NULL};
    assert_true(spec_selector_matches(&empty, NULL));
    struct json_object *derived = json_object_new_object();
    assert_int_equal(spec_selector_synthesize(&sel, derived), 0);
    assert_true(spec_selector_matches(&sel, derived));
    json_object_put(derived);
    json_object_put(sel_o);
}

static void test_errors_format(void **state)
{
    (void)state;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_errors_format(&errs, NULL, 0), 0);
    spec_errors_add(&errs, "spec.a", "must be >= %d", 0);
    spec_errors_add(&errs, "spec.b", "bad");
    char text[256];
    size_t need = spec_errors_format(&errs, text, sizeof(text));
    assert_string_equal(text, "spec.a: must be >= 0; spec.b: bad");
    assert_int_equal(need, strlen(text));
    char small[10];
    assert_int_equal(spec_errors_format(&errs, small, sizeof(small)), need);
    assert_string_equal(small, "spec.a: m");
    for (int i = 0; i < SPEC_MAX_ERRORS + 3; i++) {
        spec_errors_add(&errs, "f", "x");
    }
    assert_int_equal(errs.n, SPEC_MAX_ERRORS);
    assert_int_equal(errs.dropped, 5);
    char big[4096];
    spec_errors_format(&errs, big, sizeof(big));
    assert_non_null(strstr(big, "(and 5 more)"));
    assert_true(spec_errors_has(&errs, "spec.b"));
    assert_false(spec_errors_has(&errs, "spec.c"));

    /* Every problem is reported at once. */
    struct json_object *o = yaml_obj(MODEL("criticality: Low, runtime: {config: {blockSize: 3}}, "
                                           "deployment: {rollout: {maxSurge: '200%'}}"));
    struct spec_model m;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_parse(o, &m, &errs), -EINVAL);
    assert_int_equal(errs.n, 3);
    spec_model_free(&m);
    json_object_put(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_disaggregated), cmocka_unit_test(test_example_unified),
        cmocka_unit_test(test_example_two_models),    cmocka_unit_test(test_server_objects),
        cmocka_unit_test(test_pool_invalid),          cmocka_unit_test(test_pool_valid_variants),
        cmocka_unit_test(test_model_invalid),         cmocka_unit_test(test_model_valid_variants),
        cmocka_unit_test(test_model_daemonset),       cmocka_unit_test(test_check_pool),
        cmocka_unit_test(test_selector_matches),      cmocka_unit_test(test_errors_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
