/*
 * Unit tests for the CPU backend: logits of small random models (llama NORM RoPE, qwen2 biases +
 * NeoX, qwen3 q/k norms with head_dim != n_embd / n_head; GQA and MHA; tied and untied output;
 * weights in all five types) against a naive dense forward in double written here, and
 * invariances: alone vs batched with other sequences vs chunked prefill vs one token at a time
 * vs two threads, f16 vs f32 KV cache. Bad batches and configs get errors.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/tests/backend_test_model.h"
#include "engine/core/backend.h"
#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_matmul.h"

#define BLOCK   4
#define NBLOCKS 64

static const char *model_arch_name_test(model_arch a)
{
    return a == MODEL_ARCH_LLAMA ? "llama" : a == MODEL_ARCH_QWEN2 ? "qwen2" : "qwen3";
}

/* ---- dense reference forward in double ---- */

static void ref_rmsnorm(const double *x, const model_tensor *w, double *y, int n, double eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        ss += x[i] * x[i];
    }
    const double sc = 1.0 / sqrt(ss / n + eps);
    const float *wv = w->data;
    for (int i = 0; i < n; i++) {
        y[i] = x[i] * sc * (double)wv[i];
    }
}

/* y[m] = W x; for Q8_0/Q4_0 weights x goes through Q8_0 like the backend's activations, for
 * BF16 through BF16 where the backend does that (kc_bf16_dot_active). */
static void ref_mm(const model_tensor *w, const double *x, int k, int m, double *y)
{
    float *xf = malloc(sizeof(float) * (size_t)k);
    float *wr = malloc(sizeof(float) * (size_t)k);
    td_block_q8_0 *xq = malloc(sizeof(td_block_q8_0) * (size_t)(k / 32 + 1));
    assert_non_null(xf);
    assert_non_null(wr);
    assert_non_null(xq);
    for (int i = 0; i < k; i++) {
        xf[i] = (float)x[i];
    }
    if (w->type == TD_Q8_0 || w->type == TD_Q4_0) {
        kc_quantize_row_q8_0(xf, xq, k);
        assert_int_equal(kc_dequantize_row(TD_Q8_0, xq, xf, k), 0);
    }
    if (w->type == TD_BF16 && kc_bf16_dot_active()) { /* activations rounded to BF16 */
        for (int i = 0; i < k; i++) {
            xf[i] = kc_bf16_to_f32(kc_f32_to_bf16(xf[i]));
        }
    }
    size_t rb = td_row_bytes(w->type, k);
    for (int r = 0; r < m; r++) {
        assert_int_equal(
            kc_dequantize_row(w->type, (const uint8_t *)w->data + rb * (size_t)r, wr, k), 0);
        double s = 0.0;
        for (int i = 0; i < k; i++) {
            s += (double)wr[i] * (double)xf[i];
        }
        y[r] = s;
    }
    free(xf);
    free(wr);
    free(xq);
}

static void ref_rope(double *x, int n_heads, int hd, int n_rot, int pos, double base, bool neox)
{
    for (int h = 0; h < n_heads; h++) {
        double *xh = x + h * hd;
        for (int i = 0; i < n_rot / 2; i++) {
            const double th = pos * pow(base, -2.0 * i / n_rot);
            const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
            const double a = xh[i0], b = xh[i1];
            xh[i0] = a * cos(th) - b * sin(th);
            xh[i1] = a * sin(th) + b * cos(th);
        }
    }
}

/* The dense or (c->n_expert > 0) MoE feed-forward of one token: y = FFN(xn). The MoE picks the
 * n_expert_used largest router softmax probabilities and mixes those experts by the chosen
 * probabilities renormalized to sum to 1. */
