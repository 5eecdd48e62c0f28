/*
 * The agent's KV connector (kvconn.h): engine_kv_connector callbacks over kvx.
 */
#include "agent/kvconn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/kvxfer.h"
#include "lib/common.h"
#include "lib/log.h"
#include "lib/uuid.h"

struct kvconn {
    engine *e;
    struct kvx *x;
    char engine_id[TANDEM_UUID_LEN + 1];
    void **bases;
    size_t *bytes;
    struct metric *m_bytes, *m_seconds, *m_nixl_time, *m_nixl_bytes, *m_failed_xfers,
        *m_failed_notifs, *m_unknown_notifs;
    struct metric *m_sum_retries, *m_sum_failures; /* NULL without block_checksum */
    uint64_t sum_retries, sum_failures;            /* kvx's counts already added (kvx thread) */
};

/* One load on its way through kvx. */
struct load_ctx {
    struct kvconn *k;
    uint64_t id;
    int has_data;
};

/* What makes two engines' KV interchangeable: the architecture, shapes and every tensor's type
 * (another quantisation of the same model computes other KV). */
static void model_identity(const model *m, char *out, size_t outlen)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        for (const char *p = t->name; p && *p; p++) {
            h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
        }
        int64_t vals[5] = {(int64_t)t->type, t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        for (size_t j = 0; j < ARRAY_SIZE(vals); j++) {
            h = (h ^ (uint64_t)vals[j]) * 0x100000001b3ULL;
        }
    }
    const model_config *c = &m->cfg;
    snprintf(out, outlen,
             "arch=%s layers=%d embd=%d heads=%d kv_heads=%d head_dim=%d vocab=%d rope=%g "
             "tensors=%zu digest=%016" PRIx64,
             model_arch_name(c->arch), c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim,
             c->n_vocab, (double)c->rope_base, m->n_tensors, h);
}

