/* API key checks (api_key.h). */
#include "engine/server/api_key.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "lib/err.h"

#define DIGEST_LEN 32 /* SHA-256 */

struct api_keys {
    size_t n;
    uint8_t (*digest)[DIGEST_LEN];
};

static int sha256(const char *s, size_t len, uint8_t out[DIGEST_LEN])
{
    unsigned int olen = 0;
    return EVP_Digest(s, len, out, &olen, EVP_sha256(), NULL) == 1 && olen == DIGEST_LEN ? 0 : -1;
}

struct api_keys *api_keys_new(const char *const *keys, size_t n, char *err, size_t errlen)
{
    struct api_keys *k = calloc(1, sizeof *k);
    if (!k || (n && !(k->digest = calloc(n, sizeof *k->digest)))) {
        tandem_set_err(err, errlen, "out of memory");
        api_keys_free(k);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!keys[i] || !keys[i][0]) {
            continue;
        }
        if (strpbrk(keys[i], "\r\n")) { /* could never arrive in a header */
            tandem_set_err(err, errlen, "API key %zu holds a line break", i + 1);
            api_keys_free(k);
            return NULL;
        }
        if (sha256(keys[i], strlen(keys[i]), k->digest[k->n]) != 0) {
            tandem_set_err(err, errlen, "SHA-256 is not available");
            api_keys_free(k);
            return NULL;
        }
        k->n++;
    }
    return k;
}

void api_keys_free(struct api_keys *k)
{
    if (k) {
        free(k->digest);
        free(k);
    }
}

size_t api_keys_count(const struct api_keys *k)
{
    return k ? k->n : 0;
}

bool api_keys_allow(const struct api_keys *k, const char *method, const char *path,
                    const char *authorization)
{
    if (!k || k->n == 0 || (method && strcmp(method, "OPTIONS") == 0) ||
        strncmp(path, "/v1", 3) != 0) {
        return true; /* vLLM: url_path.startswith("/v1") */
    }
    if (!authorization) {
        return false;
    }
    const char *sp = strchr(authorization, ' ');
    if (!sp || sp - authorization != 6 || strncasecmp(authorization, "bearer", 6) != 0) {
        return false;
    }
    uint8_t d[DIGEST_LEN];
    if (sha256(sp + 1, strlen(sp + 1), d) != 0) {
        return false;
    }
    int match = 0;
    for (size_t i = 0; i < k->n; i++) { /* every key, whatever matched before */
        match |= CRYPTO_memcmp(d, k->digest[i], DIGEST_LEN) == 0;
    }
    return match != 0;
}
