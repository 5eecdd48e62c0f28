/*
 * Tests of the sidecar's SSRF allowlist (agent/allowlist.h).
 *
 * Pure parts, always: spec.selector → label selector string for the three pool groups (sorting,
 * de-duplication, every operator, empty values) and the selectors that are refused (with the
 * field named); host normalisation (IPv4, IPv6 with and without brackets, IPv4-mapped, names,
 * numeric "names" the resolver would read as addresses, ports, zones); the --inference-pool
 * reference; allowlist_new's argument checks and an unreachable API server.
 *
 * Watch-driven parts against localkube's API server emulator (lib/kube's lk_harness.h, with
 * crds/inferencepools.yaml and a GIE v1 InferencePool CRD applied); skipped when python3 or
 * e2e/localkube is missing. No kubelet runs: the tests write pod status themselves. Pods of the
 * pool's selector enter with their IPs (dual-stack too) and names, other pods and pods without an
 * IP do not, a pod that gets an IP enters, a deleted or failed pod leaves, a relabelled pod enters,
 * another pool's changes are ignored, a selector change replaces the set, deleting the pool
 * empties it and re-creating it refills it, an invalid selector empties it; both pool groups side
 * by side with one pool name; a pool created after the start, through a kubeconfig file; and the
 * start-up errors: a CRD that is not served, 403 on either resource, a cache that does not sync.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/allowlist.h"
#include "lib/kube/poolwatch.h"
#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/tests/lk_harness.h"
#include "lib/log.h"
#include "lib/yaml.h"

#define WAIT_MS 15000

static const struct kube_resource TANDEM_POOLS = {"tandem.dev", "v1alpha1", "inferencepools",
                                                  "InferencePool", 1};
static const struct kube_resource GIE_POOLS = {"inference.networking.k8s.io", "v1",
                                               "inferencepools", "InferencePool", 1};

/* ---- helpers ---- */

static struct json_object *parse(const char *fmt, ...) TANDEM_PRINTF(1, 2);
static struct json_object *parse(const char *fmt, ...)
{
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    char err[256];
    struct json_object *o = yaml_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad YAML/JSON in test: %s: %s", err, text);
    }
    return o;
}

/* The selector string of a pool whose spec.selector is the given JSON; rc and err returned. */
static int selector_of(const char *group, const char *selector_json, char **out, char *err,
                       size_t errlen)
{
    struct json_object *pool = parse("{\"spec\": {\"selector\": %s}}", selector_json);
    err[0] = '\0';
    int rc = kube_pool_selector(group, pool, out, err, errlen);
    json_object_put(pool);
    return rc;
}

static void expect_selector(const char *group, const char *selector_json, const char *want)
{
    char *s = NULL, err[256];
    int rc = selector_of(group, selector_json, &s, err, sizeof(err));
    if (rc != 0) {
        fail_msg("%s: %s → %d %s", group ? group : "(default)", selector_json, rc, err);
    }
    assert_string_equal(s, want);
    free(s);
}

/* The selector is refused with a message containing want_in_err. */
static void expect_bad_selector(const char *group, const char *selector_json,
                                const char *want_in_err)
{
    char *s = NULL, err[256];
    int rc = selector_of(group, selector_json, &s, err, sizeof(err));
    if (rc != -EINVAL || s != NULL || strstr(err, want_in_err) == NULL) {
        fail_msg("%s: %s → %d \"%s\" (%s), want -EINVAL naming \"%s\"", group ? group : "(default)",
                 selector_json, rc, err, s ? s : "", want_in_err);
    }
}

static void expect_host(const char *host, int kind, const char *want)
{
    char out[256] = "";
    int rc = allowlist_normalize_host(host, out, sizeof(out));
    if (rc != kind || (kind > 0 && strcmp(out, want) != 0)) {
        fail_msg("normalize(\"%s\") = %d \"%s\", want %d \"%s\"", host, rc, out, kind,
                 want ? want : "");
    }
}

/* ---- pure tests ---- */

