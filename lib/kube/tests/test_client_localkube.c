/*
 * lib/kube against a real peer: localkube's API server emulator (e2e/localkube, `python3 -m
 * lk.apiserver --dir TMP --port 0`), started as a child process on 127.0.0.1 and stopped at the
 * end. Covers get/list (limit + continue)/list_all/create (409 AlreadyExists)/update (409 on a
 * stale resourceVersion)/update_status/patch (merge, JSON, server-side apply)/delete with
 * propagation and preconditions, 410 on an expired continue token, retries driven by the
 * emulator's fault API, and a watch that sees ADDED, MODIFIED, DELETED and BOOKMARK events and
 * ends through its stop flag. Skipped only when python3 is missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/clock.h"
#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/config.h"
#include "lib/kube/watch.h"

#define NS "k1-test"

static char tmpdir[64];
static pid_t server_pid = -1;
static struct kube_client *client;
static int have_python;

static uint64_t now_ms(void)
{
    return (uint64_t)tandem_now_ms();
}

static int find_python(void)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin");
    int found = 0;
    char *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char p[512];
        snprintf(p, sizeof(p), "%s/python3", d);
        found = access(p, X_OK) == 0;
    }
    free(copy);
    return found;
}

/* e2e/localkube, found from this file's path (CMake passes absolute paths), else from the test's
 * working directory (lib/kube/tests). */
static void localkube_dir(char *out, size_t len)
{
    const char *me = __FILE__;
    const char *tail = strstr(me, "/lib/kube/tests/");
    if (me[0] == '/' && tail) {
        snprintf(out, len, "%.*s/e2e/localkube", (int)(tail - me), me);
    } else {
        snprintf(out, len, "../../../e2e/localkube");
    }
}

static int start_apiserver(void)
{
    char dir[512];
    localkube_dir(dir, sizeof(dir));
    char log_path[128];
    snprintf(log_path, sizeof(log_path), "%s/apiserver.log", tmpdir);
    server_pid = fork();
    if (server_pid < 0) {
        return -1;
    }
    if (server_pid == 0) {
        setpgid(0, 0);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (chdir(dir) != 0) {
            _exit(126);
        }
        execlp("python3", "python3", "-m", "lk.apiserver", "--dir", tmpdir, "--port", "0", "--host",
               "127.0.0.1", "--bookmark-interval", "0.3", (char *)NULL);
        _exit(127);
    }
    char port_path[128];
    snprintf(port_path, sizeof(port_path), "%s/apiserver.port", tmpdir);
    uint64_t deadline = now_ms() + 30000;
    while (now_ms() < deadline) {
        int status;
        if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
            server_pid = -1;
            char cmd[256];
            fprintf(stderr, "apiserver (in %s) exited early with status %d:\n", dir, status);
            snprintf(cmd, sizeof(cmd), "tail -n 20 '%s' >&2", log_path);
            if (system(cmd) != 0) {
                fprintf(stderr, "(no log)\n");
            }
            return -1;
        }
        FILE *f = fopen(port_path, "r");
        int port = 0;
        if (f) {
            char line[32] = "";
            if (fgets(line, sizeof(line), f)) {
                char *end = NULL;
                long v = strtol(line, &end, 10);
                port = end != line && v > 0 && v < 65536 ? (int)v : 0;
            }
            fclose(f);
        }
        if (port > 0) {
            return port;
        }
        usleep(50 * 1000);
    }
    return -1;
}

static void stop_apiserver(void)
{
    if (server_pid <= 0) {
        return;
    }
    kill(server_pid, SIGTERM);
    uint64_t deadline = now_ms() + 5000;
    int status;
    while (waitpid(server_pid, &status, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(server_pid, SIGKILL);
            waitpid(server_pid, &status, 0);
            break;
        }
        usleep(20 * 1000);
    }
    server_pid = -1;
}

