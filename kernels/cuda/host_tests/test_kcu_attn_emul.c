/* The algorithm of kcu_attention.cu run on the host and checked against kc_attention: per
 * (token, head, split) the block-table walk one KV block at a time, a warp's score per key
 * (kcu_warp_dot_emul), the tile's online-softmax step, the partial states merged in split order
 * (kcu_math.h's functions throughout), over random paged KV (f32 and f16 pools, scattered block
 * tables), GQA and MHA, several block sizes and head sizes, several sequences, decode and prefill,
 * with the kernel's split policy and with forced small splits; and the prefill kernel's tiled
 * loops, which must give each query exactly the decode kernel's bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cuda/kcu_math.h"

static uint64_t g_rng = 0xD1B54A32D192ED03ull;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static int irand(int n)
{
    return (int)((frand() + 1.0f) * 0.5f * (float)n) % n;
}

typedef struct attn_case {
    int block_size, n_head, n_head_kv, head_dim;
    bool f16;
    int n_seqs;
    int32_t n_new[4], start[4];
} attn_case;

/* Element idx of a pool. */
static float pool_elem(const void *pool, bool f16, size_t idx)
{
    return f16 ? kcu_f16_to_f32(((const uint16_t *)pool)[idx]) : ((const float *)pool)[idx];
}

/* One block of attn_kernel (token of a sequence with n_keys keys, query q, one split of
 * split_blocks table entries; n_splits 1: all of them), leaving the partial state. */
static void emul_block(const kc_paged_kv *kv, int hk, const int32_t *bt, int32_t n_keys,
                       const float *q, float scale, int n_splits, int split_blocks, int sp,
                       kcu_os *st_out, float *acc)
{
    const int hd = kv->head_dim;
    const int bs = kv->block_size;
    float krow[KC_ATTN_MAX_HEAD_DIM];
    float sc[KC_ATTN_MAX_BLOCK];
    kcu_os st = kcu_os_init();
    for (int d = 0; d < hd; d++) {
        acc[d] = 0.0f;
    }
    const int32_t n_blocks = (n_keys + bs - 1) / bs;
    const int32_t b_begin = n_splits == 1 ? 0 : sp * split_blocks;
    const int32_t b_end =
        sp == n_splits - 1 || b_begin + split_blocks > n_blocks ? n_blocks : b_begin + split_blocks;
    for (int32_t b = b_begin; b < b_end; b++) {
        const int cnt = n_keys - b * bs < bs ? n_keys - b * bs : bs;
        const size_t base =
            ((size_t)bt[b] * (size_t)kv->n_head_kv + (size_t)hk) * (size_t)bs * (size_t)hd;
        for (int j = 0; j < cnt; j++) {
            for (int d = 0; d < hd; d++) {
                krow[d] = pool_elem(kv->k, kv->f16, base + (size_t)j * hd + d);
            }
            sc[j] = kcu_mul_rn(kcu_warp_dot_emul(q, krow, hd), scale);
        }
        float tile_max = -INFINITY;
        for (int j = 0; j < cnt; j++) {
            tile_max = sc[j] > tile_max ? sc[j] : tile_max;
        }
        const float corr = kcu_os_rescale(&st, tile_max);
        for (int d = 0; d < hd; d++) {
            acc[d] = kcu_mul_rn(acc[d], corr);
        }
        for (int j = 0; j < cnt; j++) {
            sc[j] = kcu_os_weight(sc[j], st.m);
        }
        for (int j = 0; j < cnt; j++) {
            st.l += sc[j];
            for (int d = 0; d < hd; d++) {
                acc[d] = kcu_os_axpy(acc[d], sc[j],
                                     pool_elem(kv->v, kv->f16, base + (size_t)j * hd + d));
            }
        }
    }
    *st_out = st;
}

