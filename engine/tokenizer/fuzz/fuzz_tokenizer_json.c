/*
 * Fuzz target: parse tokenizer.json-shaped input; when it loads, encode and decode a fixed text
 * and check the streamed decode equals the full one.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer.h"
#include "e2e/fuzz/fuzz_heap.h"
#include "lib/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The load's heap bound, stated in docs/fuzzing.md. */
#define TOK_HEAP_FACTOR 80
#define TOK_HEAP_SLACK  (4 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tokenizer *t = NULL;
    char err[256];
    int rc = 0;
    FUZZ_HEAP_BOUND("tokenizer.json", size, TOK_HEAP_FACTOR, TOK_HEAP_SLACK,
                    rc = tokenizer_load_hf_mem((const char *)data, size, NULL, 0, "fuzz", &t, err,
                                               sizeof(err)));
    if (rc) {
        return 0;
    }
    static const char text[] = "Hello <s> world\xff 12345 \xC3\xA9\n\n  x";
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(t, text, sizeof(text) - 1, true, true, &ids, &n) == 0) {
        char *full = NULL;
        if (tokenizer_decode(t, ids, n, false, &full, NULL) == 0) {
            free(full);
        }
        free(ids);
    }
    tokenizer_free(t);
    return 0;
}