static int setup(void **state)
{
    (void)state;
    have_python = find_python();
    if (!have_python) {
        return 0;
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kube-lk-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        return -1;
    }
    int port = start_apiserver();
    if (port <= 0) {
        return -1;
    }
    /* through a kubeconfig file, as a real user would */
    char kc_path[128], text[512];
    snprintf(kc_path, sizeof(kc_path), "%s/kubeconfig", tmpdir);
    snprintf(text, sizeof(text),
             "apiVersion: v1\nkind: Config\ncurrent-context: lk\nclusters:\n- name: lk\n"
             "  cluster:\n    server: http://127.0.0.1:%d\nusers:\n- name: lk\n  user: {}\n"
             "contexts:\n- name: lk\n  context: {cluster: lk, user: lk, namespace: " NS "}\n",
             port);
    FILE *f = fopen(kc_path, "w");
    if (!f) {
        return -1;
    }
    fputs(text, f);
    fclose(f);
    struct kube_config *cfg = NULL;
    char err[512];
    if (kube_config_load(kc_path, NULL, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    struct kube_client_options o;
    memset(&o, 0, sizeof(o));
    o.user_agent = "tandem-k1-test/0.1";
    o.timeout_ms = 10000;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 200;
    client = kube_client_new(cfg, &o, err, sizeof(err));
    kube_config_free(cfg);
    if (!client) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    /* the test namespace */
    const char *ns_json = "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":"
                          "\"" NS "\"}}";
    struct json_object *ns = json_parse(ns_json, strlen(ns_json), NULL, 0);
    int rc = kube_create(client, &KUBE_NAMESPACES, NULL, ns, NULL, NULL);
    json_object_put(ns);
    return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kube_client_free(client);
    client = NULL;
    stop_apiserver();
    if (tmpdir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) {
            return -1;
        }
    }
    return 0;
}

static struct json_object *parse(const char *text)
{
    char err[256] = "";
    struct json_object *o = json_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad test JSON: %s", err);
    }
    return o;
}

static struct json_object *configmap(const char *name, const char *label)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\","
             "\"labels\":{\"group\":\"%s\"}},\"data\":{\"a\":\"1\"}}",
             name, label);
    return parse(text);
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    char err[256] = "";
    if (json_get_string(o, path, &s, err, sizeof(err)) != 0) {
        fail_msg("%s", err);
    }
    return s;
}

static void fault(const char *spec)
{
    struct buf resp;
    buf_init(&resp, 1 << 16);
    long status = 0;
    int rc = kube_request(client, "POST", "/localkube/faults", "application/json", spec,
                          strlen(spec), &status, &resp, NULL);
    if (rc != 0) {
        fail_msg("fault %s: %d %s", spec, rc, buf_cstr(&resp));
    }
    buf_free(&resp);
}

