/*
 * Unit tests for operator/controller/desired: the objects built for pools and models (names,
 * labels, owner references, agent args, probes, volumes per storageUri scheme, /dev/shm, the
 * DaemonSet form, the EPP and its RBAC, HPAs), and desired_needs_update against objects exactly as
 * an API server returned them (data/live.json, made by data/regen.sh from data/crs.json: see
 * data/README.md).
 *
 *   operator_test_desired --print-desired data/crs.json   prints the desired objects (a List)
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

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/yaml.h"
#include "operator/controller/desired.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/spec.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) {
        abort();
    }
    data[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* The items of a List file (or every document of a YAML stream). */
static struct json_object *load_items(const char *path)
{
    size_t len;
    char *text = slurp(path, &len);
    char err[256];
    struct json_object *docs = NULL;
    if (yaml_parse_all(text, len, &docs, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        abort();
    }
    free(text);
    struct json_object *items = json_get(json_object_array_get_idx(docs, 0), "items");
    if (json_object_array_length(docs) == 1 && items) {
        json_object_get(items);
        json_object_put(docs);
        return items;
    }
    return docs;
}

static struct json_object *find(struct json_object *items, const char *kind, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(items); i++) {
        struct json_object *d = json_object_array_get_idx(items, i);
        const char *k = json_object_get_string(json_get(d, "kind"));
        const char *n = json_object_get_string(json_get(d, "metadata.name"));
        if (k && n && strcmp(k, kind) == 0 && strcmp(n, name) == 0) {
            return d;
        }
    }
    return NULL;
}

static const char *str(struct json_object *o, const char *path)
{
    struct json_object *v = json_get(o, path);
    if (!v || !json_object_is_type(v, json_type_string)) {
        fail_msg("%s: not a string", path);
    }
    return json_object_get_string(v);
}

static int64_t num(struct json_object *o, const char *path)
{
    struct json_object *v = json_get(o, path);
    if (!v || !json_object_is_type(v, json_type_int)) {
        fail_msg("%s: not an integer", path);
    }
    return json_object_get_int64(v);
}

/* A pool and a model from data/crs.json, parsed and checked against each other. */
struct fixture {
    struct json_object *crs;
    struct spec_pool pool;
    struct spec_model model;
};

static int parse_pool(struct json_object *crs, const char *name, struct spec_pool *pool)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    struct json_object *o = find(crs, "InferencePool", name);
    memset(pool, 0, sizeof(*pool));
    return o ? spec_pool_parse(o, pool, &errs) : -ENOENT;
}

static void fixture_load(struct fixture *f, const char *model_name)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    f->crs = load_items("data/crs.json");
    struct json_object *mo = find(f->crs, "InferenceModel", model_name);
    assert_non_null(mo);
    assert_int_equal(spec_model_parse(mo, &f->model, &errs), 0);
    assert_int_equal(parse_pool(f->crs, f->model.pool_name, &f->pool), 0);
    assert_int_equal(spec_model_check_pool(&f->pool, &f->model, &errs), 0);
}

static void fixture_free(struct fixture *f)
{
    spec_model_free(&f->model);
    spec_pool_free(&f->pool);
    json_object_put(f->crs);
}

/* Every desired object for the pools and models in crs (a new array). */
static struct json_object *build_all(struct json_object *crs, const struct desired_opts *opts)
{
    struct json_object *all = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(crs); i++) {
        struct json_object *d = json_object_array_get_idx(crs, i);
        struct spec_errors errs;
        spec_errors_init(&errs);
        struct json_object *objs = NULL;
        if (strcmp(json_object_get_string(json_get(d, "kind")), "InferencePool") == 0) {
            struct spec_pool pool;
            if (spec_pool_parse(d, &pool, &errs) == 0) {
                if (desired_pool_objects(&pool, opts, &objs, &errs) != 0) {
                    abort();
                }
            }
            spec_pool_free(&pool);
        } else {
            struct spec_model model;
            struct spec_pool pool;
            if (spec_model_parse(d, &model, &errs) == 0 &&
                parse_pool(crs, model.pool_name, &pool) == 0) {
                if (spec_model_check_pool(&pool, &model, &errs) == 0 &&
                    desired_model_objects(&pool, &model, opts, &objs) != 0) {
                    abort();
                }
                spec_pool_free(&pool);
            }
            spec_model_free(&model);
        }
        for (size_t j = 0; objs && j < json_object_array_length(objs); j++) {
            json_object_array_add(all, json_object_get(json_object_array_get_idx(objs, j)));
        }
        json_object_put(objs);
    }
    return all;
}

/* ---- model workloads ---- */

