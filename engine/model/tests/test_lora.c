/* Unit tests for LoRA adapter loading (engine/model/lora.h). Adapters are written by the test into
 * a temporary directory: llama.cpp adapter GGUF files with gguf_writer, PEFT directories with an
 * adapter_config.json and a hand-built adapter_model.safetensors. They are loaded against model
 * structs with only cfg filled (all lora_load reads): valid adapters (the tensor views, ranks,
 * scales, use_rslora, the Q/K row permutation between GGUF and Hugging Face layouts), and every
 * refusal, each checked to name the file and the key, field or tensor at fault. */
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine/model/gguf_writer.h"
#include "engine/model/lora.h"
#include "lib/buf.h"

/* The test model: projections of distinct widths (Q 48, KV 24, E 32, F 64), so that a swapped
 * dimension cannot pass. */
enum { N_LAYER = 2, EMBD = 32, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 12, FF = 64 };

static char g_dir[64];   /* this run's temporary directory */
static char g_err[1024]; /* lora_load's message */

/* dir/name, in one of four rotating buffers (a test holds at most a few paths at once). */
static const char *tpath(const char *name)
{
    static char paths[4][256];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof(paths[0]), "%s/%s", g_dir, name);
    return p;
}

static model test_model(model_arch arch, bool rope_neox)
{
    model m;
    memset(&m, 0, sizeof(m));
    m.cfg.arch = arch;
    m.cfg.n_layer = N_LAYER;
    m.cfg.n_embd = EMBD;
    m.cfg.n_head = HEADS;
    m.cfg.n_head_kv = KV_HEADS;
    m.cfg.head_dim = HEAD_DIM;
    m.cfg.n_rot = HEAD_DIM;
    m.cfg.n_ff = FF;
    m.cfg.rope_neox = rope_neox;
    return m;
}

/* The value of element (row, col) of the F32 tensor with this seed: exact in a float and unique
 * per row for the shapes used here. */
static float value_at(int seed, int64_t row, int64_t col)
{
    return (float)(seed * 100000 + row * 100 + col);
}

/* The bytes of a tensor of `rows` rows of `cols` elements (F32: value_at; F16/BF16: a 16-bit
 * pattern; quantized types: a byte pattern). Caller frees. */
static uint8_t *tensor_bytes(tdtype type, int64_t cols, int64_t rows, int seed, size_t *len)
{
    const size_t row = td_row_bytes(type, cols);
    *len = row * (size_t)rows;
    uint8_t *p = malloc(*len ? *len : 1);
    assert_non_null(p);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            if (type == TD_F32) {
                const float v = value_at(seed, r, c);
                memcpy(p + (size_t)r * row + (size_t)c * 4, &v, 4);
            } else if (type == TD_F16 || type == TD_BF16) {
                const uint16_t v = (uint16_t)(seed * 4096 + r * 64 + c);
                memcpy(p + (size_t)r * row + (size_t)c * 2, &v, 2);
            }
        }
    }
    if (type != TD_F32 && type != TD_F16 && type != TD_BF16) {
        for (size_t i = 0; i < *len; i++) {
            p[i] = (uint8_t)(i * 37u + (unsigned)seed);
        }
    }
    return p;
}

/* Element (row, col) of a loaded F32 tensor ({cols, rows} in ggml order). */
static float loaded_at(const model_tensor *t, int64_t row, int64_t col)
{
    float v;
    memcpy(&v, (const uint8_t *)t->data + ((size_t)row * (size_t)t->ne[0] + (size_t)col) * 4, 4);
    return v;
}

/* t is {cols, rows} of type `type` holding exactly the bytes tensor_bytes wrote for seed. */
static void expect_tensor(const model_tensor *t, tdtype type, int64_t cols, int64_t rows, int seed)
{
    assert_non_null(t->data);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], cols);
    assert_int_equal(t->ne[1], rows);
    size_t len;
    uint8_t *want = tensor_bytes(type, cols, rows, seed, &len);
    assert_int_equal(t->nbytes, len);
    assert_memory_equal(t->data, want, len);
    free(want);
}

/* A tensor seed per (layer, target, A or B). */
static int seed_of(int layer, lora_target t, bool b)
{
    return 1 + layer * 16 + (int)t * 2 + (b ? 1 : 0);
}

/* ---- GGUF adapters ---- */

/* An adapter GGUF writer with the given keys; NULL strings and a NAN alpha are left out. */
static gguf_writer *adapter_new(const char *general_type, const char *adapter_type,
                                const char *arch, float alpha)
{
    gguf_writer *w = gguf_writer_new(0);
    assert_non_null(w);
    if (general_type) {
        assert_int_equal(gguf_writer_set_str(w, "general.type", general_type), 0);
    }
    if (adapter_type) {
        assert_int_equal(gguf_writer_set_str(w, "adapter.type", adapter_type), 0);
    }
    if (arch) {
        assert_int_equal(gguf_writer_set_str(w, "general.architecture", arch), 0);
    }
    if (!isnan(alpha)) {
        assert_int_equal(gguf_writer_set_f32(w, "adapter.lora.alpha", alpha), 0);
    }
    return w;
}

static void add_tensor(gguf_writer *w, const char *name, tdtype type, int64_t ne0, int64_t ne1,
                       int seed)
{
    size_t len;
    uint8_t *p = tensor_bytes(type, ne0, ne1, seed, &len);
    const int64_t ne[2] = {ne0, ne1};
    assert_int_equal(gguf_writer_add_tensor(w, name, type, 2, ne, p, len), 0);
    free(p);
}

