/*
 * Desired-object builders and the live-vs-desired comparison (see desired.h). Builders are
 * written straight through with a small "json builder" that records allocation failure and
 * checks it once at the end, so the object shapes stay readable.
 */
#include "operator/controller/desired.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/kube/validate.h"
#include "operator/controller/eppconfig.h"

/* ---- json builder: remembers OOM, never leaks ---- */

struct jb {
    int oom;
};

static struct json_object *jb_obj(struct jb *b)
{
    struct json_object *o = json_object_new_object();
    if (!o) {
        b->oom = 1;
    }
    return o;
}

static struct json_object *jb_arr(struct jb *b)
{
    struct json_object *a = json_object_new_array();
    if (!a) {
        b->oom = 1;
    }
    return a;
}

static struct json_object *jb_str(struct jb *b, const char *s)
{
    struct json_object *o = json_object_new_string(s);
    if (!o) {
        b->oom = 1;
    }
    return o;
}

static struct json_object *jb_int(struct jb *b, int64_t v)
{
    struct json_object *o = json_object_new_int64(v);
    if (!o) {
        b->oom = 1;
    }
    return o;
}

static struct json_object *jb_bool(struct jb *b, int v)
{
    struct json_object *o = json_object_new_boolean(v ? 1 : 0);
    if (!o) {
        b->oom = 1;
    }
    return o;
}

/* A deep copy of src (NULL src: NULL without OOM). */
static struct json_object *jb_copy(struct jb *b, struct json_object *src)
{
    struct json_object *dst = NULL;
    if (!src) {
        return NULL;
    }
    if (json_object_deep_copy(src, &dst, NULL) != 0) {
        b->oom = 1;
        return NULL;
    }
    return dst;
}

/* o[key] = v, taking v in every case. A NULL v is an OOM (use jb_put_opt for optional values). */
static void jb_put(struct jb *b, struct json_object *o, const char *key, struct json_object *v)
{
    if (!v) {
        b->oom = 1;
        return;
    }
    if (!o || json_object_object_add(o, key, v) != 0) {
        b->oom = 1;
        json_object_put(v);
    }
}

static void jb_push(struct jb *b, struct json_object *a, struct json_object *v)
{
    if (!v) {
        b->oom = 1;
        return;
    }
    if (!a || json_object_array_add(a, v) != 0) {
        b->oom = 1;
        json_object_put(v);
    }
}

/* Returns o, or NULL (freeing o) when anything failed. */
static struct json_object *jb_done(struct jb *b, struct json_object *o)
{
    if (b->oom) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static struct json_object *jb_str_array(struct jb *b, const char *const *items, size_t n)
{
    struct json_object *a = jb_arr(b);
    for (size_t i = 0; i < n; i++) {
        jb_push(b, a, jb_str(b, items[i]));
    }
    return a;
}

/* ---- names and metadata ---- */

static const char *role_suffix(enum spec_role role)
{
    switch (role) {
    case ROLE_PREFILL:
        return "-prefill";
    case ROLE_DECODE:
        return "-decode";
    case ROLE_BOTH:
        break;
    }
    return "-worker";
}

int desired_workload_name(const struct spec_model *model, enum spec_role role, char *out,
                          size_t outlen)
{
    int w = snprintf(out, outlen, "%s%s", model->name, role_suffix(role));
    return w < 0 || (size_t)w >= outlen ? -ENAMETOOLONG : 0;
}

int desired_pool_object_name(const struct spec_pool *pool, const char *suffix, char *out,
                             size_t outlen)
{
    int w = snprintf(out, outlen, "%s%s", pool->name, suffix);
    return w < 0 || (size_t)w >= outlen ? -ENAMETOOLONG : 0;
}

static struct json_object *owner_ref(struct jb *b, const char *kind, const char *name,
                                     const char *uid)
{
    struct json_object *refs = jb_arr(b), *r = jb_obj(b);
    jb_put(b, r, "apiVersion", jb_str(b, SPEC_API_VERSION));
    jb_put(b, r, "kind", jb_str(b, kind));
    jb_put(b, r, "name", jb_str(b, name));
    jb_put(b, r, "uid", jb_str(b, uid));
    jb_put(b, r, "controller", jb_bool(b, 1));
    jb_put(b, r, "blockOwnerDeletion", jb_bool(b, 1));
    jb_push(b, refs, r);
    return refs;
}

/* {apiVersion, kind, metadata: {name, namespace, labels, ownerReferences}}; labels is taken. */
static struct json_object *new_object(struct jb *b, const char *api_version, const char *kind,
                                      const char *name, const char *ns, struct json_object *labels,
                                      struct json_object *owner_refs)
{
    struct json_object *o = jb_obj(b), *meta = jb_obj(b);
    jb_put(b, o, "apiVersion", jb_str(b, api_version));
    jb_put(b, o, "kind", jb_str(b, kind));
    jb_put(b, meta, "name", jb_str(b, name));
    jb_put(b, meta, "namespace", jb_str(b, ns));
    jb_put(b, meta, "labels", labels);
    jb_put(b, meta, "ownerReferences", owner_refs);
    jb_put(b, o, "metadata", meta);
    return o;
}

static struct json_object *pool_owner(struct jb *b, const struct spec_pool *pool)
{
    return owner_ref(b, SPEC_POOL_KIND, pool->name, pool->uid);
}

static struct json_object *model_owner(struct jb *b, const struct spec_model *model)
{
    return owner_ref(b, SPEC_MODEL_KIND, model->name, model->uid);
}

/* Labels of the pool-level objects (EPP and RBAC). */
static struct json_object *pool_labels(struct jb *b, const struct spec_pool *pool, const char *name,
                                       const char *component)
{
    struct json_object *l = jb_obj(b);
    jb_put(b, l, LABEL_NAME, jb_str(b, name));
    jb_put(b, l, LABEL_COMPONENT, jb_str(b, component));
    jb_put(b, l, LABEL_MANAGED_BY, jb_str(b, MANAGED_BY_OPERATOR));
    jb_put(b, l, LABEL_POOL, jb_str(b, pool->name));
    return l;
}

/* {limits: {...}, requests: {...}} — always both maps, so removing a limit is seen as a change. */
static struct json_object *resources_of(struct jb *b, struct json_object *res)
{
    static const char *const parts[] = {"limits", "requests"};
    struct json_object *r = jb_obj(b);
    for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
        struct json_object *src = NULL;
        json_object_object_get_ex(res, parts[i], &src);
        jb_put(b, r, parts[i], src ? jb_copy(b, src) : jb_obj(b));
    }
    return r;
}

