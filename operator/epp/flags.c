/*
 * tandem-epp's command line (see flags.h).
 */
#include "operator/epp/flags.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/flags.h"
#include "lib/err.h"
#include "lib/otlp.h"
#include "lib/version.h"
#include "operator/epp/endpoint.h"

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: tandem-epp [flags]\n"
        "\n"
        "The endpoint picker of an InferencePool (docs/epp.md).\n"
        "\n"
        "  --pool-name NAME                 the InferencePool to serve\n"
        "  --pool-namespace NS              its namespace (default $POD_NAMESPACE, else default)\n"
        "  --pool-group GROUP               tandem.dev (default), inference.networking.k8s.io\n"
        "                                   or inference.networking.x-k8s.io\n"
        "  --endpoints LIST                 no Kubernetes: host:port[/role][@model],...\n"
        "  --config-file PATH               EndpointPickerConfig YAML\n"
        "  --config-text YAML               the same, inline\n"
        "  --grpc-port N                    Envoy ext-proc (9002; 0: off)\n"
        "  --grpc-health-port N             accepted: gRPC health is served on the ext-proc port\n"
        "  --metrics-port N                 /metrics, /healthz, /readyz, KV-cache API (9090)\n"
        "  --gateway-port N                 the OpenAI gateway (8080; 0: off)\n"
        "  --host ADDR                      bind address (default $POD_IP, else 0.0.0.0)\n"
        "  --refresh-metrics-interval D     model-server scrape period (50ms)\n"
        "  --metrics-staleness-threshold D  metrics older than this are stale (2s)\n"
        "  --model-server-metrics-scheme S  http (default) or https\n"
        "  --model-server-metrics-path P    /metrics\n"
        "  --model-server-metrics-port N    scrape this port instead of the target port\n"
        "  --model-server-metrics-https-insecure-skip-verify\n"
        "  --kv-events-port N               the pods' KV event publishers (5557)\n"
        "  --kv-replay-port N               their replay sockets (5558; 0: no replay)\n"
        "  --disable-endpoint-subset-filter ignore Envoy's subset hint\n"
        "  --secure-serving BOOL            TLS on the gRPC port (only false is supported)\n"
        "  --ha-enable-leader-election      accepted: every replica serves (active-active)\n"
        "  --sync-timeout D                 bound on the first sync with the API server (30s)\n"
        "  --kubeconfig PATH                (default: in-cluster, $KUBECONFIG, ~/.kube/config)\n"
        "  --otlp-traces-endpoint URL       OTLP/HTTP collector for request traces\n"
        "                                   (docs/tracing.md; default: $OTEL_EXPORTER_OTLP_*)\n"
        "  --log-level L, --log-format F    info|debug|...; text|json\n"
        "  --version, --help\n");
}

int epp_parse_duration_ms(const char *s, int64_t *out)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"µs", 1e-3}, {"ms", 1},
                 {"s", 1e3},   {"m", 6e4},   {"h", 3.6e6}};
    double total = 0;
    if (!s || !*s) {
        return -EINVAL;
    }
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    while (*s) {
        char *end;
        if (!isdigit((unsigned char)*s) && *s != '.') {
            return -EINVAL;
        }
        double v = strtod(s, &end);
        if (end == s || !isfinite(v)) {
            return -EINVAL;
        }
        s = end;
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t l = strlen(units[i].unit);
            if (strncmp(s, units[i].unit, l) == 0 && l > best_len) {
                best = i;
                best_len = l;
            }
        }
        if (best_len == 0) {
            return -EINVAL;
        }
        total += v * units[best].ms;
        s += best_len;
    }
    if (total > 1e12) {
        return -EINVAL;
    }
    *out = total > 0 && total < 1 ? 1 : (int64_t)llround(total);
    return 0;
}

static int parse_one(const char *e, size_t len, struct epp_static_endpoint *out, char *err,
                     size_t errlen)
{
    char buf[400];
    if (len == 0 || len >= sizeof buf) {
        return tandem_fail(err, errlen, -EINVAL, "--endpoints: an empty or too long entry");
    }
    memcpy(buf, e, len);
    buf[len] = '\0';
    memset(out, 0, sizeof(*out));
    char *at = strchr(buf, '@');
    if (at) {
        *at = '\0';
        if (strlen(at + 1) >= sizeof out->model) {
            return tandem_fail(err, errlen, -EINVAL, "--endpoints: a model name is too long");
        }
        memcpy(out->model, at + 1, strlen(at + 1) + 1);
    }
    char *slash = strchr(buf, '/');
    if (slash) {
        *slash = '\0';
        if (strlen(slash + 1) >= sizeof out->role || epp_role_parse(slash + 1) == EPP_ROLE_OTHER) {
            return tandem_fail(err, errlen, -EINVAL,
                               "--endpoints: \"%.*s\": role \"%s\" is not one of prefill, decode, "
                               "both, prefill-decode",
                               (int)len, e, slash + 1);
        }
        memcpy(out->role, slash + 1, strlen(slash + 1) + 1);
    }
    char *colon = strrchr(buf, ':');
    char *host = buf;
    if (!colon) {
        return tandem_fail(err, errlen, -EINVAL, "--endpoints: \"%.*s\": needs host:port", (int)len,
                           e);
    }
    *colon = '\0';
    if (host[0] == '[' && colon > host && colon[-1] == ']') {
        host++;
        colon[-1] = '\0';
    }
    unsigned char a[16];
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 1 || port > 65535 ||
        (inet_pton(AF_INET, host, a) != 1 && inet_pton(AF_INET6, host, a) != 1)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "--endpoints: \"%.*s\": needs an IP address and a port 1..65535",
                           (int)len, e);
    }
    memcpy(out->ip, host, strlen(host) + 1); /* an address fits: INET6_ADDRSTRLEN < 64 */
    out->port = (int)port;
    return 0;
}