/* blk.<layer>.<t>.weight.lora_a {in, rank} and .lora_b {rank, out} with m's widths. */
static void add_pair(gguf_writer *w, const model *m, int layer, lora_target t, int64_t rank,
                     tdtype type)
{
    int64_t in, out;
    lora_target_dims(m, t, &in, &out);
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_a", layer, lora_target_name(t));
    add_tensor(w, name, type, in, rank, seed_of(layer, t, false));
    snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_b", layer, lora_target_name(t));
    add_tensor(w, name, type, rank, out, seed_of(layer, t, true));
}

/* Writes w to g_dir/file and frees it; the path. */
static const char *write_gguf(gguf_writer *w, const char *file)
{
    const char *path = tpath(file);
    char err[256];
    assert_int_equal(gguf_writer_write_file(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);
    return path;
}

/* lora_load(m, path) fails, and its message names the path and every non-NULL want. */
static void expect_fail(const model *m, const char *path, const char *want1, const char *want2)
{
    g_err[0] = '\0';
    lora_adapter *a = lora_load(m, path, g_err, sizeof(g_err));
    if (a) {
        lora_free(a);
        fail_msg("%s: loaded, expected an error naming %s", path, want1 ? want1 : "it");
    }
    if (!strstr(g_err, path)) {
        fail_msg("message does not name %s: %s", path, g_err);
    }
    if (want1 && !strstr(g_err, want1)) {
        fail_msg("message does not name '%s': %s", want1, g_err);
    }
    if (want2 && !strstr(g_err, want2)) {
        fail_msg("message does not name '%s': %s", want2, g_err);
    }
}

static lora_adapter *expect_load(const model *m, const char *path)
{
    g_err[0] = '\0';
    lora_adapter *a = lora_load(m, path, g_err, sizeof(g_err));
    if (!a) {
        fail_msg("%s: %s", path, g_err);
    }
    return a;
}

/* Two layers, rank 4, attn_q and attn_v, alpha 8. */
static const char *qv_adapter(const model *m, const char *file, tdtype type, float alpha)
{
    gguf_writer *w = adapter_new("adapter", "lora", "llama", alpha);
    for (int l = 0; l < N_LAYER; l++) {
        add_pair(w, m, l, LORA_Q, 4, type);
        add_pair(w, m, l, LORA_V, 4, type);
    }
    return write_gguf(w, file);
}

static void check_qv(const model *m, const lora_adapter *a, tdtype type, float scale)
{
    assert_int_equal(a->format, MODEL_FORMAT_GGUF);
    assert_int_equal(a->n_layer, N_LAYER);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_adapted, 4);
    size_t bytes = 0;
    for (int l = 0; l < N_LAYER; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *w = &a->layers[l][t];
            if (t != LORA_Q && t != LORA_V) {
                assert_null(w->a.data);
                assert_null(w->b.data);
                continue;
            }
            int64_t in, out;
            lora_target_dims(m, (lora_target)t, &in, &out);
            expect_tensor(&w->a, type, in, 4, seed_of(l, (lora_target)t, false));
            expect_tensor(&w->b, type, 4, out, seed_of(l, (lora_target)t, true));
            char name[96];
            snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_a", l,
                     lora_target_name((lora_target)t));
            assert_string_equal(w->a.name, name);
            assert_true(w->scale == scale);
            bytes += w->a.nbytes + w->b.nbytes;
        }
    }
    assert_int_equal(a->bytes, bytes);
}

static void test_target_dims(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    const int64_t want[LORA_N_TARGETS][2] = {
        [LORA_Q] = {EMBD, HEADS * HEAD_DIM},
        [LORA_K] = {EMBD, KV_HEADS * HEAD_DIM},
        [LORA_V] = {EMBD, KV_HEADS * HEAD_DIM},
        [LORA_O] = {HEADS * HEAD_DIM, EMBD},
        [LORA_GATE] = {EMBD, FF},
        [LORA_UP] = {EMBD, FF},
        [LORA_DOWN] = {FF, EMBD},
    };
    static const char *const names[LORA_N_TARGETS] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        int64_t in, out;
        lora_target_dims(&m, (lora_target)t, &in, &out);
        assert_int_equal(in, want[t][0]);
        assert_int_equal(out, want[t][1]);
        assert_string_equal(lora_target_name((lora_target)t), names[t]);
    }
    lora_free(NULL);
}

static void test_gguf_valid(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    lora_adapter *a = expect_load(&m, qv_adapter(&m, "qv_f32.gguf", TD_F32, 8.0f));
    check_qv(&m, a, TD_F32, 2.0f);
    lora_free(a);

    a = expect_load(&m, qv_adapter(&m, "qv_f16.gguf", TD_F16, 8.0f));
    check_qv(&m, a, TD_F16, 2.0f);
    lora_free(a);

    /* every target, BF16 and Q8_0 (A's rows a multiple of 32 wide: in is 32, 48 or 64) */
    gguf_writer *w = adapter_new("adapter", "lora", "llama", 6.0f);
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        add_pair(w, &m, 1, (lora_target)t, 3, t % 2 ? TD_BF16 : TD_F32);
    }
    a = expect_load(&m, write_gguf(w, "all_targets.gguf"));
    assert_int_equal(a->n_adapted, LORA_N_TARGETS);
    assert_int_equal(a->rank, 3);
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        assert_null(a->layers[0][t].a.data);
        assert_true(a->layers[1][t].scale == 2.0f);
    }
    lora_free(a);

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_Q8_0, EMBD, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 4, HEADS * HEAD_DIM, 2);
    a = expect_load(&m, write_gguf(w, "q8_a.gguf"));
    expect_tensor(&a->layers[0][LORA_Q].a, TD_Q8_0, EMBD, 4, 1);
    lora_free(a);

    /* no general.architecture: nothing to compare, accepted (llama.cpp requires it of its own
     * files, but the base model decides the layout here) */
    w = adapter_new("adapter", "lora", NULL, 8.0f);
    add_pair(w, &m, 0, LORA_O, 2, TD_F32);
    a = expect_load(&m, write_gguf(w, "no_arch.gguf"));
    assert_int_equal(a->n_adapted, 1);
    lora_free(a);
}