static struct json_object *env_field(struct jb *b, const char *name, const char *path)
{
    struct json_object *e = jb_obj(b), *vf = jb_obj(b), *fr = jb_obj(b);
    jb_put(b, fr, "fieldPath", jb_str(b, path));
    jb_put(b, vf, "fieldRef", fr);
    jb_put(b, e, "name", jb_str(b, name));
    jb_put(b, e, "valueFrom", vf);
    return e;
}

static struct json_object *downward_env(struct jb *b, int node_name)
{
    struct json_object *env = jb_arr(b);
    jb_push(b, env, env_field(b, "POD_NAME", "metadata.name"));
    jb_push(b, env, env_field(b, "POD_NAMESPACE", "metadata.namespace"));
    jb_push(b, env, env_field(b, "POD_IP", "status.podIP"));
    if (node_name) {
        jb_push(b, env, env_field(b, "NODE_NAME", "spec.nodeName"));
    }
    return env;
}

/* The tracing environment of the agent and EPP containers (desired_opts.otlp_traces_endpoint). */
static struct json_object *with_trace_env(struct jb *b, struct json_object *env,
                                          const struct desired_opts *opts)
{
    if (opts && opts->otlp_traces_endpoint) {
        struct json_object *e = jb_obj(b);
        jb_put(b, e, "name", jb_str(b, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
        jb_put(b, e, "value", jb_str(b, opts->otlp_traces_endpoint));
        jb_push(b, env, e);
    }
    return env;
}

static struct json_object *port(struct jb *b, const char *name, int number)
{
    struct json_object *p = jb_obj(b);
    jb_put(b, p, "name", jb_str(b, name));
    jb_put(b, p, "containerPort", jb_int(b, number));
    return p;
}

static struct json_object *http_probe(struct jb *b, const char *path, const char *port_name,
                                      int period, int timeout, int success, int failure)
{
    struct json_object *p = jb_obj(b), *get = jb_obj(b);
    jb_put(b, get, "path", jb_str(b, path));
    jb_put(b, get, "port", jb_str(b, port_name));
    jb_put(b, p, "httpGet", get);
    jb_put(b, p, "periodSeconds", jb_int(b, period));
    jb_put(b, p, "timeoutSeconds", jb_int(b, timeout));
    jb_put(b, p, "successThreshold", jb_int(b, success));
    jb_put(b, p, "failureThreshold", jb_int(b, failure));
    return p;
}

static struct json_object *int_or_percent(struct jb *b, const struct spec_int_or_percent *v)
{
    if (v->is_percent) {
        char s[8];
        snprintf(s, sizeof(s), "%d%%", v->value);
        return jb_str(b, s);
    }
    return jb_int(b, v->value);
}

/* ---- model workloads ---- */

static const char *agent_image(const struct spec_model *model, const struct desired_opts *opts)
{
    if (model->runtime.image) {
        return model->runtime.image;
    }
    return opts && opts->agent_image ? opts->agent_image : DESIRED_DEFAULT_AGENT_IMAGE;
}

static void arg(struct jb *b, struct json_object *args, const char *flag, const char *value)
{
    jb_push(b, args, jb_str(b, flag));
    if (value) {
        jb_push(b, args, jb_str(b, value));
    }
}

static void arg_int(struct jb *b, struct json_object *args, const char *flag, int64_t value)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)value);
    arg(b, args, flag, s);
}

/* A value as compact JSON text (doubles in their shortest round-trip form). */
static void arg_json(struct jb *b, struct json_object *args, const char *flag,
                     struct json_object *value)
{
    struct buf text;
    buf_init(&text, 1 << 20);
    if (!value || json_to_buf(value, 0, &text) != 0) {
        b->oom = 1;
    } else {
        arg(b, args, flag, buf_cstr(&text));
    }
    buf_free(&text);
}

static void arg_double(struct jb *b, struct json_object *args, const char *flag, double value)
{
    struct json_object *d = json_object_new_double(value);
    arg_json(b, args, flag, d);
    json_object_put(d);
}

static void put_double(struct jb *b, struct json_object *o, const char *key,
                       const struct spec_opt_double *v)
{
    if (v->set) {
        struct json_object *d = json_object_new_double(v->value);
        if (!d) {
            b->oom = 1;
            return;
        }
        jb_put(b, o, key, d);
    }
}

/* Path of the model inside the pod. */
static void model_path(const struct spec_model *model, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s", DESIRED_MODEL_DIR, model->source.file_name);
}

struct json_object *desired_agent_args(const struct spec_pool *pool, const struct spec_model *model,
                                       enum spec_role role)
{
    struct jb b = {0};
    struct json_object *args = jb_arr(&b);
    char path[512], pool_ref[256];
    model_path(model, path, sizeof(path));
    snprintf(pool_ref, sizeof(pool_ref), "%s/%s", pool->ns, pool->name);

    arg(&b, args, "serve", NULL);
    arg(&b, args, "--role", spec_role_label(role));
    arg(&b, args, "--model", path);
    arg(&b, args, "--model-format", spec_model_format_name(model->format));
    arg(&b, args, "--served-model-name", model->model_name);
    arg_int(&b, args, "--port", pool->target_port);
    arg_int(&b, args, "--engine-port", SPEC_ENGINE_PORT);
    arg_int(&b, args, "--kv-events-port", SPEC_KV_EVENTS_PORT);
    arg_int(&b, args, "--kv-transfer-port", SPEC_KV_TRANSFER_PORT);
    arg(&b, args, "--inference-pool", pool_ref);
    if (pool->disagg.enabled) {
        arg(&b, args, "--kv-connector", pool->disagg.connector_type);
        if (pool->disagg.connector_config) {
            arg_json(&b, args, "--kv-connector-config", pool->disagg.connector_config);
        }
        arg(&b, args, "--enable-ssrf-protection", NULL);
    }
    if (model->runtime.max_model_len) {
        arg_int(&b, args, "--max-model-len", model->runtime.max_model_len);
    }
    if (model->runtime.max_num_seqs) {
        arg_int(&b, args, "--max-num-seqs", model->runtime.max_num_seqs);
    }
    if (model->runtime.max_num_batched_tokens) {
        arg_int(&b, args, "--max-num-batched-tokens", model->runtime.max_num_batched_tokens);
    }
    arg_int(&b, args, "--block-size", model->runtime.block_size);
    arg(&b, args, "--kv-cache-dtype", model->runtime.kv_cache_dtype);
    arg_int(&b, args, "--tensor-parallel-size", spec_model_tp_size(model));
    if (model->runtime.gpu_memory_utilization > 0) {
        arg_double(&b, args, "--gpu-memory-utilization", model->runtime.gpu_memory_utilization);
    }
    arg(&b, args,
        model->runtime.enable_chunked_prefill ? "--enable-chunked-prefill"
                                              : "--no-enable-chunked-prefill",
        NULL);