static void on_load_done(void *ud, int status, uint64_t bytes, double seconds, const char *error)
{
    struct load_ctx *lc = ud;
    struct kvconn *k = lc->k;
    if (status == 0) {
        if (lc->has_data) {
            if (k->m_bytes) {
                metric_observe(k->m_bytes, (double)bytes);
                metric_observe(k->m_seconds, seconds);
                metric_observe(k->m_nixl_time, seconds);
                metric_observe(k->m_nixl_bytes, (double)bytes);
            }
            log_debug("kv: load %" PRIu64 ": %" PRIu64 " bytes in %.3f ms (%.2f GB/s)", lc->id,
                      bytes, seconds * 1e3, seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
        }
    } else {
        log_warn("kv: load %" PRIu64 " failed: %s", lc->id, error ? error : "unknown error");
        if (k->m_failed_xfers) {
            metric_inc(lc->has_data ? k->m_failed_xfers : k->m_failed_notifs, 1);
        }
    }
    if (k->m_sum_retries) {
        struct kvx_stats xs;
        kvx_get_stats(k->x, &xs);
        metric_inc(k->m_sum_retries, (double)(xs.checksum_retries - k->sum_retries));
        metric_inc(k->m_sum_failures, (double)(xs.checksum_failures - k->sum_failures));
        k->sum_retries = xs.checksum_retries;
        k->sum_failures = xs.checksum_failures;
    }
    engine_kv_load_done(k->e, lc->id, status);
    free(lc);
}

/* engine_kv_connector.start_load: called under the engine lock; kvx only queues. */
static int start_load(void *ud, const engine_kv_load *l)
{
    struct kvconn *k = ud;
    struct load_ctx *lc = malloc(sizeof *lc);
    if (!lc) {
        return -ENOMEM;
    }
    lc->k = k;
    lc->id = l->id;
    lc->has_data = l->n_blocks > 0;
    int rc = l->n_blocks > 0 ? kvx_pull(k->x, l->remote_engine_id, l->remote_host, l->remote_port,
                                        l->remote_blocks, l->local_blocks, l->n_blocks, l->notify,
                                        on_load_done, lc)
                             : kvx_notify(k->x, l->remote_engine_id, l->remote_host, l->remote_port,
                                          l->notify, on_load_done, lc);
    if (rc != 0) {
        free(lc);
    }
    return rc;
}

/* A decoder read our blocks: "<remote_request_id>:<tp>" frees them. */
static void on_notify(void *ud, const char *msg, size_t len)
{
    struct kvconn *k = ud;
    char id[KVX_NOTIFY_MAX + 1];
    memcpy(id, msg, len);
    id[len] = '\0';
    char *colon = strrchr(id, ':');
    if (colon) {
        *colon = '\0';
    }
    if (engine_kv_release(k->e, id) != 0) {
        /* a duplicate, a hold that expired, or a request this engine never had */
        log_info("kv: notification for %s, which holds no blocks here", id);
        if (k->m_unknown_notifs) {
            metric_inc(k->m_unknown_notifs, 1);
        }
    }
}

static void metrics_setup(struct kvconn *k, struct metrics_registry *r, bool checksums)
{
    static const double byte_buckets[] = {1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22,
                                          1 << 24, 1 << 26, 1 << 28, 1 << 30};
    static const double sec_buckets[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,    0.25,  0.5,    1,     2.5,  5};
    struct metric_family *fb = metrics_histogram_new(r, "llmd_sidecar_kv_cache_transfer_bytes",
                                                     "KV cache bytes moved per P/D transfer", 0,
                                                     NULL, byte_buckets, ARRAY_SIZE(byte_buckets));
    struct metric_family *fs =
        metrics_histogram_new(r, "llmd_sidecar_kv_cache_transfer_duration_seconds",
                              "Duration of a P/D KV cache transfer (data moved to flushed)", 0,
                              NULL, sec_buckets, ARRAY_SIZE(sec_buckets));
    struct metric_family *nt = metrics_histogram_new(r, "vllm:nixl_xfer_time_seconds",
                                                     "KV transfer time (vLLM NixlConnector's name)",
                                                     0, NULL, sec_buckets, ARRAY_SIZE(sec_buckets));
    struct metric_family *nb = metrics_histogram_new(
        r, "vllm:nixl_bytes_transferred", "KV bytes per transfer (vLLM NixlConnector's name)", 0,
        NULL, byte_buckets, ARRAY_SIZE(byte_buckets));
    struct metric_family *fx = metrics_counter_new(r, "vllm:nixl_num_failed_transfers_total",
                                                   "KV transfers that failed", 0, NULL);
    struct metric_family *fn = metrics_counter_new(r, "vllm:nixl_num_failed_notifications_total",
                                                   "Notifications that could not be sent", 0, NULL);
    struct metric_family *fu =
        metrics_counter_new(r, "tandem_agent_kv_unknown_notifications_total",
                            "Notifications for requests that hold no blocks here", 0, NULL);
    if (!fb || !fs || !nt || !nb || !fx || !fn || !fu) {
        log_warn("kv: transfer metrics not registered (names taken?)");
        return;
    }
    k->m_bytes = metrics_child(fb, NULL);
    k->m_seconds = metrics_child(fs, NULL);
    k->m_nixl_time = metrics_child(nt, NULL);
    k->m_nixl_bytes = metrics_child(nb, NULL);
    k->m_failed_xfers = metrics_child(fx, NULL);
    k->m_failed_notifs = metrics_child(fn, NULL);
    k->m_unknown_notifs = metrics_child(fu, NULL);
    if (checksums) {
        struct metric_family *cr = metrics_counter_new(
            r, "tandem_agent_kv_checksum_retries_total",
            "KV blocks (of one layer's K or V) fetched again after a checksum mismatch", 0, NULL);
        struct metric_family *cf = metrics_counter_new(
            r, "tandem_agent_kv_checksum_failures_total",
            "KV pulls failed by a block that mismatched its checksum twice", 0, NULL);
        if (cr && cf) {
            k->m_sum_retries = metrics_child(cr, NULL);
            k->m_sum_failures = metrics_child(cf, NULL);
        }
    }
}

struct kvconn *kvconn_new(engine *e, const struct kvconn_config *c, char *err, size_t errlen)
{
    struct kvconn *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, errlen, "%s", "out of memory");
        return NULL;
    }
    k->e = e;
    tandem_uuid4(k->engine_id);
    const model *m = engine_model(e);
    engine_stats st;
    engine_get_stats(e, &st);
    int n_regions = 2 * m->cfg.n_layer;
    k->bases = calloc((size_t)n_regions, sizeof *k->bases);
    k->bytes = calloc((size_t)n_regions, sizeof *k->bytes);
    if (!k->bases || !k->bytes) {
        snprintf(err, errlen, "%s", "out of memory");
        goto fail;
    }
    for (int l = 0; l < m->cfg.n_layer; l++) {
        for (int kv = 0; kv < 2; kv++) {
            k->bases[2 * l + kv] = engine_kv_pool(e, l, kv, &k->bytes[2 * l + kv]);
        }
    }
    /* Where the engine can move its pools (before its first request), they go into memory UCX
     * allocates: shared memory that a decoder on this host reads one-sided at memory speed,
     * where ordinary memory goes through UCX 1.13's get emulation (kvxfer.h, "Speed"). */
    bool ucx_pools = engine_kv_adopt_pools(e, NULL, NULL) == 0;
    char identity[512];
    model_identity(m, identity, sizeof identity);
    struct kvx_config xc = {
        .engine_id = k->engine_id,
        .listen_host = c->host,
        .listen_port = c->port,
        .layout =
            {
                .n_layers = m->cfg.n_layer,
                .n_kv_heads = m->cfg.n_head_kv,
                .head_dim = m->cfg.head_dim,
                .block_size = st.block_size,
                .num_blocks = st.num_blocks,
                .dtype_bytes = st.kv_dtype_bytes,
            },
        .region_base = ucx_pools ? NULL : k->bases,
        .region_bytes = ucx_pools ? NULL : k->bytes,
        .compat_model = identity,
        .tp_size = 1,
        .memory = engine_kv_device(e) >= 0 ? KVX_MEM_CUDA : KVX_MEM_HOST,
        .device_id = engine_kv_device(e) >= 0 ? engine_kv_device(e) : 0,
        .enforce_compat = c->enforce_compat,
        .block_checksum = c->block_checksum,
        .wire_dtype = c->wire_int8 ? KVX_WIRE_INT8 : KVX_WIRE_NATIVE,
        .on_notify = on_notify,
        .ud = k,
    };
    k->x = kvx_new(&xc, err, errlen);
    if (!k->x) {
        goto fail;
    }
    if (ucx_pools) {
        void **ubases = calloc((size_t)n_regions, sizeof *ubases);
        size_t *ubytes = calloc((size_t)n_regions, sizeof *ubytes);
        int rc = ubases && ubytes ? 0 : -ENOMEM;
        for (int r = 0; rc == 0 && r < n_regions; r++) {
            ubases[r] = kvx_region(k->x, r, &ubytes[r]);
        }
        if (rc == 0) {
            rc = engine_kv_adopt_pools(e, ubases, ubytes);
        }
        if (rc == 0) {
            memcpy(k->bases, ubases, (size_t)n_regions * sizeof *ubases);
        }
        free(ubases);
        free(ubytes);
        if (rc != 0) {
            snprintf(err, errlen, "cannot place the KV cache in UCX memory: %s", strerror(-rc));
            goto fail;
        }
    }
    if (c->metrics) {
        metrics_setup(k, c->metrics, c->block_checksum);
    }
    engine_kv_connector ec = {
        .ud = k,
        .engine_id = k->engine_id,
        .host = c->host,
        .port = kvx_listen_port(k->x),
        .tp_size = 1,
        .hold_timeout_s = c->hold_timeout_s,
        .start_load = start_load,
    };
    if (engine_set_kv_connector(e, &ec) != 0) {
        snprintf(err, errlen, "%s", "cannot attach the KV connector to the engine");
        goto fail;
    }
    log_info("kv: engine %s serves its KV cache on %s:%d (%d regions of %d blocks, in %s memory)",
             k->engine_id, c->host, kvx_listen_port(k->x), n_regions, st.num_blocks,
             ucx_pools ? "UCX-allocated" : "the engine's");
    return k;
fail:
    kvconn_free(k);
    return NULL;
}

const char *kvconn_engine_id(const struct kvconn *k)
{
    return k->engine_id;
}

void kvconn_free(struct kvconn *k)
{
    if (!k) {
        return;
    }
    kvx_free(k->x);
    free(k->bases);
    free(k->bytes);
    free(k);
}
