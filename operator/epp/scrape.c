/*
 * The metrics data source (see scrape.h).
 */
#include "operator/epp/scrape.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/err.h"
#include "lib/http_client.h"
#include "lib/list.h"
#include "lib/log.h"

#define MAX_LORA_LIST 4096

struct parse_state {
    struct epp_metrics *m;
    double waiting, running, kv, kv_old;
    bool have_waiting, have_running, have_kv, have_kv_old;
    char *running_loras, *waiting_loras;
    double lora_ts; /* the newest vllm:lora_requests_info sample wins */
    bool have_lora;
};

static const char *label_of(size_t n, const char *const *names, const char *const *values,
                            const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return values[i];
        }
    }
    return NULL;
}

static int dup_list(char **dst, const char *v)
{
    free(*dst);
    *dst = NULL;
    if (!v || !v[0]) {
        return 0;
    }
    *dst = strndup(v, MAX_LORA_LIST);
    return *dst ? 0 : -ENOMEM;
}

static int on_sample(void *ud, const char *name, size_t n, const char *const *names,
                     const char *const *values, double v)
{
    struct parse_state *st = ud;
    if (strncmp(name, "vllm:", 5) != 0 || !isfinite(v)) {
        return 0;
    }
    name += 5;
    if (strcmp(name, "num_requests_waiting") == 0) {
        st->waiting += v;
        st->have_waiting = true;
    } else if (strcmp(name, "num_requests_running") == 0) {
        st->running += v;
        st->have_running = true;
    } else if (strcmp(name, "kv_cache_usage_perc") == 0) {
        st->kv = st->have_kv ? fmax(st->kv, v) : v;
        st->have_kv = true;
    } else if (strcmp(name, "gpu_cache_usage_perc") == 0) {
        st->kv_old = st->have_kv_old ? fmax(st->kv_old, v) : v;
        st->have_kv_old = true;
    } else if (strcmp(name, "cache_config_info") == 0) {
        const char *bs = label_of(n, names, values, "block_size");
        const char *nb = label_of(n, names, values, "num_gpu_blocks");
        long long b = bs ? strtoll(bs, NULL, 10) : 0, k = nb ? strtoll(nb, NULL, 10) : 0;
        if (b > 0 && b <= 1 << 16) {
            st->m->block_size = (int32_t)b;
        }
        if (k > 0) {
            st->m->num_gpu_blocks = k;
        }
    } else if (strcmp(name, "lora_requests_info") == 0 && v >= st->lora_ts) {
        const char *max = label_of(n, names, values, "max_lora");
        long long ml = max ? strtoll(max, NULL, 10) : 0;
        st->lora_ts = v;
        st->have_lora = true;
        st->m->max_lora = ml > 0 && ml < 1 << 20 ? (int32_t)ml : 0;
        if (dup_list(&st->running_loras, label_of(n, names, values, "running_lora_adapters")) ||
            dup_list(&st->waiting_loras, label_of(n, names, values, "waiting_lora_adapters"))) {
            return -ENOMEM;
        }
    }
    return 0;
}

int epp_metrics_parse(const char *text, size_t len, struct epp_metrics *m, char *err, size_t errlen)
{
    struct parse_state st = {.m = m, .lora_ts = -INFINITY};
    int rc = metrics_parse_text(text, len, on_sample, &st, err, errlen);
    if (rc != 0) {
        free(st.running_loras);
        free(st.waiting_loras);
        return rc;
    }
    if (st.have_waiting) {
        m->waiting = st.waiting;
    }
    if (st.have_running) {
        m->running = st.running;
    }
    if (st.have_kv || st.have_kv_old) {
        m->kv_usage = fmin(1.0, fmax(0.0, st.have_kv ? st.kv : st.kv_old));
    }
    if (st.have_lora) {
        free(m->running_loras);
        free(m->waiting_loras);
        m->running_loras = st.running_loras;
        m->waiting_loras = st.waiting_loras;
    }
    return 0;
}

/* ---- polling ---- */

struct scrape_req {
    struct list_node link;
    struct epp_scraper *s;
    uint64_t endpoint_id;
    struct http_client_req *req;
};

struct epp_scraper {
    uv_loop_t *loop;
    struct epp_ds *ds;
    struct epp_scraper_config c;
    char path[256];
    char scheme[8];
    struct http_client *http;
    uv_timer_t timer;
    struct list_node reqs; /* in flight */
    struct metric *errors; /* tandem_epp_scrape_errors_total */
};

static struct scrape_req *in_flight(struct epp_scraper *s, uint64_t id)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&s->reqs, n, tmp)
    {
        struct scrape_req *r = list_entry(n, struct scrape_req, link);
        if (r->endpoint_id == id) {
            return r;
        }
    }
    return NULL;
}

