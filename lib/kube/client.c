/*
 * The Kubernetes REST client (see client.h): request building, TLS and bearer-token auth,
 * retries with backoff, Status → error mapping, and counters.
 *
 * Connections: libcurl documents sharing one connection cache between concurrently running
 * threads as unsupported, so each call borrows an easy handle from a small pool instead; an easy
 * handle keeps its live connections across curl_easy_reset, so a sequence of calls reuses one
 * keep-alive connection, and concurrent calls use one connection each. DNS answers and TLS
 * sessions are shared by all handles through a CURLSH guarded by one mutex per data kind.
 */
#include "lib/kube/client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "lib/clock.h"
#include "lib/json.h"
#include "lib/log.h"

#define DEFAULT_USER_AGENT  "tandem/0.1.0"
#define DEFAULT_TIMEOUT_MS  30000
#define DEFAULT_RETRIES     5
#define DEFAULT_BACKOFF_MS  100
#define DEFAULT_BACKOFF_MAX 10000
#define MAX_RETRY_AFTER_MS  60000
#define TOKEN_REFRESH_MS    60000
#define EASY_POOL_MAX       16  /* idle easy handles kept (each may hold a live connection) */
#define JSON_RESPONSE_DEPTH 512 /* CRD schemas nest deeply */
#define MAX_LIST_PAGES      100000
#define ERROR_BODY_SNIPPET  200

const struct kube_resource KUBE_PODS = {"", "v1", "pods", "Pod", 1};
const struct kube_resource KUBE_SERVICES = {"", "v1", "services", "Service", 1};
const struct kube_resource KUBE_CONFIGMAPS = {"", "v1", "configmaps", "ConfigMap", 1};
const struct kube_resource KUBE_SECRETS = {"", "v1", "secrets", "Secret", 1};
const struct kube_resource KUBE_SERVICEACCOUNTS = {"", "v1", "serviceaccounts", "ServiceAccount",
                                                   1};
const struct kube_resource KUBE_EVENTS = {"", "v1", "events", "Event", 1};
const struct kube_resource KUBE_NAMESPACES = {"", "v1", "namespaces", "Namespace", 0};
const struct kube_resource KUBE_NODES = {"", "v1", "nodes", "Node", 0};
const struct kube_resource KUBE_ENDPOINTS = {"", "v1", "endpoints", "Endpoints", 1};
const struct kube_resource KUBE_DEPLOYMENTS = {"apps", "v1", "deployments", "Deployment", 1};
const struct kube_resource KUBE_REPLICASETS = {"apps", "v1", "replicasets", "ReplicaSet", 1};
const struct kube_resource KUBE_DAEMONSETS = {"apps", "v1", "daemonsets", "DaemonSet", 1};
const struct kube_resource KUBE_LEASES = {"coordination.k8s.io", "v1", "leases", "Lease", 1};
const struct kube_resource KUBE_ROLES = {"rbac.authorization.k8s.io", "v1", "roles", "Role", 1};
const struct kube_resource KUBE_ROLEBINDINGS = {"rbac.authorization.k8s.io", "v1", "rolebindings",
                                                "RoleBinding", 1};
const struct kube_resource KUBE_HPAS = {"autoscaling", "v2", "horizontalpodautoscalers",
                                        "HorizontalPodAutoscaler", 1};
