/*
 * kvx: the KV-cache transport of the node agent. It moves KV blocks between two engines the way
 * vLLM's NixlConnector does with NIXL (connector version 2): the consumer (decode) reads the
 * producer's (prefill) blocks with one-sided UCX gets, then tells the producer it may free them.
 * Which blocks move, and when they are freed, is the engine's business; this module only moves
 * bytes between memory it was given.
 *
 * Memory. An engine's KV cache is 2 * n_layers regions (region r = 2 * layer + kv, kv 0 = K,
 * 1 = V), each one contiguous pool of num_blocks blocks of block_bytes = n_kv_heads * block_size *
 * head_dim * dtype_bytes ("HND" within a block). Block j of a region is the byte range
 * [j * block_bytes, (j + 1) * block_bytes). Block 0 is the engine's null block and never moves.
 * kvx_new registers every region with UCX (ucp_mem_map) and packs one remote key per region.
 *
 * Speed (UCX 1.13, Debian's, measured on the 2-vCPU build VM; agent/bench/kvx_bench.c). UCX 1.13
 * has no one-sided get into ordinary memory on these transports: ucp_get on malloc'd memory is
 * emulated with active messages that the producer's kvx thread answers (~0.1-1 GB/s, any UCX_TLS;
 * CMA serves only AM rendezvous). Regions UCX allocates itself (kvx_new without region_base, then
 * kvx_region) are shared memory that a producer on the same host and IPC namespace serves
 * one-sided: a 1024-token pull of the ~290M model (24 MiB) takes ~4 ms (~6-7 GB/s), the same as
 * ucx_perftest's ucp_get of 24 MiB. Allocated regions are populated at kvx_new, and a consumer
 * populates its mapping of a same-host producer's regions at the handshake: otherwise every pull
 * of fresh blocks pays a page fault per 4 KiB on both sides (10x slower). RDMA transports (verbs)
 * register ordinary memory and serve it one-sided; two pods of one node share no IPC namespace
 * and talk tcp.
 *
 * Side channel (vLLM's, so its framing matches NixlConnector's): a ZeroMQ ROUTER bound at
 * tcp://listen_host:listen_port. The consumer connects a DEALER, sends the REQ envelope
 * ["", request] and waits at most handshake_timeout_ms for ["", reply]; the ROUTER answers
 * [id, "", reply] to a REQ (or DEALER that sends the empty delimiter) and [id, reply] to a
 * DEALER that does not. Messages (msgpack; str = msgpack str, bin = msgpack bin):
 *
 *   request  [bin "get_meta_msg", uint tp_rank]        (str accepted too; the bare bytes
 *                                                       "get_meta_msg", vLLM <= 0.9, mean rank 0)
 *   reply    {"compatibility_hash": str (64 hex), "agent_metadata_bytes": bin AGENT_METADATA}
 *   refusal  {"error": str}                           (bad request, tp_rank out of range)
 *
 *   AGENT_METADATA (vLLM's NixlAgentMetadata as msgspec encodes it, a map by field name):
 *            {"engine_id": str, "agent_metadata": bin BLOB, "kv_caches_base_addr": [uint per
 *             region], "device_id": int, "num_blocks": uint, "block_lens": [uint per region],
 *             "kv_cache_layout": "HND", "block_size": uint}
 *   BLOB     (kvx's own, where NIXL puts its agent metadata):
 *            {"kvx": 1, "worker_address": bin (ucp_worker_query's address),
 *             "rkeys": [bin per region (ucp_rkey_pack)],
 *             "host_ns": str (optional: "<boot id>/<ipc ns>/<pid ns>" of the producer),
 *             "pid": uint (optional: the producer's process id)}
 *
 * Decoders ignore map keys they do not know (vLLM adds fields over time) and refuse duplicated
 * keys, wrong types, truncated input, trailing bytes and sizes past the limits below.
 *
 * Compatibility hash: lower-case hex SHA-256 of the canonical string
 *   "tandem-kvx-v1\ndtype_bytes=%d\nn_kv_heads=%d\nhead_dim=%d\nn_layers=%d\nblock_size=%d\n"
 *   "tp_size=%d\nmodel=%s"
 * (the model identity last, so no value can shift the others). A mismatch fails the pull when
 * enforce_compat is set, and is logged otherwise; the layout checks (region count, block_lens,
 * block_size, "HND") always apply because a mismatch there would move the wrong bytes.
 *
 * Notifications go over UCX, as NIXL's do: after a pull's gets have completed and its endpoint is
 * flushed, the consumer sends one active message (id KVX_AM_NOTIFY, eager protocol, no header,
 * data = the message bytes without a NUL, at most KVX_NOTIFY_MAX) on the same endpoint; the
 * producer calls on_notify for each. kvx_notify (no data) handshakes first when needed, as NIXL's
 * genNotif needs the peer's metadata.
 *
 * Remote engines: the consumer caches {endpoint, remote keys, base addresses} per remote engine
 * id (at most KVX_MAX_PEERS, least recently used evicted); later pulls reuse them. The handshake
 * reply must name the engine id the caller asked for: a different id means the address now
 * belongs to another engine (a restart), so the pull fails and cached metadata for that address
 * is dropped. A transfer error on a cached engine drops it and the pull is retried once through a
 * fresh handshake. Endpoints use UCX's peer error handling where the transports have it; UCX
 * 1.13's shared-memory transports have none (UCX_TLS=sm,self), and such peers are connected
 * without it. Where UCX_TLS allows shared memory, a producer whose host_ns equals the consumer's
 * (one kernel, one IPC and PID namespace: processes of one host or pod, where shared memory works)
 * is connected without error handling from the start, so UCX picks shared memory over TCP (with it,
 * UCX_TLS unset selects tcp, the one transport here that detects peer failure: 5-10x slower). Such
 * an endpoint cannot report the producer's death, so before each reuse the consumer checks that the
 * producer's pid still exists (kill 0; one PID namespace) and handshakes again when it does not.
 * Either way transfer_timeout_ms bounds every request: past it the endpoint is aborted and the
 * request fails with -ETIMEDOUT, so a dead or hung producer never hangs a pull.
 *
 * Threading: kvx_new starts one thread that owns every UCX and ZeroMQ object (UCX runs in
 * single-thread mode); it sleeps in zmq_poll on the ROUTER, an eventfd for queued work, the
 * handshake sockets and the UCX worker's event fd; while transfers are in flight it also wakes
 * every millisecond (it never busy-spins: on a small host that starves the peer's thread).
 * kvx_pull, kvx_notify and kvx_get_stats may be called from any thread. Callbacks (done,
 * on_notify) run on the kvx thread: they may call kvx_pull/kvx_notify/kvx_get_stats but must not
 * block for long and must not call kvx_free.
 *
 * Tandem extensions (off by default; both peers must be kvx). With both off nothing below is
 * sent and the wire is exactly vLLM's. A consumer with block_checksum or wire_dtype int8 sends,
 * per pull and after the handshake, one more side-channel request on a second DEALER it keeps per
 * remote engine:
 *
 *   request  [bin "tandem_blocks", uint tp_rank, {"seq": uint, "blocks": [uint block id],
 *             "sums": bool, "wire_dtype": "fp16" | "int8"}]
 *            (1 to KVX_EXT_BLOCKS ids, each in [1, num_blocks); unknown keys ignored)
 *   reply    {"seq": uint, "sums": bin (when asked: one little-endian uint64 per region and
 *             block, region-major: sums[r * n + i] of blocks[i] of region r),
 *             "staging_id": uint, "staging_addr": uint, "staging_len": uint,
 *             "staging_rkey": bin (int8 only: where the packed blocks wait)}
 *   refusal  {"seq": uint, "error": str}  (a refusal without "seq" answers the oldest request)
 *
 * A vLLM producer answers any request with its handshake reply, an older kvx with a refusal
 * without "seq": either fails the pull with an error saying that the producer lacks the
 * extension; no answer within transfer_timeout_ms fails it too. A failed pull is a local prefill.
 *
 * block_checksum: the sums are XXH64 (seed 0) of each requested block of each region, computed
 * by the producer's kvx thread while the consumer's gets run (held blocks do not change). The
 * consumer hashes what it received; each mismatched block is fetched once more and checked
 * again; a second mismatch fails the pull with -EIO naming the block. Cost: both sides read every
 * byte once more (XXH64, ~8 GB/s a core on the build VM) and a side-channel round trip: a 24 MiB
 * pull over shared memory takes ~7-10 ms instead of ~3 (docs/BENCHMARKS.md).
 *
 * wire_dtype int8 (F16 caches only; kvx_new refuses it for F32): the producer quantizes each
 * requested block row by row (a row = one token's head_dim values of one KV head in the HND
 * block; symmetric, scale = max|x| / 127 over the row's finite values, q = round-half-even(x /
 * scale), Inf clamps to +-127, NaN becomes 0) into a staging buffer: for region r and blocks[i],
 * at (r * n + i) * kvx_int8_block_bytes, the rows' int8 values then one F32 scale per row. Staging
 * buffers are UCX-allocated (one-sided like the pools), at most KVX_STAGING_SLOTS lent at once
 * and KVX_STAGING_MAX bytes mapped; a request past either is refused. The consumer gets the
 * staging bytes into its own buffer (with block_checksum, the sums cover the packed chunks and a
 * retry fetches a chunk again; the unpacked staging keys are kept per remote engine, as the
 * producer reuses its buffers and a fresh shared-memory mapping would fault on every page of every
 * pull), dequantizes into its blocks and sends the notification active
 * message with an 8-byte header, the staging id, which releases the staging (a pull without
 * notify_msg sends the header alone, which on_notify does not see). Staging that is never
 * released (a consumer that failed) is reclaimed after 2 * transfer_timeout_ms. Bytes on the wire
 * are (head_dim + 4) / (2 * head_dim) of F16's (0.53 at head_dim 64); values come back within half
 * a quantization step (scale / 2) plus F16 rounding, so greedy output can differ from a run
 * without it. Packing 24 MiB of F16 takes ~5-7 ms of the producer's kvx thread and unpacking
 * ~3-4 ms of the consumer's (AVX2+F16C where the CPU has them): a loss on shared memory, a gain
 * only where the network is the bottleneck. done's bytes count the KV bytes delivered;
 * stats.wire_bytes what UCX moved.
 *
 * Trust: every message from the network is checked before use (pure decoders below, fuzzed by
 * agent/fuzz/fuzz_kvx_handshake.c); remote block ids are checked against the producer's
 * num_blocks before any get. UCX's own unpackers (worker address, rkeys) take no length: kvx
 * bounds those blobs and hands UCX zero-padded copies, but a crafted blob can still confuse UCX,
 * so like vLLM's the side channel belongs on the cluster network, not the internet.
 */
