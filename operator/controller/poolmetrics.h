/*
 * Health gauges of the pools the operator manages, rendered at scrape time (kube-state-metrics
 * style) from objects in the informer cache, so they can never disagree with the API and a
 * deleted pool leaves no stale series: the InferencePools' status (conditions and pod counts, as
 * the leader's reconciler wrote them) and the agent Deployments / DaemonSets the operator owns
 * (desired, ready and available replicas per role). manager.c appends this to /metrics; the alert
 * TandemPoolDegraded (manifests/monitoring/) reads it. Families (docs/monitoring.md):
 *
 *   tandem_operator_pool_status_condition{namespace,pool,condition}   1 while the condition
 *       (Ready, Progressing, Degraded, ...) is "True", else 0; absent until the pool has it
 *   tandem_operator_pool_pods{namespace,pool,state}   state total | available | unhealthy
 *   tandem_operator_workload_replicas{namespace,pool,model,role,state}   state desired | ready |
 *       available; role is the llm-d.ai/role label (prefill, decode, both)
 *
 * The labels namespace and pool name the pool, not the operator's pod: a scrape config keeps
 * them with honor_labels (the ServiceMonitor in manifests/monitoring/ sets honorLabels: true).
 * Pure: no I/O, no global state; unit-tested in tests/test_poolmetrics.c.
 */
#ifndef TANDEM_OPERATOR_POOLMETRICS_H
#define TANDEM_OPERATOR_POOLMETRICS_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/buf.h"

/*
 * Appends the three families in the text exposition format 0.0.4 to out: HELP and TYPE lines
 * always, one sample per series. pools are InferencePool objects; workloads are Deployments and
 * DaemonSets (any others, and those not labelled app.kubernetes.io/name=tandem-agent with a
 * tandem.dev/pool label, are skipped). Objects are borrowed; fields of the wrong type are treated
 * as absent. 0, -ENOMEM, or -ENOSPC when out is full.
 */
int poolmetrics_render(struct json_object *const *pools, size_t npools,
                       struct json_object *const *workloads, size_t nworkloads, struct buf *out);

#endif /* TANDEM_OPERATOR_POOLMETRICS_H */
