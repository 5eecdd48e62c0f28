/* Tests for lib/kube/informer against localkube's API server emulator: initial sync, add/update/
 * delete events, recovery from dropped watches, expired resourceVersions and failing requests
 * without lost or duplicated events, bookmarks, selectors, indexes, resync and a prompt stop. The
 * label-selector matcher is also tested on its own. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/informer.h"
#include "lib/log.h"

#include "lk_harness.h"

static struct lk g_lk;
static struct kube_client *g_client;

static int group_setup(void **state)
{
    (void)state;
    log_init("test_informer", getenv("LK_DEBUG") ? LOGL_DEBUG : LOGL_WARN, LOG_FORMAT_TEXT);
    if (lk_start(&g_lk) != 0) {
        return -1;
    }
    g_client = lk_client(&g_lk, NULL);
    return g_client ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    kube_client_free(g_client);
    lk_stop(&g_lk);
    return 0;
}

/* ---- helpers ---- */

static struct json_object *parse(const char *fmt, ...) TANDEM_PRINTF(1, 2);
static struct json_object *parse(const char *fmt, ...)
{
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    char err[256];
    struct json_object *o = json_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("bad JSON in test: %s: %s", err, text);
    }
    return o;
}

static void make_namespace(const char *ns)
{
    struct json_object *o = parse("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\","
                                  "\"metadata\":{\"name\":\"%s\"}}",
                                  ns);
    struct kube_error err = {0};
    int rc = kube_create(g_client, &KUBE_NAMESPACES, NULL, o, NULL, &err);
    json_object_put(o);
    if (rc != 0) {
        fail_msg("create namespace %s: %s %s", ns, tandem_strerror(rc), err.message);
    }
}

/* Creates a ConfigMap; labels is a JSON object text; owner_uid may be NULL. Returns its uid
 * (static buffer). */
static const char *create_cm_owned(const char *ns, const char *name, const char *labels,
                                   const char *owner_name, const char *owner_uid)
{
    static char uid[128];
    char owner[512] = "";
    if (owner_uid) {
        snprintf(owner, sizeof(owner),
                 ",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                 "\"name\":\"%s\",\"uid\":\"%s\",\"controller\":true}]",
                 owner_name, owner_uid);
    }
    struct json_object *o = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                                  "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\","
                                  "\"labels\":%s%s},\"data\":{\"v\":\"0\"}}",
                                  name, ns, labels ? labels : "{}", owner);
    struct json_object *out = NULL;
    struct kube_error err = {0};
    int rc = kube_create(g_client, &KUBE_CONFIGMAPS, ns, o, &out, &err);
    json_object_put(o);
    if (rc != 0) {
        fail_msg("create %s/%s: %s %s", ns, name, tandem_strerror(rc), err.message);
    }
    const char *u = "";
    json_get_string(out, "metadata.uid", &u, NULL, 0);
    snprintf(uid, sizeof(uid), "%s", u);
    json_object_put(out);
    return uid;
}

static const char *create_cm(const char *ns, const char *name, const char *labels)
{
    return create_cm_owned(ns, name, labels, NULL, NULL);
}

static void patch_cm(const char *ns, const char *name, const char *patch)
{
    struct kube_error err = {0};
    int rc = kube_patch(g_client, &KUBE_CONFIGMAPS, ns, name, KUBE_PATCH_MERGE, patch,
                        strlen(patch), NULL, NULL, &err);
    if (rc != 0) {
        fail_msg("patch %s/%s: %s %s", ns, name, tandem_strerror(rc), err.message);
    }
}

static void delete_cm(const char *ns, const char *name)
{
    struct kube_error err = {0};
    int rc = kube_delete(g_client, &KUBE_CONFIGMAPS, ns, name, NULL, NULL, &err);
    if (rc != 0) {
        fail_msg("delete %s/%s: %s %s", ns, name, tandem_strerror(rc), err.message);
    }
}

/* What the handlers saw, rebuilt from the events: key → resourceVersion. */
struct rec {
    pthread_mutex_t lock;
    struct json_object *mirror;
    int adds, updates, deletes, resyncs;
    int dup_adds, bad_updates, bad_deletes, unchanged_updates;
    atomic_int in_handler;
    atomic_int concurrent;
    atomic_int bad_keys;
    pthread_t thread;
    int thread_set, wrong_thread;
};

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->lock, NULL);
    r->mirror = json_object_new_object();
}