/* kcu_attention on the host: attn_kernel for every (token, head, split), then the merge. */
static void emul_attention(const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs, int n_seqs,
                           int64_t stride, float scale, int n_splits, int split_blocks)
{
    float acc[KC_ATTN_MAX_HEAD_DIM], tot[KC_ATTN_MAX_HEAD_DIM];
    const int hd = kv->head_dim;
    for (int s = 0; s < n_seqs; s++) {
        for (int32_t i = 0; i < seqs[s].n_new; i++) {
            for (int h = 0; h < n_head; h++) {
                const int hk = h / (n_head / kv->n_head_kv);
                const float *q = seqs[s].q + i * stride + (int64_t)h * hd;
                float *out = seqs[s].out + i * stride + (int64_t)h * hd;
                kcu_os st_tot = kcu_os_init();
                for (int d = 0; d < hd; d++) {
                    tot[d] = 0.0f;
                }
                for (int sp = 0; sp < n_splits; sp++) {
                    kcu_os st;
                    emul_block(kv, hk, seqs[s].block_table, seqs[s].start_pos + i + 1, q, scale,
                               n_splits, split_blocks, sp, &st, acc);
                    if (n_splits == 1) {
                        st_tot = st;
                        memcpy(tot, acc, (size_t)hd * sizeof(float));
                        break;
                    }
                    float ca, cb;
                    kcu_os_merge(&st_tot, st, &ca, &cb);
                    for (int d = 0; d < hd; d++) {
                        tot[d] = kcu_os_merge_acc(tot[d], ca, acc[d], cb);
                    }
                }
                for (int d = 0; d < hd; d++) {
                    out[d] = kcu_os_out(tot[d], st_tot.l);
                }
            }
        }
    }
}

enum { PREFILL_QT = 8 }; /* KCU_PREFILL_QT of kcu_attention.cu */

/* attn_prefill_kernel on the host, its loops in the kernel's order (the threads of a block
 * serialised): a tile of PREFILL_QT queries of one sequence and head walks the KV blocks once,
 * scores only for (query, key) pairs with key position <= query position, then per query the
 * decode kernel's online-softmax step, V rows applied key by key to every query of the tile. */
