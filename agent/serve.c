/*
 * tandem-agent serve (serve.h): one libuv loop runs two HTTP servers, the engine's OpenAI API on
 * the engine port and the P/D sidecar on the pod's serving port; the engine steps on its own
 * thread and publishes its KV cache events through agent/kv_events (its own thread); the SSRF
 * allowlist's informers run on theirs.
 *
 * Shutdown (SIGTERM, or SIGINT): the engine refuses new requests, the sidecar drains (in-flight
 * streams finish, up to --drain-timeout-ms), then the engine port drains with what is left of
 * that time, AllBlocksCleared is published and the process exits 0. A second signal closes every
 * connection at once.
 */
#include "agent/serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#include "agent/allowlist.h"
#include "agent/kv_events.h"
#include "agent/kvconn.h"
#include "agent/kvxfer.h"
#include "agent/sidecar.h"
#include "engine/cli/flags.h"
#include "engine/core/engine.h"
#include "engine/server/server.h"
#include "lib/clock.h"
#include "lib/http_server.h"
#include "lib/json.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/otlp.h"
#include "lib/shutdown.h"

struct agent_flags {
    struct engine_flags ef;
    const char *role;
    const char *model_format;
    const char *served;
    const char *host;
    int64_t port, engine_port, kv_events_port, kv_replay_port, kv_transfer_port;
    const char *pool;       /* NS/NAME */
    const char *pool_group; /* tandem.dev | inference.networking.k8s.io */
    const char *connector;
    struct kvconn_config kv_opts; /* --kv-connector-config (and the environment) */
    int ssrf;
    int prefiller_tls, prefiller_insecure;
    int64_t prefill_timeout_ms, drain_ms;
    int log_requests;
    const char *otlp_endpoint; /* --otlp-traces-endpoint */
    enum log_level level;
    enum log_format format;
};

struct agent {
    struct agent_flags *fl;
    uv_loop_t *loop;
    engine *e;
    struct kv_events *kv;
    struct kvconn *kvc;
    struct allowlist *allow;
    struct http_server *engine_srv, *sidecar_srv;
    struct engine_server *es;
    struct sidecar *sc;
    struct shutdown *signals;
    uv_timer_t allow_timer;
    int allow_timer_open;
    double drain_deadline; /* tandem_now_s() */
    int sidecar_drained, engine_drained;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-agent serve --model PATH [options]\n"
            "  --role prefill|decode|both    this pod's role in the pool (both)\n"
            "  --model-format gguf|safetensors  what --model must be (checked)\n"
            "  --served-model-name NAME      the OpenAI model id (default: the model's name)\n"
            "  --host ADDR                   address of every listener ($POD_IP, else "
            "127.0.0.1)\n"
            "  --port N                      the P/D sidecar, the pod's serving port (8000)\n"
            "  --engine-port N               the engine's OpenAI API (8200)\n"
            "  --kv-events-port N            KV events, ZMQ PUB (5557; 0: off)\n"
            "  --kv-events-replay-port N     KV events replay, ZMQ ROUTER (the PUB port + 1; 0: "
            "off)\n"
            "  --kv-transfer-port N          KV transfer side channel (5600)\n"
            "  --inference-pool NS/NAME      the pool this pod serves ($INFERENCE_POOL)\n"
            "  --pool-group GROUP            tandem.dev (default), inference.networking.k8s.io or\n"
            "                                inference.networking.x-k8s.io\n"
            "  --kv-connector nixlv2         the P/D connector (NIXL v2 kv_transfer_params)\n"
            "  --kv-connector-config JSON    connector options (a JSON object)\n"
            "  --enable-ssrf-protection      prefill targets only among the pool's pods\n"
            "  --prefiller-use-tls           prefill legs over https (--enable-tls=prefiller)\n"
            "  --prefiller-tls-insecure-skip-verify\n"
            "                                do not verify the prefiller's certificate\n"
            "  --enable-tls STAGES, --tls-insecure-skip-verify STAGES\n"
            "                                llm-d's forms: prefiller; decoder (in-process: no\n"
            "                                hop, accepted), also --decoder-use-tls\n"
            "  --secure-proxy=false          llm-d's; TLS on --port is not served\n"
            "  --prefill-timeout-ms N        prefill leg bound without x-request-timeout (60000)\n"
            "  --drain-timeout-ms N          SIGTERM grace for in-flight requests (30000)\n"
            "  --enable-log-requests         one log line per request\n"
            "  --otlp-traces-endpoint URL    OTLP/HTTP collector for request traces\n"
            "                                (docs/tracing.md; default: $OTEL_EXPORTER_OTLP_*)\n"
            "  --log-level debug|info|warn|error, --log-format text|json\n"
            "engine flags:\n");
    engine_flags_usage(f);
}