const struct kube_resource KUBE_CRDS = {"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                        "CustomResourceDefinition", 0};

struct kube_client {
    struct kube_config *cfg;
    char *user_agent;
    char *field_manager; /* default for apply: the user agent up to '/' */
    long timeout_ms;
    int max_retries;
    long backoff_base_ms, backoff_max_ms;
    size_t max_response;

    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

    pthread_mutex_t pool_lock;
    CURL *pool[EASY_POOL_MAX];
    size_t npool;

    pthread_mutex_t token_lock;
    char *token;            /* current bearer token (NULL: none) */
    uint64_t token_read_ms; /* when token_file was last read */
    uint64_t (*now_ms)(void *ud);
    void *now_ud;

    pthread_mutex_t rate_lock;
    double qps;
    int burst;
    double rate_tokens;
    uint64_t rate_last_ms;

    atomic_ulong requests, reads, writes, watches, retries, errors;
    atomic_uint_fast64_t rng;
};

/* ---- process-wide curl init ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- clocks and randomness ---- */

static uint64_t mono_ms(void *ud)
{
    (void)ud;
    return (uint64_t)tandem_now_ms();
}

void kube__sleep_ms(long ms)
{
    if (ms <= 0) {
        return;
    }
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* splitmix64 over an atomic counter: cheap, thread-safe jitter. */
static double rand_unit(struct kube_client *c)
{
    uint64_t z = atomic_fetch_add(&c->rng, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 53);
}

long kube__backoff_ms(struct kube_client *c, int attempt)
{
    double d = (double)c->backoff_base_ms;
    for (int i = 0; i < attempt && d < (double)c->backoff_max_ms; i++) {
        d *= 2;
    }
    d *= 1.0 + rand_unit(c); /* jitter: [d, 2d) */
    if (d > (double)c->backoff_max_ms) {
        d = (double)c->backoff_max_ms;
    }
    return (long)d;
}

/* ---- share locks ---- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    struct kube_client *c = ud;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST) {
        pthread_mutex_lock(&c->share_locks[data]);
    }
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    struct kube_client *c = ud;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST) {
        pthread_mutex_unlock(&c->share_locks[data]);
    }
}

/* ---- error codes ---- */

static const char *reason_for_status(long status)
{
    switch (status) {
    case 400:
        return "BadRequest";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 405:
        return "MethodNotAllowed";
    case 406:
        return "NotAcceptable";
    case 409:
        return "Conflict";
    case 410:
        return "Expired";
    case 413:
        return "RequestEntityTooLarge";
    case 415:
        return "UnsupportedMediaType";
    case 422:
        return "Invalid";
    case 429:
        return "TooManyRequests";
    case 500:
        return "InternalError";
    case 503:
        return "ServiceUnavailable";
    case 504:
        return "Timeout";
    default:
        return status >= 500 ? "InternalError" : "Unknown";
    }
}

static int code_for(long status, const char *reason)
{
    static const struct {
        const char *reason;
        int rc;
    } by_reason[] = {
        {"NotFound", KUBE_ENOTFOUND},       {"AlreadyExists", KUBE_EEXISTS},
        {"Conflict", KUBE_ECONFLICT},       {"Invalid", KUBE_EINVALID},
        {"Expired", KUBE_EEXPIRED},         {"Gone", KUBE_EEXPIRED},
        {"Forbidden", KUBE_EFORBIDDEN},     {"Unauthorized", KUBE_EUNAUTHORIZED},
        {"TooManyRequests", KUBE_ETOOMANY}, {"BadRequest", KUBE_EBADREQUEST},
        {"Timeout", KUBE_ETIMEOUT},
    };
    /* the status code decides the class; the reason refines 409 (Conflict vs AlreadyExists)
     * and 410/504 */
    switch (status) {
    case 400:
        return KUBE_EBADREQUEST;
    case 401:
        return KUBE_EUNAUTHORIZED;
    case 403:
        return KUBE_EFORBIDDEN;
    case 404:
        return KUBE_ENOTFOUND;
    case 409:
        return strcmp(reason, "AlreadyExists") == 0 ? KUBE_EEXISTS : KUBE_ECONFLICT;
    case 410:
        return KUBE_EEXPIRED;
    case 422:
        return KUBE_EINVALID;
    case 429:
        return KUBE_ETOOMANY;
    case 504:
        return KUBE_ETIMEOUT;
    default:
        break;
    }
    if (status >= 500 && status <= 599) {
        return KUBE_ESERVER;
    }
    for (size_t i = 0; i < ARRAY_SIZE(by_reason); i++) {
        if (strcmp(reason, by_reason[i].reason) == 0) {
            return by_reason[i].rc;
        }
    }
    return KUBE_EOTHER;
}

/* Copies a printable, one-line snippet of s (len bytes) into dst. */
static void snippet(char *dst, size_t dstlen, const char *s, size_t len)
{
    size_t n = 0;
    if (dstlen == 0) {
        return;
    }
    for (size_t i = 0; i < len && n + 1 < dstlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : (ch == '\n' || ch == '\t' ? ' ' : '?');
    }
    while (n > 0 && dst[n - 1] == ' ') {
        n--;
    }
    dst[n] = '\0';
}

int kube__parse_json(const char *data, size_t len, struct json_object **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    if (len > INT32_MAX) {
        return tandem_fail(err, errlen, -E2BIG, "JSON document too large");
    }
    struct json_tokener *tok = json_tokener_new_ex(JSON_RESPONSE_DEPTH);
    if (!tok) {
        return -ENOMEM;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *obj = json_tokener_parse_ex(tok, data, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (jerr == json_tokener_continue) {
        tandem_set_err(err, errlen, "truncated JSON");
        json_object_put(obj);
        return -EINVAL;
    }
    if (jerr != json_tokener_success) {
        tandem_set_err(err, errlen, "invalid JSON at byte %zu: %s", end,
                       json_tokener_error_desc(jerr));
        json_object_put(obj);
        return -EINVAL;
    }
    for (size_t i = end; i < len; i++) {
        char ch = data[i];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') {
            tandem_set_err(err, errlen, "invalid JSON: trailing data at byte %zu", i);
            json_object_put(obj);
            return -EINVAL;
        }
    }
    *out = obj;
    return 0;
}

int kube_error_from_response(long http_status, const char *body, size_t len, struct kube_error *err)
{
    if (http_status >= 200 && http_status <= 299) {
        if (err) {
            memset(err, 0, sizeof(*err));
            err->http_status = (int)http_status;
        }
        return 0;
    }
    char reason[64] = "";
    char message[512] = "";
    struct json_object *st = NULL;
    if (body && len > 0 && kube__parse_json(body, len, &st, NULL, 0) == 0 && st &&
        json_object_is_type(st, json_type_object)) {
        struct json_object *v;
        if (json_object_object_get_ex(st, "reason", &v) &&
            json_object_is_type(v, json_type_string)) {
            snprintf(reason, sizeof(reason), "%s", json_object_get_string(v));
        }
        if (json_object_object_get_ex(st, "message", &v) &&
            json_object_is_type(v, json_type_string)) {
            snprintf(message, sizeof(message), "%s", json_object_get_string(v));
        }
    } else if (body && len > 0) {
        char snip[ERROR_BODY_SNIPPET + 1];
        snippet(snip, sizeof(snip), body, len);
        snprintf(message, sizeof(message), "HTTP %ld: %s", http_status, snip);
    }
    json_object_put(st);
    if (!reason[0]) {
        snprintf(reason, sizeof(reason), "%s", reason_for_status(http_status));
    }
    if (!message[0]) {
        snprintf(message, sizeof(message), "HTTP %ld %s", http_status, reason);
    }
    if (err) {
        err->http_status = (int)http_status;
        memcpy(err->reason, reason, sizeof(err->reason));
        memcpy(err->message, message, sizeof(err->message));
    }
    return code_for(http_status, reason);
}

void kube_error_set(struct kube_error *err, int http_status, const char *reason,
                    const char *message)
{
    if (!err) {
        return;
    }
    err->http_status = http_status;
    tandem_set_err(err->reason, sizeof(err->reason), "%s", reason);
    tandem_set_err(err->message, sizeof(err->message), "%s", message);
}

/* ---- construction ---- */

struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_options *opts, char *err,
                                    size_t errlen)
{
    if (!cfg || !cfg->server || !*cfg->server) {
        tandem_set_err(err, errlen, "kube client: config has no server");
        return NULL;
    }
    if (strncmp(cfg->server, "http://", 7) != 0 && strncmp(cfg->server, "https://", 8) != 0) {
        tandem_set_err(err, errlen, "kube client: server %s: expected an http:// or https:// URL",
                       cfg->server);
        return NULL;
    }
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        tandem_set_err(err, errlen, "kube client: curl_global_init failed: %s",
                       curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    struct kube_client *c = calloc(1, sizeof(*c));
    if (!c) {
        tandem_set_err(err, errlen, "kube client: out of memory");
        return NULL;
    }
    c->cfg = kube_config_dup(cfg);
    const char *ua =
        opts && opts->user_agent && *opts->user_agent ? opts->user_agent : DEFAULT_USER_AGENT;
    c->user_agent = strdup(ua);
    c->field_manager = strndup(ua, strcspn(ua, "/ "));
    if (!c->cfg || !c->user_agent || !c->field_manager) {
        goto err_oom;
    }
    if (!c->cfg->namespace && !(c->cfg->namespace = strdup("default"))) {
        goto err_oom;
    }
    c->timeout_ms = opts && opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->max_retries = !opts || opts->max_retries == 0 ? DEFAULT_RETRIES
                     : opts->max_retries < 0         ? 0
                                                     : opts->max_retries;
    c->backoff_base_ms =
        opts && opts->backoff_base_ms > 0 ? opts->backoff_base_ms : DEFAULT_BACKOFF_MS;
    c->backoff_max_ms =
        opts && opts->backoff_max_ms > 0 ? opts->backoff_max_ms : DEFAULT_BACKOFF_MAX;
    if (c->backoff_max_ms < c->backoff_base_ms) {
        c->backoff_max_ms = c->backoff_base_ms;
    }
    c->max_response = KUBE_MAX_RESPONSE;
    c->qps = opts && opts->qps > 0 ? opts->qps : 0;
    c->burst = opts && opts->burst > 0 ? opts->burst : 1;
    c->rate_tokens = c->burst;
    c->now_ms = mono_ms;
    c->rate_last_ms = mono_ms(NULL);
    c->token_read_ms = mono_ms(NULL);
    if (c->cfg->token && !(c->token = strdup(c->cfg->token))) {
        goto err_oom;
    }
    atomic_init(&c->rng, (uint64_t)(uintptr_t)c ^ (uint64_t)time(NULL) ^ mono_ms(NULL));
    for (size_t i = 0; i < ARRAY_SIZE(c->share_locks); i++) {
        pthread_mutex_init(&c->share_locks[i], NULL);
    }
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_mutex_init(&c->token_lock, NULL);
    pthread_mutex_init(&c->rate_lock, NULL);
    c->share = curl_share_init();
    if (!c->share || curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_USERDATA, c) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
        tandem_set_err(err, errlen, "kube client: curl_share_init failed");
        kube_client_free(c);
        return NULL;
    }
    return c;

err_oom:
    tandem_set_err(err, errlen, "kube client: out of memory");
    kube_client_free(c);
    return NULL;
}

void kube_client_free(struct kube_client *c)
{
    if (!c) {
        return;
    }
    for (size_t i = 0; i < c->npool; i++) {
        curl_easy_cleanup(c->pool[i]);
    }
    if (c->share) {
        curl_share_cleanup(c->share);
        for (size_t i = 0; i < ARRAY_SIZE(c->share_locks); i++) {
            pthread_mutex_destroy(&c->share_locks[i]);
        }
        pthread_mutex_destroy(&c->pool_lock);
        pthread_mutex_destroy(&c->token_lock);
        pthread_mutex_destroy(&c->rate_lock);
    }
    if (c->token) {
        memset(c->token, 0, strlen(c->token));
        free(c->token);
    }
    kube_config_free(c->cfg);
    free(c->user_agent);
    free(c->field_manager);
    free(c);
}

const char *kube_client_namespace(const struct kube_client *c)
{
    return c->cfg->namespace;
}

void kube_client_stats(const struct kube_client *c, struct kube_client_stats *out)
{
    out->requests = atomic_load(&c->requests);
    out->reads = atomic_load(&c->reads);
    out->writes = atomic_load(&c->writes);
    out->watches = atomic_load(&c->watches);
    out->retries = atomic_load(&c->retries);
    out->errors = atomic_load(&c->errors);
}

void kube_client_set_clock(struct kube_client *c, uint64_t (*now_ms)(void *ud), void *ud)
{
    pthread_mutex_lock(&c->token_lock);
    c->now_ms = now_ms ? now_ms : mono_ms;
    c->now_ud = now_ms ? ud : NULL;
    c->token_read_ms = c->now_ms(c->now_ud);
    pthread_mutex_unlock(&c->token_lock);
}

void kube_client_set_max_response(struct kube_client *c, size_t max)
{
    c->max_response = max == 0 || max > KUBE_MAX_RESPONSE ? KUBE_MAX_RESPONSE : max;
}

void kube__count(struct kube_client *c, enum kube__counter which)
{
    switch (which) {
    case KUBE__REQUEST:
        atomic_fetch_add(&c->requests, 1);
        break;
    case KUBE__READ:
        atomic_fetch_add(&c->reads, 1);
        break;
    case KUBE__WRITE:
        atomic_fetch_add(&c->writes, 1);
        break;
    case KUBE__WATCH:
        atomic_fetch_add(&c->watches, 1);
        break;
    case KUBE__RETRY:
        atomic_fetch_add(&c->retries, 1);
        break;
    case KUBE__ERROR:
        atomic_fetch_add(&c->errors, 1);
        break;
    }
}

/* ---- token ---- */

/* Re-reads token_file when forced or when the last read is TOKEN_REFRESH_MS old; a failed read
 * keeps the previous token. Returns a copy of the current token (NULL: none or OOM). */
static char *current_token(struct kube_client *c, int force)
{
    pthread_mutex_lock(&c->token_lock);
    const char *file = c->cfg->token_file;
    uint64_t now = c->now_ms(c->now_ud);
    if (file && (force || now - c->token_read_ms >= TOKEN_REFRESH_MS)) {
        FILE *f = fopen(file, "re");
        c->token_read_ms = now;
        if (f) {
            char buf[16384];
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            fclose(f);
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                             buf[n - 1] == '\t')) {
                n--;
            }
            buf[n] = '\0';
            if (n > 0) {
                char *t = strdup(buf);
                if (t) {
                    if (c->token) {
                        memset(c->token, 0, strlen(c->token));
                        free(c->token);
                    }
                    c->token = t;
                }
            }
            memset(buf, 0, sizeof(buf));
        } else {
            log_warn("kube client: re-reading token file %s: %s (keeping the previous token)", file,
                     strerror(errno));
        }
    }
    char *copy = c->token ? strdup(c->token) : NULL;
    pthread_mutex_unlock(&c->token_lock);
    return copy;
}