    /* inferenceParams → vLLM's --override-generation-config (generation_config key names). */
    struct json_object *gen = jb_obj(&b);
    put_double(&b, gen, "temperature", &model->params.temperature);
    put_double(&b, gen, "top_p", &model->params.top_p);
    if (model->params.top_k_set) {
        jb_put(&b, gen, "top_k", jb_int(&b, model->params.top_k));
    }
    put_double(&b, gen, "min_p", &model->params.min_p);
    put_double(&b, gen, "repetition_penalty", &model->params.repetition_penalty);
    if (model->params.max_tokens) {
        jb_put(&b, gen, "max_new_tokens", jb_int(&b, model->params.max_tokens));
    }
    if (gen && json_object_object_length(gen) > 0) {
        arg_json(&b, args, "--override-generation-config", gen);
    }
    json_object_put(gen);
    return jb_done(&b, args);
}

static struct json_object *model_volume(struct jb *b, const struct spec_model *model)
{
    struct json_object *v = jb_obj(b), *src = jb_obj(b);
    jb_put(b, v, "name", jb_str(b, "model"));
    switch (model->source.kind) {
    case SOURCE_FILE:
        jb_put(b, src, "path", jb_str(b, model->source.host_path));
        jb_put(b, v, "hostPath", src);
        break;
    case SOURCE_PVC:
        jb_put(b, src, "claimName", jb_str(b, model->source.claim));
        jb_put(b, src, "readOnly", jb_bool(b, 1));
        jb_put(b, v, "persistentVolumeClaim", src);
        break;
    case SOURCE_HTTP:
    case SOURCE_HF:
        jb_put(b, v, "emptyDir", src);
        break;
    }
    return v;
}

static int fetched(const struct spec_model *model)
{
    return model->source.kind == SOURCE_HTTP || model->source.kind == SOURCE_HF;
}

/* The agent's mount of the model volume. */
static struct json_object *model_mount(struct jb *b, const struct spec_model *model)
{
    struct json_object *m = jb_obj(b);
    char path[512];
    jb_put(b, m, "name", jb_str(b, "model"));
    if (fetched(model)) {
        jb_put(b, m, "mountPath", jb_str(b, DESIRED_MODEL_DIR));
    } else {
        model_path(model, path, sizeof(path));
        jb_put(b, m, "mountPath", jb_str(b, path));
    }
    jb_put(b, m, "readOnly", jb_bool(b, 1));
    jb_put(b, m, "subPath",
           jb_str(b, model->source.kind == SOURCE_PVC ? model->source.sub_path : ""));
    return m;
}

/* The init container that downloads http(s):// and hf:// models into the emptyDir. */
static struct json_object *fetch_container(struct jb *b, const struct spec_model *model,
                                           const char *image)
{
    struct json_object *c = jb_obj(b), *args = jb_arr(b), *mounts = jb_arr(b), *m = jb_obj(b);
    char path[512];
    model_path(model, path, sizeof(path));
    arg(b, args, "fetch", NULL);
    arg(b, args, "--uri", model->source.uri);
    arg(b, args, "--output", path);
    jb_put(b, m, "name", jb_str(b, "model"));
    jb_put(b, m, "mountPath", jb_str(b, DESIRED_MODEL_DIR));
    jb_push(b, mounts, m);
    jb_put(b, c, "name", jb_str(b, "model-fetch"));
    jb_put(b, c, "image", jb_str(b, image));
    jb_put(b, c, "args", args);
    jb_put(b, c, "env", downward_env(b, 0));
    jb_put(b, c, "volumeMounts", mounts);
    return c;
}

/* The memory-backed emptyDir at /dev/shm (UCX allocates the KV pools in POSIX shared memory; a
 * container's own /dev/shm is 64 MiB). */
static struct json_object *shm_volume(struct jb *b)
{
    struct json_object *v = jb_obj(b), *src = jb_obj(b);
    jb_put(b, src, "medium", jb_str(b, "Memory"));
    jb_put(b, src, "sizeLimit", jb_str(b, DESIRED_SHM_SIZE_LIMIT));
    jb_put(b, v, "name", jb_str(b, DESIRED_SHM_VOLUME));
    jb_put(b, v, "emptyDir", src);
    return v;
}

static struct json_object *shm_mount(struct jb *b)
{
    struct json_object *m = jb_obj(b);
    jb_put(b, m, "name", jb_str(b, DESIRED_SHM_VOLUME));
    jb_put(b, m, "mountPath", jb_str(b, DESIRED_SHM_DIR));
    return m;
}

/* The agent pod template of a role, annotated with its own hash (ANNOTATION_CONFIG_HASH).
 * labels is taken. */
static struct json_object *agent_template(struct jb *b, const struct spec_pool *pool,
                                          const struct spec_model *model, enum spec_role role,
                                          const struct desired_opts *opts,
                                          struct json_object *labels)
{
    char sa[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-agent", sa, sizeof(sa)) != 0) {
        json_object_put(labels);
        b->oom = 1;
        return NULL;
    }
    const struct spec_workers *w = spec_model_workers(model, role);
    const char *image = agent_image(model, opts);
    struct json_object *tmpl = jb_obj(b), *tmeta = jb_obj(b), *pod = jb_obj(b);
    jb_put(b, tmeta, "labels", labels);
    jb_put(b, pod, "serviceAccountName", jb_str(b, sa));
    jb_put(b, pod, "nodeSelector", w->node_selector ? jb_copy(b, w->node_selector) : jb_obj(b));
    jb_put(b, pod, "tolerations", w->tolerations ? jb_copy(b, w->tolerations) : jb_arr(b));
    struct json_object *inits = jb_arr(b);
    if (fetched(model)) {
        jb_push(b, inits, fetch_container(b, model, image));
    }
    jb_put(b, pod, "initContainers", inits);

