/*
 * tandem-epp's command line: llm-d/GIE's EPP flags where they apply (reference §1.8), plus the
 * gateway port and a cluster-less mode (--endpoints). docs/epp.md lists them.
 */
#ifndef TANDEM_OPERATOR_EPP_FLAGS_H
#define TANDEM_OPERATOR_EPP_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define EPP_MAX_STATIC_ENDPOINTS 256

struct epp_flags {
    const char *pool_name, *pool_ns, *pool_group;
    const char *config_file, *config_text;
    const char *host; /* bind address of every port */
    int grpc_port, grpc_health_port, metrics_port, gateway_port;
    int64_t refresh_ms, stale_ms;
    const char *endpoints; /* --endpoints: cluster-less mode */
    const char *kubeconfig;
    const char *ms_scheme, *ms_path; /* --model-server-metrics-{scheme,path} */
    int ms_port;                     /* 0: the endpoint's own port */
    bool ms_insecure;
    int kv_events_port, kv_replay_port;
    bool disable_subset_filter;
    bool secure_serving;
    bool leader_election;
    int64_t sync_timeout_ms;
    const char *log_level, *log_format;
    const char *otlp_endpoint; /* --otlp-traces-endpoint (else the OTEL_* environment) */
};

/* Parses argv (argv[0] is the program). 0: run; 1: --help or --version printed (exit 0);
 * 2: a bad flag (a message naming it was printed; exit 2). */
int epp_flags_parse(int argc, char **argv, struct epp_flags *f);

/* A Go duration ("50ms", "2s", "1m30s", "1.5s", "250us") in milliseconds (rounded up to 1 for
 * positive values under 1 ms). 0, or -EINVAL. */
int epp_parse_duration_ms(const char *s, int64_t *out);

/* One --endpoints entry: "host:port[/role][@model]". */
struct epp_static_endpoint {
    char ip[64];
    int port;
    char role[32];   /* "" when not given */
    char model[256]; /* "" when not given */
};

/* Parses the comma-separated --endpoints list into out (at most max). The count, or -EINVAL with
 * err naming the entry. */
int epp_parse_endpoints(const char *s, struct epp_static_endpoint *out, int max, char *err,
                        size_t errlen);

#endif
