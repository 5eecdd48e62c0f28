/*
 * The models' tokenizers (see keyring.h).
 */
#include "operator/epp/keyring.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/list.h"
#include "lib/log.h"
#include "operator/epp/keys/keys.h"

#define FETCH_TIMEOUT_MS 10000
#define RETRY_MS         2000
#define REFRESH_MS       (5 * 60 * 1000)

struct model_keys {
    struct list_node link;
    char *model;
    struct epp_keys *keys;
    bool fetching;
    int64_t next_try_ms; /* no fetch before (after a failure, or the refresh time) */
};

struct fetch {
    uv_work_t work;
    struct epp_keyring *kr;
    char *model;
    char url[128];
    struct epp_keys *keys; /* the result */
    char err[256];
};

struct epp_keyring {
    uv_loop_t *loop;
    struct list_node models;
    int in_flight;
    bool closing;
    struct metric *m_fetches, *m_failures;
};

static const char *key_of(const char *model)
{
    return model ? model : "";
}

static struct model_keys *find(struct epp_keyring *kr, const char *model, bool create)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&kr->models, n, tmp)
    {
        struct model_keys *mk = list_entry(n, struct model_keys, link);
        if (strcmp(mk->model, key_of(model)) == 0) {
            return mk;
        }
    }
    if (!create) {
        return NULL;
    }
    struct model_keys *mk = calloc(1, sizeof(*mk));
    if (!mk || !(mk->model = strdup(key_of(model)))) {
        free(mk);
        return NULL;
    }
    list_push_back(&kr->models, &mk->link);
    return mk;
}

static void free_all(struct epp_keyring *kr)
{
    struct list_node *n, *tmp;
    list_for_each_safe(&kr->models, n, tmp)
    {
        struct model_keys *mk = list_entry(n, struct model_keys, link);
        list_unlink(&mk->link);
        epp_keys_free(mk->keys);
        free(mk->model);
        free(mk);
    }
    free(kr);
}

struct epp_keyring *epp_keyring_new(uv_loop_t *loop, struct metrics_registry *reg)
{
    struct epp_keyring *kr = calloc(1, sizeof(*kr));
    if (!kr) {
        return NULL;
    }
    kr->loop = loop;
    list_init(&kr->models);
    if (reg) {
        struct metric_family *f =
            metrics_counter_new(reg, "tandem_epp_tokenizer_fetches_total",
                                "GET /tokenizer_info requests to model servers, by result", 1,
                                (const char *const[]){"result"});
        kr->m_fetches = f ? metrics_child(f, (const char *const[]){"ok"}) : NULL;
        kr->m_failures = f ? metrics_child(f, (const char *const[]){"error"}) : NULL;
    }
    return kr;
}

void epp_keyring_free(struct epp_keyring *kr)
{
    if (!kr) {
        return;
    }
    kr->closing = true;
    if (kr->in_flight == 0) {
        free_all(kr);
    }
}

const struct epp_keys *epp_keyring_get(struct epp_keyring *kr, const char *model)
{
    struct model_keys *mk = kr ? find(kr, model, false) : NULL;
    return mk ? mk->keys : NULL;
}

static void fetch_work(uv_work_t *w)
{
    struct fetch *f = w->data;
    f->keys = epp_keys_fetch(f->url, FETCH_TIMEOUT_MS, f->err, sizeof f->err);
}

static void fetch_done(uv_work_t *w, int status)
{
    struct fetch *f = w->data;
    struct epp_keyring *kr = f->kr;
    kr->in_flight--;
    struct model_keys *mk = kr->closing ? NULL : find(kr, f->model, false);
    if (mk) {
        mk->fetching = false;
        if (f->keys && status == 0) {
            if (!mk->keys || strcmp(epp_keys_tokenizer_sha256(mk->keys),
                                    epp_keys_tokenizer_sha256(f->keys)) != 0) {
                log_info("epp: model \"%s\": tokenizer from %s (block size %d, %s)", mk->model,
                         f->url, epp_keys_block_size(f->keys),
                         epp_keys_prefix_caching(f->keys) ? "prefix caching" : "no prefix caching");
            }
            epp_keys_free(mk->keys);
            mk->keys = f->keys;
            f->keys = NULL;
            mk->next_try_ms = tandem_now_ms() + REFRESH_MS;
            if (kr->m_fetches) {
                metric_inc(kr->m_fetches, 1);
            }
        } else {
            log_warn("epp: model \"%s\": cannot get the tokenizer from %s: %s", mk->model, f->url,
                     f->err[0] ? f->err : "cancelled");
            mk->next_try_ms = tandem_now_ms() + RETRY_MS;
            if (kr->m_failures) {
                metric_inc(kr->m_failures, 1);
            }
        }
    }
    epp_keys_free(f->keys);
    free(f->model);
    free(f);
    if (kr->closing && kr->in_flight == 0) {
        free_all(kr);
    }
}

void epp_keyring_offer(struct epp_keyring *kr, const struct epp_endpoint *ep)
{
    if (!kr || kr->closing || !ep->ready) {
        return;
    }
    struct model_keys *mk = find(kr, ep->model, true);
    if (!mk || mk->fetching || tandem_now_ms() < mk->next_try_ms) {
        return;
    }
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f || !(f->model = strdup(mk->model))) {
        free(f);
        return;
    }
    f->kr = kr;
    snprintf(f->url, sizeof f->url, "http://%s", ep->addr);
    f->work.data = f;
    if (uv_queue_work(kr->loop, &f->work, fetch_work, fetch_done) != 0) {
        free(f->model);
        free(f);
        return;
    }
    mk->fetching = true;
    kr->in_flight++;
}