static void test_selector_tandem(void **state)
{
    (void)state;
    expect_selector(NULL, "{\"matchLabels\": {\"app\": \"a\"}}", "app=a");
    expect_selector("tandem.dev",
                    "{\"matchLabels\": {\"zone\": \"z1\", \"app\": \"a\"},"
                    " \"matchExpressions\": ["
                    "  {\"key\": \"role\", \"operator\": \"In\", \"values\": [\"prefill\","
                    "   \"decode\", \"prefill\"]},"
                    "  {\"key\": \"tier\", \"operator\": \"NotIn\", \"values\": [\"b\", \"a\"]},"
                    "  {\"key\": \"tandem.dev/model\", \"operator\": \"Exists\"},"
                    "  {\"key\": \"drain\", \"operator\": \"DoesNotExist\", \"values\": []}]}",
                    "app=a,!drain,role in (decode,prefill),tandem.dev/model,tier notin (a,b),"
                    "zone=z1");
    /* only expressions; empty label values are valid */
    expect_selector("tandem.dev",
                    "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"In\","
                    " \"values\": [\"x\", \"\"]}]}",
                    "k in (,x)");
    expect_selector("tandem.dev", "{\"matchLabels\": {\"k\": \"\"}, \"matchExpressions\": null}",
                    "k=");
}

static void test_selector_tandem_bad(void **state)
{
    (void)state;
    char *s = NULL, err[256];
    struct json_object *nosel = parse("{\"spec\": {\"targetPort\": 8000}}");
    assert_int_equal(kube_pool_selector(NULL, nosel, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "spec.selector: required"));
    assert_null(s);
    json_object_put(nosel);

    expect_bad_selector(NULL, "{}", "has no terms");
    expect_bad_selector(NULL, "{\"matchLabels\": {}}", "has no terms");
    expect_bad_selector(NULL, "[]", "spec.selector: must be an object");
    expect_bad_selector(NULL, "{\"matchLabels\": {\"app\": \"Bad Value\"}}",
                        "spec.selector.matchLabels.app: invalid label value");
    expect_bad_selector(NULL, "{\"matchLabels\": {\"app\": \"a,b=c\"}}", "invalid label value");
    expect_bad_selector(NULL, "{\"matchLabels\": {\"bad key\": \"a\"}}", "invalid label key");
    expect_bad_selector(NULL, "{\"matchLabels\": {\"app\": 3}}", "must be a string");
    expect_bad_selector(NULL, "{\"matchLabels\": []}", "matchLabels: must be an object");
    expect_bad_selector(NULL, "{\"matchExpressions\": {}}", "must be an array");
    expect_bad_selector(NULL, "{\"matchExpressions\": [{\"operator\": \"Exists\"}]}",
                        "matchExpressions[0].key: required");
    expect_bad_selector(NULL,
                        "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"Gt\","
                        " \"values\": [\"1\"]}]}",
                        "matchExpressions[0].operator: must be In");
    expect_bad_selector(NULL, "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"In\"}]}",
                        "matchExpressions[0].values: must be a non-empty array");
    expect_bad_selector(NULL,
                        "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"In\","
                        " \"values\": []}]}",
                        "non-empty");
    expect_bad_selector(NULL,
                        "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"NotIn\","
                        " \"values\": [\"ok\", \"not ok\"]}]}",
                        "matchExpressions[0].values[1]: invalid label value");
    expect_bad_selector(NULL,
                        "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"Exists\","
                        " \"values\": [\"a\"]}]}",
                        "must be empty for Exists");
    expect_bad_selector(NULL,
                        "{\"matchLabels\": {\"a\": \"b\"}, \"matchExpressions\": [{\"key\": \"k\","
                        " \"operator\": \"Exists\"}, {\"key\": \"-k\", \"operator\": "
                        "\"Exists\"}]}",
                        "matchExpressions[1]: invalid label key");
    expect_bad_selector(NULL, "{\"matchLabels\": {\"a\": \"b\"}, \"other\": 1}",
                        "spec.selector.other: not supported");

    /* more values than an expression may have */
    char big[2048] = "{\"matchExpressions\": [{\"key\": \"k\", \"operator\": \"In\", \"values\": [";
    for (int i = 0; i < 65; i++) {
        char v[16];
        snprintf(v, sizeof(v), "%s\"v%d\"", i ? "," : "", i);
        strcat(big, v);
    }
    strcat(big, "]}]}");
    expect_bad_selector(NULL, big, "more than 64 values");

    expect_bad_selector("example.com", "{\"matchLabels\": {\"a\": \"b\"}}", "unknown pool group");
}

