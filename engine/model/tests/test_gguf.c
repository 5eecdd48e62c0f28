/* Unit tests for the GGUF writer and reader: round trip of every value type and tensor type,
 * hand-built files with the value types the writer does not produce, and malformed input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "lib/buf.h"

static char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof(path), "/tmp/tandem_model_test_%d_%s", (int)getpid(), name);
    return path;
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void test_round_trip(void **state)
{
    (void)state;
    gguf_writer *w = gguf_writer_new(64);
    assert_non_null(w);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_writer_set_u32(w, "a.u32", 7), 0);
    assert_int_equal(gguf_writer_set_u32(w, "a.u32", 4000000000u), 0); /* replaces */
    assert_int_equal(gguf_writer_set_i32(w, "a.i32", -5), 0);
    assert_int_equal(gguf_writer_set_f32(w, "a.f32", 1.5f), 0);
    assert_int_equal(gguf_writer_set_bool(w, "a.bool", true), 0);
    const char *strs[] = {"a", "", "x\0y"};
    const uint32_t lens[] = {1, 0, 3};
    assert_int_equal(gguf_writer_set_arr_str(w, "a.strs", strs, lens, 3), 0);
    assert_int_equal(gguf_writer_set_arr_str(w, "a.strs2", strs, NULL, 2), 0);
    const float fs[] = {0.25f, -2.0f};
    assert_int_equal(gguf_writer_set_arr_f32(w, "a.fs", fs, 2), 0);
    const int32_t is[] = {1, -2, 3};
    assert_int_equal(gguf_writer_set_arr_i32(w, "a.is", is, 3), 0);
    assert_int_equal(gguf_writer_set_arr_i32(w, "a.empty", NULL, 0), 0);

    float f32[6] = {1, 2, 3, 4, 5, 6};
    uint16_t f16[4] = {0x3c00, 0, 0, 0};
    uint8_t q8[34 * 2] = {0};
    uint8_t q4[18 * 3] = {0};
    q8[2] = 5;
    q4[17] = 0xab;
    int64_t ne_f32[] = {3, 2};
    int64_t ne_f16[] = {4};
    int64_t ne_q8[] = {32, 2};
    int64_t ne_q4[] = {32, 1, 3};
    assert_int_equal(gguf_writer_add_tensor(w, "t.f32", TD_F32, 2, ne_f32, f32, sizeof(f32)), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t.f16", TD_F16, 1, ne_f16, f16, sizeof(f16)), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t.bf16", TD_BF16, 1, ne_f16, f16, sizeof(f16)), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t.q8", TD_Q8_0, 2, ne_q8, q8, sizeof(q8)), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "t.q4", TD_Q4_0, 3, ne_q4, q4, sizeof(q4)), 0);
    /* argument checks */
    assert_int_equal(gguf_writer_add_tensor(w, "t.q4", TD_Q4_0, 3, ne_q4, q4, sizeof(q4)), -EEXIST);
    assert_int_equal(gguf_writer_add_tensor(w, "bad", TD_F32, 2, ne_f32, f32, 20), -EINVAL);
    int64_t ne_bad[] = {16, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "bad", TD_Q8_0, 2, ne_bad, q8, 34), -EINVAL);
    assert_int_equal(gguf_writer_add_tensor(w, "bad", (tdtype)12, 1, ne_f16, f16, 8), -EINVAL);
    assert_null(gguf_writer_new(12));

    const char *path = tmp_path("rt.gguf");
    char err[256];
    assert_int_equal(gguf_writer_write_file(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);

    gguf_ctx *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fail_msg("open: %s", err);
        return;
    }
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 64);
    assert_int_equal(g->n_kv, 11);
    /* insertion order: general.alignment first, then general.architecture */
    assert_memory_equal(g->kv[0].key.s, "general.alignment", 17);
    assert_memory_equal(g->kv[1].key.s, "general.architecture", 20);
    assert_memory_equal(g->kv[2].key.s, "a.u32", 5);
    uint32_t u;
    assert_int_equal(gguf_get_u32(g, "a.u32", &u, err, sizeof(err)), 0);
    assert_int_equal(u, 4000000000u);
    uint64_t u64;
    assert_int_equal(gguf_get_u64(g, "a.u32", &u64, err, sizeof(err)), 0);
    assert_int_equal(u64, 4000000000u);
    int32_t i;
    assert_int_equal(gguf_get_i32(g, "a.i32", &i, err, sizeof(err)), 0);
    assert_int_equal(i, -5);
    assert_int_equal(gguf_get_i32(g, "a.u32", &i, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a.u32: value out of range"));
    assert_int_equal(gguf_get_u32(g, "a.i32", &u, err, sizeof(err)), -EINVAL);
    float f;
    assert_int_equal(gguf_get_f32(g, "a.f32", &f, err, sizeof(err)), 0);
    assert_true(f == 1.5f);
    bool b = false;
    assert_int_equal(gguf_get_bool(g, "a.bool", &b, err, sizeof(err)), 0);
    assert_true(b);
    model_str s;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s, err, sizeof(err)), 0);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.s, "llama", 5);
    assert_int_equal(gguf_get_str(g, "a.f32", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "a.f32: expected string, got f32");
    assert_int_equal(gguf_get_str(g, "nope", &s, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "nope: missing");
    const gguf_kv *kv;
    assert_int_equal(gguf_get_arr(g, "a.strs", GGUF_TYPE_STRING, &kv, err, sizeof(err)), 0);
    assert_int_equal(kv->n, 3);
    assert_int_equal(kv->strs[0].len, 1);
    assert_int_equal(kv->strs[1].len, 0);
    assert_int_equal(kv->strs[2].len, 3);
    assert_memory_equal(kv->strs[2].s, "x\0y", 3);
    assert_int_equal(gguf_get_arr(g, "a.strs2", GGUF_TYPE_STRING, &kv, err, sizeof(err)), 0);
    assert_int_equal(kv->n, 2);
    assert_int_equal(gguf_get_arr(g, "a.fs", GGUF_TYPE_FLOAT32, &kv, err, sizeof(err)), 0);
    float f1;
    memcpy(&f1, kv->data + 4, 4);
    assert_true(f1 == -2.0f);
    assert_int_equal(gguf_get_arr(g, "a.is", GGUF_TYPE_FLOAT32, &kv, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "a.is: expected array of f32, got array of i32");
    assert_int_equal(gguf_get_arr(g, "a.is", GGUF_TYPE_INT32, &kv, err, sizeof(err)), 0);
    assert_int_equal(gguf_arr_int(kv, 1), -2);
    assert_int_equal(gguf_get_arr(g, "a.empty", GGUF_TYPE_INT32, &kv, err, sizeof(err)), 0);
    assert_int_equal(kv->n, 0);

    assert_int_equal(g->n_tensors, 5);
    const gguf_tensor_info *t = gguf_find_tensor(g, "t.q4");
    assert_non_null(t);
    assert_int_equal(t->type, TD_Q4_0);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 3);
    assert_int_equal(t->nbytes, sizeof(q4));
    assert_memory_equal(t->data, q4, sizeof(q4));
    assert_int_equal(((uintptr_t)t->data - (uintptr_t)g->base) % 64, 0);
    t = gguf_find_tensor(g, "t.f32");
    assert_non_null(t);
    assert_memory_equal(t->data, f32, sizeof(f32));
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[3], 1);
    t = gguf_find_tensor(g, "t.q8");
    assert_non_null(t);
    assert_memory_equal(t->data, q8, sizeof(q8));
    assert_non_null(gguf_find_tensor(g, "t.f16"));
    assert_non_null(gguf_find_tensor(g, "t.bf16"));
    assert_null(gguf_find_tensor(g, "t.nope"));
    assert_string_equal(g->tensors[0].name, "t.f32"); /* file order */
    gguf_close(g);
    unlink(path);
}

