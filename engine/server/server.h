/*
 * The engine's OpenAI-compatible HTTP server, as vLLM serves it (docs/contracts.md):
 * /v1/completions, /v1/chat/completions (SSE streaming, stream_options.include_usage),
 * /v1/models, /health, /ping, /version, /tokenize, /detokenize, /tokenizer_info (the tokenizer,
 * template and block-hash parameters for routers: tokenizer_info.h); /metrics is the http_server's
 * own route over the registry the engine writes its vllm:* metrics to. With API keys configured,
 * every /v1 path answers 401 without one (api_key.h).
 *
 * Glue only: requests are parsed and validated by openai_parse.c, rendered by the chat template,
 * tokenized, and handed to the engine (engine/core/engine.h), whose per-token outputs come back
 * from the engine thread through a queue drained on the uv loop (uv_async), where they become
 * response bodies or SSE chunks. A client that disconnects aborts its sequences in the engine.
 * A full waiting queue answers 503 with Retry-After.
 *
 * Threads: everything here runs on the loop thread except the engine callback, which only queues.
 */
#ifndef TANDEM_ENGINE_SERVER_SERVER_H
#define TANDEM_ENGINE_SERVER_SERVER_H

#include <stdint.h>

#include <uv.h>

#include "engine/core/engine.h"
#include "engine/server/openai.h"
#include "lib/http_server.h"

struct tracer;

struct engine_server_config {
    const char *served_model_name; /* the OpenAI "model" value; requests naming another get 404 */
    const char *model_root;        /* /v1/models "root" (the model path) */
    const char *chat_template;     /* template text overriding the model's, or NULL */
    int log_requests;              /* log one line per finished request */
    /* sampling defaults for fields a request leaves out (generation config); NULL: vLLM's */
    const struct openai_defaults *defaults;
    /* the engine's prefix-cache settings, reported by GET /tokenizer_info (copy them from the
     * engine_config the engine was built with) */
    uint64_t prefix_hash_seed;
    int disable_prefix_caching;
    /* request spans (docs/tracing.md: llm_request, first_token, kv_transfer, prefill); NULL: off */
    struct tracer *tracer;
    /* API keys (api_key.h): with any, every /v1 path needs "Authorization: Bearer <one of them>";
     * the server installs its gate on srv, so srv must not outlive the returned object in use */
    const char *const *api_keys;
    size_t n_api_keys;
    /* tool calling (vLLM's --enable-auto-tool-choice / --tool-call-parser): tool_choice "auto"
     * needs both; the parser turns generated text into tool_calls (tool_parser.h) */
    int enable_auto_tool_choice;
    const char *tool_call_parser; /* "hermes", "llama3_json", "llama4_json", "mistral" or NULL */
    /* /v1/embeddings: vLLM's --pooler-config JSON, {"pooling_type": "LAST" | "MEAN",
     * "normalize": bool}; NULL: LAST, normalized (vLLM's defaults for a causal LM) */
    const char *pooler_config;
};

struct engine_server;

/* Registers the routes on srv (not started yet or running) for engine e (borrowed; both must
 * outlive the returned object). NULL + err on failure. */
struct engine_server *engine_server_new(uv_loop_t *loop, struct http_server *srv, engine *e,
                                        const struct engine_server_config *cfg, char *err,
                                        size_t errlen);

/* The /tokenizer_info answer (tokenizer_info.h), built on the first call and kept: *body (len
 * bytes, NUL-terminated) and *etag live as long as s. 0 or a negative errno with err set. */
int engine_server_tokenizer_info(struct engine_server *s, const char **body, size_t *len,
                                 const char **etag, char *err, size_t errlen);

/* Number of HTTP requests still waiting for the engine. */
int engine_server_in_flight(const struct engine_server *s);

/* Frees the server glue. Call after the http_server drained and the engine thread stopped (no
 * more callbacks can arrive); requests still tracked are released. */
void engine_server_free(struct engine_server *s);

#endif
