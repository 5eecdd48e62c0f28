/* Unit tests for the LoRA adapter registry (engine/core/lora_registry.h), on GGUF adapters the
 * test writes into a temporary directory for a hand-built llama config: vLLM's messages and
 * error codes, load order and ids (never reused), references that outlive an unload or the
 * registry (the ASan twin checks the weights are still there), and get/put racing load/unload. */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine/core/lora_registry.h"
#include "engine/model/gguf_writer.h"

enum { N_LAYER = 2, EMBD = 32, HEADS = 2, KV_HEADS = 1, HEAD_DIM = 16, FF = 32 };

static char g_dir[64]; /* this run's temporary directory */

static model test_model(void)
{
    model m;
    memset(&m, 0, sizeof(m));
    m.cfg.arch = MODEL_ARCH_LLAMA;
    m.cfg.n_layer = N_LAYER;
    m.cfg.n_embd = EMBD;
    m.cfg.n_head = HEADS;
    m.cfg.n_head_kv = KV_HEADS;
    m.cfg.head_dim = HEAD_DIM;
    m.cfg.n_rot = HEAD_DIM;
    m.cfg.n_ff = FF;
    return m;
}

/* Element i of a tensor with this seed. */
static float value_at(int seed, size_t i)
{
    return (float)(seed * 10000 + (int)i);
}

static void add_tensor(gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, int seed)
{
    const size_t n = (size_t)(ne0 * ne1);
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        p[i] = value_at(seed, i);
    }
    const int64_t ne[2] = {ne0, ne1};
    assert_int_equal(gguf_writer_add_tensor(w, name, TD_F32, 2, ne, p, n * sizeof(float)), 0);
    free(p);
}

/* g_dir/file: an F32 adapter of the given rank on attn_q and attn_v of every layer, alpha 2 *
 * rank; tensor seeds start at seed. The path is written into path. */
static void write_adapter(char *path, size_t len, const char *file, int64_t rank, int seed)
{
    snprintf(path, len, "%s/%s", g_dir, file);
    gguf_writer *w = gguf_writer_new(0);
    assert_non_null(w);
    assert_int_equal(gguf_writer_set_str(w, "general.type", "adapter"), 0);
    assert_int_equal(gguf_writer_set_str(w, "adapter.type", "lora"), 0);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_writer_set_f32(w, "adapter.lora.alpha", 2.0f * (float)rank), 0);
    for (int l = 0; l < N_LAYER; l++) {
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_q.weight.lora_a", l);
        add_tensor(w, name, EMBD, rank, seed + 4 * l);
        snprintf(name, sizeof(name), "blk.%d.attn_q.weight.lora_b", l);
        add_tensor(w, name, rank, HEADS * HEAD_DIM, seed + 4 * l + 1);
        snprintf(name, sizeof(name), "blk.%d.attn_v.weight.lora_a", l);
        add_tensor(w, name, EMBD, rank, seed + 4 * l + 2);
        snprintf(name, sizeof(name), "blk.%d.attn_v.weight.lora_b", l);
        add_tensor(w, name, rank, KV_HEADS * HEAD_DIM, seed + 4 * l + 3);
    }
    char err[256];
    assert_int_equal(gguf_writer_write_file(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);
}

/* Reads every weight of a (so ASan sees a freed one): true when they hold the values
 * write_adapter gave them. No cmocka asserts: the racing threads call it. */
static bool adapter_matches(const lora_adapter *a, int64_t rank, int seed)
{
    if (a->rank != rank || a->n_adapted != 2 * N_LAYER) {
        return false;
    }
    bool ok = true;
    for (int l = 0; l < N_LAYER; l++) {
        const lora_weights *q = &a->layers[l][LORA_Q], *v = &a->layers[l][LORA_V];
        const model_tensor *ts[4] = {&q->a, &q->b, &v->a, &v->b};
        for (int k = 0; k < 4; k++) {
            const float *d = ts[k]->data;
            for (size_t i = 0; d && i < ts[k]->nbytes / sizeof(float); i++) {
                ok &= d[i] == value_at(seed + 4 * l + k, i);
            }
            ok &= d != NULL;
        }
        ok &= q->scale == 2.0f && v->scale == 2.0f;
    }
    return ok;
}