    struct json_object *c = jb_obj(b), *ports = jb_arr(b), *mounts = jb_arr(b);
    jb_put(b, c, "name", jb_str(b, "agent"));
    jb_put(b, c, "image", jb_str(b, image));
    jb_put(b, c, "args", desired_agent_args(pool, model, role));
    jb_put(b, c, "env", with_trace_env(b, downward_env(b, 1), opts));
    jb_push(b, ports, port(b, "http", pool->target_port));
    jb_push(b, ports, port(b, "engine", SPEC_ENGINE_PORT));
    jb_push(b, ports, port(b, "kv-events", SPEC_KV_EVENTS_PORT));
    jb_push(b, ports, port(b, "kv-transfer", SPEC_KV_TRANSFER_PORT));
    jb_put(b, c, "ports", ports);
    jb_put(b, c, "readinessProbe",
           http_probe(b, pool->health.endpoint, "http", pool->health.interval_s,
                      pool->health.timeout_s, pool->health.success_threshold,
                      pool->health.failure_threshold));
    jb_put(b, c, "resources", resources_of(b, w->resources ? w->resources : model->resources));
    jb_push(b, mounts, model_mount(b, model));
    jb_push(b, mounts, shm_mount(b));
    jb_put(b, c, "volumeMounts", mounts);
    struct json_object *containers = jb_arr(b), *volumes = jb_arr(b);
    jb_push(b, containers, c);
    jb_put(b, pod, "containers", containers);
    jb_push(b, volumes, model_volume(b, model));
    jb_push(b, volumes, shm_volume(b));
    jb_put(b, pod, "volumes", volumes);
    jb_put(b, tmpl, "metadata", tmeta);
    jb_put(b, tmpl, "spec", pod);

    /* The hash of the template (before it is annotated) marks which pods run the current one. */
    if (!b->oom) {
        struct buf text;
        char hash[17];
        buf_init(&text, 1 << 22);
        if (json_to_buf(tmpl, 0, &text) != 0) {
            b->oom = 1;
        } else {
            desired_hash_hex(text.data, text.len, hash);
            struct json_object *ann = jb_obj(b);
            jb_put(b, ann, ANNOTATION_CONFIG_HASH, jb_str(b, hash));
            jb_put(b, tmeta, "annotations", ann);
        }
        buf_free(&text);
    }
    return tmpl;
}

/* spec.selector of a role's workload: role, pool and model. */
static struct json_object *workload_selector(struct jb *b, const struct spec_pool *pool,
                                             const struct spec_model *model, enum spec_role role)
{
    struct json_object *sel = jb_obj(b), *ml = jb_obj(b);
    jb_put(b, ml, LABEL_ROLE, jb_str(b, spec_role_label(role)));
    jb_put(b, ml, LABEL_POOL, jb_str(b, pool->name));
    jb_put(b, ml, LABEL_MODEL, jb_str(b, model->name));
    jb_put(b, sel, "matchLabels", ml);
    return sel;
}

struct json_object *desired_model_deployment(const struct spec_pool *pool,
                                             const struct spec_model *model, enum spec_role role,
                                             const struct desired_opts *opts)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_workload_name(model, role, name, sizeof(name)) != 0) {
        return NULL;
    }
    const struct spec_workers *w = spec_model_workers(model, role);
    struct json_object *labels = spec_pod_labels(pool, model, role);
    if (!labels) {
        return NULL;
    }
    struct json_object *d = new_object(&b, "apps/v1", "Deployment", name, model->ns,
                                       jb_copy(&b, labels), model_owner(&b, model));
    struct json_object *spec = jb_obj(&b);
    if (!pool->autoscaling.enabled) {
        jb_put(&b, spec, "replicas", jb_int(&b, w->replicas));
    }
    jb_put(&b, spec, "selector", workload_selector(&b, pool, model, role));

    struct json_object *strategy = jb_obj(&b), *ru = jb_obj(&b);
    jb_put(&b, strategy, "type", jb_str(&b, "RollingUpdate"));
    jb_put(&b, ru, "maxSurge", int_or_percent(&b, &model->deployment.max_surge));
    jb_put(&b, ru, "maxUnavailable", int_or_percent(&b, &model->deployment.max_unavailable));
    jb_put(&b, strategy, "rollingUpdate", ru);
    jb_put(&b, spec, "strategy", strategy);
    jb_put(&b, spec, "template", agent_template(&b, pool, model, role, opts, labels));
    jb_put(&b, d, "spec", spec);
    return jb_done(&b, d);
}

struct json_object *desired_model_daemonset(const struct spec_pool *pool,
                                            const struct spec_model *model,
                                            const struct desired_opts *opts)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_workload_name(model, ROLE_BOTH, name, sizeof(name)) != 0) {
        return NULL;
    }
    struct json_object *labels = spec_pod_labels(pool, model, ROLE_BOTH);
    if (!labels) {
        return NULL;
    }
    struct json_object *d = new_object(&b, "apps/v1", "DaemonSet", name, model->ns,
                                       jb_copy(&b, labels), model_owner(&b, model));
    struct json_object *spec = jb_obj(&b);
    jb_put(&b, spec, "selector", workload_selector(&b, pool, model, ROLE_BOTH));

    /* A DaemonSet may surge or drop pods during an update, not both: maxUnavailable wins when it
     * is not 0 (validation makes sure one of the two is not 0). */
    const struct spec_int_or_percent zero = {0, 0};
    int surge = model->deployment.max_unavailable.value == 0;
    struct json_object *strategy = jb_obj(&b), *ru = jb_obj(&b);
    jb_put(&b, strategy, "type", jb_str(&b, "RollingUpdate"));
    jb_put(&b, ru, "maxSurge", int_or_percent(&b, surge ? &model->deployment.max_surge : &zero));
    jb_put(&b, ru, "maxUnavailable",
           int_or_percent(&b, surge ? &zero : &model->deployment.max_unavailable));
    jb_put(&b, strategy, "rollingUpdate", ru);
    jb_put(&b, spec, "updateStrategy", strategy);
    jb_put(&b, spec, "template", agent_template(&b, pool, model, ROLE_BOTH, opts, labels));
    jb_put(&b, d, "spec", spec);
    return jb_done(&b, d);
}

struct json_object *desired_model_workload(const struct spec_pool *pool,
                                           const struct spec_model *model, enum spec_role role,
                                           const struct desired_opts *opts)
{
    if (model->deployment.type == DEPLOY_DAEMONSET) {
        return desired_model_daemonset(pool, model, opts);
    }
    return desired_model_deployment(pool, model, role, opts);
}

