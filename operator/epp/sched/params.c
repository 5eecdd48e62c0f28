/*
 * Reading plugin parameters: llm-d's factories unmarshal JSON without strict field checks, so
 * unknown keys are ignored, while a value of the wrong type or out of range fails the load.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "operator/epp/sched/sched_internal.h"

static int bad(char *err, size_t errlen, const char *key, const char *what)
{
    snprintf(err, errlen, "parameters.%s: %s", key, what);
    return -EINVAL;
}

static int got(int rc, char *err, size_t errlen, const char *msg)
{
    if (rc != 0) {
        snprintf(err, errlen, "parameters.%s", msg);
        return -EINVAL;
    }
    return 0;
}

int param_int(struct json_object *params, const char *key, int64_t def, int64_t min, int64_t max,
              int64_t *out, char *err, size_t errlen)
{
    char msg[200];
    int rc = got(json_opt_int64(params, key, def, out, msg, sizeof(msg)), err, errlen, msg);
    if (rc == 0 && (*out < min || *out > max)) {
        snprintf(msg, sizeof(msg), "%lld is out of range [%lld, %lld]", (long long)*out,
                 (long long)min, (long long)max);
        return bad(err, errlen, key, msg);
    }
    return rc;
}

int param_double(struct json_object *params, const char *key, double def, double min, double max,
                 double *out, char *err, size_t errlen)
{
    char msg[200];
    int rc = got(json_opt_double(params, key, def, out, msg, sizeof(msg)), err, errlen, msg);
    if (rc == 0 && (!isfinite(*out) || *out < min || *out > max)) {
        snprintf(msg, sizeof(msg), "%g is out of range [%g, %g]", *out, min, max);
        return bad(err, errlen, key, msg);
    }
    return rc;
}

int param_bool(struct json_object *params, const char *key, bool def, bool *out, char *err,
               size_t errlen)
{
    char msg[200];
    int v = 0;
    int rc = got(json_opt_bool(params, key, def, &v, msg, sizeof(msg)), err, errlen, msg);
    *out = v != 0;
    return rc;
}

int param_string(struct json_object *params, const char *key, const char *def, const char **out,
                 char *err, size_t errlen)
{
    char msg[200];
    return got(json_opt_string(params, key, def, out, msg, sizeof(msg)), err, errlen, msg);
}

/* Go's time.ParseDuration units, in ms. */
static double unit_ms(const char *u, size_t len)
{
    static const struct {
        const char *name;
        double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"µs", 1e-3}, {"ms", 1},
                 {"s", 1e3},   {"m", 60e3},  {"h", 3600e3}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].name) == len && memcmp(u, units[i].name, len) == 0) {
            return units[i].ms;
        }
    }
    return -1;
}

static int parse_duration(const char *s, int64_t *out_ms)
{
    double total = 0;
    if (strcmp(s, "0") == 0) {
        *out_ms = 0;
        return 0;
    }
    if (!*s) {
        return -EINVAL;
    }
    while (*s) {
        char *end = NULL;
        double v = strtod(s, &end);
        if (end == s || v < 0 || !isfinite(v) || *s == '+' || *s == '-') {
            return -EINVAL;
        }
        const char *u = end;
        while (*end && (*end < '0' || *end > '9') && *end != '.') {
            end++;
        }
        double ms = unit_ms(u, (size_t)(end - u));
        if (ms < 0) {
            return -EINVAL;
        }
        total += v * ms;
        s = end;
    }
    if (total > 1e15) {
        return -EINVAL;
    }
    *out_ms = (int64_t)llround(total);
    return 0;
}

int param_duration(struct json_object *params, const char *key, int64_t def_ms, int64_t *out,
                   char *err, size_t errlen)
{
    struct json_object *v = json_get(params, key);
    *out = def_ms;
    if (!v) {
        return 0;
    }
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        double sec = json_object_get_double(v);
        if (!isfinite(sec) || sec < 0 || sec > 1e12) {
            return bad(err, errlen, key, "must be a non-negative duration");
        }
        *out = (int64_t)llround(sec * 1e3);
        return 0;
    }
    if (!json_object_is_type(v, json_type_string) ||
        parse_duration(json_object_get_string(v), out) != 0) {
        return bad(err, errlen, key, "expected a duration such as \"200ms\" or \"2s\"");
    }
    return 0;
}