static void test_gguf_alpha(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    lora_adapter *a = expect_load(&m, qv_adapter(&m, "no_alpha.gguf", TD_F32, NAN));
    check_qv(&m, a, TD_F32, 1.0f);
    lora_free(a);
    a = expect_load(&m, qv_adapter(&m, "alpha0.gguf", TD_F32, 0.0f)); /* llama.cpp: 0 is none */
    check_qv(&m, a, TD_F32, 1.0f);
    lora_free(a);
    a = expect_load(&m, qv_adapter(&m, "alpha_neg.gguf", TD_F32, -2.0f));
    check_qv(&m, a, TD_F32, -0.5f);
    lora_free(a);
    expect_fail(&m, qv_adapter(&m, "alpha_nan.gguf", TD_F32, INFINITY), "adapter.lora.alpha", NULL);

    gguf_writer *w = adapter_new("adapter", "lora", "llama", NAN);
    assert_int_equal(gguf_writer_set_str(w, "adapter.lora.alpha", "8"), 0);
    add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
    expect_fail(&m, write_gguf(w, "alpha_str.gguf"), "adapter.lora.alpha", NULL);
}

static void test_gguf_keys(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    static const struct {
        const char *general_type, *adapter_type, *arch, *file, *want;
    } cases[] = {
        {"model", "lora", "llama", "type_model.gguf", "general.type"},
        {NULL, "lora", "llama", "type_missing.gguf", "general.type"},
        {"adapterx", "lora", "llama", "type_longer.gguf", "general.type"},
        {"adapter", NULL, "llama", "adapter_type_missing.gguf", "adapter.type"},
        {"adapter", "ia3", "llama", "adapter_type_ia3.gguf", "adapter.type"},
        {"adapter", "lor", "llama", "adapter_type_short.gguf", "adapter.type"},
        {"adapter", "lora", "qwen2", "arch_qwen2.gguf", "general.architecture \"qwen2\""},
        {"adapter", "lora", "llam", "arch_prefix.gguf", "general.architecture"},
        {"adapter", "lora", "llama2", "arch_longer.gguf", "general.architecture"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gguf_writer *w =
            adapter_new(cases[i].general_type, cases[i].adapter_type, cases[i].arch, 8.0f);
        add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
        expect_fail(&m, write_gguf(w, cases[i].file), cases[i].want, NULL);
    }
    /* general.type of the wrong type */
    gguf_writer *w = adapter_new(NULL, "lora", "llama", 8.0f);
    assert_int_equal(gguf_writer_set_u32(w, "general.type", 1), 0);
    add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
    expect_fail(&m, write_gguf(w, "type_u32.gguf"), "general.type", NULL);

    /* a qwen2 adapter on a qwen2 model is fine */
    const model qwen = test_model(MODEL_ARCH_QWEN2, true);
    w = adapter_new("adapter", "lora", "qwen2", 8.0f);
    add_pair(w, &qwen, 0, LORA_K, 4, TD_F32);
    lora_adapter *a = expect_load(&qwen, write_gguf(w, "qwen2_ok.gguf"));
    /* qwen2 rows are never permuted: the mapped bytes themselves */
    expect_tensor(&a->layers[0][LORA_K].b, TD_F32, 4, KV_HEADS * HEAD_DIM,
                  seed_of(0, LORA_K, true));
    lora_free(a);

    /* not a GGUF file at all */
    const char *path = tpath("garbage.gguf");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("not a gguf file, just text", f);
    fclose(f);
    expect_fail(&m, path, NULL, NULL);
}

static void test_gguf_tensors(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    const int64_t Q = HEADS * HEAD_DIM;

    gguf_writer *w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
    add_tensor(w, "blk.1.attn_v.weight.lora_a", TD_F32, EMBD, 4, 1);
    expect_fail(&m, write_gguf(w, "a_only.gguf"), "blk.1.attn_v.weight.lora_a", "has no");

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_k.weight.lora_b", TD_F32, 4, KV_HEADS * HEAD_DIM, 1);
    expect_fail(&m, write_gguf(w, "b_only.gguf"), "blk.0.attn_k.weight.lora_b", "has no");

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_F32, EMBD + 1, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 4, Q, 2);
    expect_fail(&m, write_gguf(w, "a_wide.gguf"), "blk.0.attn_q.weight.lora_a", "{33, 4}");

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_F32, EMBD, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 4, Q + 1, 2);
    expect_fail(&m, write_gguf(w, "b_tall.gguf"), "blk.0.attn_q.weight.lora_b", "{4, 49}");

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_F32, EMBD, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 5, Q, 2);
    expect_fail(&m, write_gguf(w, "rank_differs.gguf"), "blk.0.attn_q.weight.lora_b", "{5, 48}");

    /* A and B swapped: {rank, out} where {in, rank} belongs */
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.ffn_down.weight.lora_a", TD_F32, 4, EMBD, 1);
    add_tensor(w, "blk.0.ffn_down.weight.lora_b", TD_F32, FF, 4, 2);
    expect_fail(&m, write_gguf(w, "swapped.gguf"), "blk.0.ffn_down.weight.lora_a", NULL);

    /* a 3-D A */
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    {
        size_t len;
        uint8_t *p = tensor_bytes(TD_F32, EMBD, 4, 1, &len);
        const int64_t ne[3] = {EMBD, 2, 2};
        assert_int_equal(
            gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_F32, 3, ne, p, len), 0);
        free(p);
    }
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 2, Q, 2);
    expect_fail(&m, write_gguf(w, "a_3d.gguf"), "blk.0.attn_q.weight.lora_a", NULL);

    static const char *const bad_names[] = {
        "token_embd.weight.lora_a",     "blk.0.attn_q.weight",
        "blk.x.attn_q.weight.lora_a",   "blk.01.attn_q.weight.lora_a",
        "blk.0.attn_qk.weight.lora_a",  "blk.0.attn_q.weight.lora_c",
        "blk.0.attn_q.weight.lora_a.x", "blk.0.attn_q.bias.lora_a",
        "blk.-1.attn_q.weight.lora_a",  "blk.0.ffn_gate_exps.weight.lora_a",
        "blk..attn_q.weight.lora_a",    "output.weight.lora_b",
        "blk.0.attn_q.weight.lora_",    "blk.99999999999999999999.attn_q.weight.lora_a",
    };
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        char file[32];
        snprintf(file, sizeof(file), "bad_name_%zu.gguf", i);
        w = adapter_new("adapter", "lora", "llama", 8.0f);
        add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
        add_tensor(w, bad_names[i], TD_F32, EMBD, 4, 9);
        char want[128];
        snprintf(want, sizeof(want), "tensor %s:", bad_names[i]);
        expect_fail(&m, write_gguf(w, file), want, NULL);
    }

    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
    add_tensor(w, "blk.2.attn_q.weight.lora_a", TD_F32, EMBD, 4, 1);
    expect_fail(&m, write_gguf(w, "layer2.gguf"), "blk.2.attn_q.weight.lora_a", "2 layers");

    /* a quantized type other than Q8_0: named with the tensor */
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_Q4_0, EMBD, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_F32, 4, Q, 2);
    expect_fail(&m, write_gguf(w, "q4_0.gguf"), "blk.0.attn_q.weight.lora_a", "type 2");
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_tensor(w, "blk.0.attn_q.weight.lora_a", TD_F32, EMBD, 256, 1);
    add_tensor(w, "blk.0.attn_q.weight.lora_b", TD_Q4_K, 256, Q, 2); /* rank 256: whole blocks */
    expect_fail(&m, write_gguf(w, "q4_k.gguf"), "blk.0.attn_q.weight.lora_b", "type 12");

    /* rank LORA_MAX_RANK loads, one more does not (attn_v keeps it small: 32 in, 24 out) */
    w = adapter_new("adapter", "lora", "llama", 512.0f);
    add_pair(w, &m, 0, LORA_V, LORA_MAX_RANK, TD_F32);
    lora_adapter *a = expect_load(&m, write_gguf(w, "rank512.gguf"));
    assert_int_equal(a->rank, LORA_MAX_RANK);
    assert_true(a->layers[0][LORA_V].scale == 1.0f);
    lora_free(a);
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_pair(w, &m, 0, LORA_V, LORA_MAX_RANK + 1, TD_F32);
    expect_fail(&m, write_gguf(w, "rank513.gguf"), "blk.0.attn_v.weight.lora_a", "rank 513");

    /* no tensors at all */
    w = adapter_new("adapter", "lora", "llama", 8.0f);
    expect_fail(&m, write_gguf(w, "empty.gguf"), "no LoRA weights", NULL);
}

