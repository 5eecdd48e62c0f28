/*
 * The metrics data source: every refresh interval each endpoint's /metrics is fetched (one
 * request in flight per endpoint at most) and the vLLM gauges the scorers read are extracted
 * (reference §1.7: vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc
 * or the older vllm:gpu_cache_usage_perc, vllm:cache_config_info, vllm:lora_requests_info).
 * Runs on the main loop.
 */
#ifndef TANDEM_OPERATOR_EPP_SCRAPE_H
#define TANDEM_OPERATOR_EPP_SCRAPE_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "lib/metrics.h"
#include "operator/epp/datastore.h"
#include "operator/epp/endpoint.h"

/*
 * Parses a Prometheus text exposition into m (fields not present stay as they were; the LoRA
 * lists are replaced whenever a vllm:lora_requests_info sample is present). Samples of several
 * label sets (model_name) add up for the request gauges; the KV usage is their maximum. 0, or
 * -EINVAL with err naming the line.
 */
int epp_metrics_parse(const char *text, size_t len, struct epp_metrics *m, char *err,
                      size_t errlen);

struct epp_scraper;

struct epp_scraper_config {
    int64_t interval_ms; /* --refresh-metrics-interval (50) */
    int64_t stale_ms;    /* --metrics-staleness-threshold (2000) */
    const char *path;    /* "/metrics" */
    const char *scheme;  /* "http" or "https" */
    int port;            /* 0: the endpoint's own port, else this one (the pod's IP) */
    int insecure_skip_verify;
    struct metrics_registry *reg; /* for the scrape error counter; may be NULL */
};

struct epp_scraper *epp_scraper_new(uv_loop_t *loop, struct epp_ds *ds,
                                    const struct epp_scraper_config *c, char *err, size_t errlen);
int epp_scraper_start(struct epp_scraper *s);
/* Forgets an endpoint's request in flight (call from the datastore's on_removed hook). */
void epp_scraper_forget(struct epp_scraper *s, uint64_t endpoint_id);
/* Cancels requests and closes the timer; the memory goes once the loop has run the close. */
void epp_scraper_free(struct epp_scraper *s);

#endif