struct json_object *desired_model_hpa(const struct spec_pool *pool, const struct spec_model *model,
                                      enum spec_role role)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (!pool->autoscaling.enabled || model->deployment.type == DEPLOY_DAEMONSET ||
        desired_workload_name(model, role, name, sizeof(name)) != 0) {
        return NULL;
    }
    struct json_object *labels = spec_pod_labels(pool, model, role);
    if (!labels) {
        return NULL;
    }
    struct json_object *h = new_object(&b, "autoscaling/v2", "HorizontalPodAutoscaler", name,
                                       model->ns, labels, model_owner(&b, model));
    struct json_object *spec = jb_obj(&b), *ref = jb_obj(&b), *metrics = jb_arr(&b);
    jb_put(&b, ref, "apiVersion", jb_str(&b, "apps/v1"));
    jb_put(&b, ref, "kind", jb_str(&b, "Deployment"));
    jb_put(&b, ref, "name", jb_str(&b, name));
    jb_put(&b, spec, "scaleTargetRef", ref);
    jb_put(&b, spec, "minReplicas", jb_int(&b, pool->autoscaling.min_replicas));
    jb_put(&b, spec, "maxReplicas", jb_int(&b, pool->autoscaling.max_replicas));

    /* Per-pod vLLM gauges (custom metrics API, e.g. prometheus-adapter) and CPU. */
    struct {
        const char *metric;
        int target;
        int milli; /* target in thousandths */
    } pods_metrics[] = {
        {"vllm:num_requests_waiting", pool->autoscaling.target_queue_depth,
         pool->autoscaling.target_queue_depth * 1000},
        {"vllm:kv_cache_usage_perc", pool->autoscaling.target_kv_util,
         pool->autoscaling.target_kv_util * 10},
    };
    for (size_t i = 0; i < ARRAY_SIZE(pods_metrics); i++) {
        if (!pods_metrics[i].target) {
            continue;
        }
        char q[32];
        if (pods_metrics[i].milli % 1000 == 0) {
            snprintf(q, sizeof(q), "%d", pods_metrics[i].milli / 1000);
        } else {
            snprintf(q, sizeof(q), "%dm", pods_metrics[i].milli);
        }
        struct json_object *m = jb_obj(&b), *pods = jb_obj(&b), *metric = jb_obj(&b);
        struct json_object *target = jb_obj(&b);
        jb_put(&b, metric, "name", jb_str(&b, pods_metrics[i].metric));
        jb_put(&b, target, "type", jb_str(&b, "AverageValue"));
        jb_put(&b, target, "averageValue", jb_str(&b, q));
        jb_put(&b, pods, "metric", metric);
        jb_put(&b, pods, "target", target);
        jb_put(&b, m, "type", jb_str(&b, "Pods"));
        jb_put(&b, m, "pods", pods);
        jb_push(&b, metrics, m);
    }
    if (pool->autoscaling.target_cpu_util) {
        struct json_object *m = jb_obj(&b), *res = jb_obj(&b), *target = jb_obj(&b);
        jb_put(&b, target, "type", jb_str(&b, "Utilization"));
        jb_put(&b, target, "averageUtilization", jb_int(&b, pool->autoscaling.target_cpu_util));
        jb_put(&b, res, "name", jb_str(&b, "cpu"));
        jb_put(&b, res, "target", target);
        jb_put(&b, m, "type", jb_str(&b, "Resource"));
        jb_put(&b, m, "resource", res);
        jb_push(&b, metrics, m);
    }
    jb_put(&b, spec, "metrics", metrics);
    jb_put(&b, h, "spec", spec);
    return jb_done(&b, h);
}

int desired_model_objects(const struct spec_pool *pool, const struct spec_model *model,
                          const struct desired_opts *opts, struct json_object **out)
{
    enum spec_role roles[3];
    int n = spec_model_roles(model, roles);
    *out = NULL;
    if (n == 0) {
        return -ENOTSUP;
    }
    struct jb b = {0};
    struct json_object *arr = jb_arr(&b);
    for (int i = 0; i < n; i++) {
        jb_push(&b, arr, desired_model_workload(pool, model, roles[i], opts));
    }
    if (pool->autoscaling.enabled && model->deployment.type != DEPLOY_DAEMONSET) {
        for (int i = 0; i < n; i++) {
            jb_push(&b, arr, desired_model_hpa(pool, model, roles[i]));
        }
    }
    *out = jb_done(&b, arr);
    return *out ? 0 : -ENOMEM;
}

/* ---- pool objects ---- */

struct json_object *desired_epp_configmap(const struct spec_pool *pool, const char *config_text)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-epp-config", name, sizeof(name)) != 0) {
        return NULL;
    }
    struct json_object *cm =
        new_object(&b, "v1", "ConfigMap", name, pool->ns,
                   pool_labels(&b, pool, "tandem-epp", "endpoint-picker"), pool_owner(&b, pool));
    struct json_object *data = jb_obj(&b);
    jb_put(&b, data, EPPCONFIG_FILE_KEY, jb_str(&b, config_text));
    jb_put(&b, cm, "data", data);
    return jb_done(&b, cm);
}

