/*
 * kvx_bench: pull bandwidth of the KV transport (agent/kvxfer.h) for one prompt's worth of
 * blocks, next to what ucx_perftest's ucp_get gives on the same machine.
 *
 * A producer engine (a child process by default, so UCX uses its cross-process paths; --thread
 * keeps both in one process) serves pools of the given layout; the consumer pulls the same
 * n blocks over and over, each pull with a notification as vLLM sends one, and reports the
 * median and best pull time and the bandwidth, for blocks 1..n (one get per region) and for every
 * other block (n gets per region). --ucx-alloc lets kvx allocate the regions (UCX shared memory,
 * served one-sided) instead of malloc. --checksum and --int8 turn on the consumer's Tandem
 * extensions (per-block XXH64 checksums; int8 wire compression), to measure what they cost.
 *
 * Built as build/agent/tandem-kvx-bench (not a test). Run:
 *   UCX_TLS=sm,self build/agent/tandem-kvx-bench [--thread] [--ucx-alloc] [--checksum] [--int8]
 *       [--iters N] [--blocks N]
 * Layout (the ~290M model): 24 layers, 4 KV heads, head_dim 64, block_size 16, F16; 64 blocks
 * are a 1024-token prompt: 48 regions x 64 x 8 KiB = 24 MiB.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/kvxfer.h"
#include "lib/clock.h"
#include "lib/log.h"

#define LAYERS     24
#define REGIONS    (2 * LAYERS)
#define MAX_BLOCKS 1024

static const struct kvx_layout layout_base = {.n_layers = LAYERS,
                                              .n_kv_heads = 4,
                                              .head_dim = 64,
                                              .block_size = 16,
                                              .num_blocks = 0, /* set from --blocks */
                                              .dtype_bytes = 2};

struct pools {
    void *base[REGIONS];
    size_t bytes[REGIONS];
};

static void pools_alloc(struct pools *p, const struct kvx_layout *l, int fill)
{
    size_t block = (size_t)l->n_kv_heads * (size_t)l->block_size * (size_t)l->head_dim *
                   (size_t)l->dtype_bytes;
    for (int r = 0; r < REGIONS; r++) {
        p->bytes[r] = block * (size_t)l->num_blocks;
        p->base[r] = aligned_alloc(4096, p->bytes[r]);
        if (!p->base[r]) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        memset(p->base[r], fill + r, p->bytes[r]);
    }
}

static bool ucx_alloc; /* --ucx-alloc: kvx allocates the regions (UCX shared memory) */
static bool checksum;  /* --checksum: the consumer verifies block checksums */
static bool int8;      /* --int8: the consumer pulls int8-compressed blocks */

/* An engine over malloc'd pools, or over regions kvx allocates (then filled here). */
static struct kvx *engine(const char *id, const struct kvx_layout *l, int fill, bool listen)
{
    char err[512];
    static struct pools pools[2];
    struct pools *p = &pools[listen];
    if (!ucx_alloc) {
        pools_alloc(p, l, fill);
    }
    struct kvx_config c = {.engine_id = id,
                           .listen_host = listen ? "127.0.0.1" : NULL,
                           .layout = *l,
                           .region_base = ucx_alloc ? NULL : p->base,
                           .region_bytes = ucx_alloc ? NULL : p->bytes,
                           .compat_model = "bench",
                           .tp_size = 1,
                           .enforce_compat = true,
                           .block_checksum = !listen && checksum,
                           .wire_dtype = !listen && int8 ? KVX_WIRE_INT8 : KVX_WIRE_NATIVE};
    struct kvx *x = kvx_new(&c, err, sizeof(err));
    if (!x) {
        fprintf(stderr, "kvx_new: %s\n", err);
        exit(1);
    }
    for (int r = 0; ucx_alloc && r < REGIONS; r++) {
        size_t bytes;
        void *base = kvx_region(x, r, &bytes);
        memset(base, fill + r, bytes);
    }
    return x;
}

struct wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    double seconds;
    char err[256];
};