static void expect_list(lora_registry *r, size_t n, const char *const *names, const int64_t *ids,
                        const char *const *paths)
{
    lora_info *info;
    size_t count;
    assert_int_equal(lora_registry_list(r, &info, &count), 0);
    assert_int_equal(count, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(info[i].name, names[i]);
        assert_int_equal(info[i].id, ids[i]);
        assert_string_equal(info[i].path, paths[i]);
    }
    lora_info_free(info, count);
}

static void test_registry(void **state)
{
    (void)state;
    const model m = test_model();
    char p2[256], p4[256], p8[256], pbad[256], err[512];
    write_adapter(p2, sizeof(p2), "rank2.gguf", 2, 10);
    write_adapter(p4, sizeof(p4), "rank4.gguf", 4, 50);
    write_adapter(p8, sizeof(p8), "rank8.gguf", 8, 90);
    snprintf(pbad, sizeof(pbad), "%s/bad.gguf", g_dir);
    FILE *f = fopen(pbad, "wb");
    assert_non_null(f);
    fputs("GGUF but not really", f);
    fclose(f);

    lora_registry *r = lora_registry_new(&m, 4);
    assert_non_null(r);
    lora_info *info;
    size_t n;
    assert_int_equal(lora_registry_list(r, &info, &n), 0);
    assert_int_equal(n, 0);
    lora_info_free(info, n);

    assert_int_equal(lora_registry_load(r, "a", p2, err, sizeof(err)), 0);
    assert_int_equal(lora_registry_load(r, "b", p4, err, sizeof(err)), 0);

    assert_int_equal(lora_registry_load(r, "a", p4, err, sizeof(err)), -EEXIST);
    assert_string_equal(err, "The lora adapter 'a' has already been loaded.");
    assert_int_equal(lora_registry_load(r, "big", p8, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "LoRA rank 8 is greater than max_lora_rank 4.");
    assert_int_equal(lora_registry_load(r, "gone", "/nonexistent/adapter.gguf", err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "No adapter found"));
    assert_non_null(strstr(err, "/nonexistent/adapter.gguf"));
    assert_int_equal(lora_registry_load(r, "bad", pbad, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, pbad));
    assert_int_equal(lora_registry_load(r, "", p2, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "Both 'lora_name' and 'lora_path' must be provided.");
    assert_int_equal(lora_registry_load(r, "c", "", err, sizeof(err)), -EINVAL);
    assert_int_equal(lora_registry_load(r, NULL, p2, err, sizeof(err)), -EINVAL);

    /* failed loads take no id and leave no entry */
    static const char *const ab[] = {"a", "b"};
    static const int64_t ids12[] = {1, 2};
    const char *const ab_paths[] = {p2, p4};
    expect_list(r, 2, ab, ids12, ab_paths);

    lora_ref *ref = lora_registry_get(r, "a");
    assert_non_null(ref);
    assert_string_equal(lora_ref_name(ref), "a");
    assert_true(adapter_matches(lora_ref_adapter(ref), 2, 10));
    assert_null(lora_registry_get(r, "zzz"));
    assert_null(lora_registry_get(r, NULL));
    lora_ref *ref_b = lora_registry_get(r, "b");
    assert_non_null(ref_b);
    assert_true(adapter_matches(lora_ref_adapter(ref_b), 4, 50));
    lora_ref_put(ref_b);
    lora_ref_put(NULL);

    /* unload while a request holds "a": the name goes at once, the weights stay */
    assert_int_equal(lora_registry_unload(r, "a"), 0);
    assert_null(lora_registry_get(r, "a"));
    assert_int_equal(lora_registry_unload(r, "a"), -ENOENT);
    assert_int_equal(lora_registry_unload(r, "never"), -ENOENT);
    assert_int_equal(lora_registry_unload(r, NULL), -ENOENT);
    assert_true(adapter_matches(lora_ref_adapter(ref), 2, 10));
    assert_string_equal(lora_ref_name(ref), "a");
    lora_ref_put(ref); /* the last reference: freed here */

    /* the name can be loaded again, under a new id; ids are never reused */
    assert_int_equal(lora_registry_load(r, "a", p4, err, sizeof(err)), 0);
    static const char *const ba[] = {"b", "a"};
    static const int64_t ids23[] = {2, 3};
    const char *const ba_paths[] = {p4, p4};
    expect_list(r, 2, ba, ids23, ba_paths);
    assert_int_equal(lora_registry_unload(r, "b"), 0);
    assert_int_equal(lora_registry_unload(r, "a"), 0);
    assert_int_equal(lora_registry_load(r, "c", p2, err, sizeof(err)), 0);
    static const char *const c[] = {"c"};
    static const int64_t ids4[] = {4};
    const char *const c_paths[] = {p2};
    expect_list(r, 1, c, ids4, c_paths);

    /* a reference outlives the registry */
    ref = lora_registry_get(r, "c");
    assert_non_null(ref);
    lora_registry_free(r);
    assert_true(adapter_matches(lora_ref_adapter(ref), 2, 10));
    lora_ref_put(ref);
    lora_registry_free(NULL);
}

/* max_rank is inclusive */
static void test_max_rank(void **state)
{
    (void)state;
    const model m = test_model();
    char p4[256], err[512];
    write_adapter(p4, sizeof(p4), "rank4_max.gguf", 4, 7);
    lora_registry *r = lora_registry_new(&m, 4);
    assert_non_null(r);
    assert_int_equal(lora_registry_load(r, "x", p4, err, sizeof(err)), 0);
    lora_registry_free(r);
    r = lora_registry_new(&m, 3);
    assert_non_null(r);
    assert_int_equal(lora_registry_load(r, "x", p4, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "LoRA rank 4 is greater than max_lora_rank 3.");
    lora_registry_free(r);
}

enum { GETS_PER_THREAD = 10000, MAX_RELOADS = 100000 };

typedef struct racer {
    lora_registry *r;
    atomic_int *done;    /* threads finished */
    atomic_long *seen_y; /* gets of the name being loaded and unloaded that found it */
    int failures;        /* gets that found the wrong weights */
} racer;

/* GETS_PER_THREAD times: get "x" (always loaded) and "y" (loaded and unloaded meanwhile), read
 * every weight, put. */
static void *get_put(void *arg)
{
    racer *me = arg;
    for (int i = 0; i < GETS_PER_THREAD; i++) {
        lora_ref *x = lora_registry_get(me->r, "x");
        if (!x || !adapter_matches(lora_ref_adapter(x), 2, 3)) {
            me->failures++;
        }
        lora_ref_put(x);
        lora_ref *y = lora_registry_get(me->r, "y");
        if (y) {
            me->failures += !adapter_matches(lora_ref_adapter(y), 4, 5);
            atomic_fetch_add(me->seen_y, 1);
            lora_ref_put(y);
        }
    }
    atomic_fetch_add(me->done, 1);
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    const model m = test_model();
    char p2[256], p4[256], err[512];
    write_adapter(p2, sizeof(p2), "race_x.gguf", 2, 3);
    write_adapter(p4, sizeof(p4), "race_y.gguf", 4, 5);
    lora_registry *r = lora_registry_new(&m, 8);
    assert_non_null(r);
    assert_int_equal(lora_registry_load(r, "x", p2, err, sizeof(err)), 0);

    atomic_int done;
    atomic_long seen_y;
    atomic_init(&done, 0);
    atomic_init(&seen_y, 0);
    racer racers[2] = {{.r = r, .done = &done, .seen_y = &seen_y},
                       {.r = r, .done = &done, .seen_y = &seen_y}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, get_put, &racers[i]), 0);
    }
    /* load "y", let a thread find it (a bounded wait), unload it while they may hold it; for as
     * long as the threads run */
    int loads = 0;
    while (atomic_load(&done) < 2 && loads < MAX_RELOADS) {
        assert_int_equal(lora_registry_load(r, "y", p4, err, sizeof(err)), 0);
        loads++;
        const long seen = atomic_load(&seen_y);
        for (int spin = 0; spin < 100000 && atomic_load(&seen_y) == seen; spin++) {
            sched_yield();
        }
        assert_int_equal(lora_registry_unload(r, "y"), 0);
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(racers[i].failures, 0);
    }
    print_message("%d loads of y, found by %ld gets\n", loads, atomic_load(&seen_y));

    /* one id per successful load: x is 1, the y loads 2 .. loads + 1 */
    assert_int_equal(lora_registry_load(r, "z", p2, err, sizeof(err)), 0);
    lora_info *info;
    size_t n;
    assert_int_equal(lora_registry_list(r, &info, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(info[0].name, "x");
    assert_int_equal(info[0].id, 1);
    assert_string_equal(info[1].name, "z");
    assert_int_equal(info[1].id, loads + 2);
    lora_info_free(info, n);
    lora_registry_free(r);
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
    snprintf(g_dir, sizeof(g_dir), "/tmp/tandem_test_lora_registry_XXXXXX");
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
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_max_rank),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