#define SKIP_WITHOUT_PYTHON()                                                                      \
    do {                                                                                           \
        if (!have_python) {                                                                        \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static void test_crud(void **state)
{
    (void)state;
    SKIP_WITHOUT_PYTHON();
    struct kube_error e;
    struct json_object *out = NULL;
    assert_string_equal(kube_client_namespace(client), NS);

    /* create 7 configmaps (ns NULL → the context's namespace) */
    for (int i = 0; i < 7; i++) {
        char name[16];
        snprintf(name, sizeof(name), "cm-%d", i);
        struct json_object *cm = configmap(name, i % 2 ? "odd" : "even");
        assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NULL, cm, &out, &e), 0);
        assert_string_equal(str_at(out, "metadata.namespace"), NS);
        assert_non_null(json_get(out, "metadata.uid"));
        json_object_put(out);
        json_object_put(cm);
    }
    struct json_object *dup = configmap("cm-0", "even");
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, dup, &out, &e), KUBE_EEXISTS);
    assert_null(out);
    assert_int_equal(e.http_status, 409);
    assert_string_equal(e.reason, "AlreadyExists");
    assert_non_null(strstr(e.message, "already exists"));
    json_object_put(dup);

    /* get */
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "cm-3", &out, &e), 0);
    assert_string_equal(str_at(out, "metadata.labels.group"), "odd");
    json_object_put(out);
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "nope", &out, &e), KUBE_ENOTFOUND);
    assert_int_equal(e.http_status, 404);
    assert_string_equal(e.message, "configmaps \"nope\" not found");

    /* list: one page with limit, then list_all following continue tokens */
    struct kube_list_options lo = {.limit = 3};
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NS, &lo, &out, &e), 0);
    assert_int_equal(json_object_array_length(json_get(out, "items")), 3);
    const char *cont = str_at(out, "metadata.continue");
    assert_true(strlen(cont) > 0);
    json_object_put(out);
    assert_int_equal(kube_list_all(client, &KUBE_CONFIGMAPS, NS, &lo, &out, &e), 0);
    assert_int_equal(json_object_array_length(json_get(out, "items")), 7);
    assert_null(json_get(out, "metadata.continue"));
    assert_string_equal(str_at(out, "kind"), "ConfigMapList");
    json_object_put(out);
    struct kube_list_options sel = {.label_selector = "group in (odd)", .limit = 2};
    assert_int_equal(kube_list_all(client, &KUBE_CONFIGMAPS, NS, &sel, &out, &e), 0);
    assert_int_equal(json_object_array_length(json_get(out, "items")), 3);
    json_object_put(out);
    struct kube_list_options fsel = {.field_selector = "metadata.name=cm-5"};
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NS, &fsel, &out, &e), 0);
    assert_int_equal(json_object_array_length(json_get(out, "items")), 1);
    json_object_put(out);
    /* all namespaces */
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NULL, NULL, &out, &e), 0);
    assert_true(json_object_array_length(json_get(out, "items")) >= 7);
    json_object_put(out);

    /* update with the current resourceVersion, then with the stale one → 409 Conflict */
    struct json_object *cm = NULL;
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "cm-0", &cm, &e), 0);
    char old_rv[32];
    snprintf(old_rv, sizeof(old_rv), "%s", str_at(cm, "metadata.resourceVersion"));
    json_object_object_add(json_get(cm, "data"), "a", json_object_new_string("2"));
    assert_int_equal(kube_update(client, &KUBE_CONFIGMAPS, NS, "cm-0", cm, &out, &e), 0);
    assert_string_equal(str_at(out, "data.a"), "2");
    assert_string_not_equal(str_at(out, "metadata.resourceVersion"), old_rv);
    json_object_put(out);
    json_object_object_add(json_get(cm, "data"), "a", json_object_new_string("3"));
    assert_int_equal(kube_update(client, &KUBE_CONFIGMAPS, NS, NULL, cm, &out, &e), KUBE_ECONFLICT);
    assert_int_equal(e.http_status, 409);
    assert_string_equal(e.reason, "Conflict");
    assert_non_null(strstr(e.message, "the object has been modified"));
    json_object_put(cm);

    /* patches: merge, JSON, server-side apply */
    const char *merge = "{\"data\":{\"b\":\"merged\"}}";
    assert_int_equal(kube_patch(client, &KUBE_CONFIGMAPS, NS, "cm-1", KUBE_PATCH_MERGE, merge,
                                strlen(merge), NULL, &out, &e),
                     0);
    assert_string_equal(str_at(out, "data.a"), "1");
    assert_string_equal(str_at(out, "data.b"), "merged");
    json_object_put(out);
    const char *jp = "[{\"op\":\"add\",\"path\":\"/data/c\",\"value\":\"jp\"},"
                     "{\"op\":\"remove\",\"path\":\"/data/a\"}]";
    assert_int_equal(kube_patch(client, &KUBE_CONFIGMAPS, NS, "cm-1", KUBE_PATCH_JSON, jp,
                                strlen(jp), NULL, &out, &e),
                     0);
    assert_string_equal(str_at(out, "data.c"), "jp");
    assert_null(json_get(out, "data.a"));
    json_object_put(out);
    const char *bad_jp = "[{\"op\":\"test\",\"path\":\"/data/c\",\"value\":\"other\"}]";
    int rc = kube_patch(client, &KUBE_CONFIGMAPS, NS, "cm-1", KUBE_PATCH_JSON, bad_jp,
                        strlen(bad_jp), NULL, &out, &e);
    assert_true(rc == KUBE_EINVALID || rc == KUBE_EBADREQUEST || rc == KUBE_ECONFLICT);
    const char *apply = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n"
                        "data:\n  x: from-apply\n";
    struct kube_patch_options po = {.field_manager = "k1-test"};
    assert_int_equal(kube_patch(client, &KUBE_CONFIGMAPS, NS, "applied", KUBE_PATCH_APPLY, apply,
                                strlen(apply), &po, &out, &e),
                     0);
    assert_string_equal(str_at(out, "data.x"), "from-apply");
    assert_string_equal(str_at(out, "metadata.managedFields[0].manager"), "k1-test");
    json_object_put(out);
    /* dry run changes nothing */
    const char *dry = "{\"data\":{\"x\":\"dry\"}}";
    struct kube_patch_options dro = {.dry_run = 1};
    assert_int_equal(kube_patch(client, &KUBE_CONFIGMAPS, NS, "applied", KUBE_PATCH_MERGE, dry,
                                strlen(dry), &dro, &out, &e),
                     0);
    assert_string_equal(str_at(out, "data.x"), "dry");
    json_object_put(out);
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "applied", &out, &e), 0);
    assert_string_equal(str_at(out, "data.x"), "from-apply");
    json_object_put(out);
    /* an invalid object → 422 Invalid */
    struct json_object *invalid = configmap("Bad_Name", "x");
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, invalid, NULL, &e), KUBE_EINVALID);
    assert_int_equal(e.http_status, 422);
    json_object_put(invalid);
}