/* --- hand-built files for value types the writer does not emit and for corruption --- */

static void put_u32(struct buf *b, uint32_t v)
{
    assert_int_equal(buf_append(b, &v, 4), 0);
}

static void put_u64(struct buf *b, uint64_t v)
{
    assert_int_equal(buf_append(b, &v, 8), 0);
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    assert_int_equal(buf_append(b, s, strlen(s)), 0);
}

static gguf_ctx *open_buf(const struct buf *b, char *err, size_t errlen)
{
    return gguf_open_buffer(b->data, b->len, "t.gguf", err, errlen);
}

static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    buf_init(b, 1 << 20);
    put_u32(b, GGUF_MAGIC);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void test_all_value_types(void **state)
{
    (void)state;
    struct buf b;
    header(&b, 2, 0, 12);
    uint8_t u8 = 200;
    put_str(&b, "k.u8");
    put_u32(&b, GGUF_TYPE_UINT8);
    buf_append(&b, &u8, 1);
    int8_t i8 = -3;
    put_str(&b, "k.i8");
    put_u32(&b, GGUF_TYPE_INT8);
    buf_append(&b, &i8, 1);
    uint16_t u16 = 65000;
    put_str(&b, "k.u16");
    put_u32(&b, GGUF_TYPE_UINT16);
    buf_append(&b, &u16, 2);
    int16_t i16 = -300;
    put_str(&b, "k.i16");
    put_u32(&b, GGUF_TYPE_INT16);
    buf_append(&b, &i16, 2);
    put_str(&b, "k.u64");
    put_u32(&b, GGUF_TYPE_UINT64);
    put_u64(&b, 1ull << 40);
    int64_t i64 = -(1ll << 40);
    put_str(&b, "k.i64");
    put_u32(&b, GGUF_TYPE_INT64);
    buf_append(&b, &i64, 8);
    double f64 = 0.125;
    put_str(&b, "k.f64");
    put_u32(&b, GGUF_TYPE_FLOAT64);
    buf_append(&b, &f64, 8);
    put_str(&b, "k.count64");
    put_u32(&b, GGUF_TYPE_UINT64);
    put_u64(&b, 22);
    /* nested array: [[1,2],[3]] of u16 */
    put_str(&b, "k.nested");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u64(&b, 2);
    put_u32(&b, GGUF_TYPE_UINT16);
    put_u64(&b, 2);
    uint16_t vals[] = {1, 2, 3};
    buf_append(&b, vals, 4);
    put_u32(&b, GGUF_TYPE_UINT16);
    put_u64(&b, 1);
    buf_append(&b, vals + 2, 2);
    /* array of arrays of strings */
    put_str(&b, "k.nested_str");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u64(&b, 1);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, 2);
    put_str(&b, "ab");
    put_str(&b, "c");
    put_str(&b, "k.bools");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_BOOL);
    put_u64(&b, 2);
    buf_append(&b, "\x01\x00", 2);
    put_str(&b, "k.u8s");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_UINT8);
    put_u64(&b, 3);
    buf_append(&b, "\x05\x06\x07", 3);

    char err[256];
    gguf_ctx *g = open_buf(&b, err, sizeof(err));
    if (!g) {
        fail_msg("%s", err);
        return;
    }
    assert_int_equal(g->version, 2);
    uint32_t u;
    uint64_t u64;
    int32_t i;
    float f;
    assert_int_equal(gguf_get_u32(g, "k.u8", &u, err, sizeof(err)), 0);
    assert_int_equal(u, 200);
    assert_int_equal(gguf_get_i32(g, "k.i8", &i, err, sizeof(err)), 0);
    assert_int_equal(i, -3);
    assert_int_equal(gguf_get_u32(g, "k.u16", &u, err, sizeof(err)), 0);
    assert_int_equal(u, 65000);
    assert_int_equal(gguf_get_i32(g, "k.i16", &i, err, sizeof(err)), 0);
    assert_int_equal(i, -300);
    assert_int_equal(gguf_get_u64(g, "k.u64", &u64, err, sizeof(err)), 0);
    assert_int_equal(u64, 1ull << 40);
    assert_int_equal(gguf_get_u32(g, "k.u64", &u, err, sizeof(err)), -EINVAL);
    assert_int_equal(gguf_get_u32(g, "k.count64", &u, err, sizeof(err)), 0);
    assert_int_equal(u, 22);
    assert_int_equal(gguf_get_u64(g, "k.i64", &u64, err, sizeof(err)), -EINVAL);
    assert_int_equal(gguf_get_f32(g, "k.f64", &f, err, sizeof(err)), 0);
    assert_true(f == 0.125f);
    const gguf_kv *kv;
    assert_int_equal(gguf_get_arr(g, "k.nested", GGUF_TYPE_ARRAY, &kv, err, sizeof(err)), 0);
    assert_int_equal(kv->n, 2);
    assert_int_equal(gguf_get_arr(g, "k.nested_str", GGUF_TYPE_ARRAY, &kv, err, sizeof(err)), 0);
    assert_int_equal(gguf_get_arr(g, "k.bools", GGUF_TYPE_BOOL, &kv, err, sizeof(err)), 0);
    assert_int_equal(gguf_get_arr(g, "k.u8s", GGUF_TYPE_UINT8, &kv, err, sizeof(err)), 0);
    assert_int_equal(gguf_arr_int(kv, 2), 7);
    gguf_close(g);
    buf_free(&b);
}