#ifndef TANDEM_AGENT_KVXFER_H
#define TANDEM_AGENT_KVXFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVX_ENGINE_ID_MAX 255       /* bytes of an engine id */
#define KVX_NOTIFY_MAX    4096      /* bytes of a notification message */
#define KVX_MAX_REGIONS   4096      /* 2 * n_layers */
#define KVX_MAX_PEERS     64        /* remote engines cached (and handshaking) at once */
#define KVX_MAX_IN_FLIGHT 4096      /* pulls and notifications accepted and not yet done */
#define KVX_BLOB_MAX      (1 << 16) /* bytes of a worker address or of one packed rkey */
#define KVX_REPLY_MAX     (1 << 24) /* bytes of a handshake reply the consumer accepts */
#define KVX_AM_NOTIFY     0x4b56    /* UCX active message id of notifications ("KV") */
#define KVX_HASH_HEX      64        /* characters of the compatibility hash */
#define KVX_HOST_NS_MAX   128       /* characters of a host_ns */
#define KVX_DEFAULT_PORT  5600      /* vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT */
#define KVX_HANDSHAKE_MS  5000      /* vLLM's side-channel receive timeout */
#define KVX_TRANSFER_MS   30000     /* default bound on a request's UCX part */
#define KVX_LAYOUT_HND    "HND"
#define KVX_GET_META_MSG  "get_meta_msg"
#define KVX_BLOCKS_MSG    "tandem_blocks" /* Tandem's extension request */
#define KVX_EXT_BLOCKS    16384           /* block ids in one extension request */
#define KVX_STAGING_SLOTS 16              /* int8 staging buffers a producer lends at once */
#define KVX_STAGING_MAX   (1ull << 30)    /* bytes of staging a producer maps at most */

