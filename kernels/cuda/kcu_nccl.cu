/*
 * NCCL collectives for tensor parallelism (kcu.h, engine/core/tp.h).
 *
 * libnccl is opened with dlopen on first use rather than linked: the CUDA build and every
 * single-GPU run then work on machines without NCCL, and --tensor-parallel-size > 1 on such a
 * machine is a startup error naming the library. nccl.h supplies the types and signatures (the
 * CUDA toolkit here ships it); a build without it fails kcu_comm_init_all with -ENOSYS.
 *
 * One communicator per device from ncclCommInitAll: the engine runs one thread per GPU in one
 * process (engine/backend/tp_backend.c), which NCCL supports as long as each thread enqueues on
 * its own communicator.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kcu_internal.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define KCU_HAVE_NCCL_H 1
#else
#define KCU_HAVE_NCCL_H 0
#endif

#if KCU_HAVE_NCCL_H

struct kcu_comm {
    ncclComm_t comm;
    bool aborted;
};

static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static struct {
    void *lib;
    char why[256];
    decltype(&ncclCommInitAll) init_all;
    decltype(&ncclAllReduce) all_reduce;
    decltype(&ncclCommAbort) abort;
    decltype(&ncclCommDestroy) destroy;
    decltype(&ncclGetErrorString) error_string;
    decltype(&ncclGetVersion) version;
} g_nccl; /* filled once by nccl_load */

template <typename F> static bool nccl_sym(F *out, const char *name)
{
    *out = reinterpret_cast<F>(dlsym(g_nccl.lib, name));
    if (!*out) {
        snprintf(g_nccl.why, sizeof(g_nccl.why), "%s has no symbol %s", "libnccl.so.2", name);
        return false;
    }
    return true;
}

static void nccl_load(void)
{
    g_nccl.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!g_nccl.lib) {
        const char *e = dlerror();
        snprintf(g_nccl.why, sizeof(g_nccl.why),
                 "NCCL could not be loaded (%s); install NCCL (libnccl2) for tensor parallelism "
                 "on GPUs",
                 e ? e : "libnccl.so.2 not found");
        return;
    }
    if (!nccl_sym(&g_nccl.init_all, "ncclCommInitAll") ||
        !nccl_sym(&g_nccl.all_reduce, "ncclAllReduce") ||
        !nccl_sym(&g_nccl.abort, "ncclCommAbort") ||
        !nccl_sym(&g_nccl.destroy, "ncclCommDestroy") ||
        !nccl_sym(&g_nccl.error_string, "ncclGetErrorString") ||
        !nccl_sym(&g_nccl.version, "ncclGetVersion")) {
        dlclose(g_nccl.lib);
        g_nccl.lib = NULL;
    }
}

extern "C" int kcu_comm_init_all(int n, kcu_comm **comms, char *err, size_t errlen)
{
    if (n < 1 || !comms) {
        snprintf(err, errlen, "NCCL: bad clique size %d", n);
        return -EINVAL;
    }
    pthread_once(&g_nccl_once, nccl_load);
    if (!g_nccl.lib) {
        snprintf(err, errlen, "%s", g_nccl.why);
        kcu_set_error("%s", g_nccl.why);
        return -ENOSYS;
    }
    ncclComm_t *raw = static_cast<ncclComm_t *>(calloc((size_t)n, sizeof(ncclComm_t)));
    int *devs = static_cast<int *>(calloc((size_t)n, sizeof(int)));
    if (!raw || !devs) {
        free(raw);
        free(devs);
        snprintf(err, errlen, "NCCL: out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        devs[i] = i;
        comms[i] = NULL;
    }
    ncclResult_t r = g_nccl.init_all(raw, n, devs);
    free(devs);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclCommInitAll over %d devices: %s", n, g_nccl.error_string(r));
        kcu_set_error("ncclCommInitAll: %s", g_nccl.error_string(r));
        free(raw);
        return -EIO;
    }
    for (int i = 0; i < n; i++) {
        comms[i] = static_cast<kcu_comm *>(calloc(1, sizeof(kcu_comm)));
        if (!comms[i]) {
            for (int j = 0; j < n; j++) {
                if (j >= i) {
                    g_nccl.destroy(raw[j]);
                } else {
                    kcu_comm_destroy(comms[j]);
                    comms[j] = NULL;
                }
            }
            free(raw);
            snprintf(err, errlen, "NCCL: out of memory");
            return -ENOMEM;
        }
        comms[i]->comm = raw[i];
    }
    free(raw);
    return 0;
}

extern "C" int kcu_all_reduce_sum(kcu_comm *comm, kcu_ctx *c, float *d_buf, size_t n)
{
    if (!comm || !c || (!d_buf && n > 0)) {
        return -EINVAL;
    }
    if (comm->aborted) {
        kcu_set_error("NCCL all-reduce: the communicator was aborted");
        return -ECANCELED;
    }
    ncclResult_t r =
        g_nccl.all_reduce(d_buf, d_buf, n, ncclFloat32, ncclSum, comm->comm, kcu_stream(c));
    if (r != ncclSuccess) {
        kcu_set_error("NCCL all-reduce of %zu floats: %s", n, g_nccl.error_string(r));
        return -EIO;
    }
    return 0;
}

extern "C" void kcu_comm_abort(kcu_comm *comm)
{
    if (comm && !comm->aborted) {
        comm->aborted = true;
        (void)g_nccl.abort(comm->comm); /* also frees it */
    }
}

extern "C" void kcu_comm_destroy(kcu_comm *comm)
{
    if (!comm) {
        return;
    }
    if (!comm->aborted) {
        (void)g_nccl.destroy(comm->comm);
    }
    free(comm);
}

#else /* no nccl.h at build time */

struct kcu_comm {
    int unused;
};

extern "C" int kcu_comm_init_all(int n, kcu_comm **comms, char *err, size_t errlen)
{
    (void)n;
    (void)comms;
    snprintf(err, errlen, "this build has no NCCL support (nccl.h was not found at build time)");
    return -ENOSYS;
}

extern "C" int kcu_all_reduce_sum(kcu_comm *comm, kcu_ctx *c, float *d_buf, size_t n)
{
    (void)comm;
    (void)c;
    (void)d_buf;
    (void)n;
    return -ENOSYS;
}

extern "C" void kcu_comm_abort(kcu_comm *comm)
{
    (void)comm;
}

extern "C" void kcu_comm_destroy(kcu_comm *comm)
{
    free(comm);
}

#endif
