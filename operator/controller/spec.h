/*
 * InferencePool and InferenceModel (tandem.dev/v1alpha1) as C structs: parsed from the JSON the
 * API server returns (or from a manifest), with the CRD defaults applied again so nothing depends
 * on the server having defaulted the object, and validated beyond the OpenAPI schema (the
 * cross-field rules a schema cannot say). The reconciler turns a failed validation into a
 * condition whose message lists every {field, message} pair, and touches no workload.
 *
 * Field meanings, defaults and limits: docs/crd-reference.md (kept in step with this file and
 * crds/inference*.yaml).
 *
 * Ownership: a parsed spec holds a reference to the JSON object it came from; every string and
 * json_object pointer in it is borrowed from that object (or is a static default) and lives until
 * spec_pool_free / spec_model_free, except the few fields marked "owned".
 */
#ifndef TANDEM_OPERATOR_SPEC_H
#define TANDEM_OPERATOR_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/common.h"

#define SPEC_GROUP       "tandem.dev"
#define SPEC_VERSION     "v1alpha1"
#define SPEC_API_VERSION "tandem.dev/v1alpha1"
#define SPEC_POOL_KIND   "InferencePool"
#define SPEC_MODEL_KIND  "InferenceModel"

/* Labels (docs/contracts.md). */
#define LABEL_ROLE          "llm-d.ai/role"
#define LABEL_POOL          "tandem.dev/pool"
#define LABEL_MODEL         "tandem.dev/model"
#define LABEL_MANAGED_BY    "app.kubernetes.io/managed-by"
#define LABEL_NAME          "app.kubernetes.io/name"
#define LABEL_COMPONENT     "app.kubernetes.io/component"
#define LABEL_ENGINE_TYPE   "inference.networking.k8s.io/engine-type"
#define MANAGED_BY_OPERATOR "tandem-operator"

/* Condition types and reasons the operator writes (docs/crd-reference.md, "Conditions"). */
#define COND_READY       "Ready"
#define COND_PROGRESSING "Progressing"
#define COND_DEGRADED    "Degraded"

/* Ready=False, Degraded=True: validation failed; the message lists "field: problem" pairs. */
#define REASON_INVALID_SPEC "InvalidSpec"
/* Ready=False: spec.poolRef names no InferencePool (or the pool's spec is invalid). */
#define REASON_POOL_NOT_FOUND "PoolNotFound"
#define REASON_POOL_INVALID   "PoolInvalid"
/* Degraded=True: an API call failed; the reconcile is retried with back-off. */
#define REASON_RECONCILE_ERROR "ReconcileError"
/* Ready=True: requests can be served (see docs/crd-reference.md, "Conditions"). */
#define REASON_AVAILABLE "Available"
/* Ready=False (none) or Degraded=True (fewer than desired): pods not Ready. */
#define REASON_UNAVAILABLE "WorkersUnavailable"
/* Pool Ready=False: no EPP replica is available. */
#define REASON_EPP_UNAVAILABLE "EndpointPickerUnavailable"
/* Progressing=True while a Deployment rolls out or scales; False when done. */
#define REASON_ROLLING_OUT      "RollingOut"
#define REASON_ROLLOUT_COMPLETE "RolloutComplete"
/* Progressing=False, Degraded=True: a Deployment reported ProgressDeadlineExceeded. */
#define REASON_DEADLINE_EXCEEDED "ProgressDeadlineExceeded"
/* Degraded=False. */
#define REASON_AS_EXPECTED "AsExpected"

/* Agent container ports inside every model pod (docs/contracts.md). The pool's targetPort is
 * the serving (sidecar) port and may not collide with the others. */
#define SPEC_ENGINE_PORT      8200
#define SPEC_KV_EVENTS_PORT   5557
#define SPEC_KV_REPLAY_PORT   5558
#define SPEC_KV_TRANSFER_PORT 5600

/* Limits. */
#define SPEC_MAX_ERRORS        16 /* errors kept per validation; the rest are counted */
#define SPEC_MAX_TARGET_MODELS 10
#define SPEC_POOL_NAME_MAX     59 /* "<pool>-epp" must be a DNS-1035 label (63) */
#define SPEC_MODEL_NAME_MAX    63 /* the tandem.dev/model label value */

/* ---- errors ---- */

struct spec_error {
    char field[160];   /* "spec.deployment.decodeWorkers.replicas" */
    char message[256]; /* "must be >= 0" */
};

struct spec_errors {
    int n;       /* entries used in e[] */
    int dropped; /* errors beyond SPEC_MAX_ERRORS, counted only */
    struct spec_error e[SPEC_MAX_ERRORS];
};

void spec_errors_init(struct spec_errors *errs);

/* Adds one error (truncating long text). */
void spec_errors_add(struct spec_errors *errs, const char *field, const char *fmt, ...)
    TANDEM_PRINTF(3, 4);

/* 1 when some error names exactly this field. */
int spec_errors_has(const struct spec_errors *errs, const char *field);

/* Writes "field: message; field: message (and N more)" into out (always NUL-terminated when
 * outlen > 0, truncated to fit). Returns the length the full text needs, like snprintf. */
