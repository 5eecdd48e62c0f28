/*
 * tandem-echo: the stand-in workload that localkube runs for `make run` and the e2e tests until
 * the real agent exists. A small HTTP server on lib/http_server with the endpoints a pod needs to
 * be probed, addressed, streamed from and scraped:
 *
 *   GET  /health, /healthz, /readyz     200 {"status":"ok"}
 *   GET  /                              pod name/namespace/IP (POD_NAME, POD_NAMESPACE, POD_IP),
 *                                       hostname, uptime, requests served
 *   POST /echo                          the request body back, with its Content-Type
 *   GET  /stream?n=N&interval_ms=M      N Server-Sent Events M ms apart, then "data: [DONE]"
 *   GET  /metrics                       Prometheus text: tandem_echo_http_* request metrics
 *
 * SIGTERM/SIGINT drain: the listener closes, in-flight requests and streams finish (up to
 * --drain-timeout-ms), then the process exits 0. A second signal closes everything at once.
 * Exit status: 0 after a shutdown, 1 when the server cannot start, 2 on bad usage.
 *
 * Standing in for another image (e2e/localkube/images.json runs it in place of tandem-agent and
 * tandem-epp, with that image's container args appended): --ignore-unknown-flags drops the flags
 * it does not know (with their value, when the next word does not start with "--") and the
 * positional words, logging them at debug; --exit-on-command WORD exits 0 at once when the first
 * positional word is WORD (a one-shot subcommand, e.g. the agent's "fetch" init container). The
 * last --port / --host given wins, so a fixed prefix can be overridden by the container args.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "lib/err.h"
#include "lib/http_server.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/shutdown.h"
#include "lib/sse.h"
#include "lib/version.h"

#define MAX_STREAM_EVENTS 100000
#define MAX_INTERVAL_MS   60000

struct echo {
    uv_loop_t *loop;
    struct http_server *srv;
    struct metrics_registry *metrics;
    struct shutdown *signals;
    uint64_t started_ns;
    uint64_t requests;
    uint64_t drain_timeout_ms;
    const char *pod_name;
    const char *pod_namespace;
    const char *pod_ip;
    int drained;
};

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

static void respond_object(struct http_request *req, int status, struct json_object *o)
{
    http_respond_json(
        req, status,
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

static void h_health(struct http_request *req, void *ud)
{
    struct echo *e = ud;
    e->requests++;
    http_respond_json(req, 200, "{\"status\":\"ok\"}");
}

static void h_root(struct http_request *req, void *ud)
{
    struct echo *e = ud;
    char host[256] = "";
    e->requests++;
    if (gethostname(host, sizeof(host) - 1) != 0) {
        snprintf(host, sizeof(host), "unknown");
    }
    struct json_object *o = json_object_new_object();
    struct json_object *pod = json_object_new_object();
    json_object_object_add(pod, "name", json_object_new_string(e->pod_name));
    json_object_object_add(pod, "namespace", json_object_new_string(e->pod_namespace));
    json_object_object_add(pod, "ip", json_object_new_string(e->pod_ip));
    json_object_object_add(o, "service", json_object_new_string("tandem-echo"));
    json_object_object_add(o, "pod", pod);
    json_object_object_add(o, "hostname", json_object_new_string(host));
    json_object_object_add(o, "uptime_seconds",
                           json_object_new_double((double)(uv_hrtime() - e->started_ns) / 1e9));
    json_object_object_add(o, "requests", json_object_new_int64((int64_t)e->requests));
    respond_object(req, 200, o);
}

static void h_echo(struct http_request *req, void *ud)
{
    struct echo *e = ud;
    size_t len = 0;
    e->requests++;
    const void *body = http_request_body(req, &len);
    const char *ct = http_request_header(req, "content-type");
    http_respond(req, 200, ct ? ct : "application/octet-stream", body, len);
}

/* One /stream response: a timer sends an event per tick. */
struct stream {
    uv_timer_t timer;
    struct http_request *req;
    struct echo *e;
    long n;
    long sent;
};

static void stream_closed(uv_handle_t *h)
{
    free(h);
}

static void stream_stop(struct stream *s)
{
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, stream_closed);
}

static void stream_tick(uv_timer_t *t)
{
    struct stream *s = t->data;
    struct buf ev;
    buf_init(&ev, 4096);
    if (s->sent < s->n) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int64(s->sent));
        json_object_object_add(o, "of", json_object_new_int64(s->n));
        json_object_object_add(o, "pod", json_object_new_string(s->e->pod_name));
        sse_write_data(&ev, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        s->sent++;
        int rc = http_stream_send(s->req, ev.data, ev.len);
        buf_free(&ev);
        if (rc != 0) {
            /* the client does not keep up: give up on it */
            log_warn("stream: client too slow (%s); ending the stream", tandem_strerror(rc));
            http_stream_end(s->req);
            stream_stop(s);
        }
        return;
    }
    sse_write_data(&ev, "[DONE]");
    http_stream_send(s->req, ev.data, ev.len);
    buf_free(&ev);
    http_stream_end(s->req);
    stream_stop(s);
}

