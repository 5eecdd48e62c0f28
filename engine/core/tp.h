/*
 * Tensor parallelism (docs/tensor-parallel.md): one model split over `size` ranks, each rank a
 * backend instance holding a shard (engine/model/shard.h) and its share of the KV heads. The
 * engine drives them through tp_backend_ops (engine/backend/tp_backend.c) as one backend.
 *
 * Megatron-style split, as vLLM does it:
 *   column-parallel: Q/K/V (by heads) and gate/up (by feed-forward rows): no communication;
 *   row-parallel:    O and down: each rank produces a partial sum of the hidden state, summed over
 *                    the ranks by all_reduce_sum before the residual add;
 *   vocab-parallel:  the logits; each rank writes its own columns of fwd_batch.logits.
 *
 * The collective belongs to the backend kind (backend_ops.tp_comm_new): shared memory between
 * threads for the CPU backend, NCCL for the CUDA backend.
 */
#ifndef TANDEM_ENGINE_CORE_TP_H
#define TANDEM_ENGINE_CORE_TP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tp_comm tp_comm;

typedef struct tp_comm_ops {
    const char *name; /* "host", "nccl" */
    /* In-place sum of buf[0..n) over the ranks. Every rank calls it with its own buffer and the
     * same n, collectives in the same order. Every rank ends with the same values, bit for bit.
     * stream: the backend's queue for device collectives (a cudaStream_t), NULL on the host.
     * 0, or a negative errno (-ECANCELED after abort). */
    int (*all_reduce_sum)(tp_comm *c, int rank, float *buf, size_t n, void *stream);
    /* Wakes every rank waiting in a collective, and makes later ones fail, until reset. Called
     * when one rank's step fails, so the others do not wait for it forever. */
    void (*abort)(tp_comm *c);
    /* Re-arms the communicator after an abort, once every rank has left its step; -EIO when it
     * cannot be (a device communicator, which abort destroys). */
    int (*reset)(tp_comm *c);
    void (*free)(tp_comm *c);
} tp_comm_ops;

struct tp_comm {
    const tp_comm_ops *ops;
    int size;
};

/* What one rank's backend is told about its place (backend_config.tp). */
typedef struct backend_tp {
    int rank, size;
    int32_t vocab_begin, vocab_end; /* the logits columns this rank computes */
    tp_comm *comm;
} backend_tp;

/* The shared-memory communicator between `size` threads of one process. NULL on ENOMEM. */
tp_comm *tp_comm_host_new(int size);

#endif