size_t spec_errors_format(const struct spec_errors *errs, char *out, size_t outlen);

/* ---- shared types ---- */

/* A metav1.LabelSelector. Both members borrowed; either may be NULL (absent). */
struct spec_selector {
    struct json_object *match_labels;      /* object of string → string */
    struct json_object *match_expressions; /* array of {key, operator, values} */
};

/* 1 when labels (an object of string → string; NULL = no labels) satisfy the selector. An empty
 * selector matches everything. The selector must have been validated. */
int spec_selector_matches(const struct spec_selector *sel, struct json_object *labels);

/* Adds to labels (an object) the labels a pod needs to satisfy sel as far as they can be derived:
 * every matchLabels pair, the first value of each In expression, and "" for each Exists
 * expression (keys already present are kept). Returns 0 or -ENOMEM. */
int spec_selector_synthesize(const struct spec_selector *sel, struct json_object *labels);

/* An int-or-string such as maxSurge: 3 or "25%". */
struct spec_int_or_percent {
    int is_percent; /* value is a percentage */
    int value;      /* >= 0; percent in 0..100 */
};

/* ---- InferencePool ---- */

enum spec_routing_type { ROUTING_DYNAMIC, ROUTING_ROUND_ROBIN };

struct spec_pool {
    struct json_object *obj; /* the parsed object (reference held) */
    const char *name;
    const char *ns;     /* metadata.namespace, "default" when absent */
    const char *uid;    /* "" when absent (not created yet) */
    int64_t generation; /* metadata.generation, 0 when absent */

    struct spec_selector selector;
    int target_port; /* default 8000 */

    struct {
        enum spec_routing_type type;   /* default Dynamic */
        const char *scheduler_profile; /* default "default" */
        int has_scheduler_profile;     /* schedulerProfile was given */
        /* endpointPickerConfig: at most one of inline_obj, inline_text, cm_name is set */
        struct json_object *inline_obj; /* inline given as an object */
        const char *inline_text;        /* inline given as a YAML string */
        const char *cm_name;            /* configMapRef.name */
        const char *cm_key;             /* configMapRef.key, default "config.yaml" */
        int has_weights;                /* loadBalancing.weights was given */
        int w_cache_hit;                /* default 3 */
        int w_load;                     /* default 2 */
        int w_latency;                  /* default 2 */
    } routing;

    struct {
        int enabled;
        int has_prefill_selector;
        struct spec_selector prefill_selector;
        int has_decode_selector;
        struct spec_selector decode_selector;
        int64_t threshold;                    /* non-cached prompt tokens, default 512 */
        const char *connector_type;           /* "nixlv2" */
        struct json_object *connector_config; /* borrowed object or NULL */
    } disagg;

    struct {
        const char *endpoint;  /* default "/health" */
        int interval_s;        /* default 5 */
        int timeout_s;         /* default 2 */
        int success_threshold; /* default 1 */
        int failure_threshold; /* default 3 */
    } health;

    struct {
        int enabled; /* spec.autoscaling was given */
        int min_replicas;
        int max_replicas;
        int target_queue_depth; /* 0: unset */
        int target_kv_util;     /* percent, 0: unset */
        int target_cpu_util;    /* percent, 0: unset */
    } autoscaling;

    struct {
        int replicas;                  /* default 1 */
        const char *image;             /* NULL: the operator's default */
        struct json_object *resources; /* borrowed or NULL */
    } epp;
};

/*
 * Parses and validates an InferencePool object (apiVersion/kind are not checked). On 0 the pool
 * is valid. -EINVAL: errs lists every problem found (out is still filled as far as possible and
 * must be freed). -ENOMEM. Always call spec_pool_free on out afterwards.
 */
int spec_pool_parse(struct json_object *obj, struct spec_pool *out, struct spec_errors *errs);
void spec_pool_free(struct spec_pool *pool);

/* ---- InferenceModel ---- */

/* DaemonSet: one agent (role both) on each node deployment.daemonSet.nodeSelector picks, as an
 * apps/v1 DaemonSet instead of a Deployment. */
enum spec_deploy_type { DEPLOY_UNIFIED, DEPLOY_DISAGGREGATED, DEPLOY_MULTINODE, DEPLOY_DAEMONSET };
enum spec_role { ROLE_PREFILL, ROLE_DECODE, ROLE_BOTH };
enum spec_source_kind { SOURCE_FILE, SOURCE_PVC, SOURCE_HTTP, SOURCE_HF };
enum spec_model_format { FORMAT_GGUF, FORMAT_SAFETENSORS };
enum spec_criticality { CRITICALITY_CRITICAL, CRITICALITY_STANDARD, CRITICALITY_SHEDDABLE };

/* "prefill", "decode", "both" (the llm-d.ai/role values). */
const char *spec_role_label(enum spec_role role);
/* "Disaggregated", "Unified", "MultiNode", "DaemonSet". */
const char *spec_deploy_type_name(enum spec_deploy_type type);
/* "gguf", "safetensors". */
const char *spec_model_format_name(enum spec_model_format format);
/* "Critical", "Standard", "Sheddable". */
const char *spec_criticality_name(enum spec_criticality c);

