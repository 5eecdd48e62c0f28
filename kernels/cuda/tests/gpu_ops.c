/*
 * The token-wise ops and the paged attention of kcu.h on the GPU against the CPU kernels, on
 * random inputs with odd sizes. Exits 77 without a CUDA device.
 *
 * Tolerances (|gpu - cpu| <= tol * (1 + |cpu|)):
 *   embed (F32/F16/BF16/Q8_0/Q4_0), add, add_bias, gather_rows, store_kv: exact (0)
 *   swiglu: 1e-6 (CUDA expf within 2 ulp of glibc's)
 *   rmsnorm: 1e-5 (float tree sum of squares vs kc's double sum), and bit-exact against the
 *            host replay of the kernel (kcu_math.h's tree order, no libm call involved)
 *   rope: 1e-5 (CUDA sinf/cosf within 2 ulp; identical angles)
 *   attention: 5e-5 (summation order of scores and online softmax, f32 and f16 pools)
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cuda/kcu.h"
#include "kernels/cuda/kcu_math.h"

static uint64_t g_rng = 0x853C49E6748FEA9Bull;
static int g_fail;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "FAIL: out of host memory\n");
        exit(1);
    }
    return p;
}

static void *up(kcu_ctx *c, const void *h, size_t bytes)
{
    void *d = kcu_malloc(c, bytes ? bytes : 1);
    if (!d || kcu_h2d(c, d, h, bytes) != 0) {
        fprintf(stderr, "FAIL: upload of %zu bytes: %s\n", bytes, kcu_last_error());
        exit(1);
    }
    return d;
}

static void down(kcu_ctx *c, void *h, const void *d, size_t bytes)
{
    if (kcu_d2h(c, h, d, bytes) != 0 || kcu_sync(c) != 0) {
        fprintf(stderr, "FAIL: download: %s\n", kcu_last_error());
        exit(1);
    }
}

static void check_rc(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "FAIL: %s returned %d: %s\n", what, rc, kcu_last_error());
        exit(1);
    }
}

static void compare(const char *what, const float *gpu, const float *cpu, size_t n, float tol)
{
    for (size_t i = 0; i < n; i++) {
        if (!(fabsf(gpu[i] - cpu[i]) <= tol * (1.0f + fabsf(cpu[i])))) {
            fprintf(stderr, "FAIL: %s[%zu] = %.9g, cpu %.9g\n", what, i, gpu[i], cpu[i]);
            g_fail = 1;
            return;
        }
    }
    printf("ok: %s (%zu values)\n", what, n);
}

static void test_embed(kcu_ctx *c)
{
    const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    enum { ROWS = 37, DIM = 96, N = 11 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 7 + 3) % ROWS;
    }
    int32_t *d_ids = up(c, ids, sizeof(ids));
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        const size_t rb = td_row_bytes(types[t], DIM);
        uint8_t *table = xmalloc(rb * ROWS);
        for (size_t i = 0; i < rb * ROWS; i++) {
            table[i] = (uint8_t)(frand() * 127.0f + 128.0f);
        }
        for (int r = 0; r < ROWS; r++) { /* finite values: sane f16/bf16/float bit patterns */
            float row[DIM];
            for (int j = 0; j < DIM; j++) {
                row[j] = frand();
            }
            if (types[t] == TD_F32) {
                memcpy(table + r * rb, row, sizeof(row));
            } else if (types[t] == TD_F16) {
                kc_f32_to_f16_row(row, (uint16_t *)(table + r * rb), DIM);
            } else if (types[t] == TD_BF16) {
                for (int j = 0; j < DIM; j++) {
                    ((uint16_t *)(table + r * rb))[j] = kc_f32_to_bf16(row[j]);
                }
            } else {
                for (int b = 0; b < DIM / TD_QK; b++) { /* random quants, a sane scale */
                    uint16_t d = kc_f32_to_f16(0.01f + 0.001f * (float)b);
                    memcpy(table + r * rb + (size_t)b * td_block_bytes(types[t]), &d, 2);
                }
            }
        }
        float *want = xmalloc(sizeof(float) * N * DIM), *got = xmalloc(sizeof(float) * N * DIM);
        for (int i = 0; i < N; i++) {
            check_rc(kc_embed_row(types[t], table, DIM, ids[i], want + i * DIM), "kc_embed_row");
        }
        void *d_table = up(c, table, rb * ROWS);
        float *d_out = kcu_malloc(c, sizeof(float) * N * DIM);
        check_rc(kcu_embed(c, types[t], d_table, DIM, d_ids, N, d_out), "kcu_embed");
        down(c, got, d_out, sizeof(float) * N * DIM);
        char what[64];
        snprintf(what, sizeof(what), "embed %s", td_name(types[t]));
        compare(what, got, want, (size_t)N * DIM, 0.0f);
        kcu_free(c, d_table);
        kcu_free(c, d_out);
        free(table);
        free(want);
        free(got);
    }
    kcu_free(c, d_ids);
}