/*
 * Names that parse to a layer number only through strtol's leniency ("+1", " 1", "-0") are not
 * canonical GGUF names; accepted, they would alias a canonical tensor and the later one silently
 * replace the earlier: refused, naming the tensor.
 */
static void test_gguf_noncanonical_layer(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    static const char *const names[] = {"blk.+1.attn_q.weight.lora_a",
                                        "blk. 1.attn_q.weight.lora_a",
                                        "blk.-0.attn_q.weight.lora_a"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char file[32];
        snprintf(file, sizeof(file), "noncanonical_%zu.gguf", i);
        gguf_writer *w = adapter_new("adapter", "lora", "llama", 8.0f);
        add_pair(w, &m, 0, LORA_Q, 4, TD_F32);
        add_pair(w, &m, 1, LORA_Q, 4, TD_F32);
        add_tensor(w, names[i], TD_F32, EMBD, 4, 9);
        expect_fail(&m, write_gguf(w, file), names[i], NULL);
    }
}

static void test_model_kinds(void **state)
{
    (void)state;
    model moe = test_model(MODEL_ARCH_QWEN3MOE, true);
    moe.cfg.n_expert = 8;
    moe.cfg.n_expert_used = 2;
    moe.cfg.n_ff_exp = 16;
    static const lora_target ffn[] = {LORA_GATE, LORA_UP, LORA_DOWN};
    for (size_t i = 0; i < sizeof(ffn) / sizeof(ffn[0]); i++) {
        char file[32], want[64];
        snprintf(file, sizeof(file), "moe_%s.gguf", lora_target_name(ffn[i]));
        snprintf(want, sizeof(want), "blk.0.%s.weight.lora_a", lora_target_name(ffn[i]));
        gguf_writer *w = adapter_new("adapter", "lora", "qwen3moe", 8.0f);
        add_pair(w, &moe, 0, LORA_Q, 4, TD_F32);
        add_pair(w, &moe, 0, ffn[i], 4, TD_F32);
        expect_fail(&moe, write_gguf(w, file), want, "mixture-of-experts");
    }
    gguf_writer *w = adapter_new("adapter", "lora", "qwen3moe", 8.0f);
    for (int t = LORA_Q; t <= LORA_O; t++) {
        add_pair(w, &moe, 1, (lora_target)t, 4, TD_F32);
    }
    lora_adapter *a = expect_load(&moe, write_gguf(w, "moe_attn.gguf"));
    assert_int_equal(a->n_adapted, 4);
    lora_free(a);

    const model phi3 = test_model(MODEL_ARCH_PHI3, true);
    w = adapter_new("adapter", "lora", "phi3", 8.0f);
    add_pair(w, &phi3, 0, LORA_O, 4, TD_F32);
    expect_fail(&phi3, write_gguf(w, "phi3.gguf"), "phi3", NULL);
}