void kube__token_invalidate(struct kube_client *c)
{
    char *t = current_token(c, 1);
    if (t) {
        memset(t, 0, strlen(t));
        free(t);
    }
}

long kube__timeout_ms(const struct kube_client *c)
{
    return c->timeout_ms;
}

int kube__has_token_file(const struct kube_client *c)
{
    return c->cfg->token_file != NULL;
}

/* ---- client-side rate limit ---- */

void kube__rate_wait(struct kube_client *c)
{
    if (c->qps <= 0) {
        return;
    }
    for (;;) {
        long wait_ms;
        pthread_mutex_lock(&c->rate_lock);
        uint64_t now = mono_ms(NULL);
        c->rate_tokens += (double)(now - c->rate_last_ms) * c->qps / 1000.0;
        c->rate_last_ms = now;
        if (c->rate_tokens > c->burst) {
            c->rate_tokens = c->burst;
        }
        if (c->rate_tokens >= 1.0) {
            c->rate_tokens -= 1.0;
            pthread_mutex_unlock(&c->rate_lock);
            return;
        }
        wait_ms = (long)((1.0 - c->rate_tokens) * 1000.0 / c->qps) + 1;
        pthread_mutex_unlock(&c->rate_lock);
        kube__sleep_ms(wait_ms);
    }
}