static int port_flag(struct cli_args *a, const char *name, int64_t lo, int64_t *out, int *rc)
{
    const char *v = NULL;
    if (!cli_flag(a, name, &v)) {
        return 0;
    }
    *rc = cli_i64(v, name, lo, 65535, out);
    return 1;
}

/* --kv-connector-config: vLLM's kv_connector_extra_config key enforce_handshake_compat, and
 * abort_request_timeout (seconds; vLLM reads it from VLLM_NIXL_ABORT_REQUEST_TIMEOUT); Tandem's
 * tandem_block_checksum (bool) and tandem_wire_dtype ("fp16" | "int8"), extensions that need a
 * Tandem producer (docs/agent.md). Other keys are refused, except NIXL's backends and
 * num_threads, which do not apply (logged). */
static int connector_options(const char *json, struct kvconn_config *kc, char *err, size_t errlen)
{
    struct json_object *o = json_parse(json, strlen(json), err, errlen);
    if (!o || !json_object_is_type(o, json_type_object)) {
        if (o || !err[0]) {
            snprintf(err, errlen, "%s", "must be a JSON object");
        }
        json_object_put(o);
        return -EINVAL;
    }
    int rc = 0;
    json_object_object_foreach(o, key, val)
    {
        if (strcmp(key, "enforce_handshake_compat") == 0 &&
            json_object_is_type(val, json_type_boolean)) {
            kc->enforce_compat = json_object_get_boolean(val);
        } else if (strcmp(key, "abort_request_timeout") == 0 &&
                   (json_object_is_type(val, json_type_int) ||
                    json_object_is_type(val, json_type_double)) &&
                   json_object_get_double(val) > 0) {
            kc->hold_timeout_s = json_object_get_double(val);
        } else if (strcmp(key, "tandem_block_checksum") == 0 &&
                   json_object_is_type(val, json_type_boolean)) {
            kc->block_checksum = json_object_get_boolean(val);
        } else if (strcmp(key, "tandem_wire_dtype") == 0 &&
                   json_object_is_type(val, json_type_string)) {
            const char *dt = json_object_get_string(val);
            if (strcmp(dt, "int8") != 0 && strcmp(dt, "fp16") != 0) {
                snprintf(err, errlen, "'tandem_wire_dtype': '%s' is neither \"fp16\" nor \"int8\"",
                         dt);
                rc = -EINVAL;
                break;
            }
            kc->wire_int8 = strcmp(dt, "int8") == 0;
        } else if (strcmp(key, "backends") == 0 || strcmp(key, "num_threads") == 0) {
            log_info("--kv-connector-config: '%s' does not apply (UCX is the transport; one "
                     "thread)",
                     key);
        } else {
            snprintf(err, errlen,
                     "unknown key or wrong type: '%s' (known: enforce_handshake_compat (bool), "
                     "abort_request_timeout (seconds > 0), tandem_block_checksum (bool), "
                     "tandem_wire_dtype (\"fp16\" or \"int8\"))",
                     key);
            rc = -EINVAL;
            break;
        }
    }
    json_object_put(o);
    return rc;
}

/* llm-d's --enable-tls / --tls-insecure-skip-verify take a list of stages (prefiller, decoder,
 * encoder). The decoder is this process's own engine, reached in-process: there is no decode hop
 * to encrypt, so "decoder" is accepted and changes nothing (logged). *prefiller is set when the
 * list names it. */
static int tls_stages(const char *name, const char *v, int *prefiller)
{
    char list[128];
    if (!v || !*v || strlen(v) >= sizeof list) {
        return cli_die("%s needs a list of stages: prefiller, decoder", name);
    }
    snprintf(list, sizeof list, "%s", v);
    char *save = NULL;
    for (char *st = strtok_r(list, ",", &save); st; st = strtok_r(NULL, ",", &save)) {
        if (strcmp(st, "prefiller") == 0) {
            *prefiller = 1;
        } else if (strcmp(st, "decoder") == 0) {
            log_info("%s: decoder: the engine is in this process (no decode hop to encrypt)", name);
        } else {
            return cli_die("%s: '%s' is not a stage here (prefiller, decoder)", name, st);
        }
    }
    return 0;
}