static void test_paths(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_LLAMA, false);
    expect_fail(&m, tpath("does-not-exist.gguf"), "No adapter found", NULL);
    expect_fail(&m, tpath("no/such/dir"), "No adapter found", NULL);

    const char *dir = tpath("empty_dir");
    assert_int_equal(mkdir(dir, 0755), 0);
    expect_fail(&m, dir, "adapter_config.json", NULL);

    g_err[0] = '\0';
    assert_null(lora_load(&m, "", g_err, sizeof(g_err)));
    assert_true(g_err[0] != '\0');
    assert_null(lora_load(&m, NULL, g_err, sizeof(g_err)));
    assert_null(lora_load(NULL, dir, NULL, 0)); /* err may be NULL */
}

/* ---- PEFT directories ---- */

#define ST_MAX 32

/* A safetensors file to write: tensors of `rows` rows of `cols` elements (shape [rows, cols]). */
typedef struct st_spec {
    int n;
    struct {
        char name[128];
        tdtype type;
        int64_t rows, cols;
        int seed;
        int n_dims; /* 2, or 1: shape [rows * cols] */
    } t[ST_MAX];
} st_spec;

static void st_add(st_spec *s, const char *name, tdtype type, int64_t rows, int64_t cols, int seed)
{
    assert_true(s->n < ST_MAX);
    snprintf(s->t[s->n].name, sizeof(s->t[0].name), "%s", name);
    s->t[s->n].type = type;
    s->t[s->n].rows = rows;
    s->t[s->n].cols = cols;
    s->t[s->n].seed = seed;
    s->t[s->n].n_dims = 2;
    s->n++;
}

static const char *const peft_modules[LORA_N_TARGETS] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

/* lora_A [rank, in] and lora_B [out, rank] of layer's t, with m's widths and GGUF's seeds. */
static void peft_pair(st_spec *s, const model *m, int layer, lora_target t, int64_t rank,
                      tdtype type)
{
    int64_t in, out;
    lora_target_dims(m, t, &in, &out);
    char name[128];
    snprintf(name, sizeof(name), "base_model.model.model.layers.%d.%s.lora_A.weight", layer,
             peft_modules[t]);
    st_add(s, name, type, rank, in, seed_of(layer, t, false));
    snprintf(name, sizeof(name), "base_model.model.model.layers.%d.%s.lora_B.weight", layer,
             peft_modules[t]);
    st_add(s, name, type, out, rank, seed_of(layer, t, true));
}

static const char *st_dtype(tdtype t)
{
    return t == TD_F32 ? "F32" : t == TD_F16 ? "F16" : "BF16";
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* 8-byte little-endian header length, the JSON header padded with spaces to 8 bytes, the data. */
static void st_write(const st_spec *s, const char *path)
{
    struct buf h, out;
    buf_init(&h, 1 << 20);
    buf_appends(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
        const size_t n = td_row_bytes(s->t[i].type, s->t[i].cols) * (size_t)s->t[i].rows;
        if (s->t[i].n_dims == 2) {
            buf_appendf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],", s->t[i].name,
                        st_dtype(s->t[i].type), (long long)s->t[i].rows, (long long)s->t[i].cols);
        } else {
            buf_appendf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],", s->t[i].name,
                        st_dtype(s->t[i].type), (long long)s->t[i].rows * (long long)s->t[i].cols);
        }
        buf_appendf(&h, "\"data_offsets\":[%zu,%zu]}", off, off + n);
        off += n;
    }
    buf_appends(&h, "}");
    while (h.len % 8) {
        buf_appends(&h, " ");
    }
    assert_int_equal(buf_error(&h), 0);
    buf_init(&out, 64 << 20);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) {
        le[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    }
    buf_append(&out, le, 8);
    buf_append(&out, h.data, h.len);
    for (int i = 0; i < s->n; i++) {
        size_t len;
        uint8_t *p = tensor_bytes(s->t[i].type, s->t[i].cols, s->t[i].rows, s->t[i].seed, &len);
        buf_append(&out, p, len);
        free(p);
    }
    assert_int_equal(buf_error(&out), 0);
    write_file(path, out.data, out.len);
    buf_free(&h);
    buf_free(&out);
}

