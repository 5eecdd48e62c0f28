/* Helpers shared by the scheduler's unit tests: endpoints, configs and plugin access. */
#ifndef TANDEM_OPERATOR_EPP_SCHED_TEST_H
#define TANDEM_OPERATOR_EPP_SCHED_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/yaml.h"
#include "operator/epp/sched/sched_internal.h"

#define HDR "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"

struct fixture {
    struct epp_endpoint eps[16];
    struct epp_endpoint *ptrs[16];
    struct epp_prefix_match pm[16];
    char names[16][32];
    int n;
};

/* n ready decode endpoints named pod-0..; metrics zero and fresh. */
static inline void fixture_init(struct fixture *f, int n)
{
    memset(f, 0, sizeof(*f));
    f->n = n;
    for (int i = 0; i < n; i++) {
        struct epp_endpoint *ep = &f->eps[i];
        snprintf(f->names[i], sizeof(f->names[i]), "pod-%d", i);
        ep->id = (uint64_t)i + 100;
        ep->name = f->names[i];
        ep->ns = "ns";
        snprintf(ep->ip, sizeof(ep->ip), "10.0.0.%d", i + 1);
        ep->port = 8000;
        snprintf(ep->addr, sizeof(ep->addr), "10.0.0.%d:8000", i + 1);
        ep->ready = true;
        ep->m.valid = true;
        f->ptrs[i] = ep;
    }
}

static inline void fixture_labels(struct fixture *f, int i, const char *yaml)
{
    char err[128];
    json_object_put(f->eps[i].labels);
    f->eps[i].labels = yaml_parse(yaml, strlen(yaml), err, sizeof(err));
    assert_non_null(f->eps[i].labels);
}

static inline void fixture_free(struct fixture *f)
{
    for (int i = 0; i < f->n; i++) {
        json_object_put(f->eps[i].labels);
    }
}

static inline struct epp_sched *load_ok(const char *yaml)
{
    char err[512] = "";
    struct epp_sched *s = epp_sched_new(yaml, yaml ? strlen(yaml) : 0, NULL, err, sizeof(err));
    if (!s) {
        fail_msg("config did not load: %s\n%s", err, yaml ? yaml : "(default)");
    }
    epp_sched_seed(s, 42);
    return s;
}

/* Loading must fail with an error containing want. */
static inline void load_fails(const char *yaml, const char *want)
{
    char err[512] = "";
    struct epp_sched *s = epp_sched_new(yaml, strlen(yaml), NULL, err, sizeof(err));
    if (s) {
        epp_sched_free(s);
        fail_msg("config loaded but should fail with \"%s\":\n%s", want, yaml);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" does not contain \"%s\"", err, want);
    }
}

static inline struct plugin *plugin_of(struct epp_sched *s, const char *name)
{
    for (int i = 0; i < s->n_plugins; i++) {
        if (strcmp(s->plugins[i]->name, name) == 0) {
            return s->plugins[i];
        }
    }
    fail_msg("no plugin %s", name);
    return NULL;
}

/* Runs a plugin's scorer over all of f's endpoints. */
static inline void score_all(struct epp_sched *s, const char *name, struct fixture *f,
                             const struct epp_request *r, double *out)
{
    struct plugin *p = plugin_of(s, name);
    struct cycle c = {s, r, f->ptrs, f->pm, f->n, ++s->seq, 0};
    int cand[16];
    for (int i = 0; i < f->n; i++) {
        cand[i] = i;
    }
    p->ops->score(p, &c, cand, f->n, out);
}

/* Runs a plugin's filter over all of f's endpoints; returns the kept count, kept[] their index. */
static inline int filter_all(struct epp_sched *s, const char *name, struct fixture *f,
                             const struct epp_request *r, int *kept)
{
    struct plugin *p = plugin_of(s, name);
    struct cycle c = {s, r, f->ptrs, f->pm, f->n, ++s->seq, 0};
    for (int i = 0; i < f->n; i++) {
        kept[i] = i;
    }
    return p->ops->filter(p, &c, kept, f->n);
}

/* A one-profile config with the given plugins: YAML list items, and profile refs. */
#define ONE_PROFILE(plugins, refs)                                                                 \
    HDR "plugins:\n" plugins "schedulingProfiles:\n- name: default\n  plugins:\n" refs

#endif