static void stream_abort(struct http_request *req, void *ud, const char *reason)
{
    struct stream *s = ud;
    (void)req;
    log_info("stream: ended early after %ld of %ld events: %s", s->sent, s->n, reason);
    stream_stop(s);
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static void h_stream(struct http_request *req, void *ud)
{
    struct echo *e = ud;
    long n = 10, interval = 100;
    char msg[128];
    e->requests++;
    const char *ns = http_request_query_param(req, "n");
    const char *is = http_request_query_param(req, "interval_ms");
    if (ns && parse_long(ns, 0, MAX_STREAM_EVENTS, &n) != 0) {
        snprintf(msg, sizeof(msg), "n must be an integer in [0, %d]", MAX_STREAM_EVENTS);
        http_respond_error(req, 400, NULL, msg, "n");
        return;
    }
    if (is && parse_long(is, 0, MAX_INTERVAL_MS, &interval) != 0) {
        snprintf(msg, sizeof(msg), "interval_ms must be an integer in [0, %d]", MAX_INTERVAL_MS);
        http_respond_error(req, 400, NULL, msg, "interval_ms");
        return;
    }
    struct stream *s = calloc(1, sizeof(*s));
    if (!s) {
        http_respond_error(req, 500, NULL, "out of memory", NULL);
        return;
    }
    s->req = req;
    s->e = e;
    s->n = n;
    uv_timer_init(e->loop, &s->timer);
    s->timer.data = s;
    http_request_on_abort(req, stream_abort, s);
    http_stream_start(req, 200, "text/event-stream");
    uv_timer_start(&s->timer, stream_tick, (uint64_t)interval, (uint64_t)(interval ? interval : 1));
}

static void on_drained(struct http_server *srv, void *ud)
{
    struct echo *e = ud;
    (void)srv;
    e->drained = 1;
    log_info("drained; exiting");
    shutdown_free(e->signals);
    e->signals = NULL;
}

static void on_signal(void *ud, int signum, int immediate)
{
    struct echo *e = ud;
    (void)signum;
    if (immediate) {
        log_warn("second signal: closing all connections now");
        http_server_drain(e->srv, 0, on_drained, e);
        return;
    }
    log_info("draining (up to %llu ms)", (unsigned long long)e->drain_timeout_ms);
    http_server_drain(e->srv, e->drain_timeout_ms, on_drained, e);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem-echo [--host ADDR] [--port N] [--log-level debug|info|warn|error]\n"
               "                   [--log-format text|json] [--drain-timeout-ms N]\n"
               "                   [--ignore-unknown-flags] [--exit-on-command WORD]\n"
               "                   [--help] [--version]\n"
               "  --host defaults to $POD_IP, else 127.0.0.1; --port to 8000;\n"
               "  --drain-timeout-ms (how long SIGTERM waits for in-flight requests) to 30000.\n"
               "  --ignore-unknown-flags: skip unknown flags (and their values) and positional\n"
               "  words instead of failing; --exit-on-command WORD: exit 0 at once when the first\n"
               "  positional word is WORD (both for standing in for another image).\n");
}

