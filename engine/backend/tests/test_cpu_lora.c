/*
 * LoRA in the CPU backend: an adapter's logits equal those of the base model with the adapter
 * merged into its weights (W + scale B A), batches mixing adapters and the base model give every
 * sequence exactly what it gets alone, and the backend refuses adapters above its rank limit.
 * Adapters are built in memory here; engine/model/tests/test_lora.c covers the file formats and
 * e2e/engine/lora the comparison with llama.cpp.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/tests/backend_test_model.h"
#include "engine/core/backend.h"
#include "engine/model/lora.h"
#include "kernels/cpu/kc_convert.h"

#define NBLOCKS 64
#define BLOCK   4

static const tm_spec k_spec = {.arch = MODEL_ARCH_LLAMA,
                               .n_layer = 2,
                               .n_embd = 64,
                               .n_head = 4,
                               .n_head_kv = 2,
                               .head_dim = 16,
                               .n_ff = 96,
                               .n_vocab = 101,
                               .wtype = TD_F32,
                               .seed = 3};

/* F32 (or F16) random tensor of m rows of k, owned by the caller. */
static void lt_fill(model_tensor *t, tdtype type, int64_t k, int64_t m, float amp, uint64_t *rng)
{
    const size_t n = (size_t)(k * m);
    t->type = type;
    t->n_dims = 2;
    t->ne[0] = k;
    t->ne[1] = m;
    t->ne[2] = t->ne[3] = 1;
    t->nbytes = td_row_bytes(type, k) * (size_t)m;
    float *f = malloc(sizeof(float) * (n ? n : 1));
    void *data = malloc(t->nbytes ? t->nbytes : 1);
    assert_true(f && data);
    for (size_t i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        f[i] = amp * ((float)(*rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
    if (type == TD_F16) {
        kc_f32_to_f16_row(f, data, (int64_t)n);
        free(f);
    } else {
        memcpy(data, f, sizeof(float) * n);
        free(f);
    }
    t->data = data;
}

/* An adapter of the given rank over the targets in mask (bit per lora_target). */
static lora_adapter *make_adapter(const model *m, int32_t rank, unsigned mask, tdtype type,
                                  float scale, uint64_t seed)
{
    lora_adapter *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    a->format = MODEL_FORMAT_GGUF;
    a->n_layer = m->cfg.n_layer;
    a->rank = rank;
    a->layers = calloc((size_t)a->n_layer, sizeof(*a->layers));
    assert_non_null(a->layers);
    for (int l = 0; l < a->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!(mask & (1u << t))) {
                continue;
            }
            int64_t in, out;
            lora_target_dims(m, (lora_target)t, &in, &out);
            lora_weights *w = &a->layers[l][t];
            lt_fill(&w->a, type, in, rank, 1.0f / sqrtf((float)in), &seed);
            lt_fill(&w->b, type, rank, out, 0.5f / sqrtf((float)rank), &seed);
            /* B transposed, as lora_load leaves it: F16 for an F16 B, else F32 */
            const size_t esz = type == TD_F16 ? 2 : 4;
            uint8_t *bt = malloc(esz * (size_t)(rank * out) + 1);
            float *row = malloc(sizeof(float) * (size_t)rank);
            assert_true(bt && row);
            const size_t rb = td_row_bytes(type, rank);
            for (int64_t o = 0; o < out; o++) {
                const uint8_t *src = (const uint8_t *)w->b.data + (size_t)o * rb;
                assert_int_equal(kc_dequantize_row(type, src, row, rank), 0);
                for (int64_t j = 0; j < rank; j++) {
                    memcpy(bt + esz * (size_t)(j * out + o),
                           type == TD_F16 ? (const void *)(src + 2 * j) : (const void *)&row[j],
                           esz);
                }
            }
            free(row);
            w->bt = bt;
            w->bt_type = type == TD_F16 ? TD_F16 : TD_F32;
            w->scale = scale;
            a->n_adapted++;
        }
    }
    return a;
}

static void free_adapter(lora_adapter *a)
{
    for (int l = 0; l < a->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            free((void *)a->layers[l][t].a.data);
            free((void *)a->layers[l][t].b.data);
            free((void *)a->layers[l][t].bt);
        }
    }
    a->priv = NULL;
    lora_free(a);
}

static backend *make_backend(const model *m, int32_t max_rank, int threads)
{
    backend_config cfg = {.num_blocks = NBLOCKS,
                          .block_size = BLOCK,
                          .kv_dtype = KV_DTYPE_F32,
                          .max_batch_tokens = 64,
                          .max_seqs = 4,
                          .n_threads = threads,
                          .max_lora_rank = max_rank};
    char err[256] = "";
    backend *b = cpu_backend_ops.create(m, &cfg, err, sizeof(err));
    if (!b) {
        fail_msg("create failed: %s", err);
    }
    return b;
}