/* Expects open_buffer to fail with a message containing want. */
static void expect_bad(const struct buf *b, const char *want)
{
    char err[512] = "";
    gguf_ctx *g = gguf_open_buffer(b->data, b->len, "t.gguf", err, sizeof(err));
    if (g) {
        gguf_close(g);
        fail_msg("expected failure with \"%s\"", want);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static void test_bad_headers(void **state)
{
    (void)state;
    struct buf b;
    header(&b, 3, 0, 0);
    memcpy(b.data, "GGUX", 4);
    expect_bad(&b, "bad magic");
    buf_free(&b);

    header(&b, 1, 0, 0);
    expect_bad(&b, "GGUF version 1 is not supported");
    buf_free(&b);
    header(&b, 0x03000000, 0, 0);
    expect_bad(&b, "big-endian");
    buf_free(&b);

    header(&b, 3, 1ull << 60, 0);
    expect_bad(&b, "tensor count 1152921504606846976 does not fit");
    buf_free(&b);
    header(&b, 3, 0, 1ull << 62);
    expect_bad(&b, "metadata count");
    buf_free(&b);

    header(&b, 3, 0, 1);
    put_u64(&b, 1000); /* key length past EOF */
    buf_append(&b, "abcdefghijklmn", 14);
    expect_bad(&b, "string length 1000 runs past the end of the file");
    buf_free(&b);

    header(&b, 3, 0, 1);
    put_str(&b, "k");
    put_u32(&b, 13);
    put_u32(&b, 0);
    put_u32(&b, 0);
    put_u32(&b, 0);
    expect_bad(&b, "key 'k': invalid value type 13");
    buf_free(&b);

    header(&b, 3, 0, 1);
    put_str(&b, "k");
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_UINT32);
    put_u64(&b, 1ull << 40);
    put_u64(&b, 0);
    expect_bad(&b, "key 'k': array of 1099511627776 u32 elements does not fit");
    buf_free(&b);

    header(&b, 3, 0, 2);
    put_str(&b, "k");
    put_u32(&b, GGUF_TYPE_UINT8);
    buf_append(&b, "\x01", 1);
    put_str(&b, "k");
    put_u32(&b, GGUF_TYPE_UINT8);
    buf_append(&b, "\x01", 1);
    expect_bad(&b, "duplicate key 'k'");
    buf_free(&b);

    header(&b, 3, 0, 1);
    put_str(&b, "general.alignment");
    put_u32(&b, GGUF_TYPE_UINT32);
    put_u32(&b, 12);
    put_u64(&b, 0);
    expect_bad(&b, "general.alignment: must be a non-zero multiple of 8");
    buf_free(&b);

    header(&b, 3, 0, 1);
    put_str(&b, "k");
    put_u32(&b, GGUF_TYPE_BOOL);
    buf_append(&b, "\x02", 1);
    expect_bad(&b, "invalid bool");
    buf_free(&b);
}

/* A file with one tensor whose info fields are given. */
static void tensor_file(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *dims,
                        uint32_t type, uint64_t offset, size_t data_bytes)
{
    header(b, 3, 1, 0);
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) {
        put_u64(b, dims[i]);
    }
    put_u32(b, type);
    put_u64(b, offset);
    while (b->len % 32) {
        buf_append(b, "", 1);
    }
    for (size_t i = 0; i < data_bytes; i++) {
        buf_append(b, "\x11", 1);
    }
}