/* ---- easy handles ---- */

static CURL *easy_get(struct kube_client *c)
{
    CURL *e = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool > 0) {
        e = c->pool[--c->npool];
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (e) {
        curl_easy_reset(e); /* keeps live connections, DNS and TLS session caches */
        return e;
    }
    return curl_easy_init();
}

static void easy_put(struct kube_client *c, CURL *e)
{
    pthread_mutex_lock(&c->pool_lock);
    if (c->npool < EASY_POOL_MAX) {
        c->pool[c->npool++] = e;
        e = NULL;
    }
    pthread_mutex_unlock(&c->pool_lock);
    if (e) {
        curl_easy_cleanup(e);
    }
}

static int token_is_clean(const char *t)
{
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            return 0;
        }
    }
    return 1;
}

int kube__easy_setup(struct kube_client *c, void *easy, const char *path_and_query,
                     const char *content_type, int force_token, struct curl_slist **headers,
                     char *err, size_t errlen)
{
    CURL *e = easy;
    *headers = NULL;
    size_t ulen = strlen(c->cfg->server) + strlen(path_and_query) + 1;
    char *url = malloc(ulen);
    if (!url) {
        return -ENOMEM;
    }
    snprintf(url, ulen, "%s%s", c->cfg->server, path_and_query);
    CURLcode cc = curl_easy_setopt(e, CURLOPT_URL, url);
    free(url); /* libcurl copies string options */
    if (cc != CURLE_OK) {
        return tandem_fail(err, errlen, -EINVAL, "bad URL: %s", curl_easy_strerror(cc));
    }
    curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent);
    if (c->cfg->ca_pem) {
        struct curl_blob blob = {c->cfg->ca_pem, c->cfg->ca_pem_len, CURL_BLOB_NOCOPY};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &blob);
        /* trust only the cluster's CA, not the system bundle as well (kubectl does the same) */
        curl_easy_setopt(e, CURLOPT_CAINFO, NULL);
        curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    }
    if (c->cfg->client_cert_pem && c->cfg->client_key_pem) {
        struct curl_blob cert = {c->cfg->client_cert_pem, c->cfg->client_cert_pem_len,
                                 CURL_BLOB_NOCOPY};
        struct curl_blob key = {c->cfg->client_key_pem, c->cfg->client_key_pem_len,
                                CURL_BLOB_NOCOPY};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (c->cfg->insecure_skip_tls_verify) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (h && content_type) {
        char line[160];
        snprintf(line, sizeof(line), "Content-Type: %s", content_type);
        struct curl_slist *h2 = curl_slist_append(h, line);
        h = h2 ? h2 : (curl_slist_free_all(h), NULL);
    }
    if (h) {
        struct curl_slist *h2 = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
        h = h2 ? h2 : (curl_slist_free_all(h), NULL);
    }
    char *token = current_token(c, force_token);
    if (h && token && *token && token_is_clean(token)) {
        size_t n = strlen(token) + sizeof("Authorization: Bearer ");
        char *line = malloc(n);
        struct curl_slist *h2 = NULL;
        if (line) {
            snprintf(line, n, "Authorization: Bearer %s", token);
            h2 = curl_slist_append(h, line);
            memset(line, 0, n);
            free(line);
        }
        h = h2 ? h2 : (curl_slist_free_all(h), NULL);
    }
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    if (!h) {
        return -ENOMEM;
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    *headers = h;
    return 0;
}

/* ---- one request with retries ---- */

struct response {
    struct buf *body;
    int overflow;        /* body passed its cap */
    long retry_after_ms; /* -1: no Retry-After header */
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct response *r = ud;
    size_t n = size * nmemb;
    if (buf_append(r->body, ptr, n) != 0) {
        r->overflow = 1;
        return 0;
    }
    return n;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct response *r = ud;
    size_t n = size * nmemb;
    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        r->retry_after_ms = -1; /* a new response (after 100 Continue, say) */
    } else if (n > 12 && strncasecmp(ptr, "Retry-After:", 12) == 0) {
        const char *p = ptr + 12;
        const char *end = ptr + n;
        while (p < end && (*p == ' ' || *p == '\t')) {
            p++;
        }
        long secs = 0;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9' && secs < 1000000) {
            secs = secs * 10 + (*p - '0');
            p++;
            digits++;
        }
        if (digits > 0) { /* HTTP-date values are ignored: the backoff applies */
            r->retry_after_ms = secs * 1000 > MAX_RETRY_AFTER_MS ? MAX_RETRY_AFTER_MS : secs * 1000;
        }
    }
    return n;
}