/* What a consumer asks the producer to put on the wire. */
/* Where the regions live. KVX_MEM_CUDA: region_base are CUDA device pointers (the CUDA backend's
 * KV pools), registered with UCS_MEMORY_TYPE_CUDA; that needs a UCX built with CUDA (cuda_copy,
 * cuda_ipc within a node; RDMA with GPUDirect between nodes), and kvx_new says so when the UCX
 * in use cannot. kvx never touches device regions from the host, so the Tandem extensions that
 * read blocks on the host (block checksums, int8 wire compression) are refused for them, as a
 * consumer (kvx_new) and as a producer (the request is refused). Between a CUDA engine and a host
 * one, UCX moves between the memory types (cuda_copy). */
enum kvx_memory {
    KVX_MEM_HOST = 0,
    KVX_MEM_CUDA = 1,
};

enum kvx_wire_dtype {
    KVX_WIRE_NATIVE = 0, /* the cache's own bytes (F16 or F32), vLLM's protocol */
    KVX_WIRE_INT8 = 1,   /* Tandem extension: int8 with one F32 scale per row (F16 caches) */
};

struct kvx_layout {
    int32_t n_layers;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;  /* tokens per block */
    int32_t num_blocks;  /* blocks per region, the null block 0 included (>= 2) */
    int32_t dtype_bytes; /* 2 (F16) or 4 (F32) */
};