static void test_status_subresource(void **state)
{
    (void)state;
    SKIP_WITHOUT_PYTHON();
    const char *dep = "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":"
                      "\"web\"},\"spec\":{\"replicas\":2,\"selector\":{\"matchLabels\":{\"app\":"
                      "\"web\"}},\"template\":{\"metadata\":{\"labels\":{\"app\":\"web\"}},"
                      "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}}}";
    struct json_object *d = parse(dep);
    struct json_object *out = NULL;
    struct kube_error e;
    assert_int_equal(kube_create(client, &KUBE_DEPLOYMENTS, NS, d, &out, &e), 0);
    json_object_put(d);
    /* PUT /status: status changes, a spec change in the same body is ignored */
    json_object_object_add(out, "status", parse("{\"replicas\":2,\"readyReplicas\":1}"));
    json_object_object_add(json_get(out, "spec"), "replicas", json_object_new_int(9));
    struct json_object *after = NULL;
    assert_int_equal(kube_update_status(client, &KUBE_DEPLOYMENTS, NS, "web", out, &after, &e), 0);
    int ready = 0, replicas = 0;
    assert_int_equal(json_get_int(after, "status.readyReplicas", &ready, NULL, 0), 0);
    assert_int_equal(ready, 1);
    assert_int_equal(json_get_int(after, "spec.replicas", &replicas, NULL, 0), 0);
    assert_int_equal(replicas, 2);
    json_object_put(after);
    json_object_put(out);
    /* merge patch on the status subresource */
    const char *sp = "{\"status\":{\"readyReplicas\":2}}";
    struct kube_patch_options po = {.subresource = "status"};
    assert_int_equal(kube_patch(client, &KUBE_DEPLOYMENTS, NS, "web", KUBE_PATCH_MERGE, sp,
                                strlen(sp), &po, &after, &e),
                     0);
    assert_int_equal(json_get_int(after, "status.readyReplicas", &ready, NULL, 0), 0);
    assert_int_equal(ready, 2);
    json_object_put(after);
}

