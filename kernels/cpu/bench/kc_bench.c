/*
 * Matmul microbenchmark (not a test): GB/s of weights streamed and GFLOP/s for the projection
 * shapes of the ~30M (dim 512, ffn 1536) and ~250M (dim 1024, ffn 2816) models, at n = 1 (decode)
 * and n = 512 (prompt), for every weight type, on 1 and 2 threads, at the active ISA level
 * (TANDEM_CPU_ISA lowers it). Q8_0/Q4_0/Q4_K/Q5_K/Q6_K weights are repacked (kc_weight_prepare) as
 * the backend does. usage: kc_bench [min_seconds_per_case [type,type,...]]
 *
 * kc_bench --stream [type,type,...] instead decodes (n = 1) through the projections of the
 * ~290M model's 20 layers, each matrix its own prepared copy (far more bytes than any cache), as
 * a token's decode does: GB/s of weights streamed from memory, to set against tandem-membw.
 *
 * kc_bench --tune [threads] sweeps the decode prefetch distances (kc_tune) over the same stream on
 * one thread and on `threads` (2) and prints the best as a TANDEM_CPU_TUNE line (see
 * kernels/cpu/README.md).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cpu/kc_pool.h"
#include "lib/clock.h"

/* Whether name is one of the comma-separated entries of list. */
static bool kc_bench_listed(const char *list, const char *name)
{
    const size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncasecmp(p, name, n) == 0) {
            return true;
        }
        p += n + (end ? 1 : 0);
    }
    return false;
}

enum { LAYERS = 20, PER_LAYER = 7, NMAT = LAYERS * PER_LAYER };

/* Prepares the NMAT matrices of the large shape's 20 layers in type ty over the bytes w; their
 * weight bytes, or 0 (nothing left prepared) when memory runs out. */
static size_t kc_bench_stream_prepare(tdtype ty, const uint8_t *w, kc_weight *wts)
{
    static const int64_t layer[PER_LAYER][2] = {{1024, 1024}, {1024, 256},  {1024, 256},
                                                {1024, 1024}, {1024, 2816}, {1024, 2816},
                                                {2816, 1024}};
    size_t bytes = 0;
    for (int i = 0; i < NMAT; i++) {
        const int64_t *sh = layer[i % PER_LAYER];
        wts[i] = (kc_weight){.type = ty, .k = sh[0], .m = sh[1], .data = w};
        if (kc_weight_prepare(&wts[i]) != 0) {
            for (int j = 0; j < i; j++) {
                kc_weight_release(&wts[j]);
            }
            return 0;
        }
        bytes += td_row_bytes(ty, sh[0]) * (size_t)sh[1];
    }
    return bytes;
}

/* Seconds for one token's decode (n = 1) through the NMAT matrices. */
static double kc_bench_stream_pass(kc_pool *pool, kc_weight *wts, const float *x, float *y,
                                   void *wsp)
{
    const double t0 = tandem_now_s();
    for (int i = 0; i < NMAT; i++) {
        kc_matmul(pool, &wts[i], x, 1, y, wsp, kc_matmul_wsize(&wts[i], 1));
    }
    return tandem_now_s() - t0;
}

static const tdtype kc_stream_types[] = {TD_F32,  TD_F16,  TD_BF16, TD_Q8_0,
                                         TD_Q4_0, TD_Q4_K, TD_Q5_K, TD_Q6_K};

