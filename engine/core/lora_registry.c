/*
 * The engine's LoRA adapters by name (lora_registry.h): a list in load order under one mutex,
 * references counted atomically.
 */
#include "engine/core/lora_registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"

struct lora_ref {
    atomic_int refs;
    char *name;
    char *path;
    int64_t id;
    lora_adapter *ad;
    struct lora_ref *next; /* in the registry while loaded */
};

struct lora_registry {
    const model *m;
    int32_t max_rank;
    pthread_mutex_t mu;
    struct lora_ref *head; /* load order */
    int64_t next_id;
};

lora_registry *lora_registry_new(const model *m, int32_t max_rank)
{
    lora_registry *r = calloc(1, sizeof(*r));
    if (!r) {
        return NULL;
    }
    r->m = m;
    r->max_rank = max_rank;
    r->next_id = 1;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void lora_ref_put(lora_ref *ref)
{
    if (ref && atomic_fetch_sub(&ref->refs, 1) == 1) {
        lora_free(ref->ad);
        free(ref->name);
        free(ref->path);
        free(ref);
    }
}

void lora_registry_free(lora_registry *r)
{
    if (!r) {
        return;
    }
    for (lora_ref *p = r->head, *next; p; p = next) {
        next = p->next;
        lora_ref_put(p);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static lora_ref *find_locked(lora_registry *r, const char *name, lora_ref ***link)
{
    lora_ref **pp = &r->head;
    while (*pp && strcmp((*pp)->name, name) != 0) {
        pp = &(*pp)->next;
    }
    if (link) {
        *link = pp;
    }
    return *pp;
}

int lora_registry_load(lora_registry *r, const char *name, const char *path, char *err,
                       size_t errlen)
{
    if (!name || !name[0] || !path || !path[0]) {
        return tandem_fail(err, errlen, -EINVAL,
                           "Both 'lora_name' and 'lora_path' must be provided.");
    }
    pthread_mutex_lock(&r->mu);
    const bool taken = find_locked(r, name, NULL) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (taken) {
        return tandem_fail(err, errlen, -EEXIST, "The lora adapter '%s' has already been loaded.",
                           name);
    }
    char lerr[512];
    lora_adapter *ad = lora_load(r->m, path, lerr, sizeof(lerr));
    if (!ad) {
        const bool missing = strstr(lerr, "No adapter found") != NULL;
        return tandem_fail(err, errlen, missing ? -ENOENT : -EINVAL, "%s", lerr);
    }
    if (ad->rank > r->max_rank) {
        const int32_t rank = ad->rank;
        lora_free(ad);
        return tandem_fail(err, errlen, -EINVAL, "LoRA rank %d is greater than max_lora_rank %d.",
                           rank, r->max_rank);
    }
    lora_ref *ref = calloc(1, sizeof(*ref));
    if (ref) {
        ref->name = strdup(name);
        ref->path = strdup(path);
    }
    if (!ref || !ref->name || !ref->path) {
        if (ref) {
            free(ref->name);
            free(ref->path);
        }
        free(ref);
        lora_free(ad);
        return tandem_fail(err, errlen, -ENOMEM, "out of memory loading LoRA adapter '%s'", name);
    }
    atomic_init(&ref->refs, 1);
    ref->ad = ad;
    lora_ref **tail;
    pthread_mutex_lock(&r->mu);
    if (find_locked(r, name, &tail)) { /* loaded by another caller meanwhile */
        pthread_mutex_unlock(&r->mu);
        lora_ref_put(ref);
        return tandem_fail(err, errlen, -EEXIST, "The lora adapter '%s' has already been loaded.",
                           name);
    }
    ref->id = r->next_id++;
    *tail = ref;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int lora_registry_unload(lora_registry *r, const char *name)
{
    lora_ref **link;
    pthread_mutex_lock(&r->mu);
    lora_ref *ref = name ? find_locked(r, name, &link) : NULL;
    if (ref) {
        *link = ref->next;
        ref->next = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (!ref) {
        return -ENOENT;
    }
    lora_ref_put(ref);
    return 0;
}

lora_ref *lora_registry_get(lora_registry *r, const char *name)
{
    pthread_mutex_lock(&r->mu);
    lora_ref *ref = name ? find_locked(r, name, NULL) : NULL;
    if (ref) {
        atomic_fetch_add(&ref->refs, 1);
    }
    pthread_mutex_unlock(&r->mu);
    return ref;
}

const lora_adapter *lora_ref_adapter(const lora_ref *ref)
{
    return ref->ad;
}

const char *lora_ref_name(const lora_ref *ref)
{
    return ref->name;
}

void lora_info_free(lora_info *info, size_t n)
{
    for (size_t i = 0; info && i < n; i++) {
        free(info[i].name);
        free(info[i].path);
    }
    free(info);
}

int lora_registry_list(lora_registry *r, lora_info **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    size_t count = 0;
    for (const lora_ref *p = r->head; p; p = p->next) {
        count++;
    }
    lora_info *info = calloc(count ? count : 1, sizeof(*info));
    size_t i = 0;
    for (const lora_ref *p = r->head; info && p; p = p->next, i++) {
        info[i].name = strdup(p->name);
        info[i].path = strdup(p->path);
        info[i].id = p->id;
        if (!info[i].name || !info[i].path) {
            lora_info_free(info, i + 1);
            info = NULL;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (!info) {
        return -ENOMEM;
    }
    *out = info;
    *n = count;
    return 0;
}