/* kcu_rmsnorm's kernel replayed on the host (as host_tests/test_kcu_math.c): the same bits. */
static void rmsnorm_emul(const float *x, const float *w, float *y, int64_t n, float eps)
{
    float part[KCU_NORM_THREADS];
    for (int t = 0; t < KCU_NORM_THREADS; t++) {
        float acc = 0.0f;
        for (int64_t j = t; j < n; j += KCU_NORM_THREADS) {
            acc = kcu_sumsq_step(acc, x[j]);
        }
        part[t] = acc;
    }
    const float scale = kcu_rms_scale(kcu_tree_sum(part, KCU_NORM_THREADS), n, eps);
    for (int64_t j = 0; j < n; j++) {
        y[j] = kcu_rms_apply(x[j], scale, w ? w[j] : 1.0f);
    }
}

static void test_rows(kcu_ctx *c)
{
    const int64_t dims[] = {1, 33, 256, 1000, 4097};
    for (size_t k = 0; k < sizeof(dims) / sizeof(dims[0]); k++) {
        const int64_t dim = dims[k], n = 5;
        const size_t sz = (size_t)(n * dim) * sizeof(float);
        float *x = xmalloc(sz), *w = xmalloc((size_t)dim * 4), *b = xmalloc((size_t)dim * 4);
        float *want = xmalloc(sz), *got = xmalloc(sz), *y = xmalloc(sz);
        for (int64_t i = 0; i < n * dim; i++) {
            x[i] = frand() * 3.0f;
            y[i] = frand();
        }
        for (int64_t j = 0; j < dim; j++) {
            w[j] = 1.0f + frand() * 0.3f;
            b[j] = frand();
        }
        float *d_x = up(c, x, sz), *d_w = up(c, w, (size_t)dim * 4),
              *d_b = up(c, b, (size_t)dim * 4);
        float *d_y = up(c, y, sz), *d_o = kcu_malloc(c, sz);
        /* rmsnorm, with and without weight, out of place */
        for (int wi = 0; wi < 2; wi++) {
            for (int64_t i = 0; i < n; i++) {
                kc_rmsnorm(x + i * dim, wi ? w : NULL, want + i * dim, dim, 1e-5f);
            }
            check_rc(kcu_rmsnorm(c, d_x, wi ? d_w : NULL, d_o, n, dim, 1e-5f), "kcu_rmsnorm");
            down(c, got, d_o, sz);
            compare("rmsnorm", got, want, (size_t)(n * dim), 1e-5f);
            for (int64_t i = 0; i < n; i++) {
                rmsnorm_emul(x + i * dim, wi ? w : NULL, want + i * dim, dim, 1e-5f);
            }
            compare("rmsnorm vs host replay", got, want, (size_t)(n * dim), 0.0f);
        }
        /* add_bias and add (in place on copies) */
        memcpy(want, x, sz);
        for (int64_t i = 0; i < n; i++) {
            kc_add(want + i * dim, b, dim);
        }
        check_rc(kcu_h2d(c, d_o, x, sz), "h2d");
        check_rc(kcu_add_bias(c, d_o, d_b, n, dim), "kcu_add_bias");
        down(c, got, d_o, sz);
        compare("add_bias", got, want, (size_t)(n * dim), 0.0f);
        memcpy(want, y, sz);
        kc_add(want, x, n * dim);
        check_rc(kcu_add(c, d_y, d_x, n * dim), "kcu_add");
        down(c, got, d_y, sz);
        compare("add", got, want, (size_t)(n * dim), 0.0f);
        /* swiglu: gate = x, up = y (original) */
        kc_swiglu(x, y, want, n * dim);
        check_rc(kcu_h2d(c, d_y, y, sz), "h2d");
        check_rc(kcu_h2d(c, d_o, x, sz), "h2d");
        check_rc(kcu_swiglu(c, d_o, d_y, n * dim), "kcu_swiglu");
        down(c, got, d_o, sz);
        compare("swiglu", got, want, (size_t)(n * dim), 1e-6f);
        /* gather rows 4, 0, 4 */
        const int32_t rows[3] = {4, 0, 4};
        int32_t *d_rows = up(c, rows, sizeof(rows));
        for (int i = 0; i < 3; i++) {
            memcpy(want + i * dim, x + rows[i] * dim, (size_t)dim * 4);
        }
        check_rc(kcu_gather_rows(c, d_o, d_x, d_rows, 3, dim), "kcu_gather_rows");
        down(c, got, d_o, (size_t)(3 * dim) * 4);
        compare("gather_rows", got, want, (size_t)(3 * dim), 0.0f);
        kcu_free(c, d_rows);
        kcu_free(c, d_x);
        kcu_free(c, d_w);
        kcu_free(c, d_b);
        kcu_free(c, d_y);
        kcu_free(c, d_o);
        free(x);
        free(w);
        free(b);
        free(want);
        free(got);
        free(y);
    }
}