static int is_connect_failure(CURLcode cc)
{
    return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
           cc == CURLE_COULDNT_RESOLVE_PROXY;
}

/* Transport errors worth another attempt (configuration and TLS-verification failures are not). */
static int is_transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int is_read_method(const char *method)
{
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

static int do_request(struct kube_client *c, const char *method, const char *path_and_query,
                      const char *content_type, const char *body, size_t len, long *http_status,
                      struct buf *out, struct kube_error *err)
{
    int idempotent = strcmp(method, "POST") != 0;
    int token_retried = 0;
    struct response r = {.body = out, .overflow = 0, .retry_after_ms = -1};
    if (out->max > c->max_response) {
        out->max = c->max_response;
    }
    if (http_status) {
        *http_status = 0;
    }
    kube__count(c, is_read_method(method) ? KUBE__READ : KUBE__WRITE);
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        kube__rate_wait(c);
        buf_reset(out);
        r.overflow = 0;
        r.retry_after_ms = -1;
        CURL *e = easy_get(c);
        if (!e) {
            rc = -ENOMEM;
            break;
        }
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *headers = NULL;
        rc = kube__easy_setup(c, e, path_and_query, content_type, 0, &headers, errbuf,
                              sizeof(errbuf));
        if (rc) {
            kube_error_set(err, 0, "BadRequest", errbuf[0] ? errbuf : tandem_strerror(rc));
            easy_put(c, e);
            break;
        }
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
        if (strcmp(method, "GET") == 0) {
            curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        } else if (strcmp(method, "HEAD") == 0) {
            curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        } else {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
            if (body || strcmp(method, "DELETE") != 0) {
                curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
                curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
            }
        }
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                         c->timeout_ms < 10000 ? c->timeout_ms : 10000L);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, &r);
        kube__count(c, KUBE__REQUEST);
        CURLcode cc = curl_easy_perform(e);
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(headers);
        easy_put(c, e);

        int retryable;
        if (cc == CURLE_OK) {
            if (http_status) {
                *http_status = status;
            }
            rc = kube_error_from_response(status, out->data, out->len, err);
            if (rc == 0) {
                break;
            }
            if (status == 401 && !token_retried && kube__has_token_file(c)) {
                /* the token may have rotated under us: re-read it and try once more */
                token_retried = 1;
                kube__token_invalidate(c);
                kube__count(c, KUBE__RETRY);
                attempt--;
                continue;
            }
            retryable = (status == 429 || status == 500 || status == 502 || status == 503 ||
                         status == 504) &&
                        (idempotent || status == 429);
        } else if (r.overflow) {
            rc = -EFBIG;
            char msg[128];
            snprintf(msg, sizeof(msg), "response body larger than %zu bytes", out->max);
            kube_error_set(err, (int)status, "ResponseTooLarge", msg);
            break;
        } else {
            rc = cc == CURLE_OPERATION_TIMEDOUT ? KUBE_ETIMEOUT : KUBE_ETRANSPORT;
            char msg[CURL_ERROR_SIZE + 64];
            snprintf(msg, sizeof(msg), "%s %s: %s", method, path_and_query,
                     errbuf[0] ? errbuf : curl_easy_strerror(cc));
            kube_error_set(err, 0, cc == CURLE_OPERATION_TIMEDOUT ? "Timeout" : "Transport", msg);
            retryable = is_transient(cc) && (idempotent || is_connect_failure(cc));
        }
        if (!retryable || attempt >= c->max_retries) {
            break;
        }
        long wait = r.retry_after_ms >= 0 ? r.retry_after_ms : kube__backoff_ms(c, attempt);
        log_debug("kube client: %s %s: %s (%s); retry %d/%d in %ld ms", method, path_and_query,
                  tandem_strerror(rc), err ? err->message : "", attempt + 1, c->max_retries, wait);
        kube__count(c, KUBE__RETRY);
        kube__sleep_ms(wait);
    }
    if (rc) {
        kube__count(c, KUBE__ERROR);
    }
    return rc;
}