static void test_selector_upstream(void **state)
{
    (void)state;
    /* GIE v1: matchLabels only */
    expect_selector("inference.networking.k8s.io",
                    "{\"matchLabels\": {\"app\": \"vllm\", \"llm-d.ai/role\": \"prefill\"}}",
                    "app=vllm,llm-d.ai/role=prefill");
    expect_bad_selector("inference.networking.k8s.io",
                        "{\"matchLabels\": {\"app\": \"a\"}, \"matchExpressions\": [{\"key\":"
                        " \"k\", \"operator\": \"Exists\"}]}",
                        "spec.selector.matchExpressions: not supported for "
                        "inference.networking.k8s.io");
    expect_bad_selector("inference.networking.k8s.io", "{\"matchLabels\": {}}", "has no terms");
    expect_bad_selector("inference.networking.k8s.io", "{\"app\": \"a\"}",
                        "spec.selector.app: not supported");
    expect_bad_selector("inference.networking.k8s.io", "{\"matchLabels\": {\"app\": \"a b\"}}",
                        "invalid label value");
    /* GIE v1alpha2: a plain map */
    expect_selector("inference.networking.x-k8s.io", "{\"b\": \"2\", \"a\": \"1\"}", "a=1,b=2");
    expect_bad_selector("inference.networking.x-k8s.io", "{\"matchLabels\": {\"a\": \"1\"}}",
                        "spec.selector.matchLabels: must be a string");
    expect_bad_selector("inference.networking.x-k8s.io", "{}", "has no terms");
}

static void test_hosts(void **state)
{
    (void)state;
    expect_host("10.0.0.1", ALLOWLIST_HOST_IP, "10.0.0.1");
    expect_host("fd00::1", ALLOWLIST_HOST_IP, "fd00::1");
    expect_host("[fd00::1]", ALLOWLIST_HOST_IP, "fd00::1");
    expect_host("FD00:0:0::1", ALLOWLIST_HOST_IP, "fd00::1");
    expect_host("[FD00:0000::0001]", ALLOWLIST_HOST_IP, "fd00::1");
    expect_host("::ffff:10.0.0.1", ALLOWLIST_HOST_IP, "10.0.0.1");
    expect_host("[::ffff:10.0.0.1]", ALLOWLIST_HOST_IP, "10.0.0.1");
    expect_host("pod-a", ALLOWLIST_HOST_NAME, "pod-a");
    expect_host("Pod-A", ALLOWLIST_HOST_NAME, "pod-a");
    expect_host("vllm-decode-7f9c.x", ALLOWLIST_HOST_NAME, "vllm-decode-7f9c.x");
    /* refused */
    const char *bad[] = {"",
                         "[10.0.0.1]",
                         "[pod-a]",
                         "[fd00::1",
                         "fd00::1]",
                         "[]",
                         "10.0.0.1:8000",
                         "[fd00::1]:8000",
                         "pod-a:8000",
                         "fe80::1%eth0",
                         "[fe80::1%25eth0]",
                         "10.1",
                         "2130706433",
                         "0x7f.1",
                         "010.0.0.1",
                         "127.1",
                         "pod-a.",
                         "-pod",
                         "pod_a",
                         "pod a",
                         "http://10.0.0.1"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        expect_host(bad[i], -EINVAL, NULL);
    }
    char long_name[300];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    expect_host(long_name, -EINVAL, NULL);
    char small[4];
    assert_int_equal(allowlist_normalize_host("10.0.0.1", small, sizeof(small)), -ENOSPC);
    assert_int_equal(allowlist_normalize_host("pod-a", small, sizeof(small)), -ENOSPC);
    assert_int_equal(allowlist_normalize_host(NULL, small, sizeof(small)), -EINVAL);
    /* a NULL allowlist allows nothing */
    assert_false(allowlist_allows(NULL, "10.0.0.1"));
    assert_int_equal(allowlist_size(NULL), 0);
}

static void test_pool_ref(void **state)
{
    (void)state;
    char ns[64], name[254];
    assert_int_equal(allowlist_parse_pool_ref("llm/pool-a", ns, sizeof(ns), name, sizeof(name)), 0);
    assert_string_equal(ns, "llm");
    assert_string_equal(name, "pool-a");
    assert_int_equal(allowlist_parse_pool_ref("pool-a", ns, sizeof(ns), name, sizeof(name)),
                     -EINVAL);
    assert_int_equal(allowlist_parse_pool_ref("a/b/c", ns, sizeof(ns), name, sizeof(name)),
                     -EINVAL);
    assert_int_equal(allowlist_parse_pool_ref("/p", ns, sizeof(ns), name, sizeof(name)), -EINVAL);
    assert_int_equal(allowlist_parse_pool_ref("ns/", ns, sizeof(ns), name, sizeof(name)), -EINVAL);
    assert_int_equal(allowlist_parse_pool_ref("NS/p", ns, sizeof(ns), name, sizeof(name)), -EINVAL);
    assert_int_equal(allowlist_parse_pool_ref("ns/p", ns, 2, name, sizeof(name)), -ENOSPC);
}

