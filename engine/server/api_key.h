/*
 * API keys for the OpenAI server, as vLLM checks them (AuthenticationMiddleware in
 * vllm/entrypoints/openai/server_utils.py): with one or more keys configured (--api-key, else
 * $VLLM_API_KEY), every request whose path starts with "/v1" must carry
 * "Authorization: Bearer <key>" naming one of them (the scheme case-insensitive, the key after
 * the first space compared exactly); otherwise 401 with the body {"error":"Unauthorized"}.
 * OPTIONS requests and every other path (/health, /metrics, /ping, /version, /tokenize, ...) stay
 * open. Keys are kept as SHA-256 digests and compared in constant time.
 */
#ifndef TANDEM_ENGINE_SERVER_API_KEY_H
#define TANDEM_ENGINE_SERVER_API_KEY_H

#include <stdbool.h>
#include <stddef.h>

struct api_keys;

/* The n keys (copied as digests; empty strings are skipped). NULL with err set when a key is
 * invalid or memory runs out; a set with no key at all lets everything through. */
struct api_keys *api_keys_new(const char *const *keys, size_t n, char *err, size_t errlen);
void api_keys_free(struct api_keys *k);

/* Number of keys (0: authentication is off). */
size_t api_keys_count(const struct api_keys *k);

/* True when a request with this method, path and Authorization header value (NULL when absent)
 * may pass. */
bool api_keys_allow(const struct api_keys *k, const char *method, const char *path,
                    const char *authorization);

/* The 401 body. */
#define API_KEYS_UNAUTHORIZED_BODY "{\"error\":\"Unauthorized\"}"

#endif