/* llm-d's --secure-proxy (TLS on the sidecar's own port, self-signed without --cert-path): not
 * served here; only its false form is accepted. */
static int secure_proxy(const char *arg)
{
    const char *v = strchr(arg, '=');
    if (v && (strcmp(v + 1, "false") == 0 || strcmp(v + 1, "0") == 0)) {
        return 0;
    }
    return cli_die("%s: the sidecar serves plain HTTP on --port; terminate TLS in front of the "
                   "pod (the Gateway, a mesh) and pass --secure-proxy=false",
                   arg);
}

/* 0 parsed (run), 1 --help printed, 2 usage error. */
static int parse_flags(int argc, char **argv, struct agent_flags *f)
{
    struct cli_args a = {.argc = argc, .argv = argv};
    const char *v = NULL, *env_pool = getenv("INFERENCE_POOL");
    engine_flags_init(&f->ef);
    f->role = "both";
    f->host = getenv("POD_IP");
    f->port = 8000;
    f->engine_port = 8200;
    f->kv_events_port = 5557;
    f->kv_replay_port = -1;
    f->kv_transfer_port = 5600;
    f->pool = env_pool && *env_pool ? env_pool : NULL;
    f->pool_group = "tandem.dev";
    f->kv_opts.enforce_compat = true;
    const char *env = getenv("VLLM_NIXL_ABORT_REQUEST_TIMEOUT");
    if (env && *env) {
        char *end;
        double t = strtod(env, &end);
        if (*end || !(t > 0)) {
            return cli_die("VLLM_NIXL_ABORT_REQUEST_TIMEOUT: '%s' is not a number of seconds > 0",
                           env);
        }
        f->kv_opts.hold_timeout_s = t; /* --kv-connector-config's abort_request_timeout wins */
    }
    f->drain_ms = 30000;
    f->level = LOGL_INFO;
    f->format = LOG_FORMAT_TEXT;
    for (a.i = 1; a.i < argc; a.i++) {
        int rc = 0;
        int r = engine_flags_parse(&a, &f->ef);
        if (r == 2) {
            return 2;
        }
        if (r == 1) {
            continue;
        }
        if (port_flag(&a, "--port", 1, &f->port, &rc) ||
            port_flag(&a, "--engine-port", 1, &f->engine_port, &rc) ||
            port_flag(&a, "--kv-events-port", 0, &f->kv_events_port, &rc) ||
            port_flag(&a, "--kv-events-replay-port", 0, &f->kv_replay_port, &rc) ||
            port_flag(&a, "--kv-transfer-port", 1, &f->kv_transfer_port, &rc)) {
            if (rc) {
                return 2;
            }
        } else if (cli_flag(&a, "--role", &v)) {
            if (!v ||
                (strcmp(v, "prefill") != 0 && strcmp(v, "decode") != 0 && strcmp(v, "both") != 0)) {
                return cli_die("--role: '%s' is not prefill, decode or both", v ? v : "");
            }
            f->role = v;
        } else if (cli_flag(&a, "--model-format", &v)) {
            if (!v || (strcmp(v, "gguf") != 0 && strcmp(v, "safetensors") != 0)) {
                return cli_die("--model-format: '%s' is not gguf or safetensors", v ? v : "");
            }
            f->model_format = v;
        } else if (cli_flag(&a, "--served-model-name", &v)) {
            if (!v || !*v) {
                return cli_die("--served-model-name needs a name");
            }
            f->served = v;
        } else if (cli_flag(&a, "--host", &v)) {
            f->host = v;
        } else if (cli_flag(&a, "--inference-pool", &v)) {
            f->pool = v;
        } else if (cli_flag(&a, "--pool-group", &v)) {
            if (!v ||
                (strcmp(v, "tandem.dev") != 0 && strcmp(v, "inference.networking.k8s.io") != 0 &&
                 strcmp(v, "inference.networking.x-k8s.io") != 0)) {
                return cli_die("--pool-group: '%s' is not tandem.dev, "
                               "inference.networking.k8s.io or inference.networking.x-k8s.io",
                               v ? v : "");
            }
            f->pool_group = v;
        } else if (cli_flag(&a, "--kv-connector", &v) || cli_flag(&a, "--connector", &v)) {
            if (!v || strcmp(v, "nixlv2") != 0) {
                return cli_die("--kv-connector: '%s' is not supported (nixlv2 is)", v ? v : "");
            }
            f->connector = v;
        } else if (cli_flag(&a, "--kv-connector-config", &v)) {
            char err[256] = "";
            if (!v || connector_options(v, &f->kv_opts, err, sizeof err) != 0) {
                return cli_die("--kv-connector-config: %s", v ? err : "needs a JSON object");
            }
        } else if (cli_bool(&a, "--enable-ssrf-protection")) {
            f->ssrf = 1;
        } else if (cli_bool(&a, "--prefiller-use-tls")) {
            f->prefiller_tls = 1;
        } else if (cli_bool(&a, "--prefiller-tls-insecure-skip-verify")) {
            f->prefiller_insecure = 1;
        } else if (cli_bool(&a, "--decoder-use-tls") ||
                   cli_bool(&a, "--decoder-tls-insecure-skip-verify")) {
            log_info("%s: the engine is in this process (no decode hop to encrypt)", argv[a.i]);
        } else if (strcmp(argv[a.i], "--secure-proxy") == 0 ||
                   strncmp(argv[a.i], "--secure-proxy=", 15) == 0) {
            if (secure_proxy(argv[a.i]) != 0) {
                return 2;
            }
        } else if (cli_flag(&a, "--cert-path", &v)) {
            return secure_proxy("--cert-path");
        } else if (cli_flag(&a, "--enable-tls", &v)) {
            if (tls_stages("--enable-tls", v, &f->prefiller_tls) != 0) {
                return 2;
            }
        } else if (cli_flag(&a, "--tls-insecure-skip-verify", &v)) {
            if (tls_stages("--tls-insecure-skip-verify", v, &f->prefiller_insecure) != 0) {
                return 2;
            }
        } else if (cli_flag(&a, "--prefill-timeout-ms", &v)) {
            if (cli_i64(v, "--prefill-timeout-ms", 1, 86400000, &f->prefill_timeout_ms)) {
                return 2;
            }
        } else if (cli_flag(&a, "--drain-timeout-ms", &v)) {
            if (cli_i64(v, "--drain-timeout-ms", 0, 3600000, &f->drain_ms)) {
                return 2;
            }
        } else if (cli_bool(&a, "--enable-log-requests")) {
            f->log_requests = 1;
        } else if (cli_flag(&a, "--otlp-traces-endpoint", &v)) {
            if (!v || !*v) {
                return cli_die("--otlp-traces-endpoint needs a URL");
            }
            f->otlp_endpoint = v;
        } else if (cli_bool(&a, "--disable-log-requests")) {
            f->log_requests = 0;
        } else if (cli_flag(&a, "--log-level", &v)) {
            if (!v || log_parse_level(v, &f->level) != 0) {
                return cli_die("--log-level: '%s' is not debug, info, warn or error", v ? v : "");
            }
        } else if (cli_flag(&a, "--log-format", &v)) {
            if (!v || log_parse_format(v, &f->format) != 0) {
                return cli_die("--log-format: '%s' is not text or json", v ? v : "");
            }
        } else if (cli_bool(&a, "--help") || cli_bool(&a, "-h")) {
            usage(stdout);
            return 1;
        } else {
            usage(stderr);
            return cli_die("serve: unknown flag '%s'", argv[a.i]);
        }
    }
    if (!f->ef.model_path) {
        usage(stderr);
        return cli_die("serve: --model is required");
    }
    if (!f->host || !*f->host) {
        f->host = "127.0.0.1";
    }
    if (f->kv_replay_port < 0) {
        f->kv_replay_port = f->kv_events_port ? f->kv_events_port + 1 : 0;
    }
    if (f->ssrf && !f->pool) {
        return cli_die("--enable-ssrf-protection needs --inference-pool NS/NAME (or "
                       "$INFERENCE_POOL)");
    }
    if (f->pool) {
        const char *slash = strchr(f->pool, '/');
        if (!slash || slash == f->pool || !slash[1] || strchr(slash + 1, '/')) {
            return cli_die("--inference-pool: '%s' is not NAMESPACE/NAME", f->pool);
        }
    }
    int64_t ports[] = {f->port, f->engine_port, f->kv_events_port, f->kv_replay_port,
                       f->kv_transfer_port};
    for (size_t i = 0; i < ARRAY_SIZE(ports); i++) {
        for (size_t j = i + 1; j < ARRAY_SIZE(ports); j++) {
            if (ports[i] && ports[i] == ports[j]) {
                return cli_die("port %lld is given to two listeners (--port, --engine-port, "
                               "--kv-events-port, --kv-events-replay-port, --kv-transfer-port "
                               "must differ)",
                               (long long)ports[i]);
            }
        }
    }
    return 0;
}