struct spec_workers {
    int present;                       /* the field was given */
    int replicas;                      /* default 1; unused for deployment.daemonSet */
    struct json_object *node_selector; /* borrowed object or NULL */
    struct json_object *tolerations;   /* borrowed array or NULL */
    struct json_object *resources;     /* borrowed or NULL (then the model's resources) */
};

struct spec_opt_double {
    int set;
    double value;
};

struct spec_model {
    struct json_object *obj; /* the parsed object (reference held) */
    const char *name;
    const char *ns;
    const char *uid;
    int64_t generation;

    const char *pool_name;
    const char *pool_group; /* "tandem.dev" */
    const char *pool_kind;  /* "InferencePool" */
    const char *model_name; /* the OpenAI "model" value */

    struct {
        const char *uri;
        enum spec_source_kind kind;
        char *host_path; /* owned; file: the absolute host path */
        char *claim;     /* owned; pvc: the claim name */
        char *sub_path;  /* owned; pvc: path inside the claim ("" = the whole claim) */
        char *file_name; /* owned; last path segment: the model is /models/<file_name> */
    } source;
    enum spec_model_format format; /* given, or inferred from the URI */

    struct {
        const char *image;             /* NULL: the operator's default agent image */
        int max_model_len;             /* 0: unset (engine default) */
        int max_num_seqs;              /* 0: unset */
        int max_num_batched_tokens;    /* 0: unset */
        int block_size;                /* default 16 */
        const char *kv_cache_dtype;    /* default "auto" */
        int tensor_parallel_size;      /* 0: unset */
        double gpu_memory_utilization; /* 0: unset */
        int enable_chunked_prefill;    /* default 1 */
    } runtime;

    struct json_object *resources; /* borrowed or NULL: default for every worker role */
    enum spec_criticality criticality;

    int n_targets;
    struct {
        const char *name;
        int weight; /* default 1 */
    } targets[SPEC_MAX_TARGET_MODELS];

    struct {
        struct spec_opt_double temperature, top_p, min_p, repetition_penalty;
        int top_k_set;
        int top_k;
        int max_tokens; /* 0: unset */
    } params;

    struct {
        enum spec_deploy_type type; /* default Unified */
        struct spec_workers prefill, decode, unified;
        struct spec_workers daemon; /* deployment.daemonSet (type DaemonSet): no replicas */
        int tp_size;                /* tensorParallelism.size, default 1 */
        int nodes_per_replica;      /* default 1 */
        struct spec_int_or_percent max_surge;       /* default 25% */
        struct spec_int_or_percent max_unavailable; /* default 25% */
    } deployment;
};

/*
 * Parses and validates an InferenceModel. 0: valid. -EINVAL: errs lists the problems.
 * -ENOTSUP: the spec is otherwise valid but asks for something not supported yet (deployment.type
 * MultiNode); errs holds that one error. -ENOMEM. Always call spec_model_free afterwards.
 * Whether poolRef names an existing pool is not checked here (see spec_model_check_pool).
 */
int spec_model_parse(struct json_object *obj, struct spec_model *out, struct spec_errors *errs);
void spec_model_free(struct spec_model *model);

/* Tensor-parallel size the engine runs with: runtime.config.tensorParallelSize, else
 * deployment.tensorParallelism.size. */
int spec_model_tp_size(const struct spec_model *model);

/* Worker roles the model's deployment type creates, in a stable order; returns the count
 * (0 for MultiNode; DaemonSet: one, ROLE_BOTH). */
int spec_model_roles(const struct spec_model *model, enum spec_role roles[3]);

/* The workers block of a role (prefill, decode or unified; deployment.daemonSet for ROLE_BOTH of a
 * DaemonSet model). */
const struct spec_workers *spec_model_workers(const struct spec_model *model, enum spec_role role);

/*
 * Checks a valid model against the valid pool it references: same namespace, a Disaggregated
 * model needs the pool's disaggregation, and the labels the operator gives each worker role must
 * satisfy the pool's selector (and the prefill/decode selectors) while keeping prefill and decode
 * pods apart. Returns 0 or -EINVAL with errs filled (fields named as in the model, e.g.
 * "spec.deployment.type", or as "InferencePool <name> spec.selector...").
 */
int spec_model_check_pool(const struct spec_pool *pool, const struct spec_model *model,
                          struct spec_errors *errs);

/*
 * Labels of the pods of a model's workload for a role (a new object): the labels derived from
 * the pool's selector (and the role's prefill/decode selector), then the operator's own labels
 * (role, pool, model, managed-by, name, engine-type), which win.
 */
struct json_object *spec_pod_labels(const struct spec_pool *pool, const struct spec_model *model,
                                    enum spec_role role);

/* Labels of the EPP pods of a pool (a new object). */
struct json_object *spec_epp_pod_labels(const struct spec_pool *pool);

#endif /* TANDEM_OPERATOR_SPEC_H */
