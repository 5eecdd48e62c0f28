/*
 * Fuzz target for the GGUF reader and the GGUF model loader. The input is parsed from memory
 * (every getter is run on every key, every tensor's bytes are read, so an out-of-bounds view is
 * caught by ASan), then loaded as a model through a memfd path so that the hyperparameter, tensor
 * and vocabulary validation of model_load sees the same bytes. Any result is fine; crashes,
 * sanitizer reports and inconsistent successes are not.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "e2e/fuzz/fuzz_heap.h"
#include "engine/model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The parse's heap bound, stated in docs/fuzzing.md. */
#define GGUF_HEAP_FACTOR 8
#define GGUF_HEAP_SLACK  65536

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_gguf: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t g_sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc ^= b[i];
    }
    g_sink = acc;
}

static void walk(const gguf_ctx *g, const uint8_t *data, size_t size)
{
    char err[256];
    for (size_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        char key[300];
        snprintf(key, sizeof(key), "%.*s", (int)(kv->key.len < 256 ? kv->key.len : 256), kv->key.s);
        uint32_t u32;
        uint64_t u64;
        int32_t i32;
        float f;
        bool b;
        model_str s;
        const gguf_kv *arr;
        (void)gguf_get_u32(g, key, &u32, err, sizeof(err));
        (void)gguf_get_u64(g, key, &u64, err, sizeof(err));
        (void)gguf_get_i32(g, key, &i32, err, sizeof(err));
        (void)gguf_get_f32(g, key, &f, err, sizeof(err));
        (void)gguf_get_bool(g, key, &b, err, sizeof(err));
        if (gguf_get_str(g, key, &s, err, sizeof(err)) == 0) {
            touch(s.s, s.len);
        }
        if (gguf_get_arr(g, key, GGUF_TYPE_COUNT, &arr, err, sizeof(err)) == 0 && arr->strs) {
            for (uint64_t j = 0; j < arr->n; j++) {
                CHECK((const uint8_t *)arr->strs[j].s >= data);
                CHECK((const uint8_t *)arr->strs[j].s + arr->strs[j].len <= data + size);
                touch(arr->strs[j].s, arr->strs[j].len);
            }
        } else if (kv->type == GGUF_TYPE_ARRAY && kv->n > 0) {
            (void)gguf_arr_int(kv, kv->n - 1);
        }
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_info *t = &g->tensors[i];
        CHECK(gguf_find_tensor(g, t->name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= 4);
        CHECK((const uint8_t *)t->data + t->nbytes <= data + size);
        touch(t->data, t->nbytes);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    /* exact-size copy so reads past the end hit the ASan redzone */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) {
        return 0;
    }
    memcpy(copy, data, size);
    gguf_ctx *g = NULL;
    FUZZ_HEAP_BOUND("gguf header", size, GGUF_HEAP_FACTOR, GGUF_HEAP_SLACK,
                    g = gguf_open_buffer(copy, size, "fuzz.gguf", err, sizeof(err)));
    bool parsed = g != NULL;
    if (g) {
        walk(g, copy, size);
        gguf_close(g);
    } else {
        CHECK(err[0] != '\0');
    }
    free(copy);

    int fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    if (size > 0 && write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        model *m = model_load(path, err, sizeof(err));
        if (m) {
            CHECK(parsed); /* a loadable model is a parseable GGUF */
            CHECK(m->tok_embd && m->output && m->output_norm && m->layers);
            for (int l = 0; l < m->cfg.n_layer; l++) {
                touch(m->layers[l].attn_norm->data, m->layers[l].attn_norm->nbytes);
            }
            for (size_t i = 0; i < m->vocab.n_tokens; i++) {
                touch(m->vocab.tokens[i].s, m->vocab.tokens[i].len);
            }
            model_free(m);
        } else {
            CHECK(err[0] != '\0');
        }
    }
    close(fd);
    return 0;
}
