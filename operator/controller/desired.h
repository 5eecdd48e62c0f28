/*
 * Desired objects: pure functions from a parsed (valid) InferencePool / InferenceModel to the
 * Kubernetes objects the operator keeps in the cluster, as json-c objects ready to send, and the
 * comparison that decides whether a live object needs a write. What is created, with which names,
 * labels, owner references and agent command line: docs/operator-workloads.md.
 *
 * Per model: Deployments "<model>-prefill" and "<model>-decode" (Disaggregated), "<model>-worker"
 * (Unified), or the DaemonSet "<model>-worker" (DaemonSet) running tandem-agent, and one
 * HorizontalPodAutoscaler per Deployment when the pool has spec.autoscaling (none for a
 * DaemonSet, whose size follows its nodes). Every agent pod template is the same whichever the
 * workload kind: labels, args, probes, the model volume and a memory-backed /dev/shm. Per pool:
 * ServiceAccounts "<pool>-epp" and "<pool>-agent", Role and RoleBinding "<pool>-epp", ConfigMap
 * "<pool>-epp-config" (unless configMapRef), the EPP Deployment and Service "<pool>-epp". Every
 * object carries an ownerReference (controller: true, blockOwnerDeletion: true) to its
 * InferencePool or InferenceModel, so deletion cascades.
 *
 * Ownership: builders return new references (json_object_put), or NULL on OOM; arrays from the
 * *_objects functions own their elements. Inputs are only read.
 */
#ifndef TANDEM_OPERATOR_DESIRED_H
#define TANDEM_OPERATOR_DESIRED_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/version.h"
#include "operator/controller/spec.h"

/* The default images carry the project version (project(VERSION) in CMakeLists.txt), the tag
 * scripts/images.sh builds and manifests/ use (docs/images.md; images/tests/versions.sh). */
#define DESIRED_DEFAULT_AGENT_IMAGE "tandem-agent:" TANDEM_VERSION
#define DESIRED_DEFAULT_EPP_IMAGE   "tandem-epp:" TANDEM_VERSION
#define DESIRED_MODEL_DIR           "/models"  /* model volume mount point in agent pods */
#define DESIRED_EPP_CONFIG_DIR      "/etc/epp" /* EPP config volume mount point */
/* The agent's /dev/shm: a memory-backed emptyDir, as UCX allocates the KV pools in POSIX shared
 * memory and a container's own /dev/shm is 64 MiB. The limit is twice the engine's default KV
 * cache budget (--kv-cache-memory, 1 GiB): the pools plus UCX's own segments. Pages count against
 * the container's memory limit only as they are written. */
#define DESIRED_SHM_DIR          "/dev/shm"
#define DESIRED_SHM_VOLUME       "dshm"
#define DESIRED_SHM_SIZE_LIMIT   "2Gi"
#define DESIRED_EPP_HTTP_PORT    8080
#define DESIRED_EPP_METRICS_PORT 9090
#define DESIRED_EPP_GRPC_PORT    9002
#define ANNOTATION_CONFIG_HASH   "tandem.dev/config-hash"
#define DESIRED_NAME_MAX         254 /* buffer size for object names */

struct desired_opts {
    const char *agent_image; /* image of model workloads without runtime.image; NULL: default */
    const char *epp_image;   /* EPP image when the pool has no epp.image; NULL: default */
    /* OTLP/HTTP traces URL given to agent and EPP pods as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
     * (docs/tracing.md); NULL: none, the pods trace only if their image's env says so. */
    const char *otlp_traces_endpoint;
};

/* "<model>-prefill", "<model>-decode" or "<model>-worker". 0, or -ENAMETOOLONG. */
int desired_workload_name(const struct spec_model *model, enum spec_role role, char *out,
                          size_t outlen);

/* "<pool><suffix>" (suffix "-epp", "-epp-config", "-agent"). 0, or -ENAMETOOLONG. */
int desired_pool_object_name(const struct spec_pool *pool, const char *suffix, char *out,
                             size_t outlen);

/* The tandem-agent container's args for a role (a new array of strings): the command-line
 * contract of docs/operator-workloads.md. */
struct json_object *desired_agent_args(const struct spec_pool *pool, const struct spec_model *model,
                                       enum spec_role role);