static void rec_deinit(struct rec *r)
{
    json_object_put(r->mirror);
    pthread_mutex_destroy(&r->lock);
}

static void rec_enter(struct rec *r)
{
    if (atomic_fetch_add(&r->in_handler, 1) != 0) {
        atomic_fetch_add(&r->concurrent, 1);
    }
    pthread_mutex_lock(&r->lock);
    if (!r->thread_set) {
        r->thread = pthread_self();
        r->thread_set = 1;
    } else if (!pthread_equal(r->thread, pthread_self())) {
        r->wrong_thread++;
    }
}

static void rec_leave(struct rec *r)
{
    pthread_mutex_unlock(&r->lock);
    atomic_fetch_sub(&r->in_handler, 1);
}

static const char *rv_of(struct json_object *o)
{
    const char *rv = "";
    json_get_string(o, "metadata.resourceVersion", &rv, NULL, 0);
    return rv;
}

static void on_add(void *ud, struct json_object *obj)
{
    struct rec *r = ud;
    char key[256];
    if (kube_object_key(obj, key, sizeof(key)) != 0) {
        atomic_fetch_add(&r->bad_keys, 1);
        return;
    }
    rec_enter(r);
    if (json_object_object_get_ex(r->mirror, key, NULL)) {
        r->dup_adds++;
    }
    json_object_object_add(r->mirror, key, json_object_new_string(rv_of(obj)));
    r->adds++;
    rec_leave(r);
}

static void on_update(void *ud, struct json_object *old_obj, struct json_object *new_obj)
{
    struct rec *r = ud;
    char key[256];
    if (kube_object_key(new_obj, key, sizeof(key)) != 0) {
        atomic_fetch_add(&r->bad_keys, 1);
        return;
    }
    rec_enter(r);
    if (!json_object_object_get_ex(r->mirror, key, NULL)) {
        r->bad_updates++;
    }
    if (old_obj == new_obj) {
        r->resyncs++;
    } else {
        r->updates++;
        if (strcmp(rv_of(old_obj), rv_of(new_obj)) == 0) {
            r->unchanged_updates++;
        }
    }
    json_object_object_add(r->mirror, key, json_object_new_string(rv_of(new_obj)));
    rec_leave(r);
}

static void on_delete(void *ud, struct json_object *obj)
{
    struct rec *r = ud;
    char key[256];
    if (kube_object_key(obj, key, sizeof(key)) != 0) {
        atomic_fetch_add(&r->bad_keys, 1);
        return;
    }
    rec_enter(r);
    if (!json_object_object_get_ex(r->mirror, key, NULL)) {
        r->bad_deletes++;
    }
    json_object_object_del(r->mirror, key);
    r->deletes++;
    rec_leave(r);
}

static int rec_get(struct rec *r, const int *field)
{
    pthread_mutex_lock(&r->lock);
    int v = *field;
    pthread_mutex_unlock(&r->lock);
    return v;
}

/* Polls cond(ud) every 20 ms for up to timeout_ms. */
static int wait_for(int (*cond)(void *), void *ud, long timeout_ms)
{
    long long end = lk_now_ms() + timeout_ms;
    while (lk_now_ms() < end) {
        if (cond(ud)) {
            return 1;
        }
        lk_sleep_ms(20);
    }
    return cond(ud);
}

/* Server state of namespace ns: key → resourceVersion (a new object). */
static struct json_object *server_state(const char *ns, const char *selector)
{
    struct kube_list_options o = {.label_selector = selector};
    struct json_object *list = NULL;
    struct kube_error err = {0};
    int rc = kube_list(g_client, &KUBE_CONFIGMAPS, ns, &o, &list, &err);
    if (rc != 0) {
        fail_msg("list: %s %s", tandem_strerror(rc), err.message);
    }
    struct json_object *state = json_object_new_object();
    struct json_object *items = json_get(list, "items");
    for (size_t i = 0; items && i < json_object_array_length(items); i++) {
        struct json_object *it = json_object_array_get_idx(items, i);
        char key[256];
        assert_int_equal(kube_object_key(it, key, sizeof(key)), 0);
        json_object_object_add(state, key, json_object_new_string(rv_of(it)));
    }
    json_object_put(list);
    return state;
}

