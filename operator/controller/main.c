/*
 * tandem-operator: reconciles InferencePool and InferenceModel (tandem.dev/v1alpha1) into the
 * prefill/decode workloads, the endpoint picker and status. This file is only the command line:
 * flags (with environment fallbacks), logging, the Kubernetes client; manager.c does the rest.
 *
 * Exit status: 0 after SIGTERM/SIGINT, 1 when it cannot start or loses the leader Lease, 2 on bad
 * usage. docs/operations.md documents every flag.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kube/client.h"
#include "lib/kube/config.h"
#include "lib/log.h"
#include "lib/version.h"
#include "operator/controller/manager.h"

#define MAX_NAMESPACES 64
#define SA_NAMESPACE   "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-operator [flags]\n"
            "  --kubeconfig PATH                  kubeconfig (else $KUBECONFIG, in-cluster, "
            "~/.kube/config)\n"
            "  --context NAME                     kubeconfig context (default: current-context)\n"
            "  --namespace NS[,NS...]             watch only these namespaces (repeatable; "
            "$WATCH_NAMESPACE; default all)\n"
            "  --leader-elect[=true|false]        elect a leader through a Lease (default true)\n"
            "  --leader-election-namespace NS     namespace of the Lease (default $POD_NAMESPACE, "
            "the pod's\n"
            "                                     namespace, else the kubeconfig namespace)\n"
            "  --leader-election-id NAME          name of the Lease (default "
            "tandem-operator-leader)\n"
            "  --lease-duration DUR               (default 15s)\n"
            "  --renew-deadline DUR               (default 10s)\n"
            "  --retry-period DUR                 (default 2s)\n"
            "  --metrics-bind-address ADDR        /metrics (default :8080; 0 disables)\n"
            "  --health-probe-bind-address ADDR   /healthz and /readyz (default :8081; 0 "
            "disables)\n"
            "  --log-level debug|info|warn|error  (default info; $TANDEM_LOG_LEVEL)\n"
            "  --log-format text|json             (default text; $TANDEM_LOG_FORMAT)\n"
            "  --agent-image IMAGE                image of model workers without "
            "spec.runtime.image\n"
            "                                     (default $TANDEM_AGENT_IMAGE, else "
            "tandem-agent:" TANDEM_VERSION ")\n"
            "  --epp-image IMAGE                  endpoint picker image without spec.epp.image\n"
            "                                     (default $TANDEM_EPP_IMAGE, else "
            "tandem-epp:" TANDEM_VERSION ")\n"
            "  --otlp-traces-endpoint URL         OTLP/HTTP traces collector for agent and EPP "
            "pods\n"
            "                                     (their OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; "
            "default\n"
            "                                     $TANDEM_OTLP_TRACES_ENDPOINT, else none)\n"
            "  --workers N                        concurrent reconciles per controller (default "
            "2)\n"
            "  --resync-period DUR                re-reconcile everything this often (default "
            "10m; 0 off)\n"
            "  --kube-api-qps N, --kube-api-burst N  client-side rate limit (default 200, 400; "
            "0 off)\n"
            "  --graceful-shutdown-timeout DUR    wait for reconciles in flight at SIGTERM "
            "(default 30s)\n"
            "  --version                          print the version and exit\n"
            "DUR is a Go duration: 500ms, 15s, 10m, 1h30m.\n");
}

enum {
    OPT_KUBECONFIG = 1000,
    OPT_CONTEXT,
    OPT_NAMESPACE,
    OPT_LEADER_ELECT,
    OPT_LE_NAMESPACE,
    OPT_LE_ID,
    OPT_LEASE,
    OPT_RENEW,
    OPT_RETRY,
    OPT_METRICS,
    OPT_HEALTH,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT,
    OPT_AGENT_IMAGE,
    OPT_EPP_IMAGE,
    OPT_OTLP,
    OPT_WORKERS,
    OPT_RESYNC,
    OPT_QPS,
    OPT_BURST,
    OPT_GRACE,
    OPT_VERSION,
    OPT_HELP,
};

static const struct option long_opts[] = {
    {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"namespace", required_argument, NULL, OPT_NAMESPACE},
    {"leader-elect", optional_argument, NULL, OPT_LEADER_ELECT},
    {"leader-election-namespace", required_argument, NULL, OPT_LE_NAMESPACE},
    {"leader-election-id", required_argument, NULL, OPT_LE_ID},
    {"lease-duration", required_argument, NULL, OPT_LEASE},
    {"renew-deadline", required_argument, NULL, OPT_RENEW},
    {"retry-period", required_argument, NULL, OPT_RETRY},
    {"metrics-bind-address", required_argument, NULL, OPT_METRICS},
    {"health-probe-bind-address", required_argument, NULL, OPT_HEALTH},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {"agent-image", required_argument, NULL, OPT_AGENT_IMAGE},
    {"epp-image", required_argument, NULL, OPT_EPP_IMAGE},
    {"otlp-traces-endpoint", required_argument, NULL, OPT_OTLP},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"resync-period", required_argument, NULL, OPT_RESYNC},
    {"kube-api-qps", required_argument, NULL, OPT_QPS},
    {"kube-api-burst", required_argument, NULL, OPT_BURST},
    {"graceful-shutdown-timeout", required_argument, NULL, OPT_GRACE},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

struct flags {
    const char *kubeconfig, *context;
    char *ns_storage[MAX_NAMESPACES]; /* strdup'd namespace names */
    size_t n_ns;
    int leader_elect;
    const char *le_namespace, *le_id;
    long lease_ms, renew_ms, retry_ms, resync_ms, grace_ms;
    const char *metrics_addr, *health_addr;
    enum log_level level;
    enum log_format format;
    const char *agent_image, *epp_image, *otlp;
    long workers, qps, burst;
};

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int bad(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "tandem-operator: --%s=%s: %s\n", flag, value, why);
    fprintf(stderr, "run 'tandem-operator --help' for usage\n");
    return 2;
}