static void test_disaggregated_deployments(void **state)
{
    (void)state;
    struct fixture f;
    fixture_load(&f, "llama-1b");
    struct json_object *objs = NULL;
    assert_int_equal(desired_model_objects(&f.pool, &f.model, NULL, &objs), 0);
    assert_int_equal(json_object_array_length(objs), 2); /* no autoscaling: no HPAs */
    struct json_object *pre = json_object_array_get_idx(objs, 0);
    struct json_object *dec = json_object_array_get_idx(objs, 1);
    assert_string_equal(str(pre, "metadata.name"), "llama-1b-prefill");
    assert_string_equal(str(dec, "metadata.name"), "llama-1b-decode");
    assert_string_equal(str(dec, "apiVersion"), "apps/v1");
    assert_string_equal(str(dec, "kind"), "Deployment");
    assert_string_equal(str(dec, "metadata.namespace"), "default");

    struct json_object *labels = json_get(dec, "metadata.labels");
    assert_string_equal(str(labels, "app"), "llama-pd");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_ROLE)),
                        "decode");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_POOL)),
                        "llama-pd");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_MODEL)),
                        "llama-1b");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_MANAGED_BY)),
                        "tandem-operator");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_NAME)),
                        "tandem-agent");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_ENGINE_TYPE)),
                        "vllm");
    assert_true(json_object_equal(labels, json_get(dec, "spec.template.metadata.labels")));
    assert_string_equal(json_object_get_string(
                            json_object_object_get(json_get(pre, "metadata.labels"), LABEL_ROLE)),
                        "prefill");
    assert_true(spec_selector_matches(&f.pool.selector, labels));

    struct json_object *ref = json_get(dec, "metadata.ownerReferences[0]");
    assert_string_equal(str(ref, "apiVersion"), "tandem.dev/v1alpha1");
    assert_string_equal(str(ref, "kind"), "InferenceModel");
    assert_string_equal(str(ref, "name"), "llama-1b");
    assert_string_equal(str(ref, "uid"), f.model.uid);
    assert_true(json_object_get_boolean(json_get(ref, "controller")));
    assert_true(json_object_get_boolean(json_get(ref, "blockOwnerDeletion")));
    assert_int_equal(json_object_array_length(json_get(dec, "metadata.ownerReferences")), 1);

    assert_int_equal(num(pre, "spec.replicas"), 2);
    assert_int_equal(num(dec, "spec.replicas"), 3);
    struct json_object *ml = json_get(dec, "spec.selector.matchLabels");
    assert_int_equal(json_object_object_length(ml), 3);
    assert_true(spec_selector_matches(&(struct spec_selector){ml, NULL},
                                      json_get(dec, "spec.template.metadata.labels")));
    assert_string_equal(str(dec, "spec.strategy.type"), "RollingUpdate");
    assert_int_equal(num(dec, "spec.strategy.rollingUpdate.maxSurge"), 1);
    assert_int_equal(num(dec, "spec.strategy.rollingUpdate.maxUnavailable"), 0);
    const char *hash = json_object_get_string(json_object_object_get(
        json_get(dec, "spec.template.metadata.annotations"), ANNOTATION_CONFIG_HASH));
    assert_non_null(hash);
    assert_int_equal(strlen(hash), 16);
    assert_int_equal(strspn(hash, "0123456789abcdef"), 16);

    struct json_object *pod = json_get(dec, "spec.template.spec");
    assert_string_equal(str(pod, "serviceAccountName"), "llama-pd-agent");
    struct json_object *c = json_get(pod, "containers[0]");
    assert_int_equal(json_object_array_length(json_get(pod, "containers")), 1);
    assert_string_equal(str(c, "name"), "agent");
    assert_string_equal(str(c, "image"), DESIRED_DEFAULT_AGENT_IMAGE);

    /* The agent command line (docs/operator-workloads.md). */
    static const char *const want_args[] = {
        "serve",
        "--role",
        "decode",
        "--model",
        "/models/Llama-3.2-1B-Instruct-Q8_0.gguf",
        "--model-format",
        "gguf",
        "--served-model-name",
        "meta-llama/Llama-3.2-1B-Instruct",
        "--port",
        "8000",
        "--engine-port",
        "8200",
        "--kv-events-port",
        "5557",
        "--kv-transfer-port",
        "5600",
        "--inference-pool",
        "default/llama-pd",
        "--kv-connector",
        "nixlv2",
        "--enable-ssrf-protection",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "32",
        "--max-num-batched-tokens",
        "2048",
        "--block-size",
        "16",
        "--kv-cache-dtype",
        "auto",
        "--tensor-parallel-size",
        "1",
        "--enable-chunked-prefill",
        "--override-generation-config",
        "{\"temperature\":0.7,\"top_p\":0.95,\"max_new_tokens\":512}"};
    struct json_object *args = json_get(c, "args");
    assert_int_equal(json_object_array_length(args), ARRAY_SIZE(want_args));
    for (size_t i = 0; i < ARRAY_SIZE(want_args); i++) {
        assert_string_equal(json_object_get_string(json_object_array_get_idx(args, i)),
                            want_args[i]);
    }
    assert_string_equal(str(pre, "spec.template.spec.containers[0].args[2]"), "prefill");

    static const char *const env[][2] = {{"POD_NAME", "metadata.name"},
                                         {"POD_NAMESPACE", "metadata.namespace"},
                                         {"POD_IP", "status.podIP"},
                                         {"NODE_NAME", "spec.nodeName"}};
    assert_int_equal(json_object_array_length(json_get(c, "env")), 4);
    for (size_t i = 0; i < 4; i++) {
        char p1[64], p2[64];
        snprintf(p1, sizeof(p1), "env[%zu].name", i);
        snprintf(p2, sizeof(p2), "env[%zu].valueFrom.fieldRef.fieldPath", i);
        assert_string_equal(str(c, p1), env[i][0]);
        assert_string_equal(str(c, p2), env[i][1]);
    }
    static const struct {
        const char *name;
        int port;
    } ports[] = {{"http", 8000}, {"engine", 8200}, {"kv-events", 5557}, {"kv-transfer", 5600}};
    for (size_t i = 0; i < ARRAY_SIZE(ports); i++) {
        char p1[64], p2[64];
        snprintf(p1, sizeof(p1), "ports[%zu].name", i);
        snprintf(p2, sizeof(p2), "ports[%zu].containerPort", i);
        assert_string_equal(str(c, p1), ports[i].name);
        assert_int_equal(num(c, p2), ports[i].port);
    }
    assert_string_equal(str(c, "readinessProbe.httpGet.path"), "/health");
    assert_string_equal(str(c, "readinessProbe.httpGet.port"), "http");
    assert_int_equal(num(c, "readinessProbe.periodSeconds"), 5);
    assert_int_equal(num(c, "readinessProbe.timeoutSeconds"), 2);
    assert_int_equal(num(c, "readinessProbe.successThreshold"), 1);
    assert_int_equal(num(c, "readinessProbe.failureThreshold"), 3);
    assert_string_equal(str(c, "resources.limits.memory"), "4Gi");
    assert_string_equal(str(c, "resources.requests.cpu"), "250m");

    /* hf:// → an emptyDir filled by the model-fetch init container. */
    assert_non_null(json_get(pod, "volumes[0].emptyDir"));
    assert_string_equal(str(pod, "volumes[0].name"), "model");
    assert_string_equal(str(c, "volumeMounts[0].mountPath"), "/models");
    struct json_object *init = json_get(pod, "initContainers[0]");
    assert_string_equal(str(init, "name"), "model-fetch");
    assert_string_equal(str(init, "image"), DESIRED_DEFAULT_AGENT_IMAGE);
    assert_string_equal(str(init, "args[0]"), "fetch");
    assert_string_equal(str(init, "args[1]"), "--uri");
    assert_string_equal(
        str(init, "args[2]"),
        "hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q8_0.gguf");
    assert_string_equal(str(init, "args[3]"), "--output");
    assert_string_equal(str(init, "args[4]"), "/models/Llama-3.2-1B-Instruct-Q8_0.gguf");
    assert_string_equal(str(init, "volumeMounts[0].mountPath"), "/models");

    /* /dev/shm: a memory-backed emptyDir (UCX's shared-memory KV pools). */
    assert_int_equal(json_object_array_length(json_get(pod, "volumes")), 2);
    assert_string_equal(str(pod, "volumes[1].name"), "dshm");
    assert_string_equal(str(pod, "volumes[1].emptyDir.medium"), "Memory");
    assert_string_equal(str(pod, "volumes[1].emptyDir.sizeLimit"), DESIRED_SHM_SIZE_LIMIT);
    assert_int_equal(json_object_array_length(json_get(c, "volumeMounts")), 2);
    assert_string_equal(str(c, "volumeMounts[1].name"), "dshm");
    assert_string_equal(str(c, "volumeMounts[1].mountPath"), "/dev/shm");
    assert_int_equal(json_object_array_length(json_get(init, "volumeMounts")), 1);

    /* The operator's image flag applies when runtime.image is unset. */
    struct desired_opts opts = {.agent_image = "registry.example.com/tandem-agent:1.2"};
    struct json_object *d2 = desired_model_deployment(&f.pool, &f.model, ROLE_DECODE, &opts);
    assert_string_equal(str(d2, "spec.template.spec.containers[0].image"),
                        "registry.example.com/tandem-agent:1.2");
    assert_string_equal(str(d2, "spec.template.spec.initContainers[0].image"),
                        "registry.example.com/tandem-agent:1.2");
    assert_true(desired_needs_update(dec, d2)); /* an image change rolls */
    json_object_put(d2);
    json_object_put(objs);
    fixture_free(&f);
}

