/*
 * The InferencePool reconciler: level-triggered and idempotent. From the pool (read from the
 * cache) it computes the objects of desired.h (ServiceAccounts, Role, RoleBinding, the EPP
 * ConfigMap unless configMapRef, the EPP Deployment and Service), makes the cluster hold them
 * (apply.h), deletes what the pool owns but no longer wants, and writes status (observedGeneration,
 * pod counts, Ready / Progressing / Degraded) when it changed. A reconcile that has nothing to
 * change sends no write request.
 *
 * Problems that stop it before any object is touched, each reported as Ready=False /
 * Degraded=True with the reason and a message naming the field: InvalidSpec (spec.h validation),
 * ConfigMapNotFound (configMapRef names no ConfigMap, or it lacks the key; looked at again every
 * 30 s), InvalidEndpointPickerConfig (the referenced text does not validate).
 */
#ifndef TANDEM_OPERATOR_RECONCILE_POOL_H
#define TANDEM_OPERATOR_RECONCILE_POOL_H

#include "operator/controller/reconcile.h"

/* How long a pool waiting for its referenced ConfigMap waits before looking again. */
#define RECONCILE_POOL_RECHECK_MS 30000

/*
 * Reconciles the pool ns/name (a reconcile_fn): a negative value when it failed, the status
 * saying why when it could be written. A pool that is gone or being deleted is left to garbage
 * collection (0).
 */
int reconcile_pool(struct reconcile_ctx *ctx, const char *ns, const char *name,
                   struct reconcile_result *res);

#endif /* TANDEM_OPERATOR_RECONCILE_POOL_H */