int epp_parse_endpoints(const char *s, struct epp_static_endpoint *out, int max, char *err,
                        size_t errlen)
{
    int n = 0;
    while (s && *s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (n == max) {
            return tandem_fail(err, errlen, -EINVAL, "--endpoints: more than %d entries", max);
        }
        if (parse_one(s, len, &out[n], err, errlen) != 0) {
            return -EINVAL;
        }
        n++;
        s = comma ? comma + 1 : s + len;
    }
    return n > 0 ? n : tandem_fail(err, errlen, -EINVAL, "--endpoints: no entry");
}

static int port_flag(const char *v, const char *name, int allow_zero, int *out)
{
    int32_t p;
    if (cli_i32(v, name, allow_zero ? 0 : 1, 65535, &p) != 0) {
        return 2;
    }
    *out = p;
    return 0;
}

static int duration_flag(const char *v, const char *name, int64_t *out)
{
    if (epp_parse_duration_ms(v, out) != 0) {
        return cli_die("%s: \"%s\" is not a duration like 50ms or 2s", name, v ? v : "");
    }
    return 0;
}

static int bool_value(const char *v, const char *name, bool *out)
{
    if (!v || strcmp(v, "true") == 0) {
        *out = true;
    } else if (strcmp(v, "false") == 0) {
        *out = false;
    } else {
        return cli_die("%s: \"%s\" is not true or false", name, v);
    }
    return 0;
}

/* One flag at a->argv[a->i]: 0 handled, 1 not this group, 2 bad value. */
static int parse_ports(struct cli_args *a, struct epp_flags *f)
{
    const char *v;
    if (cli_flag(a, "--grpc-port", &v)) {
        return port_flag(v, "--grpc-port", 1, &f->grpc_port);
    }
    if (cli_flag(a, "--grpc-health-port", &v)) {
        return port_flag(v, "--grpc-health-port", 1, &f->grpc_health_port);
    }
    if (cli_flag(a, "--metrics-port", &v)) {
        return port_flag(v, "--metrics-port", 0, &f->metrics_port);
    }
    if (cli_flag(a, "--gateway-port", &v)) {
        return port_flag(v, "--gateway-port", 1, &f->gateway_port);
    }
    if (cli_flag(a, "--model-server-metrics-port", &v)) {
        return port_flag(v, "--model-server-metrics-port", 1, &f->ms_port);
    }
    if (cli_flag(a, "--kv-events-port", &v)) {
        return port_flag(v, "--kv-events-port", 0, &f->kv_events_port);
    }
    if (cli_flag(a, "--kv-replay-port", &v)) {
        return port_flag(v, "--kv-replay-port", 1, &f->kv_replay_port);
    }
    return 1;
}

static int parse_durations(struct cli_args *a, struct epp_flags *f)
{
    const char *v;
    if (cli_flag(a, "--refresh-metrics-interval", &v)) {
        return duration_flag(v, "--refresh-metrics-interval", &f->refresh_ms);
    }
    if (cli_flag(a, "--metrics-staleness-threshold", &v)) {
        return duration_flag(v, "--metrics-staleness-threshold", &f->stale_ms);
    }
    if (cli_flag(a, "--sync-timeout", &v)) {
        return duration_flag(v, "--sync-timeout", &f->sync_timeout_ms);
    }
    if (cli_flag(a, "--refresh-prometheus-metrics-interval", &v)) {
        int64_t unused;
        return duration_flag(v, "--refresh-prometheus-metrics-interval", &unused);
    }
    return 1;
}

