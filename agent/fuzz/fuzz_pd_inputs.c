/*
 * Fuzz target for what the P/D sidecar parses from a request before it contacts anyone: the
 * prefill target (x-prefiller-host-port / x-prefiller-url), x-request-timeout, the SSRF host
 * normalisation, and an InferencePool's spec.selector as the allowlist turns it into a label
 * selector. The first byte picks the parser; the rest is its input. Each must accept or refuse
 * without reading past its input, and what it accepts must be well formed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "agent/allowlist.h"
#include "lib/kube/poolwatch.h"
#include "agent/sidecar.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_pd_inputs: check failed: %s (line %d)\n", #cond, __LINE__);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) {
        return 0;
    }
    char *s = malloc(size);
    if (!s) {
        return 0;
    }
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0'; /* a header value: NUL-terminated, cut at the first NUL */
    char hp[256], host[256], norm[256];
    long ms = 0;
    switch (data[0] % 4) {
    case 0:
        if (sidecar_parse_prefiller(s, hp, sizeof hp, host, sizeof host) == 0) {
            CHECK(hp[0] != '\0' && host[0] != '\0');
            CHECK(strlen(host) < strlen(hp)); /* the host is a part of host:port */
            CHECK(strchr(hp, ':') != NULL);
        }
        break;
    case 1:
        if (sidecar_parse_timeout(s, &ms) == 0) {
            CHECK(ms >= 1 && ms <= 86400000L);
        }
        break;
    case 2: {
        int k = allowlist_normalize_host(s, norm, sizeof norm);
        CHECK(k == -EINVAL || k == ALLOWLIST_HOST_IP || k == ALLOWLIST_HOST_NAME);
        if (k > 0) {
            /* normalising is idempotent */
            char again[256];
            CHECK(allowlist_normalize_host(norm, again, sizeof again) == k);
            CHECK(strcmp(norm, again) == 0);
        }
        break;
    }
    default: {
        char err[256];
        struct json_object *pool = json_parse(s, strlen(s), err, sizeof err);
        static const char *const groups[] = {"tandem.dev", "inference.networking.k8s.io",
                                             "inference.networking.x-k8s.io"};
        for (size_t g = 0; pool && g < 3; g++) {
            char *sel = NULL;
            if (kube_pool_selector(groups[g], pool, &sel, err, sizeof err) == 0) {
                CHECK(sel && sel[0] != '\0');
            } else {
                CHECK(sel == NULL && err[0] != '\0');
            }
            free(sel);
        }
        json_object_put(pool);
        break;
    }
    }
    free(s);
    return 0;
}
