/*
 * The Kubernetes side of the data layer: the pool's pods (lib/kube/poolwatch: Ready pods enter
 * rotation, deleted or NotReady ones leave at once) and, for tandem.dev pools, the
 * InferenceModels whose poolRef names the pool (model names, criticality, targetModels). The
 * informers run on their own threads; their events are queued and applied to the datastore on
 * the main loop.
 */
#ifndef TANDEM_OPERATOR_EPP_POOL_H
#define TANDEM_OPERATOR_EPP_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "lib/kube/client.h"
#include "operator/epp/datastore.h"

struct epp_pool;

struct epp_pool_config {
    struct kube_client *client; /* borrowed */
    const char *ns, *name;      /* --pool-namespace, --pool-name */
    const char *group;          /* --pool-group: tandem.dev (default) or GIE's groups */
    int default_port;           /* target port when the pool names none (8000) */
    long sync_timeout_ms;
};

/* Starts the watches and waits for their first sync (bounded). NULL with err on failure. */
struct epp_pool *epp_pool_new(uv_loop_t *loop, struct epp_ds *ds, const struct epp_pool_config *c,
                              char *err, size_t errlen);
/* Whether the pool's watches have synced and their events reached the datastore. */
bool epp_pool_synced(const struct epp_pool *p);
/* Stops the watches and frees; main loop thread. */
void epp_pool_free(struct epp_pool *p);

#endif