struct json_object *desired_epp_deployment(const struct spec_pool *pool,
                                           const struct desired_opts *opts, const char *config_hash)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX], cm[DESIRED_NAME_MAX], file[64];
    if (desired_pool_object_name(pool, "-epp", name, sizeof(name)) != 0 ||
        desired_pool_object_name(pool, "-epp-config", cm, sizeof(cm)) != 0) {
        return NULL;
    }
    snprintf(file, sizeof(file), "%s/%s", DESIRED_EPP_CONFIG_DIR, EPPCONFIG_FILE_KEY);
    const char *image = pool->epp.image           ? pool->epp.image
                        : opts && opts->epp_image ? opts->epp_image
                                                  : DESIRED_DEFAULT_EPP_IMAGE;
    struct json_object *pod_labels = spec_epp_pod_labels(pool);
    if (!pod_labels) {
        return NULL;
    }
    struct json_object *d = new_object(&b, "apps/v1", "Deployment", name, pool->ns,
                                       jb_copy(&b, pod_labels), pool_owner(&b, pool));
    struct json_object *spec = jb_obj(&b), *sel = jb_obj(&b), *ml = jb_obj(&b);
    jb_put(&b, spec, "replicas", jb_int(&b, pool->epp.replicas));
    jb_put(&b, ml, LABEL_NAME, jb_str(&b, "tandem-epp"));
    jb_put(&b, ml, LABEL_POOL, jb_str(&b, pool->name));
    jb_put(&b, sel, "matchLabels", ml);
    jb_put(&b, spec, "selector", sel);

    struct json_object *tmpl = jb_obj(&b), *tmeta = jb_obj(&b), *pod = jb_obj(&b);
    jb_put(&b, tmeta, "labels", pod_labels);
    if (config_hash) {
        /* (no empty annotations map: the API server would drop it and it would never match) */
        struct json_object *ann = jb_obj(&b);
        jb_put(&b, ann, ANNOTATION_CONFIG_HASH, jb_str(&b, config_hash));
        jb_put(&b, tmeta, "annotations", ann);
    }
    jb_put(&b, pod, "serviceAccountName", jb_str(&b, name));

    struct json_object *c = jb_obj(&b), *args = jb_arr(&b), *ports = jb_arr(&b);
    arg(&b, args, "--pool-name", pool->name);
    arg(&b, args, "--pool-namespace", pool->ns);
    arg(&b, args, "--config-file", file);
    jb_put(&b, c, "name", jb_str(&b, "epp"));
    jb_put(&b, c, "image", jb_str(&b, image));
    jb_put(&b, c, "args", args);
    jb_put(&b, c, "env", with_trace_env(&b, downward_env(&b, 0), opts));
    jb_push(&b, ports, port(&b, "http", DESIRED_EPP_HTTP_PORT));
    jb_push(&b, ports, port(&b, "metrics", DESIRED_EPP_METRICS_PORT));
    jb_push(&b, ports, port(&b, "grpc", DESIRED_EPP_GRPC_PORT));
    jb_put(&b, c, "ports", ports);
    jb_put(&b, c, "readinessProbe", http_probe(&b, "/readyz", "metrics", 5, 2, 1, 3));
    jb_put(&b, c, "livenessProbe", http_probe(&b, "/healthz", "metrics", 10, 2, 1, 3));
    jb_put(&b, c, "resources", resources_of(&b, pool->epp.resources));
    struct json_object *mounts = jb_arr(&b), *m = jb_obj(&b);
    jb_put(&b, m, "name", jb_str(&b, "config"));
    jb_put(&b, m, "mountPath", jb_str(&b, DESIRED_EPP_CONFIG_DIR));
    jb_put(&b, m, "readOnly", jb_bool(&b, 1));
    jb_push(&b, mounts, m);
    jb_put(&b, c, "volumeMounts", mounts);
    struct json_object *containers = jb_arr(&b);
    jb_push(&b, containers, c);
    jb_put(&b, pod, "containers", containers);

    /* The config volume: our ConfigMap, or the user's (its key mapped to config.yaml). */
    struct json_object *volumes = jb_arr(&b), *v = jb_obj(&b), *src = jb_obj(&b);
    struct json_object *items = jb_arr(&b), *item = jb_obj(&b);
    jb_put(&b, src, "name", jb_str(&b, pool->routing.cm_name ? pool->routing.cm_name : cm));
    jb_put(&b, item, "key",
           jb_str(&b, pool->routing.cm_name ? pool->routing.cm_key : EPPCONFIG_FILE_KEY));
    jb_put(&b, item, "path", jb_str(&b, EPPCONFIG_FILE_KEY));
    jb_push(&b, items, item);
    jb_put(&b, src, "items", items);
    jb_put(&b, v, "name", jb_str(&b, "config"));
    jb_put(&b, v, "configMap", src);
    jb_push(&b, volumes, v);
    jb_put(&b, pod, "volumes", volumes);
    jb_put(&b, tmpl, "metadata", tmeta);
    jb_put(&b, tmpl, "spec", pod);
    jb_put(&b, spec, "template", tmpl);
    jb_put(&b, d, "spec", spec);
    return jb_done(&b, d);
}

struct json_object *desired_epp_service(const struct spec_pool *pool)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-epp", name, sizeof(name)) != 0) {
        return NULL;
    }
    struct json_object *svc =
        new_object(&b, "v1", "Service", name, pool->ns,
                   pool_labels(&b, pool, "tandem-epp", "endpoint-picker"), pool_owner(&b, pool));
    struct json_object *spec = jb_obj(&b), *sel = jb_obj(&b), *ports = jb_arr(&b);
    jb_put(&b, spec, "type", jb_str(&b, "ClusterIP"));
    jb_put(&b, sel, LABEL_NAME, jb_str(&b, "tandem-epp"));
    jb_put(&b, sel, LABEL_POOL, jb_str(&b, pool->name));
    jb_put(&b, spec, "selector", sel);
    static const struct {
        const char *name;
        int port;
    } svc_ports[] = {{"http", DESIRED_EPP_HTTP_PORT},
                     {"grpc", DESIRED_EPP_GRPC_PORT},
                     {"metrics", DESIRED_EPP_METRICS_PORT}};
    for (size_t i = 0; i < ARRAY_SIZE(svc_ports); i++) {
        struct json_object *p = jb_obj(&b);
        jb_put(&b, p, "name", jb_str(&b, svc_ports[i].name));
        jb_put(&b, p, "port", jb_int(&b, svc_ports[i].port));
        jb_put(&b, p, "targetPort", jb_str(&b, svc_ports[i].name));
        jb_put(&b, p, "protocol", jb_str(&b, "TCP"));
        jb_push(&b, ports, p);
    }
    jb_put(&b, spec, "ports", ports);
    jb_put(&b, svc, "spec", spec);
    return jb_done(&b, svc);
}

struct json_object *desired_service_account(const struct spec_pool *pool, const char *suffix,
                                            const char *component)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, suffix, name, sizeof(name)) != 0) {
        return NULL;
    }
    int agent = strcmp(component, "agent") == 0;
    struct json_object *sa =
        new_object(&b, "v1", "ServiceAccount", name, pool->ns,
                   pool_labels(&b, pool, agent ? "tandem-agent" : "tandem-epp", component),
                   pool_owner(&b, pool));
    return jb_done(&b, sa);
}

static struct json_object *rule_verbs(struct jb *b, const char *group, const char *const *resources,
                                      size_t nres, const char *const *verbs, size_t nverbs)
{
    struct json_object *r = jb_obj(b);
    jb_put(b, r, "apiGroups", jb_str_array(b, &group, 1));
    jb_put(b, r, "resources", jb_str_array(b, resources, nres));
    jb_put(b, r, "verbs", jb_str_array(b, verbs, nverbs));
    return r;
}

