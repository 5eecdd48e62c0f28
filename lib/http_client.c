/*
 * libcurl multi on libuv (see http_client.h). The integration follows curl's multi-uv example:
 * curl tells us through CURLMOPT_SOCKETFUNCTION which sockets to watch for what, and through
 * CURLMOPT_TIMERFUNCTION when to call it back; we drive it with curl_multi_socket_action and
 * collect finished transfers with curl_multi_info_read.
 *
 * Handles may not be removed from the multi handle inside curl callbacks, so a cancellation from a
 * callback only marks the request; the write/header callbacks then fail the transfer and the
 * request is removed once curl_multi_socket_action has returned.
 */
#include "lib/http_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/err.h"
#include "lib/list.h"
#include "lib/log.h"

struct poll_ctx {
    uv_poll_t poll;
    curl_socket_t fd;
    struct http_client *c;
    struct list_node link; /* in c->polls */
};

struct http_client {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    struct list_node polls; /* struct poll_ctx, newest first */
    struct list_node reqs;  /* struct http_client_req, newest first */
    size_t nreqs;
    int in_curl; /* inside curl_multi_socket_action: no removals now */
    int in_done; /* dispatching completions */
    int freeing; /* http_client_free called */
    int closing; /* handles still closing */
};

struct http_client_req {
    struct http_client *c;
    CURL *easy;
    struct curl_slist *headers;
    struct http_response resp;
    http_client_head_fn on_head;
    http_client_data_fn on_data;
    http_client_event_fn on_event;
    http_client_done_fn on_done;
    void *ud;
    struct sse_parser sse;
    int use_sse;
    int buffer_body; /* body goes into resp.body */
    int head_done;   /* headers of the final response complete */
    int cancelled;
    int finishing; /* on_done running */
    size_t max_response;
    char *error; /* our own error text, wins over curl's */
    char errbuf[CURL_ERROR_SIZE];
    struct list_node link; /* in c->reqs */
};

#define req_of(node) list_entry(node, struct http_client_req, link)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = (int)curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- responses ---- */

const char *http_response_header(const struct http_response *resp, const char *name, char *out,
                                 size_t outlen)
{
    size_t n = strlen(name);
    const char *p = resp->headers.data;
    const char *end = p ? p + resp->headers.len : NULL;
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) {
            eol = end;
        }
        if ((size_t)(eol - p) > n && p[n] == ':' && strncasecmp(p, name, n) == 0) {
            const char *v = p + n + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) {
                v++;
            }
            size_t vl = (size_t)(eol - v);
            if (outlen == 0) {
                return out;
            }
            if (vl >= outlen) {
                vl = outlen - 1;
            }
            memcpy(out, v, vl);
            out[vl] = '\0';
            return out;
        }
        p = eol + 1;
    }
    return NULL;
}

void http_response_move(struct http_response *dst, struct http_response *src)
{
    *dst = *src;
    memset(src, 0, sizeof(*src));
    buf_init(&src->headers, dst->headers.max);
    buf_init(&src->body, dst->body.max);
}

void http_response_free(struct http_response *resp)
{
    free(resp->error);
    resp->error = NULL;
    buf_free(&resp->headers);
    buf_free(&resp->body);
}

/* ---- requests ---- */

static void req_unlink(struct http_client *c, struct http_client_req *r)
{
    list_unlink(&r->link);
    c->nreqs--;
}

/* Removes the request from curl and frees it (no callback). */
static void req_destroy(struct http_client_req *r)
{
    struct http_client *c = r->c;
    curl_multi_remove_handle(c->multi, r->easy);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    if (r->use_sse) {
        sse_parser_deinit(&r->sse);
    }
    http_response_free(&r->resp);
    free(r->error);
    req_unlink(c, r);
    free(r);
}

/* Records our own error text for the request (the first one wins). */
static void req_set_error(struct http_client_req *r, const char *msg)
{
    if (!r->error) {
        r->error = strdup(msg);
    }
}

#define req_fail(r, ...)                                                                           \
    do {                                                                                           \
        char msg_[512];                                                                            \
        snprintf(msg_, sizeof(msg_), __VA_ARGS__);                                                 \
        req_set_error((r), msg_);                                                                  \
    } while (0)