static void test_delete_propagation(void **state)
{
    (void)state;
    SKIP_WITHOUT_PYTHON();
    struct kube_error e;
    struct json_object *owner = NULL, *out = NULL;
    struct json_object *o = configmap("owner", "gc");
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, o, &owner, &e), 0);
    json_object_put(o);
    char text[512];
    snprintf(text, sizeof(text),
             "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"child\","
             "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":"
             "\"owner\",\"uid\":\"%s\",\"controller\":true}]}}",
             str_at(owner, "metadata.uid"));
    struct json_object *child = parse(text);
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, child, NULL, &e), 0);
    json_object_put(child);

    /* preconditions: a wrong resourceVersion → 409 */
    struct kube_delete_options pre = {.grace_period_seconds = -1, .precondition_rv = "1"};
    assert_int_equal(kube_delete(client, &KUBE_CONFIGMAPS, NS, "owner", &pre, NULL, &e),
                     KUBE_ECONFLICT);
    struct kube_delete_options bg = {.propagation_policy = "Background",
                                     .grace_period_seconds = 0,
                                     .precondition_uid = str_at(owner, "metadata.uid")};
    assert_int_equal(kube_delete(client, &KUBE_CONFIGMAPS, NS, "owner", &bg, &out, &e), 0);
    json_object_put(out);
    json_object_put(owner);
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "owner", NULL, &e), KUBE_ENOTFOUND);
    /* the garbage collector removes the dependent */
    int rc = 0;
    for (int i = 0; i < 100; i++) {
        rc = kube_get(client, &KUBE_CONFIGMAPS, NS, "child", NULL, &e);
        if (rc == KUBE_ENOTFOUND) {
            break;
        }
        usleep(50 * 1000);
    }
    assert_int_equal(rc, KUBE_ENOTFOUND);
    /* deleting what is gone → 404; a bad policy → 422 or 400 */
    assert_int_equal(kube_delete(client, &KUBE_CONFIGMAPS, NS, "owner", NULL, NULL, &e),
                     KUBE_ENOTFOUND);
    struct kube_delete_options bad = {.propagation_policy = "Sideways", .grace_period_seconds = -1};
    rc = kube_delete(client, &KUBE_CONFIGMAPS, NS, "cm-6", &bad, NULL, &e);
    assert_true(rc == KUBE_EINVALID || rc == KUBE_EBADREQUEST);
    struct kube_delete_options orphan = {.propagation_policy = "Orphan",
                                         .grace_period_seconds = -1};
    assert_int_equal(kube_delete(client, &KUBE_CONFIGMAPS, NS, "cm-6", &orphan, NULL, &e), 0);
}

static void test_expired_and_faults(void **state)
{
    (void)state;
    SKIP_WITHOUT_PYTHON();
    struct kube_error e;
    struct json_object *out = NULL;
    /* an expired continue token → 410 Expired */
    struct kube_list_options lo = {.limit = 2};
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NS, &lo, &out, &e), 0);
    char cont[512];
    snprintf(cont, sizeof(cont), "%s", str_at(out, "metadata.continue"));
    json_object_put(out);
    fault("{\"type\":\"expire\"}");
    struct kube_list_options next = {.limit = 2, .continue_token = cont};
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NS, &next, &out, &e), KUBE_EEXPIRED);
    assert_int_equal(e.http_status, 410);
    assert_string_equal(e.reason, "Expired");

    /* retries: two 503s on get are absorbed; a 500 on create is not retried */
    struct kube_client_stats before, after;
    kube_client_stats(client, &before);
    fault("{\"type\":\"fail\",\"verb\":\"get\",\"resource\":\"configmaps\",\"code\":503,"
          "\"count\":2,\"retryAfter\":0}");
    assert_int_equal(kube_get(client, &KUBE_CONFIGMAPS, NS, "cm-1", NULL, &e), 0);
    kube_client_stats(client, &after);
    assert_int_equal(after.retries - before.retries, 2);
    fault("{\"type\":\"fail\",\"verb\":\"create\",\"resource\":\"configmaps\",\"code\":500,"
          "\"count\":1}");
    struct json_object *cm = configmap("after-fault", "x");
    kube_client_stats(client, &before);
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, cm, NULL, &e), KUBE_ESERVER);
    kube_client_stats(client, &after);
    assert_int_equal(after.retries - before.retries, 0);
    assert_int_equal(after.requests - before.requests, 1);
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, cm, NULL, &e), 0);
    json_object_put(cm);
    /* 429 with Retry-After on a create is retried */
    fault("{\"type\":\"fail\",\"verb\":\"create\",\"resource\":\"configmaps\",\"code\":429,"
          "\"count\":1,\"retryAfter\":0}");
    cm = configmap("after-429", "x");
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, cm, NULL, &e), 0);
    json_object_put(cm);
}

/* ---- watch ---- */

struct watch_state {
    pthread_mutex_t mu;
    int added, modified, deleted, bookmarks, errors;
    char last_rv[32];
    volatile int stop;
    int rc;
    struct kube_error err;
    const char *rv;
};

