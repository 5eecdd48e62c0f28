/*
 * kcu_comm (NCCL, kcu_nccl.cu): the all-reduce of tensor parallelism over every visible device,
 * one thread per device as the engine runs it (engine/backend/tp_backend.c). Each rank fills a
 * buffer of odd length with rank-dependent values; after kcu_all_reduce_sum every rank must hold
 * the sum (within 1e-6 relative: NCCL's ring may add in any order), for three rounds in a row.
 * An aborted communicator refuses further collectives.
 *
 * Exits 77 (skipped) with fewer than two CUDA devices, or when NCCL cannot be loaded there
 * (the message says which); a device count of two or more with NCCL present must pass.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcu.h"

#define LEN    100003
#define ROUNDS 3

typedef struct rank_arg {
    int rank, size;
    kcu_comm *comm;
    int fail;
    char msg[512];
} rank_arg;

static float value(int rank, int round, size_t i)
{
    return (float)(rank + 1) * 0.25f + (float)round + (float)(i % 97) * 1e-3f;
}

static void *rank_main(void *p)
{
    rank_arg *a = p;
    char err[256] = "";
    kcu_ctx *c = kcu_ctx_create(a->rank, err, sizeof err);
    float *h = malloc(sizeof(float) * LEN);
    float *d = c ? kcu_malloc(c, sizeof(float) * LEN) : NULL;
    if (!c || !h || !d) {
        snprintf(a->msg, sizeof a->msg, "rank %d: setup: %s", a->rank, c ? "out of memory" : err);
        a->fail = 1;
        goto out;
    }
    for (int round = 0; round < ROUNDS && !a->fail; round++) {
        for (size_t i = 0; i < LEN; i++) {
            h[i] = value(a->rank, round, i);
        }
        if (kcu_h2d(c, d, h, sizeof(float) * LEN) != 0 ||
            kcu_all_reduce_sum(a->comm, c, d, LEN) != 0 ||
            kcu_d2h(c, h, d, sizeof(float) * LEN) != 0 || kcu_sync(c) != 0) {
            snprintf(a->msg, sizeof a->msg, "rank %d round %d: %s", a->rank, round,
                     kcu_last_error());
            a->fail = 1;
            break;
        }
        for (size_t i = 0; i < LEN; i++) {
            double want = 0;
            for (int r = 0; r < a->size; r++) {
                want += value(r, round, i);
            }
            if (fabs(h[i] - want) > 1e-6 * fabs(want)) {
                snprintf(a->msg, sizeof a->msg, "rank %d round %d: element %zu is %.9g, want %.9g",
                         a->rank, round, i, h[i], want);
                a->fail = 1;
                break;
            }
        }
    }
out:
    if (d) {
        kcu_free(c, d);
    }
    free(h);
    kcu_ctx_destroy(c);
    return NULL;
}

int main(void)
{
    char why[256] = "";
    int n = kcu_device_count(why, sizeof why);
    if (n < 2) {
        printf("SKIP: %d CUDA device(s), the all-reduce needs two (%s)\n", n > 0 ? n : 0,
               why[0] ? why : "one device");
        return 77;
    }
    kcu_comm **comms = calloc((size_t)n, sizeof(kcu_comm *));
    rank_arg *args = calloc((size_t)n, sizeof(rank_arg));
    pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
    int fail = 0, rc = 0, started = 0;
    if (!comms || !args || !th) {
        fprintf(stderr, "FAIL: out of memory\n");
        fail = 1;
        goto out;
    }
    rc = kcu_comm_init_all(n, comms, why, sizeof why);
    if (rc == -ENOSYS) {
        printf("SKIP: %s\n", why);
        fail = 77;
        goto out;
    }
    if (rc != 0) {
        fprintf(stderr, "FAIL: kcu_comm_init_all over %d devices: %s\n", n, why);
        fail = 1;
        goto out;
    }
    for (int r = 0; r < n; r++) {
        args[r] = (rank_arg){.rank = r, .size = n, .comm = comms[r]};
        if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0) {
            fprintf(stderr, "FAIL: thread of rank %d\n", r);
            kcu_comm_abort(comms[0]); /* the started ranks wait for this one */
            fail = 1;
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        pthread_join(th[r], NULL);
        if (args[r].fail) {
            fprintf(stderr, "FAIL: %s\n", args[r].msg);
            fail = 1;
        }
    }
    if (started == n) { /* after an abort, collectives are refused */
        kcu_comm_abort(comms[0]);
        char err[256];
        kcu_ctx *c = kcu_ctx_create(0, err, sizeof err);
        float *d = c ? kcu_malloc(c, sizeof(float)) : NULL;
        if (!d || kcu_all_reduce_sum(comms[0], c, d, 1) != -ECANCELED) {
            fprintf(stderr, "FAIL: an aborted communicator still runs collectives\n");
            fail = 1;
        }
        if (d) {
            kcu_free(c, d);
        }
        kcu_ctx_destroy(c);
    }
    for (int r = 0; r < n; r++) {
        kcu_comm_abort(comms[r]);
        kcu_comm_destroy(comms[r]);
    }
    printf(fail ? "FAILED\n" : "ok: NCCL all-reduce over %d devices\n", n);
out:
    free(comms);
    free(args);
    free(th);
    return fail;
}