/* --model-format against what --model is: a GGUF file or a Hugging Face directory. */
static int check_model_format(const struct agent_flags *f)
{
    struct stat st;
    if (!f->model_format || stat(f->ef.model_path, &st) != 0) {
        return 0; /* a missing path: the loader names it */
    }
    int dir = S_ISDIR(st.st_mode);
    if (strcmp(f->model_format, "gguf") == 0 && dir) {
        return cli_die("--model-format gguf: %s is a directory (a Hugging Face model: use "
                       "--model-format safetensors)",
                       f->ef.model_path);
    }
    if (strcmp(f->model_format, "safetensors") == 0 && !dir) {
        return cli_die("--model-format safetensors: %s is a file; safetensors models are "
                       "directories with config.json (a .gguf file: --model-format gguf)",
                       f->ef.model_path);
    }
    return 0;
}

/* ---- shutdown ---- */

static void finish(struct agent *ag)
{
    if (!ag->sidecar_drained || !ag->engine_drained) {
        return;
    }
    log_info("drained; exiting");
    shutdown_free(ag->signals);
    ag->signals = NULL;
    if (ag->allow_timer_open) {
        uv_close((uv_handle_t *)&ag->allow_timer, NULL);
        ag->allow_timer_open = 0;
    }
    uv_stop(ag->loop); /* the engine's wake-up handle would keep the loop alive */
}

