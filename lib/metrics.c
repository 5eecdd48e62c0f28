/*
 * Prometheus metrics (see metrics.h). Values are doubles stored as bit patterns in 64-bit atomics
 * and updated with compare-and-swap, so hot paths take no lock. A family keeps its series in an
 * array sorted by label values (binary search on lookup, sorted output for free). Histogram
 * buckets hold per-bucket (not cumulative) counts; _count is their sum, so it always equals the
 * +Inf bucket in the output.
 */
#include "lib/metrics.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"

#define METRICS_PARSE_MAX_LINE   (64 * 1024)
#define METRICS_PARSE_MAX_LABELS 64

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metric {
    struct metric_family *family;
    char **label_values;             /* family->nlabels copies */
    _Atomic uint64_t value;          /* double bits: counter/gauge value, histogram sum */
    _Atomic uint64_t *bucket_counts; /* histogram: nbuckets + 1 counts, the last for +Inf */
};

struct metric_family {
    enum metric_type type;
    char *name;
    char *help; /* NULL: no HELP line */
    size_t nlabels;
    char **label_names;
    double *buckets; /* histogram upper bounds, finite, increasing */
    size_t nbuckets;
    pthread_mutex_t lock;   /* guards series/nseries/cap */
    struct metric **series; /* sorted by label values */
    size_t nseries, cap;
    struct metric_family *next; /* registration order */
};

struct metrics_registry {
    pthread_mutex_t lock; /* guards the family list */
    struct metric_family *head, *tail;
};

static const double default_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

static uint64_t d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static double u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, d2u(u2d(old) + v), memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

struct metrics_registry *metrics_registry_new(void)
{
    struct metrics_registry *r = calloc(1, sizeof(*r));
    if (!r) {
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

static void metric_free(struct metric *m, size_t nlabels)
{
    if (!m) {
        return;
    }
    for (size_t i = 0; m->label_values && i < nlabels; i++) {
        free(m->label_values[i]);
    }
    free(m->label_values);
    free(m->bucket_counts);
    free(m);
}

void metrics_family_retain(struct metric_family *f, const struct metric *keep)
{
    pthread_mutex_lock(&f->lock);
    size_t n = 0;
    for (size_t i = 0; i < f->nseries; i++) {
        if (f->series[i] == keep) {
            f->series[n++] = f->series[i];
        } else {
            metric_free(f->series[i], f->nlabels);
        }
    }
    f->nseries = n;
    pthread_mutex_unlock(&f->lock);
}

static void family_free(struct metric_family *f)
{
    for (size_t i = 0; i < f->nseries; i++) {
        metric_free(f->series[i], f->nlabels);
    }
    free(f->series);
    for (size_t i = 0; f->label_names && i < f->nlabels; i++) {
        free(f->label_names[i]);
    }
    free(f->label_names);
    free(f->buckets);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void metrics_registry_free(struct metrics_registry *r)
{
    if (!r) {
        return;
    }
    struct metric_family *f = r->head;
    while (f) {
        struct metric_family *next = f->next;
        family_free(f);
        f = next;
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int valid_metric_name(const char *s)
{
    if (!s || !*s) {
        return 0;
    }
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok) {
            return 0;
        }
    }
    return 1;
}

static int valid_utf8(const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t n = tandem_utf8_seq_len((const unsigned char *)s + i, len - i);
        if (n == 0) {
            return 0;
        }
        i += n;
    }
    return 1;
}

static int valid_label_name(const char *s)
{
    if (!s || !*s || strncmp(s, "__", 2) == 0) {
        return 0;
    }
    for (const char *p = s; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                 (p != s && c >= '0' && c <= '9');
        if (!ok) {
            return 0;
        }
    }
    return 1;
}

static struct metric_family *family_new(struct metrics_registry *r, enum metric_type type,
                                        const char *name, const char *help, size_t nlabels,
                                        const char *const *label_names, const double *buckets,
                                        size_t nbuckets)
{
    TANDEM_ASSERT(r != NULL);
    if (!valid_metric_name(name) || nlabels > METRICS_MAX_LABELS || (nlabels > 0 && !label_names) ||
        (help && !valid_utf8(help))) {
        return NULL;
    }
    for (size_t i = 0; i < nlabels; i++) {
        if (!valid_label_name(label_names[i]) ||
            (type == METRIC_HISTOGRAM && strcmp(label_names[i], "le") == 0)) {
            return NULL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(label_names[i], label_names[j]) == 0) {
                return NULL;
            }
        }
    }
    if (type == METRIC_HISTOGRAM) {
        if (!buckets || nbuckets == 0) {
            buckets = default_buckets;
            nbuckets = ARRAY_SIZE(default_buckets);
        }
        /* A trailing +Inf is implied; drop it if given. */
        if (nbuckets > 0 && isinf(buckets[nbuckets - 1]) && buckets[nbuckets - 1] > 0) {
            nbuckets--;
        }
        for (size_t i = 0; i < nbuckets; i++) {
            if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
                return NULL;
            }
        }
    }
    struct metric_family *f = calloc(1, sizeof(*f));
    if (!f) {
        return NULL;
    }
    pthread_mutex_init(&f->lock, NULL);
    f->type = type;
    f->nlabels = nlabels;
    f->name = strdup(name);
    f->help = help ? strdup(help) : NULL;
    f->label_names = nlabels ? calloc(nlabels, sizeof(char *)) : NULL;
    if (!f->name || (help && !f->help) || (nlabels && !f->label_names)) {
        goto err_free;
    }
    for (size_t i = 0; i < nlabels; i++) {
        if (!(f->label_names[i] = strdup(label_names[i]))) {
            goto err_free;
        }
    }
    if (type == METRIC_HISTOGRAM && nbuckets > 0) {
        f->buckets = malloc(nbuckets * sizeof(double));
        if (!f->buckets) {
            goto err_free;
        }
        memcpy(f->buckets, buckets, nbuckets * sizeof(double));
        f->nbuckets = nbuckets;
    }

