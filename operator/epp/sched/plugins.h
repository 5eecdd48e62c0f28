/* The plugin implementations, by file; plugins.c puts them in one table. */
#ifndef TANDEM_OPERATOR_EPP_SCHED_PLUGINS_H
#define TANDEM_OPERATOR_EPP_SCHED_PLUGINS_H

#include "operator/epp/sched/sched_internal.h"

/* filters.c */
extern const struct plugin_ops filter_decode_ops, filter_prefill_ops, filter_encode_ops,
    filter_label_selector_ops, filter_by_label_selector_ops, filter_by_label_ops;
/* scorers.c */
extern const struct plugin_ops scorer_queue_ops, scorer_kv_ops, scorer_load_aware_ops,
    scorer_active_request_ops, scorer_session_ops, scorer_lora_ops, scorer_running_ops,
    scorer_token_load_ops;
/* prefix.c */
extern const struct plugin_ops scorer_prefix_ops, filter_prefix_affinity_ops;
/* precise.c */
extern const struct plugin_ops scorer_precise_ops;
/* pickers.c */
extern const struct plugin_ops picker_max_score_ops, picker_random_ops, picker_weighted_ops;
/* handlers.c */
extern const struct plugin_ops handler_single_ops, handler_pd_ops, handler_disagg_ops,
    decider_prefix_ops, decider_always_ops, prereq_prefill_header_ops, prereq_disagg_headers_ops,
    saturation_utilization_ops;

/* Whether ep's labels match the selector plugin p. */
bool selector_matches(const struct plugin *p, const struct epp_endpoint *ep);
/* Reads a utilization-detector's parameters into sat. */
int saturation_params(struct json_object *params, struct saturation *sat, char *err, size_t errlen);

#endif