static struct json_object *informer_state(struct kube_informer *inf)
{
    struct json_object **items = NULL;
    size_t n = 0;
    assert_int_equal(kube_informer_list(inf, NULL, NULL, &items, &n), 0);
    struct json_object *state = json_object_new_object();
    for (size_t i = 0; i < n; i++) {
        char key[256];
        assert_int_equal(kube_object_key(items[i], key, sizeof(key)), 0);
        json_object_object_add(state, key, json_object_new_string(rv_of(items[i])));
        json_object_put(items[i]);
    }
    free((void *)items);
    return state;
}

static int same_state(struct json_object *a, struct json_object *b)
{
    return json_object_equal(a, b);
}

struct converge {
    struct rec *r;
    struct kube_informer *inf;
    const char *ns;
    const char *selector;
};

static int converged(void *ud)
{
    struct converge *c = ud;
    struct json_object *srv = server_state(c->ns, c->selector);
    struct json_object *cache = informer_state(c->inf);
    pthread_mutex_lock(&c->r->lock);
    int ok = same_state(srv, cache) && same_state(srv, c->r->mirror);
    pthread_mutex_unlock(&c->r->lock);
    json_object_put(srv);
    json_object_put(cache);
    return ok;
}

static void assert_converged(struct rec *r, struct kube_informer *inf, const char *ns,
                             const char *selector, long timeout_ms)
{
    struct converge c = {r, inf, ns, selector};
    if (!wait_for(converged, &c, timeout_ms)) {
        struct json_object *srv = server_state(ns, selector);
        struct json_object *cache = informer_state(inf);
        fail_msg("not converged:\nserver %s\ncache  %s\nmirror %s", json_object_to_json_string(srv),
                 json_object_to_json_string(cache), json_object_to_json_string(r->mirror));
    }
}

static void assert_clean(struct rec *r)
{
    pthread_mutex_lock(&r->lock);
    assert_int_equal(r->dup_adds, 0);
    assert_int_equal(r->bad_updates, 0);
    assert_int_equal(r->bad_deletes, 0);
    assert_int_equal(r->unchanged_updates, 0);
    assert_int_equal(r->wrong_thread, 0);
    pthread_mutex_unlock(&r->lock);
    assert_int_equal(atomic_load(&r->concurrent), 0);
    assert_int_equal(atomic_load(&r->bad_keys), 0);
}

static struct kube_informer *start_informer(struct rec *r, const char *ns, const char *selector,
                                            long resync)
{
    struct kube_informer_handlers h = {on_add, on_update, on_delete, r};
    struct kube_informer *inf =
        kube_informer_new(g_client, &KUBE_CONFIGMAPS, ns, selector, resync, &h);
    assert_non_null(inf);
    return inf;
}

/* ---- tests ---- */

static void test_selector_match(void **state)
{
    (void)state;
    struct json_object *labels = parse("{\"app\":\"web\",\"tier\":\"front\",\"n\":\"5\"}");
    static const struct {
        const char *sel;
        int want;
    } cases[] = {
        {"", 1},
        {"app=web", 1},
        {"app==web", 1},
        {"app = web", 1},
        {"app=db", 0},
        {"app!=db", 1},
        {"app!=web", 0},
        {"missing!=x", 1},
        {"app", 1},
        {"missing", 0},
        {"!missing", 1},
        {"!app", 0},
        {"app in (web,db)", 1},
        {"app in (db, cache)", 0},
        {"app notin (db)", 1},
        {"app notin (web)", 0},
        {"missing notin (x)", 1},
        {"missing in (x)", 0},
        {"app=web,tier=front", 1},
        {"app=web, tier=back", 0},
        {"n>4", 1},
        {"n>5", 0},
        {"n<6", 1},
        {"app>1", 0},
        {"app=web,!missing,tier in (front)", 1},
        {"app=", 0},
        {"example.com/role=x", 0},
        {"app=web,", -EINVAL},
        {"=web", -EINVAL},
        {"app in web", -EINVAL},
        {"app in (web", -EINVAL},
        {"app=we b", -EINVAL},
        {"n>x", -EINVAL},
        {"app=web)", -EINVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = kube_label_selector_match(cases[i].sel, labels);
        if (got != cases[i].want) {
            fail_msg("selector \"%s\": got %d want %d", cases[i].sel, got, cases[i].want);
        }
    }
    assert_int_equal(kube_label_selector_match("!app", NULL), 1);
    assert_int_equal(kube_label_selector_match("app", NULL), 0);
    json_object_put(labels);

    char key[64];
    struct json_object *o = parse("{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"}}");
    assert_int_equal(kube_object_key(o, key, sizeof(key)), 0);
    assert_string_equal(key, "ns/a");
    assert_int_equal(kube_object_key(o, key, 4), -ENOSPC);
    json_object_put(o);
    o = parse("{\"metadata\":{\"name\":\"node-1\"}}");
    assert_int_equal(kube_object_key(o, key, sizeof(key)), 0);
    assert_string_equal(key, "node-1");
    json_object_put(o);
    o = parse("{\"metadata\":{}}");
    assert_int_equal(kube_object_key(o, key, sizeof(key)), -EINVAL);
    json_object_put(o);
}