    pthread_mutex_lock(&r->lock);
    for (const struct metric_family *g = r->head; g; g = g->next) {
        if (strcmp(g->name, name) == 0) {
            pthread_mutex_unlock(&r->lock);
            goto err_free;
        }
    }
    if (r->tail) {
        r->tail->next = f;
    } else {
        r->head = f;
    }
    r->tail = f;
    pthread_mutex_unlock(&r->lock);
    return f;

err_free:
    family_free(f);
    return NULL;
}

struct metric_family *metrics_counter_new(struct metrics_registry *r, const char *name,
                                          const char *help, size_t nlabels,
                                          const char *const *label_names)
{
    return family_new(r, METRIC_COUNTER, name, help, nlabels, label_names, NULL, 0);
}

struct metric_family *metrics_gauge_new(struct metrics_registry *r, const char *name,
                                        const char *help, size_t nlabels,
                                        const char *const *label_names)
{
    return family_new(r, METRIC_GAUGE, name, help, nlabels, label_names, NULL, 0);
}

struct metric_family *metrics_histogram_new(struct metrics_registry *r, const char *name,
                                            const char *help, size_t nlabels,
                                            const char *const *label_names, const double *buckets,
                                            size_t nbuckets)
{
    return family_new(r, METRIC_HISTOGRAM, name, help, nlabels, label_names, buckets, nbuckets);
}

static int compare_values(const struct metric_family *f, char *const *a, const char *const *b)
{
    for (size_t i = 0; i < f->nlabels; i++) {
        int c = strcmp(a[i], b[i]);
        if (c != 0) {
            return c;
        }
    }
    return 0;
}