static void test_volumes_per_scheme(void **state)
{
    (void)state;
    struct fixture f;
    struct json_object *d, *pod;

    /* file:// → hostPath of the file, mounted at /models/<file>. */
    fixture_load(&f, "chat-stable");
    d = desired_model_deployment(&f.pool, &f.model, ROLE_BOTH, NULL);
    assert_string_equal(str(d, "metadata.name"), "chat-stable-worker");
    pod = json_get(d, "spec.template.spec");
    assert_string_equal(str(pod, "volumes[0].hostPath.path"),
                        "/var/lib/tandem/models/qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_string_equal(str(pod, "containers[0].volumeMounts[0].mountPath"),
                        "/models/qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_true(json_object_get_boolean(json_get(pod, "containers[0].volumeMounts[0].readOnly")));
    assert_int_equal(json_object_array_length(json_get(pod, "initContainers")), 0);
    assert_string_equal(str(pod, "containers[0].args[2]"), "both");
    assert_string_equal(str(pod, "containers[0].args[4]"),
                        "/models/qwen2.5-0.5b-instruct-q8_0.gguf");
    json_object_put(d);
    fixture_free(&f);

    /* pvc://claim/path → the claim, with subPath. */
    fixture_load(&f, "qwen-0-5b");
    d = desired_model_deployment(&f.pool, &f.model, ROLE_BOTH, NULL);
    pod = json_get(d, "spec.template.spec");
    assert_string_equal(str(pod, "volumes[0].persistentVolumeClaim.claimName"), "models");
    assert_true(
        json_object_get_boolean(json_get(pod, "volumes[0].persistentVolumeClaim.readOnly")));
    assert_string_equal(str(pod, "containers[0].volumeMounts[0].subPath"),
                        "qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_string_equal(str(pod, "containers[0].volumeMounts[0].mountPath"),
                        "/models/qwen2.5-0.5b-instruct-q8_0.gguf");
    assert_string_equal(str(d, "spec.strategy.rollingUpdate.maxSurge"), "25%");
    assert_int_equal(num(d, "spec.replicas"), 2);
    json_object_put(d);
    fixture_free(&f);

    /* pvc://claim → the whole claim at /models/<claim>. */
    fixture_load(&f, "scaled-model");
    d = desired_model_deployment(&f.pool, &f.model, ROLE_PREFILL, NULL);
    pod = json_get(d, "spec.template.spec");
    assert_string_equal(str(pod, "volumes[0].persistentVolumeClaim.claimName"), "model-store");
    assert_string_equal(str(pod, "containers[0].volumeMounts[0].mountPath"), "/models/model-store");
    assert_string_equal(str(pod, "containers[0].volumeMounts[0].subPath"), "");
    json_object_put(d);
    fixture_free(&f);

    /* https:// → emptyDir + model-fetch. */
    fixture_load(&f, "chat-canary");
    d = desired_model_deployment(&f.pool, &f.model, ROLE_BOTH, NULL);
    pod = json_get(d, "spec.template.spec");
    assert_non_null(json_get(pod, "volumes[0].emptyDir"));
    assert_string_equal(str(pod, "initContainers[0].args[2]"),
                        "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/"
                        "qwen2.5-0.5b-instruct-q4_0.gguf");
    assert_string_equal(str(pod, "initContainers[0].args[4]"),
                        "/models/qwen2.5-0.5b-instruct-q4_0.gguf");
    json_object_put(d);
    fixture_free(&f);
}

static int has_arg(struct json_object *args, const char *flag, const char *value)
{
    size_t n = json_object_array_length(args);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(json_object_get_string(json_object_array_get_idx(args, i)), flag) == 0) {
            return !value || (i + 1 < n &&
                              strcmp(json_object_get_string(json_object_array_get_idx(args, i + 1)),
                                     value) == 0);
        }
    }
    return 0;
}

static void test_agent_args(void **state)
{
    (void)state;
    struct fixture f;
    fixture_load(&f, "scaled-model");
    struct json_object *args = desired_agent_args(&f.pool, &f.model, ROLE_PREFILL);
    assert_true(has_arg(args, "--port", "8001"));
    assert_true(has_arg(args, "--model-format", "safetensors"));
    assert_true(has_arg(args, "--served-model-name", "org/scaled-model"));
    assert_true(has_arg(args, "--inference-pool", "default/scaled"));
    assert_true(has_arg(args, "--kv-connector", "nixlv2"));
    assert_true(has_arg(args, "--enable-ssrf-protection", NULL));
    assert_true(has_arg(args, "--tensor-parallel-size", "1"));
    assert_true(has_arg(args, "--gpu-memory-utilization", "0.85"));
    assert_true(has_arg(args, "--no-enable-chunked-prefill", NULL));
    assert_false(has_arg(args, "--enable-chunked-prefill", NULL));
    assert_false(has_arg(args, "--max-num-seqs", NULL));
    assert_false(has_arg(args, "--override-generation-config", NULL));
    assert_false(has_arg(args, "--kv-connector-config", NULL));
    json_object_put(args);
    /* deployment.tensorParallelism.size is the engine's --tensor-parallel-size */
    f.model.runtime.tensor_parallel_size = 0;
    f.model.deployment.tp_size = 4;
    args = desired_agent_args(&f.pool, &f.model, ROLE_DECODE);
    assert_true(has_arg(args, "--tensor-parallel-size", "4"));
    json_object_put(args);
    fixture_free(&f);

    fixture_load(&f, "chat-stable");
    args = desired_agent_args(&f.pool, &f.model, ROLE_BOTH);
    assert_false(has_arg(args, "--kv-connector", NULL)); /* no disaggregation in this pool */
    assert_false(has_arg(args, "--enable-ssrf-protection", NULL));
    assert_false(has_arg(args, "--max-model-len", NULL));
    assert_true(has_arg(args, "--block-size", "16"));
    json_object_put(args);
    fixture_free(&f);

    /* Connector config and sampling defaults are passed as JSON. */
    char err[256];
    static const char pool_yaml[] =
        "{metadata: {name: p, uid: u1}, spec: {selector: {matchLabels: {app: p}}, "
        "disaggregation: {enabled: true, connector: {config: {backends: [UCX], buffer: 2}}}}}";
    static const char model_yaml[] =
        "{metadata: {name: m, uid: u2}, spec: {poolRef: {name: p}, modelName: m, modelSource: "
        "{storageUri: 'file:///m.gguf'}, inferenceParams: {topK: 40, minP: 0.1, "
        "repetitionPenalty: 1.2}, deployment: {unifiedWorkers: {replicas: 0}}}}";
    struct json_object *po = yaml_parse(pool_yaml, strlen(pool_yaml), err, sizeof(err));
    struct json_object *mo = yaml_parse(model_yaml, strlen(model_yaml), err, sizeof(err));
    struct spec_pool pool;
    struct spec_model model;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(po, &pool, &errs), 0);
    assert_int_equal(spec_model_parse(mo, &model, &errs), 0);
    args = desired_agent_args(&pool, &model, ROLE_BOTH);
    assert_true(has_arg(args, "--kv-connector-config", "{\"backends\":[\"UCX\"],\"buffer\":2}"));
    assert_true(has_arg(args, "--override-generation-config",
                        "{\"top_k\":40,\"min_p\":0.1,\"repetition_penalty\":1.2}"));
    json_object_put(args);
    struct json_object *d = desired_model_deployment(&pool, &model, ROLE_BOTH, NULL);
    assert_int_equal(num(d, "spec.replicas"), 0);
    json_object_put(d);
    spec_model_free(&model);
    spec_pool_free(&pool);
    json_object_put(po);
    json_object_put(mo);
}

