/*
 * The InferenceModel reconciler: level-triggered and idempotent. From the model and its pool
 * (both read from the cache) it computes the role Deployments ("<model>-prefill" and
 * "<model>-decode", or "<model>-worker") and, when the pool autoscales, one HPA per Deployment;
 * makes the cluster hold them (apply.h; spec.replicas is left to the HPA when there is one),
 * deletes the role Deployments and HPAs no longer wanted (e.g. after Disaggregated → Unified),
 * and writes status (deploymentStatus and Ready / Progressing / Degraded) when it changed.
 *
 * Problems that stop it before any workload is touched: InvalidSpec, MultiNodeNotSupported,
 * PoolNotFound (looked at again every 30 s, and at once when the pool appears), PoolInvalid.
 */
#ifndef TANDEM_OPERATOR_RECONCILE_MODEL_H
#define TANDEM_OPERATOR_RECONCILE_MODEL_H

#include "operator/controller/reconcile.h"

/* How long a model whose pool is missing waits before looking again. */
#define RECONCILE_MODEL_RECHECK_MS 30000

/* Reconciles the model ns/name (a reconcile_fn); return values as reconcile_pool. */
int reconcile_model(struct reconcile_ctx *ctx, const char *ns, const char *name,
                    struct reconcile_result *res);

#endif /* TANDEM_OPERATOR_RECONCILE_MODEL_H */