static void test_sync_and_events(void **state)
{
    (void)state;
    const char *ns = "inf-events";
    make_namespace(ns);
    create_cm(ns, "a", "{\"app\":\"x\"}");
    create_cm(ns, "b", "{\"app\":\"y\"}");
    create_cm(ns, "c", NULL);
    create_cm("default", "elsewhere", NULL);

    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, NULL, 0);
    assert_int_equal(kube_informer_has_synced(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10), -ETIMEDOUT); /* not started */
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_start(inf), -EBUSY);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    assert_int_equal(kube_informer_has_synced(inf), 1);
    /* the initial list was delivered before has_synced */
    assert_int_equal(rec_get(&r, &r.adds), 3);
    assert_int_equal(kube_informer_count(inf), 3);
    struct json_object *a = kube_informer_get(inf, ns, "a");
    assert_non_null(a);
    const char *s;
    assert_int_equal(json_get_string(a, "kind", &s, NULL, 0), 0);
    assert_string_equal(s, "ConfigMap");
    assert_int_equal(json_get_string(a, "apiVersion", &s, NULL, 0), 0);
    assert_string_equal(s, "v1");
    json_object_put(a);
    assert_null(kube_informer_get(inf, ns, "nope"));
    assert_null(kube_informer_get(inf, "default", "elsewhere"));

    create_cm(ns, "d", NULL);
    patch_cm(ns, "a", "{\"data\":{\"v\":\"1\"}}");
    delete_cm(ns, "b");
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_int_equal(rec_get(&r, &r.adds), 4);
    assert_int_equal(rec_get(&r, &r.updates), 1);
    assert_int_equal(rec_get(&r, &r.deletes), 1);
    a = kube_informer_get(inf, ns, "a");
    assert_int_equal(json_get_string(a, "data.v", &s, NULL, 0), 0);
    assert_string_equal(s, "1");
    json_object_put(a);

    /* the RV follows the stream */
    char *rv = kube_informer_last_resource_version(inf);
    assert_non_null(rv);
    assert_true(strtoll(rv, NULL, 10) > 0);
    free(rv);

    /* stop interrupts the open watch promptly */
    long long t0 = lk_now_ms();
    kube_informer_stop(inf);
    long long took = lk_now_ms() - t0;
    if (took >= 1000) {
        fail_msg("stop took %lld ms", took);
    }
    kube_informer_stop(inf); /* idempotent */
    assert_int_equal(kube_informer_wait_synced(inf, 10), 0);
    int adds = rec_get(&r, &r.adds);
    create_cm(ns, "after-stop", NULL);
    lk_sleep_ms(300);
    assert_int_equal(rec_get(&r, &r.adds), adds); /* no handler after stop */
    assert_clean(&r);
    kube_informer_free(inf);
    rec_deinit(&r);
}

struct rv_wait {
    struct kube_informer *inf;
    long long want;
};

static int rv_reached(void *ud)
{
    struct rv_wait *w = ud;
    char *rv = kube_informer_last_resource_version(w->inf);
    int ok = rv && strtoll(rv, NULL, 10) >= w->want;
    free(rv);
    return ok;
}

