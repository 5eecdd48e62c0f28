/*
 * Forward-pass benchmark of the CPU backend (not a test), reporting like llama-bench: pp<P>
 * (one P-token prompt in a single batch) and tg<N> (N steps of one token for one sequence,
 * starting from an empty cache) in tokens/s, mean +- stddev over R repetitions after a warm-up,
 * for each thread count. The model is a random llama built in memory.
 *   usage: fwd_bench [--dim 512] [--layers 8] [--heads 8] [--kv-heads 4] [--ff 1536]
 *                    [--vocab 4096] [--type f32|f16|bf16|q8_0|q4_0] [-p 512] [-n 128]
 *                    [-t 1,2] [-r 3] [--kv f32|f16] [--pin]
 * Threads are not pinned unless --pin (llama-bench does not pin either).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/tests/backend_test_model.h"
#include "engine/core/backend.h"
#include "kernels/cpu/kc_cpu.h"
#include "lib/clock.h"

#define BENCH_BLOCK 16

static int bench_int(const char *s)
{
    return (int)strtol(s, NULL, 10);
}

static int parse_type(const char *s, tdtype *t)
{
    static const struct {
        const char *name;
        tdtype t;
    } names[] = {
        {"f32", TD_F32}, {"f16", TD_F16}, {"bf16", TD_BF16}, {"q8_0", TD_Q8_0}, {"q4_0", TD_Q4_0}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i].name) == 0) {
            *t = names[i].t;
            return 0;
        }
    }
    return -1;
}

/* Runs n_new tokens at start_pos for one sequence; 0 or the forward's error. */
static int step(backend *b, const int32_t *bt, int32_t n_blocks, const int32_t *toks, int32_t n_new,
                int32_t start_pos, float *logits)
{
    fwd_seq s = {.n_new = n_new,
                 .start_pos = start_pos,
                 .block_table = bt,
                 .n_blocks = n_blocks,
                 .want_logits = true};
    fwd_batch batch = {
        .n_tokens = n_new, .tokens = toks, .n_seqs = 1, .seqs = &s, .logits = logits};
    return cpu_backend_ops.forward(b, &batch);
}

static void report(const char *what, int threads, const double *tps, int reps, const tm_spec *sp)
{
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < reps; i++) {
        mean += tps[i] / reps;
    }
    for (int i = 0; i < reps; i++) {
        var += (tps[i] - mean) * (tps[i] - mean) / (reps > 1 ? reps - 1 : 1);
    }
    printf("| %-5s | %2d | %-6s | %9.2f +- %7.2f |\n", td_name(sp->wtype), threads, what, mean,
           sqrt(var));
}