/* --stream: n = 1 through 20 layers of the large shape, best of 5 sweeps after a warm-up. */
static int kc_bench_stream(const char *only, const uint8_t *w, const float *x, float *y, void *wsp)
{
    static kc_weight wts[NMAT];
    const kc_tune *tune = kc_tune_get();
    printf("isa %s, %s tuning (prefetch quant %d/%d, half %d/%d, f32 %d/%d B), stream: n=1 "
           "through %d matrices\n",
           kc_isa_name(kc_isa_active()), tune->uarch, tune->pf_quant[0], tune->pf_quant[1],
           tune->pf_half[0], tune->pf_half[1], tune->pf_f32[0], tune->pf_f32[1], NMAT);
    printf("%-5s %2s %8s %10s %9s\n", "type", "th", "MiB", "us/token", "GB/s");
    for (int th = 1; th <= 2; th++) {
        kc_pool *pool = kc_pool_new(th, true);
        if (!pool) {
            return 1;
        }
        for (size_t ti = 0; ti < sizeof(kc_stream_types) / sizeof(kc_stream_types[0]); ti++) {
            const tdtype ty = kc_stream_types[ti];
            if (only && !kc_bench_listed(only, td_name(ty))) {
                continue;
            }
            const size_t bytes = kc_bench_stream_prepare(ty, w, wts);
            if (bytes == 0) {
                kc_pool_free(pool);
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            double best = 0;
            for (int rep = 0; rep < 6; rep++) {
                const double dt = kc_bench_stream_pass(pool, wts, x, y, wsp);
                best = rep == 1 || (rep > 1 && dt < best) ? dt : best;
            }
            for (int i = 0; i < NMAT; i++) {
                kc_weight_release(&wts[i]);
            }
            printf("%-5s %2d %8.1f %10.1f %9.2f\n", td_name(ty), th, (double)bytes / 1048576.0,
                   best * 1e6, (double)bytes / best * 1e-9);
        }
        kc_pool_free(pool);
    }
    return 0;
}

static int kc_bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { NCAND = 7, NTYPES = sizeof(kc_stream_types) / sizeof(kc_stream_types[0]) };
static const int kc_tune_cand[NCAND] = {0, 1024, 2048, 4096, 8192, 16384, 32768};

/* Median GB/s of every stream type at every candidate distance on th threads, the candidates
 * interleaved (rotated each sweep, so a host whose speed drifts weighs on all alike). */
static int kc_bench_tune_sweep(int th, const uint8_t *w, const float *x, float *y, void *wsp,
                               double gbs[NTYPES][NCAND])
{
    enum { SWEEPS = 9, PASSES = 2 };
    static kc_weight wts[NMAT];
    const kc_tune saved = *kc_tune_get();
    kc_pool *pool = kc_pool_new(th, true);
    if (!pool) {
        return 1;
    }
    printf("%d thread(s): median GB/s of %d sweeps by prefetch distance (bytes)\n%-5s", th, SWEEPS,
           "type");
    for (int c = 0; c < NCAND; c++) {
        printf(" %8d", kc_tune_cand[c]);
    }
    printf("\n");
    for (int ti = 0; ti < NTYPES; ti++) {
        const tdtype ty = kc_stream_types[ti];
        const size_t bytes = kc_bench_stream_prepare(ty, w, wts);
        if (bytes == 0) {
            kc_pool_free(pool);
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        double s[NCAND][SWEEPS];
        (void)kc_bench_stream_pass(pool, wts, x, y, wsp); /* warm-up */
        for (int sw = 0; sw < SWEEPS; sw++) {
            for (int j = 0; j < NCAND; j++) {
                const int c = (j + sw) % NCAND;
                kc_tune t = saved;
                for (int i = 0; i < 2; i++) {
                    t.pf_quant[i] = t.pf_half[i] = t.pf_f32[i] = kc_tune_cand[c];
                }
                (void)kc_tune_set(&t);
                double best = 0;
                for (int p = 0; p < PASSES; p++) {
                    const double dt = kc_bench_stream_pass(pool, wts, x, y, wsp);
                    best = p == 0 || dt < best ? dt : best;
                }
                s[c][sw] = (double)bytes / best * 1e-9;
            }
        }
        (void)kc_tune_set(&saved);
        for (int i = 0; i < NMAT; i++) {
            kc_weight_release(&wts[i]);
        }
        printf("%-5s", td_name(ty));
        for (int c = 0; c < NCAND; c++) {
            qsort(s[c], SWEEPS, sizeof(double), kc_bench_cmp_double);
            gbs[ti][c] = s[c][SWEEPS / 2];
            printf(" %8.2f", gbs[ti][c]);
        }
        printf("\n");
        fflush(stdout);
    }
    kc_pool_free(pool);
    return 0;
}

/* The candidate whose mean over class cls's types (0 F32, 1 F16 + BF16, 2 quantized) of GB/s
 * relative to each type's best is highest. */
static int kc_bench_tune_pick(double gbs[NTYPES][NCAND], int cls)
{
    int pick = 0;
    double best_score = -1;
    for (int c = 0; c < NCAND; c++) {
        double score = 0;
        int nt = 0;
        for (int ti = 0; ti < NTYPES; ti++) {
            const tdtype ty = kc_stream_types[ti];
            const int tcls = ty == TD_F32 ? 0 : ty == TD_F16 || ty == TD_BF16 ? 1 : 2;
            if (tcls != cls) {
                continue;
            }
            double top = 0;
            for (int d = 0; d < NCAND; d++) {
                top = gbs[ti][d] > top ? gbs[ti][d] : top;
            }
            score += top > 0 ? gbs[ti][c] / top : 0;
            nt++;
        }
        score = nt ? score / nt : 0;
        if (score > best_score) {
            best_score = score;
            pick = c;
        }
    }
    return kc_tune_cand[pick];
}

/*
 * --tune [threads]: sweeps the decode prefetch distances on one thread and on `threads` (default
 * 2) and prints the best of each class as the TANDEM_CPU_TUNE line for this machine.
 */
static int kc_bench_tune(int th, const uint8_t *w, const float *x, float *y, void *wsp)
{
    static double gbs[2][NTYPES][NCAND];
    const kc_tune *cur = kc_tune_get();
    printf("isa %s, %s tuning (prefetch quant %d/%d, half %d/%d, f32 %d/%d B), stream: n=1 "
           "through %d matrices\n",
           kc_isa_name(kc_isa_active()), cur->uarch, cur->pf_quant[0], cur->pf_quant[1],
           cur->pf_half[0], cur->pf_half[1], cur->pf_f32[0], cur->pf_f32[1], NMAT);
    if (kc_bench_tune_sweep(1, w, x, y, wsp, gbs[0]) != 0 ||
        kc_bench_tune_sweep(th, w, x, y, wsp, gbs[1]) != 0) {
        return 1;
    }
    printf("TANDEM_CPU_TUNE=pf_quant=%d/%d,pf_half=%d/%d,pf_f32=%d/%d\n",
           kc_bench_tune_pick(gbs[0], 2), kc_bench_tune_pick(gbs[1], 2),
           kc_bench_tune_pick(gbs[0], 1), kc_bench_tune_pick(gbs[1], 1),
           kc_bench_tune_pick(gbs[0], 0), kc_bench_tune_pick(gbs[1], 0));
    return 0;
}

int main(int argc, char **argv)
{
    const bool tune = argc > 1 && strcmp(argv[1], "--tune") == 0;
    const bool stream = tune || (argc > 1 && strcmp(argv[1], "--stream") == 0);
    if (stream) {
        argc--;
        argv++;
    }
    double min_s = !stream && argc > 1 ? strtod(argv[1], NULL) : 0.2;
    const char *only =
        !stream && argc > 2 ? argv[2] : NULL; /* comma-separated type names, e.g. q4_K,q6_K */
    static const int64_t shapes[][2] = {{512, 512},   {512, 1536},  {1536, 512},
                                        {1024, 1024}, {1024, 2816}, {2816, 1024}};
    static const tdtype types[] = {TD_F32,  TD_F16,  TD_BF16, TD_Q8_0,   TD_Q4_0,
                                   TD_Q4_1, TD_Q5_0, TD_Q5_1, TD_IQ4_NL, TD_Q2_K,
                                   TD_Q3_K, TD_Q4_K, TD_Q5_K, TD_Q6_K,   TD_IQ4_XS};
    static const int64_t ns[] = {1, 512};
    const int64_t nmax = 512, kmax = 2816, mmax = 2816;
    float *x = malloc(sizeof(float) * (size_t)(nmax * kmax));
    float *y = malloc(sizeof(float) * (size_t)(nmax * mmax));
    uint8_t *w = malloc((size_t)kmax * (size_t)mmax * 4);
    /* the largest activation workspace of any type: Q8_K's */
    void *wsp = malloc((size_t)nmax * (size_t)(kmax / TD_QKK) * sizeof(td_block_q8_k) +
                       (size_t)nmax * (size_t)(kmax / TD_QK) * (sizeof(td_block_q8_0) + 4));
    if (!x || !y || !w || !wsp) {
        fprintf(stderr, "out of memory\n");
        free(x);
        free(y);
        free(w);
        free(wsp);
        return 1;
    }
    for (int64_t i = 0; i < nmax * kmax; i++) {
        x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    }
    for (size_t i = 0; i < (size_t)kmax * (size_t)mmax * 4; i++) {
        w[i] = (uint8_t)(i * 2654435761u >> 13);
    }
    /* keep f16/bf16/f32 values finite and Q scales small: patch every 16-bit word's exponent */
    for (size_t i = 0; i < (size_t)kmax * (size_t)mmax * 2; i++) {
        uint16_t *p = (uint16_t *)w + i;
        *p = (uint16_t)((*p & 0x83FF) | 0x3000);
    }
    if (stream) {
        char *end = NULL;
        long th = tune && argc > 1 ? strtol(argv[1], &end, 10) : 2;
        if (end && *end != '\0') {
            th = 0; /* not a number */
        }
        if (th < 2 || th > KC_POOL_MAX_THREADS) {
            fprintf(stderr, "kc_bench --tune: threads must be in [2, %d]\n", KC_POOL_MAX_THREADS);
            free(x);
            free(y);
            free(w);
            free(wsp);
            return 2;
        }
        const int rc = tune ? kc_bench_tune((int)th, w, x, y, wsp)
                            : kc_bench_stream(argc > 1 ? argv[1] : NULL, w, x, y, wsp);
        free(x);
        free(y);
        free(w);
        free(wsp);
        return rc;
    }
    printf("isa %s\n", kc_isa_name(kc_isa_active()));
    printf("%-5s %5s %5s %4s %2s %10s %9s %9s\n", "type", "k", "m", "n", "th", "us/call", "GB/s",
           "GFLOP/s");
    for (int th = 1; th <= 2; th++) {
        kc_pool *pool = kc_pool_new(th, true);
        if (!pool) {
            break;
        }
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            if (only && !kc_bench_listed(only, td_name(types[ti]))) {
                continue;
            }
            for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
                for (size_t ni = 0; ni < 2; ni++) {
                    kc_weight wt = {
                        .type = types[ti], .k = shapes[si][0], .m = shapes[si][1], .data = w};
                    if (kc_weight_prepare(&wt) != 0) {
                        fprintf(stderr, "out of memory\n");
                        break;
                    }
                    int64_t n = ns[ni];
                    size_t wbytes = td_row_bytes(wt.type, wt.k) * (size_t)wt.m;
                    int reps = 0;
                    double t0 = tandem_now_s(), t1;
                    do {
                        kc_matmul(pool, &wt, x, n, y, wsp, kc_matmul_wsize(&wt, n));
                        reps++;
                        t1 = tandem_now_s();
                    } while (t1 - t0 < min_s);
                    double per = (t1 - t0) / reps;
                    printf("%-5s %5ld %5ld %4ld %2d %10.1f %9.2f %9.2f\n", td_name(wt.type),
                           (long)wt.k, (long)wt.m, (long)n, th, per * 1e6, wbytes / per * 1e-9,
                           2.0 * (double)n * (double)wt.k * (double)wt.m / per * 1e-9);
                    kc_weight_release(&wt);
                }
            }
        }
        kc_pool_free(pool);
    }
    free(x);
    free(y);
    free(w);
    free(wsp);
    return 0;
}