static void test_new_errors(void **state)
{
    (void)state;
    char err[512];
    struct allowlist_config c = {.ns = "llm", .pool = "pool", .pool_group = "example.com"};
    assert_null(allowlist_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "unknown pool group \"example.com\""));
    c.pool_group = NULL;
    c.ns = "Bad_NS";
    assert_null(allowlist_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "namespace and a name"));
    c.ns = "llm";
    c.pool = NULL;
    assert_null(allowlist_new(&c, err, sizeof(err)));

    /* an API server that is not there: the pool collection is named */
    struct kube_config cfg = {0};
    cfg.server = (char *)"http://127.0.0.1:1";
    cfg.namespace = (char *)"default";
    cfg.context = (char *)"";
    struct kube_client_options opts = {.timeout_ms = 2000, .max_retries = -1};
    struct kube_client *client = kube_client_new(&cfg, &opts, err, sizeof(err));
    assert_non_null(client);
    c = (struct allowlist_config){.client = client, .ns = "llm", .pool = "pool"};
    assert_null(allowlist_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "cannot list inferencepools.tandem.dev in namespace llm"));
    kube_client_free(client);

    /* a kubeconfig that does not exist */
    c = (struct allowlist_config){
        .kubeconfig = "/nonexistent/kubeconfig", .ns = "llm", .pool = "pool"};
    assert_null(allowlist_new(&c, err, sizeof(err)));
    assert_non_null(strstr(err, "kubeconfig"));
}

/* ---- against localkube ---- */

static struct lk g_lk;
static int g_have_lk;
static struct kube_client *g_client;

