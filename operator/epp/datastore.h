/*
 * The EPP's datastore: the endpoints of the pool (from the pod watch, or --endpoints) and the
 * InferenceModels served by it, kept on the main loop thread. The scheduler reads the endpoints
 * in place; the scraper writes their metrics; the gateway does the in-flight accounting.
 *
 * An endpoint is keyed by "namespace/name" (the address in --endpoints mode). A pod whose IP or
 * port changes becomes a new endpoint (new id): what the KV index and the prefix index know about
 * the old address no longer applies.
 */
#ifndef TANDEM_OPERATOR_EPP_DATASTORE_H
#define TANDEM_OPERATOR_EPP_DATASTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "operator/epp/endpoint.h"

/* Most targetModels of one InferenceModel (the CRD's maxItems). */
#define EPP_MAX_TARGETS 10

/* What the pod watch (or --endpoints) says about one endpoint. */
struct epp_pod {
    const char *ns;   /* "" in --endpoints mode */
    const char *name; /* pod name, or the address */
    const char *ip;
    int port;
    struct json_object *labels; /* borrowed; copied */
    bool ready;                 /* Ready condition true, not terminating */
    const char *model;          /* InferenceModel name (label tandem.dev/model), or NULL */
};

/* An InferenceModel of the pool. */
struct epp_model {
    char *name;       /* metadata.name (the pods' tandem.dev/model label) */
    char *model_name; /* spec.modelName: the OpenAI "model" value */
    enum epp_criticality criticality;
    int n_targets;
    struct {
        char *name;
        int weight;
    } targets[EPP_MAX_TARGETS];
    int64_t created; /* creationTimestamp (s); the oldest wins a modelName */
};

struct epp_ds_hooks {
    void (*on_added)(void *ud, struct epp_endpoint *ep);
    void (*on_removed)(void *ud, struct epp_endpoint *ep); /* before it is freed */
    void *ud;
};

struct epp_ds;

struct epp_ds *epp_ds_new(const struct epp_ds_hooks *h); /* NULL on OOM; h may be NULL */
void epp_ds_free(struct epp_ds *ds);                     /* removes every endpoint first */

/* Adds or updates an endpoint: 0, -EINVAL (no name, bad IP or port), -ENOMEM. */
int epp_ds_upsert(struct epp_ds *ds, const struct epp_pod *p);
/* Removes the endpoint ns/name if present. */
void epp_ds_remove(struct epp_ds *ds, const char *ns, const char *name);
/* Removes every endpoint. */
void epp_ds_reset(struct epp_ds *ds);

size_t epp_ds_count(const struct epp_ds *ds);
struct epp_endpoint *epp_ds_at(struct epp_ds *ds, size_t i);
/* The endpoint with this "ip:port" address, or NULL. */
struct epp_endpoint *epp_ds_by_addr(struct epp_ds *ds, const char *addr);
/* The endpoint with this id, or NULL once it left the pool. */
struct epp_endpoint *epp_ds_by_id(struct epp_ds *ds, uint64_t id);
/* The endpoint ns/name, or NULL. */
struct epp_endpoint *epp_ds_by_name(struct epp_ds *ds, const char *ns, const char *name);

/* Marks endpoints whose metrics are older than threshold_ms (or missing) stale. */
void epp_ds_update_staleness(struct epp_ds *ds, int64_t now_ms, int64_t threshold_ms);

/*
 * Endpoints that may serve a request for model (an InferenceModel name, or NULL for any): ready,
 * not ejected at now_ms, and labelled with that model (endpoints without a model label serve
 * any). At most max into out; returns how many.
 */
int epp_ds_candidates(struct epp_ds *ds, const char *model, int64_t now_ms,
                      struct epp_endpoint **out, int max);
/* Ready endpoints (for readiness and metrics). */
int epp_ds_ready_count(const struct epp_ds *ds);

/* ---- InferenceModels ---- */

/* Adds or replaces the model named m->name (m is copied). 0, -EINVAL, -ENOMEM. */
int epp_ds_model_upsert(struct epp_ds *ds, const struct epp_model *m);
void epp_ds_model_remove(struct epp_ds *ds, const char *name);
size_t epp_ds_model_count(const struct epp_ds *ds);
const struct epp_model *epp_ds_model_at(const struct epp_ds *ds, size_t i);
/* The model serving modelName (the oldest when several claim it), or NULL. */
const struct epp_model *epp_ds_model_for(const struct epp_ds *ds, const char *model_name);

/* An InferenceModel object (tandem.dev/v1alpha1) as an epp_model: strings borrowed from obj
 * (valid while obj lives). 0, or -EINVAL with err naming the field. */
int epp_model_from_object(struct json_object *obj, struct epp_model *out, char *err, size_t errlen);

/* The pod's fields as an epp_pod (strings borrowed from pod); target_port is the pool's. 0, or
 * -EINVAL when the pod has no name or no IP yet (not an endpoint). */
int epp_pod_from_object(struct json_object *pod, int target_port, struct epp_pod *out);

#endif