static void ref_ffn(const model *m, const model_layer *L, const double *xn, double *y, double *g,
                    double *u)
{
    const model_config *c = &m->cfg;
    const int E = c->n_embd;
    const bool moe = c->n_expert > 0;
    const int F = moe ? c->n_ff_exp : c->n_ff;
    double p[64];
    int chosen[64];
    int n_use = 1;
    double wsum = 0.0;
    if (moe) {
        assert_true(c->n_expert <= 64);
        ref_mm(L->ffn_gate_inp, xn, E, c->n_expert, p);
        double mx = -1e300, z = 0.0;
        for (int e = 0; e < c->n_expert; e++) {
            mx = fmax(mx, p[e]);
        }
        for (int e = 0; e < c->n_expert; e++) {
            p[e] = exp(p[e] - mx);
            z += p[e];
        }
        for (int e = 0; e < c->n_expert; e++) {
            p[e] /= z;
        }
        bool used[64] = {false};
        n_use = c->n_expert_used;
        for (int j = 0; j < n_use; j++) {
            int best = 0;
            while (used[best]) {
                best++;
            }
            for (int e = best + 1; e < c->n_expert; e++) {
                if (!used[e] && p[e] > p[best]) {
                    best = e;
                }
            }
            used[best] = true;
            chosen[j] = best;
            wsum += p[best];
        }
    }
    for (int i = 0; i < E; i++) {
        y[i] = 0.0;
    }
    double *o = g + F; /* one expert's output, after its hidden values */
    for (int j = 0; j < n_use; j++) {
        const model_tensor *wg = moe ? L->exp_gate[chosen[j]] : L->w_gate;
        const model_tensor *wu = moe ? L->exp_up[chosen[j]] : L->w_up;
        const model_tensor *wd = moe ? L->exp_down[chosen[j]] : L->w_down;
        ref_mm(wg, xn, E, F, g);
        ref_mm(wu, xn, E, F, u);
        for (int i = 0; i < F; i++) {
            const double a = g[i];
            g[i] =
                c->ffn_act == MODEL_ACT_GELU_TANH
                    ? 0.5 * a * (1.0 + tanh(sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a))) * u[i]
                    : a / (1.0 + exp(-a)) * u[i];
        }
        ref_mm(wd, g, F, E, o);
        const double w = moe ? p[chosen[j]] / wsum : 1.0;
        for (int i = 0; i < E; i++) {
            y[i] += w * o[i];
        }
    }
}