/* g_dir/name/ with adapter_config.json = config and adapter_model.safetensors = s (each left out
 * when NULL); the directory's path. */
static const char *make_peft(const char *name, const char *config, const st_spec *s)
{
    const char *dir = tpath(name);
    assert_int_equal(mkdir(dir, 0755), 0);
    char path[512];
    if (config) {
        snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
        write_file(path, config, strlen(config));
    }
    if (s) {
        snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
        st_write(s, path);
    }
    return dir;
}

#define CFG_REST "\"target_modules\":[\"q_proj\",\"k_proj\",\"v_proj\",\"down_proj\"]"
/* An adapter_config.json of the given fields and the target list. */
#define CFG(fields) "{" fields "," CFG_REST ",\"task_type\":\"CAUSAL_LM\"}"
/* r 4, alpha 12 and extra fields (each starting with a comma). */
#define CFG_OK(extra) CFG("\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":12" extra)

/* Layer 0: q, k, v, down; layer 1: q, k. Rank 4. */
static void peft_tensors(st_spec *s, const model *m, tdtype type)
{
    memset(s, 0, sizeof(*s));
    static const lora_target l0[] = {LORA_Q, LORA_K, LORA_V, LORA_DOWN};
    for (size_t i = 0; i < sizeof(l0) / sizeof(l0[0]); i++) {
        peft_pair(s, m, 0, l0[i], 4, type);
    }
    peft_pair(s, m, 1, LORA_Q, 4, type);
    peft_pair(s, m, 1, LORA_K, 4, type);
}

/* B of (layer, t) holds the file's rows in GGUF order: loaded row h*hd + 2i + j is the file's
 * (HF) row h*hd + j*(hd/2) + i. */
static void expect_permuted(const lora_adapter *a, int layer, lora_target t, int n_head,
                            bool hf_to_gguf)
{
    const model_tensor *b = &a->layers[layer][t].b;
    const int seed = seed_of(layer, t, true), half = HEAD_DIM / 2;
    assert_int_equal(b->ne[1], (int64_t)n_head * HEAD_DIM);
    for (int h = 0; h < n_head; h++) {
        for (int i = 0; i < half; i++) {
            for (int j = 0; j < 2; j++) {
                const int g = h * HEAD_DIM + 2 * i + j, f = h * HEAD_DIM + j * half + i;
                const int loaded = hf_to_gguf ? g : f, file = hf_to_gguf ? f : g;
                for (int c = 0; c < b->ne[0]; c++) {
                    if (loaded_at(b, loaded, c) != value_at(seed, file, c)) {
                        fail_msg("%s: row %d col %d is %g, want the file's row %d (%g)", b->name,
                                 loaded, c, (double)loaded_at(b, loaded, c), file,
                                 (double)value_at(seed, file, c));
                    }
                }
            }
        }
    }
}

/* The pairs of peft_tensors and nothing else: A as written, B as written (q's and k's only with
 * qk_as_written; the caller checks their permutation otherwise), every scale `scale`. */
static void check_peft(const model *m, const lora_adapter *a, float scale, bool qk_as_written)
{
    assert_int_equal(a->format, MODEL_FORMAT_HF);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_adapted, 6);
    for (int l = 0; l < N_LAYER; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *w = &a->layers[l][t];
            const bool adapted =
                t == LORA_Q || t == LORA_K || (l == 0 && (t == LORA_V || t == LORA_DOWN));
            if (!adapted) {
                assert_null(w->a.data);
                assert_null(w->b.data);
                continue;
            }
            int64_t in, out;
            lora_target_dims(m, (lora_target)t, &in, &out);
            expect_tensor(&w->a, TD_F32, in, 4, seed_of(l, (lora_target)t, false));
            if (qk_as_written || (t != LORA_Q && t != LORA_K)) {
                expect_tensor(&w->b, TD_F32, 4, out, seed_of(l, (lora_target)t, true));
            }
            if (fabsf(w->scale - scale) > 1e-6f) {
                fail_msg("layer %d %s: scale %g, want %g", l, lora_target_name((lora_target)t),
                         (double)w->scale, (double)scale);
            }
        }
    }
}