struct kvx_config {
    const char *engine_id;   /* this engine's id (a UUID string; copied) */
    const char *listen_host; /* side-channel bind address (the pod IP, "127.0.0.1", "*"); NULL:
                                no side channel (a pure consumer works without one) */
    int listen_port;         /* KVX_DEFAULT_PORT; 0: any free port (see kvx_listen_port) */
    struct kvx_layout layout;
    void *const *region_base;       /* [2 * n_layers] pool base addresses (not owned; must outlive
                                       the kvx); NULL: kvx allocates them (see kvx_region) */
    const size_t *region_bytes;     /* [2 * n_layers]; each must be num_blocks * block_bytes; NULL
                                       exactly when region_base is */
    const char *compat_model;       /* model identity folded into the compatibility hash (the GGUF's
                                       name + tensor shape digest + dtype); NULL: "" */
    int tp_size;                    /* tensor-parallel size; 0 means 1, the only one supported */
    enum kvx_memory memory;         /* of the regions (KVX_MEM_CUDA needs region_base) */
    int device_id;                  /* KVX_MEM_CUDA: the CUDA device of the regions (the
                                       handshake's device_id); 0 for host memory */
    bool enforce_compat;            /* true: a compatibility hash mismatch fails the pull */
    int handshake_timeout_ms;       /* side-channel answer wait; 0: KVX_HANDSHAKE_MS */
    int transfer_timeout_ms;        /* gets + flush + notification of one request; past it the
                                       endpoint is aborted and the request fails; 0: KVX_TRANSFER_MS */
    bool block_checksum;            /* consumer: verify every pulled block against the producer's
                                       XXH64, one retry (Tandem extension, see above) */
    enum kvx_wire_dtype wire_dtype; /* consumer: KVX_WIRE_INT8 compresses F16 blocks on the wire
                                       (Tandem extension); a producer serves both either way */
    /* Producer side: a consumer's notification (vLLM sends "<remote_request_id>:<tp_size>")
     * arrived. msg is NUL-terminated for convenience; len excludes the NUL; valid during the
     * call only. Called on the kvx thread; NULL: notifications are counted and dropped. */
    void (*on_notify)(void *ud, const char *msg, size_t len);
    void *ud;
};

struct kvx;

/* Whether the UCX in use can register CUDA memory (KVX_MEM_CUDA): true, or false with why. */
bool kvx_ucx_has_cuda(char *why, size_t whylen);

