/*
 * Fuzz target: the EPP's request path (router.c) on an OpenAI request body from a client: JSON
 * parsing, the InferenceModel mapping (targetModels, criticality), the approximate prefix text,
 * the scheduler with a P/D config, the body rewrite, and the in-flight accounting. Every
 * decision must be a routable one or an HTTP error with a message; a rewritten body must parse.
 * The first input byte picks the path, the rest is the body.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "operator/epp/datastore.h"
#include "operator/epp/router_internal.h"
#include "operator/epp/sched/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char config[] =
    "apiVersion: llm-d.ai/v1alpha1\n"
    "kind: EndpointPickerConfig\n"
    "plugins:\n"
    "- type: decode-filter\n"
    "- type: prefill-filter\n"
    "- type: prefix-cache-scorer\n"
    "- type: queue-scorer\n"
    "- type: session-affinity-scorer\n"
    "- type: pd-profile-handler\n"
    "  parameters: {threshold: 8}\n"
    "schedulingProfiles:\n"
    "- name: decode\n"
    "  plugins: [{pluginRef: decode-filter}, {pluginRef: "
    "prefix-cache-scorer, weight: 3}, {pluginRef: queue-scorer}, "
    "{pluginRef: session-affinity-scorer}]\n"
    "- name: prefill\n"
    "  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}]\n";

static struct epp_ds *ds;
static struct epp_router router;

static void setup(void)
{
    static const char *const roles[] = {"decode", "decode", "prefill", "both"};
    static const char *const models[] = {"base", "base", "base", "other"};
    ds = epp_ds_new(NULL);
    router.ds = ds;
    router.sched = epp_sched_new(config, sizeof config - 1, NULL, NULL, 0);
    router.rng = 1;
    CHECK(ds && router.sched);
    for (int i = 0; i < 4; i++) {
        char ip[32], name[16];
        snprintf(ip, sizeof ip, "10.0.0.%d", i + 1);
        snprintf(name, sizeof name, "pod-%d", i);
        struct json_object *labels = json_object_new_object();
        json_object_object_add(labels, "llm-d.ai/role", json_object_new_string(roles[i]));
        struct epp_pod p = {.ns = "ns",
                            .name = name,
                            .ip = ip,
                            .port = 8000,
                            .labels = labels,
                            .ready = true,
                            .model = models[i]};
        CHECK(epp_ds_upsert(ds, &p) == 0);
        json_object_put(labels);
        struct epp_endpoint *ep = epp_ds_at(ds, (size_t)i);
        ep->m.valid = true;
        ep->m.waiting = i;
        ep->stale = false;
    }
    struct epp_model m = {.name = "base", .model_name = "chat", .n_targets = 2};
    m.targets[0].name = "chat";
    m.targets[0].weight = 1;
    m.targets[1].name = "adapter-x";
    m.targets[1].weight = 1;
    CHECK(epp_ds_model_upsert(ds, &m) == 0);
    struct epp_model o = {.name = "other", .model_name = "shed", .criticality = EPP_CRIT_SHEDDABLE};
    CHECK(epp_ds_model_upsert(ds, &o) == 0);
}

static const char *no_header(void *ud, const char *name)
{
    (void)ud;
    return strcmp(name, "x-session-token") == 0 ? "bnMvcG9kLTE=" : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const paths[] = {"/v1/completions", "/v1/chat/completions", "/tokenize"};
    if (!ds) {
        setup();
    }
    if (size < 1) {
        return 0;
    }
    struct epp_route_in in = {
        .path = paths[data[0] % 3],
        .body = (const char *)data + 1,
        .body_len = size - 1,
        .header = no_header,
    };
    struct epp_decision d;
    CHECK(epp_route(&router, &in, &d) == 0);
    if (d.status == 0) {
        CHECK(d.n_targets > 0 && d.targets[0] != NULL);
        if (d.body) {
            struct json_object *o = json_parse(d.body, d.body_len, NULL, 0);
            CHECK(json_object_is_type(o, json_type_object));
            json_object_put(o);
        }
        epp_route_started(&router, &d, d.targets[0]);
        epp_route_finished(&router, &d, d.target_ids[0], true);
        CHECK(d.targets[0]->active_requests == 0);
    } else {
        CHECK(d.status >= 400 && d.status < 600 && d.message[0] != '\0');
    }
    epp_decision_free(&d);
    return 0;
}