static void test_rope(kcu_ctx *c)
{
    const struct {
        int n_head, head_dim, n_rot;
    } shapes[] = {{4, 64, 64}, {3, 80, 32}, {2, 128, 128}, {5, 6, 2}};
    const size_t n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    for (size_t r = 0; r < 3 * n_shapes; r++) {
        /* the second round with RoPE scaling: Llama 3 style factors and a linear freq_scale; the
         * third YaRN (factor 4, original context 4096) with an attn_factor */
        const size_t k = r % n_shapes;
        const int scaled = r >= n_shapes && r < 2 * n_shapes;
        const int yarn = r >= 2 * n_shapes;
        kcu_rope_scaling sc = {.freq_scale = scaled ? 0.5f
                                             : yarn ? 0.25f
                                                    : 1.0f,
                               .ext_factor = yarn ? 1.0f : 0.0f,
                               .attn_factor = yarn ? 0.9375f : 1.0f};
        kc_rope_yarn_corr_dims(shapes[k].n_rot, 4096, 10000.0f, 32.0f, 1.0f, sc.corr_dims);
        float ff[64];
        for (int i = 0; i < 64; i++) {
            ff[i] = 1.0f + (float)(i % 9) * 0.875f;
        }
        float *d_ff = scaled ? up(c, ff, sizeof(ff)) : NULL;
        sc.d_freq_factors = d_ff;
        for (int neox = 0; neox < 2; neox++) {
            enum { N = 7 };
            const int width = shapes[k].n_head * shapes[k].head_dim;
            const size_t sz = (size_t)N * (size_t)width * sizeof(float);
            const int32_t pos[N] = {0, 1, 2, 100, 4095, 32768, 131071};
            float *x = xmalloc(sz), *got = xmalloc(sz), cs[512];
            for (int i = 0; i < N * width; i++) {
                x[i] = frand() * 2.0f;
            }
            float *d_x = up(c, x, sz);
            int32_t *d_pos = up(c, pos, sizeof(pos));
            for (int i = 0; i < N; i++) {
                kc_rope_cache_yarn(cs, shapes[k].n_rot, pos[i], 10000.0f, sc.freq_scale,
                                   scaled ? ff : NULL, sc.ext_factor, sc.attn_factor, sc.corr_dims);
                kc_rope_apply(x + i * width, shapes[k].n_head, shapes[k].head_dim, shapes[k].n_rot,
                              cs, neox != 0);
            }
            check_rc(kcu_rope(c, d_x, N, shapes[k].n_head, shapes[k].head_dim, shapes[k].n_rot,
                              d_pos, 10000.0f, neox != 0, r < n_shapes ? NULL : &sc),
                     "kcu_rope");
            down(c, got, d_x, sz);
            compare(yarn ? (neox ? "rope neox yarn" : "rope norm yarn")
                         : (neox ? "rope neox" : "rope norm"),
                    got, x, (size_t)N * (size_t)width, 1e-5f);
            kcu_free(c, d_x);
            kcu_free(c, d_pos);
            free(x);
            free(got);
        }
        if (d_ff) {
            kcu_free(c, d_ff);
        }
    }
}

