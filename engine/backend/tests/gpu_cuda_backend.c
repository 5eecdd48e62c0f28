/*
 * The CUDA backend's whole forward pass against the CPU backend (gpu/backend/cuda, label gpu):
 * the generated test models of backend_test_model.h (llama NORM RoPE + GQA, qwen2 biases + NeoX +
 * tied output, qwen3 q/k norms with head_dim != n_embd / n_head) with F32, F16, BF16, Q8_0 and
 * Q4_0 weights and f32 / f16 KV caches, run through the same steps on both backends:
 *   1. prefill of sequence A in chunks 5 + 7 + 1 (logits after each chunk),
 *   2. four decode steps of A,
 *   3. one batch of A's next decode step, B (shares A's first two blocks: starts at position 8)
 *      and C (shares A's first block: starts at position 4, no logits), then a decode step of B
 *      and C together,
 * over block tables with holes (block ids out of order, unused ids between them, block 0 never
 * used), with the model's context set short for the f16 runs so the backend's block-table and
 * attention-workspace buffers must grow. Every logit row must match the CPU backend's within the
 * tolerance of the weight type, relative to the logit scale max(1, max |logit|):
 *
 *     F32 weights  3e-2   the device stores F32 matrices as F16, and cuBLAS may round the
 *                         activations to F16
 *     F16          3e-2   activations rounded to F16 for cuBLAS; accumulation order
 *     BF16         6e-2   activations rounded to BF16 (8 mantissa bits)
 *     Q8_0, Q4_0   5e-2   the CPU rounds activations to Q8_0, the device kernels may not
 *
 * with f16 KV adding the same rounding on both sides. Also: bad batches get -EINVAL, kv_pool
 * reports the device pools, the --gpu-memory-utilization budget moves with the share and refuses
 * one below the memory in use, and an impossible KV size is refused at create naming the memory.
 * Exits 77 (skipped) without a CUDA device.
 *
 * Tensor parallelism: the same cases with the model split over 2 ranks (and 4, F32) of the CUDA
 * backend through tp_backend_ops, one device per rank and NCCL between them, against the CPU
 * backend with the same tolerances; shapes a size does not divide are left out. Run when at
 * least that many devices are visible.
 *
 * The same source also builds unit/backend/cuda_emulated (KCU_HOST_EMULATION): cuda_backend.c
 * linked against tests/kcu_host_emulation.c, the CPU kernels behind kcu.h, which checks the
 * backend's own host code on every machine. There every op is the CPU backend's kernel, so the
 * logits must match the CPU backend's to 1e-5 x scale, except with F32 weights, which the device
 * (and so the emulation) stores as F16 (3e-2 as above).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda_backend.h"
#include "engine/backend/tests/backend_test_model.h"
#include "engine/backend/tp_backend.h"
#include "engine/core/backend.h"
#include "engine/model/shard.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cuda/kcu.h"

#define BLOCK   4
#define NBLOCKS 64
#define V_MAX   128

static int g_fail;
/* what runs the "gpu" side: the CUDA backend, or g_tp ranks of it */
static const backend_ops *g_gpu = &cuda_backend_ops;
static int g_tp = 1;
static bool g_eager; /* --enforce-eager: no CUDA graphs */

static const tm_spec k_specs[] = {
    {.arch = MODEL_ARCH_LLAMA,
     .n_layer = 2,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 16,
     .n_ff = 96,
     .n_vocab = 101,
     .tied = false,
     .seed = 1},
    {.arch = MODEL_ARCH_QWEN2,
     .n_layer = 2,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 4,
     .head_dim = 16,
     .n_ff = 128,
     .n_vocab = 77,
     .tied = true,
     .seed = 2},
    {.arch = MODEL_ARCH_QWEN3,
     .n_layer = 2,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 32,
     .n_ff = 96,
     .n_vocab = 90,
     .tied = false,
     .seed = 3},
    /* partial rotary dims (phi3's Phi-4-mini style): 8 of 16 rotated */
    {.arch = MODEL_ARCH_QWEN2,
     .n_layer = 2,
     .n_embd = 64,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 16,
     .n_ff = 96,
     .n_vocab = 83,
     .tied = false,
     .seed = 4,
     .n_rot = 8},
};