int kube_request(struct kube_client *c, const char *method, const char *path_and_query,
                 const char *content_type, const char *body, size_t len, long *http_status,
                 struct buf *resp_body, struct kube_error *err)
{
    if (err) {
        memset(err, 0, sizeof(*err));
    }
    if (!method || !*method || !path_and_query || path_and_query[0] != '/' ||
        strpbrk(method, " \r\n") || strpbrk(path_and_query, " \r\n")) {
        kube_error_set(err, 0, "BadRequest", "kube_request: bad method or path");
        return -EINVAL;
    }
    struct buf local;
    buf_init(&local, c->max_response);
    int rc = do_request(c, method, path_and_query, content_type, body, len, http_status,
                        resp_body ? resp_body : &local, err);
    buf_free(&local);
    return rc;
}

/* A JSON call: request, then parse a 2xx body into *out. */
static int json_call(struct kube_client *c, const char *method, const char *path_and_query,
                     const char *content_type, const char *body, size_t len,
                     struct json_object **out, struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    if (err) {
        memset(err, 0, sizeof(*err));
    }
    struct buf resp;
    buf_init(&resp, c->max_response);
    int rc = do_request(c, method, path_and_query, content_type, body, len, NULL, &resp, err);
    if (rc == 0 && out && resp.len > 0) {
        char perr[160];
        rc = kube__parse_json(resp.data, resp.len, out, perr, sizeof(perr));
        if (rc) {
            char msg[400];
            char snip[81];
            snippet(snip, sizeof(snip), resp.data, resp.len);
            snprintf(msg, sizeof(msg), "%s %s: response is not JSON (%s): %s", method,
                     path_and_query, perr, snip);
            kube_error_set(err, 200, "BadResponse", msg);
            kube__count(c, KUBE__ERROR);
        }
    }
    buf_free(&resp);
    return rc;
}

/* ---- paths and queries ---- */

static int unreserved(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

static int append_escaped(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int rc;
        if (unreserved(*p)) {
            rc = buf_append(out, p, 1);
        } else {
            char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = buf_append(out, enc, 3);
        }
        if (rc) {
            return rc;
        }
    }
    return 0;
}

static int valid_segment(const char *s)
{
    return s && *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/');
}

int kube_resource_path(const struct kube_resource *r, const char *ns, const char *name,
                       const char *subresource, struct buf *out)
{
    if (!r || !r->version || !r->plural || !valid_segment(r->plural) ||
        (name && !valid_segment(name)) || (subresource && !valid_segment(subresource)) ||
        (subresource && !name) || (ns && *ns && !valid_segment(ns))) {
        return -EINVAL;
    }
    int rc = r->group && *r->group ? buf_appendf(out, "/apis/%s/%s", r->group, r->version)
                                   : buf_appendf(out, "/api/%s", r->version);
    if (!rc && r->namespaced && ns && *ns) {
        rc = buf_appends(out, "/namespaces/");
        if (!rc) {
            rc = append_escaped(out, ns);
        }
    }
    if (!rc) {
        rc = buf_appendf(out, "/%s", r->plural);
    }
    if (!rc && name) {
        rc = buf_appends(out, "/");
        if (!rc) {
            rc = append_escaped(out, name);
        }
    }
    if (!rc && subresource) {
        rc = buf_appendf(out, "/%s", subresource);
    }
    return rc;
}

int kube_query_append(struct buf *out, const char *key, const char *value)
{
    if (!value) {
        return 0;
    }
    int rc = buf_appends(out, out->data && strchr(out->data, '?') ? "&" : "?");
    if (!rc) {
        rc = append_escaped(out, key);
    }
    if (!rc) {
        rc = buf_appends(out, "=");
    }
    if (!rc) {
        rc = append_escaped(out, value);
    }
    return rc;
}

/* The namespace for a single-object call on r: ns, else obj's metadata.namespace, else the
 * client's. Cluster-scoped resources get NULL. */
static const char *pick_ns(const struct kube_client *c, const struct kube_resource *r,
                           const char *ns, struct json_object *obj)
{
    if (!r->namespaced) {
        return NULL;
    }
    if (ns && *ns) {
        return ns;
    }
    const char *from_obj = NULL;
    if (obj && json_opt_string(obj, "metadata.namespace", NULL, &from_obj, NULL, 0) == 0 &&
        from_obj && *from_obj) {
        return from_obj;
    }
    return c->cfg->namespace;
}

static int bad_args(struct kube_error *err, const char *what)
{
    kube_error_set(err, 0, "BadRequest", what);
    return -EINVAL;
}

/* ---- typed calls ---- */

int kube_get(struct kube_client *c, const struct kube_resource *r, const char *ns, const char *name,
             struct json_object **out, struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    struct buf path;
    buf_init(&path, 4096);
    if (kube_resource_path(r, pick_ns(c, r, ns, NULL), name, NULL, &path) || !name) {
        buf_free(&path);
        return bad_args(err, "kube_get: bad resource, namespace or name");
    }
    int rc = json_call(c, "GET", path.data, NULL, NULL, 0, out, err);
    buf_free(&path);
    return rc;
}