static int on_event(void *ud, enum kube_event_type type, struct json_object *obj)
{
    struct watch_state *w = ud;
    const char *name = NULL, *rv = NULL;
    json_opt_string(obj, "metadata.name", "", &name, NULL, 0);
    json_opt_string(obj, "metadata.resourceVersion", "", &rv, NULL, 0);
    pthread_mutex_lock(&w->mu);
    int mine = name && strcmp(name, "watched") == 0;
    switch (type) {
    case KUBE_EVENT_ADDED:
        w->added += mine;
        break;
    case KUBE_EVENT_MODIFIED:
        w->modified += mine;
        break;
    case KUBE_EVENT_DELETED:
        w->deleted += mine;
        break;
    case KUBE_EVENT_BOOKMARK:
        w->bookmarks++;
        break;
    case KUBE_EVENT_ERROR:
        w->errors++;
        break;
    }
    snprintf(w->last_rv, sizeof(w->last_rv), "%s", rv ? rv : "");
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void *watch_main(void *arg)
{
    struct watch_state *w = arg;
    struct kube_watch_options o = {.resource_version = w->rv,
                                   .allow_bookmarks = 1,
                                   .timeout_seconds = 60,
                                   .inactivity_timeout_ms = 20000,
                                   .stop = &w->stop};
    w->rc = kube_watch(client, &KUBE_CONFIGMAPS, NS, &o, on_event, w, &w->err);
    return NULL;
}

static int wait_for(struct watch_state *w, int (*cond)(struct watch_state *), long ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int ok = cond(w);
        pthread_mutex_unlock(&w->mu);
        if (ok || now_ms() > deadline) {
            return ok;
        }
        usleep(20 * 1000);
    }
}

static int saw_all(struct watch_state *w)
{
    return w->added >= 1 && w->modified >= 1 && w->deleted >= 1 && w->bookmarks >= 1;
}

static void test_watch(void **state)
{
    (void)state;
    SKIP_WITHOUT_PYTHON();
    struct kube_error e;
    struct json_object *list = NULL;
    assert_int_equal(kube_list(client, &KUBE_CONFIGMAPS, NS, NULL, &list, &e), 0);
    char rv[32];
    snprintf(rv, sizeof(rv), "%s", str_at(list, "metadata.resourceVersion"));
    json_object_put(list);

    struct watch_state w;
    memset(&w, 0, sizeof(w));
    pthread_mutex_init(&w.mu, NULL);
    w.rv = rv;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, watch_main, &w), 0);

    struct json_object *cm = configmap("watched", "w");
    assert_int_equal(kube_create(client, &KUBE_CONFIGMAPS, NS, cm, NULL, &e), 0);
    json_object_put(cm);
    const char *p = "{\"data\":{\"a\":\"changed\"}}";
    assert_int_equal(kube_patch(client, &KUBE_CONFIGMAPS, NS, "watched", KUBE_PATCH_MERGE, p,
                                strlen(p), NULL, NULL, &e),
                     0);
    assert_int_equal(kube_delete(client, &KUBE_CONFIGMAPS, NS, "watched", NULL, NULL, &e), 0);

    int ok = wait_for(&w, saw_all, 15000);
    uint64_t t0 = now_ms();
    w.stop = 1;
    pthread_join(t, NULL);
    uint64_t stop_took = now_ms() - t0;
    pthread_mutex_destroy(&w.mu);
    if (!ok) {
        fail_msg("watch saw added=%d modified=%d deleted=%d bookmarks=%d (rc %d: %s)", w.added,
                 w.modified, w.deleted, w.bookmarks, w.rc, w.err.message);
    }
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.added, 1);
    assert_int_equal(w.modified, 1);
    assert_int_equal(w.deleted, 1);
    assert_int_equal(w.errors, 0);
    assert_true(stop_took < 1000);

    /* a watch from a compacted resourceVersion ends with 410 (an ERROR event or the answer) */
    fault("{\"type\":\"expire\"}");
    memset(&w, 0, sizeof(w));
    pthread_mutex_init(&w.mu, NULL);
    w.rv = rv;
    watch_main(&w);
    pthread_mutex_destroy(&w.mu);
    assert_true(w.rc == KUBE_EEXPIRED || (w.rc == 0 && w.errors == 1));

    struct kube_client_stats st;
    kube_client_stats(client, &st);
    assert_true(st.watches >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crud),
        cmocka_unit_test(test_status_subresource),
        cmocka_unit_test(test_delete_propagation),
        cmocka_unit_test(test_expired_and_faults),
        cmocka_unit_test(test_watch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
