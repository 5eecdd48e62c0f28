#include "lib/base64.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tandem_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t *o = malloc(n / 4 * 3 + 3);
    if (!o) {
        return -ENOMEM;
    }
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0, i = 0;
    for (; i < n && s[i] != '='; i++) {
        const char *p = s[i] != '\0' ? strchr(alpha, s[i]) : NULL;
        if (!p) {
            free(o);
            return -EINVAL;
        }
        acc = (acc << 6) | (uint32_t)(p - alpha);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (uint8_t)(acc >> bits);
        }
    }
    for (; i < n; i++) {
        if (s[i] != '=') {
            free(o);
            return -EINVAL;
        }
    }
    *out = o;
    *len = k;
    return 0;
}
