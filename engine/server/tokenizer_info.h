/*
 * GET /tokenizer_info: everything a router needs to compute, in its own process, exactly the
 * prompt tokens and prefix-cache block hashes this engine computes for a request (vLLM has a
 * route of this name behind --enable-tokenizer-info-endpoint; its chat_template and token
 * fields have the same names here). The answer is one JSON object:
 *
 *   scheme, scheme_version   the block-hash chain (engine/cache/kvcache.h): "tandem-kvc-sha256", 1;
 *                            a client that knows another version must refuse, not guess
 *   model, max_model_len     the served model name and the context length
 *   block_size, hash_seed    the KV block size and the chain's seed (a decimal string: u64)
 *   prefix_caching           false when the engine hashes nothing
 *   tokenizer_format         "hf": tokenizer is tokenizer.json's text and tokenizer_config the
 *                            text of tokenizer_config.json (or null), for tokenizer_load_hf_mem;
 *                            "gguf": tokenizer is base64 of a GGUF file holding only the
 *                            tokenizer.ggml.* keys of the model, tokenizer_config null
 *   tokenizer_sha256         SHA-256 (hex) of the tokenizer bytes then the config bytes: equal
 *                            values mean the same tokenizer whatever pod answered
 *   chat_template            the template in use (--chat-template, else the model's, else chatml)
 *   bos_token, eos_token     the token texts the template sees (or null)
 *   bos_token_id, eos_token_id, add_bos_token, add_eos_token   the loaded tokenizer's (for logs)
 *
 * The body is built once and kept; the ETag is a hash of it (If-None-Match answers 304).
 */
#ifndef TANDEM_ENGINE_SERVER_TOKENIZER_INFO_H
#define TANDEM_ENGINE_SERVER_TOKENIZER_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/buf.h"

#define TOKENIZER_INFO_SCHEME         "tandem-kvc-sha256"
#define TOKENIZER_INFO_SCHEME_VERSION 1

struct tokenizer_info_params {
    const model *m;
    const tokenizer *tok;
    const char *served_model_name;
    const char *chat_template; /* the text in use */
    int32_t max_model_len;
    int32_t block_size;
    uint64_t hash_seed;
    bool prefix_caching;
};

/* Builds the answer into out and its ETag (a quoted hex string) into etag (etag_len ≥ 67).
 * 0, or a negative errno with a message in err (a tokenizer file that cannot be read). */
int tokenizer_info_build(const struct tokenizer_info_params *p, struct buf *out, char *etag,
                         size_t etag_len, char *err, size_t errlen);

/* The tokenizer.ggml.* keys of a GGUF vocabulary as a GGUF file in memory (*data malloc'd). */
int tokenizer_info_gguf_bytes(const model_gguf_vocab *v, uint8_t **data, size_t *len, char *err,
                              size_t errlen);

#endif