/* A read-only rule: get, list, watch. */
static struct json_object *rule(struct jb *b, const char *group, const char *const *resources,
                                size_t nres)
{
    static const char *const verbs[] = {"get", "list", "watch"};
    return rule_verbs(b, group, resources, nres, verbs, ARRAY_SIZE(verbs));
}

struct json_object *desired_epp_role(const struct spec_pool *pool)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-epp", name, sizeof(name)) != 0) {
        return NULL;
    }
    static const char *const core[] = {"pods", "endpoints"};
    static const char *const ours[] = {"inferencepools", "inferencemodels"};
    /* the EPP reports the pool's load averages into status.metrics (a merge patch) */
    static const char *const pool_status[] = {"inferencepools/status"};
    static const char *const patch[] = {"patch"};
    struct json_object *role =
        new_object(&b, "rbac.authorization.k8s.io/v1", "Role", name, pool->ns,
                   pool_labels(&b, pool, "tandem-epp", "endpoint-picker"), pool_owner(&b, pool));
    struct json_object *rules = jb_arr(&b);
    jb_push(&b, rules, rule(&b, "", core, ARRAY_SIZE(core)));
    jb_push(&b, rules, rule(&b, SPEC_GROUP, ours, ARRAY_SIZE(ours)));
    jb_push(&b, rules, rule_verbs(&b, SPEC_GROUP, pool_status, 1, patch, 1));
    jb_put(&b, role, "rules", rules);
    return jb_done(&b, role);
}

/* A RoleBinding of Role name to ServiceAccount name (both named name). */
static struct json_object *role_binding(const struct spec_pool *pool, const char *name,
                                        const char *app, const char *component)
{
    struct jb b = {0};
    struct json_object *rb =
        new_object(&b, "rbac.authorization.k8s.io/v1", "RoleBinding", name, pool->ns,
                   pool_labels(&b, pool, app, component), pool_owner(&b, pool));
    struct json_object *ref = jb_obj(&b), *subjects = jb_arr(&b), *s = jb_obj(&b);
    jb_put(&b, ref, "apiGroup", jb_str(&b, "rbac.authorization.k8s.io"));
    jb_put(&b, ref, "kind", jb_str(&b, "Role"));
    jb_put(&b, ref, "name", jb_str(&b, name));
    jb_put(&b, s, "kind", jb_str(&b, "ServiceAccount"));
    jb_put(&b, s, "name", jb_str(&b, name));
    jb_put(&b, s, "namespace", jb_str(&b, pool->ns));
    jb_push(&b, subjects, s);
    jb_put(&b, rb, "roleRef", ref);
    jb_put(&b, rb, "subjects", subjects);
    return jb_done(&b, rb);
}

struct json_object *desired_epp_role_binding(const struct spec_pool *pool)
{
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-epp", name, sizeof(name)) != 0) {
        return NULL;
    }
    return role_binding(pool, name, "tandem-epp", "endpoint-picker");
}

/* The agent's SSRF allowlist reads its pool (for spec.selector) and the pool's pods: exactly
 * get/list/watch on those two. */
struct json_object *desired_agent_role(const struct spec_pool *pool)
{
    struct jb b = {0};
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-agent", name, sizeof(name)) != 0) {
        return NULL;
    }
    static const char *const core[] = {"pods"};
    static const char *const ours[] = {"inferencepools"};
    struct json_object *role =
        new_object(&b, "rbac.authorization.k8s.io/v1", "Role", name, pool->ns,
                   pool_labels(&b, pool, "tandem-agent", "agent"), pool_owner(&b, pool));
    struct json_object *rules = jb_arr(&b);
    jb_push(&b, rules, rule(&b, "", core, ARRAY_SIZE(core)));
    jb_push(&b, rules, rule(&b, SPEC_GROUP, ours, ARRAY_SIZE(ours)));
    jb_put(&b, role, "rules", rules);
    return jb_done(&b, role);
}

struct json_object *desired_agent_role_binding(const struct spec_pool *pool)
{
    char name[DESIRED_NAME_MAX];
    if (desired_pool_object_name(pool, "-agent", name, sizeof(name)) != 0) {
        return NULL;
    }
    return role_binding(pool, name, "tandem-agent", "agent");
}

int desired_pool_objects(const struct spec_pool *pool, const struct desired_opts *opts,
                         struct json_object **out, struct spec_errors *errs)
{
    struct buf text;
    char hash[17];
    const char *config_hash = NULL;
    *out = NULL;
    buf_init(&text, EPPCONFIG_MAX_TEXT);
    int rc = eppconfig_render(pool, &text, errs);
    if (rc != 0 && rc != -ENOENT) {
        buf_free(&text);
        return rc == -ENOSPC ? -EINVAL : rc;
    }
    int have_config = rc == 0;
    if (have_config) {
        desired_hash_hex(buf_cstr(&text), text.len, hash);
        config_hash = hash;
    }
    struct jb b = {0};
    struct json_object *arr = jb_arr(&b);
    jb_push(&b, arr, desired_service_account(pool, "-epp", "endpoint-picker"));
    jb_push(&b, arr, desired_service_account(pool, "-agent", "agent"));
    jb_push(&b, arr, desired_epp_role(pool));
    jb_push(&b, arr, desired_epp_role_binding(pool));
    jb_push(&b, arr, desired_agent_role(pool));
    jb_push(&b, arr, desired_agent_role_binding(pool));
    if (have_config) {
        jb_push(&b, arr, desired_epp_configmap(pool, buf_cstr(&text)));
    }
    jb_push(&b, arr, desired_epp_deployment(pool, opts, config_hash));
    jb_push(&b, arr, desired_epp_service(pool));
    buf_free(&text);
    *out = jb_done(&b, arr);
    return *out ? 0 : -ENOMEM;
}

void desired_hash_hex(const void *data, size_t len, char out[17])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* ---- live vs desired ---- */