/* deployment.type DaemonSet: one DaemonSet with the Deployment form's pod template, no HPA. */
static void test_daemonset(void **state)
{
    (void)state;
    struct fixture f;
    fixture_load(&f, "node-model");
    assert_true(f.pool.autoscaling.enabled);
    struct json_object *objs = NULL;
    assert_int_equal(desired_model_objects(&f.pool, &f.model, NULL, &objs), 0);
    assert_int_equal(json_object_array_length(objs), 1); /* no HPA for a DaemonSet */
    assert_null(desired_model_hpa(&f.pool, &f.model, ROLE_BOTH));
    struct json_object *ds = json_object_array_get_idx(objs, 0);
    assert_string_equal(str(ds, "apiVersion"), "apps/v1");
    assert_string_equal(str(ds, "kind"), "DaemonSet");
    assert_string_equal(str(ds, "metadata.name"), "node-model-worker");
    assert_string_equal(str(ds, "metadata.namespace"), "default");
    assert_null(json_get(ds, "spec.replicas"));
    assert_string_equal(str(ds, "metadata.ownerReferences[0].kind"), "InferenceModel");
    assert_string_equal(str(ds, "metadata.ownerReferences[0].name"), "node-model");
    assert_string_equal(str(ds, "metadata.ownerReferences[0].uid"), f.model.uid);
    assert_true(json_object_get_boolean(json_get(ds, "metadata.ownerReferences[0].controller")));

    /* The same labels (so the pods join the pool), selector and pod template as the Deployment
     * form of the same model. */
    struct json_object *dep = desired_model_deployment(&f.pool, &f.model, ROLE_BOTH, NULL);
    assert_non_null(dep);
    assert_true(
        json_object_equal(json_get(ds, "metadata.labels"), json_get(dep, "metadata.labels")));
    assert_true(json_object_equal(json_get(ds, "spec.selector"), json_get(dep, "spec.selector")));
    assert_true(json_object_equal(json_get(ds, "spec.template"), json_get(dep, "spec.template")));
    json_object_put(dep);
    struct json_object *labels = json_get(ds, "spec.template.metadata.labels");
    assert_true(spec_selector_matches(&f.pool.selector, labels));
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_ROLE)), "both");
    assert_string_equal(json_object_get_string(json_object_object_get(labels, LABEL_MODEL)),
                        "node-model");
    assert_true(spec_selector_matches(
        &(struct spec_selector){json_get(ds, "spec.selector.matchLabels"), NULL}, labels));

    /* Placement from deployment.daemonSet, the agent's role both, /dev/shm. */
    struct json_object *pod = json_get(ds, "spec.template.spec");
    assert_string_equal(json_object_get_string(json_object_object_get(json_get(pod, "nodeSelector"),
                                                                      "tandem.dev/node-agent")),
                        "true");
    assert_string_equal(str(pod, "tolerations[0].key"), "nvidia.com/gpu");
    assert_string_equal(str(pod, "containers[0].resources.limits.memory"), "8Gi");
    assert_string_equal(str(pod, "serviceAccountName"), "scaled-agent");
    assert_string_equal(str(pod, "containers[0].args[2]"), "both");
    assert_true(has_arg(json_get(pod, "containers[0].args"), "--inference-pool", "default/scaled"));
    assert_string_equal(str(pod, "volumes[1].emptyDir.medium"), "Memory");
    assert_string_equal(str(pod, "containers[0].volumeMounts[1].mountPath"), "/dev/shm");

    /* Rolling updates: maxUnavailable (25% by default) and no surge... */
    assert_string_equal(str(ds, "spec.updateStrategy.type"), "RollingUpdate");
    assert_string_equal(str(ds, "spec.updateStrategy.rollingUpdate.maxUnavailable"), "25%");
    assert_int_equal(num(ds, "spec.updateStrategy.rollingUpdate.maxSurge"), 0);
    /* ...or surge when maxUnavailable is 0 (a DaemonSet cannot do both). */
    struct json_object *mo = NULL;
    assert_int_equal(json_object_deep_copy(find(f.crs, "InferenceModel", "node-model"), &mo, NULL),
                     0);
    struct json_object *ro = json_object_new_object();
    json_object_object_add(ro, "maxSurge", json_object_new_int(1));
    json_object_object_add(ro, "maxUnavailable", json_object_new_int(0));
    json_object_object_add(json_get(mo, "spec.deployment"), "rollout", ro);
    struct spec_model m2;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_model_parse(mo, &m2, &errs), 0);
    struct json_object *ds2 = desired_model_daemonset(&f.pool, &m2, NULL);
    assert_int_equal(num(ds2, "spec.updateStrategy.rollingUpdate.maxSurge"), 1);
    assert_int_equal(num(ds2, "spec.updateStrategy.rollingUpdate.maxUnavailable"), 0);
    assert_true(desired_needs_update(ds, ds2));
    json_object_put(ds2);
    spec_model_free(&m2);
    json_object_put(mo);

    /* A live DaemonSet whose nodeSelector changed needs a write. */
    struct json_object *live = load_items("data/live.json");
    struct json_object *ld = find(live, "DaemonSet", "node-model-worker");
    assert_non_null(ld);
    assert_false(desired_needs_update(ld, ds));
    struct json_object *edit = NULL;
    assert_int_equal(json_object_deep_copy(ld, &edit, NULL), 0);
    json_object_object_add(json_get(edit, "spec.template.spec.nodeSelector"),
                           "tandem.dev/node-agent", json_object_new_string("false"));
    assert_true(desired_needs_update(edit, ds));
    json_object_put(edit);
    json_object_put(live);
    json_object_put(objs);
    fixture_free(&f);
}