static int parse_strings(struct cli_args *a, struct epp_flags *f)
{
    static const struct {
        const char *name;
        size_t off;
    } strs[] = {
        {"--pool-name", offsetof(struct epp_flags, pool_name)},
        {"--pool-namespace", offsetof(struct epp_flags, pool_ns)},
        {"--pool-group", offsetof(struct epp_flags, pool_group)},
        {"--config-file", offsetof(struct epp_flags, config_file)},
        {"--config-text", offsetof(struct epp_flags, config_text)},
        {"--host", offsetof(struct epp_flags, host)},
        {"--endpoints", offsetof(struct epp_flags, endpoints)},
        {"--kubeconfig", offsetof(struct epp_flags, kubeconfig)},
        {"--model-server-metrics-scheme", offsetof(struct epp_flags, ms_scheme)},
        {"--model-server-metrics-path", offsetof(struct epp_flags, ms_path)},
        {"--log-level", offsetof(struct epp_flags, log_level)},
        {"--log-format", offsetof(struct epp_flags, log_format)},
        {"--otlp-traces-endpoint", offsetof(struct epp_flags, otlp_endpoint)},
    };
    const char *v;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        if (cli_flag(a, strs[i].name, &v)) {
            if (!v || !*v) {
                return cli_die("%s needs a value", strs[i].name);
            }
            *(const char **)((char *)f + strs[i].off) = v;
            return 0;
        }
    }
    return 1;
}

/* A Go bool flag: "--name" (true) or "--name=true|false"; never takes the next argument. 0
 * handled, 1 no match, 2 bad value. */
static int go_bool(struct cli_args *a, const char *name, bool *out)
{
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0 || (arg[n] != '\0' && arg[n] != '=')) {
        return 1;
    }
    return bool_value(arg[n] == '=' ? arg + n + 1 : NULL, name, out) ? 2 : 0;
}

static int parse_bools(struct cli_args *a, struct epp_flags *f)
{
    static const struct {
        const char *name;
        size_t off;
    } bools[] = {
        {"--secure-serving", offsetof(struct epp_flags, secure_serving)},
        {"--disable-endpoint-subset-filter", offsetof(struct epp_flags, disable_subset_filter)},
        {"--model-server-metrics-https-insecure-skip-verify",
         offsetof(struct epp_flags, ms_insecure)},
        {"--ha-enable-leader-election", offsetof(struct epp_flags, leader_election)},
    };
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
        int rc = go_bool(a, bools[i].name, (bool *)((char *)f + bools[i].off));
        if (rc != 1) {
            return rc;
        }
    }
    return 1;
}

static void defaults(struct epp_flags *f)
{
    memset(f, 0, sizeof(*f));
    const char *ns = getenv("POD_NAMESPACE"), *ip = getenv("POD_IP");
    f->pool_ns = ns && *ns ? ns : "default";
    f->pool_group = "tandem.dev";
    f->host = ip && *ip ? ip : "0.0.0.0";
    f->grpc_port = 9002;
    f->grpc_health_port = 9003;
    f->metrics_port = 9090;
    f->gateway_port = 8080;
    f->refresh_ms = 50;
    f->stale_ms = 2000;
    f->ms_scheme = "http";
    f->ms_path = "/metrics";
    f->kv_events_port = 5557;
    f->kv_replay_port = 5558;
    f->sync_timeout_ms = 30000;
    f->log_level = "info";
    f->log_format = "text";
}

static int check(const struct epp_flags *f)
{
    if (!f->endpoints && !f->pool_name) {
        return cli_die("--pool-name (or --endpoints, for a pool without Kubernetes) is required");
    }
    if (f->config_file && f->config_text) {
        return cli_die("--config-file and --config-text are exclusive");
    }
    if (f->secure_serving) {
        return cli_die("--secure-serving=true: TLS on the gRPC port is not supported yet; run "
                       "with --secure-serving=false behind a mesh that terminates TLS");
    }
    if (strcmp(f->ms_scheme, "http") != 0 && strcmp(f->ms_scheme, "https") != 0) {
        return cli_die("--model-server-metrics-scheme: \"%s\" is not http or https", f->ms_scheme);
    }
    if (f->ms_path[0] != '/') {
        return cli_die("--model-server-metrics-path: \"%s\" must start with /", f->ms_path);
    }
    if (f->refresh_ms <= 0 || f->stale_ms <= 0) {
        return cli_die("--refresh-metrics-interval and --metrics-staleness-threshold must be > 0");
    }
    char url[2048], err[512] = "";
    if (otlp_endpoint_resolve(f->otlp_endpoint, url, sizeof url, err, sizeof err) < 0) {
        return cli_die("%s", err);
    }
    return 0;
}

int epp_flags_parse(int argc, char **argv, struct epp_flags *f)
{
    struct cli_args a = {.argc = argc, .argv = argv, .i = 1};
    cli_set_prog("tandem-epp");
    defaults(f);
    for (; a.i < argc; a.i++) {
        const char *arg = argv[a.i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("tandem-epp %s\n", TANDEM_VERSION);
            return 1;
        }
        int rc = parse_ports(&a, f);
        if (rc == 1) {
            rc = parse_durations(&a, f);
        }
        if (rc == 1) {
            rc = parse_strings(&a, f);
        }
        if (rc == 1) {
            rc = parse_bools(&a, f);
        }
        if (rc == 1) {
            usage(stderr);
            return cli_die("unknown flag %s", arg);
        }
        if (rc != 0) {
            return 2;
        }
    }
    return check(f);
}