/* Sets up UCX (context, one worker, every region registered and its rkey packed; UCX_TLS and the
 * other UCX_* variables of the environment apply), binds the side channel (a port already taken
 * is an error that names it) and starts the kvx thread. The config is copied (region memory is
 * not). NULL + a message in err on failure. */
struct kvx *kvx_new(const struct kvx_config *c, char *err, size_t errlen);

/* Region r's base address and (in *bytes, may be NULL) size: the caller's, or, when the config had
 * no region_base, memory kvx allocated through UCX (ucp_mem_map ALLOCATE: shared memory that a
 * producer on the same host serves one-sided at memory bandwidth, where ordinary memory goes
 * through UCX 1.13's RMA emulation; see "Speed" above). Allocated regions live until kvx_free;
 * they are resident (populated at kvx_new) and their initial contents are undefined. */
void *kvx_region(const struct kvx *x, int region, size_t *bytes);

/* The side channel's bound port (the one chosen when listen_port was 0), 0 without one. */
int kvx_listen_port(const struct kvx *x);

/* A pull or notification finished: status 0, or a negative errno: -EINVAL (bad block ids, an
 * incompatible or malformed peer), -ETIMEDOUT (no handshake answer in time, or the transfer
 * timeout passed), -EIO (a UCX transfer error), -ECANCELED (kvx_free), -ENOMEM. bytes moved and
 * seconds spent from the first UCX operation to the last completion (the handshake excluded; 0 for
 * failures before any data moved). error is NULL on success, else a message naming the problem;
 * valid during the call only. Called exactly once per accepted request, on the kvx thread. */
typedef void (*kvx_done_fn)(void *ud, int status, uint64_t bytes, double seconds,
                            const char *error);

/* Consumer: copies n blocks from the remote engine (its side channel at remote_host:remote_port):
 * remote_blocks[i] of every region into local_blocks[i] of the same region. Runs of consecutive
 * ids (remote and local both ascending by one) move as one get per region. When all data is in
 * place (gets complete, endpoint flushed) the notification notify_msg (NULL: none) is sent to the
 * producer, then done(ud, ...) is called (done may be NULL). Non-blocking: the arrays and the
 * strings are copied and the work is queued for the kvx thread.
 *
 * Returns 0 (queued: done will be called), or without calling done: -EINVAL (ids outside
 * [1, num_blocks) locally or below 1 remotely, n < 1 or n > num_blocks, a missing or oversized
 * argument; the reason is logged), -EAGAIN (KVX_MAX_IN_FLIGHT requests pending), -ESHUTDOWN
 * (kvx_free has begun), -ENOMEM. Remote ids at or past the producer's num_blocks fail the pull with
 * -EINVAL after the handshake, before anything moves. */
int kvx_pull(struct kvx *x, const char *remote_engine_id, const char *remote_host, int remote_port,
             const int32_t *remote_blocks, const int32_t *local_blocks, int32_t n,
             const char *notify_msg, kvx_done_fn done, void *ud);

/* Sends only the notification msg (the consumer already had every block, so the producer may
 * free its copy). Same contract as kvx_pull; bytes is 0. */
int kvx_notify(struct kvx *x, const char *remote_engine_id, const char *remote_host,
               int remote_port, const char *msg, kvx_done_fn done, void *ud);

struct kvx_stats {
    uint64_t pulls;                  /* pulls that succeeded */
    uint64_t pull_failures;          /* pulls that failed or were cancelled */
    uint64_t bytes;                  /* bytes moved by successful pulls */
    uint64_t notifications_sent;     /* notifications delivered to UCX successfully */
    uint64_t notification_failures;  /* kvx_notify requests that failed */
    uint64_t notifications_received; /* notifications passed to on_notify */
    uint64_t handshakes;             /* successful handshakes (consumer side) */
    uint64_t handshake_failures;     /* failed or timed-out handshakes */
    uint64_t metadata_served;        /* handshake replies sent (producer side) */
    uint64_t bad_messages;           /* malformed or refused side-channel requests, handshake
                                        replies and notifications */
    double transfer_seconds;         /* sum of the successful pulls' seconds */
    uint64_t wire_bytes;             /* bytes UCX read for pulls (int8: packed; retries too) */
    uint64_t checksum_retries;       /* blocks (of one region) fetched again after a mismatch */
    uint64_t checksum_failures;      /* pulls failed by a block that mismatched twice */
    uint64_t blocks_requests_served; /* extension requests answered (producer side) */
    uint64_t staging_in_use;         /* int8 staging buffers lent and not yet released */
    uint64_t staging_expired;        /* staging buffers reclaimed by the timeout */
};

