/*
 * The tokenizers of the pool's models, for block keys (keys/keys.h): one per model (the pods'
 * tandem.dev/model label; "" for pods without one), fetched from a ready pod of that model
 * (GET /tokenizer_info through its serving port) on a libuv worker thread, retried after a
 * failure, refreshed every few minutes (a rollout may change the template). Main loop thread.
 */
#ifndef TANDEM_OPERATOR_EPP_KEYRING_H
#define TANDEM_OPERATOR_EPP_KEYRING_H

#include <stdint.h>

#include <uv.h>

#include "lib/metrics.h"
#include "operator/epp/endpoint.h"

struct epp_keys;
struct epp_keyring;

struct epp_keyring *epp_keyring_new(uv_loop_t *loop, struct metrics_registry *reg);
/* Frees once the fetches in flight have ended (their results are dropped). */
void epp_keyring_free(struct epp_keyring *kr);

/* The keys of model (NULL: ""), or NULL while none are known. */
const struct epp_keys *epp_keyring_get(struct epp_keyring *kr, const char *model);

/* ep (ready) serves model: fetches its tokenizer when none is known, none is on its way, and the
 * last failure is older than the retry delay, or when the known one is due for a refresh. */
void epp_keyring_offer(struct epp_keyring *kr, const struct epp_endpoint *ep);

#endif
