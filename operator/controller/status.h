/*
 * Status of InferencePool and InferenceModel: condition bookkeeping with the semantics of
 * apimachinery's meta.SetStatusCondition, and the status computed from what the reconciler
 * observed (the Deployments it owns and the pods they run). Pure functions, no I/O, so the rules
 * are unit-tested on their own (tests/test_status.c).
 *
 * Conditions (docs/operations.md, "Status"): Ready, Progressing and Degraded, each with a CamelCase
 * reason, a message and observedGeneration. lastTransitionTime changes only when a condition's
 * status changes; reason, message and observedGeneration are always overwritten. Conditions of
 * other types found on the object are kept untouched.
 *
 * A status is a json-c object that starts as a deep copy of the live one (so fields the operator
 * does not compute, e.g. a pool's status.metrics, survive) and is then updated in place; the
 * reconciler writes it through /status only when status_differs says so.
 */
#ifndef TANDEM_OPERATOR_STATUS_H
#define TANDEM_OPERATOR_STATUS_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <json-c/json.h>

#include "operator/controller/spec.h"

/* Reasons beyond spec.h's (docs/operations.md lists them all). */
#define REASON_CONFIGMAP_NOT_FOUND     "ConfigMapNotFound"           /* configMapRef missing */
#define REASON_INVALID_EPP_CONFIG      "InvalidEndpointPickerConfig" /* referenced text invalid */
#define REASON_MULTINODE_NOT_SUPPORTED "MultiNodeNotSupported"       /* deployment.type MultiNode */
#define REASON_OWNERSHIP_CONFLICT      "OwnershipConflict" /* a name is taken by another owner */
#define REASON_PODS_FAILING            "PodsFailing"       /* crash loops, image pull errors */
#define REASON_EPP_UNAVAILABLE         "EndpointPickerUnavailable"
#define STATUS_MESSAGE_MAX             1024 /* bytes of a condition message we write */
#define STATUS_TIME_LEN                21   /* "2006-01-02T15:04:05Z" + NUL */

/* One condition to set. Strings are copied into the conditions array. */
struct status_condition {
    const char *type;   /* "Ready", "Progressing", "Degraded" */
    const char *status; /* "True", "False" or "Unknown" */
    const char *reason; /* CamelCase, non-empty */
    const char *message;
    int64_t observed_generation;
};

/* t as an RFC 3339 UTC time with second precision ("2006-01-02T15:04:05Z", what metav1.Time
 * serializes to) into out (at least STATUS_TIME_LEN bytes). Returns out. */
char *status_format_time(time_t t, char *out, size_t outlen);

/* The condition of this type in conditions (an array; NULL allowed), borrowed, or NULL. */
struct json_object *status_find_condition(struct json_object *conditions, const char *type);

/* 1 when conditions has a condition of this type whose status equals status. */
int status_condition_is(struct json_object *conditions, const char *type, const char *status);

/*
 * meta.SetStatusCondition on status.conditions (created when absent; status must be an object):
 * a new condition is appended with lastTransitionTime = now; an existing one gets
 * lastTransitionTime = now only when its status changes (or it had none); reason, message and
 * observedGeneration are always overwritten. Returns 1 when anything changed, 0 when not,
 * -ENOMEM, -EINVAL (status not an object, a NULL string in c).
 */
int status_set_condition(struct json_object *status, const struct status_condition *c,
                         const char *now);

/*
 * 1 when the two statuses differ in anything (NULL = no status): object members compared by
 * name in any order, arrays element by element, numbers by value (3 == 3.0), strings and
 * booleans exactly. 0 when a write would change nothing.
 */
int status_differs(struct json_object *live_status, struct json_object *new_status);

/* ---- observations ---- */

/* What a reconciler saw of one Deployment (or DaemonSet) it owns. For a DaemonSet the counts are
 * its status's per-node numbers: replicas = desiredNumberScheduled, status_replicas =
 * currentNumberScheduled, updated = updatedNumberScheduled, ready = numberReady, available =
 * numberAvailable. */
