/*
 * The EndpointPickerConfig (llm-d's YAML, docs/contracts.md) that tandem-epp reads for a pool:
 * generated from the pool's routingPolicy (loadBalancing.weights) and disaggregation, or an
 * inline config passed through after validation. Also YAML output for json-c values (libyaml's
 * emitter), so generated configs read like hand-written ones.
 *
 * Generated configs (docs/operator-workloads.md, "The EPP configuration"):
 *   weights.cacheHit → precise-prefix-cache-scorer (fed by the agents' KV events),
 *   weights.load → queue-scorer,
 *   weights.latency → kv-cache-utilization-scorer (defaults 3/2/2: the Gateway API Inference
 *   Extension's default profile); a weight of 0 leaves the scorer out; max-score-picker.
 *   No disaggregation: decode-filter + scorers + picker in one profile (schedulerProfile,
 *   default "default") and a single-profile-handler.
 *   Disaggregation: prefill-filter / decode-filter (or label-selector-filter for custom
 *   prefill/decodeSelector) in profiles "prefill" and "decode" (or schedulerProfile), and a
 *   pd-profile-handler with the pool's threshold.
 *   RoundRobin: decode-filter + random-picker, no scorers.
 */
#ifndef TANDEM_OPERATOR_EPPCONFIG_H
#define TANDEM_OPERATOR_EPPCONFIG_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/buf.h"
#include "operator/controller/spec.h"

#define EPPCONFIG_API_VERSION        "llm-d.ai/v1alpha1"
#define EPPCONFIG_API_VERSION_LEGACY "inference.networking.x-k8s.io/v1alpha1"
#define EPPCONFIG_KIND               "EndpointPickerConfig"
#define EPPCONFIG_FILE_KEY           "config.yaml" /* key in the ConfigMap and file name */
#define EPPCONFIG_MAX_TEXT           (1u << 20)    /* a ConfigMap holds at most 1 MiB */
#define EPPCONFIG_MAX_PLUGINS        256
#define EPPCONFIG_MAX_PROFILES       64

/* 1 when type is a plugin type name the EPP knows (llm-d's catalogue). */
int eppconfig_type_known(const char *type);

/*
 * The generated config for a valid pool that has no endpointPickerConfig (a new object), or NULL
 * on OOM.
 */
struct json_object *eppconfig_generate(const struct spec_pool *pool);

/*
 * Validates an EndpointPickerConfig document: apiVersion (either spelling), kind, plugins (known
 * types, unique names, object parameters), schedulingProfiles (unique names, pluginRefs that name
 * a plugin, weights >= 0), a profile handler when there are several profiles, and the profiles a
 * pd-profile-handler names. primary_profile (may be NULL) must be one of the profiles; need_pd
 * requires a pd-profile-handler or disagg-profile-handler. Errors name fields under the prefix
 * field ("spec.routingPolicy.endpointPickerConfig.inline.plugins[2].type"). 0, -EINVAL, -ENOMEM.
 */
int eppconfig_validate(struct json_object *cfg, const char *field, const char *primary_profile,
                       int need_pd, struct spec_errors *errs);

/*
 * Parses YAML text (at most EPPCONFIG_MAX_TEXT bytes) and validates it as above. On 0, *out (when
 * out is not NULL) receives the parsed document (a new reference). -EINVAL with errs filled
 * (a YAML syntax error is reported on field itself), -ENOMEM.
 */
int eppconfig_parse(const char *text, size_t len, const char *field, const char *primary_profile,
                    int need_pd, struct json_object **out, struct spec_errors *errs);

/* Validates the pool's inline endpointPickerConfig (object or YAML string); 0 when there is none.
 * Called by spec_pool_parse. 0, -EINVAL, -ENOMEM. */
int eppconfig_check_inline(const struct spec_pool *pool, struct spec_errors *errs);

/*
 * Appends the config file the pool's EPP reads to out: the generated config, or the inline one
 * (a YAML string verbatim, an object as YAML). 0; -ENOENT when the pool uses configMapRef (the
 * EPP mounts that ConfigMap; the reconciler validates its text with eppconfig_parse); -EINVAL
 * with errs filled when the inline config is invalid; -ENOMEM / -ENOSPC.
 */
int eppconfig_render(const struct spec_pool *pool, struct buf *out, struct spec_errors *errs);

/*
 * Appends o as block-style YAML (two-space indent, no line folding) that lib/yaml reads back to an
 * equal value: strings that could be read as anything else are double-quoted, with escapes for
 * line breaks and non-printable characters; keys over 128 characters or with line breaks are
 * written as explicit "? key" entries (YAML limits implicit keys to 1,024); empty containers are
 * {} / []. 0; -EINVAL (NaN or infinity, a string or key that is not UTF-8, non-empty containers
 * nested deeper than 64 below the root), checked before anything is appended; -ENOSPC / -ENOMEM
 * from the buffer (out then holds part of the document and its sticky failure is set).
 */
int eppconfig_to_yaml(struct json_object *o, struct buf *out);

#endif /* TANDEM_OPERATOR_EPPCONFIG_H */