static void test_bookmarks_advance_rv(void **state)
{
    (void)state;
    const char *ns = "inf-bookmarks";
    make_namespace(ns);
    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, NULL, 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    /* a change the informer does not see (another namespace) moves the global RV; the server's
     * BOOKMARKs (every second here) carry it to the informer */
    create_cm("default", "bookmark-mover", NULL);
    struct json_object *o = NULL;
    assert_int_equal(kube_get(g_client, &KUBE_CONFIGMAPS, "default", "bookmark-mover", &o, NULL),
                     0);
    struct rv_wait w = {inf, strtoll(rv_of(o), NULL, 10)};
    json_object_put(o);
    assert_true(wait_for(rv_reached, &w, 5000));
    assert_int_equal(rec_get(&r, &r.adds), 0);
    kube_informer_free(inf);
    rec_deinit(&r);
}

static void test_faults_recover(void **state)
{
    (void)state;
    const char *ns = "inf-faults";
    make_namespace(ns);
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "cm-%d", i);
        create_cm(ns, name, NULL);
    }
    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, NULL, 0);
    /* client-go's 800 ms .. 30 s would make this test slow; the logic is the same */
    assert_int_equal(kube_informer_set_backoff(inf, 100, 1000), 0);
    assert_int_equal(kube_informer_set_backoff(inf, 100, 10), -EINVAL);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_set_backoff(inf, 100, 1000), -EBUSY);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    assert_int_equal(rec_get(&r, &r.adds), 10);

    /* 1: dropped watches; changes while the informer re-watches from its last RV */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"dropWatches\"}"), 0);
    create_cm(ns, "new-1", NULL);
    patch_cm(ns, "cm-0", "{\"data\":{\"v\":\"1\"}}");
    delete_cm(ns, "cm-1");
    assert_converged(&r, inf, ns, NULL, 10000);

    /* 2: history compacted and watches dropped: the re-watch gets ERROR 410 and relists; the
     * changes made meanwhile arrive through the relist diff */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"expire\"}"), 0);
    assert_int_equal(lk_fault(g_client, "{\"type\":\"dropWatches\"}"), 0);
    create_cm(ns, "new-2", NULL);
    patch_cm(ns, "cm-2", "{\"data\":{\"v\":\"2\"}}");
    delete_cm(ns, "cm-3");
    delete_cm(ns, "new-1");
    assert_converged(&r, inf, ns, NULL, 15000);

    /* 3: the API server fails watches and lists for a while */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"watch\",\"resource\":"
                                        "\"configmaps\",\"code\":500,\"count\":2}"),
                     0);
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"list\",\"resource\":"
                                        "\"configmaps\",\"code\":503,\"count\":1}"),
                     0);
    assert_int_equal(lk_fault(g_client, "{\"type\":\"dropWatches\"}"), 0);
    create_cm(ns, "new-3", NULL);
    patch_cm(ns, "cm-4", "{\"data\":{\"v\":\"3\"}}");
    delete_cm(ns, "cm-5");
    assert_converged(&r, inf, ns, NULL, 20000);

    /* 4: throttled (429) watches: backoff, then a re-watch */
    assert_int_equal(lk_fault(g_client, "{\"type\":\"fail\",\"verb\":\"watch\",\"resource\":"
                                        "\"configmaps\",\"code\":429,\"count\":1,"
                                        "\"retryAfter\":0}"),
                     0);
    assert_int_equal(lk_fault(g_client, "{\"type\":\"dropWatches\"}"), 0);
    patch_cm(ns, "cm-6", "{\"data\":{\"v\":\"4\"}}");
    assert_converged(&r, inf, ns, NULL, 20000);
    assert_int_equal(lk_clear_faults(g_client), 0);

    /* and it keeps streaming afterwards */
    create_cm(ns, "new-4", NULL);
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_clean(&r);
    kube_informer_free(inf);
    rec_deinit(&r);
}