/* Maps whose keys the operator owns entirely (extra live keys are a difference). */
static int exact_map_key(const char *key)
{
    static const char *const keys[] = {"labels", "matchLabels", "selector", "nodeSelector",
                                       "data",   "binaryData",  "limits",   "requests"};
    for (size_t i = 0; key && i < ARRAY_SIZE(keys); i++) {
        if (strcmp(key, keys[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Values that are quantities (resource limits/requests, HPA targets, sizes). */
static int quantity_context(const char *key, const char *parent)
{
    if (parent && (strcmp(parent, "limits") == 0 || strcmp(parent, "requests") == 0)) {
        return 1;
    }
    return key && (strcmp(key, "averageValue") == 0 || strcmp(key, "sizeLimit") == 0);
}

static int quantity_of(struct json_object *v, long double *out)
{
    if (json_object_is_type(v, json_type_string)) {
        return kube_parse_quantity(json_object_get_string(v), out);
    }
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        *out = (long double)json_object_get_double(v);
        return 0;
    }
    return -EINVAL;
}

/* A desired value the API server drops or leaves out when it is empty. */
static int is_zero(struct json_object *v, const char *key)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return 1;
    case json_type_boolean:
        return !json_object_get_boolean(v);
    case json_type_int:
        return json_object_get_int64(v) == 0;
    case json_type_double:
        return json_object_get_double(v) == 0;
    case json_type_string:
        return json_object_get_string_len(v) == 0;
    case json_type_array:
        return json_object_array_length(v) == 0;
    case json_type_object: {
        /* An empty map the operator owns whole, or an object of zero values only (e.g.
         * resources {limits: {}, requests: {}}); not an empty struct such as emptyDir: {}. */
        if (json_object_object_length(v) == 0) {
            return exact_map_key(key);
        }
        json_object_object_foreach(v, k, member)
        {
            if (!is_zero(member, k)) {
                return 0;
            }
        }
        return 1;
    }
    }
    return 0;
}

static int is_number(struct json_object *v)
{
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/* 1 when live holds everything want says (see desired_needs_update). */
static int covers(struct json_object *live, struct json_object *want, const char *key,
                  const char *parent, int depth)
{
    if (!want) {
        return 1;
    }
    if (!live) {
        return is_zero(want, key);
    }
    if (depth > 64) {
        return 0;
    }
    if (quantity_context(key, parent) && !json_object_is_type(want, json_type_object)) {
        long double a, b;
        if (quantity_of(live, &a) == 0 && quantity_of(want, &b) == 0) {
            long double scale = fabsl(a) > fabsl(b) ? fabsl(a) : fabsl(b);
            return fabsl(a - b) <= scale * 1e-12L;
        }
    }
    switch (json_object_get_type(want)) {
    case json_type_object: {
        if (!json_object_is_type(live, json_type_object)) {
            return 0;
        }
        json_object_object_foreach(want, k, v)
        {
            struct json_object *lv = NULL;
            json_object_object_get_ex(live, k, &lv);
            if (!covers(lv, v, k, key, depth + 1)) {
                return 0;
            }
        }
        if (exact_map_key(key)) {
            json_object_object_foreach(live, lk, lv)
            {
                (void)lv;
                if (!json_object_object_get_ex(want, lk, NULL)) {
                    return 0;
                }
            }
        }
        return 1;
    }
    case json_type_array: {
        if (!json_object_is_type(live, json_type_array)) {
            return 0;
        }
        size_t n = json_object_array_length(want);
        if (json_object_array_length(live) != n) {
            return 0;
        }
        for (size_t i = 0; i < n; i++) {
            if (!covers(json_object_array_get_idx(live, i), json_object_array_get_idx(want, i), key,
                        parent, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    case json_type_string:
        return json_object_is_type(live, json_type_string) &&
               strcmp(json_object_get_string(live), json_object_get_string(want)) == 0;
    case json_type_int:
    case json_type_double:
        return is_number(live) && json_object_get_double(live) == json_object_get_double(want);
    case json_type_boolean:
        return json_object_is_type(live, json_type_boolean) &&
               !json_object_get_boolean(live) == !json_object_get_boolean(want);
    case json_type_null:
        return 1;
    }
    return 0;
}

/* Every desired ownerReference (matched by uid) is present with the same fields. */
static int owner_refs_present(struct json_object *live, struct json_object *want)
{
    size_t n =
        want && json_object_is_type(want, json_type_array) ? json_object_array_length(want) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *w = json_object_array_get_idx(want, i), *uid = NULL;
        json_object_object_get_ex(w, "uid", &uid);
        int found = 0;
        size_t m =
            live && json_object_is_type(live, json_type_array) ? json_object_array_length(live) : 0;
        for (size_t j = 0; j < m && !found; j++) {
            struct json_object *l = json_object_array_get_idx(live, j), *luid = NULL;
            json_object_object_get_ex(l, "uid", &luid);
            if (uid && luid && json_object_is_type(luid, json_type_string) &&
                strcmp(json_object_get_string(uid), json_object_get_string(luid)) == 0) {
                found = covers(l, w, "ownerReference", NULL, 0);
            }
        }
        if (!found) {
            return 0;
        }
    }
    return 1;
}

/* Every desired entry of a string map (labels, annotations) is present in live. */
static int map_entries_present(struct json_object *live, struct json_object *want)
{
    if (!want || !json_object_is_type(want, json_type_object)) {
        return 1;
    }
    json_object_object_foreach(want, k, v)
    {
        struct json_object *lv = NULL;
        if (!live || !json_object_object_get_ex(live, k, &lv)) {
            return 0;
        }
        if (!covers(lv, v, k, NULL, 0)) {
            return 0;
        }
    }
    return 1;
}

int desired_needs_update(struct json_object *live, struct json_object *desired)
{
    if (!live || !json_object_is_type(live, json_type_object)) {
        return 1;
    }
    if (!desired || !json_object_is_type(desired, json_type_object)) {
        return 0;
    }
    struct json_object *dmeta = NULL, *lmeta = NULL;
    json_object_object_get_ex(desired, "metadata", &dmeta);
    json_object_object_get_ex(live, "metadata", &lmeta);
    if (dmeta) {
        static const char *const maps[] = {"labels", "annotations"};
        for (size_t i = 0; i < ARRAY_SIZE(maps); i++) {
            struct json_object *d = NULL, *l = NULL;
            json_object_object_get_ex(dmeta, maps[i], &d);
            json_object_object_get_ex(lmeta, maps[i], &l);
            if (!map_entries_present(l, d)) {
                return 1;
            }
        }
        struct json_object *d = NULL, *l = NULL;
        json_object_object_get_ex(dmeta, "ownerReferences", &d);
        json_object_object_get_ex(lmeta, "ownerReferences", &l);
        if (!owner_refs_present(l, d)) {
            return 1;
        }
    }
    json_object_object_foreach(desired, key, want)
    {
        if (strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0 ||
            strcmp(key, "metadata") == 0 || strcmp(key, "status") == 0) {
            continue;
        }
        struct json_object *lv = NULL;
        json_object_object_get_ex(live, key, &lv);
        if (!covers(lv, want, key, NULL, 0)) {
            return 1;
        }
    }
    return 0;
}
