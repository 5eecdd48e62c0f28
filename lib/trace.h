/*
 * Request tracing: W3C Trace Context (traceparent) and spans exported over OTLP/HTTP JSON
 * (lib/otlp.h). docs/tracing.md describes the span tree Tandem produces.
 *
 * traceparent: "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>" (lower-case hex only).
 * trace_parse_traceparent follows the W3C rules: version ff and all-zero ids are invalid, version
 * 00 is exactly 55 characters, a future version may carry more after a '-' (its first four fields
 * are read as version 00's). tracestate is not parsed: components pass it on unchanged.
 *
 * Spans: a span belongs to a tracer (one per service, owned by the exporter that sends its spans).
 * span_start continues a parent context (its trace-id; sampled as the parent says) or starts a new
 * trace (sampled by the tracer's sampler); it returns NULL when the span is not recorded (no
 * tracer: tracing is off; or not sampled). Every span_* function accepts NULL and then does
 * nothing, so call sites need no checks. A span is built by one thread; span_end hands it to the
 * exporter's queue (never blocking: a full queue drops it and counts it) and it must not be
 * touched afterwards.
 *
 * Attributes: string, int64, double, bool; at most SPAN_MAX_ATTRS (later ones are counted as
 * dropped), string values cut at SPAN_MAX_VALUE bytes; setting a key again replaces its value.
 * Events: at most SPAN_MAX_EVENTS, each a name, a time and up to SPAN_MAX_EVENT_ATTRS attributes.
 * Times are Unix nanoseconds (CLOCK_REALTIME).
 */
#ifndef TANDEM_LIB_TRACE_H
#define TANDEM_LIB_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACEPARENT_LEN      55 /* version 00, without the NUL */
#define SPAN_MAX_ATTRS       32
#define SPAN_MAX_EVENTS      8
#define SPAN_MAX_EVENT_ATTRS 4
#define SPAN_MAX_VALUE       1024 /* bytes of a string attribute value */
#define SPAN_MAX_NAME        128  /* bytes of a span, event or attribute name */
#define TRACE_FLAG_SAMPLED   0x01

/* OTLP's SpanKind values. */
enum span_kind { SPAN_KIND_INTERNAL = 1, SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3 };
/* OTLP's Status.code values. */
enum span_status { SPAN_STATUS_UNSET = 0, SPAN_STATUS_OK = 1, SPAN_STATUS_ERROR = 2 };

/* A span context: what a traceparent carries. */
struct trace_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags; /* TRACE_FLAG_SAMPLED */
    bool valid;
};

/* Parses a traceparent header value (surrounding spaces and tabs ignored). 0 with *out filled
 * (valid set), or -EINVAL with err naming what is wrong (*out then has valid false). */
int trace_parse_traceparent(const char *s, struct trace_ctx *out, char *err, size_t errlen);

/* Writes the version-00 traceparent of c (55 characters and a NUL). Only the sampled flag is
 * written (the flags of later versions are not ours to pass on). */
void trace_format_traceparent(const struct trace_ctx *c, char out[TRACEPARENT_LEN + 1]);

/* n random bytes from getrandom(2) (a clock-seeded generator when there is no entropy yet);
 * never all zero for n > 0. */
void trace_random_bytes(uint8_t *p, size_t n);

/* Lower-case hex of n bytes and a NUL into out (2n+1 bytes). */
void trace_hex(const uint8_t *p, size_t n, char *out);

/* The wall clock in Unix nanoseconds. */
int64_t trace_now_unix_ns(void);

/* Sampling of root spans (a parent's decision is honoured unless parent_based is false). */
struct trace_sampler {
    bool parent_based; /* true: a span with a parent is sampled as the parent is */
    double ratio;      /* roots (and, when !parent_based, all spans): fraction sampled, 0..1 */
};

/* Reads OTEL_TRACES_SAMPLER (always_on, always_off, traceidratio, parentbased_always_on — the
 * default —, parentbased_always_off, parentbased_traceidratio) and OTEL_TRACES_SAMPLER_ARG (the
 * ratio, 0..1; default 1). 0, or -EINVAL with err naming the variable. */
int trace_sampler_from_env(struct trace_sampler *out, char *err, size_t errlen);

/* The ratio decision for a trace-id (OTel's TraceIdRatioBased: the id's last 8 bytes). */
bool trace_sampler_keep(const struct trace_sampler *s, const uint8_t trace_id[16]);

struct tracer; /* lib/otlp.h: otlp_tracer */
struct span;

/* Starts a span at the current time. parent NULL or not valid: a new trace. NULL when t is
 * NULL, the span is not sampled, or memory ran out. name is copied (cut at SPAN_MAX_NAME). */
struct span *span_start(struct tracer *t, const char *name, enum span_kind kind,
                        const struct trace_ctx *parent);

/* A child of parent (same tracer), or NULL when parent is NULL. */
struct span *span_child(struct span *parent, const char *name, enum span_kind kind);

/* The span's own context (what a child or a downstream request continues). With s NULL, out
 * gets valid false. */
void span_context(const struct span *s, struct trace_ctx *out);

/* The traceparent to send downstream: s's context, or when s is NULL the fallback context when
 * valid (a trace that is not recorded here is still passed on). 0 with out written, or -ENOENT
 * when there is nothing to send. */
int span_traceparent(const struct span *s, const struct trace_ctx *fallback,
                     char out[TRACEPARENT_LEN + 1]);

/* The span's trace-id as 32 hex digits and a NUL into out (for log lines); "" when s is NULL. */
void span_trace_id_hex(const struct span *s, char out[33]);

void span_set_str(struct span *s, const char *key, const char *value);
void span_set_int(struct span *s, const char *key, int64_t value);
void span_set_double(struct span *s, const char *key, double value); /* non-finite: a string */
void span_set_bool(struct span *s, const char *key, bool value);

/* Records an event now / at t_unix_ns. Returns the event's index, or -1 (s NULL, or full: the
 * event is counted as dropped). */
int span_add_event(struct span *s, const char *name);
int span_add_event_at(struct span *s, const char *name, int64_t t_unix_ns);
/* An attribute of event idx (as returned by span_add_event); ignored when idx is -1. */
void span_event_set_int(struct span *s, int idx, const char *key, int64_t value);
void span_event_set_double(struct span *s, int idx, const char *key, double value);

/* The span's status; message (copied, may be NULL) is kept for ERROR only. A later ERROR
 * replaces an earlier status; OK or UNSET never replace ERROR. */
void span_set_status(struct span *s, enum span_status st, const char *message);

/* Moves the start time (a span recorded after the fact). */
void span_set_start(struct span *s, int64_t t_unix_ns);

/* Ends the span now / at t_unix_ns (never before its start) and queues it for export. */
void span_end(struct span *s);
void span_end_at(struct span *s, int64_t t_unix_ns);

/* Frees a span without exporting it. */
void span_discard(struct span *s);

/* Starts the SERVER span of an incoming request from its traceparent header (value may be NULL;
 * an invalid one starts a new trace, and a debug line says why). *incoming gets the parsed
 * context (valid false when absent or invalid) for span_traceparent's fallback. */
struct span *trace_server_span(struct tracer *t, const char *name, const char *traceparent,
                               struct trace_ctx *incoming);

#endif /* TANDEM_LIB_TRACE_H */
