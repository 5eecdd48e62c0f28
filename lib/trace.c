/*
 * W3C Trace Context and span recording (trace.h). Export: otlp.c.
 */
#include "lib/trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lib/err.h"
#include "lib/log.h"
#include "lib/trace_internal.h"

/* ---- traceparent ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1; /* upper case is not allowed (HEXDIGLC) */
}

/* n bytes from 2n lower-case hex digits at s; -1 on a bad digit. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return -1;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return false;
        }
    }
    return true;
}

int trace_parse_traceparent(const char *s, struct trace_ctx *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!s) {
        return tandem_fail(err, errlen, -EINVAL, "traceparent: missing");
    }
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) {
        n--;
    }
    if (n == 0) {
        return tandem_fail(err, errlen, -EINVAL, "traceparent: empty");
    }
    if (n < 2 || hexval(s[0]) < 0 || hexval(s[1]) < 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: the version is not two lower-case hex digits");
    }
    if (s[0] == 'f' && s[1] == 'f') {
        return tandem_fail(err, errlen, -EINVAL, "traceparent: version ff is invalid");
    }
    bool v00 = s[0] == '0' && s[1] == '0';
    if (v00 && n != TRACEPARENT_LEN) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: version 00 is %d characters, got %zu", TRACEPARENT_LEN, n);
    }
    if (n < TRACEPARENT_LEN) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: too short (%zu characters, at least %d)", n,
                           TRACEPARENT_LEN);
    }
    if (n > TRACEPARENT_LEN && s[TRACEPARENT_LEN] != '-') {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: a later version's extra fields must follow a '-'");
    }
    if (s[2] != '-' || s[35] != '-' || s[52] != '-') {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: fields must be separated by '-' (at 2, 35 and 52)");
    }
    struct trace_ctx c;
    memset(&c, 0, sizeof c);
    if (unhex(s + 3, c.trace_id, 16) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: trace-id is not 32 lower-case hex digits");
    }
    if (all_zero(c.trace_id, 16)) {
        return tandem_fail(err, errlen, -EINVAL, "traceparent: trace-id is all zeros");
    }
    if (unhex(s + 36, c.span_id, 8) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: parent-id is not 16 lower-case hex digits");
    }
    if (all_zero(c.span_id, 8)) {
        return tandem_fail(err, errlen, -EINVAL, "traceparent: parent-id is all zeros");
    }
    uint8_t flags;
    if (unhex(s + 53, &flags, 1) != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "traceparent: trace-flags is not two lower-case hex digits");
    }
    c.flags = flags & TRACE_FLAG_SAMPLED;
    c.valid = true;
    *out = c;
    return 0;
}

void trace_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

void trace_format_traceparent(const struct trace_ctx *c, char out[TRACEPARENT_LEN + 1])
{
    char tid[33], sid[17];
    trace_hex(c->trace_id, 16, tid);
    trace_hex(c->span_id, 8, sid);
    snprintf(out, TRACEPARENT_LEN + 1, "00-%s-%s-%02x", tid, sid,
             (unsigned)(c->flags & TRACE_FLAG_SAMPLED));
}

void trace_random_bytes(uint8_t *p, size_t n)
{
    if (n == 0) {
        return;
    }
    for (;;) {
        size_t got = 0;
        while (got < n) {
            ssize_t r = getrandom(p + got, n - got, GRND_NONBLOCK);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
        }
        if (got < n) {
            /* no entropy yet (early boot): a clock-seeded generator, as tandem_uuid4 does */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            static _Thread_local uint64_t x;
            x ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
            for (size_t i = got; i < n; i++) {
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
                p[i] = (uint8_t)(x >> 56);
            }
        }
        if (!all_zero(p, n)) {
            return;
        }
    }
}

int64_t trace_now_unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- sampling ---- */

int trace_sampler_from_env(struct trace_sampler *out, char *err, size_t errlen)
{
    out->parent_based = true;
    out->ratio = 1.0;
    const char *name = getenv("OTEL_TRACES_SAMPLER");
    const char *arg = getenv("OTEL_TRACES_SAMPLER_ARG");
    bool uses_arg = false;
    if (!name || !*name || strcmp(name, "parentbased_always_on") == 0) {
        /* the default */
    } else if (strcmp(name, "always_on") == 0) {
        out->parent_based = false;
    } else if (strcmp(name, "always_off") == 0) {
        out->parent_based = false;
        out->ratio = 0;
    } else if (strcmp(name, "parentbased_always_off") == 0) {
        out->ratio = 0;
    } else if (strcmp(name, "traceidratio") == 0) {
        out->parent_based = false;
        uses_arg = true;
    } else if (strcmp(name, "parentbased_traceidratio") == 0) {
        uses_arg = true;
    } else {
        return tandem_fail(err, errlen, -EINVAL,
                           "OTEL_TRACES_SAMPLER: \"%s\" is not one of always_on, always_off, "
                           "traceidratio, parentbased_always_on, parentbased_always_off, "
                           "parentbased_traceidratio",
                           name);
    }
    if (uses_arg && arg && *arg) {
        char *end;
        errno = 0;
        double r = strtod(arg, &end);
        if (end == arg || *end || errno || !(r >= 0 && r <= 1)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "OTEL_TRACES_SAMPLER_ARG: \"%s\" is not a ratio between 0 and 1",
                               arg);
        }
        out->ratio = r;
    }
    return 0;
}