static void test_autoscaling(void **state)
{
    (void)state;
    struct fixture f;
    fixture_load(&f, "scaled-model");
    struct json_object *objs = NULL;
    assert_int_equal(desired_model_objects(&f.pool, &f.model, NULL, &objs), 0);
    assert_int_equal(json_object_array_length(objs), 4);
    struct json_object *dep = json_object_array_get_idx(objs, 1);
    struct json_object *hpa = json_object_array_get_idx(objs, 3);
    assert_string_equal(str(dep, "kind"), "Deployment");
    assert_null(json_get(dep, "spec.replicas")); /* the HPA owns replicas */
    assert_string_equal(str(hpa, "apiVersion"), "autoscaling/v2");
    assert_string_equal(str(hpa, "kind"), "HorizontalPodAutoscaler");
    assert_string_equal(str(hpa, "metadata.name"), "scaled-model-decode");
    assert_string_equal(str(hpa, "metadata.ownerReferences[0].kind"), "InferenceModel");
    assert_string_equal(str(hpa, "spec.scaleTargetRef.kind"), "Deployment");
    assert_string_equal(str(hpa, "spec.scaleTargetRef.name"), "scaled-model-decode");
    assert_int_equal(num(hpa, "spec.minReplicas"), 2);
    assert_int_equal(num(hpa, "spec.maxReplicas"), 8);
    assert_string_equal(str(hpa, "spec.metrics[0].pods.metric.name"), "vllm:num_requests_waiting");
    assert_string_equal(str(hpa, "spec.metrics[0].pods.target.averageValue"), "4");
    assert_string_equal(str(hpa, "spec.metrics[1].pods.metric.name"), "vllm:kv_cache_usage_perc");
    assert_string_equal(str(hpa, "spec.metrics[1].pods.target.averageValue"), "850m");
    assert_string_equal(str(hpa, "spec.metrics[2].resource.name"), "cpu");
    assert_int_equal(num(hpa, "spec.metrics[2].resource.target.averageUtilization"), 70);

    /* Placement of the prefill role. */
    struct json_object *pre = json_object_array_get_idx(objs, 0);
    assert_string_equal(str(pre, "spec.template.spec.nodeSelector.gpu"), "h100");
    assert_string_equal(str(pre, "spec.template.spec.tolerations[0].key"), "nvidia.com/gpu");
    struct json_object *gpus = json_object_object_get(
        json_get(pre, "spec.template.spec.containers[0].resources.limits"), "nvidia.com/gpu");
    assert_int_equal(json_object_get_int(gpus), 2);
    assert_int_equal(num(dep, "spec.template.spec.tolerations[0].tolerationSeconds"), 300);
    assert_int_equal(num(dep, "spec.strategy.rollingUpdate.maxSurge"), 0);
    assert_int_equal(num(dep, "spec.strategy.rollingUpdate.maxUnavailable"), 1);
    json_object_put(objs);

    /* No HPA without spec.autoscaling. */
    struct fixture g;
    fixture_load(&g, "llama-1b");
    assert_null(desired_model_hpa(&g.pool, &g.model, ROLE_DECODE));
    fixture_free(&g);
    fixture_free(&f);
}

/* ---- pool objects ---- */

