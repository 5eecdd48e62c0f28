/*
 * Kubernetes name, label and quantity syntax (see validate.h), after
 * k8s.io/apimachinery/pkg/util/validation/validation.go and pkg/api/resource/quantity.go.
 */
#include "lib/kube/validate.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "lib/common.h"

static int is_alnum_lower(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static int is_alnum(char ch)
{
    return isalnum((unsigned char)ch) != 0;
}

int kube_valid_dns_label(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63 || !is_alnum_lower(name[0]) || !is_alnum_lower(name[n - 1])) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_alnum_lower(name[i]) && name[i] != '-') {
            return 0;
        }
    }
    return 1;
}

int kube_valid_dns_subdomain(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 253) {
        return 0;
    }
    char part[254];
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (name[i] == '.' || name[i] == '\0') {
            size_t len = i - start;
            if (len == 0 || len > 63) {
                return 0;
            }
            memcpy(part, name + start, len);
            part[len] = '\0';
            if (!kube_valid_dns_label(part)) {
                return 0;
            }
            start = i + 1;
        }
    }
    return 1;
}

/* A label name or label value body: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63. */
static int valid_qualified_part(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !is_alnum(s[0]) || !is_alnum(s[n - 1])) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') {
            return 0;
        }
    }
    return 1;
}

int kube_valid_label_key(const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash) {
        return valid_qualified_part(key, strlen(key));
    }
    size_t plen = (size_t)(slash - key);
    if (plen == 0 || plen > 253) {
        return 0;
    }
    char prefix[254];
    memcpy(prefix, key, plen);
    prefix[plen] = '\0';
    return kube_valid_dns_subdomain(prefix) && valid_qualified_part(slash + 1, strlen(slash + 1));
}

int kube_valid_label_value(const char *value)
{
    size_t n = strlen(value);
    return n == 0 || valid_qualified_part(value, n);
}

int kube_valid_dns1035_label(const char *name)
{
    return kube_valid_dns_label(name) && name[0] >= 'a' && name[0] <= 'z';
}

int kube_parse_quantity(const char *s, long double *value)
{
    const char *p = s;
    long double sign = 1;
    if (*p == '+' || *p == '-') {
        sign = *p == '-' ? -1 : 1;
        p++;
    }
    long double mant = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        mant = mant * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        long double scale = 0.1L;
        while (*p >= '0' && *p <= '9') {
            mant += (*p - '0') * scale;
            scale /= 10;
            p++;
            digits++;
        }
    }
    if (digits == 0 || digits > 40) {
        return -EINVAL;
    }
    long double mult = 1;
    static const struct {
        const char *suffix;
        long double mult;
    } suffixes[] = {
        {"Ki", 1024.0L},
        {"Mi", 1048576.0L},
        {"Gi", 1073741824.0L},
        {"Ti", 1099511627776.0L},
        {"Pi", 1125899906842624.0L},
        {"Ei", 1152921504606846976.0L},
        {"n", 1e-9L},
        {"u", 1e-6L},
        {"m", 1e-3L},
        {"k", 1e3L},
        {"M", 1e6L},
        {"G", 1e9L},
        {"T", 1e12L},
        {"P", 1e15L},
        {"E", 1e18L},
    };
    if (*p == 'e' || *p == 'E') {
        /* "1E" alone is the exa suffix; "1e3" an exponent. */
        const char *q = p + 1;
        int esign = 1;
        if (*q == '+' || *q == '-') {
            esign = *q == '-' ? -1 : 1;
            q++;
        }
        if (*q >= '0' && *q <= '9') {
            int e = 0;
            while (*q >= '0' && *q <= '9') {
                if (e > 1000) {
                    return -EINVAL;
                }
                e = e * 10 + (*q - '0');
                q++;
            }
            if (*q != '\0') {
                return -EINVAL;
            }
            *value = sign * mant * powl(10.0L, esign * e);
            return 0;
        }
    }
    if (*p != '\0') {
        size_t i;
        for (i = 0; i < ARRAY_SIZE(suffixes); i++) {
            if (strcmp(p, suffixes[i].suffix) == 0) {
                mult = suffixes[i].mult;
                break;
            }
        }
        if (i == ARRAY_SIZE(suffixes)) {
            return -EINVAL;
        }
    }
    *value = sign * mant * mult;
    return 0;
}