/* Logits of every position of toks[0..n) -> out[n][vocab]. */
static void ref_forward(const model *m, const int32_t *toks, int n, double *out)
{
    const model_config *c = &m->cfg;
    const int E = c->n_embd, hd = c->head_dim, H = c->n_head, HK = c->n_head_kv, F = c->n_ff;
    const int qd = H * hd, kvd = HK * hd, V = c->n_vocab;
    double *x = calloc((size_t)n * E, sizeof(double));
    double *xn = calloc((size_t)E > (size_t)qd ? (size_t)E : (size_t)qd, sizeof(double));
    double *q = calloc((size_t)n * qd, sizeof(double));
    double *K = calloc((size_t)n * kvd, sizeof(double));
    double *Vv = calloc((size_t)n * kvd, sizeof(double));
    double *att = calloc((size_t)qd, sizeof(double));
    double *tmp = calloc((size_t)(E > F ? E : F) + (size_t)V, sizeof(double));
    const int FF = c->n_ff_exp > F ? c->n_ff_exp : F;
    double *g = calloc((size_t)FF + (size_t)E, sizeof(double));
    double *u = calloc((size_t)FF, sizeof(double));
    double *sc = calloc((size_t)n, sizeof(double));
    float *row = calloc((size_t)E, sizeof(float));
    assert_true(x && xn && q && K && Vv && att && tmp && g && u && sc && row);
    for (int t = 0; t < n; t++) {
        assert_int_equal(kc_dequantize_row(m->tok_embd->type,
                                           (const uint8_t *)m->tok_embd->data +
                                               td_row_bytes(m->tok_embd->type, E) * (size_t)toks[t],
                                           row, E),
                         0);
        for (int i = 0; i < E; i++) {
            x[(size_t)t * E + i] = row[i] * (c->embd_scale > 0.0f ? (double)c->embd_scale : 1.0);
        }
    }
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(x + (size_t)t * E, L->attn_norm, xn, E, c->rms_eps);
            ref_mm(L->wq, xn, E, qd, q + (size_t)t * qd);
            ref_mm(L->wk, xn, E, kvd, K + (size_t)t * kvd);
            ref_mm(L->wv, xn, E, kvd, Vv + (size_t)t * kvd);
            if (L->bq) {
                for (int i = 0; i < qd; i++) {
                    q[(size_t)t * qd + i] += ((const float *)L->bq->data)[i];
                }
                for (int i = 0; i < kvd; i++) {
                    K[(size_t)t * kvd + i] += ((const float *)L->bk->data)[i];
                    Vv[(size_t)t * kvd + i] += ((const float *)L->bv->data)[i];
                }
            }
            if (L->q_norm) {
                for (int h = 0; h < H; h++) {
                    double *p = q + (size_t)t * qd + h * hd;
                    ref_rmsnorm(p, L->q_norm, p, hd, c->rms_eps);
                }
                for (int h = 0; h < HK; h++) {
                    double *p = K + (size_t)t * kvd + h * hd;
                    ref_rmsnorm(p, L->k_norm, p, hd, c->rms_eps);
                }
            }
            const double base = L->swa ? c->rope_base_swa : c->rope_base;
            ref_rope(q + (size_t)t * qd, H, hd, c->n_rot, t, base, c->rope_neox);
            ref_rope(K + (size_t)t * kvd, HK, hd, c->n_rot, t, base, c->rope_neox);
        }
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < H; h++) {
                const int hk = h / (H / HK);
                double mx = -1e300, sum = 0.0;
                const int j0 = L->swa && t + 1 > c->n_swa ? t + 1 - c->n_swa : 0;
                const double scale =
                    c->attn_scale > 0.0f ? (double)c->attn_scale : 1.0 / sqrt((double)hd);
                for (int j = j0; j <= t; j++) {
                    double d = 0.0;
                    for (int i = 0; i < hd; i++) {
                        d += q[(size_t)t * qd + h * hd + i] * K[(size_t)j * kvd + hk * hd + i];
                    }
                    sc[j] = d * scale;
                    if (c->attn_softcap > 0.0f) {
                        sc[j] = c->attn_softcap * tanh(sc[j] / c->attn_softcap);
                    }
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = j0; j <= t; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int i = 0; i < hd; i++) {
                    double a = 0.0;
                    for (int j = j0; j <= t; j++) {
                        a += sc[j] * Vv[(size_t)j * kvd + hk * hd + i];
                    }
                    att[h * hd + i] = a / sum;
                }
            }
            double *xt = x + (size_t)t * E;
            ref_mm(L->wo, att, qd, E, tmp);
            if (L->attn_post_norm) {
                ref_rmsnorm(tmp, L->attn_post_norm, tmp, E, c->rms_eps);
            }
            for (int i = 0; i < E; i++) {
                xt[i] += tmp[i];
            }
            ref_rmsnorm(xt, L->ffn_norm, xn, E, c->rms_eps);
            ref_ffn(m, L, xn, tmp, g, u);
            if (L->ffn_post_norm) {
                ref_rmsnorm(tmp, L->ffn_post_norm, tmp, E, c->rms_eps);
            }
            for (int i = 0; i < E; i++) {
                xt[i] += tmp[i];
            }
        }
    }
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(x + (size_t)t * E, m->output_norm, xn, E, c->rms_eps);
        ref_mm(m->output, xn, E, V, out + (size_t)t * V);
        for (int v = 0; c->final_softcap > 0.0f && v < V; v++) {
            out[(size_t)t * V + v] =
                c->final_softcap * tanh(out[(size_t)t * V + v] / c->final_softcap);
        }
    }
    free(x);
    free(xn);
    free(q);
    free(K);
    free(Vv);
    free(att);
    free(tmp);
    free(g);
    free(u);
    free(sc);
    free(row);
}

/* ---- backend drivers ---- */

static backend *make_backend(const model *m, kv_dtype dt, int threads)
{
    backend_config cfg = {.num_blocks = NBLOCKS,
                          .block_size = BLOCK,
                          .kv_dtype = dt,
                          .max_batch_tokens = 64,
                          .max_seqs = 4,
                          .n_threads = threads,
                          .pin_threads = false};
    char err[256] = "";
    backend *b = cpu_backend_ops.create(m, &cfg, err, sizeof(err));
    if (!b) {
        fail_msg("create failed: %s", err);
    }
    return b;
}