static int list_query(struct buf *path, const struct kube_list_options *o)
{
    if (!o) {
        return 0;
    }
    char limit[32];
    snprintf(limit, sizeof(limit), "%ld", o->limit);
    int rc = kube_query_append(path, "labelSelector",
                               o->label_selector && *o->label_selector ? o->label_selector : NULL);
    if (!rc) {
        rc = kube_query_append(path, "fieldSelector",
                               o->field_selector && *o->field_selector ? o->field_selector : NULL);
    }
    if (!rc) {
        rc = kube_query_append(path, "limit", o->limit > 0 ? limit : NULL);
    }
    if (!rc) {
        rc = kube_query_append(path, "continue",
                               o->continue_token && *o->continue_token ? o->continue_token : NULL);
    }
    if (!rc) {
        rc = kube_query_append(path, "resourceVersion",
                               o->resource_version && *o->resource_version ? o->resource_version
                                                                           : NULL);
    }
    if (!rc) {
        rc = kube_query_append(path, "resourceVersionMatch",
                               o->resource_version_match && *o->resource_version_match
                                   ? o->resource_version_match
                                   : NULL);
    }
    return rc;
}

int kube_list(struct kube_client *c, const struct kube_resource *r, const char *ns,
              const struct kube_list_options *o, struct json_object **out, struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    struct buf path;
    buf_init(&path, 64 * 1024);
    if (kube_resource_path(r, r && r->namespaced ? ns : NULL, NULL, NULL, &path) ||
        list_query(&path, o)) {
        buf_free(&path);
        return bad_args(err, "kube_list: bad resource, namespace or options");
    }
    struct json_object *list = NULL;
    int rc = json_call(c, "GET", path.data, NULL, NULL, 0, &list, err);
    buf_free(&path);
    if (rc == 0 && !json_object_is_type(list, json_type_object)) {
        json_object_put(list);
        kube_error_set(err, 200, "BadResponse", "list response is not an object");
        return -EINVAL;
    }
    if (out) {
        *out = list;
    } else {
        json_object_put(list);
    }
    return rc;
}

int kube_list_all(struct kube_client *c, const struct kube_resource *r, const char *ns,
                  const struct kube_list_options *o, struct json_object **out,
                  struct kube_error *err)
{
    struct kube_list_options opts;
    if (o) {
        opts = *o;
    } else {
        memset(&opts, 0, sizeof(opts));
    }
    if (out) {
        *out = NULL;
    }
    int restarted = 0;
    struct json_object *items = json_object_new_array();
    if (!items) {
        return -ENOMEM;
    }
    char *cont = NULL;
    struct json_object *page = NULL;
    int rc = 0;
    for (long pages = 0;; pages++) {
        if (pages >= MAX_LIST_PAGES) {
            rc = bad_args(err, "kube_list_all: too many pages");
            break;
        }
        opts.continue_token = cont ? cont : (o ? o->continue_token : NULL);
        json_object_put(page);
        page = NULL;
        rc = kube_list(c, r, ns, &opts, &page, err);
        if (rc == KUBE_EEXPIRED && cont && !restarted) {
            /* the continue token expired mid-way: start over once with a fresh snapshot */
            log_info("kube client: list %s: continue token expired; restarting the list",
                     r->plural);
            restarted = 1;
            free(cont);
            cont = NULL;
            opts.resource_version = NULL;
            opts.resource_version_match = NULL;
            json_object_put(items);
            items = json_object_new_array();
            if (!items) {
                rc = -ENOMEM;
                break;
            }
            pages = -1;
            continue;
        }
        if (rc) {
            break;
        }
        struct json_object *page_items = NULL;
        if (json_object_object_get_ex(page, "items", &page_items) && page_items) {
            if (!json_object_is_type(page_items, json_type_array)) {
                rc = bad_args(err, "list response: items is not an array");
                break;
            }
            size_t n = json_object_array_length(page_items);
            for (size_t i = 0; i < n; i++) {
                if (json_object_array_add(
                        items, json_object_get(json_object_array_get_idx(page_items, i))) != 0) {
                    rc = -ENOMEM;
                    break;
                }
            }
            if (rc) {
                break;
            }
        }
        const char *next = NULL;
        json_opt_string(page, "metadata.continue", NULL, &next, NULL, 0);
        free(cont);
        cont = NULL;
        if (!next || !*next) {
            break;
        }
        if (!(cont = strdup(next))) {
            rc = -ENOMEM;
            break;
        }
        /* pages after the first carry no resourceVersion (the token encodes it) */
        opts.resource_version = NULL;
        opts.resource_version_match = NULL;
    }
    free(cont);
    if (rc == 0) {
        json_object_object_add(page, "items", items);
        items = NULL;
        struct json_object *meta;
        if (json_object_object_get_ex(page, "metadata", &meta) &&
            json_object_is_type(meta, json_type_object)) {
            json_object_object_del(meta, "continue");
            json_object_object_del(meta, "remainingItemCount");
        }
        if (out) {
            *out = page;
            page = NULL;
        }
    }
    json_object_put(items);
    json_object_put(page);
    return rc;
}