static void test_pool_objects(void **state)
{
    (void)state;
    struct json_object *crs = load_items("data/crs.json");
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(parse_pool(crs, "llama-pd", &pool), 0);
    struct json_object *objs = NULL;
    assert_int_equal(desired_pool_objects(&pool, NULL, &objs, &errs), 0);
    static const char *const order[][2] = {
        {"ServiceAccount", "llama-pd-epp"},
        {"ServiceAccount", "llama-pd-agent"},
        {"Role", "llama-pd-epp"},
        {"RoleBinding", "llama-pd-epp"},
        {"Role", "llama-pd-agent"},
        {"RoleBinding", "llama-pd-agent"},
        {"ConfigMap", "llama-pd-epp-config"},
        {"Deployment", "llama-pd-epp"},
        {"Service", "llama-pd-epp"},
    };
    assert_int_equal(json_object_array_length(objs), ARRAY_SIZE(order));
    for (size_t i = 0; i < ARRAY_SIZE(order); i++) {
        struct json_object *o = json_object_array_get_idx(objs, i);
        assert_string_equal(str(o, "kind"), order[i][0]);
        assert_string_equal(str(o, "metadata.name"), order[i][1]);
        assert_string_equal(str(o, "metadata.namespace"), "default");
        assert_string_equal(str(o, "metadata.ownerReferences[0].kind"), "InferencePool");
        assert_string_equal(str(o, "metadata.ownerReferences[0].uid"), pool.uid);
        assert_true(json_object_get_boolean(json_get(o, "metadata.ownerReferences[0].controller")));
        assert_string_equal(json_object_get_string(json_object_object_get(
                                json_get(o, "metadata.labels"), LABEL_MANAGED_BY)),
                            "tandem-operator");
    }

    /* The ConfigMap holds a valid P/D config; its hash annotates the EPP pods. */
    struct json_object *cm = json_object_array_get_idx(objs, 6);
    const char *text =
        json_object_get_string(json_object_object_get(json_get(cm, "data"), "config.yaml"));
    assert_non_null(text);
    struct json_object *cfg = NULL;
    assert_int_equal(eppconfig_parse(text, strlen(text), "config", NULL, 1, &cfg, &errs), 0);
    json_object_put(cfg);
    char hash[17];
    desired_hash_hex(text, strlen(text), hash);
    struct json_object *dep = json_object_array_get_idx(objs, 7);
    assert_string_equal(
        json_object_get_string(json_object_object_get(
            json_get(dep, "spec.template.metadata.annotations"), ANNOTATION_CONFIG_HASH)),
        hash);

    /* The EPP Deployment. */
    assert_int_equal(num(dep, "spec.replicas"), 1);
    struct json_object *pod = json_get(dep, "spec.template.spec");
    assert_string_equal(str(pod, "serviceAccountName"), "llama-pd-epp");
    struct json_object *c = json_get(pod, "containers[0]");
    assert_string_equal(str(c, "name"), "epp");
    assert_string_equal(str(c, "image"), DESIRED_DEFAULT_EPP_IMAGE);
    static const char *const want_args[] = {"--pool-name", "llama-pd",      "--pool-namespace",
                                            "default",     "--config-file", "/etc/epp/config.yaml"};
    assert_int_equal(json_object_array_length(json_get(c, "args")), ARRAY_SIZE(want_args));
    for (size_t i = 0; i < ARRAY_SIZE(want_args); i++) {
        assert_string_equal(
            json_object_get_string(json_object_array_get_idx(json_get(c, "args"), i)),
            want_args[i]);
    }
    assert_string_equal(str(c, "ports[0].name"), "http");
    assert_int_equal(num(c, "ports[0].containerPort"), 8080);
    assert_string_equal(str(c, "ports[1].name"), "metrics");
    assert_int_equal(num(c, "ports[1].containerPort"), 9090);
    assert_string_equal(str(c, "ports[2].name"), "grpc");
    assert_int_equal(num(c, "ports[2].containerPort"), 9002);
    assert_string_equal(str(c, "readinessProbe.httpGet.path"), "/readyz");
    assert_string_equal(str(c, "readinessProbe.httpGet.port"), "metrics");
    assert_string_equal(str(c, "livenessProbe.httpGet.path"), "/healthz");
    assert_string_equal(str(c, "livenessProbe.httpGet.port"), "metrics");
    assert_string_equal(str(c, "volumeMounts[0].mountPath"), "/etc/epp");
    assert_string_equal(str(pod, "volumes[0].configMap.name"), "llama-pd-epp-config");
    assert_string_equal(str(pod, "volumes[0].configMap.items[0].key"), "config.yaml");
    assert_string_equal(str(pod, "volumes[0].configMap.items[0].path"), "config.yaml");
    /* The EPP's pods are not model servers of the pool. */
    assert_false(
        spec_selector_matches(&pool.selector, json_get(dep, "spec.template.metadata.labels")));

    /* The Service selects the EPP pods. */
    struct json_object *svc = json_object_array_get_idx(objs, 8);
    struct spec_selector sel = {json_get(svc, "spec.selector"), NULL};
    assert_true(spec_selector_matches(&sel, json_get(dep, "spec.template.metadata.labels")));
    assert_true(json_object_equal(json_get(svc, "spec.selector"),
                                  json_get(dep, "spec.selector.matchLabels")));
    assert_int_equal(json_object_array_length(json_get(svc, "spec.ports")), 3);
    assert_int_equal(num(svc, "spec.ports[0].port"), 8080);
    assert_string_equal(str(svc, "spec.ports[1].name"), "grpc");
    assert_int_equal(num(svc, "spec.ports[1].port"), 9002);

    /* RBAC: the EPP reads pods, endpoints, pools and models; the agent pods and pools. */
    struct json_object *role = json_object_array_get_idx(objs, 2);
    assert_string_equal(str(role, "rules[0].apiGroups[0]"), "");
    assert_string_equal(str(role, "rules[0].resources[0]"), "pods");
    assert_string_equal(str(role, "rules[0].resources[1]"), "endpoints");
    assert_string_equal(str(role, "rules[1].apiGroups[0]"), "tandem.dev");
    assert_string_equal(str(role, "rules[1].resources[0]"), "inferencepools");
    assert_string_equal(str(role, "rules[1].resources[1]"), "inferencemodels");
    assert_string_equal(str(role, "rules[1].verbs[2]"), "watch");
    assert_string_equal(str(role, "rules[2].resources[0]"), "inferencepools/status");
    assert_string_equal(str(role, "rules[2].verbs[0]"), "patch");
    assert_null(json_get(role, "rules[2].verbs[1]"));
    struct json_object *rb = json_object_array_get_idx(objs, 3);
    assert_string_equal(str(rb, "roleRef.kind"), "Role");
    assert_string_equal(str(rb, "roleRef.name"), "llama-pd-epp");
    assert_string_equal(str(rb, "subjects[0].name"), "llama-pd-epp");
    assert_null(json_get(rb, "subjects[1]"));
    struct json_object *arole = json_object_array_get_idx(objs, 4);
    assert_string_equal(str(arole, "rules[0].resources[0]"), "pods");
    assert_null(json_get(arole, "rules[0].resources[1]"));
    assert_string_equal(str(arole, "rules[1].apiGroups[0]"), "tandem.dev");
    assert_string_equal(str(arole, "rules[1].resources[0]"), "inferencepools");
    assert_null(json_get(arole, "rules[1].resources[1]"));
    assert_string_equal(str(arole, "rules[1].verbs[0]"), "get");
    struct json_object *arb = json_object_array_get_idx(objs, 5);
    assert_string_equal(str(arb, "roleRef.name"), "llama-pd-agent");
    assert_string_equal(str(arb, "subjects[0].name"), "llama-pd-agent");
    assert_string_equal(str(arb, "subjects[0].namespace"), "default");
    json_object_put(objs);
    spec_pool_free(&pool);

    /* configMapRef: no ConfigMap; the EPP mounts the user's, key mapped to config.yaml. */
    assert_int_equal(parse_pool(crs, "scaled", &pool), 0);
    assert_int_equal(desired_pool_objects(&pool, NULL, &objs, &errs), 0);
    assert_int_equal(json_object_array_length(objs), 8);
    assert_null(find(objs, "ConfigMap", "scaled-epp-config"));
    dep = find(objs, "Deployment", "scaled-epp");
    assert_string_equal(str(dep, "spec.template.spec.volumes[0].configMap.name"), "my-epp-config");
    assert_null(json_get(dep, "spec.template.metadata.annotations"));
    assert_int_equal(num(dep, "spec.replicas"), 2);
    assert_string_equal(str(dep, "spec.template.spec.containers[0].image"),
                        "registry.example.com/tandem-epp:v1");
    assert_string_equal(str(dep, "spec.template.spec.containers[0].resources.requests.cpu"), "0.5");
    json_object_put(objs);
    spec_pool_free(&pool);

    /* The operator's EPP image applies when spec.epp.image is unset. */
    assert_int_equal(parse_pool(crs, "qwen", &pool), 0);
    struct desired_opts opts = {.epp_image = "ghcr.io/x/tandem-epp:9"};
    dep = desired_epp_deployment(&pool, &opts, NULL);
    assert_string_equal(str(dep, "spec.template.spec.containers[0].image"),
                        "ghcr.io/x/tandem-epp:9");
    json_object_put(dep);
    spec_pool_free(&pool);
    json_object_put(crs);
}

/* Returns the value of env var name in a container, or NULL. */
static const char *env_value(struct json_object *container, const char *name)
{
    struct json_object *env = json_get(container, "env");
    for (size_t i = 0; env && i < json_object_array_length(env); i++) {
        struct json_object *e = json_object_array_get_idx(env, i);
        if (strcmp(str(e, "name"), name) == 0) {
            struct json_object *v = json_get(e, "value");
            return v ? json_object_get_string(v) : "";
        }
    }
    return NULL;
}

/* --otlp-traces-endpoint reaches the agent and EPP containers as the OTel variable; unset, the
 * pods get no tracing variable (and their templates do not change). */