/* A consistent snapshot of the counters. */
void kvx_get_stats(struct kvx *x, struct kvx_stats *out);

/* Test hook: after the next `rounds` rounds of gets of a checksummed pull complete (-1: every
 * round, 0: off), flip one byte of the first block received (int8: of the staging bytes), as a
 * corrupting transport would. */
void kvx_debug_corrupt(struct kvx *x, int rounds);

/* Stops the thread: queued and in-flight requests complete with -ECANCELED (their done runs
 * before kvx_free returns, on the kvx thread), endpoints are closed, memory is deregistered. NULL
 * is a no-op. Never call it from a kvx callback. */
void kvx_free(struct kvx *x);

/* ---- Wire format: pure functions (no UCX, no sockets), used by kvx and reachable by tests and
 * the fuzz target. Decoders never read outside buf and allocate only what they return. ---- */

/* Writes the compatibility hash (KVX_HASH_HEX hex digits and a NUL) into out. model NULL = "". */
void kvx_compat_hash(const struct kvx_layout *l, const char *model, int tp_size,
                     char out[KVX_HASH_HEX + 1]);

/* Decodes a side-channel request → 0 and *tp_rank, or -EINVAL with a message. */
int kvx_wire_decode_request(const void *buf, size_t len, int64_t *tp_rank, char *err,
                            size_t errlen);

/* A decoded handshake reply. On a refusal ({"error": ...}) error is set and the rest is empty. */
struct kvx_handshake {
    char compat_hash[KVX_HASH_HEX + 1];
    const uint8_t *agent_metadata; /* the AGENT_METADATA bytes, pointing into the decoded buffer */
    size_t agent_metadata_len;
    char error[256]; /* the producer's refusal, "" when none */
};

/* Decodes a handshake reply (or refusal) → 0, or -EINVAL with a message. Allocates nothing. */
int kvx_wire_decode_handshake(const void *buf, size_t len, struct kvx_handshake *out, char *err,
                              size_t errlen);

/* Decoded AGENT_METADATA with its BLOB. The arrays are owned (kvx_agent_meta_release); the byte
 * spans point into the decoded buffer and live as long as it does. */
struct kvx_agent_meta {
    char engine_id[KVX_ENGINE_ID_MAX + 1];
    int32_t n_regions;
    uint64_t *base_addrs; /* [n_regions] */
    uint64_t *block_lens; /* [n_regions] */
    int64_t device_id;
    int32_t num_blocks;
    int32_t block_size;
    char kv_cache_layout[8];
    const uint8_t *worker_addr; /* into the buffer */
    size_t worker_addr_len;
    const uint8_t **rkeys;             /* [n_regions] spans into the buffer */
    size_t *rkey_lens;                 /* [n_regions] */
    char host_ns[KVX_HOST_NS_MAX + 1]; /* BLOB "host_ns", "" when absent */
    int64_t pid;                       /* BLOB "pid", 0 when absent */
};

/* Decodes AGENT_METADATA → 0 and *out (release it), or -EINVAL with a message (also when out of
 * memory; *out is then empty and needs no release). Checks the shape: field types, every required
 * field present, one base, block_len and rkey per region (1 to KVX_MAX_REGIONS regions), num_blocks
 * and block_size positive, every region's end (base + num_blocks * block_len) within 64 bits, blob
 * sizes within 1..KVX_BLOB_MAX. */
int kvx_wire_decode_agent_meta(const void *buf, size_t len, struct kvx_agent_meta *out, char *err,
                               size_t errlen);

/* Frees what kvx_wire_decode_agent_meta allocated and empties *m. */
void kvx_agent_meta_release(struct kvx_agent_meta *m);

/* Whether a decoded peer can exchange blocks with an engine of layout local: 2 * n_layers
 * regions, each block_len equal to the local block bytes, the same block_size, "HND". 0, or
 * -EINVAL with a message naming the mismatch. */