/* Prefills one sequence (n tokens, blocks bt) with adapter ad; its last logits into out. */
static int run_one(backend *b, const int32_t *toks, int n, const int32_t *bt,
                   const lora_adapter *ad, float *out)
{
    fwd_seq s = {.n_new = n,
                 .start_pos = 0,
                 .block_table = bt,
                 .n_blocks = (n + BLOCK - 1) / BLOCK,
                 .want_logits = true,
                 .lora = ad};
    fwd_batch batch = {.n_tokens = n, .tokens = toks, .n_seqs = 1, .seqs = &s, .logits = out};
    return cpu_backend_ops.forward(b, &batch);
}

/* W += scale * B A for every adapted projection (F32 adapter, F32 model). */
static void merge(model *m, const lora_adapter *a)
{
    for (int l = 0; l < m->cfg.n_layer; l++) {
        model_layer *L = &m->layers[l];
        const model_tensor *ws[LORA_N_TARGETS] = {L->wq,     L->wk,   L->wv,    L->wo,
                                                  L->w_gate, L->w_up, L->w_down};
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *w = &a->layers[l][t];
            if (!w->a.data) {
                continue;
            }
            const int64_t in = w->a.ne[0], r = w->a.ne[1], out = w->b.ne[1];
            const float *A = w->a.data, *Bt = (const float *)w->bt;
            float *W = (float *)ws[t]->data;
            for (int64_t o = 0; o < out; o++) {
                for (int64_t i = 0; i < in; i++) {
                    double acc = 0;
                    for (int64_t k = 0; k < r; k++) {
                        acc += (double)Bt[k * out + o] * A[k * in + i];
                    }
                    W[o * in + i] += (float)(w->scale * acc);
                }
            }
        }
    }
}

static void test_lora_equals_merged_weights(void **state)
{
    (void)state;
    model *m = tm_build(&k_spec), *merged = tm_build(&k_spec);
    assert_true(m && merged);
    const int V = k_spec.n_vocab;
    lora_adapter *ad = make_adapter(m, 8, 0x7f, TD_F32, 2.0f, 11);
    merge(merged, ad);
    int32_t toks[11];
    for (int i = 0; i < 11; i++) {
        toks[i] = (i * 29 + 3) % V;
    }
    const int32_t bt[] = {3, 9, 1};
    float *with = malloc(sizeof(float) * (size_t)V), *ref = malloc(sizeof(float) * (size_t)V);
    float *base = malloc(sizeof(float) * (size_t)V);
    assert_true(with && ref && base);
    backend *b = make_backend(m, 8, 1);
    assert_int_equal(run_one(b, toks, 11, bt, ad, with), 0);
    assert_int_equal(run_one(b, toks, 11, bt, NULL, base), 0);
    cpu_backend_ops.destroy(b);
    backend *bm = make_backend(merged, 0, 1);
    assert_int_equal(run_one(bm, toks, 11, bt, NULL, ref), 0);
    cpu_backend_ops.destroy(bm);
    const float d = tm_max_abs_diff(with, ref, V), effect = tm_max_abs_diff(with, base, V);
    print_message("    |adapter - merged weights| %.3g, |adapter - base| %.3g\n", d, effect);
    assert_true(d <= 1e-4f);
    assert_true(effect >= 1e-2f);
    free(with);
    free(ref);
    free(base);
    free_adapter(ad);
    tm_free(m);
    tm_free(merged);
}

/* Four sequences, two adapters (one of F16 weights over some projections only) and the base
 * model, prefilled in one batch (55 rows) and then decoding one token each in a second: every
 * logits row equals the sequence's own run, bit for bit, at 1 and 2 threads. */