static void test_selector_informer(void **state)
{
    (void)state;
    const char *ns = "inf-selector";
    make_namespace(ns);
    create_cm(ns, "web-1", "{\"app\":\"web\",\"tier\":\"front\"}");
    create_cm(ns, "web-2", "{\"app\":\"web\",\"tier\":\"back\"}");
    create_cm(ns, "db-1", "{\"app\":\"db\"}");
    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, "app=web", 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    assert_int_equal(kube_informer_count(inf), 2);
    assert_null(kube_informer_get(inf, ns, "db-1"));
    create_cm(ns, "web-3", "{\"app\":\"web\"}");
    create_cm(ns, "db-2", "{\"app\":\"db\"}");
    assert_converged(&r, inf, ns, "app=web", 10000);
    assert_int_equal(kube_informer_count(inf), 3);

    struct json_object **items = NULL;
    size_t n = 0;
    assert_int_equal(kube_informer_list(inf, ns, "tier in (front,back)", &items, &n), 0);
    assert_int_equal(n, 2);
    const char *s;
    json_get_string(items[0], "metadata.name", &s, NULL, 0);
    assert_string_equal(s, "web-1"); /* sorted by key */
    json_get_string(items[1], "metadata.name", &s, NULL, 0);
    assert_string_equal(s, "web-2");
    for (size_t i = 0; i < n; i++) {
        json_object_put(items[i]);
    }
    free((void *)items);
    assert_int_equal(kube_informer_list(inf, ns, "!tier", &items, &n), 0);
    assert_int_equal(n, 1);
    json_object_put(items[0]);
    free((void *)items);
    assert_int_equal(kube_informer_list(inf, "other-ns", NULL, &items, &n), 0);
    assert_int_equal(n, 0);
    assert_null(items);
    assert_int_equal(kube_informer_list(inf, NULL, "tier in (", &items, &n), -EINVAL);
    /* an object whose labels stop matching leaves the cache (the server sends DELETED) */
    patch_cm(ns, "web-2", "{\"metadata\":{\"labels\":{\"app\":\"db\"}}}");
    assert_converged(&r, inf, ns, "app=web", 10000);
    assert_null(kube_informer_get(inf, ns, "web-2"));
    assert_int_equal(rec_get(&r, &r.deletes), 1);
    kube_informer_free(inf);
    assert_clean(&r);
    rec_deinit(&r);
}

static void put_all(struct json_object **items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_object_put(items[i]);
    }
    free((void *)items);
}

static void assert_names(struct json_object **items, size_t n, const char *const *want,
                         size_t nwant)
{
    if (n != nwant) {
        fail_msg("got %zu objects, want %zu", n, nwant);
    }
    for (size_t i = 0; i < n && i < nwant; i++) {
        const char *s = "";
        json_get_string(items[i], "metadata.name", &s, NULL, 0);
        if (strcmp(s, want[i]) != 0) {
            fail_msg("object %zu: %s, want %s", i, s, want[i]);
        }
    }
}

struct count_wait {
    struct kube_informer *inf;
    const char *uid;
    size_t want;
};

static int owner_count_is(void *ud)
{
    struct count_wait *w = ud;
    struct json_object **items = NULL;
    size_t n = 0;
    kube_informer_by_owner(w->inf, w->uid, &items, &n);
    put_all(items, n);
    return n == w->want;
}

