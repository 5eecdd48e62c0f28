/*
 * The engine's prompt tokens and prefix-cache block keys for an OpenAI request, computed in the
 * EPP with the engine's own code (openai_parse_*, engine/server/prompt.h, the tokenizer, the
 * kvc hash chain) from what a model server says about itself: its GET /tokenizer_info answer
 * (engine/server/tokenizer_info.h). Nothing is configured on the EPP side, so nothing can drift:
 * the tokenizer, chat template, block size and hash seed all come from the pod.
 *
 * An epp_keys is immutable once built; any number of threads may call epp_keys_for_request on
 * it at once. Errors fill err (errlen bytes) with a message naming the field at fault.
 */
#ifndef TANDEM_EPP_KEYS_H
#define TANDEM_EPP_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EPP_KEYS_MAX_ANSWER ((size_t)1 << 30) /* largest /tokenizer_info body accepted */

struct epp_keys;

/* Builds from a /tokenizer_info body of len bytes. NULL with err set for anything malformed:
 * not JSON, a missing or mistyped field, an unknown scheme or scheme_version, a tokenizer the
 * engine's loader refuses, a chat template that does not compile. */
struct epp_keys *epp_keys_new(const char *answer, size_t len, char *err, size_t errlen);

/* GETs base_url + "/tokenizer_info" (base_url e.g. "http://10.0.0.7:8000") and builds from the
 * answer. Blocks for at most timeout_ms: call it from a worker thread. NULL with err set. */
struct epp_keys *epp_keys_fetch(const char *base_url, long timeout_ms, char *err, size_t errlen);

void epp_keys_free(struct epp_keys *k);

/* What the answer said. */
int32_t epp_keys_block_size(const struct epp_keys *k);
uint64_t epp_keys_hash_seed(const struct epp_keys *k);
const char *epp_keys_model(const struct epp_keys *k);
int32_t epp_keys_max_model_len(const struct epp_keys *k);
const char *epp_keys_tokenizer_sha256(const struct epp_keys *k); /* same value: same tokenizer */
bool epp_keys_prefix_caching(const struct epp_keys *k);

/*
 * For a request body (len bytes) to path "/v1/completions" or "/v1/chat/completions": the
 * prompt tokens the engine runs (*tokens, *n_tokens) and the chained hashes of its full blocks
 * (*block_keys, *n_keys; n_tokens / block_size of them), with lora_name (NULL or "": none) and
 * the body's cache_salt folded in as the engine folds them. Both arrays malloc'd (free them;
 * non-NULL on success). 0; -EINVAL with err set for an unknown path or a body the engine would
 * answer 400 (the same message); -ENOMEM.
 */
int epp_keys_for_request(const struct epp_keys *k, const char *path, const char *body, size_t len,
                         const char *lora_name, int32_t **tokens, size_t *n_tokens,
                         uint64_t **block_keys, size_t *n_keys, char *err, size_t errlen);

#endif
