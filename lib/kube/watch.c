/*
 * Watch streams (see watch.h). The splitter keeps at most one partial line and parses every
 * complete line exactly once (unlike kubernetes-client/c, which re-parses its whole buffer on
 * every chunk). kube_watch drives one streaming transfer through a private curl multi handle so
 * that it wakes at least every WATCH_POLL_MS to check the stop flag and the inactivity timer
 * (CURLOPT_XFERINFOFUNCTION runs on each wake-up and aborts the transfer); no overall timeout is
 * set, since a healthy watch may be quiet for minutes.
 */
#include "lib/kube/watch.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/json.h"
#include "lib/log.h"

#define WATCH_POLL_MS       100
#define WATCH_ERROR_BODY    (64 * 1024) /* non-2xx answer body kept for the error message */
#define SPLITTER_FIRST_CAP  4096
#define WATCH_CONNECT_MAXMS 10000

struct kube_watch_splitter {
    char *buf;             /* the partial line carried over between feeds */
    size_t len;            /* bytes in buf */
    size_t cap;            /* allocated, at most max_line + 1 */
    size_t max_line;       /* longest accepted line, without its '\n' */
    unsigned long line_no; /* lines seen, for messages */
};

struct kube_watch_splitter *kube_watch_splitter_new(size_t max_line)
{
    struct kube_watch_splitter *s = calloc(1, sizeof(*s));
    if (s) {
        s->max_line = max_line ? max_line : KUBE_WATCH_MAX_LINE;
    }
    return s;
}

void kube_watch_splitter_free(struct kube_watch_splitter *s)
{
    if (s) {
        free(s->buf);
        free(s);
    }
}

void kube_watch_splitter_reset(struct kube_watch_splitter *s)
{
    s->len = 0;
    s->line_no = 0;
    if (s->cap > 1024 * 1024) { /* do not keep a huge buffer around after a huge line */
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
}

size_t kube_watch_splitter_pending(const struct kube_watch_splitter *s)
{
    return s->len;
}

const char *kube_event_type_name(enum kube_event_type t)
{
    switch (t) {
    case KUBE_EVENT_ADDED:
        return "ADDED";
    case KUBE_EVENT_MODIFIED:
        return "MODIFIED";
    case KUBE_EVENT_DELETED:
        return "DELETED";
    case KUBE_EVENT_BOOKMARK:
        return "BOOKMARK";
    case KUBE_EVENT_ERROR:
        return "ERROR";
    }
    return "UNKNOWN";
}

static int parse_type(const char *s, enum kube_event_type *t)
{
    static const struct {
        const char *name;
        enum kube_event_type type;
    } types[] = {
        {"ADDED", KUBE_EVENT_ADDED},     {"MODIFIED", KUBE_EVENT_MODIFIED},
        {"DELETED", KUBE_EVENT_DELETED}, {"BOOKMARK", KUBE_EVENT_BOOKMARK},
        {"ERROR", KUBE_EVENT_ERROR},
    };
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        if (strcmp(s, types[i].name) == 0) {
            *t = types[i].type;
            return 0;
        }
    }
    return -EINVAL;
}

/* One complete line (without '\n'). */
static int process_line(struct kube_watch_splitter *s, const char *line, size_t len,
                        kube_event_cb cb, void *ud, char *err, size_t errlen)
{
    s->line_no++;
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) {
        len--;
    }
    size_t start = 0;
    while (start < len && (line[start] == ' ' || line[start] == '\t' || line[start] == '\r')) {
        start++;
    }
    if (start == len) {
        return 0; /* blank line */
    }
    char perr[160];
    struct json_object *ev = NULL;
    int rc = kube__parse_json(line + start, len - start, &ev, perr, sizeof(perr));
    if (rc) {
        return tandem_fail(err, errlen, rc == -ENOMEM ? rc : -EINVAL, "watch event %lu: %s",
                           s->line_no, perr);
    }
    struct json_object *type = NULL, *object = NULL;
    enum kube_event_type t = KUBE_EVENT_ERROR;
    if (!json_object_is_type(ev, json_type_object)) {
        tandem_set_err(err, errlen, "watch event %lu: expected a JSON object, got %s", s->line_no,
                       json_type_label(ev));
        rc = -EINVAL;
    } else if (!json_object_object_get_ex(ev, "type", &type) ||
               !json_object_is_type(type, json_type_string)) {
        tandem_set_err(err, errlen, "watch event %lu: type: %s", s->line_no,
                       type ? "expected string" : "required field is missing");
        rc = -EINVAL;
    } else if (parse_type(json_object_get_string(type), &t) != 0) {
        tandem_set_err(err, errlen, "watch event %lu: type: unknown event type \"%.40s\"",
                       s->line_no, json_object_get_string(type));
        rc = -EINVAL;
    } else if (!json_object_object_get_ex(ev, "object", &object) ||
               !json_object_is_type(object, json_type_object)) {
        tandem_set_err(err, errlen, "watch event %lu: object: %s", s->line_no,
                       object ? "expected object" : "required field is missing");
        rc = -EINVAL;
    }
    if (rc == 0) {
        rc = cb(ud, t, object);
    }
    json_object_put(ev);
    return rc;
}