static void test_peft_valid(void **state)
{
    (void)state;
    const model llama_gguf = test_model(MODEL_ARCH_LLAMA, false);
    const model llama_hf = test_model(MODEL_ARCH_LLAMA, true);
    const model qwen2 = test_model(MODEL_ARCH_QWEN2, true);
    st_spec s;
    peft_tensors(&s, &llama_gguf, TD_F32);
    const char *dir = make_peft("peft_ok", CFG_OK(""), &s);

    /* qwen2 (NeoX RoPE): the mapped bytes unchanged; scale alpha / r = 12 / 4 */
    lora_adapter *a = expect_load(&qwen2, dir);
    check_peft(&qwen2, a, 3.0f, true);
    lora_free(a);

    /* llama from a Hugging Face checkpoint: not permuted either */
    a = expect_load(&llama_hf, dir);
    check_peft(&llama_hf, a, 3.0f, true);
    lora_free(a);

    /* llama from GGUF: q's B rows permuted over n_head heads, k's over n_head_kv */
    a = expect_load(&llama_gguf, dir);
    check_peft(&llama_gguf, a, 3.0f, false);
    for (int l = 0; l < N_LAYER; l++) {
        expect_permuted(a, l, LORA_Q, HEADS, true);
        expect_permuted(a, l, LORA_K, KV_HEADS, true);
        /* A is never permuted */
        expect_tensor(&a->layers[l][LORA_Q].a, TD_F32, EMBD, 4, seed_of(l, LORA_Q, false));
    }
    lora_free(a);

    /* use_rslora: alpha / sqrt(r) = 12 / 2 */
    dir = make_peft("peft_rslora", CFG_OK(",\"use_rslora\":true"), &s);
    a = expect_load(&qwen2, dir);
    check_peft(&qwen2, a, 6.0f, true);
    lora_free(a);

    /* the fields PEFT writes by default, empty or null, are accepted */
    dir = make_peft("peft_defaults",
                    CFG_OK(",\"bias\":\"none\",\"fan_in_fan_out\":false,\"modules_to_save\":null,"
                           "\"rank_pattern\":{},\"alpha_pattern\":{},\"use_rslora\":false,"
                           "\"lora_dropout\":0.05,\"base_model_name_or_path\":\"x\""),
                    &s);
    a = expect_load(&qwen2, dir);
    check_peft(&qwen2, a, 3.0f, true);
    lora_free(a);
    dir = make_peft("peft_empty_save", CFG_OK(",\"modules_to_save\":[]"), &s);
    a = expect_load(&qwen2, dir);
    lora_free(a);

    /* F16 and BF16 weights, fractional alpha */
    st_spec h;
    memset(&h, 0, sizeof(h));
    peft_pair(&h, &qwen2, 1, LORA_O, 2, TD_F16);
    peft_pair(&h, &qwen2, 1, LORA_UP, 2, TD_BF16);
    dir = make_peft("peft_f16", CFG("\"r\":2,\"lora_alpha\":1.5"), &h);
    a = expect_load(&qwen2, dir);
    assert_int_equal(a->n_adapted, 2);
    expect_tensor(&a->layers[1][LORA_O].b, TD_F16, 2, EMBD, seed_of(1, LORA_O, true));
    expect_tensor(&a->layers[1][LORA_UP].a, TD_BF16, EMBD, 2, seed_of(1, LORA_UP, false));
    assert_true(a->layers[1][LORA_O].scale == 0.75f);
    lora_free(a);
}

/* A GGUF llama adapter on a llama Hugging Face checkpoint: q/k B rows back into HF order. */
static void test_gguf_on_hf_llama(void **state)
{
    (void)state;
    const model llama_hf = test_model(MODEL_ARCH_LLAMA, true);
    gguf_writer *w = adapter_new("adapter", "lora", "llama", 8.0f);
    add_pair(w, &llama_hf, 0, LORA_Q, 4, TD_F32);
    add_pair(w, &llama_hf, 1, LORA_K, 4, TD_F32);
    add_pair(w, &llama_hf, 1, LORA_V, 4, TD_F32);
    lora_adapter *a = expect_load(&llama_hf, write_gguf(w, "gguf_on_hf.gguf"));
    expect_permuted(a, 0, LORA_Q, HEADS, false);
    expect_permuted(a, 1, LORA_K, KV_HEADS, false);
    expect_tensor(&a->layers[1][LORA_V].b, TD_F32, 4, KV_HEADS * HEAD_DIM,
                  seed_of(1, LORA_V, true));
    lora_free(a);
}

static void test_peft_config_errors(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_QWEN2, true);
    st_spec s;
    peft_tensors(&s, &m, TD_F32);
    static const struct {
        const char *config, *want;
    } cases[] = {
        {CFG_OK(",\"bias\":\"all\""), "adapter_config.json: bias"},
        {CFG_OK(",\"bias\":\"lora_only\""), "adapter_config.json: bias"},
        {CFG_OK(",\"fan_in_fan_out\":true"), "adapter_config.json: fan_in_fan_out"},
        {CFG_OK(",\"modules_to_save\":[\"lm_head\"]"), "adapter_config.json: modules_to_save"},
        {CFG_OK(",\"rank_pattern\":{\"q_proj\":8}"), "adapter_config.json: rank_pattern"},
        {CFG_OK(",\"alpha_pattern\":{\"q_proj\":8}"), "adapter_config.json: alpha_pattern"},
        {CFG("\"peft_type\":\"IA3\",\"r\":4,\"lora_alpha\":12"), "adapter_config.json: peft_type"},
        {CFG("\"lora_alpha\":12"), "adapter_config.json: r:"},
        {CFG("\"r\":0,\"lora_alpha\":12"), "adapter_config.json: r: 0"},
        {CFG("\"r\":-4,\"lora_alpha\":12"), "adapter_config.json: r: -4"},
        {CFG("\"r\":513,\"lora_alpha\":12"), "adapter_config.json: r: 513"},
        {CFG("\"r\":\"4\",\"lora_alpha\":12"), "adapter_config.json: r:"},
        {CFG("\"r\":4.5,\"lora_alpha\":12"), "adapter_config.json: r:"},
        {CFG("\"r\":4,\"lora_alpha\":\"12\""), "adapter_config.json: lora_alpha"},
        {CFG("\"r\":4"), "adapter_config.json: lora_alpha"},
        {CFG_OK(",\"use_rslora\":\"yes\""), "adapter_config.json: use_rslora"},
        {CFG_OK(",\"bias\":false"), "adapter_config.json: bias"},
        {"{\"r\": 4, \"lora_alpha\": ", "adapter_config.json"},
        {"[4]", "adapter_config.json"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "peft_cfg_%zu", i);
        expect_fail(&m, make_peft(name, cases[i].config, &s), cases[i].want, NULL);
    }
    /* r disagreeing with the tensors' rank */
    expect_fail(&m, make_peft("peft_r8", CFG("\"r\":8,\"lora_alpha\":12"), &s), "r = 8", "rank 4");
    /* no weights file */
    expect_fail(&m, make_peft("peft_no_st", CFG_OK(""), NULL), "adapter_model.safetensors", NULL);
    /* no config */
    expect_fail(&m, make_peft("peft_no_cfg", NULL, &s), "adapter_config.json", NULL);
}