static void check_mixed(const tm_spec *sp, int threads)
{
    model *m = tm_build(sp);
    assert_non_null(m);
    const int V = sp->n_vocab;
    lora_adapter *a1 = make_adapter(m, 4, 0x7f, TD_F32, 2.0f, 21);
    lora_adapter *a2 =
        make_adapter(m, 8, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_DOWN), TD_F16, 1.5f, 22);
    const lora_adapter *ads[4] = {a1, NULL, a2, a1};
    /* 40 rows of a1 in one sequence: more than one thread's chunk of rows (CPU_LORA_CHUNK) */
    const int lens[4] = {40, 5, 6, 4};
    int32_t bts[4][12];
    int32_t toks[4][40], next[4];
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < 12; i++) {
            bts[s][i] = 1 + s * 12 + i;
        }
        for (int i = 0; i < 40; i++) {
            toks[s][i] = (int32_t)((i * 31 + s * 17 + 2) % V);
        }
        next[s] = (int32_t)((s * 13 + 5) % V);
    }
    float *alone = malloc(sizeof(float) * 8 * (size_t)V),
          *mixed = malloc(sizeof(float) * 8 * (size_t)V);
    assert_true(alone && mixed);
    backend *b = make_backend(m, 8, threads);
    /* alone: prefill, then one decode step */
    for (int s = 0; s < 4; s++) {
        assert_int_equal(run_one(b, toks[s], lens[s], bts[s], ads[s], alone + (size_t)s * V), 0);
        fwd_seq q = {.n_new = 1,
                     .start_pos = lens[s],
                     .block_table = bts[s],
                     .n_blocks = (lens[s] + BLOCK) / BLOCK,
                     .want_logits = true,
                     .lora = ads[s]};
        fwd_batch one = {.n_tokens = 1,
                         .tokens = &next[s],
                         .n_seqs = 1,
                         .seqs = &q,
                         .logits = alone + (size_t)(4 + s) * V};
        assert_int_equal(cpu_backend_ops.forward(b, &one), 0);
    }
    /* mixed: all four prefills in one batch, then all four decodes in one batch */
    int32_t flat[55];
    fwd_seq seqs[4];
    int n = 0;
    for (int s = 0; s < 4; s++) {
        memcpy(flat + n, toks[s], sizeof(int32_t) * (size_t)lens[s]);
        n += lens[s];
        seqs[s] = (fwd_seq){.n_new = lens[s],
                            .start_pos = 0,
                            .block_table = bts[s],
                            .n_blocks = (lens[s] + BLOCK - 1) / BLOCK,
                            .want_logits = true,
                            .lora = ads[s]};
    }
    fwd_batch batch = {.n_tokens = n, .tokens = flat, .n_seqs = 4, .seqs = seqs, .logits = mixed};
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    for (int s = 0; s < 4; s++) {
        seqs[s].n_new = 1;
        seqs[s].start_pos = lens[s];
        seqs[s].n_blocks = (lens[s] + BLOCK) / BLOCK;
    }
    batch = (fwd_batch){
        .n_tokens = 4, .tokens = next, .n_seqs = 4, .seqs = seqs, .logits = mixed + 4 * (size_t)V};
    assert_int_equal(cpu_backend_ops.forward(b, &batch), 0);
    cpu_backend_ops.destroy(b);
    for (int r = 0; r < 8; r++) {
        if (memcmp(alone + (size_t)r * V, mixed + (size_t)r * V, sizeof(float) * (size_t)V) != 0) {
            fail_msg("row %d (sequence %d, %s): mixed batch differs from alone by %g", r, r % 4,
                     r < 4 ? "prefill" : "decode",
                     (double)tm_max_abs_diff(alone + (size_t)r * V, mixed + (size_t)r * V, V));
        }
    }
    /* the same tokens under different adapters give different logits */
    assert_true(tm_max_abs_diff(alone, mixed + (size_t)V, V) > 0.0f);
    free(alone);
    free(mixed);
    free_adapter(a1);
    free_adapter(a2);
    tm_free(m);
}

static void test_mixed_batch(void **state)
{
    (void)state;
    check_mixed(&k_spec, 1);
    check_mixed(&k_spec, 2);
    tm_spec q8 = k_spec;
    q8.wtype = TD_Q8_0;
    q8.n_embd = 64;
    q8.n_ff = 128;
    check_mixed(&q8, 2);
}

static void test_rank_limit(void **state)
{
    (void)state;
    model *m = tm_build(&k_spec);
    assert_non_null(m);
    lora_adapter *ad = make_adapter(m, 8, 1u << LORA_Q, TD_F32, 1.0f, 5);
    float *out = malloc(sizeof(float) * (size_t)k_spec.n_vocab);
    assert_non_null(out);
    const int32_t toks[] = {1, 2, 3}, bt[] = {1};
    backend *b = make_backend(m, 0, 1); /* no LoRA */
    assert_int_equal(run_one(b, toks, 3, bt, ad, out), -EINVAL);
    assert_int_equal(run_one(b, toks, 3, bt, NULL, out), 0);
    cpu_backend_ops.destroy(b);
    b = make_backend(m, 4, 1); /* rank 8 > 4 */
    assert_int_equal(run_one(b, toks, 3, bt, ad, out), -EINVAL);
    cpu_backend_ops.destroy(b);
    b = make_backend(m, 8, 1);
    assert_int_equal(run_one(b, toks, 3, bt, ad, out), 0);
    cpu_backend_ops.destroy(b);
    free(out);
    free_adapter(ad);
    tm_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_equals_merged_weights),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_rank_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
