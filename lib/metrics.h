/*
 * Prometheus metrics: a registry of counters, gauges and histograms rendered in the text
 * exposition format 0.0.4 (GET /metrics), and a parser of that format for scraping pods (the EPP
 * reads vLLM-style metrics of the engines with it).
 *
 * Ownership and threads: the registry owns its families and their series; pointers returned by
 * metrics_*_new and metrics_child stay valid until metrics_registry_free. Every function is
 * thread-safe: updates are lock-free atomics, series creation and rendering take a per-family
 * mutex. Cache the struct metric * of a series on hot paths.
 */
#ifndef TANDEM_LIB_METRICS_H
#define TANDEM_LIB_METRICS_H

#include <stddef.h>

#include "lib/buf.h"
#include "lib/common.h"

#define METRICS_MAX_LABELS 16 /* label names per family */

struct metrics_registry;
struct metric_family;
struct metric;

struct metrics_registry *metrics_registry_new(void);
void metrics_registry_free(struct metrics_registry *r); /* NULL allowed */

/*
 * Registers a family. name must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* not starting with "__", distinct, at most METRICS_MAX_LABELS; help may be
 * NULL (no HELP line) and must be valid UTF-8. Strings are copied. Returns NULL on an invalid or
 * duplicate name, invalid help text, or OOM.
 */
struct metric_family *metrics_counter_new(struct metrics_registry *r, const char *name,
                                          const char *help, size_t nlabels,
                                          const char *const *label_names);
struct metric_family *metrics_gauge_new(struct metrics_registry *r, const char *name,
                                        const char *help, size_t nlabels,
                                        const char *const *label_names);
/* buckets: upper bounds, strictly increasing, finite (+Inf is always added); NULL/0 → the
 * Prometheus defaults .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10. The label "le" is reserved. */
struct metric_family *metrics_histogram_new(struct metrics_registry *r, const char *name,
                                            const char *help, size_t nlabels,
                                            const char *const *label_names, const double *buckets,
                                            size_t nbuckets);

/* Gets or creates the series with these label values (nlabels of them, any valid UTF-8, copied;
 * NULL when the family has no labels). NULL on OOM, a NULL value or invalid UTF-8 (the exposition
 * format requires UTF-8). */
struct metric *metrics_child(struct metric_family *f, const char *const *label_values);

/* Frees every series of f but keep (which may be NULL: all of them), for an info gauge whose
 * label values change (vllm:lora_requests_info): pointers to the freed series must not be used
 * again. */
void metrics_family_retain(struct metric_family *f, const struct metric *keep);

/* Counters: adds v (negative or NaN increments are ignored). Gauges: adds v (may be negative). */
void metric_inc(struct metric *m, double v);
/* Counters and gauges: sets the value (for counters, to mirror a counter kept elsewhere). */
void metric_set(struct metric *m, double v);
/* Histograms only (asserts otherwise): records one observation. */
void metric_observe(struct metric *m, double v);
/* Counter/gauge value; for a histogram the number of observations. */
double metric_value(const struct metric *m);
/* For a histogram, the sum of observations; otherwise the value. */
double metric_sum(const struct metric *m);

/*
 * Appends the exposition of every family (registration order; series sorted by label values) to
 * out: "# HELP" (\\ and \n escaped) and "# TYPE" lines, then samples with label values escaped
 * (\\ \" \n); histograms as cumulative name_bucket{...,le="..."} lines ending with le="+Inf",
 * name_sum and name_count. Values are formatted like Go's strconv.FormatFloat(v, 'g', -1, 64), with
 * +Inf, -Inf and NaN. Families without series print only HELP/TYPE. 0, or -ENOSPC/-ENOMEM.
 */
int metrics_render(struct metrics_registry *r, struct buf *out);

/* Formats v like Go's strconv.FormatFloat(v, 'g', -1, 64) ("+Inf", "-Inf", "NaN" for the
 * non-finite). out must hold at least 32 bytes. Returns the length. */
size_t metrics_format_double(double v, char *out, size_t outlen);

typedef int (*metrics_sample_cb)(void *ud, const char *name, size_t nlabels,
                                 const char *const *label_names, const char *const *label_values,
                                 double value);

/*
 * Parses a text-format exposition (len bytes, need not be NUL-terminated) and calls cb once per
 * sample, in order. Accepts comments, "# HELP"/"# TYPE" lines (the type must be one of counter,
 * gauge, histogram, summary, untyped), blank lines, CRLF line ends, label values with \\ \" \n
 * escapes, a trailing comma in label sets, values in Go ParseFloat syntax (NaN, +Inf, -Inf, 1e3,
 * ...) and an optional integer timestamp (ignored). Strings passed to cb are valid only during the
 * call. Errors ("line N: ...", -EINVAL): malformed lines, NUL bytes, invalid UTF-8, duplicate label
 * names, more than 64 labels, lines over 64 KiB. When cb returns non-zero, parsing stops and that
 * value is returned.
 */
int metrics_parse_text(const char *data, size_t len, metrics_sample_cb cb, void *ud, char *err,
                       size_t errlen);

#endif /* TANDEM_LIB_METRICS_H */