static void on_engine_drained(struct http_server *srv, void *ud)
{
    struct agent *ag = ud;
    (void)srv;
    ag->engine_drained = 1;
    finish(ag);
}

static void on_sidecar_drained(struct http_server *srv, void *ud)
{
    struct agent *ag = ud;
    (void)srv;
    ag->sidecar_drained = 1;
    double left = ag->drain_deadline - tandem_now_s();
    http_server_drain(ag->engine_srv, left > 0 ? (uint64_t)(left * 1000) : 0, on_engine_drained,
                      ag);
    finish(ag);
}

static void on_closed(struct http_server *srv, void *ud)
{
    struct agent *ag = ud;
    if (srv == ag->sidecar_srv) {
        ag->sidecar_drained = 1;
    } else {
        ag->engine_drained = 1;
    }
}

/* After a start-up failure (or a completed drain): closes what is still open and runs the loop
 * until the servers' handles are closed (the engine server's wake-up handle keeps the loop
 * alive, so not uv_run until idle). */
static void close_servers(struct agent *ag)
{
    struct http_server *srvs[2] = {ag->sidecar_srv, ag->engine_srv};
    int *done[2] = {&ag->sidecar_drained, &ag->engine_drained};
    for (int i = 0; i < 2; i++) {
        if (!srvs[i]) {
            *done[i] = 1;
        } else if (!*done[i] && !http_server_draining(srvs[i])) {
            http_server_drain(srvs[i], 0, on_closed, ag);
        }
    }
    for (int i = 0; i < 10000 && !(ag->sidecar_drained && ag->engine_drained); i++) {
        uv_run(ag->loop, UV_RUN_ONCE);
    }
}

static void on_signal(void *ud, int signum, int immediate)
{
    struct agent *ag = ud;
    (void)signum;
    engine_shutdown(ag->e);
    if (immediate) {
        log_warn("second signal: closing all connections now");
        ag->drain_deadline = tandem_now_s();
        http_server_drain(ag->sidecar_srv, 0, on_sidecar_drained, ag);
        http_server_drain(ag->engine_srv, 0, on_engine_drained, ag);
        return;
    }
    log_info("draining in-flight requests (up to %lld ms)", (long long)ag->fl->drain_ms);
    ag->drain_deadline = tandem_now_s() + (double)ag->fl->drain_ms / 1000.0;
    http_server_drain(ag->sidecar_srv, (uint64_t)ag->fl->drain_ms, on_sidecar_drained, ag);
}