static void test_trace_env(void **state)
{
    (void)state;
    struct fixture f;
    fixture_load(&f, "llama-1b");
    const char *url = "http://otel-collector.monitoring:4318";
    struct desired_opts on = {.otlp_traces_endpoint = url};
    struct json_object *objs = NULL, *plain = NULL;
    assert_int_equal(desired_model_objects(&f.pool, &f.model, &on, &objs), 0);
    assert_int_equal(desired_model_objects(&f.pool, &f.model, NULL, &plain), 0);
    for (size_t i = 0; i < json_object_array_length(objs); i++) {
        struct json_object *c =
            json_get(json_object_array_get_idx(objs, i), "spec.template.spec.containers[0]");
        struct json_object *p =
            json_get(json_object_array_get_idx(plain, i), "spec.template.spec.containers[0]");
        assert_string_equal(env_value(c, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), url);
        assert_null(env_value(p, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
        assert_non_null(env_value(c, "POD_IP"));
    }
    json_object_put(objs);
    json_object_put(plain);

    struct json_object *dep = desired_epp_deployment(&f.pool, &on, NULL);
    struct json_object *c = json_get(dep, "spec.template.spec.containers[0]");
    assert_string_equal(env_value(c, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), url);
    json_object_put(dep);
    dep = desired_epp_deployment(&f.pool, NULL, NULL);
    assert_null(env_value(json_get(dep, "spec.template.spec.containers[0]"),
                          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
    json_object_put(dep);
    fixture_free(&f);
}

/* A change of routing weights changes the config and its hash, so the EPP rolls. */
static void test_config_hash_changes(void **state)
{
    (void)state;
    struct json_object *crs = load_items("data/crs.json");
    struct json_object *po = find(crs, "InferencePool", "chat");
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(po, &pool, &errs), 0);
    struct json_object *before = NULL, *after = NULL;
    assert_int_equal(desired_pool_objects(&pool, NULL, &before, &errs), 0);
    spec_pool_free(&pool);
    json_object_object_add(json_get(po, "spec.routingPolicy.loadBalancing.weights"), "load",
                           json_object_new_int(9));
    assert_int_equal(spec_pool_parse(po, &pool, &errs), 0);
    assert_int_equal(desired_pool_objects(&pool, NULL, &after, &errs), 0);
    struct json_object *d1 = find(before, "Deployment", "chat-epp");
    struct json_object *d2 = find(after, "Deployment", "chat-epp");
    const char *h1 = json_object_get_string(json_object_object_get(
        json_get(d1, "spec.template.metadata.annotations"), ANNOTATION_CONFIG_HASH));
    const char *h2 = json_object_get_string(json_object_object_get(
        json_get(d2, "spec.template.metadata.annotations"), ANNOTATION_CONFIG_HASH));
    assert_string_not_equal(h1, h2);
    assert_true(desired_needs_update(d1, d2));
    assert_true(desired_needs_update(find(before, "ConfigMap", "chat-epp-config"),
                                     find(after, "ConfigMap", "chat-epp-config")));
    assert_false(desired_needs_update(find(before, "Service", "chat-epp"),
                                      find(after, "Service", "chat-epp")));
    json_object_put(before);
    json_object_put(after);
    spec_pool_free(&pool);
    json_object_put(crs);
}

/* ---- needs_update against API server output ---- */

/* Removes what a real kube-apiserver omits when empty (Go omitempty): "", [], and empty maps;
 * and canonicalizes the quantities of the fixtures as it does. */
static void like_kube(struct json_object *o)
{
    if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++) {
            like_kube(json_object_array_get_idx(o, i));
        }
        return;
    }
    if (!json_object_is_type(o, json_type_object)) {
        return;
    }
    static const char *const quantities[][2] = {
        {"0.5", "500m"}, {"1024Mi", "1Gi"}, {"4000m", "4"}, {"16384Mi", "16Gi"}};
    static const char *const maps[] = {"nodeSelector", "limits", "requests", "annotations"};
    char *drop[64];
    size_t ndrop = 0;
    json_object_object_foreach(o, k, v)
    {
        like_kube(v);
        int empty = (json_object_is_type(v, json_type_string) && !json_object_get_string_len(v)) ||
                    (json_object_is_type(v, json_type_array) && !json_object_array_length(v));
        for (size_t i = 0; i < ARRAY_SIZE(maps); i++) {
            if (strcmp(k, maps[i]) == 0 && json_object_is_type(v, json_type_object) &&
                json_object_object_length(v) == 0) {
                empty = 1;
            }
        }
        if (empty && ndrop < ARRAY_SIZE(drop)) {
            drop[ndrop++] = k;
        }
        if (json_object_is_type(v, json_type_string)) {
            for (size_t i = 0; i < ARRAY_SIZE(quantities); i++) {
                if (strcmp(json_object_get_string(v), quantities[i][0]) == 0) {
                    json_object_set_string(v, quantities[i][1]);
                }
            }
        }
    }
    for (size_t i = 0; i < ndrop; i++) {
        json_object_object_del(o, drop[i]);
    }
}

static void test_needs_update_fixtures(void **state)
{
    (void)state;
    struct json_object *crs = load_items("data/crs.json");
    struct json_object *live = load_items("data/live.json");
    struct json_object *desired = build_all(crs, NULL);
    size_t n = json_object_array_length(desired);
    assert_int_equal(n, json_object_array_length(live));
    assert_true(n >= 30);
    for (size_t i = 0; i < n; i++) {
        struct json_object *d = json_object_array_get_idx(desired, i);
        const char *kind = str(d, "kind"), *name = str(d, "metadata.name");
        struct json_object *l = find(live, kind, name);
        if (!l) {
            fail_msg("%s %s missing from data/live.json (run data/regen.sh)", kind, name);
        }
        if (desired_needs_update(l, d)) {
            fail_msg("%s %s: needs_update on an unchanged object (stale fixture? run "
                     "data/regen.sh)",
                     kind, name);
        }
        /* The same object as a real API server prints it (empty fields omitted, quantities
         * canonical) needs no write either. */
        struct json_object *copy = NULL;
        assert_int_equal(json_object_deep_copy(l, &copy, NULL), 0);
        like_kube(copy);
        if (desired_needs_update(copy, d)) {
            fail_msg("%s %s: needs_update after omitempty/canonicalization", kind, name);
        }
        json_object_put(copy);
    }
    assert_true(desired_needs_update(NULL, json_object_array_get_idx(desired, 0)));
    json_object_put(desired);
    json_object_put(live);
    json_object_put(crs);
}

/* Applies a YAML merge of edits (a JSON path → new value) to a copy of live. */
static struct json_object *edited(struct json_object *live, const char *path, const char *key,
                                  struct json_object *value)
{
    struct json_object *copy = NULL;
    assert_int_equal(json_object_deep_copy(live, &copy, NULL), 0);
    struct json_object *parent = path[0] ? json_get(copy, path) : copy;
    if (!parent) {
        fail_msg("no %s", path);
    }
    if (json_object_is_type(parent, json_type_array)) {
        json_object_array_put_idx(parent, (size_t)strtoul(key, NULL, 10), value);
    } else if (value) {
        json_object_object_add(parent, key, value);
    } else {
        json_object_object_del(parent, key);
    }
    return copy;
}

static void expect_update(struct json_object *live, struct json_object *desired, const char *path,
                          const char *key, struct json_object *value, int want)
{
    struct json_object *l = edited(live, path, key, value);
    if (desired_needs_update(l, desired) != want) {
        fail_msg("edit %s.%s: needs_update should be %d", path, key, want);
    }
    json_object_put(l);
}

static void test_needs_update_changes(void **state)
{
    (void)state;
    struct json_object *crs = load_items("data/crs.json");
    struct json_object *live = load_items("data/live.json");
    struct json_object *desired = build_all(crs, NULL);
    struct json_object *dd = find(desired, "Deployment", "llama-1b-decode");
    struct json_object *ld = find(live, "Deployment", "llama-1b-decode");
    assert_false(desired_needs_update(ld, dd));

    /* Differences in what the operator owns need a write. */
    expect_update(ld, dd, "spec.template.spec.containers[0]", "image",
                  json_object_new_string("tandem-agent:old"), 1);
    expect_update(ld, dd, "spec", "replicas", json_object_new_int(5), 1);
    expect_update(ld, dd, "spec.template.spec.containers[0].args", "7", json_object_new_string("x"),
                  1);
    expect_update(ld, dd, "spec.template.spec.containers[0].resources.limits", "cpu",
                  json_object_new_string("2"), 1);
    expect_update(ld, dd, "spec.template.spec.containers[0].resources.limits", "memory",
                  json_object_new_string("4096Mi"), 0); /* the same quantity */
    expect_update(ld, dd, "spec.template.spec.containers[0].resources.limits", "memory",
                  json_object_new_string("5Gi"), 1);
    expect_update(ld, dd, "spec.template.spec.nodeSelector", "zone", json_object_new_string("a"),
                  1);
    expect_update(ld, dd, "spec.template.metadata.labels", "extra", json_object_new_string("x"), 1);
    expect_update(ld, dd, "spec.template.spec.containers[0].readinessProbe", "periodSeconds",
                  json_object_new_int(30), 1);
    expect_update(ld, dd, "spec.template.spec", "volumes", json_object_new_array(), 1);
    expect_update(ld, dd, "metadata.labels", "tandem.dev/model", NULL, 1);
    expect_update(ld, dd, "metadata", "ownerReferences", NULL, 1);
    expect_update(ld, dd, "spec.strategy.rollingUpdate", "maxSurge", json_object_new_string("1"),
                  1);
    expect_update(ld, dd, "spec.template.metadata.annotations", "tandem.dev/config-hash",
                  json_object_new_string("0000000000000000"), 1);

    /* What others add or the server defaults does not. */
    expect_update(ld, dd, "metadata.labels", "team", json_object_new_string("x"), 0);
    expect_update(ld, dd, "metadata.annotations", "note", json_object_new_string("x"), 0);
    expect_update(ld, dd, "spec.template.metadata.annotations", "kubectl.kubernetes.io/restartedAt",
                  json_object_new_string("2026-01-01T00:00:00Z"), 0);
    expect_update(ld, dd, "spec", "paused", json_object_new_boolean(0), 0);
    expect_update(ld, dd, "spec.template.spec", "priority", json_object_new_int(0), 0);
    expect_update(ld, dd, "status", "readyReplicas", json_object_new_int(2), 0);
    expect_update(ld, dd, "metadata", "resourceVersion", json_object_new_string("999"), 0);

    /* A spec change of the model changes the desired Deployment. */
    struct json_object *mo = find(crs, "InferenceModel", "llama-1b");
    json_object_object_add(json_get(mo, "spec.runtime.config"), "maxModelLen",
                           json_object_new_int(4096));
    struct json_object *desired2 = build_all(crs, NULL);
    assert_true(desired_needs_update(ld, find(desired2, "Deployment", "llama-1b-decode")));
    assert_true(desired_needs_update(ld, find(desired2, "Deployment", "llama-1b-decode")));
    assert_false(desired_needs_update(find(live, "Deployment", "llama-pd-epp"),
                                      find(desired2, "Deployment", "llama-pd-epp")));

    /* HPA-managed Deployments: replicas belong to the HPA. */
    struct json_object *hd = find(desired, "Deployment", "scaled-model-decode");
    struct json_object *hl = find(live, "Deployment", "scaled-model-decode");
    expect_update(hl, hd, "spec", "replicas", json_object_new_int(7), 0);
    struct json_object *hpa_d = find(desired, "HorizontalPodAutoscaler", "scaled-model-decode");
    struct json_object *hpa_l = find(live, "HorizontalPodAutoscaler", "scaled-model-decode");
    expect_update(hpa_l, hpa_d, "spec", "maxReplicas", json_object_new_int(9), 1);

    /* ConfigMap data and Service selectors are owned whole. */
    struct json_object *cd = find(desired, "ConfigMap", "chat-epp-config");
    struct json_object *cl = find(live, "ConfigMap", "chat-epp-config");
    expect_update(cl, cd, "data", "other.yaml", json_object_new_string("x"), 1);
    expect_update(cl, cd, "data", "config.yaml", json_object_new_string("x"), 1);
    struct json_object *sd = find(desired, "Service", "chat-epp");
    struct json_object *sl = find(live, "Service", "chat-epp");
    expect_update(sl, sd, "spec.selector", "app", json_object_new_string("x"), 1);
    expect_update(sl, sd, "spec", "clusterIP", json_object_new_string("10.0.0.9"), 0);
    struct json_object *rd = find(desired, "Role", "chat-epp");
    struct json_object *rl = find(live, "Role", "chat-epp");
    expect_update(rl, rd, "rules[0].verbs", "3", json_object_new_string("delete"), 1);

    json_object_put(desired2);
    json_object_put(desired);
    json_object_put(live);
    json_object_put(crs);
}

/* --print-desired CRS: the desired objects of every pool and model in CRS, as a List. */
static int print_desired(const char *path)
{
    struct json_object *crs = load_items(path);
    struct json_object *items = build_all(crs, NULL);
    struct json_object *list = json_object_new_object();
    json_object_object_add(list, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(list, "kind", json_object_new_string("List"));
    json_object_object_add(list, "items", items);
    struct buf b;
    buf_init(&b, 1 << 24);
    int rc = json_to_buf(list, 1, &b);
    if (rc == 0) {
        printf("%s\n", buf_cstr(&b));
    }
    buf_free(&b);
    json_object_put(list);
    json_object_put(crs);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--print-desired") == 0) {
        return print_desired(argv[2]);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disaggregated_deployments),
        cmocka_unit_test(test_volumes_per_scheme),
        cmocka_unit_test(test_agent_args),
        cmocka_unit_test(test_daemonset),
        cmocka_unit_test(test_autoscaling),
        cmocka_unit_test(test_pool_objects),
        cmocka_unit_test(test_trace_env),
        cmocka_unit_test(test_config_hash_changes),
        cmocka_unit_test(test_needs_update_fixtures),
        cmocka_unit_test(test_needs_update_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
