/*
 * The agent's KV connector: joins the engine's scheduling half of P/D KV transfer
 * (engine_kv_connector in engine/core/engine.h) to the UCX transport (agent/kvxfer.h).
 *
 *   producer: kvx serves the engine's KV pools on the side channel; a decoder's notification
 *             "<remote_request_id>:<tp>" frees the held blocks (engine_kv_release);
 *   consumer: a load becomes kvx_pull (or kvx_notify when no block is missing); its end goes
 *             back to the engine (engine_kv_load_done) and into the transfer metrics.
 *
 * The engine id is a fresh UUID per process, so a restarted producer is told apart from its
 * previous life (a decoder's cached metadata for the old id is refused and refreshed).
 */
#ifndef TANDEM_AGENT_KVCONN_H
#define TANDEM_AGENT_KVCONN_H

#include "engine/core/engine.h"
#include "lib/metrics.h"

struct kvconn_config {
    const char *host;      /* side-channel address (the pod IP): remote_host of our answers */
    int port;              /* side-channel port (5600) */
    double hold_timeout_s; /* held blocks freed after this; 0: 480 */
    bool enforce_compat;   /* a peer with another compatibility hash is refused (default true) */
    bool block_checksum;   /* consumer: per-block checksums with one retry (Tandem extension) */
    bool wire_int8;        /* consumer: pull F16 blocks as int8 + row scales (Tandem extension) */
    struct metrics_registry *metrics; /* transfer metrics; NULL: none */
};

struct kvconn;

/* Moves the engine's KV pools into memory UCX allocates (shared memory that a decoder on the
 * same host reads one-sided; engine_kv_adopt_pools) or, where the engine cannot move them,
 * registers them where they are; binds the side channel and attaches itself as the engine's
 * connector. Before engine_start and the first request. NULL + err on failure (a taken port
 * names it). */
struct kvconn *kvconn_new(engine *e, const struct kvconn_config *c, char *err, size_t errlen);

/* This engine's id (remote_engine_id of its answers). */
const char *kvconn_engine_id(const struct kvconn *k);

/* Stops the transport: loads still running end as failures (the engine prefills those
 * requests, or frees aborted ones). Call after engine_stop, before engine_free. NULL is fine. */
void kvconn_free(struct kvconn *k);

#endif