bool trace_sampler_keep(const struct trace_sampler *s, const uint8_t trace_id[16])
{
    if (s->ratio >= 1) {
        return true;
    }
    if (s->ratio <= 0) {
        return false;
    }
    uint64_t v = 0;
    for (int i = 8; i < 16; i++) {
        v = v << 8 | trace_id[i];
    }
    /* OTel's TraceIdRatioBased: the low 63 bits below ratio * 2^63 */
    return (double)(v & 0x7fffffffffffffffULL) < s->ratio * 9223372036854775808.0;
}

/* ---- spans ---- */

static char *dup_cut(const char *s, size_t max)
{
    size_t n = strnlen(s ? s : "", max);
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s ? s : "", n);
        p[n] = '\0';
    }
    return p;
}

static void attr_clear(struct span_attr *a)
{
    free(a->key);
    if (a->type == SPAN_ATTR_STR) {
        free(a->v.s);
    }
    memset(a, 0, sizeof *a);
}

static void span_free(struct span *s)
{
    for (int i = 0; i < s->n_attrs; i++) {
        attr_clear(&s->attrs[i]);
    }
    for (int i = 0; i < s->n_events; i++) {
        for (int k = 0; k < s->events[i].n_attrs; k++) {
            attr_clear(&s->events[i].attrs[k]);
        }
        free(s->events[i].name);
    }
    free(s->name);
    free(s->status_msg);
    free(s);
}

static struct span *span_new(struct tracer *t, const char *name, enum span_kind kind,
                             const struct trace_ctx *parent)
{
    struct span *s = calloc(1, sizeof *s);
    if (!s) {
        return NULL;
    }
    s->name = dup_cut(name, SPAN_MAX_NAME);
    if (!s->name) {
        free(s);
        return NULL;
    }
    s->t = t;
    s->kind = kind;
    if (parent) {
        memcpy(s->ctx.trace_id, parent->trace_id, 16);
        memcpy(s->parent_id, parent->span_id, 8);
        s->has_parent = true;
    } else {
        trace_random_bytes(s->ctx.trace_id, 16);
    }
    trace_random_bytes(s->ctx.span_id, 8);
    s->ctx.flags = TRACE_FLAG_SAMPLED;
    s->ctx.valid = true;
    s->start = trace_now_unix_ns();
    return s;
}

struct span *span_start(struct tracer *t, const char *name, enum span_kind kind,
                        const struct trace_ctx *parent)
{
    if (!t) {
        return NULL;
    }
    if (parent && parent->valid) {
        bool keep = t->sampler.parent_based ? (parent->flags & TRACE_FLAG_SAMPLED) != 0
                                            : trace_sampler_keep(&t->sampler, parent->trace_id);
        return keep ? span_new(t, name, kind, parent) : NULL;
    }
    struct span *s = span_new(t, name, kind, NULL);
    if (s && !trace_sampler_keep(&t->sampler, s->ctx.trace_id)) {
        span_free(s);
        return NULL;
    }
    return s;
}

struct span *span_child(struct span *parent, const char *name, enum span_kind kind)
{
    return parent ? span_new(parent->t, name, kind, &parent->ctx) : NULL;
}

void span_context(const struct span *s, struct trace_ctx *out)
{
    if (s) {
        *out = s->ctx;
    } else {
        memset(out, 0, sizeof *out);
    }
}

int span_traceparent(const struct span *s, const struct trace_ctx *fallback,
                     char out[TRACEPARENT_LEN + 1])
{
    const struct trace_ctx *c = s ? &s->ctx : fallback;
    if (!c || !c->valid) {
        out[0] = '\0';
        return -ENOENT;
    }
    trace_format_traceparent(c, out);
    return 0;
}

void span_trace_id_hex(const struct span *s, char out[33])
{
    if (s) {
        trace_hex(s->ctx.trace_id, 16, out);
    } else {
        out[0] = '\0';
    }
}

/* The attribute slot for key in a (n used of max): the existing one (cleared) or a new one;
 * NULL when full. */
static struct span_attr *attr_slot(struct span_attr *a, int *n, int max, const char *key)
{
    for (int i = 0; i < *n; i++) {
        if (strcmp(a[i].key, key) == 0) {
            if (a[i].type == SPAN_ATTR_STR) {
                free(a[i].v.s);
                a[i].v.s = NULL;
            }
            return &a[i];
        }
    }
    if (*n >= max) {
        return NULL;
    }
    char *k = dup_cut(key, SPAN_MAX_NAME);
    if (!k) {
        return NULL;
    }
    struct span_attr *slot = &a[(*n)++];
    memset(slot, 0, sizeof *slot);
    slot->key = k;
    slot->type = SPAN_ATTR_INT;
    return slot;
}