static void test_peft_tensor_errors(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_QWEN2, true);
    static const char *const bad_names[] = {
        "base_model.model.lm_head.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_embedding_A",
        "base_model.model.model.embed_tokens.lora_embedding_A",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.bias",
        "base_model.model.model.layers.0.self_attn.q_proj.weight",
        "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight",
        "base_model.model.model.layers.00.self_attn.q_proj.lora_A.weight",
        "model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.gate_up_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
    };
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        st_spec s;
        peft_tensors(&s, &m, TD_F32);
        st_add(&s, bad_names[i], TD_F32, 4, EMBD, 9);
        char name[32], want[160];
        snprintf(name, sizeof(name), "peft_bad_name_%zu", i);
        snprintf(want, sizeof(want), "tensor %s:", bad_names[i]);
        expect_fail(&m, make_peft(name, CFG_OK(""), &s), want, NULL);
    }

    st_spec s;
    peft_tensors(&s, &m, TD_F32);
    peft_pair(&s, &m, 2, LORA_Q, 4, TD_F32);
    expect_fail(&m, make_peft("peft_layer2", CFG_OK(""), &s),
                "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", "2 layers");

    /* A as [in, rank] (transposed) */
    memset(&s, 0, sizeof(s));
    st_add(&s, "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", TD_F32, EMBD, 4,
           1);
    st_add(&s, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", TD_F32,
           KV_HEADS * HEAD_DIM, 4, 2);
    expect_fail(&m, make_peft("peft_a_transposed", CFG_OK(""), &s),
                "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", NULL);

    /* a 1-D A */
    memset(&s, 0, sizeof(s));
    peft_pair(&s, &m, 0, LORA_V, 4, TD_F32);
    s.t[0].n_dims = 1;
    expect_fail(&m, make_peft("peft_a_1d", CFG_OK(""), &s),
                "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", "2 dimensions");

    /* B without A */
    memset(&s, 0, sizeof(s));
    peft_pair(&s, &m, 0, LORA_V, 4, TD_F32);
    s.t[0] = s.t[1];
    s.n = 1;
    expect_fail(&m, make_peft("peft_b_only", CFG_OK(""), &s),
                "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", "has no");

    /* a rank-0 pair */
    memset(&s, 0, sizeof(s));
    peft_pair(&s, &m, 0, LORA_V, 0, TD_F32);
    expect_fail(&m, make_peft("peft_rank0", CFG_OK(""), &s),
                "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", NULL);

    /* the MoE restriction and the tensors' names apply to PEFT too */
    model moe = test_model(MODEL_ARCH_QWEN3MOE, true);
    moe.cfg.n_expert = 4;
    memset(&s, 0, sizeof(s));
    peft_pair(&s, &moe, 0, LORA_UP, 4, TD_F32);
    expect_fail(&moe, make_peft("peft_moe_up", CFG_OK(""), &s),
                "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", "mixture-of-experts");

    /* an empty safetensors file: no weights */
    memset(&s, 0, sizeof(s));
    expect_fail(&m, make_peft("peft_empty", CFG_OK(""), &s), "no LoRA weights", NULL);
}

/* A finite lora_alpha beyond float's range would be an infinite scale once cast: refused. */
static void test_peft_alpha_overflow(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_QWEN2, true);
    st_spec s;
    peft_tensors(&s, &m, TD_F32);
    expect_fail(&m, make_peft("peft_alpha_1e39", CFG("\"r\":4,\"lora_alpha\":1e39"), &s),
                "lora_alpha", NULL);
}

/*
 * Without rank_pattern every PEFT module has rank r (PEFT itself refuses such a state dict): a
 * k_proj of rank 2 beside a q_proj of rank 4 with r 4 is refused, naming the k_proj tensor.
 */
static void test_peft_mixed_rank(void **state)
{
    (void)state;
    const model m = test_model(MODEL_ARCH_QWEN2, true);
    st_spec s;
    memset(&s, 0, sizeof(s));
    peft_pair(&s, &m, 0, LORA_Q, 4, TD_F32);
    peft_pair(&s, &m, 0, LORA_K, 2, TD_F32);
    expect_fail(&m, make_peft("peft_mixed_rank", CFG_OK(""), &s),
                "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", NULL);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/tandem_test_lora_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_dims),         cmocka_unit_test(test_gguf_valid),
        cmocka_unit_test(test_gguf_alpha),          cmocka_unit_test(test_gguf_keys),
        cmocka_unit_test(test_gguf_tensors),        cmocka_unit_test(test_gguf_noncanonical_layer),
        cmocka_unit_test(test_model_kinds),         cmocka_unit_test(test_paths),
        cmocka_unit_test(test_peft_valid),          cmocka_unit_test(test_gguf_on_hf_llama),
        cmocka_unit_test(test_peft_config_errors),  cmocka_unit_test(test_peft_tensor_errors),
        cmocka_unit_test(test_peft_alpha_overflow), cmocka_unit_test(test_peft_mixed_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