static void on_allow_timer(uv_timer_t *t)
{
    struct agent *ag = t->data;
    sidecar_set_allowlist_size(ag->sc, allowlist_size(ag->allow));
}

/* ---- start-up ---- */

static struct http_server *new_server(struct agent *ag, struct metrics_registry *reg, int port,
                                      const char *prefix, const char *name, char *err,
                                      size_t errlen)
{
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = ag->fl->host;
    hc.port = port;
    hc.metrics = reg;
    hc.metrics_prefix = prefix;
    hc.metrics_path = "/metrics";
    hc.server_name = name;
    hc.max_body = 64u << 20;
    return http_server_new(ag->loop, &hc, err, errlen);
}

static int start_kv_events(struct agent *ag, const model *m)
{
    const struct agent_flags *f = ag->fl;
    if (!f->kv_events_port) {
        log_info("KV events off (--kv-events-port 0)");
        return 0;
    }
    char ep[300], rep[300], topic[600], err[512] = "";
    const char *fmt = strchr(f->host, ':') ? "tcp://[%s]:%lld" : "tcp://%s:%lld";
    snprintf(ep, sizeof ep, fmt, f->host, (long long)f->kv_events_port);
    snprintf(rep, sizeof rep, fmt, f->host, (long long)f->kv_replay_port);
    snprintf(topic, sizeof topic, strchr(f->host, ':') ? "kv@[%s]:%lld@%s" : "kv@%s:%lld@%s",
             f->host, (long long)f->port, f->served ? f->served : m->name);
    struct kv_events_config kc = {
        .endpoint = ep,
        .replay_endpoint = f->kv_replay_port ? rep : NULL,
        .topic = topic,
        .force_bind = 1, /* each pod binds its own address; a wildcard would take every IP */
    };
    ag->kv = kv_events_new(&kc, err, sizeof err);
    if (!ag->kv) {
        log_error("cannot start the KV event publisher: %s", err);
        return -1;
    }
    log_info("KV events on %s (replay %s), topic %s", ep, f->kv_replay_port ? rep : "off", topic);
    return 0;
}

/* The KV connector (--kv-connector nixlv2): options from --kv-connector-config (vLLM's
 * kv_connector_extra_config key enforce_handshake_compat; abort_request_timeout in seconds) and
 * vLLM's environment (VLLM_NIXL_ABORT_REQUEST_TIMEOUT). */
static int start_kv_transfer(struct agent *ag, struct metrics_registry *reg)
{
    const struct agent_flags *f = ag->fl;
    struct kvconn_config kc = f->kv_opts;
    kc.host = f->host;
    kc.port = (int)f->kv_transfer_port;
    kc.metrics = reg;
    char err[512] = "";
    ag->kvc = kvconn_new(ag->e, &kc, err, sizeof err);
    if (!ag->kvc) {
        log_error("cannot start the KV transfer endpoint: %s", err);
        return -1;
    }
    return 0;
}