int kvx_agent_meta_check(const struct kvx_agent_meta *m, const struct kvx_layout *local, char *err,
                         size_t errlen);

/* Encoders (msgpack, the shapes above). Each returns a malloc'd buffer (free it) and its length,
 * or NULL when out of memory. */
void *kvx_wire_encode_request(int64_t tp_rank, size_t *len);
void *kvx_wire_encode_handshake(const char *compat_hash, const void *agent_metadata,
                                size_t agent_metadata_len, size_t *len);
void *kvx_wire_encode_refusal(const char *message, size_t *len);
void *kvx_wire_encode_agent_meta(const struct kvx_agent_meta *m, size_t *len);

/* ---- Tandem extensions (see above): pure functions ---- */

/* A decoded "tandem_blocks" request. */
struct kvx_blocks_request {
    int64_t tp_rank;
    uint64_t seq;
    bool sums;       /* checksums asked for */
    bool int8;       /* wire_dtype "int8" */
    int32_t n;       /* 1..KVX_EXT_BLOCKS */
    int32_t *blocks; /* [n] (malloc'd; kvx_blocks_request_release) */
};

/* Decodes a side-channel request if it is a "tandem_blocks" one: 0 and *out (release it);
 * -ENOENT, with nothing allocated and no message, when it is not one (another request, or not
 * an array tagged "tandem_blocks"); -EINVAL with a message when it is one but malformed, with a
 * block id outside [1, num_blocks) or more than KVX_EXT_BLOCKS ids (*out needs no release). */
int kvx_wire_decode_blocks_request(const void *buf, size_t len, int32_t num_blocks,
                                   struct kvx_blocks_request *out, char *err, size_t errlen);
void kvx_blocks_request_release(struct kvx_blocks_request *r);

/* A decoded answer to a "tandem_blocks" request. Spans point into the decoded buffer. */
struct kvx_blocks_reply {
    bool has_seq;
    uint64_t seq;
    bool foreign; /* the answer was a handshake reply: the producer does not know the request */
    const uint8_t *sums; /* little-endian uint64s, NULL when absent */
    size_t sums_len;     /* bytes, a multiple of 8 */
    bool has_staging;    /* the four staging fields were all present */
    uint64_t staging_id, staging_addr, staging_len;
    const uint8_t *staging_rkey;
    size_t staging_rkey_len;
    char error[256]; /* the producer's refusal, "" when none */
};

/* Decodes an answer → 0 (also for a refusal or a foreign answer), or -EINVAL with a message.
 * Checks types, duplicates, trailing bytes, sums a multiple of 8 bytes, all or none of the
 * staging fields, staging_len >= 1 and addr + len within 64 bits, the rkey within KVX_BLOB_MAX.
 * Allocates nothing. */
int kvx_wire_decode_blocks_reply(const void *buf, size_t len, struct kvx_blocks_reply *out,
                                 char *err, size_t errlen);

/* Encoders of the two; malloc'd buffer or NULL. The reply encodes error (when set) with seq, else
 * seq, the sums when sums_len > 0 and the staging fields when has_staging. */
void *kvx_wire_encode_blocks_request(const struct kvx_blocks_request *r, size_t *len);
void *kvx_wire_encode_blocks_reply(const struct kvx_blocks_reply *r, size_t *len);

/* XXH64 of n bytes, seed 0 (the block checksum). */
uint64_t kvx_hash64(const void *p, size_t n);

/* Bytes of one block packed as int8: n_kv_heads * block_size rows of head_dim int8 values, then
 * one F32 scale per row. */
size_t kvx_int8_block_bytes(const struct kvx_layout *l);

/* Packs one F16 block (n_kv_heads * block_size * head_dim values) into kvx_int8_block_bytes(l)
 * bytes at out, and back. Pure; the F16 block 2-byte aligned, the packed bytes anywhere. */
void kvx_int8_pack(const struct kvx_layout *l, const void *f16_block, void *out);
void kvx_int8_unpack(const struct kvx_layout *l, const void *packed, void *f16_block);

#endif /* TANDEM_AGENT_KVXFER_H */
