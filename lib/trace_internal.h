/*
 * What lib/trace.c and lib/otlp.c share: the span and tracer structures. Not for other modules.
 */
#ifndef TANDEM_LIB_TRACE_INTERNAL_H
#define TANDEM_LIB_TRACE_INTERNAL_H

#include <stdint.h>

#include "lib/trace.h"

enum span_attr_type { SPAN_ATTR_STR, SPAN_ATTR_INT, SPAN_ATTR_DOUBLE, SPAN_ATTR_BOOL };

struct span_attr {
    char *key; /* malloc'd */
    enum span_attr_type type;
    union {
        char *s; /* malloc'd */
        int64_t i;
        double d;
        bool b;
    } v;
};

struct span_event {
    char *name;
    int64_t t;
    int n_attrs;
    struct span_attr attrs[SPAN_MAX_EVENT_ATTRS];
};

struct otlp_exporter;

/* One service's spans: owned by its exporter (otlp_tracer), alive as long as it is. */
struct tracer {
    struct otlp_exporter *x;
    char service[128];
    char version[32];
    struct trace_sampler sampler;
};

struct span {
    struct tracer *t;
    char *name;
    enum span_kind kind;
    struct trace_ctx ctx;
    uint8_t parent_id[8];
    bool has_parent;
    int64_t start, end;
    enum span_status status;
    char *status_msg;
    int n_attrs, n_events;
    uint32_t dropped_attrs, dropped_events;
    struct span_attr attrs[SPAN_MAX_ATTRS];
    struct span_event events[SPAN_MAX_EVENTS];
};

/* trace.c: frees a span (otlp.c, after export or when dropped). */
void trace_span_free(struct span *s);

/* otlp.c: takes s over (queued, or freed and counted when the queue is full). */
void otlp_exporter_submit(struct otlp_exporter *x, struct span *s);

#endif /* TANDEM_LIB_TRACE_INTERNAL_H */