static const char *arch_name(model_arch a)
{
    return a == MODEL_ARCH_LLAMA ? "llama" : a == MODEL_ARCH_QWEN2 ? "qwen2" : "qwen3";
}

static double tolerance(tdtype t)
{
#ifdef KCU_HOST_EMULATION
    if (t == TD_BF16 && kc_bf16_dot_active()) {
        /* both sides round activations to BF16 (vdpbf16ps): a last-bit difference upstream
         * (another summation order) can move one activation a whole BF16 step (2^-8) */
        return 5e-3;
    }
    if (t != TD_F32) {
        return g_tp > 1 ? 2e-5 : 1e-5; /* ranks sum the row-parallel parts in another order */
    }
#endif
    switch (t) {
    case TD_BF16:
        return 6e-2;
    case TD_Q8_0:
    case TD_Q4_0:
        return 5e-2;
    default:
        return 3e-2;
    }
}

/* The config of every backend a case makes (the backends copy it). */
static backend_config case_config(const backend_ops *ops, kv_dtype dt)
{
    backend_config cfg = {.num_blocks = NBLOCKS,
                          .block_size = BLOCK,
                          .kv_dtype = dt,
                          .max_batch_tokens = 64,
                          .max_seqs = 4,
                          .n_threads = 1,
                          .enforce_eager = g_eager};
    if (ops == &tp_backend_ops) {
        cfg.tp_size = g_tp;
        cfg.tp_inner = &cuda_backend_ops;
    }
    return cfg;
}

static backend *make(const backend_ops *ops, const model *m, kv_dtype dt)
{
    /* static: the backends copy it, but an analyser cannot know what ops->create keeps */
    static backend_config cfg;
    cfg = case_config(ops, dt);
    char err[512] = "";
    backend *b = ops->create(m, &cfg, err, sizeof(err));
    if (!b) {
        fprintf(stderr, "FAIL: %s create: %s\n", ops->name, err);
        g_fail = 1;
    }
    return b;
}

/* One step on both backends; compares the n_logits rows. */
static void step(backend *cpu, backend *gpu, const fwd_batch *batch, int n_logits, int V,
                 double tol, const char *what, double *worst)
{
    float cl[4 * V_MAX], gl[4 * V_MAX];
    fwd_batch bc = *batch, bg = *batch;
    bc.logits = cl;
    bg.logits = gl;
    int rc_c = cpu_backend_ops.forward(cpu, &bc);
    int rc_g = g_gpu->forward(gpu, &bg);
    if (rc_c != 0 || rc_g != 0) {
        fprintf(stderr, "FAIL: %s: forward cpu %d cuda %d\n", what, rc_c, rc_g);
        g_fail = 1;
        return;
    }
    double d = 0.0, scale = 1.0;
    for (int i = 0; i < n_logits * V; i++) {
        d = fmax(d, fabs((double)cl[i] - (double)gl[i]));
        scale = fmax(scale, fabs((double)cl[i]));
    }
    *worst = fmax(*worst, d / scale);
    if (d > tol * scale) {
        fprintf(stderr, "FAIL: %s: max |dlogit| %.4g > %.3g x scale %.3g\n", what, d, tol, scale);
        g_fail = 1;
    }
}

static void fill_tokens(int32_t *toks, int n, int vocab, int salt)
{
    for (int i = 0; i < n; i++) {
        toks[i] = (int32_t)((i * 37 + salt * 11 + 5) % vocab);
    }
}