int main(int argc, char **argv)
{
    tm_spec sp = {.arch = MODEL_ARCH_LLAMA,
                  .n_layer = 8,
                  .n_embd = 512,
                  .n_head = 8,
                  .n_head_kv = 4,
                  .head_dim = 64,
                  .n_ff = 1536,
                  .n_vocab = 4096,
                  .wtype = TD_F32,
                  .tied = false,
                  .seed = 42};
    int n_prompt = 512, n_gen = 128, reps = 3;
    kv_dtype kvt = KV_DTYPE_F32;
    bool pin = false;
    int threads[8] = {1, 2};
    int n_threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--pin") == 0) {
            pin = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "missing value for %s\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--dim") == 0) {
            sp.n_embd = bench_int(v);
        } else if (strcmp(a, "--layers") == 0) {
            sp.n_layer = bench_int(v);
        } else if (strcmp(a, "--heads") == 0) {
            sp.n_head = bench_int(v);
        } else if (strcmp(a, "--kv-heads") == 0) {
            sp.n_head_kv = bench_int(v);
        } else if (strcmp(a, "--ff") == 0) {
            sp.n_ff = bench_int(v);
        } else if (strcmp(a, "--vocab") == 0) {
            sp.n_vocab = bench_int(v);
        } else if (strcmp(a, "--type") == 0) {
            if (parse_type(v, &sp.wtype) != 0) {
                fprintf(stderr, "unknown type %s\n", v);
                return 2;
            }
        } else if (strcmp(a, "--kv") == 0) {
            kvt = strcmp(v, "f16") == 0 ? KV_DTYPE_F16 : KV_DTYPE_F32;
        } else if (strcmp(a, "-p") == 0) {
            n_prompt = bench_int(v);
        } else if (strcmp(a, "-n") == 0) {
            n_gen = bench_int(v);
        } else if (strcmp(a, "-r") == 0) {
            reps = bench_int(v);
        } else if (strcmp(a, "-t") == 0) {
            n_threads = 0;
            for (const char *p = v; *p && n_threads < 8;
                 p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
                threads[n_threads++] = bench_int(p);
            }
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (sp.n_head < 1 || sp.n_embd % sp.n_head != 0 || n_prompt < 1 || n_gen < 1 || reps < 1 ||
        reps > 100) {
        fprintf(stderr, "bad shape or counts\n");
        return 2;
    }
    sp.head_dim = sp.n_embd / sp.n_head;
    model *m = tm_build(&sp);
    if (!m) {
        fprintf(stderr, "cannot build the model\n");
        return 1;
    }
    size_t params = 0, bytes = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        params += (size_t)(m->tensors[i].ne[0] * m->tensors[i].ne[1]);
        bytes += m->tensors[i].nbytes;
    }
    printf("model: llama dim %d layers %d heads %d/%d ff %d vocab %d, %s, %.2fM params, %.1f MiB; "
           "isa %s, kv %s\n",
           sp.n_embd, sp.n_layer, sp.n_head, sp.n_head_kv, sp.n_ff, sp.n_vocab, td_name(sp.wtype),
           (double)params / 1e6, (double)bytes / 1048576.0, kc_isa_name(kc_isa_active()),
           kvt == KV_DTYPE_F16 ? "f16" : "f32");
    printf("| type  | th | test   |           t/s        |\n");
    const int32_t ctx = n_prompt > n_gen ? n_prompt : n_gen;
    const int32_t n_blocks = (ctx + BENCH_BLOCK - 1) / BENCH_BLOCK;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)ctx);
    float *logits = malloc(sizeof(float) * (size_t)sp.n_vocab);
    double *tps = malloc(sizeof(double) * (size_t)reps);
    int rc = 0;
    if (!bt || !toks || !logits || !tps) {
        rc = -1;
        goto out;
    }
    for (int32_t i = 0; i < n_blocks; i++) {
        bt[i] = i + 1;
    }
    for (int32_t i = 0; i < ctx; i++) {
        toks[i] = (i * 7919 + 13) % sp.n_vocab;
    }
    for (int ti = 0; ti < n_threads && rc == 0; ti++) {
        backend_config cfg = {.num_blocks = n_blocks + 1,
                              .block_size = BENCH_BLOCK,
                              .kv_dtype = kvt,
                              .max_batch_tokens = n_prompt,
                              .max_seqs = 1,
                              .n_threads = threads[ti],
                              .pin_threads = pin};
        char err[256];
        backend *b = cpu_backend_ops.create(m, &cfg, err, sizeof(err));
        if (!b) {
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        rc |= step(b, bt, n_blocks, toks, n_prompt, 0, logits); /* warm-up */
        for (int r = 0; r < reps; r++) {
            double t0 = tandem_now_s();
            rc |= step(b, bt, n_blocks, toks, n_prompt, 0, logits);
            tps[r] = n_prompt / (tandem_now_s() - t0);
        }
        char name[32];
        snprintf(name, sizeof(name), "pp%d", n_prompt);
        report(name, threads[ti], tps, reps, &sp);
        rc |= step(b, bt, n_blocks, toks, 1, 0, logits); /* warm-up */
        for (int r = 0; r < reps; r++) {
            double t0 = tandem_now_s();
            for (int32_t i = 0; i < n_gen; i++) {
                rc |= step(b, bt, n_blocks, toks + i, 1, i, logits);
            }
            tps[r] = n_gen / (tandem_now_s() - t0);
        }
        snprintf(name, sizeof(name), "tg%d", n_gen);
        report(name, threads[ti], tps, reps, &sp);
        cpu_backend_ops.destroy(b);
    }
out:
    free(bt);
    free(toks);
    free(logits);
    free(tps);
    tm_free(m);
    if (rc != 0) {
        fprintf(stderr, "forward failed\n");
        return 1;
    }
    return 0;
}