static int carry(struct kube_watch_splitter *s, const char *data, size_t n)
{
    size_t need = s->len + n + 1; /* callers keep s->len + n <= max_line */
    if (need > s->cap) {
        size_t cap = s->cap > SPLITTER_FIRST_CAP ? s->cap : SPLITTER_FIRST_CAP;
        while (cap < need && cap <= SIZE_MAX / 2) {
            cap *= 2;
        }
        if (cap < need) {
            cap = need;
        }
        if (s->max_line < SIZE_MAX && cap > s->max_line + 1 && s->max_line + 1 >= need) {
            cap = s->max_line + 1;
        }
        char *bigger = realloc(s->buf, cap);
        if (!bigger) {
            return -ENOMEM;
        }
        s->buf = bigger;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    return 0;
}

int kube_watch_splitter_feed(struct kube_watch_splitter *s, const char *data, size_t len,
                             kube_event_cb cb, void *ud, char *err, size_t errlen)
{
    const char *p = data;
    const char *end = data + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (s->len + n > s->max_line) {
            tandem_set_err(err, errlen, "watch event %lu: line longer than %zu bytes",
                           s->line_no + 1, s->max_line);
            s->len = 0;
            return -E2BIG;
        }
        int rc;
        if (nl && s->len == 0) {
            rc = process_line(s, p, n, cb, ud, err, errlen); /* whole line in this chunk */
        } else {
            rc = carry(s, p, n);
            if (rc == 0 && nl) {
                size_t line_len = s->len;
                s->len = 0;
                rc = process_line(s, s->buf, line_len, cb, ud, err, errlen);
            }
        }
        if (rc) {
            return rc;
        }
        p += n + (nl ? 1 : 0);
    }
    return 0;
}

int kube_watch_splitter_finish(struct kube_watch_splitter *s, kube_event_cb cb, void *ud, char *err,
                               size_t errlen)
{
    if (s->len == 0) {
        return 0;
    }
    size_t line_len = s->len;
    s->len = 0;
    return process_line(s, s->buf, line_len, cb, ud, err, errlen);
}

/* ---- the watch call ---- */

struct watch_ctx {
    CURL *easy;
    struct kube_watch_splitter *splitter;
    kube_event_cb cb;
    void *ud;
    const volatile int *stop;
    long inactivity_ms;
    uint64_t last_data_ms; /* last time bytes (headers or body) arrived */
    long status;           /* HTTP status, once known */
    int rc;                /* the splitter's or the callback's non-zero result */
    int cb_rc;             /* the callback's non-zero result (not an error) */
    int stopped;           /* the stop flag ended the transfer */
    int timed_out;         /* the inactivity timer ended it */
    struct buf error_body; /* body of a non-2xx answer */
    char msg[384];
};

static int watch_on_event(void *ud, enum kube_event_type type, struct json_object *object)
{
    struct watch_ctx *w = ud;
    int rc = w->cb(w->ud, type, object);
    if (rc) {
        w->cb_rc = rc;
    }
    return rc;
}

static int should_stop(struct watch_ctx *w)
{
    if (w->stop && *w->stop) {
        w->stopped = 1;
        return 1;
    }
    if (w->inactivity_ms > 0 &&
        (uint64_t)tandem_now_ms() - w->last_data_ms >= (uint64_t)w->inactivity_ms) {
        w->timed_out = 1;
        return 1;
    }
    return 0;
}