static const struct option echo_opts[] = {
    {"host", required_argument, NULL, 'H'},
    {"port", required_argument, NULL, 'p'},
    {"log-level", required_argument, NULL, 'l'},
    {"log-format", required_argument, NULL, 'f'},
    {"drain-timeout-ms", required_argument, NULL, 'd'},
    {"ignore-unknown-flags", no_argument, NULL, 'i'},
    {"exit-on-command", required_argument, NULL, 'x'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* The option of echo_opts named by "--name" or "--name=value" (exact names only), or NULL. */
static const struct option *known_flag(const char *word)
{
    if (strncmp(word, "--", 2) != 0) {
        return NULL;
    }
    const char *name = word + 2;
    size_t len = strcspn(name, "=");
    for (const struct option *o = echo_opts; o->name; o++) {
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) {
            return o;
        }
    }
    return NULL;
}

/*
 * --ignore-unknown-flags: compacts argv in place to argv[0] plus the known flags and their
 * values, so getopt sees only those. Unknown "--flags" are dropped with their value when the next
 * word does not start with "--"; other words (positional, "-x") are dropped too. The dropped words
 * go, space-separated, into dropped; the first positional word into *first_word (or NULL).
 * Returns the new argc.
 */
static int drop_unknown_args(int argc, char **argv, struct buf *dropped, const char **first_word)
{
    int out = 1;
    *first_word = NULL;
    for (int i = 1; i < argc; i++) {
        const struct option *o = known_flag(argv[i]);
        if (o) {
            argv[out++] = argv[i];
            if (o->has_arg == required_argument && !strchr(argv[i], '=') && i + 1 < argc) {
                argv[out++] = argv[++i];
            }
            continue;
        }
        buf_appendf(dropped, "%s%s", dropped->len ? " " : "", argv[i]);
        if (strncmp(argv[i], "--", 2) == 0) {
            if (argv[i][2] && !strchr(argv[i], '=') && i + 1 < argc &&
                strncmp(argv[i + 1], "--", 2) != 0) {
                buf_appendf(dropped, " %s", argv[++i]);
            }
        } else if (argv[i][0] != '-' && !*first_word) {
            *first_word = argv[i];
        }
    }
    argv[out] = NULL;
    return out;
}

int main(int argc, char **argv)
{
    const char *host = env_or("POD_IP", "127.0.0.1");
    const char *exit_on = NULL, *first_word = NULL;
    long port = 8000, drain_ms = 30000;
    enum log_level level = LOGL_INFO;
    enum log_format format = LOG_FORMAT_TEXT;
    int ignore_unknown = 0;
    struct buf dropped;
    buf_init(&dropped, 64 * 1024);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ignore-unknown-flags") == 0) {
            ignore_unknown = 1;
        }
    }
    if (ignore_unknown) {
        argc = drop_unknown_args(argc, argv, &dropped, &first_word);
    }
    int c;
    while ((c = getopt_long(argc, argv, "", echo_opts, NULL)) != -1) {
        switch (c) {
        case 'H':
            host = optarg;
            break;
        case 'p':
            if (parse_long(optarg, 0, 65535, &port) != 0) {
                fprintf(stderr, "tandem-echo: --port: not a port number: %s\n", optarg);
                return 2;
            }
            break;
        case 'l':
            if (log_parse_level(optarg, &level) != 0) {
                fprintf(stderr, "tandem-echo: --log-level: unknown level: %s\n", optarg);
                return 2;
            }
            break;
        case 'f':
            if (log_parse_format(optarg, &format) != 0) {
                fprintf(stderr, "tandem-echo: --log-format: unknown format: %s\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (parse_long(optarg, 0, LONG_MAX, &drain_ms) != 0) {
                fprintf(stderr, "tandem-echo: --drain-timeout-ms: not a number: %s\n", optarg);
                return 2;
            }
            break;
        case 'i':
            break;
        case 'x':
            exit_on = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("tandem-echo %s\n", TANDEM_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!ignore_unknown && optind < argc) {
        first_word = argv[optind];
    }
    if (optind != argc && !(exit_on && first_word && strcmp(first_word, exit_on) == 0)) {
        usage(stderr);
        return 2;
    }
    log_init("tandem-echo", level, format);
    if (dropped.len) {
        log_debug("ignored unknown arguments: %s", buf_cstr(&dropped));
    }
    buf_free(&dropped);
    if (exit_on && first_word && strcmp(first_word, exit_on) == 0) {
        log_info("command \"%s\": nothing to do for a stand-in; exiting 0", first_word);
        return 0;
    }

    struct echo e = {
        .loop = uv_default_loop(),
        .started_ns = uv_hrtime(),
        .drain_timeout_ms = (uint64_t)drain_ms,
        .pod_name = env_or("POD_NAME", ""),
        .pod_namespace = env_or("POD_NAMESPACE", ""),
        .pod_ip = env_or("POD_IP", ""),
    };
    char err[256] = "";
    int rc = 1;
    e.metrics = metrics_registry_new();
    if (!e.metrics) {
        log_error("out of memory");
        return 1;
    }
    struct http_server_config cfg;
    http_server_config_init(&cfg);
    cfg.host = host;
    cfg.port = (int)port;
    cfg.metrics = e.metrics;
    cfg.metrics_prefix = "tandem_echo_";
    cfg.metrics_path = "/metrics";
    e.srv = http_server_new(e.loop, &cfg, err, sizeof(err));
    if (!e.srv) {
        log_error("%s", err);
        goto out_metrics;
    }
    if (http_server_route(e.srv, "GET", "/health", 0, h_health, &e) != 0 ||
        http_server_route(e.srv, "GET", "/healthz", 0, h_health, &e) != 0 ||
        http_server_route(e.srv, "GET", "/readyz", 0, h_health, &e) != 0 ||
        http_server_route(e.srv, "GET", "/", 0, h_root, &e) != 0 ||
        http_server_route(e.srv, "POST", "/echo", 0, h_echo, &e) != 0 ||
        http_server_route(e.srv, "GET", "/stream", 0, h_stream, &e) != 0) {
        log_error("cannot register routes");
        goto out_server;
    }
    if (http_server_start(e.srv, err, sizeof(err)) != 0) {
        log_error("%s", err);
        goto out_server;
    }
    e.signals = shutdown_new(e.loop, on_signal, &e);
    if (!e.signals) {
        log_error("cannot install signal handlers");
        http_server_drain(e.srv, 0, on_drained, &e);
        uv_run(e.loop, UV_RUN_DEFAULT);
        goto out_server;
    }
    log_info("listening on %s port %d (pod %s/%s)", host, http_server_port(e.srv),
             e.pod_namespace[0] ? e.pod_namespace : "-", e.pod_name[0] ? e.pod_name : "-");
    uv_run(e.loop, UV_RUN_DEFAULT);
    rc = e.drained ? 0 : 1;

out_server:
    if (e.signals) {
        shutdown_free(e.signals);
    }
    uv_run(e.loop, UV_RUN_DEFAULT);
    http_server_free(e.srv);
out_metrics:
    metrics_registry_free(e.metrics);
    uv_loop_close(e.loop);
    return rc;
}