static int on_sse_event(void *ud, const struct sse_event *ev)
{
    struct http_client_req *r = ud;
    int rc = r->on_event(r->ud, ev);
    if (r->cancelled) {
        return -ECANCELED;
    }
    return rc < 0 ? rc : 0;
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct http_client_req *r = ud;
    size_t n = size * nmemb;
    if (r->cancelled) {
        return 0;
    }
    if (r->buffer_body) {
        int rc = buf_append(&r->resp.body, ptr, n);
        if (rc) {
            req_fail(r, "response body exceeds %zu bytes", r->max_response);
            return 0;
        }
        return n;
    }
    if (r->use_sse) {
        char err[256];
        int rc = sse_parser_feed(&r->sse, ptr, n, err, sizeof(err));
        if (rc) {
            if (!r->cancelled) {
                req_fail(r, "%s",
                         rc == -EMSGSIZE || rc == -ENOMEM ? err : "aborted by the event callback");
            }
            return 0;
        }
        return r->cancelled ? 0 : n;
    }
    if (r->on_data(r->ud, ptr, n) != 0) {
        if (!r->cancelled) {
            req_fail(r, "%s", "aborted by the data callback");
        }
        return 0;
    }
    return r->cancelled ? 0 : n;
}

static size_t header_cb(char *buffer, size_t size, size_t nitems, void *ud)
{
    struct http_client_req *r = ud;
    size_t n = size * nitems;
    if (r->cancelled) {
        return 0;
    }
    if (r->head_done) {
        return n; /* trailers */
    }
    if (n >= 5 && memcmp(buffer, "HTTP/", 5) == 0) {
        /* a new response starts (after 1xx, or a redirect): forget earlier headers */
        buf_reset(&r->resp.headers);
        const char *sp = memchr(buffer, ' ', n);
        r->resp.status = sp && (size_t)(sp - buffer) + 4 <= n ? (int)strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    size_t len = n;
    while (len > 0 && (buffer[len - 1] == '\n' || buffer[len - 1] == '\r')) {
        len--;
    }
    if (len == 0) {
        if (r->resp.status >= 200) {
            r->head_done = 1;
            if (r->use_sse && (r->resp.status < 200 || r->resp.status >= 300)) {
                r->buffer_body = 1;
            }
            if (r->on_head) {
                r->on_head(r->ud, &r->resp);
                if (r->cancelled) {
                    return 0;
                }
            }
        }
        return n;
    }
    if (buf_append(&r->resp.headers, buffer, len) != 0 ||
        buf_append(&r->resp.headers, "\n", 1) != 0) {
        req_fail(r, "response headers exceed %d bytes", HTTP_CLIENT_MAX_HEADER_BYTES);
        return 0;
    }
    return n;
}

static int has_header(const char *const *headers, const char *name)
{
    size_t n = strlen(name);
    for (const char *const *h = headers; h && *h; h++) {
        if (strncasecmp(*h, name, n) == 0 && ((*h)[n] == ':' || (*h)[n] == ';')) {
            return 1;
        }
    }
    return 0;
}

struct http_client_req *http_client_start(struct http_client *c, const struct http_client_opts *o,
                                          char *err, size_t errlen)
{
    if (!c || c->freeing || !o || !o->url || !o->on_done || (o->on_data && o->on_event) ||
        (o->body_len > 0 && !o->body)) {
        tandem_set_err(err, errlen, "%s", "http_client: invalid options");
        return NULL;
    }
    if (strncasecmp(o->url, "http://", 7) != 0 && strncasecmp(o->url, "https://", 8) != 0) {
        tandem_set_err(err, errlen, "http_client: unsupported URL scheme: %s", o->url);
        return NULL;
    }
    struct http_client_req *r = calloc(1, sizeof(*r));
    if (!r) {
        tandem_set_err(err, errlen, "%s", "http_client: out of memory");
        return NULL;
    }
    r->c = c;
    r->on_head = o->on_head;
    r->on_data = o->on_data;
    r->on_event = o->on_event;
    r->on_done = o->on_done;
    r->ud = o->ud;
    r->max_response = o->max_response ? o->max_response : HTTP_CLIENT_DEFAULT_MAX_RESPONSE;
    r->buffer_body = !o->on_data && !o->on_event;
    buf_init(&r->resp.headers, HTTP_CLIENT_MAX_HEADER_BYTES);
    buf_init(&r->resp.body, r->max_response);
    if (o->on_event) {
        r->use_sse = 1;
        sse_parser_init(&r->sse, r->max_response, on_sse_event, NULL, r);
    }
    r->easy = curl_easy_init();
    if (!r->easy) {
        tandem_set_err(err, errlen, "%s", "http_client: curl_easy_init failed");
        goto err_free;
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_URL, o->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->timeout_ms > 0 ? o->timeout_ms : 0L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                               : (long)HTTP_CLIENT_DEFAULT_CONNECT_TIMEOUT_MS);

    if (o->ca_file) {
        curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file);
    }
    if (o->insecure_skip_verify) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }

    const char *method = o->method ? o->method : (o->body ? "POST" : "GET");
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (o->body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, o->body ? (const char *)o->body : "");
        if (strcmp(method, "POST") != 0) {
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
        }
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    for (const char *const *h = o->headers; h && *h; h++) {
        struct curl_slist *l = curl_slist_append(r->headers, *h);
        if (!l) {
            tandem_set_err(err, errlen, "%s", "http_client: out of memory");
            goto err_free;
        }
        r->headers = l;
    }
    if (r->use_sse && !has_header(o->headers, "Accept")) {
        struct curl_slist *l = curl_slist_append(r->headers, "Accept: text/event-stream");
        if (!l) {
            tandem_set_err(err, errlen, "%s", "http_client: out of memory");
            goto err_free;
        }
        r->headers = l;
    }
    if (r->headers) {
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    }

    list_push_front(&c->reqs, &r->link);
    c->nreqs++;
    CURLMcode mc = curl_multi_add_handle(c->multi, e);
    if (mc != CURLM_OK) {
        tandem_set_err(err, errlen, "http_client: %s", curl_multi_strerror(mc));
        req_destroy(r);
        return NULL;
    }
    return r;