static void on_done(void *ud, struct http_response *resp)
{
    struct scrape_req *r = ud;
    struct epp_scraper *s = r->s;
    struct epp_endpoint *ep = epp_ds_by_id(s->ds, r->endpoint_id);
    char err[256] = "";
    list_unlink(&r->link);
    if (ep && resp->status == 200 &&
        epp_metrics_parse(buf_cstr(&resp->body), resp->body.len, &ep->m, err, sizeof(err)) == 0) {
        ep->m.valid = true;
        ep->m.updated_ms = tandem_now_ms();
        ep->stale = false;
    } else if (ep) {
        if (s->errors) {
            metric_inc(s->errors, 1);
        }
        log_debug("scrape %s: %s", ep->addr,
                  err[0]        ? err
                  : resp->error ? resp->error
                                : "unexpected status");
    }
    free(r);
}

static void scrape_one(struct epp_scraper *s, struct epp_endpoint *ep)
{
    char url[400], err[256];
    struct scrape_req *r = calloc(1, sizeof(*r));
    if (!r) {
        return;
    }
    if (s->c.port > 0) {
        snprintf(url, sizeof(url), strchr(ep->ip, ':') ? "%s://[%s]:%d%s" : "%s://%s:%d%s",
                 s->scheme, ep->ip, s->c.port, s->path);
    } else {
        snprintf(url, sizeof(url), "%s://%s%s", s->scheme, ep->addr, s->path);
    }
    struct http_client_opts o = {
        .method = "GET",
        .url = url,
        .timeout_ms = s->c.stale_ms > 0 ? s->c.stale_ms : 2000,
        .connect_timeout_ms = 1000,
        .insecure_skip_verify = s->c.insecure_skip_verify,
        .max_response = 4u << 20,
        .on_done = on_done,
        .ud = r,
    };
    r->s = s;
    r->endpoint_id = ep->id;
    r->req = http_client_start(s->http, &o, err, sizeof(err));
    if (!r->req) {
        log_warn("scrape %s: %s", ep->addr, err);
        free(r);
        return;
    }
    list_push_back(&s->reqs, &r->link);
}

static void on_tick(uv_timer_t *t)
{
    struct epp_scraper *s = t->data;
    for (size_t i = 0; i < epp_ds_count(s->ds); i++) {
        struct epp_endpoint *ep = epp_ds_at(s->ds, i);
        if (!in_flight(s, ep->id)) {
            scrape_one(s, ep);
        }
    }
    epp_ds_update_staleness(s->ds, tandem_now_ms(), s->c.stale_ms);
}

struct epp_scraper *epp_scraper_new(uv_loop_t *loop, struct epp_ds *ds,
                                    const struct epp_scraper_config *c, char *err, size_t errlen)
{
    struct epp_scraper *s = calloc(1, sizeof(*s));
    if (!s) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->ds = ds;
    s->c = *c;
    list_init(&s->reqs);
    snprintf(s->path, sizeof(s->path), "%s", c->path ? c->path : "/metrics");
    snprintf(s->scheme, sizeof(s->scheme), "%s", c->scheme ? c->scheme : "http");
    if (c->interval_ms <= 0) {
        s->c.interval_ms = 50;
    }
    if (c->reg) {
        struct metric_family *f =
            metrics_counter_new(c->reg, "tandem_epp_scrape_errors_total",
                                "Failed scrapes of the model servers' /metrics", 0, NULL);
        s->errors = f ? metrics_child(f, NULL) : NULL;
    }
    s->http = http_client_new(loop, err, errlen);
    if (!s->http) {
        free(s);
        return NULL;
    }
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    return s;
}

int epp_scraper_start(struct epp_scraper *s)
{
    return uv_timer_start(&s->timer, on_tick, 0, (uint64_t)s->c.interval_ms);
}

void epp_scraper_forget(struct epp_scraper *s, uint64_t endpoint_id)
{
    struct scrape_req *r = s ? in_flight(s, endpoint_id) : NULL;
    if (r) {
        http_client_cancel(r->req);
        list_unlink(&r->link);
        free(r);
    }
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void epp_scraper_free(struct epp_scraper *s)
{
    if (!s) {
        return;
    }
    struct list_node *n, *tmp;
    list_for_each_safe(&s->reqs, n, tmp)
    {
        struct scrape_req *r = list_entry(n, struct scrape_req, link);
        http_client_cancel(r->req);
        list_unlink(&r->link);
        free(r);
    }
    http_client_free(s->http);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, on_timer_closed);
}
