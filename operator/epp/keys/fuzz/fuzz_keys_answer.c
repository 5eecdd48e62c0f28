/*
 * Fuzzes epp_keys_new with /tokenizer_info answers (seeds: real answers of a GGUF and an HF
 * model, written by tandem-engine, and malformed ones); an answer that builds is then used for
 * a completion and a chat request. Must never crash or leak; errors are fine.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "operator/epp/keys/keys.h"

static void use(const struct epp_keys *k, const char *path, const char *body)
{
    int32_t *toks = NULL;
    uint64_t *keys = NULL;
    size_t nt = 0, nk = 0;
    char err[256];
    if (epp_keys_for_request(k, path, body, strlen(body), "lora", &toks, &nt, &keys, &nk, err,
                             sizeof err) == 0) {
        free(toks);
        free(keys);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct epp_keys *k = epp_keys_new((const char *)data, size, err, sizeof err);
    if (k) {
        use(k, "/v1/completions", "{\"prompt\":\"hello world, this is a prompt\"}");
        use(k, "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}],\"cache_salt\":\"s\"}");
        epp_keys_free(k);
    }
    return 0;
}