static void test_indexes(void **state)
{
    (void)state;
    const char *ns = "inf-index";
    make_namespace(ns);
    char owner1[128], owner2[128];
    snprintf(owner1, sizeof(owner1), "%s", create_cm(ns, "owner-1", NULL));
    snprintf(owner2, sizeof(owner2), "%s", create_cm(ns, "owner-2", NULL));
    create_cm_owned(ns, "child-a", "{\"tier\":\"front\"}", "owner-1", owner1);
    create_cm_owned(ns, "child-b", "{\"tier\":\"back\"}", "owner-1", owner1);
    create_cm_owned(ns, "child-c", "{\"tier\":\"front\"}", "owner-2", owner2);

    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, NULL, 0);
    assert_int_equal(kube_informer_add_label_index(inf, "tier"), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_add_label_index(inf, "late"), -EBUSY);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);

    struct json_object **items = NULL;
    size_t n = 0;
    assert_int_equal(kube_informer_by_owner(inf, owner1, &items, &n), 0);
    static const char *const o1[] = {"child-a", "child-b"};
    assert_names(items, n, o1, 2);
    put_all(items, n);
    assert_int_equal(kube_informer_by_owner(inf, "no-such-uid", &items, &n), 0);
    assert_int_equal(n, 0);

    assert_int_equal(kube_informer_by_label(inf, "tier", "front", &items, &n), 0);
    static const char *const front[] = {"child-a", "child-c"};
    assert_names(items, n, front, 2);
    put_all(items, n);

    /* indexes follow updates and deletes */
    patch_cm(ns, "child-a", "{\"metadata\":{\"labels\":{\"tier\":\"back\"}}}");
    delete_cm(ns, "child-c");
    create_cm_owned(ns, "child-d", "{\"tier\":\"front\"}", "owner-2", owner2);
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_int_equal(kube_informer_by_label(inf, "tier", "front", &items, &n), 0);
    static const char *const front2[] = {"child-d"};
    assert_names(items, n, front2, 1);
    put_all(items, n);
    assert_int_equal(kube_informer_by_label(inf, "tier", "back", &items, &n), 0);
    static const char *const back[] = {"child-a", "child-b"};
    assert_names(items, n, back, 2);
    put_all(items, n);
    assert_int_equal(kube_informer_by_owner(inf, owner2, &items, &n), 0);
    assert_names(items, n, front2, 1);
    put_all(items, n);
    /* a label without an index is answered by a scan */
    patch_cm(ns, "child-b", "{\"metadata\":{\"labels\":{\"extra\":\"1\"}}}");
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_int_equal(kube_informer_by_label(inf, "extra", "1", &items, &n), 0);
    static const char *const extra[] = {"child-b"};
    assert_names(items, n, extra, 1);
    put_all(items, n);

    /* deleting the owner: the API server's garbage collector deletes its dependents */
    delete_cm(ns, "owner-1");
    struct count_wait w = {inf, owner1, 0};
    assert_true(wait_for(owner_count_is, &w, 10000));
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_clean(&r);
    kube_informer_free(inf);
    rec_deinit(&r);
}

static int resyncs_at_least(void *ud)
{
    struct rec *r = ud;
    return rec_get(r, &r->resyncs) >= 6;
}

static void test_resync(void **state)
{
    (void)state;
    const char *ns = "inf-resync";
    make_namespace(ns);
    create_cm(ns, "r1", NULL);
    create_cm(ns, "r2", NULL);
    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, ns, NULL, 1);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    /* every second both objects come again as update(obj, obj): 3 rounds within ~5 s */
    assert_true(wait_for(resyncs_at_least, &r, 8000));
    assert_int_equal(rec_get(&r, &r.updates), 0);
    /* and events still flow between resyncs */
    create_cm(ns, "r3", NULL);
    assert_converged(&r, inf, ns, NULL, 10000);
    long long t0 = lk_now_ms();
    kube_informer_free(inf);
    assert_true(lk_now_ms() - t0 < 1000);
    assert_clean(&r);
    rec_deinit(&r);
}

static void test_cluster_scoped_all_namespaces(void **state)
{
    (void)state;
    make_namespace("inf-all-1");
    make_namespace("inf-all-2");
    create_cm("inf-all-1", "x", "{\"probe\":\"all\"}");
    create_cm("inf-all-2", "x", "{\"probe\":\"all\"}");
    struct rec r;
    rec_init(&r);
    struct kube_informer *inf = start_informer(&r, NULL, "probe=all", 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    assert_int_equal(kube_informer_count(inf), 2);
    struct json_object *o = kube_informer_get(inf, "inf-all-2", "x");
    assert_non_null(o);
    json_object_put(o);
    struct json_object **items = NULL;
    size_t n = 0;
    assert_int_equal(kube_informer_list(inf, "inf-all-1", NULL, &items, &n), 0);
    assert_int_equal(n, 1);
    put_all(items, n);
    kube_informer_free(inf);

    /* namespaces are cluster-scoped: keys are bare names */
    rec_deinit(&r);
    rec_init(&r);
    struct kube_informer_handlers h = {on_add, on_update, on_delete, &r};
    inf = kube_informer_new(g_client, &KUBE_NAMESPACES, NULL, NULL, 0, &h);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_synced(inf, 10000), 0);
    o = kube_informer_get(inf, NULL, "inf-all-1");
    assert_non_null(o);
    json_object_put(o);
    pthread_mutex_lock(&r.lock);
    assert_true(json_object_object_get_ex(r.mirror, "kube-system", NULL));
    pthread_mutex_unlock(&r.lock);
    kube_informer_free(inf);
    assert_clean(&r);
    rec_deinit(&r);
}

static void count_transform(void *ud, struct json_object *obj)
{
    atomic_fetch_add((atomic_int *)ud, 1);
    kube_informer_strip_managed_fields(NULL, obj);
}