static void test_bad_tensors(void **state)
{
    (void)state;
    struct buf b;
    uint64_t d2[] = {4, 2};
    tensor_file(&b, "w", 2, d2, TD_F32, 0, 32);
    char err[256];
    gguf_ctx *g = open_buf(&b, err, sizeof(err));
    if (!g) {
        fail_msg("%s", err);
        return;
    }
    assert_int_equal(gguf_find_tensor(g, "w")->nbytes, 32);
    gguf_close(g);
    buf_free(&b);

    tensor_file(&b, "w", 2, d2, TD_F32, 0, 31);
    expect_bad(&b, "tensor 'w': data [0, +32) lies outside the file");
    char want[160]; /* a cut-off download: the size it has against the size its header needs */
    snprintf(want, sizeof(want), "the file looks truncated (%zu bytes; its header needs %zu,",
             b.len, b.len + 1);
    expect_bad(&b, want);
    buf_free(&b);
    tensor_file(&b, "w", 2, d2, TD_F32, 64, 64);
    expect_bad(&b, "tensor 'w': data [64, +32) lies outside the file");
    buf_free(&b);
    tensor_file(&b, "w", 2, d2, TD_F32, UINT64_MAX - 31, 64);
    expect_bad(&b, "lies outside the file");
    buf_free(&b);
    tensor_file(&b, "w", 2, d2, TD_F32, 8, 64);
    expect_bad(&b, "tensor 'w': data offset 8 is not a multiple of the alignment 32");
    buf_free(&b);
    uint64_t d5[] = {1, 1, 1, 1, 1};
    tensor_file(&b, "w", 5, d5, TD_F32, 0, 64);
    expect_bad(&b, "tensor 'w': n_dims 5");
    buf_free(&b);
    uint64_t dz[] = {4, 0};
    tensor_file(&b, "w", 2, dz, TD_F32, 0, 64);
    expect_bad(&b, "tensor 'w': invalid dimension 1 = 0");
    buf_free(&b);
    uint64_t dhuge[] = {1ull << 40, 1ull << 40};
    tensor_file(&b, "w", 2, dhuge, TD_F32, 0, 64);
    expect_bad(&b, "invalid dimension 1");
    buf_free(&b);
    uint64_t dq[] = {16, 2};
    tensor_file(&b, "w", 2, dq, TD_Q8_0, 0, 64);
    expect_bad(&b, "Q8_0 rows of 16 elements are not whole blocks");
    buf_free(&b);
    tensor_file(&b, "w", 2, d2, 200, 0, 64);
    expect_bad(&b, "invalid type id 200");
    buf_free(&b);
    tensor_file(&b, "", 2, d2, TD_F32, 0, 64);
    expect_bad(&b, "tensor name of 0 bytes");
    buf_free(&b);
    /* a K-quant row must be whole 256-element super-blocks */
    uint64_t dk128[] = {128, 2};
    tensor_file(&b, "w", 2, dk128, TD_Q4_K, 0, 144);
    expect_bad(&b, "tensor 'w': Q4_K rows of 128 elements are not whole blocks of 256");
    buf_free(&b);
    /* a known type the engine cannot compute with (IQ2_XXS): parses with its size (the model
     * loader rejects it, naming the tensor) */
    uint64_t dk[] = {256, 1};
    tensor_file(&b, "w", 2, dk, 16, 0, 66);
    g = open_buf(&b, err, sizeof(err));
    if (!g) {
        fail_msg("%s", err);
        return;
    }
    assert_int_equal(g->tensors[0].type, 16);
    assert_int_equal(g->tensors[0].nbytes, 66);
    gguf_close(g);
    buf_free(&b);
}

