/*
 * The span exporter: OTLP/HTTP with JSON bodies (the OTLP JSON mapping of
 * ExportTraceServiceRequest: resourceSpans[].resource.attributes with service.name and
 * service.version, scopeSpans[].scope, spans with hex ids, decimal-string Unix-nano times, the
 * SpanKind number, typed attribute values with int64 as decimal strings), POSTed to the traces URL
 * (a collector's :4318/v1/traces) from the exporter's own thread with libcurl.
 *
 * The request path never waits for it: span_end (trace.h) puts the span in a bounded queue under a
 * mutex; a full queue drops the span and counts it. The thread sends a batch when max_batch spans
 * wait or every flush_ms, each POST bounded by timeout_ms; a failed POST drops its batch (counted)
 * and is logged at most once per 10 s. otlp_exporter_free sends what is queued (stopping at the
 * first failure) and joins the thread.
 *
 * Configuration (otlp_setup) follows vLLM and the OpenTelemetry SDKs: the --otlp-traces-endpoint
 * flag, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else OTEL_EXPORTER_OTLP_ENDPOINT
 * (+ "/v1/traces"); none of them: tracing is off and nothing is recorded. A flag URL without a
 * path gets "/v1/traces". OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS
 * ("k=v,k2=v2", values percent-decoded) are sent with every POST; OTEL_TRACES_SAMPLER(_ARG) pick
 * the sampler (trace.h); OTEL_SERVICE_NAME renames a process's main service (otlp_service_name);
 * OTEL_SDK_DISABLED=true turns tracing off.
 */
#ifndef TANDEM_LIB_OTLP_H
#define TANDEM_LIB_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/trace.h"

#define OTLP_DEFAULT_MAX_QUEUE  2048
#define OTLP_DEFAULT_MAX_BATCH  512
#define OTLP_DEFAULT_FLUSH_MS   1000
#define OTLP_DEFAULT_TIMEOUT_MS 10000
#define OTLP_MAX_TRACERS        4

struct metrics_registry;
struct otlp_exporter;

struct otlp_config {
    const char *url;     /* the traces URL, http:// or https:// */
    const char *headers; /* "k=v,k2=v2" sent with every POST; NULL: none */
    struct trace_sampler sampler;
    size_t max_queue; /* spans waiting for export; 0 → OTLP_DEFAULT_MAX_QUEUE */
    size_t max_batch; /* spans per POST; 0 → OTLP_DEFAULT_MAX_BATCH */
    int flush_ms;     /* 0 → OTLP_DEFAULT_FLUSH_MS */
    long timeout_ms;  /* per POST; 0 → OTLP_DEFAULT_TIMEOUT_MS */
    /* optional: tandem_trace_spans_exported_total, tandem_trace_spans_dropped_total,
     * tandem_trace_export_failures_total are registered there */
    struct metrics_registry *metrics;
};

/* An exporter (its thread not started yet). NULL with err set on a bad URL or headers. */
struct otlp_exporter *otlp_exporter_new(const struct otlp_config *c, char *err, size_t errlen);

/* Starts the exporting thread. 0, or a negative errno with err set. */
int otlp_exporter_start(struct otlp_exporter *x, char *err, size_t errlen);

/* The tracer of service (its resource's service.name, with service.version version), owned by
 * x; the same one for the same name. NULL when x is NULL or OTLP_MAX_TRACERS are taken. Callable
 * from any thread. */
struct tracer *otlp_tracer(struct otlp_exporter *x, const char *service, const char *version);

/* Sends what is queued (not started: drops it), stops the thread and frees x and its tracers.
 * No span of its tracers may be ended afterwards. NULL is allowed. */
void otlp_exporter_free(struct otlp_exporter *x);

struct otlp_stats {
    uint64_t queued;   /* spans accepted into the queue */
    uint64_t dropped;  /* spans dropped: the queue was full */
    uint64_t exported; /* spans in batches the collector accepted (2xx) */
    uint64_t failed;   /* spans in batches that failed */
    uint64_t batches_failed;
    size_t queue_len; /* waiting now */
};
void otlp_exporter_stats(struct otlp_exporter *x, struct otlp_stats *out);

/* Takes up to max queued spans, appends their ExportTraceServiceRequest JSON to out and frees
 * them; the number taken (what the thread does for each batch; tests call it on an exporter that
 * was not started). A negative errno when the body cannot be built (the spans are freed). */
int otlp_exporter_take_json(struct otlp_exporter *x, size_t max, struct buf *out);

/* The traces URL from the flag (may be NULL) and the environment (above) into url. 1: tracing is
 * on; 0: off (no endpoint, or OTEL_SDK_DISABLED=true); -EINVAL with err naming the flag or
 * variable (not http:// or https://, too long). */
int otlp_endpoint_resolve(const char *flag, char *url, size_t urllen, char *err, size_t errlen);

/* OTEL_SERVICE_NAME when set and not empty, else dflt. */
const char *otlp_service_name(const char *dflt);

/* What a binary does at start: resolve the endpoint (flag and environment), read the sampler and
 * headers, create and start the exporter. *out is NULL when tracing is off. 0, or -EINVAL / a
 * negative errno with err set (the binary exits 2 naming it). */
int otlp_setup(const char *flag, struct metrics_registry *metrics, struct otlp_exporter **out,
               char *err, size_t errlen);

#endif /* TANDEM_LIB_OTLP_H */