/* store_kv of every token, then attention, against kc_attention on the same pools. */
static void test_attention(kcu_ctx *c, int bs, int n_head, int n_head_kv, int hd, bool f16,
                           int n_seqs, const int32_t *n_new, const int32_t *start)
{
    int32_t n_tok = 0, max_new = 0, max_ctx = 0, n_blocks = 0, n_all = 0;
    int32_t seq_tok[8], seq_bt[8];
    for (int s = 0; s < n_seqs; s++) {
        const int32_t ctx = start[s] + n_new[s];
        seq_tok[s] = n_tok;
        seq_bt[s] = n_blocks;
        n_tok += n_new[s];
        n_all += ctx;
        max_new = n_new[s] > max_new ? n_new[s] : max_new;
        max_ctx = ctx > max_ctx ? ctx : max_ctx;
        n_blocks += (ctx + bs - 1) / bs;
    }
    const int num_blocks = n_blocks + 2;
    int32_t *bt = xmalloc(sizeof(int32_t) * (size_t)num_blocks);
    for (int i = 0; i < num_blocks; i++) { /* scattered block tables: a random permutation */
        bt[i] = i;
    }
    for (int i = num_blocks - 1; i > 0; i--) {
        const int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        const int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    const int kvw = n_head_kv * hd;
    const size_t esz = f16 ? 2 : 4;
    const size_t pool = (size_t)num_blocks * (size_t)kvw * (size_t)bs * esz;
    /* every cached token's K/V row and slot (all positions of all sequences) */
    float *k = xmalloc(sizeof(float) * (size_t)n_all * kvw);
    float *v = xmalloc(sizeof(float) * (size_t)n_all * kvw);
    int32_t *slot = xmalloc(sizeof(int32_t) * (size_t)n_all);
    void *hk = calloc(1, pool), *hv = calloc(1, pool);
    if (!hk || !hv) {
        fprintf(stderr, "FAIL: out of host memory\n");
        exit(1);
    }
    int32_t r = 0;
    for (int s = 0; s < n_seqs; s++) {
        for (int32_t p = 0; p < start[s] + n_new[s]; p++, r++) {
            slot[r] = bt[seq_bt[s] + p / bs] * bs + p % bs;
            for (int e = 0; e < kvw; e++) {
                k[(size_t)r * kvw + e] = frand() * 2.0f;
                v[(size_t)r * kvw + e] = frand();
                const size_t idx =
                    (((size_t)(slot[r] / bs) * n_head_kv + e / hd) * bs + slot[r] % bs) * hd +
                    e % hd;
                if (f16) {
                    ((uint16_t *)hk)[idx] = kc_f32_to_f16(k[(size_t)r * kvw + e]);
                    ((uint16_t *)hv)[idx] = kc_f32_to_f16(v[(size_t)r * kvw + e]);
                } else {
                    ((float *)hk)[idx] = k[(size_t)r * kvw + e];
                    ((float *)hv)[idx] = v[(size_t)r * kvw + e];
                }
            }
        }
    }
    const int64_t qw = (int64_t)n_head * hd;
    float *q = xmalloc(sizeof(float) * (size_t)(n_tok * qw));
    float *want = xmalloc(sizeof(float) * (size_t)(n_tok * qw));
    float *got = xmalloc(sizeof(float) * (size_t)(n_tok * qw));
    for (int64_t i = 0; i < n_tok * qw; i++) {
        q[i] = frand() * 2.0f;
    }
    kcu_paged_kv kv = {.d_k = kcu_malloc(c, pool),
                       .d_v = kcu_malloc(c, pool),
                       .f16 = f16,
                       .block_size = bs,
                       .n_head_kv = n_head_kv,
                       .head_dim = hd};
    check_rc(kv.d_k && kv.d_v ? 0 : -ENOMEM, "kcu_malloc pools");
    check_rc(kcu_memset(c, kv.d_k, 0, pool), "memset");
    check_rc(kcu_memset(c, kv.d_v, 0, pool), "memset");
    float *d_k = up(c, k, sizeof(float) * (size_t)n_all * kvw);
    float *d_v = up(c, v, sizeof(float) * (size_t)n_all * kvw);
    int32_t *d_slot = up(c, slot, sizeof(int32_t) * (size_t)n_all);
    check_rc(kcu_store_kv(c, &kv, d_k, d_v, d_slot, n_all), "kcu_store_kv");
    uint8_t *back = xmalloc(pool);
    down(c, back, kv.d_k, pool);
    if (memcmp(back, hk, pool) != 0) {
        fprintf(stderr, "FAIL: store_kv K pool differs\n");
        g_fail = 1;
    }
    down(c, back, kv.d_v, pool);
    if (memcmp(back, hv, pool) != 0) {
        fprintf(stderr, "FAIL: store_kv V pool differs\n");
        g_fail = 1;
    }
    kc_paged_kv ckv = {
        .k = hk, .v = hv, .f16 = f16, .block_size = bs, .n_head_kv = n_head_kv, .head_dim = hd};
    kc_attn_seq seqs[8];
    for (int s = 0; s < n_seqs; s++) {
        seqs[s] = (kc_attn_seq){.n_new = n_new[s],
                                .start_pos = start[s],
                                .block_table = bt + seq_bt[s],
                                .q = q + seq_tok[s] * qw,
                                .out = want + seq_tok[s] * qw};
    }
    const float scale = 1.0f / sqrtf((float)hd);
    check_rc(kc_attention(NULL, &ckv, n_head, seqs, n_seqs, qw, qw, scale), "kc_attention");
    kcu_attn_batch a = {.n_seqs = n_seqs,
                        .n_tokens = n_tok,
                        .d_seq_tok = up(c, seq_tok, sizeof(int32_t) * (size_t)n_seqs),
                        .d_seq_new = up(c, n_new, sizeof(int32_t) * (size_t)n_seqs),
                        .d_seq_start = up(c, start, sizeof(int32_t) * (size_t)n_seqs),
                        .d_seq_bt = up(c, seq_bt, sizeof(int32_t) * (size_t)n_seqs),
                        .d_block_tables = up(c, bt, sizeof(int32_t) * (size_t)num_blocks),
                        .max_new = max_new,
                        .max_ctx = max_ctx,
                        .d_q = up(c, q, sizeof(float) * (size_t)(n_tok * qw)),
                        .d_out = kcu_malloc(c, sizeof(float) * (size_t)(n_tok * qw)),
                        .n_head = n_head,
                        .scale = scale};
    /* with the workspace (split-K where the batch allows) and without (one pass) */
    const size_t wsp_bytes = kcu_attention_workspace(&kv, &a);
    void *d_wsp = wsp_bytes ? kcu_malloc(c, wsp_bytes) : NULL;
    for (int pass = 0; pass < 2; pass++) {
        check_rc(kcu_memset(c, a.d_out, 0xff, sizeof(float) * (size_t)(n_tok * qw)), "memset");
        check_rc(kcu_attention(c, &kv, &a, pass ? NULL : d_wsp, pass ? 0 : wsp_bytes),
                 "kcu_attention");
        down(c, got, a.d_out, sizeof(float) * (size_t)(n_tok * qw));
        char what[128];
        snprintf(what, sizeof(what), "attention bs=%d heads=%d/%d hd=%d %s seqs=%d max_new=%d %s",
                 bs, n_head, n_head_kv, hd, f16 ? "f16" : "f32", n_seqs, max_new,
                 pass || !wsp_bytes ? "one pass" : "split-K");
        compare(what, got, want, (size_t)(n_tok * qw), 5e-5f);
    }
    kcu_free(c, d_wsp);
    kcu_free(c, (void *)a.d_seq_tok);
    kcu_free(c, (void *)a.d_seq_new);
    kcu_free(c, (void *)a.d_seq_start);
    kcu_free(c, (void *)a.d_seq_bt);
    kcu_free(c, (void *)a.d_block_tables);
    kcu_free(c, (void *)a.d_q);
    kcu_free(c, a.d_out);
    kcu_free(c, kv.d_k);
    kcu_free(c, kv.d_v);
    kcu_free(c, d_k);
    kcu_free(c, d_v);
    kcu_free(c, d_slot);
    free(bt);
    free(k);
    free(v);
    free(slot);
    free(hk);
    free(hv);
    free(q);
    free(want);
    free(got);
    free(back);
}

static void test_bad_args(kcu_ctx *c)
{
    if (kcu_rmsnorm(c, NULL, NULL, NULL, 1, 8, 1e-5f) != -EINVAL ||
        kcu_rope(c, NULL, 0, 2, 8, 3, NULL, 1e4f, false, NULL) != -EINVAL ||
        kcu_embed(c, TD_Q8_0, NULL, 33, NULL, 0, NULL) != -EINVAL) {
        fprintf(stderr, "FAIL: bad arguments not rejected\n");
        g_fail = 1;
        return;
    }
    printf("ok: bad arguments rejected\n");
}

int main(void)
{
    char err[256];
    if (kcu_device_count(err, sizeof(err)) == 0) {
        printf("SKIP: no CUDA device (%s)\n", err);
        return 77;
    }
    kcu_ctx *c = kcu_ctx_create(0, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "FAIL: kcu_ctx_create: %s\n", err);
        return 1;
    }
    test_bad_args(c);
    test_embed(c);
    test_rows(c);
    test_rope(c);
    const int32_t dec_new[4] = {1, 1, 1, 1}, dec_start[4] = {0, 37, 1500, 700};
    const int32_t pre_new[3] = {9, 1, 40}, pre_start[3] = {0, 20, 33};
    test_attention(c, 16, 8, 2, 64, false, 4, dec_new, dec_start);
    test_attention(c, 16, 8, 2, 128, true, 4, dec_new, dec_start);
    test_attention(c, 7, 6, 3, 80, true, 3, dec_new, dec_start);
    test_attention(c, 256, 4, 4, 256, false, 2, dec_new, dec_start + 2);
    test_attention(c, 1, 2, 1, 33, false, 2, dec_new, dec_start);
    test_attention(c, 16, 8, 2, 64, false, 3, pre_new, pre_start);
    test_attention(c, 32, 4, 1, 128, true, 3, pre_new, pre_start);
    test_attention(c, 16, 2, 2, 512, true, 2, pre_new, pre_start);
    kcu_ctx_destroy(c);
    if (g_fail) {
        return 1;
    }
    printf("ok: all ops match the CPU kernels\n");
    return 0;
}