err_free:
    if (r->easy) {
        curl_easy_cleanup(r->easy);
    }
    curl_slist_free_all(r->headers);
    if (r->use_sse) {
        sse_parser_deinit(&r->sse);
    }
    http_response_free(&r->resp);
    free(r);
    return NULL;
}

/* A transfer finished: report it (unless cancelled) and free it. */
static void req_finish(struct http_client_req *r, CURLcode code)
{
    long status = 0;
    double total = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME, &total);
    if (!r->cancelled) {
        if (status > 0) {
            r->resp.status = (int)status;
        }
        r->resp.total_s = total;
        r->resp.curl_code = (int)code;
        if (r->use_sse) {
            sse_parser_finish(&r->sse);
        }
        if (r->error) {
            r->resp.error = r->error;
            r->error = NULL;
            if (code == CURLE_OK) {
                r->resp.curl_code = (int)CURLE_WRITE_ERROR;
            }
        } else if (code != CURLE_OK) {
            r->resp.error = strdup(r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
        }
        r->finishing = 1;
        r->on_done(r->ud, &r->resp);
    }
    req_destroy(r);
}

static void check_done(struct http_client *c)
{
    CURLMsg *m;
    int left;
    c->in_done++;
    while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE) {
            continue;
        }
        struct http_client_req *r = NULL;
        CURLcode code = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r) {
            req_finish(r, code);
        }
    }
    /* requests cancelled from inside curl callbacks that are still attached */
    struct list_node *n, *tmp;
    list_for_each_safe(&c->reqs, n, tmp)
    {
        if (req_of(n)->cancelled) {
            req_destroy(req_of(n));
        }
    }
    c->in_done--;
}

void http_client_cancel(struct http_client_req *r)
{
    if (!r || r->finishing || r->cancelled) {
        return;
    }
    r->cancelled = 1;
    if (!r->c->in_curl) {
        req_destroy(r);
    }
}

size_t http_client_active(const struct http_client *c)
{
    size_t n = 0;
    for (const struct list_node *l = c->reqs.next; l != &c->reqs; l = l->next) {
        n += !req_of(l)->cancelled;
    }
    return n;
}

/* ---- libuv glue ---- */

static void socket_action(struct http_client *c, curl_socket_t fd, int flags)
{
    int running = 0;
    c->in_curl = 1;
    curl_multi_socket_action(c->multi, fd, flags, &running);
    c->in_curl = 0;
    check_done(c);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct poll_ctx *p = (struct poll_ctx *)h;
    int flags = 0;
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
    } else {
        if (events & UV_READABLE) {
            flags |= CURL_CSELECT_IN;
        }
        if (events & UV_WRITABLE) {
            flags |= CURL_CSELECT_OUT;
        }
    }
    socket_action(p->c, p->fd, flags); /* p may be closed after this */
}

static void on_timeout(uv_timer_t *t)
{
    socket_action(t->data, CURL_SOCKET_TIMEOUT, 0);
}

static void maybe_free_client(struct http_client *c)
{
    if (c->freeing && c->closing == 0) {
        free(c);
    }
}

static void on_poll_closed(uv_handle_t *h)
{
    struct poll_ctx *p = (struct poll_ctx *)h;
    struct http_client *c = p->c;
    free(p);
    c->closing--;
    maybe_free_client(c);
}