#define NEED_LK()                                                                                  \
    do {                                                                                           \
        if (!g_have_lk) {                                                                          \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static const char *repo_root(void)
{
    static char root[1024];
    const char *here = __FILE__;
    const char *cut = strstr(here, "agent/tests/");
    if (here[0] == '/' && cut) {
        snprintf(root, sizeof(root), "%.*s", (int)(cut - here), here);
    } else {
        snprintf(root, sizeof(root), "../../"); /* ctest runs in agent/tests */
    }
    return root;
}

static void create(const struct kube_resource *r, const char *ns, struct json_object *obj)
{
    struct kube_error ke = {0};
    int rc = kube_create(g_client, r, ns, obj, NULL, &ke);
    json_object_put(obj);
    if (rc != 0) {
        fail_msg("create %s: %s %s", r->plural, tandem_strerror(rc), ke.message);
    }
}

static void merge_patch(const struct kube_resource *r, const char *ns, const char *name,
                        const char *sub, const char *body)
{
    struct kube_error ke = {0};
    struct kube_patch_options po = {.subresource = sub};
    int rc =
        kube_patch(g_client, r, ns, name, KUBE_PATCH_MERGE, body, strlen(body), &po, NULL, &ke);
    if (rc != 0) {
        fail_msg("patch %s %s: %s %s", r->plural, name, tandem_strerror(rc), ke.message);
    }
}

static void delete_obj(const struct kube_resource *r, const char *ns, const char *name)
{
    struct kube_error ke = {0};
    struct kube_delete_options o = {.grace_period_seconds = 0};
    int rc = kube_delete(g_client, r, ns, name, &o, NULL, &ke);
    if (rc != 0) {
        fail_msg("delete %s %s: %s %s", r->plural, name, tandem_strerror(rc), ke.message);
    }
}

static void create_ns(const char *ns)
{
    create(&KUBE_NAMESPACES, NULL, parse("{\"metadata\": {\"name\": \"%s\"}}", ns));
}

/* A pod with labels (a JSON object) and, when ips is non-NULL ("a" or "a,b"), a Running status
 * with those addresses. */
static void create_pod(const char *ns, const char *name, const char *labels, const char *ips)
{
    create(&KUBE_PODS, ns,
           parse("{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"%s\","
                 " \"labels\": %s}, \"spec\": {\"containers\": [{\"name\": \"c\", \"image\":"
                 " \"pause\"}]}}",
                 name, labels));
    if (ips) {
        char first[64], body[512];
        snprintf(first, sizeof(first), "%s", ips);
        char *comma = strchr(first, ',');
        const char *second = comma ? comma + 1 : NULL;
        if (comma) {
            *comma = '\0';
        }
        snprintf(body, sizeof(body),
                 "{\"status\": {\"phase\": \"Running\", \"podIP\": \"%s\", \"podIPs\": "
                 "[{\"ip\": \"%s\"}%s%s%s]}}",
                 first, first, second ? ", {\"ip\": \"" : "", second ? second : "",
                 second ? "\"}" : "");
        merge_patch(&KUBE_PODS, ns, name, "status", body);
    }
}

static void create_tandem_pool(const char *ns, const char *name, const char *selector)
{
    create(&TANDEM_POOLS, ns,
           parse("{\"apiVersion\": \"tandem.dev/v1alpha1\", \"kind\": \"InferencePool\","
                 " \"metadata\": {\"name\": \"%s\"}, \"spec\": {\"selector\": %s}}",
                 name, selector));
}

static void create_gie_pool(const char *ns, const char *name, const char *match_labels)
{
    create(&GIE_POOLS, ns,
           parse("{\"apiVersion\": \"inference.networking.k8s.io/v1\", \"kind\": "
                 "\"InferencePool\", \"metadata\": {\"name\": \"%s\"}, \"spec\": {\"selector\":"
                 " {\"matchLabels\": %s}, \"targetPorts\": [{\"number\": 8000}],"
                 " \"endpointPickerRef\": {\"name\": \"epp\", \"port\": {\"number\": 9002}}}}",
                 name, match_labels));
}

/* Waits until host's verdict is want and the set has n pods (n < 0: any size). */
static void wait_for(struct allowlist *al, const char *host, bool want, int n)
{
    long long end = lk_now_ms() + WAIT_MS;
    while (allowlist_allows(al, host) != want || (n >= 0 && allowlist_size(al) != n)) {
        if (lk_now_ms() > end) {
            fail_msg("%s: allowed %d, want %d; size %d, want %d", host, allowlist_allows(al, host),
                     want, allowlist_size(al), n);
        }
        lk_sleep_ms(20);
    }
}

static void expect_allowed(struct allowlist *al, const char *const *hosts, size_t n, bool want)
{
    for (size_t i = 0; i < n; i++) {
        if (allowlist_allows(al, hosts[i]) != want) {
            fail_msg("%s: allowed %d, want %d", hosts[i], !want, want);
        }
    }
}

static struct allowlist *start(const char *group, const char *ns, const char *pool)
{
    char err[512] = "";
    struct allowlist_config c = {
        .client = g_client, .ns = ns, .pool = pool, .pool_group = group, .sync_timeout_ms = 10000};
    struct allowlist *al = allowlist_new(&c, err, sizeof(err));
    if (!al) {
        fail_msg("allowlist_new: %s", err);
    }
    return al;
}

static int wait_served(const struct kube_resource *r)
{
    for (int i = 0; i < 200; i++) {
        struct json_object *l = NULL;
        int ok = kube_list(g_client, r, NULL, NULL, &l, NULL) == 0;
        json_object_put(l);
        if (ok) {
            return 0;
        }
        lk_sleep_ms(50);
    }
    return -1;
}

static const char *GIE_CRD =
    "{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition,"
    " metadata: {name: inferencepools.inference.networking.k8s.io},"
    " spec: {group: inference.networking.k8s.io, scope: Namespaced,"
    "  names: {plural: inferencepools, singular: inferencepool, kind: InferencePool,"
    "   listKind: InferencePoolList},"
    "  versions: [{name: v1, served: true, storage: true, subresources: {status: {}},"
    "   schema: {openAPIV3Schema: {type: object, properties: {"
    "    spec: {type: object, required: [selector, targetPorts], properties: {"
    "     selector: {type: object, required: [matchLabels], properties: {"
    "      matchLabels: {type: object, additionalProperties: {type: string}}}},"
    "     targetPorts: {type: array, items: {type: object, properties: {"
    "      number: {type: integer}}}},"
    "     endpointPickerRef: {type: object, x-kubernetes-preserve-unknown-fields: true}}},"
    "    status: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}}]}}";

static int lk_group_setup(void **state)
{
    (void)state;
    log_init("test_allowlist", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_ERROR, LOG_FORMAT_TEXT);
    char path[1200];
    snprintf(path, sizeof(path), "%se2e/localkube/lk/apiserver.py", repo_root());
    if (system("python3 -c 'import sys' >/dev/null 2>&1") != 0 || access(path, R_OK) != 0) {
        fprintf(stderr, "test_allowlist: python3 or e2e/localkube missing: localkube tests "
                        "skipped\n");
        return 0;
    }
    if (lk_start(&g_lk) != 0 || !(g_client = lk_client(&g_lk, NULL))) {
        return -1;
    }
    /* the real tandem.dev CRD, and a GIE v1 one */
    snprintf(path, sizeof(path), "%scrds/inferencepools.yaml", repo_root());
    FILE *f = fopen(path, "rb");
    if (!f) {
        return -1;
    }
    char *text = malloc(1 << 20);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    struct json_object *docs = NULL;
    char err[256];
    if (!text || yaml_parse_all(text, len, &docs, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        free(text);
        return -1;
    }
    free(text);
    for (size_t i = 0; i < json_object_array_length(docs); i++) {
        create(&KUBE_CRDS, NULL, json_object_get(json_object_array_get_idx(docs, i)));
    }
    json_object_put(docs);
    create(&KUBE_CRDS, NULL, parse("%s", GIE_CRD));
    if (wait_served(&TANDEM_POOLS) != 0 || wait_served(&GIE_POOLS) != 0) {
        return -1;
    }
    g_have_lk = 1;
    return 0;
}

static int lk_group_teardown(void **state)
{
    (void)state;
    kube_client_free(g_client);
    if (g_have_lk) {
        lk_stop(&g_lk);
    }
    return 0;
}

/* The tandem.dev pool through its life. */
static void test_lk_tandem_pool(void **state)
{
    (void)state;
    NEED_LK();
    const char *ns = "al-tandem";
    create_ns(ns);
    create_tandem_pool(ns, "pool",
                       "{\"matchLabels\": {\"app\": \"a\"}, \"matchExpressions\": ["
                       "{\"key\": \"role\", \"operator\": \"In\", \"values\": [\"prefill\","
                       " \"decode\"]}, {\"key\": \"drain\", \"operator\": \"DoesNotExist\"}]}");
    /* listed after "pool" (lists are sorted by name): a handler blind to the name would end up
     * on this selector */
    create_tandem_pool(ns, "zother", "{\"matchLabels\": {\"app\": \"b\"}}");
    create_pod(ns, "p1", "{\"app\": \"a\", \"role\": \"prefill\"}", "10.1.0.1");
    create_pod(ns, "p2", "{\"app\": \"a\", \"role\": \"decode\"}", "10.1.0.2,fd00::2");
    create_pod(ns, "p3", "{\"app\": \"b\", \"role\": \"prefill\"}", "10.1.0.3");
    create_pod(ns, "p4", "{\"app\": \"a\", \"role\": \"other\"}", "10.1.0.4");
    create_pod(ns, "p5", "{\"app\": \"a\", \"role\": \"decode\"}", NULL);
    create_pod(ns, "p6", "{\"app\": \"a\", \"role\": \"decode\", \"drain\": \"1\"}", "10.1.0.6");

    struct allowlist *al = start(NULL, ns, "pool");
    /* synced on return */
    assert_int_equal(allowlist_size(al), 2);
    const char *yes[] = {"10.1.0.1", "p1",      "P1",        "10.1.0.2",
                         "p2",       "fd00::2", "[fd00::2]", "fd00:0:0::2"};
    const char *no[] = {"10.1.0.3", "p3",       "10.1.0.4", "p4",     "p5",         "10.1.0.6",
                        "p6",       "10.1.0.9", "pool",     "zother", "[10.1.0.1]", "10.1.0.1:8000",
                        "fd00::3"};
    expect_allowed(al, yes, ARRAY_SIZE(yes), true);
    expect_allowed(al, no, ARRAY_SIZE(no), false);

    /* p5 gets its IP; p1 goes; p4 is relabelled into the pool; p2 fails */
    merge_patch(&KUBE_PODS, ns, "p5", "status",
                "{\"status\": {\"phase\": \"Running\", \"podIP\": \"10.1.0.5\"}}");
    wait_for(al, "10.1.0.5", true, 3);
    assert_true(allowlist_allows(al, "p5"));
    delete_obj(&KUBE_PODS, ns, "p1");
    wait_for(al, "10.1.0.1", false, 2);
    assert_false(allowlist_allows(al, "p1"));
    merge_patch(&KUBE_PODS, ns, "p4", NULL,
                "{\"metadata\": {\"labels\": {\"role\": \"prefill\"}}}");
    wait_for(al, "10.1.0.4", true, 3);
    merge_patch(&KUBE_PODS, ns, "p2", "status", "{\"status\": {\"phase\": \"Failed\"}}");
    wait_for(al, "10.1.0.2", false, 2);
    assert_false(allowlist_allows(al, "fd00::2"));
    assert_false(allowlist_allows(al, "p2"));

    /* another pool's change is ignored; ours replaces the set */
    merge_patch(&TANDEM_POOLS, ns, "zother", NULL,
                "{\"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"a\"}, "
                "\"matchExpressions\": null}}}");
    merge_patch(&TANDEM_POOLS, ns, "pool", NULL,
                "{\"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"b\"}, "
                "\"matchExpressions\": null}}}");
    wait_for(al, "10.1.0.3", true, 1);
    const char *gone[] = {"10.1.0.4", "10.1.0.5", "p4", "p5"};
    expect_allowed(al, gone, ARRAY_SIZE(gone), false);
    assert_true(allowlist_allows(al, "p3"));

    /* an invalid selector empties the set; a valid one refills it */
    merge_patch(&TANDEM_POOLS, ns, "pool", NULL,
                "{\"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"not valid\"}}}}");
    wait_for(al, "10.1.0.3", false, 0);
    merge_patch(&TANDEM_POOLS, ns, "pool", NULL,
                "{\"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"b\"}}}}");
    wait_for(al, "10.1.0.3", true, 1);

    /* the pool deleted: nothing is allowed; re-created: allowed again */
    delete_obj(&TANDEM_POOLS, ns, "pool");
    wait_for(al, "10.1.0.3", false, 0);
    assert_false(allowlist_allows(al, "p3"));
    create_tandem_pool(ns, "pool", "{\"matchLabels\": {\"app\": \"a\"}}");
    wait_for(al, "10.1.0.5", true, 3); /* p4, p5, p6; the failed p2 is left out */
    assert_true(allowlist_allows(al, "10.1.0.6"));
    assert_false(allowlist_allows(al, "10.1.0.2"));
    allowlist_free(al);
}

/* GIE v1 pools, next to a tandem.dev pool of the same name. */
static void test_lk_gie_pool(void **state)
{
    (void)state;
    NEED_LK();
    const char *ns = "al-gie";
    create_ns(ns);
    create_gie_pool(ns, "pool", "{\"app\": \"g\"}");
    create_tandem_pool(ns, "pool", "{\"matchLabels\": {\"app\": \"t\"}}");
    create_pod(ns, "g1", "{\"app\": \"g\"}", "10.2.0.1");
    create_pod(ns, "t1", "{\"app\": \"t\"}", "10.2.0.2");

    struct allowlist *gie = start("inference.networking.k8s.io", ns, "pool");
    struct allowlist *tan = start("tandem.dev", ns, "pool");
    assert_int_equal(allowlist_size(gie), 1);
    assert_int_equal(allowlist_size(tan), 1);
    assert_true(allowlist_allows(gie, "10.2.0.1"));
    assert_false(allowlist_allows(gie, "10.2.0.2"));
    assert_true(allowlist_allows(tan, "10.2.0.2"));
    assert_false(allowlist_allows(tan, "10.2.0.1"));

    create_pod(ns, "g2", "{\"app\": \"g\"}", "fd00::21");
    wait_for(gie, "[fd00::21]", true, 2);
    merge_patch(&GIE_POOLS, ns, "pool", NULL,
                "{\"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"t\"}}}}");
    wait_for(gie, "10.2.0.2", true, 1);
    assert_false(allowlist_allows(gie, "10.2.0.1"));
    delete_obj(&GIE_POOLS, ns, "pool");
    wait_for(gie, "10.2.0.2", false, 0);
    /* the tandem.dev pool of the same name is another pool */
    assert_true(allowlist_allows(tan, "10.2.0.2"));
    assert_int_equal(allowlist_size(tan), 1);
    allowlist_free(gie);
    allowlist_free(tan);
}

/* A pool created after the start, with a client made from a kubeconfig file. */
static void test_lk_pool_later_kubeconfig(void **state)
{
    (void)state;
    NEED_LK();
    const char *ns = "al-late";
    create_ns(ns);
    create_pod(ns, "l1", "{\"app\": \"l\"}", "10.3.0.1");
    char path[128];
    snprintf(path, sizeof(path), "%s/kubeconfig", g_lk.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: %s\n  name: lk\n"
            "contexts:\n- context:\n    cluster: lk\n    user: lk\n  name: lk\n"
            "current-context: lk\nusers:\n- name: lk\n  user: {}\n",
            g_lk.server);
    fclose(f);
    char err[512] = "";
    struct allowlist_config c = {.kubeconfig = path, .ns = ns, .pool = "pool"};
    struct allowlist *al = allowlist_new(&c, err, sizeof(err));
    if (!al) {
        fail_msg("allowlist_new: %s", err);
    }
    assert_int_equal(allowlist_size(al), 0);
    assert_false(allowlist_allows(al, "10.3.0.1"));
    create_tandem_pool(ns, "pool", "{\"matchLabels\": {\"app\": \"l\"}}");
    wait_for(al, "10.3.0.1", true, 1);
    assert_true(allowlist_allows(al, "l1"));
    allowlist_free(al);
}

static void expect_start_error(const char *group, const char *ns, long timeout_ms,
                               const char *want1, const char *want2)
{
    char err[512] = "";
    struct allowlist_config c = {.client = g_client,
                                 .ns = ns,
                                 .pool = "pool",
                                 .pool_group = group,
                                 .sync_timeout_ms = timeout_ms};
    struct allowlist *al = allowlist_new(&c, err, sizeof(err));
    if (al || !strstr(err, want1) || !strstr(err, want2)) {
        allowlist_free(al);
        fail_msg("want an error naming \"%s\" and \"%s\", got \"%s\"", want1, want2, err);
    }
}

static void test_lk_start_errors(void **state)
{
    (void)state;
    NEED_LK();
    const char *ns = "al-err";
    create_ns(ns);
    create_tandem_pool(ns, "pool", "{\"matchLabels\": {\"app\": \"e\"}}");
    /* no CRD for GIE v1alpha2 here */
    expect_start_error("inference.networking.x-k8s.io", ns, 5000,
                       "does not serve inferencepools.inference.networking.x-k8s.io/v1alpha2",
                       "CRD");
    /* RBAC: 403 on either resource */
    assert_int_equal(lk_fault(g_client, "{\"type\": \"fail\", \"verb\": \"list\", \"resource\":"
                                        " \"pods\", \"code\": 403, \"count\": 0}"),
                     0);
    expect_start_error(NULL, ns, 5000, "cannot list pods in namespace al-err",
                       "the ServiceAccount needs get, list and watch on pods in namespace al-err");
    assert_int_equal(lk_clear_faults(g_client), 0);
    assert_int_equal(lk_fault(g_client, "{\"type\": \"fail\", \"verb\": \"list\", \"resource\":"
                                        " \"inferencepools\", \"code\": 403, \"count\": 0}"),
                     0);
    expect_start_error(NULL, ns, 5000, "cannot list inferencepools.tandem.dev",
                       "the ServiceAccount needs get, list and watch on "
                       "inferencepools.tandem.dev in namespace al-err");
    assert_int_equal(lk_clear_faults(g_client), 0);
    /* pod lists slower than the sync bound */
    assert_int_equal(lk_fault(g_client, "{\"type\": \"latency\", \"verb\": \"list\", "
                                        "\"resource\": \"pods\", \"ms\": 1500}"),
                     0);
    expect_start_error(NULL, ns, 2000, "the cache of pods in namespace al-err did not sync",
                       "the ServiceAccount needs get, list and watch on pods");
    assert_int_equal(lk_clear_faults(g_client), 0);
    /* and once the faults are gone it starts */
    struct allowlist *al = start(NULL, ns, "pool");
    assert_int_equal(allowlist_size(al), 0);
    allowlist_free(al);
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_selector_tandem),   cmocka_unit_test(test_selector_tandem_bad),
        cmocka_unit_test(test_selector_upstream), cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_pool_ref),          cmocka_unit_test(test_new_errors),
    };
    const struct CMUnitTest watched[] = {
        cmocka_unit_test(test_lk_tandem_pool),
        cmocka_unit_test(test_lk_gie_pool),
        cmocka_unit_test(test_lk_pool_later_kubeconfig),
        cmocka_unit_test(test_lk_start_errors),
    };
    log_init("test_allowlist", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_ERROR, LOG_FORMAT_TEXT);
    int failed = cmocka_run_group_tests_name("allowlist", pure, NULL, NULL);
    failed += cmocka_run_group_tests_name("allowlist_localkube", watched, lk_group_setup,
                                          lk_group_teardown);
    return failed;
}