static void on_done(void *ud, int status, uint64_t bytes, double seconds, const char *error)
{
    struct wait *w = ud;
    (void)bytes;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->status = status;
    w->seconds = seconds;
    snprintf(w->err, sizeof(w->err), "%s", error ? error : "");
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* One pull, waited for; returns the wall time in seconds. */
static double pull(struct kvx *x, int port, const int32_t *remote, const int32_t *local, int n)
{
    struct wait w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    double t0 = tandem_now_s();
    int rc = kvx_pull(x, "bench-producer", "127.0.0.1", port, remote, local, n, "bench-req:1",
                      on_done, &w);
    if (rc != 0) {
        fprintf(stderr, "kvx_pull: %d\n", rc);
        exit(1);
    }
    pthread_mutex_lock(&w.mu);
    while (!w.done) {
        pthread_cond_wait(&w.cv, &w.mu);
    }
    pthread_mutex_unlock(&w.mu);
    if (w.status != 0) {
        fprintf(stderr, "pull failed: %s\n", w.err);
        exit(1);
    }
    return tandem_now_s() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run(struct kvx *x, int port, const char *what, const int32_t *remote,
                const int32_t *local, int n, size_t block_bytes, int iters)
{
    double *t = malloc(sizeof(*t) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        t[i] = pull(x, port, remote, local, n);
    }
    qsort(t, (size_t)iters, sizeof(*t), cmp_double);
    double bytes = (double)n * (double)block_bytes * REGIONS;
    printf("%-24s %3d blocks (%5.1f MiB): median %7.3f ms = %6.2f GB/s, best %7.3f ms = %6.2f "
           "GB/s\n",
           what, n, bytes / (1 << 20), t[iters / 2] * 1e3, bytes / t[iters / 2] / 1e9, t[0] * 1e3,
           bytes / t[0] / 1e9);
    free(t);
}

int main(int argc, char **argv)
{
    int iters = 200, n = 64;
    bool thread = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--thread") == 0) {
            thread = true;
        } else if (strcmp(argv[i], "--ucx-alloc") == 0) {
            ucx_alloc = true;
        } else if (strcmp(argv[i], "--checksum") == 0) {
            checksum = true;
        } else if (strcmp(argv[i], "--int8") == 0) {
            int8 = true;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
            n = (int)strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: kvx_bench [--thread] [--ucx-alloc] [--checksum] [--int8] "
                            "[--iters N] [--blocks N]\n");
            return 2;
        }
    }
    if (n < 1 || 2 * n + 1 > MAX_BLOCKS || iters < 1) {
        fprintf(stderr, "bad --blocks or --iters\n");
        return 2;
    }
    log_init("kvx_bench", LOGL_WARN, LOG_FORMAT_TEXT);
    struct kvx_layout l = layout_base;
    l.num_blocks = 2 * n + 1; /* room for the every-other-block case; block 0 is the null block */
    size_t block_bytes =
        (size_t)l.n_kv_heads * (size_t)l.block_size * (size_t)l.head_dim * (size_t)l.dtype_bytes;
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        return 1;
    }
    pid_t child = -1;
    struct kvx *prod = NULL;
    int port;
    if (!thread) {
        child = fork();
        if (child == 0) {
            close(pipefd[0]);
            prod = engine("bench-producer", &l, 1, true);
            port = kvx_listen_port(prod);
            if (write(pipefd[1], &port, sizeof(port)) != sizeof(port)) {
                _exit(1);
            }
            pause(); /* until the parent kills it */
            _exit(0);
        }
        close(pipefd[1]);
        if (read(pipefd[0], &port, sizeof(port)) != sizeof(port)) {
            fprintf(stderr, "producer did not start\n");
            return 1;
        }
    } else {
        prod = engine("bench-producer", &l, 1, true);
        port = kvx_listen_port(prod);
    }
    struct kvx *cons = engine("bench-consumer", &l, 100, false);
    printf("UCX_TLS=%s, producer in %s, regions %s, %d iterations, block %zu bytes, %d "
           "regions, checksums %s, wire %s\n",
           getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)",
           thread ? "this process" : "a child process",
           ucx_alloc ? "allocated by UCX (shared memory)" : "malloc'd", iters, block_bytes, REGIONS,
           checksum ? "on" : "off", int8 ? "int8" : "fp16");

    int32_t remote[MAX_BLOCKS], local[MAX_BLOCKS];
    for (int i = 0; i < n; i++) {
        remote[i] = local[i] = 1 + i;
    }
    pull(cons, port, remote, local, n); /* handshake */
    run(cons, port, "contiguous (1 run)", remote, local, n, block_bytes, iters);
    for (int i = 0; i < n; i++) {
        remote[i] = 1 + 2 * i;
    }
    run(cons, port, "every other block", remote, local, n, block_bytes, iters);
    struct kvx_stats st;
    kvx_get_stats(cons, &st);
    printf("pulls %llu, handshakes %llu, KV bytes %llu, wire bytes %llu, checksum retries %llu, "
           "transfer time %.3f s\n",
           (unsigned long long)st.pulls, (unsigned long long)st.handshakes,
           (unsigned long long)st.bytes, (unsigned long long)st.wire_bytes,
           (unsigned long long)st.checksum_retries, st.transfer_seconds);
    kvx_free(cons);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    } else {
        kvx_free(prod);
    }
    return 0;
}