static int run(struct agent_flags *f)
{
    struct openai_defaults defaults;
    /* The P/D connector registers the KV pools with UCX: GPU pools need a UCX built with CUDA
     * (cuda_copy/cuda_ipc). --device cuda without one fails at the transport's start, naming
     * it; --device auto then keeps the KV cache in host memory. */
    if (f->connector && f->ef.tensor_parallel_size > 1) {
        return cli_die("--kv-connector with --tensor-parallel-size %d: KV transfer moves one "
                       "pool per layer, and a tensor-parallel engine has one per rank; run P/D "
                       "pods with --tensor-parallel-size 1",
                       (int)f->ef.tensor_parallel_size);
    }
    if (f->connector) {
        /* one block table per request is what the connector moves (vLLM turns its hybrid KV
         * cache manager off for a kv-transfer-config as well) */
        f->ef.cfg.disable_hybrid_kv_cache_manager = true;
    }
    char why[256] = "";
    if (f->connector && strcmp(f->ef.device, "auto") == 0 && !kvx_ucx_has_cuda(why, sizeof why)) {
        log_info("--device auto: %s, and the P/D connector registers the KV cache with it: using "
                 "the cpu backend",
                 why);
        f->ef.device = "cpu";
    }
    if (check_model_format(f) != 0 || engine_flags_check(&f->ef) != 0 ||
        engine_flags_generation_defaults(&f->ef, &defaults) != 0) {
        return 2;
    }
    char err[1024] = "", url[2048];
    if (otlp_endpoint_resolve(f->otlp_endpoint, url, sizeof url, err, sizeof err) < 0) {
        return cli_die("%s", err);
    }
    const tokenizer *tok = NULL;
    model *m = engine_flags_load_model(f->ef.model_path, &tok);
    if (!m) {
        return 1;
    }
    if (engine_flags_device_memory(&f->ef, m) != 0) {
        tokenizer_free((tokenizer *)tok);
        model_free(m);
        return 2;
    }
    int rc = 1;
    struct otlp_exporter *otlp = NULL;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct agent ag = {.fl = f, .loop = &loop};
    struct metrics_registry *reg = metrics_registry_new();
    if (!reg) {
        log_error("out of memory");
        goto out;
    }
    if (otlp_setup(f->otlp_endpoint, reg, &otlp, err, sizeof err) != 0) {
        log_error("tracing: %s", err);
        goto out;
    }
    if (f->ssrf) {
        char ns[256];
        const char *slash = strchr(f->pool, '/');
        snprintf(ns, sizeof ns, "%.*s", (int)(slash - f->pool), f->pool);
        struct allowlist_config ac = {.ns = ns, .pool = slash + 1, .pool_group = f->pool_group};
        ag.allow = allowlist_new(&ac, err, sizeof err);
        if (!ag.allow) {
            log_error("SSRF protection: %s", err);
            goto out;
        }
    }
    if (start_kv_events(&ag, m) != 0) {
        goto out;
    }
    engine_config *c = &f->ef.cfg;
    c->metrics = reg;
    c->served_model_name = f->served;
    if (ag.kv) {
        kv_events_sink(ag.kv, &c->kv_events);
    }
    ag.e = engine_new(m, tok, c, err, sizeof err);
    if (!ag.e) {
        log_error("cannot start the engine: %s", err);
        goto out;
    }
    if (engine_flags_load_loras(&f->ef, ag.e) != 0) {
        goto out;
    }
    engine_stats st;
    engine_get_stats(ag.e, &st);
    log_info("role %s; model %s (%s, %d layers, dim %d, vocab %d, %.1f M params); KV cache %d "
             "blocks of %d tokens; max_model_len %d",
             f->role, m->name, model_arch_name(m->cfg.arch), m->cfg.n_layer, m->cfg.n_embd,
             m->cfg.n_vocab, (double)m->n_params / 1e6, st.num_blocks, st.block_size,
             st.max_model_len);
    if (f->connector && start_kv_transfer(&ag, reg) != 0) {
        goto out;
    }

    ag.engine_srv = new_server(&ag, reg, (int)f->engine_port, "tandem_engine_", "tandem-engine",
                               err, sizeof err);
    ag.sidecar_srv = ag.engine_srv ? new_server(&ag, reg, (int)f->port, "tandem_agent_",
                                                "tandem-agent", err, sizeof err)
                                   : NULL;
    if (!ag.sidecar_srv) {
        log_error("%s", err);
        goto out;
    }
    struct engine_server_config sc = {
        .served_model_name = f->served,
        .model_root = f->ef.model_path,
        .chat_template = f->ef.chat_template,
        .log_requests = f->log_requests,
        .defaults = &defaults,
        /* /tokenizer_info tells routers the chain the engine hashes with */
        .prefix_hash_seed = f->ef.cfg.prefix_hash_seed,
        .disable_prefix_caching = f->ef.cfg.disable_prefix_caching,
        .tracer = otlp_tracer(otlp, "tandem-engine", NULL),
        /* the sidecar passes Authorization through; the engine checks it, as vLLM does */
        .api_keys = f->ef.api_keys,
        .n_api_keys = f->ef.n_api_keys,
        .enable_auto_tool_choice = f->ef.enable_auto_tool_choice,
        .tool_call_parser = f->ef.tool_call_parser,
        .pooler_config = f->ef.pooler_config,
    };
    ag.es = engine_server_new(&loop, ag.engine_srv, ag.e, &sc, err, sizeof err);
    if (!ag.es) {
        log_error("cannot start the engine's server: %s", err);
        goto out;
    }
    char engine_url[300], self[300];
    const char *lit = strchr(f->host, ':') ? "[%s]:%lld" : "%s:%lld";
    char hp[280];
    snprintf(hp, sizeof hp, lit, f->host, (long long)f->engine_port);
    snprintf(engine_url, sizeof engine_url, "http://%s", hp);
    snprintf(self, sizeof self, lit, f->host, (long long)f->port);
    struct sidecar_config scc = {
        .engine_url = engine_url,
        .engine_srv = ag.engine_srv,
        .self_host = self,
        .connector = f->connector,
        .allow = ag.allow ? allowlist_allows : NULL,
        .allow_ud = ag.allow,
        .prefiller_use_tls = f->prefiller_tls,
        .prefiller_insecure_tls = f->prefiller_insecure,
        .prefill_timeout_ms = (long)f->prefill_timeout_ms,
        .metrics = reg,
        .tracer = otlp_tracer(otlp, otlp_service_name("tandem-sidecar"), NULL),
    };
    ag.sc = sidecar_new(&loop, ag.sidecar_srv, &scc, err, sizeof err);
    if (!ag.sc) {
        log_error("cannot start the sidecar: %s", err);
        goto out;
    }
    if (engine_start(ag.e) != 0) {
        log_error("cannot start the engine thread");
        goto out;
    }
    if (http_server_start(ag.engine_srv, err, sizeof err) != 0 ||
        http_server_start(ag.sidecar_srv, err, sizeof err) != 0) {
        log_error("cannot start serving: %s", err);
        goto out;
    }
    if (ag.allow) {
        sidecar_set_allowlist_size(ag.sc, allowlist_size(ag.allow));
        uv_timer_init(&loop, &ag.allow_timer);
        ag.allow_timer.data = &ag;
        ag.allow_timer_open = 1;
        uv_timer_start(&ag.allow_timer, on_allow_timer, 1000, 1000);
        uv_unref((uv_handle_t *)&ag.allow_timer);
    }
    if (ag.kv) {
        /* a restarted pod's cache is empty: consumers drop what its last life published */
        kv_events_publish_all_cleared(ag.kv);
    }
    ag.signals = shutdown_new(&loop, on_signal, &ag);
    if (!ag.signals) {
        log_error("cannot install signal handlers");
        goto out;
    }
    log_info("serving %s: sidecar http://%s, engine %s", f->served ? f->served : m->name, self,
             engine_url);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = ag.sidecar_drained && ag.engine_drained ? 0 : 1;
out:
    if (ag.signals) {
        shutdown_free(ag.signals);
    }
    if (ag.allow_timer_open) {
        uv_close((uv_handle_t *)&ag.allow_timer, NULL);
    }
    if (ag.e) {
        engine_stop(ag.e);
    }
    kvconn_free(ag.kvc); /* loads still running end; the engine frees what they held */
    if (ag.kv) {
        if (rc == 0) {
            kv_events_publish_all_cleared(ag.kv); /* the cache goes with the process */
        }
        kv_events_close(ag.kv, 2000);
    }
    close_servers(&ag);
    sidecar_free(ag.sc);
    if (ag.e) {
        engine_free(ag.e); /* aborts what is left; outputs land in the server's queue */
    }
    engine_server_free(ag.es);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_server_free(ag.sidecar_srv);
    http_server_free(ag.engine_srv);
    uv_loop_close(&loop);
    kv_events_free(ag.kv);
    allowlist_free(ag.allow);
    otlp_exporter_free(otlp); /* the last spans go out; its counters live in reg */
    metrics_registry_free(reg);
    tokenizer_free((tokenizer *)tok);
    model_free(m);
    return rc;
}

int agent_serve_main(int argc, char **argv)
{
    struct agent_flags f;
    memset(&f, 0, sizeof f);
    cli_set_prog("tandem-agent");
    int rc = parse_flags(argc, argv, &f);
    if (rc == 0) {
        log_init("tandem-agent", f.level, f.format);
        rc = run(&f);
    } else if (rc == 1) {
        rc = 0;
    }
    engine_flags_free(&f.ef);
    return rc;
}