struct metric *metrics_child(struct metric_family *f, const char *const *label_values)
{
    TANDEM_ASSERT(f != NULL);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (!label_values || !label_values[i] || !valid_utf8(label_values[i])) {
            return NULL;
        }
    }
    pthread_mutex_lock(&f->lock);
    size_t lo = 0, hi = f->nseries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = compare_values(f, f->series[mid]->label_values, label_values);
        if (c == 0) {
            struct metric *found = f->series[mid];
            pthread_mutex_unlock(&f->lock);
            return found;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    struct metric *m = calloc(1, sizeof(*m));
    if (!m) {
        goto err_unlock;
    }
    m->family = f;
    atomic_init(&m->value, d2u(0.0));
    if (f->nlabels) {
        m->label_values = calloc(f->nlabels, sizeof(char *));
        if (!m->label_values) {
            goto err_free;
        }
        for (size_t i = 0; i < f->nlabels; i++) {
            if (!(m->label_values[i] = strdup(label_values[i]))) {
                goto err_free;
            }
        }
    }
    if (f->type == METRIC_HISTOGRAM) {
        m->bucket_counts = calloc(f->nbuckets + 1, sizeof(*m->bucket_counts));
        if (!m->bucket_counts) {
            goto err_free;
        }
        for (size_t i = 0; i <= f->nbuckets; i++) {
            atomic_init(&m->bucket_counts[i], 0);
        }
    }
    struct metric **series =
        tandem_grow(f->series, &f->cap, f->nseries + 1, sizeof(struct metric *), 8);
    if (!series) {
        goto err_free;
    }
    f->series = series;
    memmove(&f->series[lo + 1], &f->series[lo], (f->nseries - lo) * sizeof(struct metric *));
    f->series[lo] = m;
    f->nseries++;
    pthread_mutex_unlock(&f->lock);
    return m;

err_free:
    metric_free(m, f->nlabels);
err_unlock:
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

void metric_inc(struct metric *m, double v)
{
    TANDEM_ASSERT(m != NULL && m->family->type != METRIC_HISTOGRAM);
    if (m->family->type == METRIC_COUNTER && !(v >= 0)) {
        return; /* counters only go up; NaN is rejected by the comparison too */
    }
    atomic_add_double(&m->value, v);
}

void metric_set(struct metric *m, double v)
{
    TANDEM_ASSERT(m != NULL && m->family->type != METRIC_HISTOGRAM);
    atomic_store_explicit(&m->value, d2u(v), memory_order_relaxed);
}

void metric_observe(struct metric *m, double v)
{
    TANDEM_ASSERT(m != NULL && m->family->type == METRIC_HISTOGRAM);
    const struct metric_family *f = m->family;
    /* First bucket whose upper bound is >= v (NaN lands in +Inf, like client_golang). */
    size_t lo = 0, hi = f->nbuckets;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= f->buckets[mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    atomic_fetch_add_explicit(&m->bucket_counts[lo], 1, memory_order_relaxed);
    atomic_add_double(&m->value, v);
}

static uint64_t histogram_count(const struct metric *m)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= m->family->nbuckets; i++) {
        n += atomic_load_explicit(&m->bucket_counts[i], memory_order_relaxed);
    }
    return n;
}

double metric_value(const struct metric *m)
{
    TANDEM_ASSERT(m != NULL);
    if (m->family->type == METRIC_HISTOGRAM) {
        return (double)histogram_count(m);
    }
    return u2d(atomic_load_explicit(&m->value, memory_order_relaxed));
}

double metric_sum(const struct metric *m)
{
    TANDEM_ASSERT(m != NULL);
    return u2d(atomic_load_explicit(&m->value, memory_order_relaxed));
}

/* ---- rendering ---- */