struct status_workload {
    const char *name;            /* role label for messages: "prefill", "decode", "worker", "epp" */
    int exists;                  /* the Deployment is in the cluster */
    int daemon;                  /* it is a DaemonSet */
    int replicas;                /* spec.replicas (1 when absent, as the API server defaults) */
    int status_replicas;         /* status.replicas: pods of every ReplicaSet */
    int updated;                 /* status.updatedReplicas */
    int ready;                   /* status.readyReplicas */
    int available;               /* status.availableReplicas */
    int64_t generation;          /* metadata.generation */
    int64_t observed_generation; /* status.observedGeneration */
    int deadline_exceeded;       /* condition Progressing reason ProgressDeadlineExceeded */
};

/* Reads a live Deployment (NULL: absent) into w; name is borrowed. */
void status_workload_from_deployment(struct json_object *deploy, const char *name,
                                     struct status_workload *w);

/* Reads a live DaemonSet (NULL: absent) into w (daemon set); name is borrowed. */
void status_workload_from_daemonset(struct json_object *ds, const char *name,
                                    struct status_workload *w);

/* 1 when every pod the workload wants is ready. A DaemonSet also needs its status to have observed
 * its generation and at least one node picked (0 pods wanted is not "ready"). */
int status_workload_ready(const struct status_workload *w);

/* 1 while the Deployment's rollout is unfinished: not observed yet (observedGeneration <
 * generation), fewer updated pods than wanted, or old pods still around. An absent Deployment is
 * "rolling out" (being created). */
int status_workload_rolling(const struct status_workload *w);

/* Pods of a pool or model, counted by status_count_pod. */
struct status_pods {
    int total;                /* not terminating */
    int ready;                /* condition Ready=True */
    int running_unready;      /* phase Running but not Ready */
    int failing;              /* crash looping, image pull errors, phase Failed */
    char failing_detail[256]; /* the first failing pod: "pod x: CrashLoopBackOff" */
};

/* Counts one pod (a core/v1 Pod). Pods with a deletionTimestamp are not counted. */
void status_count_pod(struct status_pods *p, struct json_object *pod);

/* ---- whole statuses ---- */

/*
 * A problem that stops reconciliation before any workload is touched (invalid spec, missing pool
 * or ConfigMap, unsupported type): Ready=False, Progressing=False and Degraded=True, all with this
 * reason and message; status.observedGeneration = generation. Other fields are left as they are.
 * Returns 1 changed / 0 / negative errno.
 */
int status_set_problem(struct json_object *status, int64_t generation, const char *reason,
                       const char *message, const char *now);

struct status_pool_input {
    int64_t generation;
    struct status_pods pods;    /* pods selected by the pool */
    struct status_workload epp; /* the EPP Deployment */
    const char *error_reason;   /* non-NULL: this reconcile failed (Degraded=True) */
    const char *error_message;
};

/* status.observedGeneration, totalPods, availablePods, unhealthyPods and the three conditions of
 * a valid pool. Returns 1 changed / 0 / negative errno. */
int status_pool_compute(struct json_object *status, const struct status_pool_input *in,
                        const char *now);

struct status_model_input {
    int64_t generation;
    enum spec_deploy_type type;  /* Disaggregated or Unified */
    int n;                       /* workloads in w */
    struct status_workload w[3]; /* one per role, in spec_model_roles order */
    enum spec_role roles[3];     /* the role of w[i] */
    struct status_pods pods;     /* pods of the model */
    const char *error_reason;    /* non-NULL: this reconcile failed */
    const char *error_message;
};

/* status.observedGeneration, deploymentStatus {prefill|decode|unifiedWorkersReady, desiredPods,
 * updatedPods, totalPods} and the conditions of a valid model. Returns 1 / 0 / negative errno. */
int status_model_compute(struct json_object *status, const struct status_model_input *in,
                         const char *now);

#endif /* TANDEM_OPERATOR_STATUS_H */