static void poll_close(struct http_client *c, struct poll_ctx *p)
{
    list_unlink(&p->link);
    uv_poll_stop(&p->poll);
    c->closing++;
    uv_close((uv_handle_t *)&p->poll, on_poll_closed);
}

static int socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct http_client *c = userp;
    struct poll_ctx *p = socketp;
    (void)easy;

    if (what == CURL_POLL_REMOVE) {
        if (p) {
            curl_multi_assign(c->multi, s, NULL);
            poll_close(c, p);
        }
        return 0;
    }
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p) {
            return -1;
        }
        if (uv_poll_init_socket(c->loop, &p->poll, s) != 0) {
            free(p);
            return -1;
        }
        p->fd = s;
        p->c = c;
        list_push_front(&c->polls, &p->link);
        curl_multi_assign(c->multi, s, p);
    }
    int events = 0;
    if (what & CURL_POLL_IN) {
        events |= UV_READABLE;
    }
    if (what & CURL_POLL_OUT) {
        events |= UV_WRITABLE;
    }
    uv_poll_start(&p->poll, events, on_poll);
    return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    struct http_client *c = userp;
    (void)multi;
    if (timeout_ms < 0) {
        uv_timer_stop(&c->timer);
    } else {
        uv_timer_start(&c->timer, on_timeout, (uint64_t)timeout_ms, 0);
    }
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct http_client *c = h->data;
    c->closing--;
    maybe_free_client(c);
}

struct http_client *http_client_new(uv_loop_t *loop, char *err, size_t errlen)
{
    TANDEM_ASSERT(loop != NULL);
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != 0) {
        tandem_set_err(err, errlen, "%s", "http_client: curl_global_init failed");
        return NULL;
    }
    struct http_client *c = calloc(1, sizeof(*c));
    if (!c) {
        tandem_set_err(err, errlen, "%s", "http_client: out of memory");
        return NULL;
    }
    c->loop = loop;
    list_init(&c->polls);
    list_init(&c->reqs);
    c->multi = curl_multi_init();
    if (!c->multi) {
        free(c);
        tandem_set_err(err, errlen, "%s", "http_client: curl_multi_init failed");
        return NULL;
    }
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 64L);
    return c;
}

void http_client_free(struct http_client *c)
{
    if (!c) {
        return;
    }
    TANDEM_ASSERT(!c->in_curl && !c->in_done && !c->freeing);
    c->freeing = 1;
    struct list_node *n, *tmp;
    list_for_each_safe(&c->reqs, n, tmp)
    {
        req_destroy(req_of(n));
    }
    curl_multi_cleanup(c->multi); /* closes cached connections (socket_cb may see REMOVEs) */
    c->multi = NULL;
    while (!list_empty(&c->polls)) {
        poll_close(c, list_entry(list_first(&c->polls), struct poll_ctx, link));
    }
    uv_timer_stop(&c->timer);
    c->closing++;
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

/* ---- blocking convenience ---- */

struct sync_state {
    struct http_response *out;
    int done;
};

static void sync_done(void *ud, struct http_response *resp)
{
    struct sync_state *st = ud;
    http_response_move(st->out, resp);
    st->done = 1;
}

int http_fetch_sync(const struct http_client_opts *o, struct http_response *out)
{
    memset(out, 0, sizeof(*out));
    if (!o || !o->url) {
        return -EINVAL;
    }
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0) {
        out->error = strdup("cannot create a loop");
        return -EIO;
    }
    char err[256] = "";
    int rc = 0;
    struct http_client *c = http_client_new(&loop, err, sizeof(err));
    if (!c) {
        out->error = strdup(err);
        uv_loop_close(&loop);
        return -EIO;
    }
    struct sync_state st = {.out = out};
    struct http_client_opts so = *o;
    so.on_head = NULL;
    so.on_data = NULL;
    so.on_event = NULL;
    so.on_done = sync_done;
    so.ud = &st;
    if (!http_client_start(c, &so, err, sizeof(err))) {
        rc = -EINVAL;
        out->error = strdup(err);
    } else {
        while (!st.done) {
            uv_run(&loop, UV_RUN_ONCE);
        }
        if (out->error) {
            rc = out->curl_code == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
                 : out->curl_code == CURLE_COULDNT_CONNECT  ? -ECONNREFUSED
                                                            : -EIO;
        }
    }
    http_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0) {
        log_warn("http_fetch_sync: loop still has handles at close");
    }
    return rc;
}