/* Every prefix of a small valid file must fail cleanly (the full file must succeed). */
static void test_truncation(void **state)
{
    (void)state;
    gguf_writer *w = gguf_writer_new(0);
    assert_non_null(w);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    const char *toks[] = {"<s>", "a"};
    assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 2), 0);
    float data[8] = {0};
    int64_t ne[] = {4, 2};
    assert_int_equal(gguf_writer_add_tensor(w, "w", TD_F32, 2, ne, data, sizeof(data)), 0);
    const char *path = tmp_path("trunc.gguf");
    char err[256];
    assert_int_equal(gguf_writer_write_file(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);
    size_t len;
    uint8_t *file = slurp(path, &len);
    unlink(path);
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact-size copy so ASan sees overreads */
        assert_non_null(copy);
        memcpy(copy, file, n);
        gguf_ctx *g = gguf_open_buffer(copy, n, "t.gguf", err, sizeof(err));
        if (g) {
            fail_msg("prefix of %zu/%zu bytes parsed", n, len);
        }
        assert_true(strlen(err) > 0);
        free(copy);
    }
    gguf_ctx *g = gguf_open_buffer(file, len, "t.gguf", err, sizeof(err));
    assert_non_null(g);
    gguf_close(g);
    free(file);
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[256];
    assert_null(gguf_open("/nonexistent/x.gguf", err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent/x.gguf: cannot open"));
    assert_null(gguf_open("/tmp", err, sizeof(err)));
    assert_non_null(strstr(err, "not a regular file"));
    assert_null(gguf_open_buffer(NULL, 0, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "<buffer>"));
}

/* A parse error names the input and the offset of the bad field in front of the message; a short
 * buffer gets the same bytes cut short, NUL-terminated; a NULL buffer is left alone. */
static void test_error_prefix(void **state)
{
    (void)state;
    struct buf b;
    header(&b, 1, 0, 0);
    char err[256];
    assert_null(gguf_open_buffer(b.data, b.len, "t.gguf", err, sizeof(err)));
    assert_string_equal(err, "t.gguf: offset 4: GGUF version 1 is not supported (only versions 2 "
                             "and 3)");
    char small[12];
    memset(small, 'x', sizeof(small));
    assert_null(gguf_open_buffer(b.data, b.len, "t.gguf", small, sizeof(small)));
    assert_string_equal(small, "t.gguf: off");
    assert_null(gguf_open_buffer(b.data, b.len, "t.gguf", NULL, 0));
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_all_value_types),
        cmocka_unit_test(test_bad_headers),  cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_truncation),   cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_error_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
