/*
 * vLLM's Responses API, text form (POST /v1/responses; vllm/entrypoints/openai/responses/:
 * protocol.py's ResponsesRequest / ResponsesResponse, serving.py, streaming_events.py, utils.py).
 *
 * A request is turned into the chat completion vLLM would render for it (utils.py's
 * construct_input_messages: `instructions` as a system message first, then `input`: a string
 * is one user message, a list of items gives messages, function calls and their outputs) and
 * that chat body is parsed by openai_parse_chat, so prompts, sampling, structured output and
 * tool calls run exactly as for /v1/chat/completions. The fields the answer echoes (instructions,
 * metadata, text, tools, tool_choice, reasoning, ...) are kept in a struct responses_request.
 * Renamed fields: max_output_tokens → max_completion_tokens, text.format → response_format,
 * include ["message.output_text.logprobs"] + top_logprobs → logprobs + top_logprobs,
 * truncation "auto" → truncate_prompt_tokens -1, reasoning.effort → the template's
 * reasoning_effort; a chat error naming one of those is renamed back (responses_fix_error).
 *
 * Answers: a ResponsesResponse body (responses_build), or the SSE events of a streamed one
 * (responses_stream_*), each written "event: <type>\ndata: <json>\n\n" as vLLM's api_router
 * frames them, with sequence_number counting from 0 and no [DONE] at the end.
 *
 * Nothing here does I/O or keeps global state; a request and its stream state belong to one
 * thread at a time. Builders append to a bounded struct buf and fail with its sticky error
 * (lib/buf.h); strings are written through openai_json_string, so bodies are valid JSON.
 */
#ifndef TANDEM_ENGINE_SERVER_RESPONSES_H
#define TANDEM_ENGINE_SERVER_RESPONSES_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "engine/server/openai.h"
#include "engine/server/tool_parser.h"
#include "lib/buf.h"

#define RESPONSES_MAX_REQUEST_ID 64 /* longest request_id (the answer's id) accepted, bytes */
#define RESPONSES_ITEM_ID_MAX    40 /* "msg_" / "fc_" + 32 hex digits, NUL included */

/* Where a streamed answer is (vLLM's SimpleStreamingEventProcessor): the output item open now,
 * a message or a function call, and the items already done. Private to responses.c. */
enum responses_open {
    RESPONSES_OPEN_NONE = 0,
    RESPONSES_OPEN_MESSAGE,
    RESPONSES_OPEN_CALL,
};

struct responses_stream {
    int64_t seq;               /* the next event's sequence_number */
    enum responses_open state; /* the item open now */
    int output_index;          /* its index in the output (= items done) */
    char item_id[RESPONSES_ITEM_ID_MAX];
    struct buf text; /* the open message's text, or the open call's arguments */
    struct buf lps;  /* the open message's logprobs, their final form, comma-separated */
    char call_id[TOOL_CALL_ID_MAX + 1];
    char *call_name; /* the open call's name (owned), call_name_len bytes */
    size_t call_name_len;
    size_t call_index;  /* its index among the tool parser's calls */
    int call_args_sent; /* an arguments delta went out (then a .done event closes it) */
    struct buf items;   /* the done items' JSON, comma-separated (the final output) */
    int n_items;
};

/* A parsed request: what the answer echoes. Strings and objects are borrowed from root. */
struct responses_request {
    struct json_object *root;        /* owned reference to the body */
    const char *request_id;          /* the body's request_id (the answer's id), or NULL */
    const char *instructions;        /* or NULL */
    struct json_object *metadata;    /* object or NULL */
    struct json_object *tools;       /* the request's array (echoed), or NULL: [] */
    struct json_object *tool_choice; /* as given, or NULL: "auto" */
    struct json_object *text;        /* object or NULL */
    struct json_object *reasoning;   /* object or NULL */
    const char *previous_response_id;
    const char *service_tier; /* "auto" unless given */
    const char *truncation;   /* "disabled" unless given */
    const char *user;
    int has_max_tool_calls;
    int64_t max_tool_calls;
    int parallel_tool_calls; /* default 1 */
    int include_logprobs;    /* include has "message.output_text.logprobs" */
    int top_logprobs;        /* default 0; -1 for null */
    int has_temperature, has_top_p;
    double temperature, top_p; /* as the request wrote them (the answer repeats them) */
    int store;                 /* default 1 (never stored: vLLM without its store) */
    int background;
    struct responses_stream st;
};