/* Adds the comma-separated namespaces of list (duplicates dropped). */
static int add_namespaces(struct flags *f, const char *list)
{
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len > 0) {
            int dup = 0;
            for (size_t i = 0; i < f->n_ns; i++) {
                dup |= strlen(f->ns_storage[i]) == len && strncmp(f->ns_storage[i], p, len) == 0;
            }
            if (!dup) {
                if (f->n_ns >= MAX_NAMESPACES || len > 63) {
                    return -EINVAL;
                }
                f->ns_storage[f->n_ns] = strndup(p, len);
                if (!f->ns_storage[f->n_ns]) {
                    return -ENOMEM;
                }
                f->n_ns++;
            }
        }
        p += len;
        if (*p == ',') {
            p++;
        }
    }
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *const no[] = {"0", "f", "F", "false", "FALSE", "False"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end = NULL;
    if (!s || !*s) {
        return -EINVAL;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < min || v > max) {
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static int duration_flag(const char *name, const char *value, long *out)
{
    if (manager_parse_duration(value, out) != 0) {
        return bad(name, value, "expected a duration such as 15s, 10m or 1h30m");
    }
    return 0;
}

/* 0 ok, 2 usage error, -1 "exit 0 now" (--help, --version). */
static int parse_flags(int argc, char **argv, struct flags *f)
{
    int c, rc;
    int ns_from_flag = 0;
    while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (c) {
        case OPT_KUBECONFIG:
            f->kubeconfig = optarg;
            break;
        case OPT_CONTEXT:
            f->context = optarg;
            break;
        case OPT_NAMESPACE:
            ns_from_flag = 1;
            if (add_namespaces(f, optarg) != 0) {
                return bad("namespace", optarg, "too many namespaces or a name over 63 bytes");
            }
            break;
        case OPT_LEADER_ELECT:
            if (optarg && parse_bool(optarg, &f->leader_elect) != 0) {
                return bad("leader-elect", optarg, "expected true or false");
            }
            if (!optarg) {
                f->leader_elect = 1;
            }
            break;
        case OPT_LE_NAMESPACE:
            f->le_namespace = optarg;
            break;
        case OPT_LE_ID:
            f->le_id = optarg;
            break;
        case OPT_LEASE:
            if ((rc = duration_flag("lease-duration", optarg, &f->lease_ms)) != 0) {
                return rc;
            }
            break;
        case OPT_RENEW:
            if ((rc = duration_flag("renew-deadline", optarg, &f->renew_ms)) != 0) {
                return rc;
            }
            break;
        case OPT_RETRY:
            if ((rc = duration_flag("retry-period", optarg, &f->retry_ms)) != 0) {
                return rc;
            }
            break;
        case OPT_RESYNC:
            if ((rc = duration_flag("resync-period", optarg, &f->resync_ms)) != 0) {
                return rc;
            }
            break;
        case OPT_GRACE:
            if ((rc = duration_flag("graceful-shutdown-timeout", optarg, &f->grace_ms)) != 0) {
                return rc;
            }
            break;
        case OPT_METRICS:
        case OPT_HEALTH: {
            char host[128];
            int port;
            if (manager_parse_bind_address(optarg, host, sizeof(host), &port) < 0) {
                return bad(c == OPT_METRICS ? "metrics-bind-address" : "health-probe-bind-address",
                           optarg, "expected [host]:port, :port or 0");
            }
            if (c == OPT_METRICS) {
                f->metrics_addr = optarg;
            } else {
                f->health_addr = optarg;
            }
            break;
        }
        case OPT_LOG_LEVEL:
            if (log_parse_level(optarg, &f->level) != 0) {
                return bad("log-level", optarg, "expected debug, info, warn or error");
            }
            break;
        case OPT_LOG_FORMAT:
            if (log_parse_format(optarg, &f->format) != 0) {
                return bad("log-format", optarg, "expected text or json");
            }
            break;
        case OPT_AGENT_IMAGE:
            f->agent_image = optarg;
            break;
        case OPT_EPP_IMAGE:
            f->epp_image = optarg;
            break;
        case OPT_OTLP:
            f->otlp = optarg;
            break;
        case OPT_WORKERS:
            if (parse_long(optarg, 1, 64, &f->workers) != 0) {
                return bad("workers", optarg, "expected an integer from 1 to 64");
            }
            break;
        case OPT_QPS:
            if (parse_long(optarg, 0, 100000, &f->qps) != 0) {
                return bad("kube-api-qps", optarg, "expected an integer from 0 to 100000");
            }
            break;
        case OPT_BURST:
            if (parse_long(optarg, 1, 100000, &f->burst) != 0) {
                return bad("kube-api-burst", optarg, "expected an integer from 1 to 100000");
            }
            break;
        case OPT_VERSION:
            printf("%s %s\n", OPERATOR_NAME, OPERATOR_VERSION);
            return -1;
        case OPT_HELP:
            usage(stdout);
            return -1;
        default:
            fprintf(stderr, "run 'tandem-operator --help' for usage\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem-operator: unexpected argument: %s\n", argv[optind]);
        fprintf(stderr, "run 'tandem-operator --help' for usage\n");
        return 2;
    }
    if (!ns_from_flag && env("WATCH_NAMESPACE") && add_namespaces(f, env("WATCH_NAMESPACE")) != 0) {
        fprintf(stderr, "tandem-operator: $WATCH_NAMESPACE: too many namespaces\n");
        return 2;
    }
    if (f->leader_elect) {
        if (!(f->lease_ms > f->renew_ms)) {
            fprintf(stderr,
                    "tandem-operator: --lease-duration (%ld ms) must be greater than "
                    "--renew-deadline (%ld ms)\n",
                    f->lease_ms, f->renew_ms);
            return 2;
        }
        if (!((double)f->renew_ms > 1.2 * (double)f->retry_ms) || f->retry_ms <= 0) {
            fprintf(stderr,
                    "tandem-operator: --renew-deadline (%ld ms) must be greater than 1.2 "
                    "x --retry-period (%ld ms), and the retry period positive\n",
                    f->renew_ms, f->retry_ms);
            return 2;
        }
        if (f->lease_ms < 1000) {
            fprintf(stderr, "tandem-operator: --lease-duration must be at least 1s\n");
            return 2;
        }
    }
    return 0;
}

/* The namespace the pod runs in ($POD_NAMESPACE or the service-account file), or NULL. */
static char *pod_namespace(void)
{
    if (env("POD_NAMESPACE")) {
        return strdup(env("POD_NAMESPACE"));
    }
    FILE *f = fopen(SA_NAMESPACE, "r");
    if (!f) {
        return NULL;
    }
    char line[256] = "";
    char *got = fgets(line, sizeof(line), f);
    fclose(f);
    if (!got) {
        return NULL;
    }
    line[strcspn(line, "\r\n")] = '\0';
    return line[0] ? strdup(line) : NULL;
}

int main(int argc, char **argv)
{
    /* Two malloc arenas instead of up to 8 per core: the operator runs ~30 mostly idle threads
     * (informers, workers, elector), and per-thread arenas would each keep pages resident. */
    mallopt(M_ARENA_MAX, 2);
    struct flags f = {
        .leader_elect = 1,
        .le_id = "tandem-operator-leader",
        .lease_ms = 15000,
        .renew_ms = 10000,
        .retry_ms = 2000,
        .resync_ms = 600000,
        .grace_ms = 30000,
        .metrics_addr = ":8080",
        .health_addr = ":8081",
        .level = LOGL_INFO,
        .format = LOG_FORMAT_TEXT,
        .agent_image = env("TANDEM_AGENT_IMAGE"),
        .epp_image = env("TANDEM_EPP_IMAGE"),
        .otlp = env("TANDEM_OTLP_TRACES_ENDPOINT"),
        .workers = 2,
        .qps = 200,
        .burst = 400,
    };
    if (env("TANDEM_LOG_LEVEL") && log_parse_level(env("TANDEM_LOG_LEVEL"), &f.level) != 0) {
        fprintf(stderr, "tandem-operator: $TANDEM_LOG_LEVEL: unknown level\n");
        return 2;
    }
    if (env("TANDEM_LOG_FORMAT") && log_parse_format(env("TANDEM_LOG_FORMAT"), &f.format) != 0) {
        fprintf(stderr, "tandem-operator: $TANDEM_LOG_FORMAT: unknown format\n");
        return 2;
    }
    int rc = parse_flags(argc, argv, &f);
    int exit_code = rc == -1 ? 0 : rc;
    char *le_ns = NULL;
    struct kube_config *cfg = NULL;
    struct kube_client *client = NULL, *le_client = NULL;
    if (rc != 0) {
        goto out;
    }
    if (f.otlp && ((strncmp(f.otlp, "http://", 7) != 0 && strncmp(f.otlp, "https://", 8) != 0) ||
                   strpbrk(f.otlp, " \t\r\n"))) {
        fprintf(stderr,
                "tandem-operator: --otlp-traces-endpoint (or $TANDEM_OTLP_TRACES_ENDPOINT) %s: "
                "expected an http:// or https:// URL (OTLP/HTTP)\n",
                f.otlp);
        exit_code = 2;
        goto out;
    }
    log_init(OPERATOR_NAME, f.level, f.format);
    exit_code = 1;

    char err[512] = "";
    rc = kube_config_load(f.kubeconfig, f.context, &cfg, err, sizeof(err));
    if (rc != 0) {
        log_error("kubernetes configuration: %s", err);
        goto out;
    }
    struct kube_client_options co = {
        .user_agent = OPERATOR_NAME "/" OPERATOR_VERSION,
        /* below the renew deadline, so a hung request cannot cost the Lease */
        .timeout_ms = f.renew_ms / 2 < 10000 && f.renew_ms >= 2000 ? f.renew_ms / 2 : 10000,
        .qps = (double)f.qps,
        .burst = f.qps > 0 ? (int)f.burst : 0,
    };
    client = kube_client_new(cfg, &co, err, sizeof(err));
    if (!client) {
        log_error("kubernetes client: %s", err);
        goto out;
    }
    if (f.leader_elect) {
        struct kube_client_options lo = co;
        lo.qps = 0; /* renewals never wait behind reconciles */
        lo.burst = 0;
        le_client = kube_client_new(cfg, &lo, err, sizeof(err));
        if (!le_client) {
            log_error("kubernetes client: %s", err);
            goto out;
        }
    }
    if (!f.le_namespace) {
        le_ns = pod_namespace();
        f.le_namespace = le_ns ? le_ns : kube_client_namespace(client);
    }
    log_info("%s %s starting: API server %s, namespaces %s, leader election %s", OPERATOR_NAME,
             OPERATOR_VERSION, cfg->server, f.n_ns ? "(listed)" : "all",
             f.leader_elect ? "on" : "off");
    for (size_t i = 0; i < f.n_ns; i++) {
        log_info("watching namespace %s", f.ns_storage[i]);
    }
    struct manager_options mo = {
        .namespaces = (const char *const *)f.ns_storage,
        .n_namespaces = f.n_ns,
        .leader_elect = f.leader_elect,
        .leader_election_namespace = f.le_namespace,
        .leader_election_id = f.le_id,
        .lease_duration_ms = f.lease_ms,
        .renew_deadline_ms = f.renew_ms,
        .retry_period_ms = f.retry_ms,
        .metrics_addr = f.metrics_addr,
        .health_addr = f.health_addr,
        .agent_image = f.agent_image,
        .epp_image = f.epp_image,
        .otlp_traces_endpoint = f.otlp,
        .workers = (int)f.workers,
        .resync_s = f.resync_ms / 1000,
        .graceful_shutdown_ms = f.grace_ms,
        .leader_client = le_client,
    };
    struct manager *m = manager_new(client, &mo);
    if (!m) {
        log_error("cannot create the manager");
        goto out;
    }
    exit_code = manager_run(m);
    manager_free(m);

out:
    kube_client_free(le_client);
    kube_client_free(client);
    kube_config_free(cfg);
    free(le_ns);
    for (size_t i = 0; i < f.n_ns; i++) {
        free(f.ns_storage[i]);
    }
    return exit_code;
}