/* The Deployment of one worker role of a model. */
struct json_object *desired_model_deployment(const struct spec_pool *pool,
                                             const struct spec_model *model, enum spec_role role,
                                             const struct desired_opts *opts);

/* The DaemonSet "<model>-worker" of a model of type DaemonSet: the ROLE_BOTH pod template of the
 * Deployment form (placed by deployment.daemonSet), no replicas, updateStrategy RollingUpdate
 * from deployment.rollout (maxUnavailable when it is not 0, else maxSurge). */
struct json_object *desired_model_daemonset(const struct spec_pool *pool,
                                            const struct spec_model *model,
                                            const struct desired_opts *opts);

/* The workload of one role: desired_model_daemonset for type DaemonSet, else
 * desired_model_deployment. */
struct json_object *desired_model_workload(const struct spec_pool *pool,
                                           const struct spec_model *model, enum spec_role role,
                                           const struct desired_opts *opts);

/* The HorizontalPodAutoscaler (autoscaling/v2) of one worker role; NULL also when the pool has
 * no autoscaling (check pool->autoscaling.enabled first) or the model is a DaemonSet. */
struct json_object *desired_model_hpa(const struct spec_pool *pool, const struct spec_model *model,
                                      enum spec_role role);

/* Every object of a model, in creation order (Deployments or the DaemonSet, then HPAs), as a new
 * array in *out.
 * 0, -ENOTSUP (MultiNode), -ENOMEM. */
int desired_model_objects(const struct spec_pool *pool, const struct spec_model *model,
                          const struct desired_opts *opts, struct json_object **out);

/* Pool objects. config_hash (may be NULL) goes into the EPP pod template annotation
 * ANNOTATION_CONFIG_HASH, so a config change rolls the EPP. */
struct json_object *desired_epp_configmap(const struct spec_pool *pool, const char *config_text);
struct json_object *desired_epp_deployment(const struct spec_pool *pool,
                                           const struct desired_opts *opts,
                                           const char *config_hash);
struct json_object *desired_epp_service(const struct spec_pool *pool);
/* ServiceAccount "<pool><suffix>"; component labels what uses it ("endpoint-picker", "agent"). */
struct json_object *desired_service_account(const struct spec_pool *pool, const char *suffix,
                                            const char *component);
struct json_object *desired_epp_role(const struct spec_pool *pool);
struct json_object *desired_epp_role_binding(const struct spec_pool *pool);
/* The agent's Role (get/list/watch pods and the pool: its SSRF allowlist) and RoleBinding. */
struct json_object *desired_agent_role(const struct spec_pool *pool);
struct json_object *desired_agent_role_binding(const struct spec_pool *pool);

/*
 * Every object of a pool in creation order (ServiceAccounts, Role, RoleBinding, ConfigMap unless
 * configMapRef, EPP Deployment, Service) as a new array in *out. The EPP config is rendered with
 * eppconfig_render; its hash annotates the EPP pod template. 0, -EINVAL (invalid inline config,
 * errs filled), -ENOMEM.
 */
int desired_pool_objects(const struct spec_pool *pool, const struct desired_opts *opts,
                         struct json_object **out, struct spec_errors *errs);

/* 64-bit FNV-1a of data as 16 lower-case hex digits (out has room for 17 bytes). */
void desired_hash_hex(const void *data, size_t len, char out[17]);

/*
 * 1 when live (an object as the API server returns it; NULL = absent) differs from desired in
 * what the operator owns, so a write is needed; 0 when a write would change nothing.
 * Compared: metadata.labels and metadata.annotations (desired entries must be present; others
 * are left alone), metadata.ownerReferences (desired ones present, by uid), and every field under
 * the other top-level keys of desired (spec, data, rules, roleRef, subjects...), where fields
 * only live has are server defaults and ignored, except inside maps the operator owns whole
 * (labels, matchLabels, selector, nodeSelector, data, resource limits/requests), whose keys must
 * match exactly. Lists compare element by element; quantities compare by value ("1Gi" ==
 * "1024Mi"); a desired zero value ("", 0, false, [], or {} for those maps) matches an absent
 * field. apiVersion, kind, status and server-set metadata are ignored.
 */
int desired_needs_update(struct json_object *live, struct json_object *desired);

#endif /* TANDEM_OPERATOR_DESIRED_H */