static size_t watch_on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct watch_ctx *w = ud;
    (void)ptr;
    w->last_data_ms = (uint64_t)tandem_now_ms();
    return size * nmemb;
}

static size_t watch_on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct watch_ctx *w = ud;
    size_t n = size * nmemb;
    w->last_data_ms = (uint64_t)tandem_now_ms();
    if (w->status == 0) {
        curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &w->status);
    }
    if (w->status < 200 || w->status > 299) {
        size_t room = w->error_body.max - w->error_body.len;
        buf_append(&w->error_body, ptr, n < room ? n : room);
        return n;
    }
    if (w->stop && *w->stop) {
        w->stopped = 1;
        return 0;
    }
    int rc =
        kube_watch_splitter_feed(w->splitter, ptr, n, watch_on_event, w, w->msg, sizeof(w->msg));
    if (rc) {
        w->rc = rc;
        return 0; /* aborts the transfer */
    }
    return n;
}

static int watch_on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                             curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    return should_stop(ud);
}

static int watch_path(const struct kube_resource *r, const char *ns,
                      const struct kube_watch_options *o, struct buf *path)
{
    char num[32];
    int rc = kube_resource_path(r, r && r->namespaced ? ns : NULL, NULL, NULL, path);
    if (!rc) {
        rc = kube_query_append(path, "watch", "1");
    }
    if (!rc && o && o->allow_bookmarks) {
        rc = kube_query_append(path, "allowWatchBookmarks", "true");
    }
    if (!rc && o && o->timeout_seconds > 0) {
        snprintf(num, sizeof(num), "%ld", o->timeout_seconds);
        rc = kube_query_append(path, "timeoutSeconds", num);
    }
    if (!rc && o && o->label_selector && *o->label_selector) {
        rc = kube_query_append(path, "labelSelector", o->label_selector);
    }
    if (!rc && o && o->field_selector && *o->field_selector) {
        rc = kube_query_append(path, "fieldSelector", o->field_selector);
    }
    if (!rc && o && o->resource_version && *o->resource_version) {
        rc = kube_query_append(path, "resourceVersion", o->resource_version);
    }
    return rc;
}

/* Runs the transfer until it completes or a callback aborts it; returns the curl result. */
static CURLcode run_transfer(CURLM *multi, struct watch_ctx *w)
{
    CURLcode result = CURLE_OK;
    int running = 1;
    while (running) {
        CURLMcode mc = curl_multi_perform(multi, &running);
        if (mc != CURLM_OK) {
            snprintf(w->msg, sizeof(w->msg), "curl_multi_perform: %s", curl_multi_strerror(mc));
            return CURLE_RECV_ERROR;
        }
        if (!running) {
            break;
        }
        if (should_stop(w)) {
            return CURLE_ABORTED_BY_CALLBACK;
        }
        mc = curl_multi_poll(multi, NULL, 0, WATCH_POLL_MS, NULL);
        if (mc != CURLM_OK) {
            snprintf(w->msg, sizeof(w->msg), "curl_multi_poll: %s", curl_multi_strerror(mc));
            return CURLE_RECV_ERROR;
        }
    }
    int left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(multi, &left))) {
        if (m->msg == CURLMSG_DONE && m->easy_handle == w->easy) {
            result = m->data.result;
        }
    }
    return result;
}