static void emul_prefill(const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs, int n_seqs,
                         int64_t stride, float scale)
{
    const int hd = kv->head_dim;
    const int bs = kv->block_size;
    static float acc[PREFILL_QT][KC_ATTN_MAX_HEAD_DIM];
    static float sc[PREFILL_QT][KC_ATTN_MAX_BLOCK];
    float krow[KC_ATTN_MAX_HEAD_DIM], vrow[KC_ATTN_MAX_HEAD_DIM];
    kcu_os st[PREFILL_QT];
    for (int s = 0; s < n_seqs; s++) {
        const int32_t start = seqs[s].start_pos;
        for (int32_t q0 = 0; q0 < seqs[s].n_new; q0 += PREFILL_QT) {
            const int nq = seqs[s].n_new - q0 < PREFILL_QT ? seqs[s].n_new - q0 : PREFILL_QT;
            for (int h = 0; h < n_head; h++) {
                const int hk = h / (n_head / kv->n_head_kv);
                for (int qi = 0; qi < PREFILL_QT; qi++) {
                    st[qi] = kcu_os_init();
                    for (int d = 0; d < hd; d++) {
                        acc[qi][d] = 0.0f;
                    }
                }
                const int32_t keys_last = start + q0 + nq;
                const int32_t n_blocks = (keys_last + bs - 1) / bs;
                for (int32_t b = 0; b < n_blocks; b++) {
                    const size_t base =
                        ((size_t)seqs[s].block_table[b] * (size_t)kv->n_head_kv + (size_t)hk) *
                        (size_t)bs * (size_t)hd;
                    const int cnt_all = keys_last - b * bs < bs ? keys_last - b * bs : bs;
                    for (int pair = 0; pair < nq * cnt_all; pair++) {
                        const int qi = pair / cnt_all;
                        const int j = pair % cnt_all;
                        if (b * bs + j > start + q0 + qi) {
                            sc[qi][j] = NAN; /* masked: must never be read */
                            continue;
                        }
                        for (int d = 0; d < hd; d++) {
                            krow[d] = pool_elem(kv->k, kv->f16, base + (size_t)j * hd + d);
                        }
                        const float *q = seqs[s].q + (q0 + qi) * stride + (int64_t)h * hd;
                        sc[qi][j] = kcu_mul_rn(kcu_warp_dot_emul(q, krow, hd), scale);
                    }
                    for (int qi = 0; qi < nq; qi++) {
                        const int32_t n_keys = start + q0 + qi + 1;
                        const int cnt = n_keys - b * bs < bs ? n_keys - b * bs : bs;
                        if (cnt <= 0) {
                            continue;
                        }
                        float tile_max = -INFINITY;
                        for (int j = 0; j < cnt; j++) {
                            tile_max = sc[qi][j] > tile_max ? sc[qi][j] : tile_max;
                        }
                        const float corr = kcu_os_rescale(&st[qi], tile_max);
                        for (int d = 0; d < hd; d++) {
                            acc[qi][d] = kcu_mul_rn(acc[qi][d], corr);
                        }
                    }
                    for (int pair = 0; pair < nq * cnt_all; pair++) {
                        const int qi = pair / cnt_all;
                        const int j = pair % cnt_all;
                        if (b * bs + j <= start + q0 + qi) {
                            sc[qi][j] = kcu_os_weight(sc[qi][j], st[qi].m);
                        }
                    }
                    for (int j = 0; j < cnt_all; j++) {
                        for (int d = 0; d < hd; d++) {
                            vrow[d] = pool_elem(kv->v, kv->f16, base + (size_t)j * hd + d);
                        }
                        for (int qi = 0; qi < nq; qi++) {
                            if (b * bs + j > start + q0 + qi) {
                                continue;
                            }
                            st[qi].l += sc[qi][j];
                            for (int d = 0; d < hd; d++) {
                                acc[qi][d] = kcu_os_axpy(acc[qi][d], sc[qi][j], vrow[d]);
                            }
                        }
                    }
                }
                for (int qi = 0; qi < nq; qi++) {
                    float *out = seqs[s].out + (q0 + qi) * stride + (int64_t)h * hd;
                    for (int d = 0; d < hd; d++) {
                        out[d] = kcu_os_out(acc[qi][d], st[qi].l);
                    }
                }
            }
        }
    }
}