/* More objects than a list page (500): the list is applied page by page, every object passes the
 * transform once, and the cache holds the transformed objects (no managedFields, which the
 * server does keep), also after watch events. */
static void test_transform_and_pages(void **state)
{
    (void)state;
    const char *ns = "inf-pages";
    enum { N = 520 };
    make_namespace(ns);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof(name), "cm-%03d", i);
        create_cm(ns, name, i % 2 ? "{\"odd\":\"1\"}" : "{\"odd\":\"0\"}");
    }
    struct json_object *live = NULL;
    struct kube_error err = {0};
    assert_int_equal(kube_get(g_client, &KUBE_CONFIGMAPS, ns, "cm-007", &live, &err), 0);
    assert_non_null(json_get(live, "metadata.managedFields")); /* the server tracks them */
    json_object_put(live);

    struct rec r;
    rec_init(&r);
    atomic_int calls = 0;
    struct kube_informer *inf = start_informer(&r, ns, NULL, 0);
    assert_int_equal(kube_informer_set_transform(inf, count_transform, &calls), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_set_transform(inf, NULL, NULL), -EBUSY);
    assert_int_equal(kube_informer_wait_synced(inf, 30000), 0);
    assert_int_equal(rec_get(&r, &r.adds), N);
    assert_int_equal(kube_informer_count(inf), N);
    assert_int_equal(atomic_load(&calls), N);

    struct json_object *o = kube_informer_get(inf, ns, "cm-007");
    assert_non_null(o);
    assert_null(json_get(o, "metadata.managedFields"));
    const char *s;
    assert_int_equal(json_get_string(o, "metadata.labels.odd", &s, NULL, 0), 0);
    assert_string_equal(s, "1");
    assert_int_equal(json_get_string(o, "kind", &s, NULL, 0), 0);
    assert_string_equal(s, "ConfigMap");
    /* a copy: changing it does not change the cache */
    json_object_object_add(json_get(o, "data"), "v", json_object_new_string("changed"));
    json_object_put(o);
    o = kube_informer_get(inf, ns, "cm-007");
    assert_int_equal(json_get_string(o, "data.v", &s, NULL, 0), 0);
    assert_string_equal(s, "0");
    json_object_put(o);

    /* list filters on the stored labels; results sorted by key */
    struct json_object **items = NULL;
    size_t n = 0;
    assert_int_equal(kube_informer_list(inf, ns, "odd=1", &items, &n), 0);
    assert_int_equal(n, N / 2);
    char prev[256] = "", key[256];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kube_object_key(items[i], key, sizeof(key)), 0);
        assert_true(strcmp(prev, key) < 0);
        snprintf(prev, sizeof(prev), "%s", key);
        assert_null(json_get(items[i], "metadata.managedFields"));
        json_object_put(items[i]);
    }
    free((void *)items);
    assert_int_equal(kube_informer_list(inf, "elsewhere", NULL, &items, &n), 0);
    assert_int_equal(n, 0);

    /* watch events go through the transform too */
    patch_cm(ns, "cm-007", "{\"data\":{\"v\":\"2\"}}");
    delete_cm(ns, "cm-008");
    assert_converged(&r, inf, ns, NULL, 10000);
    assert_int_equal(atomic_load(&calls), N + 2);
    o = kube_informer_get(inf, ns, "cm-007");
    assert_int_equal(json_get_string(o, "data.v", &s, NULL, 0), 0);
    assert_string_equal(s, "2");
    assert_null(json_get(o, "metadata.managedFields"));
    json_object_put(o);
    assert_null(kube_informer_get(inf, ns, "cm-008"));
    assert_int_equal(kube_informer_count(inf), N - 1);
    assert_clean(&r);
    kube_informer_free(inf);
    rec_deinit(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selector_match),
        cmocka_unit_test(test_sync_and_events),
        cmocka_unit_test(test_bookmarks_advance_rv),
        cmocka_unit_test(test_faults_recover),
        cmocka_unit_test(test_selector_informer),
        cmocka_unit_test(test_indexes),
        cmocka_unit_test(test_resync),
        cmocka_unit_test(test_cluster_scoped_all_namespaces),
        cmocka_unit_test(test_transform_and_pages),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