static void run_case(const tm_spec *sp, kv_dtype dt)
{
    model *m = tm_build(sp);
    if (!m) {
        fprintf(stderr, "FAIL: cannot build the test model\n");
        g_fail = 1;
        return;
    }
    char why[256];
    if (g_tp > 1 && model_shard_check(m, g_tp, why, sizeof why) != 0) {
        printf("  %s %-4s tp %d: left out (%s)\n", arch_name(sp->arch), td_name(sp->wtype), g_tp,
               why);
        tm_free(m);
        return;
    }
    if (dt == KV_DTYPE_F16) {
        /* the CUDA backend sizes its block-table and attention-workspace room for the model's
         * context: a short one makes the later batches grow them (the CPU backend ignores it) */
        m->cfg.n_ctx_train = 8;
    }
    backend *cpu = make(&cpu_backend_ops, m, dt), *gpu = make(g_gpu, m, dt);
    if (!cpu || !gpu) {
        goto out;
    }
    const int V = sp->n_vocab;
    const double tol = tolerance(sp->wtype);
    char what[128];
    double worst = 0.0;
    int32_t ta[20], tc[8];
    fill_tokens(ta, 20, V, 1);
    fill_tokens(tc, 8, V, 3);
    /* A: blocks 5, 1, 12, 7, 33; B: A's 5, 1 then 20, 21; C: A's 5 then 40 (holes everywhere) */
    const int32_t bta[] = {5, 1, 12, 7, 33}, btb[] = {5, 1, 20, 21}, btc[] = {5, 40, 41};
    const int chunks[] = {5, 7, 1};
    int pos = 0;
    for (int c = 0; c < 3; c++) {
        fwd_seq s = {.n_new = chunks[c],
                     .start_pos = pos,
                     .block_table = bta,
                     .n_blocks = (pos + chunks[c] + BLOCK - 1) / BLOCK,
                     .want_logits = true};
        fwd_batch b = {.n_tokens = chunks[c], .tokens = ta + pos, .n_seqs = 1, .seqs = &s};
        snprintf(what, sizeof(what), "%s %s kv %s: prefill chunk %d", arch_name(sp->arch),
                 td_name(sp->wtype), dt == KV_DTYPE_F16 ? "f16" : "f32", c);
        step(cpu, gpu, &b, 1, V, tol, what, &worst);
        pos += chunks[c];
    }
    for (; pos < 17; pos++) {
        fwd_seq s = {
            .n_new = 1, .start_pos = pos, .block_table = bta, .n_blocks = 5, .want_logits = true};
        fwd_batch b = {.n_tokens = 1, .tokens = ta + pos, .n_seqs = 1, .seqs = &s};
        snprintf(what, sizeof(what), "%s %s kv %s: decode at %d", arch_name(sp->arch),
                 td_name(sp->wtype), dt == KV_DTYPE_F16 ? "f16" : "f32", pos);
        step(cpu, gpu, &b, 1, V, tol, what, &worst);
    }
    /* A decodes position 17; B = A's tokens 0..7 cached + its own 5; C = A's 0..3 + 3 of its own */
    int32_t tb[13];
    memcpy(tb, ta, 8 * sizeof(int32_t));
    fill_tokens(tb + 8, 5, V, 2);
    int32_t toks[1 + 5 + 3];
    toks[0] = ta[17];
    memcpy(toks + 1, tb + 8, 5 * sizeof(int32_t));
    memcpy(toks + 6, tc, 3 * sizeof(int32_t));
    fwd_seq seqs[3] = {
        {.n_new = 1, .start_pos = 17, .block_table = bta, .n_blocks = 5, .want_logits = true},
        {.n_new = 5, .start_pos = 8, .block_table = btb, .n_blocks = 4, .want_logits = true},
        {.n_new = 3, .start_pos = 4, .block_table = btc, .n_blocks = 2, .want_logits = false},
    };
    fwd_batch mixed = {.n_tokens = 9, .tokens = toks, .n_seqs = 3, .seqs = seqs};
    snprintf(what, sizeof(what), "%s %s kv %s: mixed batch", arch_name(sp->arch),
             td_name(sp->wtype), dt == KV_DTYPE_F16 ? "f16" : "f32");
    step(cpu, gpu, &mixed, 2, V, tol, what, &worst);
    /* B and C decode together: B at 13, C at 7 */
    int32_t dec[2] = {tb[12], tc[3]};
    fwd_seq ds[2] = {
        {.n_new = 1, .start_pos = 13, .block_table = btb, .n_blocks = 4, .want_logits = true},
        {.n_new = 1, .start_pos = 7, .block_table = btc, .n_blocks = 2, .want_logits = true},
    };
    fwd_batch decode = {.n_tokens = 2, .tokens = dec, .n_seqs = 2, .seqs = ds};
    snprintf(what, sizeof(what), "%s %s kv %s: decode of two", arch_name(sp->arch),
             td_name(sp->wtype), dt == KV_DTYPE_F16 ? "f16" : "f32");
    step(cpu, gpu, &decode, 2, V, tol, what, &worst);
    /* the decode steps of one sequence and of two ran as CUDA graphs (none when eager or split);
     * the f16 runs' short context makes the mixed batch grow the buffers, which drops the graph
     * of the one-sequence steps captured before */
    const int graphs = g_gpu == &cuda_backend_ops ? cuda_backend_graphs(gpu) : 0;
    const int want = g_eager ? 0 : dt == KV_DTYPE_F16 ? 1 : 2;
    if (g_gpu == &cuda_backend_ops && graphs != want) {
        fprintf(stderr, "FAIL: %s %s: %d CUDA graphs captured, want %d\n", arch_name(sp->arch),
                td_name(sp->wtype), graphs, want);
        g_fail = 1;
    }
    printf("  %s %-4s kv %s tp %d%s: worst |dlogit| / scale %.3g (tolerance %.3g), %d graphs\n",
           arch_name(sp->arch), td_name(sp->wtype), dt == KV_DTYPE_F16 ? "f16" : "f32", g_tp,
           g_eager ? " eager" : "", worst, tol, graphs);
out:
    if (cpu) {
        cpu_backend_ops.destroy(cpu);
    }
    if (gpu) {
        g_gpu->destroy(gpu);
    }
    tm_free(m);
}

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "FAIL: %s\n", what);
        g_fail = 1;
    }
}