int kube_watch(struct kube_client *c, const struct kube_resource *r, const char *ns,
               const struct kube_watch_options *o, kube_event_cb cb, void *ud,
               struct kube_error *err)
{
    if (err) {
        memset(err, 0, sizeof(*err));
    }
    if (!c || !r || !cb) {
        kube_error_set(err, 0, "BadRequest", "kube_watch: missing client, resource or callback");
        return -EINVAL;
    }
    struct buf path;
    buf_init(&path, 64 * 1024);
    if (watch_path(r, ns, o, &path)) {
        buf_free(&path);
        kube_error_set(err, 0, "BadRequest", "kube_watch: bad resource, namespace or options");
        return -EINVAL;
    }
    struct watch_ctx w;
    memset(&w, 0, sizeof(w));
    w.cb = cb;
    w.ud = ud;
    w.stop = o ? o->stop : NULL;
    w.inactivity_ms = o && o->inactivity_timeout_ms > 0 ? o->inactivity_timeout_ms : 0;
    buf_init(&w.error_body, WATCH_ERROR_BODY);
    int rc = -ENOMEM;
    w.splitter = kube_watch_splitter_new(KUBE_WATCH_MAX_LINE);
    w.easy = curl_easy_init();
    CURLM *multi = curl_multi_init();
    struct curl_slist *headers = NULL;
    if (!w.splitter || !w.easy || !multi) {
        goto out;
    }
    kube__rate_wait(c);
    rc = kube__easy_setup(c, w.easy, path.data, NULL, 0, &headers, w.msg, sizeof(w.msg));
    if (rc) {
        kube_error_set(err, 0, "BadRequest", w.msg);
        goto out;
    }
    long connect_ms = kube__timeout_ms(c);
    curl_easy_setopt(w.easy, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(w.easy, CURLOPT_CONNECTTIMEOUT_MS,
                     connect_ms < WATCH_CONNECT_MAXMS ? connect_ms : (long)WATCH_CONNECT_MAXMS);
    curl_easy_setopt(w.easy, CURLOPT_TIMEOUT_MS, 0L);
    curl_easy_setopt(w.easy, CURLOPT_WRITEFUNCTION, watch_on_body);
    curl_easy_setopt(w.easy, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(w.easy, CURLOPT_HEADERFUNCTION, watch_on_header);
    curl_easy_setopt(w.easy, CURLOPT_HEADERDATA, &w);
    curl_easy_setopt(w.easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(w.easy, CURLOPT_XFERINFOFUNCTION, watch_on_progress);
    curl_easy_setopt(w.easy, CURLOPT_XFERINFODATA, &w);
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(w.easy, CURLOPT_ERRORBUFFER, errbuf);
    if (curl_multi_add_handle(multi, w.easy) != CURLM_OK) {
        rc = -ENOMEM;
        goto out;
    }
    kube__count(c, KUBE__WATCH);
    kube__count(c, KUBE__REQUEST);
    w.last_data_ms = (uint64_t)tandem_now_ms();
    CURLcode cc = run_transfer(multi, &w);
    curl_multi_remove_handle(multi, w.easy);
    if (w.status == 0) {
        curl_easy_getinfo(w.easy, CURLINFO_RESPONSE_CODE, &w.status);
    }

    if (w.stopped) {
        rc = 0;
    } else if (w.rc) {
        rc = w.rc;
        if (rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM) {
            kube_error_set(err, (int)w.status, "BadWatchEvent", w.msg);
        }
    } else if (w.timed_out) {
        rc = -ETIMEDOUT;
        char msg[128];
        snprintf(msg, sizeof(msg), "watch %s: no data for %ld ms", r->plural, w.inactivity_ms);
        kube_error_set(err, 0, "Timeout", msg);
    } else if (w.status != 0 && (w.status < 200 || w.status > 299)) {
        rc = kube_error_from_response(w.status, w.error_body.data, w.error_body.len, err);
        if (w.status == 401 && kube__has_token_file(c)) {
            kube__token_invalidate(c);
        }
    } else if (cc != CURLE_OK) {
        rc = cc == CURLE_OPERATION_TIMEDOUT ? KUBE_ETIMEOUT : KUBE_ETRANSPORT;
        char msg[CURL_ERROR_SIZE + 512];
        snprintf(msg, sizeof(msg), "watch %s: %s", r->plural,
                 errbuf[0] ? errbuf : (w.msg[0] ? w.msg : curl_easy_strerror(cc)));
        kube_error_set(err, 0, "Transport", msg);
    } else {
        rc = kube_watch_splitter_finish(w.splitter, watch_on_event, &w, w.msg, sizeof(w.msg));
        if (rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM) {
            kube_error_set(err, (int)w.status, "BadWatchEvent", w.msg);
        }
    }
    if (rc && !w.cb_rc) {
        kube__count(c, KUBE__ERROR);
    }
    curl_easy_setopt(w.easy, CURLOPT_ERRORBUFFER, NULL);
out:
    if (multi) {
        curl_multi_cleanup(multi);
    }
    if (w.easy) {
        curl_easy_cleanup(w.easy);
    }
    curl_slist_free_all(headers);
    kube_watch_splitter_free(w.splitter);
    buf_free(&w.error_body);
    buf_free(&path);
    return rc;
}