static void run_case(const attn_case *c)
{
    const int hd = c->head_dim, bs = c->block_size;
    int32_t tok = 0, max_ctx = 0, max_new = 0, blocks = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int32_t ctx = c->start[s] + c->n_new[s];
        tok += c->n_new[s];
        max_ctx = ctx > max_ctx ? ctx : max_ctx;
        max_new = c->n_new[s] > max_new ? c->n_new[s] : max_new;
        blocks += (ctx + bs - 1) / bs;
    }
    const int num_blocks = blocks + 3;
    const size_t pool_elems = (size_t)num_blocks * (size_t)c->n_head_kv * (size_t)bs * (size_t)hd;
    const size_t esz = c->f16 ? 2 : 4;
    void *k = malloc(pool_elems * esz), *v = malloc(pool_elems * esz);
    const int64_t stride = (int64_t)c->n_head * hd;
    float *q = malloc((size_t)tok * (size_t)stride * sizeof(float));
    float *o_ref = malloc((size_t)tok * (size_t)stride * sizeof(float));
    float *o_emu = malloc((size_t)tok * (size_t)stride * sizeof(float));
    int32_t *perm = malloc((size_t)num_blocks * sizeof(int32_t));
    assert_non_null(k);
    assert_non_null(v);
    assert_non_null(q);
    assert_non_null(o_ref);
    assert_non_null(o_emu);
    assert_non_null(perm);
    for (size_t i = 0; i < pool_elems; i++) {
        const float kf = frand() * 2.0f, vf = frand();
        if (c->f16) {
            ((uint16_t *)k)[i] = kc_f32_to_f16(kf);
            ((uint16_t *)v)[i] = kc_f32_to_f16(vf);
        } else {
            ((float *)k)[i] = kf;
            ((float *)v)[i] = vf;
        }
    }
    for (size_t i = 0; i < (size_t)tok * (size_t)stride; i++) {
        q[i] = frand() * 2.0f;
    }
    for (int i = 0; i < num_blocks; i++) { /* scattered block tables */
        perm[i] = i;
    }
    for (int i = num_blocks - 1; i > 0; i--) {
        const int j = irand(i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    kc_paged_kv kv = {
        .k = k, .v = v, .f16 = c->f16, .block_size = bs, .n_head_kv = c->n_head_kv, .head_dim = hd};
    kc_attn_seq ref[4], emu[4];
    int32_t t0 = 0, b0 = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int32_t ctx = c->start[s] + c->n_new[s];
        ref[s] = (kc_attn_seq){.n_new = c->n_new[s],
                               .start_pos = c->start[s],
                               .block_table = perm + b0,
                               .q = q + t0 * stride,
                               .out = o_ref + t0 * stride};
        emu[s] = ref[s];
        emu[s].out = o_emu + t0 * stride;
        t0 += c->n_new[s];
        b0 += (ctx + bs - 1) / bs;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    assert_int_equal(kc_attention(NULL, &kv, c->n_head, ref, c->n_seqs, stride, stride, scale), 0);
    /* the kernel's policy (split only decode batches), then forced splits of 1 and 3 blocks */
    const int policy = max_new == 1 ? kcu_attn_n_splits(max_ctx, bs) : 1;
    const int split_blocks[3] = {kcu_attn_split_blocks(bs), 1, 3};
    const int n_splits[3] = {policy, (max_ctx + bs - 1) / bs, ((max_ctx + bs - 1) / bs + 2) / 3};
    for (int m = 0; m < 3; m++) {
        emul_attention(&kv, c->n_head, emu, c->n_seqs, stride, scale, n_splits[m], split_blocks[m]);
        for (size_t i = 0; i < (size_t)tok * (size_t)stride; i++) {
            assert_true(fabsf(o_emu[i] - o_ref[i]) <= 2e-5f * (1.0f + fabsf(o_ref[i])));
        }
    }
    /* the prefill kernel (every batch with more than one new token): each query's arithmetic
     * is the unsplit decode kernel's, so the same bits */
    float *o_pre = malloc((size_t)tok * (size_t)stride * sizeof(float));
    assert_non_null(o_pre);
    emul_attention(&kv, c->n_head, emu, c->n_seqs, stride, scale, 1, 1);
    for (int s = 0; s < c->n_seqs; s++) {
        emu[s].out = o_pre + (emu[s].out - o_emu);
    }
    emul_prefill(&kv, c->n_head, emu, c->n_seqs, stride, scale);
    assert_memory_equal(o_pre, o_emu, (size_t)tok * (size_t)stride * sizeof(float));
    free(o_pre);
    free(k);
    free(v);
    free(q);
    free(o_ref);
    free(o_emu);
    free(perm);
}

static void test_decode(void **state)
{
    (void)state;
    const attn_case cases[] = {
        {16, 8, 2, 64, false, 3, {1, 1, 1}, {0, 37, 700}},
        {16, 8, 2, 64, true, 3, {1, 1, 1}, {5, 130, 1100}},
        {32, 4, 4, 128, false, 2, {1, 1}, {600, 31}},
        {1, 6, 3, 80, true, 2, {1, 1}, {3, 40}},
        {7, 4, 1, 33, false, 4, {1, 1, 1, 1}, {0, 6, 7, 90}},
        {256, 2, 1, 256, true, 2, {1, 1}, {255, 700}},
        {16, 2, 2, 512, false, 1, {1}, {77}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_case(&cases[i]);
    }
}

static void test_prefill(void **state)
{
    (void)state;
    const attn_case cases[] = {
        {16, 8, 2, 64, false, 3, {9, 1, 33}, {0, 20, 40}},
        {16, 8, 2, 64, true, 2, {17, 4}, {0, 0}},
        {7, 4, 2, 48, true, 2, {20, 3}, {13, 50}},
        {1, 2, 1, 16, false, 1, {5}, {2}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_case(&cases[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_prefill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