static void run_api_checks(void)
{
    tm_spec sp = k_specs[0];
    sp.wtype = TD_F16;
    model *m = tm_build(&sp);
    if (!m) {
        g_fail = 1;
        return;
    }
    backend *b = make(&cuda_backend_ops, m, KV_DTYPE_F16);
    if (b) {
        int32_t toks[4] = {1, 2, 3, 4};
        const int32_t bt[] = {1};
        float logits[V_MAX];
        fwd_seq s = {
            .n_new = 4, .start_pos = 0, .block_table = bt, .n_blocks = 1, .want_logits = true};
        fwd_batch batch = {
            .n_tokens = 4, .tokens = toks, .n_seqs = 1, .seqs = &s, .logits = logits};
        check(cuda_backend_ops.forward(b, &batch) == 0, "a good batch runs");
        toks[2] = 101;
        check(cuda_backend_ops.forward(b, &batch) == -EINVAL, "a token out of vocabulary");
        toks[2] = 3;
        s.n_new = 5;
        batch.n_tokens = 5;
        check(cuda_backend_ops.forward(b, &batch) == -EINVAL, "a short block table");
        s.n_new = 4;
        batch.n_tokens = 4;
        batch.logits = NULL;
        check(cuda_backend_ops.forward(b, &batch) == -EINVAL, "logits wanted, no buffer");
        size_t bytes = 0;
        check(cuda_backend_ops.kv_pool(b, 1, 1, &bytes) != NULL, "kv_pool of layer 1");
        check(bytes == (size_t)NBLOCKS * 2 * BLOCK * 16 * 2, "kv_pool size");
        check(cuda_backend_ops.kv_block_bytes(m, BLOCK, KV_DTYPE_F16) * NBLOCKS ==
                  bytes * 2 * (size_t)sp.n_layer,
              "kv_block_bytes");
        check(cuda_backend_ops.kv_pool(b, 2, 0, &bytes) == NULL, "kv_pool of a layer too many");
        check(cuda_backend_ops.kv_adopt == NULL, "kv_adopt unsupported");
        cuda_backend_ops.destroy(b);
    }
    /* the KV budget of --gpu-memory-utilization: share - in use - weights - scratch */
    char err[512] = "", info[512] = "";
    size_t kv9 = 0, kv5 = 0, tiny = 1;
    cuda_mem_plan plan;
    check(cuda_backend_mem_plan(m, 64, 4, BLOCK, KV_DTYPE_F16, 256, &plan, err, sizeof(err)) == 0,
          "memory plan");
    check(plan.weight_bytes > 0 && plan.scratch_bytes > 0, "memory plan sizes");
    check(cuda_backend_kv_budget(m, 1, 64, 4, BLOCK, KV_DTYPE_F16, 256, 0.9, &kv9, info,
                                 sizeof(info), err, sizeof(err)) == 0,
          "KV budget at 0.9");
    check(strstr(info, "--gpu-memory-utilization 0.9") != NULL, "KV budget log line");
    printf("  %s\n", info);
    check(cuda_backend_kv_budget(m, 1, 64, 4, BLOCK, KV_DTYPE_F16, 256, 0.5, &kv5, NULL, 0, err,
                                 sizeof(err)) == 0,
          "KV budget at 0.5");
    kcu_device_info di;
    check(kcu_device_query(0, &di, err, sizeof(err)) == 0, "device query");
    const double step = 0.4 * (double)di.total_bytes, got = (double)kv9 - (double)kv5;
    check(kv9 > kv5 && fabs(got - step) < 0.01 * step, "0.4 of the device between 0.9 and 0.5");
#ifdef KCU_HOST_EMULATION
    const double want = 0.9 * (double)di.total_bytes - (double)(di.total_bytes - di.free_bytes) -
                        (double)plan.weight_bytes - (double)plan.scratch_bytes;
    check(fabs((double)kv9 - want) <= 1.0, "KV budget formula");
#endif
    check(cuda_backend_kv_budget(m, 1, 64, 4, BLOCK, KV_DTYPE_F16, 256, 1e-6, &tiny, NULL, 0, err,
                                 sizeof(err)) == -ENOMEM &&
              tiny == 0 && strstr(err, "not enough device memory") != NULL,
          "a share below the memory in use is refused");
    backend_config huge = {.num_blocks = INT32_MAX / 2,
                           .block_size = 64,
                           .kv_dtype = KV_DTYPE_F32,
                           .max_batch_tokens = 8,
                           .max_seqs = 1};
    check(cuda_backend_ops.create(m, &huge, err, sizeof(err)) == NULL, "a KV cache too large");
    check(strstr(err, "not enough device memory") != NULL, err);
    printf("  too large: %s\n", err);
    tm_free(m);
}