size_t metrics_format_double(double v, char *out, size_t outlen)
{
    TANDEM_ASSERT(out != NULL && outlen >= 32);
    if (isnan(v)) {
        return (size_t)snprintf(out, outlen, "NaN");
    }
    if (isinf(v)) {
        return (size_t)snprintf(out, outlen, v > 0 ? "+Inf" : "-Inf");
    }
    if (v == 0) {
        return (size_t)snprintf(out, outlen, signbit(v) ? "-0" : "0");
    }
    /* Shortest digit string that reads back as v: "d.ddde±X" from %e. */
    char e[40];
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v) {
            break;
        }
    }
    char digits[24] = "0";
    size_t nd = 0;
    const char *p = e;
    int neg = *p == '-';
    if (neg) {
        p++;
    }
    for (; *p && *p != 'e'; p++) {
        if (*p >= '0' && *p <= '9' && nd < sizeof(digits) - 1) {
            digits[nd++] = *p;
        }
    }
    if (nd == 0) {
        nd = 1; /* not reached: %e always prints a digit */
    }
    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }
    digits[nd] = '\0';
    int exp = *p == 'e' ? (int)strtol(p + 1, NULL, 10) : 0;
    /* Go: %e when exp < -4 || exp >= eprec, with eprec = 6 for the shortest form. */
    if (exp < -4 || exp >= 6) {
        return (size_t)snprintf(out, outlen, "%s%c%s%.*se%c%02d", neg ? "-" : "", digits[0],
                                nd > 1 ? "." : "", (int)(nd - 1), digits + 1, exp < 0 ? '-' : '+',
                                exp < 0 ? -exp : exp);
    }
    int decimals = (int)nd - (exp + 1);
    return (size_t)snprintf(out, outlen, "%.*f", decimals > 0 ? decimals : 0, v);
}

static int append_escaped(struct buf *out, const char *s, int quote)
{
    int rc = 0;
    const char *start = s;
    for (const char *p = s; rc == 0 && *p; p++) {
        const char *esc = NULL;
        if (*p == '\\') {
            esc = "\\\\";
        } else if (*p == '\n') {
            esc = "\\n";
        } else if (quote && *p == '"') {
            esc = "\\\"";
        }
        if (esc) {
            rc = buf_append(out, start, (size_t)(p - start));
            if (rc == 0) {
                rc = buf_appends(out, esc);
            }
            start = p + 1;
        }
    }
    return rc == 0 ? buf_appends(out, start) : rc;
}

/* name{labels[,le="x"]} value\n */
static int render_sample(struct buf *out, const struct metric_family *f, const struct metric *m,
                         const char *suffix, const char *le, double v)
{
    char num[40];
    int rc = buf_appends(out, f->name);
    if (rc == 0 && suffix) {
        rc = buf_appends(out, suffix);
    }
    if (rc == 0 && (f->nlabels > 0 || le)) {
        rc = buf_append(out, "{", 1);
        for (size_t i = 0; rc == 0 && i < f->nlabels; i++) {
            rc = buf_appendf(out, "%s%s=\"", i ? "," : "", f->label_names[i]);
            if (rc == 0) {
                rc = append_escaped(out, m->label_values[i], 1);
            }
            if (rc == 0) {
                rc = buf_append(out, "\"", 1);
            }
        }
        if (rc == 0 && le) {
            rc = buf_appendf(out, "%sle=\"%s\"", f->nlabels ? "," : "", le);
        }
        if (rc == 0) {
            rc = buf_append(out, "}", 1);
        }
    }
    if (rc == 0) {
        metrics_format_double(v, num, sizeof(num));
        rc = buf_appendf(out, " %s\n", num);
    }
    return rc;
}