static struct span_attr *span_slot(struct span *s, const char *key)
{
    if (!s || !key) {
        return NULL;
    }
    struct span_attr *a = attr_slot(s->attrs, &s->n_attrs, SPAN_MAX_ATTRS, key);
    if (!a) {
        s->dropped_attrs++;
    }
    return a;
}

static void set_str(struct span_attr *a, const char *value)
{
    a->type = SPAN_ATTR_STR;
    a->v.s = dup_cut(value, SPAN_MAX_VALUE);
    if (!a->v.s) {
        a->type = SPAN_ATTR_BOOL; /* out of memory: the key stays, with false */
        a->v.b = false;
    }
}

static void set_double(struct span_attr *a, double value)
{
    if (isfinite(value)) {
        a->type = SPAN_ATTR_DOUBLE;
        a->v.d = value;
    } else {
        set_str(a, isnan(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity");
    }
}

void span_set_str(struct span *s, const char *key, const char *value)
{
    struct span_attr *a = span_slot(s, key);
    if (a) {
        set_str(a, value);
    }
}

void span_set_int(struct span *s, const char *key, int64_t value)
{
    struct span_attr *a = span_slot(s, key);
    if (a) {
        a->type = SPAN_ATTR_INT;
        a->v.i = value;
    }
}

void span_set_double(struct span *s, const char *key, double value)
{
    struct span_attr *a = span_slot(s, key);
    if (a) {
        set_double(a, value);
    }
}

void span_set_bool(struct span *s, const char *key, bool value)
{
    struct span_attr *a = span_slot(s, key);
    if (a) {
        a->type = SPAN_ATTR_BOOL;
        a->v.b = value;
    }
}

int span_add_event_at(struct span *s, const char *name, int64_t t_unix_ns)
{
    if (!s) {
        return -1;
    }
    if (s->n_events >= SPAN_MAX_EVENTS) {
        s->dropped_events++;
        return -1;
    }
    struct span_event *e = &s->events[s->n_events];
    memset(e, 0, sizeof *e);
    e->name = dup_cut(name, SPAN_MAX_NAME);
    if (!e->name) {
        s->dropped_events++;
        return -1;
    }
    e->t = t_unix_ns;
    return s->n_events++;
}

int span_add_event(struct span *s, const char *name)
{
    return s ? span_add_event_at(s, name, trace_now_unix_ns()) : -1;
}

static struct span_attr *event_slot(struct span *s, int idx, const char *key)
{
    if (!s || idx < 0 || idx >= s->n_events || !key) {
        return NULL;
    }
    struct span_event *e = &s->events[idx];
    return attr_slot(e->attrs, &e->n_attrs, SPAN_MAX_EVENT_ATTRS, key);
}

void span_event_set_int(struct span *s, int idx, const char *key, int64_t value)
{
    struct span_attr *a = event_slot(s, idx, key);
    if (a) {
        a->type = SPAN_ATTR_INT;
        a->v.i = value;
    }
}

void span_event_set_double(struct span *s, int idx, const char *key, double value)
{
    struct span_attr *a = event_slot(s, idx, key);
    if (a) {
        set_double(a, value);
    }
}

void span_set_status(struct span *s, enum span_status st, const char *message)
{
    if (!s || (s->status == SPAN_STATUS_ERROR && st != SPAN_STATUS_ERROR)) {
        return;
    }
    s->status = st;
    free(s->status_msg);
    s->status_msg = st == SPAN_STATUS_ERROR && message ? dup_cut(message, SPAN_MAX_VALUE) : NULL;
}

void span_set_start(struct span *s, int64_t t_unix_ns)
{
    if (s) {
        s->start = t_unix_ns;
    }
}

void span_end_at(struct span *s, int64_t t_unix_ns)
{
    if (!s) {
        return;
    }
    s->end = t_unix_ns < s->start ? s->start : t_unix_ns;
    otlp_exporter_submit(s->t->x, s);
}

void span_end(struct span *s)
{
    if (s) {
        span_end_at(s, trace_now_unix_ns());
    }
}

void span_discard(struct span *s)
{
    if (s) {
        span_free(s);
    }
}

void trace_span_free(struct span *s)
{
    span_free(s);
}

struct span *trace_server_span(struct tracer *t, const char *name, const char *traceparent,
                               struct trace_ctx *incoming)
{
    memset(incoming, 0, sizeof *incoming);
    if (traceparent) {
        char err[160];
        if (trace_parse_traceparent(traceparent, incoming, err, sizeof err) != 0) {
            log_debug("%s; starting a new trace", err);
        }
    }
    return span_start(t, name, SPAN_KIND_SERVER, incoming);
}
