/* Fuzz target: HF tokenizer.json (+ tokenizer_config.json after the first NUL byte) conversion
 * in genvocab_from_hf_json must return 0 or an error, never crash or leak. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/tools/genvocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t tok_len = nul != NULL ? (size_t)(nul - text) : size;
    const char *cfg = nul != NULL ? nul + 1 : NULL;
    size_t cfg_len = nul != NULL ? size - tok_len - 1 : 0;
    genvocab v;
    char err[256];
    if (genvocab_from_hf_json(&v, text, tok_len, cfg, cfg_len, NULL, 0, err, sizeof(err)) == 0) {
        genvocab_free(&v);
    }
    return 0;
}