static int render_family(struct metric_family *f, struct buf *out)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    int rc = 0;
    if (f->help) {
        rc = buf_appendf(out, "# HELP %s ", f->name);
        if (rc == 0) {
            rc = append_escaped(out, f->help, 0);
        }
        if (rc == 0) {
            rc = buf_append(out, "\n", 1);
        }
    }
    if (rc == 0) {
        rc = buf_appendf(out, "# TYPE %s %s\n", f->name, type_names[f->type]);
    }
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; rc == 0 && i < f->nseries; i++) {
        const struct metric *m = f->series[i];
        if (f->type != METRIC_HISTOGRAM) {
            rc = render_sample(out, f, m, NULL, NULL, metric_value(m));
            continue;
        }
        uint64_t cumulative = 0;
        char le[40];
        for (size_t b = 0; rc == 0 && b <= f->nbuckets; b++) {
            cumulative += atomic_load_explicit(&m->bucket_counts[b], memory_order_relaxed);
            if (b < f->nbuckets) {
                metrics_format_double(f->buckets[b], le, sizeof(le));
            } else {
                snprintf(le, sizeof(le), "+Inf");
            }
            rc = render_sample(out, f, m, "_bucket", le, (double)cumulative);
        }
        if (rc == 0) {
            rc = render_sample(out, f, m, "_sum", NULL, metric_sum(m));
        }
        if (rc == 0) {
            rc = render_sample(out, f, m, "_count", NULL, (double)cumulative);
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int metrics_render(struct metrics_registry *r, struct buf *out)
{
    TANDEM_ASSERT(r != NULL && out != NULL);
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    for (struct metric_family *f = r->head; rc == 0 && f; f = f->next) {
        rc = render_family(f, out);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* ---- text-format parser ---- */

struct text_parser {
    const char *p;   /* cursor in the current line */
    const char *end; /* end of the current line (without \r\n) */
    size_t line;     /* 1-based */
    char *scratch;   /* NUL-terminated copies handed to the callback */
    size_t used;     /* bytes used in scratch */
    char *err;
    size_t errlen;
};

static int text_fail(struct text_parser *t, const char *fmt, ...) TANDEM_PRINTF(2, 3);

static int text_fail(struct text_parser *t, const char *fmt, ...)
{
    if (t->err && t->errlen) {
        int n = snprintf(t->err, t->errlen, "line %zu: ", t->line);
        if (n >= 0 && (size_t)n < t->errlen) {
            va_list ap;
            va_start(ap, fmt);
            tandem_set_errv(t->err + n, t->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static void skip_blank(struct text_parser *t)
{
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\t')) {
        t->p++;
    }
}

static int is_name_char(char c, int first, int colon_ok)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':') ||
           (!first && c >= '0' && c <= '9');
}

/* Reads a name into scratch; returns it, or NULL when there is none at the cursor. */
static const char *read_name(struct text_parser *t, int colon_ok)
{
    const char *start = t->p;
    while (t->p < t->end && is_name_char(*t->p, t->p == start, colon_ok)) {
        t->p++;
    }
    size_t n = (size_t)(t->p - start);
    if (n == 0) {
        return NULL;
    }
    char *dst = t->scratch + t->used;
    memcpy(dst, start, n);
    dst[n] = '\0';
    t->used += n + 1;
    return dst;
}

/* Reads a token up to a blank or the line end. */
static size_t read_token(struct text_parser *t, const char **start)
{
    *start = t->p;
    while (t->p < t->end && *t->p != ' ' && *t->p != '\t') {
        t->p++;
    }
    return (size_t)(t->p - *start);
}

static int parse_value(struct text_parser *t, double *out)
{
    const char *tok;
    size_t n = read_token(t, &tok);
    char tmp[64];
    if (n == 0) {
        return text_fail(t, "missing sample value");
    }
    if (n >= sizeof(tmp)) {
        return text_fail(t, "sample value too long");
    }
    memcpy(tmp, tok, n);
    tmp[n] = '\0';
    char *endp;
    errno = 0;
    double v = strtod(tmp, &endp);
    /* Go's ParseFloat rejects out-of-range values; strtod returns HUGE_VAL with ERANGE. */
    if (endp != tmp + n || strchr(tmp, '(') || (errno == ERANGE && isinf(v))) {
        return text_fail(t, "invalid sample value \"%s\"", tmp);
    }
    *out = v;
    return 0;
}

static int parse_timestamp(struct text_parser *t)
{
    const char *tok;
    size_t n = read_token(t, &tok);
    size_t i = 0;
    if (n > 0 && (tok[0] == '-' || tok[0] == '+')) {
        i = 1;
    }
    if (i == n || n > 20) {
        return text_fail(t, "invalid timestamp \"%.*s\"", (int)(n > 40 ? 40 : n), tok);
    }
    for (; i < n; i++) {
        if (tok[i] < '0' || tok[i] > '9') {
            return text_fail(t, "invalid timestamp \"%.*s\"", (int)(n > 40 ? 40 : n), tok);
        }
    }
    return 0;
}

/* Reads a quoted label value (cursor on the opening quote) into scratch, unescaping. */
static const char *read_label_value(struct text_parser *t, const char *label)
{
    t->p++;
    char *dst = t->scratch + t->used;
    size_t n = 0;
    for (;;) {
        if (t->p >= t->end) {
            text_fail(t, "unterminated value of label \"%s\"", label);
            return NULL;
        }
        char c = *t->p++;
        if (c == '"') {
            break;
        }
        if (c == '\\') {
            if (t->p >= t->end) {
                text_fail(t, "unterminated value of label \"%s\"", label);
                return NULL;
            }
            char e = *t->p++;
            if (e == 'n') {
                c = '\n';
            } else if (e == '\\' || e == '"') {
                c = e;
            } else {
                text_fail(t, "invalid escape \"\\%c\" in value of label \"%s\"", e, label);
                return NULL;
            }
        }
        dst[n++] = c;
    }
    dst[n] = '\0';
    t->used += n + 1;
    return dst;
}

static int parse_comment(struct text_parser *t)
{
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    t->p++; /* '#' */
    skip_blank(t);
    const char *kw;
    size_t n = read_token(t, &kw);
    int is_help = n == 4 && memcmp(kw, "HELP", 4) == 0;
    int is_type = n == 4 && memcmp(kw, "TYPE", 4) == 0;
    if (!is_help && !is_type) {
        return 0; /* plain comment */
    }
    skip_blank(t);
    const char *name = read_name(t, 1);
    if (!name || (t->p < t->end && *t->p != ' ' && *t->p != '\t')) {
        return text_fail(t, "invalid metric name in %s line", is_help ? "HELP" : "TYPE");
    }
    skip_blank(t);
    if (is_help) {
        for (const char *p = t->p; p < t->end; p++) {
            if (*p == '\\') {
                if (p + 1 >= t->end || (p[1] != '\\' && p[1] != 'n')) {
                    return text_fail(t, "invalid escape in HELP text of \"%s\"", name);
                }
                p++;
            }
        }
        return 0;
    }
    const char *type;
    n = read_token(t, &type);
    skip_blank(t);
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        if (strlen(types[i]) == n && memcmp(type, types[i], n) == 0 && t->p == t->end) {
            return 0;
        }
    }
    return text_fail(t, "invalid TYPE \"%.*s\" for \"%s\"", (int)(n > 40 ? 40 : n), type, name);
}

static int parse_sample(struct text_parser *t, metrics_sample_cb cb, void *ud)
{
    const char *names[METRICS_PARSE_MAX_LABELS];
    const char *values[METRICS_PARSE_MAX_LABELS];
    size_t nlabels = 0;
    const char *name = read_name(t, 1);
    if (!name) {
        return text_fail(t, "invalid metric name");
    }
    const char *after_name = t->p;
    skip_blank(t);
    if (t->p < t->end && *t->p == '{') {
        t->p++;
        for (;;) {
            skip_blank(t);
            if (t->p < t->end && *t->p == '}') {
                t->p++;
                break;
            }
            const char *label = read_name(t, 0);
            if (!label) {
                return text_fail(t, "invalid label name in \"%s\"", name);
            }
            skip_blank(t);
            if (t->p >= t->end || *t->p != '=') {
                return text_fail(t, "expected '=' after label \"%s\"", label);
            }
            t->p++;
            skip_blank(t);
            if (t->p >= t->end || *t->p != '"') {
                return text_fail(t, "expected '\"' to start the value of label \"%s\"", label);
            }
            const char *value = read_label_value(t, label);
            if (!value) {
                return -EINVAL;
            }
            for (size_t i = 0; i < nlabels; i++) {
                if (strcmp(names[i], label) == 0) {
                    return text_fail(t, "duplicate label \"%s\"", label);
                }
            }
            if (nlabels == METRICS_PARSE_MAX_LABELS) {
                return text_fail(t, "more than %d labels", METRICS_PARSE_MAX_LABELS);
            }
            names[nlabels] = label;
            values[nlabels] = value;
            nlabels++;
            skip_blank(t);
            if (t->p < t->end && *t->p == ',') {
                t->p++;
                continue;
            }
            if (t->p < t->end && *t->p == '}') {
                t->p++;
                break;
            }
            return text_fail(t, "expected ',' or '}' after label \"%s\"", label);
        }
        after_name = t->p;
        skip_blank(t);
    }
    if (t->p == after_name) {
        return text_fail(t, "expected a blank before the value of \"%s\"", name);
    }
    double v = 0;
    if (parse_value(t, &v) < 0) {
        return -EINVAL;
    }
    skip_blank(t);
    if (t->p < t->end) {
        if (parse_timestamp(t) < 0) {
            return -EINVAL;
        }
        skip_blank(t);
        if (t->p < t->end) {
            return text_fail(t, "unexpected text after the timestamp of \"%s\"", name);
        }
    }
    return cb ? cb(ud, name, nlabels, names, values, v) : 0;
}

int metrics_parse_text(const char *data, size_t len, metrics_sample_cb cb, void *ud, char *err,
                       size_t errlen)
{
    if (err && errlen) {
        err[0] = '\0';
    }
    if (!data) {
        data = "";
        len = 0;
    }
    size_t longest = len < METRICS_PARSE_MAX_LINE ? len : METRICS_PARSE_MAX_LINE;
    /* Names and values are copies of parts of the line plus NULs: at most 2x the line. */
    struct text_parser t = {.err = err, .errlen = errlen};
    t.scratch = malloc(2 * longest + 16);
    if (!t.scratch) {
        return -ENOMEM;
    }
    int rc = 0;
    const char *pos = data, *stop = data + len;
    while (rc == 0 && pos < stop) {
        t.line++;
        const char *nl = memchr(pos, '\n', (size_t)(stop - pos));
        const char *line_end = nl ? nl : stop;
        const char *next = nl ? nl + 1 : stop;
        if (line_end > pos && line_end[-1] == '\r') {
            line_end--;
        }
        size_t n = (size_t)(line_end - pos);
        t.p = pos;
        t.end = line_end;
        t.used = 0;
        pos = next;
        if (n > METRICS_PARSE_MAX_LINE) {
            rc = text_fail(&t, "line longer than %d bytes", METRICS_PARSE_MAX_LINE);
            break;
        }
        for (size_t i = 0; i < n;) {
            const unsigned char *u = (const unsigned char *)t.p + i;
            if (*u == 0) {
                rc = text_fail(&t, "NUL byte at column %zu", i + 1);
                break;
            }
            size_t seq = tandem_utf8_seq_len(u, n - i);
            if (seq == 0) {
                rc = text_fail(&t, "invalid UTF-8 at column %zu", i + 1);
                break;
            }
            i += seq;
        }
        if (rc != 0) {
            break;
        }
        skip_blank(&t);
        if (t.p == t.end) {
            continue;
        }
        rc = *t.p == '#' ? parse_comment(&t) : parse_sample(&t, cb, ud);
    }
    free(t.scratch);
    return rc;
}