/* Feeds toks[0..n) of one sequence (block table bt) in chunks of the given sizes; logits of
 * the last token of each chunk into out[chunk][V] (out may be NULL). */
static void run_chunks(backend *b, const int32_t *toks, int n, const int32_t *bt, const int *chunks,
                       int n_chunks, float *out, int V)
{
    int pos = 0;
    for (int c = 0; c < n_chunks && pos < n; c++) {
        int len = chunks[c] < n - pos ? chunks[c] : n - pos;
        fwd_seq s = {.n_new = len,
                     .start_pos = pos,
                     .block_table = bt,
                     .n_blocks = (pos + len + BLOCK - 1) / BLOCK,
                     .want_logits = out != NULL};
        fwd_batch batch = {.n_tokens = len,
                           .tokens = toks + pos,
                           .n_seqs = 1,
                           .seqs = &s,
                           .logits = out ? out + (size_t)c * V : NULL};
        assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
        pos += len;
    }
}

static void fill_tokens(int32_t *toks, int n, int vocab, int salt)
{
    for (int i = 0; i < n; i++) {
        toks[i] = (int32_t)((i * 37 + salt * 11 + 5) % vocab);
    }
}

/* Compares every position's logits (one token at a time) against the reference. */
static double check_vs_reference(const tm_spec *sp, double tol)
{
    model *m = tm_build(sp);
    assert_non_null(m);
    const int n = 11, V = sp->n_vocab;
    int32_t toks[11];
    fill_tokens(toks, n, V, (int)sp->seed);
    double *ref = malloc(sizeof(double) * (size_t)n * V);
    float *got = malloc(sizeof(float) * (size_t)n * V);
    assert_non_null(ref);
    assert_non_null(got);
    ref_forward(m, toks, n, ref);
    backend *b = make_backend(m, KV_DTYPE_F32, 1);
    const int32_t bt[] = {9, 2, 30, 17};
    const int ones[11] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    run_chunks(b, toks, n, bt, ones, n, got, V);
    double worst = 0.0, scale = 0.0;
    for (int i = 0; i < n * V; i++) {
        worst = fmax(worst, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    print_message("    %s %s hd %d heads %d/%d%s%s%s%s: max |dlogit| %.3g (logit scale %.3g)\n",
                  model_arch_name_test(sp->arch), td_name(sp->wtype), sp->head_dim, sp->n_head,
                  sp->n_head_kv, sp->tied ? " tied" : "", sp->gemma ? " gemma+swa" : "",
                  sp->n_expert ? " experts" : "", sp->n_rot ? " partial-rotary" : "", worst, scale);
    if (worst > tol * fmax(1.0, scale)) {
        fail_msg("logits differ from the reference by %g (tolerance %g x scale %g)", worst, tol,
                 scale);
    }
    cpu_backend_ops.destroy(b);
    free(ref);
    free(got);
    tm_free(m);
    return worst;
}

static const tm_spec k_llama = {.arch = MODEL_ARCH_LLAMA,
                                .n_layer = 2,
                                .n_embd = 64,
                                .n_head = 4,
                                .n_head_kv = 2,
                                .head_dim = 16,
                                .n_ff = 96,
                                .n_vocab = 101,
                                .wtype = TD_F32,
                                .tied = false,
                                .seed = 1};
static const tm_spec k_qwen2 = {.arch = MODEL_ARCH_QWEN2,
                                .n_layer = 2,
                                .n_embd = 64,
                                .n_head = 4,
                                .n_head_kv = 4,
                                .head_dim = 16,
                                .n_ff = 128,
                                .n_vocab = 77,
                                .wtype = TD_F32,
                                .tied = true,
                                .seed = 2};
static const tm_spec k_qwen3 = {.arch = MODEL_ARCH_QWEN3,
                                .n_layer = 2,
                                .n_embd = 64,
                                .n_head = 4,
                                .n_head_kv = 2,
                                .head_dim = 32,
                                .n_ff = 96,
                                .n_vocab = 90,
                                .wtype = TD_F32,
                                .tied = false,
                                .seed = 3};

static void test_reference_f32(void **state)
{
    (void)state;
    kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        print_message("  isa %s\n", kc_isa_name((kc_isa)isa));
        check_vs_reference(&k_llama, 1e-4);
        check_vs_reference(&k_qwen2, 1e-4);
        check_vs_reference(&k_qwen3, 1e-4);
        /* gemma's features with sliding windows (11 positions, window 4, even layers), experts,
         * partial rotary dims */
        tm_spec g = k_qwen3, moe = k_llama, part = k_qwen2;
        g.gemma = true;
        g.n_swa = 4;
        moe.n_expert = 6;
        moe.n_used = 2;
        part.n_rot = 8;
        check_vs_reference(&g, 1e-4);
        check_vs_reference(&moe, 1e-4);
        check_vs_reference(&part, 1e-4);
    }
    assert_int_equal(kc_isa_set(best), 0);
}

static void test_reference_other_types(void **state)
{
    (void)state;
    /* F16/BF16 weights are exact in f32 after conversion: same bound as F32. Q8_0/Q4_0: the
     * reference quantizes activations like the backend, but a one-ulp difference upstream can
     * flip an activation's rounding, so the bound is looser. */
    static const struct {
        tdtype t;
        double tol;
    } cases[] = {{TD_F16, 1e-4}, {TD_BF16, 1e-4}, {TD_Q8_0, 2e-2}, {TD_Q4_0, 2e-2}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tm_spec a = k_llama, q2 = k_qwen2, q3 = k_qwen3;
        a.wtype = q2.wtype = q3.wtype = cases[i].t;
        check_vs_reference(&a, cases[i].tol);
        check_vs_reference(&q2, cases[i].tol);
        check_vs_reference(&q3, cases[i].tol);
    }
}

/* Sequence A alone (whole), in chunks 5+7+1, one at a time, batched with B and C, two threads:
 * the last logits must agree. */
static void check_invariance(const tm_spec *sp)
{
    model *m = tm_build(sp);
    assert_non_null(m);
    const int V = sp->n_vocab;
    int32_t ta[13], tb[9], tc[6];
    fill_tokens(ta, 13, V, 1);
    fill_tokens(tb, 9, V, 2);
    fill_tokens(tc, 6, V, 3);
    const int32_t bta[] = {5, 1, 12, 7}, btb[] = {3, 20, 21}, btc[] = {40, 8};
    float *alone = malloc(sizeof(float) * (size_t)V);
    float *chunk = malloc(sizeof(float) * 3 * (size_t)V);
    float *single = malloc(sizeof(float) * 13 * (size_t)V);
    float *batched = malloc(sizeof(float) * 3 * (size_t)V);
    float *two = malloc(sizeof(float) * (size_t)V);
    assert_true(alone && chunk && single && batched && two);

    backend *b = make_backend(m, KV_DTYPE_F32, 1);
    const int whole[] = {13}, parts[] = {5, 7, 1};
    const int ones[13] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    run_chunks(b, ta, 13, bta, whole, 1, alone, V);
    run_chunks(b, ta, 13, bta, parts, 3, chunk, V);
    run_chunks(b, ta, 13, bta, ones, 13, single, V);

    /* B is already 4 tokens in (prefilled alone), C starts fresh; A is prefilled in one go */
    run_chunks(b, tb, 4, btb, whole, 1, NULL, V);
    int32_t toks[13 + 5 + 6];
    memcpy(toks, tb + 4, 5 * sizeof(int32_t));
    memcpy(toks + 5, ta, 13 * sizeof(int32_t));
    memcpy(toks + 18, tc, 6 * sizeof(int32_t));
    fwd_seq seqs[3] = {
        {.n_new = 5, .start_pos = 4, .block_table = btb, .n_blocks = 3, .want_logits = true},
        {.n_new = 13, .start_pos = 0, .block_table = bta, .n_blocks = 4, .want_logits = true},
        {.n_new = 6, .start_pos = 0, .block_table = btc, .n_blocks = 2, .want_logits = true},
    };
    fwd_batch batch = {
        .n_tokens = 24, .tokens = toks, .n_seqs = 3, .seqs = seqs, .logits = batched};
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);

    /* every row's logits (prompt logprobs): B mid-prompt without a sampled row, A whole with
     * one, C plain; the rows equal the one-at-a-time run's, the sampled rows the batch's */
    float *rows = malloc(sizeof(float) * 18 * (size_t)V);
    float *last2 = malloc(sizeof(float) * 2 * (size_t)V);
    assert_true(rows && last2);
    fwd_seq seqs2[3] = {seqs[0], seqs[1], seqs[2]};
    seqs2[0].want_logits = false;
    seqs2[0].all_logits = true;
    seqs2[1].all_logits = true;
    batch.seqs = seqs2;
    batch.logits = last2;
    batch.row_logits = rows;
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    for (int i = 0; i < 13; i++) {
        assert_true(tm_max_abs_diff(rows + (size_t)(5 + i) * V, single + (size_t)i * V, V) <=
                    1e-6f);
    }
    assert_true(tm_max_abs_diff(rows + 4 * (size_t)V, batched, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(last2, alone, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(last2 + V, batched + 2 * (size_t)V, V) <= 1e-6f);
    free(rows);
    free(last2);
    cpu_backend_ops.destroy(b);

    backend *b2 = make_backend(m, KV_DTYPE_F32, 2);
    run_chunks(b2, ta, 13, bta, whole, 1, two, V);
    cpu_backend_ops.destroy(b2);

    const float *last_chunk = chunk + 2 * (size_t)V, *last_single = single + 12 * (size_t)V;
    const float *in_batch = batched + (size_t)V;
    print_message("    %s %s: |alone-chunked| %.3g |alone-single| %.3g |alone-batched| %.3g "
                  "|1 vs 2 threads| %.3g\n",
                  model_arch_name_test(sp->arch), td_name(sp->wtype),
                  tm_max_abs_diff(alone, last_chunk, V), tm_max_abs_diff(alone, last_single, V),
                  tm_max_abs_diff(alone, in_batch, V), tm_max_abs_diff(alone, two, V));
    assert_true(tm_max_abs_diff(alone, last_chunk, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(alone, last_single, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(alone, in_batch, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(alone, two, V) <= 1e-6f);
    /* the chunk ends (positions 4 and 11) must match the one-at-a-time run too */
    assert_true(tm_max_abs_diff(chunk, single + 4 * (size_t)V, V) <= 1e-6f);
    assert_true(tm_max_abs_diff(chunk + V, single + 11 * (size_t)V, V) <= 1e-6f);
    free(alone);
    free(chunk);
    free(single);
    free(batched);
    free(two);
    tm_free(m);
}

static void test_invariance(void **state)
{
    (void)state;
    static const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        tm_spec a = k_llama, q3 = k_qwen3;
        a.wtype = q3.wtype = types[i];
        check_invariance(&a);
        check_invariance(&q3);
    }
    check_invariance(&k_qwen2);
}

/* The newer architectures' features (model.h) keep the invariances: sliding windows shorter
 * than the sequences (their skipped blocks), soft-capping, GeGLU and post-norms, experts routed
 * per token whatever else is in the batch, partial rotary dims. */
static void test_invariance_features(void **state)
{
    (void)state;
    tm_spec g = k_qwen3, moe = k_llama, part = k_qwen2;
    g.gemma = true;
    g.n_swa = 5;
    moe.n_expert = 6;
    moe.n_used = 2;
    part.n_rot = 8;
    static const tdtype types[] = {TD_F32, TD_Q8_0};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        g.wtype = moe.wtype = types[i];
        check_invariance(&g);
        check_invariance(&moe);
    }
    check_invariance(&part);
}

static void test_f16_kv(void **state)
{
    (void)state;
    model *m = tm_build(&k_qwen3);
    assert_non_null(m);
    const int V = k_qwen3.n_vocab;
    int32_t toks[13];
    fill_tokens(toks, 13, V, 4);
    const int32_t bt[] = {2, 3, 4, 6};
    const int parts[] = {6, 7};
    float *l32 = malloc(sizeof(float) * 2 * (size_t)V),
          *l16 = malloc(sizeof(float) * 2 * (size_t)V);
    assert_non_null(l32);
    assert_non_null(l16);
    backend *b32 = make_backend(m, KV_DTYPE_F32, 1), *b16 = make_backend(m, KV_DTYPE_F16, 2);
    run_chunks(b32, toks, 13, bt, parts, 2, l32, V);
    run_chunks(b16, toks, 13, bt, parts, 2, l16, V);
    float d = tm_max_abs_diff(l32, l16, 2 * V);
    print_message("    f16 vs f32 KV: max |dlogit| %.3g\n", d);
    assert_true(d < 2e-2f);
    assert_true(d > 0.0f); /* the f16 path really rounded */
    size_t bytes = 0;
    const void *kp = cpu_backend_ops.kv_pool(b16, 1, 0, &bytes);
    assert_non_null(kp);
    assert_int_equal(bytes, (size_t)NBLOCKS * 2 * BLOCK * 32 * 2);
    assert_int_equal(cpu_backend_ops.kv_block_bytes(m, BLOCK, KV_DTYPE_F16) * NBLOCKS,
                     bytes * 2 * (size_t)k_qwen3.n_layer);
    assert_null(cpu_backend_ops.kv_pool(b16, 2, 0, &bytes));
    assert_null(cpu_backend_ops.kv_pool(b16, 0, 2, &bytes));
    assert_int_equal(((uintptr_t)kp) % 64, 0);
    cpu_backend_ops.destroy(b32);
    cpu_backend_ops.destroy(b16);
    free(l32);
    free(l16);
    tm_free(m);
}

static void test_bad_input(void **state)
{
    (void)state;
    model *m = tm_build(&k_llama);
    assert_non_null(m);
    backend *b = make_backend(m, KV_DTYPE_F32, 1);
    int32_t toks[4] = {1, 2, 3, 4};
    const int32_t bt[] = {1};
    float logits[101];
    fwd_seq s = {.n_new = 4, .start_pos = 0, .block_table = bt, .n_blocks = 1, .want_logits = true};
    fwd_batch batch = {.n_tokens = 4, .tokens = toks, .n_seqs = 1, .seqs = &s, .logits = logits};
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    toks[2] = 101; /* out of vocabulary */
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    toks[2] = 3;
    s.n_new = 5; /* block table too short */
    batch.n_tokens = 5;
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    s.n_new = 4;
    batch.n_tokens = 3; /* sum of n_new mismatch */
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    batch.n_tokens = 4;
    const int32_t bad_bt[] = {NBLOCKS};
    s.block_table = bad_bt;
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    s.block_table = bt;
    batch.logits = NULL;
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    batch.logits = logits;
    s.all_logits = true; /* no row_logits buffer */
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    float rows[4 * 101];
    batch.row_logits = rows;
    float hidden[64];
    batch.hidden = hidden;
    s.pool = FWD_POOL_LAST; /* every row's logits and pooling: not both */
    assert_int_equal(cpu_backend_ops.forward(b, &batch), -EINVAL);
    s.pool = FWD_POOL_NONE;
    s.all_logits = false;
    s.pool = FWD_POOL_LAST; /* (pooling alone is fine) */
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    s.pool = FWD_POOL_NONE;
    s.all_logits = true;
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    cpu_backend_ops.destroy(b);

    char err[256] = "";
    backend_config cfg = {
        .num_blocks = 4, .block_size = 1000, .max_batch_tokens = 8, .max_seqs = 1, .n_threads = 1};
    assert_null(cpu_backend_ops.create(m, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "block_size"));
    cfg.block_size = 16;
    model_tensor *wk = (model_tensor *)m->layers[1].wk;
    wk->ne[0] = 63;
    assert_null(cpu_backend_ops.create(m, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "attn_k"));
    wk->ne[0] = 64;
    wk->type = (tdtype)16; /* IQ2_XXS: known to GGUF, no kernels */
    assert_null(cpu_backend_ops.create(m, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "unsupported type"));
    wk->type = TD_Q4_K; /* a supported type, but 64 inputs are not whole 256-element blocks */
    assert_null(cpu_backend_ops.create(m, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "attn_k"));
    wk->type = TD_F32;
    m->cfg.n_head_kv = 3;
    assert_null(cpu_backend_ops.create(m, &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "n_head_kv"));
    m->cfg.n_head_kv = 2;
    tm_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_f32), cmocka_unit_test(test_reference_other_types),
        cmocka_unit_test(test_invariance),    cmocka_unit_test(test_invariance_features),
        cmocka_unit_test(test_f16_kv),        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