/*
 * Parses a /v1/responses body of len bytes into *out (malloc'd; free with
 * responses_request_free) and the chat request the engine runs into *req (release with
 * openai_request_deinit; its kind is OPENAI_CHAT). auto_tools: the server parses tool calls
 * (--enable-auto-tool-choice); without it tool_choice "auto" leaves the output as text, as vLLM
 * does without a parser. 0, or -EINVAL with err a 400 (501 for text.format json_object, vLLM's
 * NotImplementedError) naming the Responses field, or -ENOMEM (500); *out and *req then need
 * no release.
 */
int responses_parse(const char *body, size_t len, int auto_tools, struct responses_request **out,
                    struct openai_request *req, struct openai_error *err);

/* Frees rr (NULL is fine) and what it owns. */
void responses_request_free(struct responses_request *rr);

/* vLLM's checks once the model is known: background (400, the store is off) and
 * previous_response_id (404: nothing is ever stored). 0 or -EINVAL with err set. */
int responses_check(const struct responses_request *rr, struct openai_error *err);

/* Renames a chat error's field to its Responses name, in param and message
 * (max_completion_tokens → max_output_tokens, messages → input, response_format → text.format,
 * tool_choice.function → tool_choice, tools[i].function → tools[i], truncate_prompt_tokens →
 * truncation). */
void responses_fix_error(struct openai_error *err);

/* The outcome an answer reports. */
struct responses_result {
    const char *id;    /* "resp_<hex>" or the request_id */
    const char *model; /* served model or LoRA adapter name */
    int64_t created_at;
    enum openai_finish finish; /* LENGTH: status "incomplete"; NONE: "in_progress" */
    float temperature, top_p;  /* as sampled (the request's own values win when it gave them) */
    int64_t max_output_tokens; /* the max_tokens the engine ran with */
    const struct openai_usage *usage; /* NULL: "usage": null */
    /* non-streamed output: the message's text (NULL: none), its logprobs (include), calls */
    const char *text;
    size_t text_len;
    const struct openai_token_logprob *logprobs;
    size_t n_logprobs;
    const struct tool_call *calls;
    size_t n_calls;
    int tool_mode; /* the output was parsed for calls: no message when the text is empty */
};

/* The whole ResponsesResponse body, vLLM's field order. 0 or out's error. */
int responses_build(const struct responses_request *rr, const struct responses_result *res,
                    struct buf *out);

/* response.created and response.in_progress (res->finish NONE, usage NULL). */
int responses_stream_begin(struct responses_request *rr, const struct responses_result *res,
                           struct buf *out);

/* One step of output: text (len 0: none) with its tokens' logprobs (NULL: not included), then
 * tool-call entries (a call's first entry has its name; later ones argument fragments). Opens and
 * closes output items as vLLM's processor does and appends their events. */
int responses_stream_delta(struct responses_request *rr, const char *text, size_t len,
                           const struct openai_token_logprob *lps, size_t n_lps,
                           const struct tool_delta_call *calls, size_t n_calls, struct buf *out);

/* The end: the open item's done events, then response.completed with the items streamed (a
 * message with no content when none was and !res->tool_mode, vLLM's fallback). */
int responses_stream_end(struct responses_request *rr, const struct responses_result *res,
                         struct buf *out);

/* An "error" event (OpenAI's ResponseErrorEvent, code "server_error") for a failure after the
 * stream started. */
int responses_stream_error(struct responses_request *rr, const char *message, struct buf *out);

#endif /* TANDEM_ENGINE_SERVER_RESPONSES_H */