static int write_obj(struct kube_client *c, const char *method, const struct kube_resource *r,
                     const char *ns, const char *name, const char *sub, struct json_object *obj,
                     struct json_object **out, struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    if (!obj) {
        return bad_args(err, "missing object");
    }
    const char *nm = name;
    if (!nm && strcmp(method, "POST") != 0) {
        json_opt_string(obj, "metadata.name", NULL, &nm, NULL, 0);
    }
    struct buf path;
    buf_init(&path, 4096);
    if (kube_resource_path(r, pick_ns(c, r, ns, obj), strcmp(method, "POST") == 0 ? NULL : nm, sub,
                           &path) ||
        (strcmp(method, "POST") != 0 && !nm)) {
        buf_free(&path);
        return bad_args(err, "bad resource, namespace or name");
    }
    struct buf body;
    buf_init(&body, KUBE_MAX_RESPONSE);
    int rc = json_to_buf(obj, 0, &body);
    if (rc) {
        buf_free(&path);
        buf_free(&body);
        return bad_args(err, "object cannot be serialized");
    }
    rc = json_call(c, method, path.data, "application/json", body.data, body.len, out, err);
    buf_free(&path);
    buf_free(&body);
    return rc;
}

int kube_create(struct kube_client *c, const struct kube_resource *r, const char *ns,
                struct json_object *obj, struct json_object **out, struct kube_error *err)
{
    return write_obj(c, "POST", r, ns, NULL, NULL, obj, out, err);
}

int kube_update(struct kube_client *c, const struct kube_resource *r, const char *ns,
                const char *name, struct json_object *obj, struct json_object **out,
                struct kube_error *err)
{
    return write_obj(c, "PUT", r, ns, name, NULL, obj, out, err);
}

int kube_update_status(struct kube_client *c, const struct kube_resource *r, const char *ns,
                       const char *name, struct json_object *obj, struct json_object **out,
                       struct kube_error *err)
{
    return write_obj(c, "PUT", r, ns, name, "status", obj, out, err);
}

int kube_patch(struct kube_client *c, const struct kube_resource *r, const char *ns,
               const char *name, enum kube_patch_type t, const char *body, size_t len,
               const struct kube_patch_options *o, struct json_object **out, struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    const char *ctype;
    switch (t) {
    case KUBE_PATCH_MERGE:
        ctype = "application/merge-patch+json";
        break;
    case KUBE_PATCH_JSON:
        ctype = "application/json-patch+json";
        break;
    case KUBE_PATCH_STRATEGIC:
        ctype = "application/strategic-merge-patch+json";
        break;
    case KUBE_PATCH_APPLY:
        ctype = "application/apply-patch+yaml";
        break;
    default:
        return bad_args(err, "kube_patch: unknown patch type");
    }
    if (!body || !name) {
        return bad_args(err, "kube_patch: missing name or body");
    }
    const char *fm = o && o->field_manager && *o->field_manager ? o->field_manager : NULL;
    if (!fm && t == KUBE_PATCH_APPLY) {
        fm = c->field_manager;
    }
    struct buf path;
    buf_init(&path, 4096);
    int rc = kube_resource_path(r, pick_ns(c, r, ns, NULL), name, o ? o->subresource : NULL, &path);
    if (!rc) {
        rc = kube_query_append(&path, "fieldManager", fm);
    }
    if (!rc && o && o->force && t == KUBE_PATCH_APPLY) {
        rc = kube_query_append(&path, "force", "true");
    }
    if (!rc && o && o->dry_run) {
        rc = kube_query_append(&path, "dryRun", "All");
    }
    if (rc) {
        buf_free(&path);
        return bad_args(err, "kube_patch: bad resource, namespace or name");
    }
    rc = json_call(c, "PATCH", path.data, ctype, body, len, out, err);
    buf_free(&path);
    return rc;
}

int kube_delete(struct kube_client *c, const struct kube_resource *r, const char *ns,
                const char *name, const struct kube_delete_options *o, struct json_object **out,
                struct kube_error *err)
{
    if (out) {
        *out = NULL;
    }
    struct buf path;
    buf_init(&path, 4096);
    if (!name || kube_resource_path(r, pick_ns(c, r, ns, NULL), name, NULL, &path)) {
        buf_free(&path);
        return bad_args(err, "kube_delete: bad resource, namespace or name");
    }
    struct buf body;
    buf_init(&body, 64 * 1024);
    int rc = 0;
    if (o) {
        struct json_object *d = json_object_new_object();
        if (!d) {
            buf_free(&path);
            return -ENOMEM;
        }
        json_object_object_add(d, "kind", json_object_new_string("DeleteOptions"));
        json_object_object_add(d, "apiVersion", json_object_new_string("v1"));
        if (o->propagation_policy && *o->propagation_policy) {
            json_object_object_add(d, "propagationPolicy",
                                   json_object_new_string(o->propagation_policy));
        }
        if (o->grace_period_seconds >= 0) {
            json_object_object_add(d, "gracePeriodSeconds",
                                   json_object_new_int64(o->grace_period_seconds));
        }
        if ((o->precondition_uid && *o->precondition_uid) ||
            (o->precondition_rv && *o->precondition_rv)) {
            struct json_object *pre = json_object_new_object();
            if (o->precondition_uid && *o->precondition_uid) {
                json_object_object_add(pre, "uid", json_object_new_string(o->precondition_uid));
            }
            if (o->precondition_rv && *o->precondition_rv) {
                json_object_object_add(pre, "resourceVersion",
                                       json_object_new_string(o->precondition_rv));
            }
            json_object_object_add(d, "preconditions", pre);
        }
        rc = json_to_buf(d, 0, &body);
        json_object_put(d);
    }
    if (rc == 0) {
        rc = json_call(c, "DELETE", path.data, o ? "application/json" : NULL, o ? body.data : NULL,
                       body.len, out, err);
    }
    buf_free(&path);
    buf_free(&body);
    return rc;
}
