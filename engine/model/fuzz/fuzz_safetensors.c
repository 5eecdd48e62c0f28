/*
 * Fuzz target for the safetensors reader: parse from an exact-size copy of the input, then read
 * every tensor's bytes and check the views lie inside the buffer and agree with shape x dtype.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e/fuzz/fuzz_heap.h"
#include "engine/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The parse's heap bound, stated in docs/fuzzing.md. */
#define ST_HEAP_FACTOR 72
#define ST_HEAP_SLACK  (2 << 20)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_safetensors: check failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) {
        return 0;
    }
    memcpy(copy, data, size);
    char err[512];
    safetensors_file *f = NULL;
    FUZZ_HEAP_BOUND("safetensors header", size, ST_HEAP_FACTOR, ST_HEAP_SLACK,
                    f = safetensors_open_buffer(copy, size, "fuzz.safetensors", err, sizeof(err)));
    if (f) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            const safetensors_tensor *t = &f->tensors[i];
            CHECK(safetensors_find(f, t->name) == t);
            CHECK((const uint8_t *)t->data >= copy + f->data_offset);
            CHECK((const uint8_t *)t->data + t->nbytes <= copy + size);
            CHECK(t->nbytes == (size_t)t->n_elems * td_block_bytes(t->type));
            uint8_t acc = 0;
            for (size_t j = 0; j < t->nbytes; j++) {
                acc ^= ((const uint8_t *)t->data)[j];
            }
            g_sink = acc;
        }
        safetensors_close(f);
    } else {
        CHECK(err[0] != '\0');
    }
    free(copy);
    return 0;
}