int main(void)
{
    char why[256] = "";
    if (cuda_backend_device_count(why, sizeof(why)) < 1) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    static const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    for (size_t s = 0; s < sizeof(k_specs) / sizeof(k_specs[0]); s++) {
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            for (int dt = 0; dt < 2; dt++) {
                tm_spec sp = k_specs[s];
                sp.wtype = types[t];
                run_case(&sp, dt ? KV_DTYPE_F16 : KV_DTYPE_F32);
            }
        }
    }
    /* --enforce-eager: the same steps op by op */
    g_eager = true;
    for (size_t s = 0; s < sizeof(k_specs) / sizeof(k_specs[0]); s++) {
        tm_spec sp = k_specs[s];
        sp.wtype = TD_F16;
        run_case(&sp, KV_DTYPE_F16);
    }
    g_eager = false;
    run_api_checks();
    const int devices = cuda_backend_device_count(why, sizeof(why));
    g_gpu = &tp_backend_ops;
    for (g_tp = 2; g_tp <= 4; g_tp *= 2) {
        if (devices < g_tp) {
            printf("  tensor parallel size %d: left out, %d device(s)\n", g_tp, devices);
            continue;
        }
        for (size_t s = 0; s < sizeof(k_specs) / sizeof(k_specs[0]); s++) {
            for (size_t t = 0; t < (g_tp == 2 ? sizeof(types) / sizeof(types[0]) : 1); t++) {
                tm_spec sp = k_specs[s];
                sp.wtype = types[t];
                run_case(&sp, g_tp == 2 ? KV_DTYPE_F16 : KV_DTYPE_F32);
            }
        }
    }
#ifdef KCU_HOST_EMULATION
    printf(g_fail ? "FAILED\n"
                  : "ok: the CUDA backend's host code on the emulated kernels matches the CPU "
                    "backend\n");
#else
    printf(g_fail ? "FAILED\n" : "ok: the CUDA backend matches the CPU backend\n");
#endif
    return g_fail ? 1 : 0;
}
