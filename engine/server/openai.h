/*
 * The OpenAI protocol layer of the engine's server, shaped after vLLM's OpenAI-compatible server
 * (vllm/entrypoints/openai/protocol.py): request bodies of /v1/completions, /v1/chat/completions,
 * /tokenize and /detokenize are parsed and validated into C structs; response bodies, streaming
 * chunks (SSE), /v1/models and error bodies are built into a struct buf. No I/O here: the HTTP
 * glue (server.c) and the engine core call these functions. Requests are parsed in
 * openai_parse.c, responses built in openai_build.c.
 *
 * Validation: wrong types and out-of-range values fill a struct openai_error with status 400,
 * type "BadRequestError", param = the field's name (dotted path for nested fields, e.g.
 * "messages[1].content", "stream_options.include_usage") and vLLM's message where vLLM has one
 * ("temperature must be in [0, 2], got 2.5."), else one that quotes the field. Unknown fields
 * are ignored (vLLM logs them). Every field vLLM accepts is honoured or refused with a 400 naming
 * it, never silently dropped: fields vLLM supports but this engine does not (suffix, non-text
 * content parts, prompt_embeds, embeddings' padding "max_length", and, when set (not null / false
 * / empty), logprob_token_ids, use_beam_search) are a 400 naming the field; best_of > 1 is the
 * 400 vLLM v1 gives ("vLLM V1 does not yet support best_of."); thinking_token_budget (other than
 * null and -1) is vLLM's 400 for a server without a reasoning parser, which this one never has.
 * logit_bias, allowed_token_ids, bad_words, prompt_logprobs, return_token_ids,
 * return_tokens_as_token_ids, repetition_detection, stream_interval, request_id,
 * return_prompt_text, reasoning_effort and documents are honoured.
 *
 * Prompts: a completion's prompt is a string, an array of token ids, or an array of strings or
 * of token arrays (one kind; at most OPENAI_MAX_PROMPTS, and prompts × n at most
 * OPENAI_MAX_CHOICES). n > 1 is accepted (independent sequences); choice prompt * n + j is
 * prompt's j-th, as vLLM indexes them.
 * Token ids are checked to be in [0, 2^31) here; against the vocabulary size (and the prompt
 * against max_model_len) by the engine, which answers those with a 400 of its own.
 *
 * Types are strict where pydantic is lax: numbers must be JSON numbers (not numeric strings),
 * integers may be written 3.0 but not 3.5, booleans must be true/false.
 *
 * Defaults (vLLM's, when a field is absent): temperature 1, top_p 1, top_k 0 (off), min_p 0,
 * penalties 0 / repetition 1, n 1, stream false, max_tokens 16 for completions (an explicit null
 * too: vLLM's normalize_null_max_tokens) and unset for chat (max_completion_tokens, else
 * max_tokens, else the context); an unset max_tokens is max_tokens_set == 0 and the engine
 * resolves it to max_model_len − prompt_len. add_special_tokens: true for completions, false for
 * chat. skip_special_tokens and spaces_between_special_tokens true; add_generation_prompt true.
 * seed -1 means no seed (vLLM's SamplingParams). A temperature in (0, 0.01) becomes 0.01 and only
 * 0 is greedy, as vLLM's SamplingParams clamps it (openai_resolve_sampling).
 *
 * Ownership: a parsed request owns its json-c root and some malloc'd arrays; every string and
 * json_object pointer in it is borrowed from the root and lives until openai_request_deinit. The
 * builders read their inputs and append to `out` (a bounded struct buf the caller owns). They
 * fail with out's sticky failure (lib/buf.h: -ENOSPC past its cap, -ENOMEM) or, rarely, one of
 * their own (-EINVAL: kv_transfer_params nested too deeply); out then holds a prefix of the body,
 * never a body with a hole in it (openai_json_string and openai_sse_data append all or nothing).
 * All text written into JSON is escaped per RFC 8259 and invalid UTF-8 bytes become U+FFFD, so a
 * body is always valid JSON.
 */
#ifndef TANDEM_ENGINE_SERVER_OPENAI_H
#define TANDEM_ENGINE_SERVER_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "engine/sampler/sampler.h"
#include "lib/buf.h"

#define OPENAI_MAX_N               128  /* most choices per request */
#define OPENAI_MAX_STOP            64   /* most stop strings (= STOP_MAX_STRINGS) */
#define OPENAI_MAX_STOP_LEN        1024 /* bytes per stop string (= STOP_MAX_LEN) */
#define OPENAI_MAX_STOP_TOKENS     1000 /* most stop_token_ids (+ eos fits SAMPLER_MAX_STOP_IDS) */
#define OPENAI_MAX_LOGPROBS        20   /* completions logprobs / chat top_logprobs upper bound */
#define OPENAI_MAX_MESSAGES        4096 /* most chat messages */
#define OPENAI_DEFAULT_MAX_TOKENS  16   /* completions' default max_tokens */
#define OPENAI_MAX_LOGIT_BIAS      4096 /* most logit_bias entries */
#define OPENAI_MAX_PROMPTS         1024 /* most prompts in one completion request */
#define OPENAI_MAX_CHOICES         1024 /* prompts × n at most */
#define OPENAI_MAX_ALLOWED_TOKENS  262144 /* most allowed_token_ids */
#define OPENAI_MAX_BAD_WORDS       128    /* most bad_words token sequences (vLLM's limit) */
#define OPENAI_MAX_BAD_WORD_TOKENS 1024   /* most tokens in them all (vLLM's runner v2) */
#define OPENAI_MAX_CACHE_SALT      128 /* characters of cache_salt (vLLM's validate_cache_salt) */
#define OPENAI_MAX_REQUEST_ID      64  /* bytes of a request_id (the response id's suffix) */

/* An error answer: HTTP status, OpenAI error type, param (field name, "" for none), message. */
struct openai_error {
    int status;     /* 400, 404, 500, ... (also the "code" of the body) */
    char type[40];  /* "BadRequestError", "NotFoundError", "InternalServerError" */
    char param[96]; /* field name, "" → null */
    char message[512];
};

/* Fills err (status 400 → type "BadRequestError", 404 → "NotFoundError", 503 →
 * "ServiceUnavailableError", else "InternalServerError"). param may be NULL. */
void openai_error_set(struct openai_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* {"error":{"message","type","param","code"}} (lib/http_server.h's shape) appended to out. */
int openai_error_body(const struct openai_error *err, struct buf *out);

enum openai_kind {
    OPENAI_COMPLETION = 1, /* /v1/completions */
    OPENAI_CHAT = 2,       /* /v1/chat/completions */
    OPENAI_EMBEDDING = 3,  /* /v1/embeddings */
};

struct openai_message {
    const char *role; /* "system" | "user" | "assistant" | "tool" | "developer" */
    char *content;    /* owned: text (parts joined with "\n"); NULL for null content */
    size_t content_len;
    const char *name;               /* borrowed or NULL */
    const char *tool_call_id;       /* borrowed or NULL (role "tool") */
    struct json_object *tool_calls; /* borrowed array (role "assistant") or NULL */
    /* borrowed or NULL: "reasoning", else the deprecated "reasoning_content" (vLLM's protocol
     * renames it); an assistant message's reaches the template as both names (chat_utils) */
    const char *reasoning;
};

/* One completion prompt: text, or token ids (tokens != NULL, owned by the request). */
struct openai_prompt {
    const char *text; /* borrowed */
    size_t text_len;
    int32_t *tokens;
    size_t n_tokens;
};

/* Structured output (structured.c): the one constraint a request asked for. */
enum openai_guide_kind {
    OPENAI_GUIDE_NONE = 0,
    OPENAI_GUIDE_JSON,        /* text: a JSON schema (JSON text) */
    OPENAI_GUIDE_JSON_OBJECT, /* any JSON object */
    OPENAI_GUIDE_REGEX,       /* text: a regex the whole output matches */
    OPENAI_GUIDE_CHOICE,      /* choices: one of these strings exactly */
    OPENAI_GUIDE_GRAMMAR,     /* text: a GBNF grammar */
};

struct openai_guide {
    enum openai_guide_kind kind;
    char *text; /* owned, NUL-terminated */
    size_t text_len;
    struct json_object *choices; /* borrowed array of strings (OPENAI_GUIDE_CHOICE) */
    int compact;                 /* disable_any_whitespace: JSON without optional spaces */
    char param[64];              /* the field it came from, for errors */
};

/* /v1/embeddings output (vLLM's encoding_format, embed_dtype, endianness). */
enum openai_embed_encoding {
    OPENAI_EMBED_FLOAT = 0,  /* "float": JSON numbers */
    OPENAI_EMBED_BASE64,     /* "base64": the vector's bytes, base64 */
    OPENAI_EMBED_BYTES,      /* "bytes": the bytes as the body, a "metadata" header (JSON) */
    OPENAI_EMBED_BYTES_ONLY, /* "bytes_only": the bytes as the body, no header */
};

enum openai_embed_dtype {
    OPENAI_DTYPE_FLOAT32 = 0,
    OPENAI_DTYPE_FLOAT16,  /* IEEE binary16 */
    OPENAI_DTYPE_BFLOAT16, /* the float32's high half, rounded */
    OPENAI_DTYPE_FP8_E4M3, /* torch.float8_e4m3fn: no infinities, 480 and above → NaN */
    OPENAI_DTYPE_FP8_E5M2, /* torch.float8_e5m2 */
};

enum openai_endianness {
    OPENAI_ENDIAN_NATIVE = 0, /* the host's (vLLM's default) */
    OPENAI_ENDIAN_BIG,
    OPENAI_ENDIAN_LITTLE,
};

struct openai_embed_format {
    enum openai_embed_encoding encoding;
    enum openai_embed_dtype dtype;
    enum openai_endianness endian;
};

/* Chat tool_choice (chat_tools.c). */
enum openai_tool_choice {
    OPENAI_TOOL_NONE = 0, /* "none", or no tools */
    OPENAI_TOOL_AUTO,     /* "auto" (the default with tools): the server's tool-call parser */
    OPENAI_TOOL_REQUIRED, /* "required": a JSON array of calls, grammar-enforced */
    OPENAI_TOOL_NAMED,    /* {"type": "function", "function": {"name"}}: that tool's arguments */
};

struct openai_request {
    enum openai_kind kind;
    struct json_object *root; /* owned reference to the parsed body */

    const char *model; /* NULL when absent (the served model is meant) */

    /* completions: the prompts (one, or a list: choices are indexed prompt * n + choice, as
     * vLLM does), and prompt_text / prompt_tokens naming the selected one (the first, or
     * openai_request_select_prompt's): exactly one of the two is set */
    struct openai_prompt *prompts; /* owned array of n_prompts */
    size_t n_prompts;
    const char *prompt_text; /* borrowed, NUL-terminated (may contain no NUL: JSON forbids) */
    size_t prompt_text_len;
    int32_t *prompt_tokens; /* borrowed from prompts[], NULL when the prompt is text */
    size_t n_prompt_tokens;
    int echo; /* completions and chat: echo the prompt / last message */

    /* chat */
    struct openai_message *messages; /* owned array */
    size_t n_messages;
    int add_generation_prompt;                /* default 1 */
    int continue_final_message;               /* default 0 */
    const char *chat_template;                /* borrowed or NULL */
    struct json_object *chat_template_kwargs; /* borrowed object or NULL */
    /* reasoning_effort ("none" ... "max") and documents (an array of objects of strings):
     * template variables of the same names, and enable_thinking = effort != "none" unless
     * chat_template_kwargs sets it (vLLM's build_chat_params); borrowed or NULL */
    const char *reasoning_effort;
    struct json_object *documents;
    int return_prompt_text; /* the answer carries the rendered prompt ("prompt_text") */

    /* generation */
    struct sampling_params sampling; /* temperature ... logprobs, min_tokens, ignore_eos,
                                        stop_token_ids (points into stop_token_ids below) */
    int max_tokens;                  /* valid when max_tokens_set */
    int max_tokens_set;              /* 0: the engine uses max_model_len - prompt_len */
    int n;                           /* choices (≥ 1) */
    const char **stop;               /* owned array of borrowed strings */
    size_t n_stop;
    int32_t *stop_token_ids; /* owned */
    size_t n_stop_token_ids;
    int32_t truncate_prompt_tokens; /* 0: none; -1: max_model_len; k: the prompt's last k */
    int truncate_right;             /* truncation_side "right": keep the first k instead */
    int32_t *allowed_ids; /* allowed_token_ids, owned (sampling.allowed_ids points here) */
    size_t n_allowed;
    int32_t *bias_ids; /* logit_bias, owned (sampling.bias_* point here) */
    float *bias_vals;
    size_t n_bias;
    int include_stop_str_in_output;
    int logprobs; /* -1 none; else top count 0..20 (chat: top_logprobs when logprobs true) */
    /* logprobs (chat: top_logprobs) -1: the whole vocabulary, which openai_resolve_sampling
     * refuses past OPENAI_MAX_LOGPROBS as vLLM does */
    int logprobs_vocab;
    /* vLLM's prompt_logprobs, as its to_sampling_params derives it: the field, else with echo
     * the completion's logprobs (when set) or the chat's top_logprobs (default 0). -1 is the
     * vocabulary until openai_resolve_prompt_logprobs; else the top count. */
    int has_prompt_logprobs;
    int64_t prompt_logprobs;
    int echo_only; /* completions echo with max_tokens 0 (vLLM's echo_without_generation):
                      max_tokens is 1, and the answer has the prompt only (text, logprobs) */
    /* bad_words: the strings (owned array of borrowed strings, deduplicated), then their token
     * sequences once prompt_bad_words has run (sampling.bad_words* point there) */
    const char **bad_words;
    size_t *bad_word_lens; /* bytes of each string */
    size_t n_bad_words;
    int32_t *bad_word_ids;          /* owned: the sequences back to back */
    int32_t *bad_word_seq_lens;     /* owned: tokens of each sequence (sampling.n_bad_words) */
    int return_tokens_as_token_ids; /* logprobs name tokens "token_id:{id}" */
    int return_token_ids;           /* answers carry token_ids / prompt_token_ids */

    /* streaming */
    int stream;
    int include_usage;          /* stream_options.include_usage */
    int continuous_usage_stats; /* stream_options.continuous_usage_stats */
    /* tokens per streamed chunk (vLLM's stream_interval; default 1): a choice's first and last
     * chunks go at once, the others every this many tokens */
    int stream_interval;

    /* detokenization, tokenization */
    int skip_special_tokens;           /* default 1 */
    int spaces_between_special_tokens; /* default 1 */
    int add_special_tokens;            /* completions default 1, chat default 0 */

    /* scheduling, caching, disaggregation */
    int priority;                           /* default 0; lower runs first (vLLM) */
    const char *cache_salt;                 /* borrowed, NULL when absent */
    struct json_object *kv_transfer_params; /* borrowed object or NULL */
    const char *user;                       /* borrowed or NULL */
    const char *request_id; /* borrowed or NULL: the response id's suffix without X-Request-Id */

    struct openai_guide guide; /* structured output; kind NONE when unconstrained */

    /* embeddings (the inputs are the prompts) */
    int embed_base64;     /* encoding_format "base64" (embed_fmt says more) */
    int embed_dimensions; /* dimensions, 0 when absent */
    int embed_normalize;  /* use_activation (L2 normalisation): -1 absent or null (the server's
                             pooler config decides) */
    struct openai_embed_format embed_fmt;

    /* chat tools */
    struct json_object *tools; /* borrowed array of {"type": "function", "function"}, or NULL */
    enum openai_tool_choice tool_choice;
    const char *tool_name;   /* OPENAI_TOOL_NAMED: the tool (borrowed) */
    int parallel_tool_calls; /* default 1 */
};

/*
 * Parses and validates a /v1/completions (resp. /v1/chat/completions) body of len bytes. 0 with
 * *req filled (release with openai_request_deinit), or -EINVAL with err set (400; *req needs no
 * deinit), or -ENOMEM (err set, 500).
 */
int openai_parse_completion(const char *body, size_t len, struct openai_request *req,
                            struct openai_error *err);
int openai_parse_chat(const char *body, size_t len, struct openai_request *req,
                      struct openai_error *err);

void openai_request_deinit(struct openai_request *req);

/* Reads response_format, structured_outputs and guided_* into req->guide (called by the parsers
 * above). 0 or -EINVAL with err set (400 naming the field), -ENOMEM (500). */
int openai_parse_structured(struct openai_request *req, struct openai_error *err);
void openai_guide_deinit(struct openai_guide *g);

/* Reads tools, tool_choice and parallel_tool_calls (chat), with vLLM's checks and messages; for
 * "required" and a named tool, sets req->guide to the schema that forces the call (a 400 when
 * another structured-output constraint is set too). 0, -EINVAL (400), -ENOMEM (500). */
int openai_parse_tools(struct openai_request *req, struct openai_error *err);

/* Appends the GBNF grammar of g (kind not NONE) to out. 0, or -EINVAL with err a 400 naming the
 * field (an unsupported schema keyword, a bad regex), -ENOMEM (500). */
int openai_guide_gbnf(const struct openai_guide *g, struct buf *out, struct openai_error *err);

/*
 * What vLLM's SamplingParams and its verify decide once the server's defaults are applied
 * (openai_apply_defaults) and the vocabulary is known, in vLLM's order: a temperature in
 * (0, 0.01) becomes 0.01; a greedy one (below 1e-5) with n > 1 is vLLM's 400 ("n must be 1 when
 * using greedy sampling, got 2."); sample logprobs -1 becomes n_vocab and more than
 * OPENAI_MAX_LOGPROBS is vLLM's 400 ("Requested sample logprobs of N, which is greater than max
 * allowed: 20", param logprobs); then the prompt_logprobs count the same way ("Requested prompt
 * logprobs of N, ...", param prompt_logprobs). 0 or -EINVAL with err set.
 */
int openai_resolve_sampling(struct openai_request *req, int32_t n_vocab, struct openai_error *err);

/* openai_resolve_sampling under its former name. */
int openai_resolve_prompt_logprobs(struct openai_request *req, int32_t n_vocab,
                                   struct openai_error *err);

/* Points prompt_text / prompt_tokens at prompts[i] (i < n_prompts) for prompt_build. */
void openai_request_select_prompt(struct openai_request *req, size_t i);

/*
 * Server-side sampling defaults, vLLM's "default_sampling_params": what the model's
 * generation_config.json recommends (--generation-config auto) merged with
 * --override-generation-config. They replace vLLM's defaults for the fields a request leaves out;
 * max_new_tokens caps max_tokens (vLLM's get_max_tokens takes the minimum). Keys as in
 * generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens.
 */
struct openai_defaults {
    int has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty, has_max_tokens;
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
    int max_tokens; /* from max_new_tokens */
};

/* Merges the sampling keys of a generation-config JSON object (text, len bytes) into d, later
 * values winning. Other keys are ignored (a generation_config.json holds many: bos_token_id,
 * do_sample, ...); a known key with a wrong type or out of range is an error naming it. 0, or
 * -EINVAL with err set ("'temperature' must be non-negative, got -1"). */
int openai_defaults_merge(struct openai_defaults *d, const char *text, size_t len, char *err,
                          size_t errlen);

/* Fills the fields req's body did not set (absent or null) from d. */
void openai_apply_defaults(struct openai_request *req, const struct openai_defaults *d);

/* "temperature=0.6 top_p=0.95" for a log line ("" when d sets nothing). */
void openai_defaults_describe(const struct openai_defaults *d, char *out, size_t outlen);

/* /tokenize: {"model"?, "prompt" | "messages", "add_special_tokens"?, "add_generation_prompt"?,
 * "continue_final_message"?, "chat_template"?, "return_token_strs"?}. kind is OPENAI_COMPLETION
 * for a prompt (text only; add_special_tokens default 1) and OPENAI_CHAT for messages (default
 * 0). The messages/prompt fields of req are filled as by the parsers above. */
/* /v1/embeddings (vLLM's EmbeddingCompletionRequest): the inputs become req->prompts (text or
 * token ids, as completions' prompt), max_tokens 1 (the engine pools the prompt);
 * encoding_format / embed_dtype / endianness into req->embed_fmt, use_activation into
 * embed_normalize, truncation, cache_salt and request_id as for completions (the id does not
 * use it, as vLLM's pooling ids do not); "normalize" (even null) and the removed task names are
 * vLLM's 400s, padding "max_length" a 400 of this server's. */
int openai_parse_embedding(const char *body, size_t len, struct openai_request *req,
                           struct openai_error *err);

int openai_parse_tokenize(const char *body, size_t len, struct openai_request *req,
                          int *return_token_strs, struct openai_error *err);

/* /detokenize: {"model"?, "tokens": [ids]}. *tokens is malloc'd (free it); *model borrowed from
 * *root (json_object_put it when done). */
int openai_parse_detokenize(const char *body, size_t len, struct json_object **root,
                            const char **model, int32_t **tokens, size_t *n_tokens,
                            struct openai_error *err);

/* ---- responses ---- */

enum openai_finish {
    OPENAI_FINISH_NONE = 0,   /* null (a streaming chunk mid-generation) */
    OPENAI_FINISH_STOP,       /* "stop": eos, stop token or stop string */
    OPENAI_FINISH_LENGTH,     /* "length": max_tokens or max_model_len */
    OPENAI_FINISH_ABORT,      /* "abort" */
    OPENAI_FINISH_TOOL_CALLS, /* "tool_calls": auto or required tool calls were made */
    OPENAI_FINISH_REPETITION, /* "repetition": repetition_detection ended it (stop_reason
                                 "repetition_detected", as vLLM's check_stop sets it) */
};

struct openai_top_logprob {
    const char *text; /* detokenized piece of the token (may be partial UTF-8) */
    size_t text_len;
    float logprob;
    int32_t token; /* its id (return_tokens_as_token_ids) */
};

struct openai_token_logprob {
    const char *text; /* the sampled token's piece */
    size_t text_len;
    float logprob;
    const struct openai_top_logprob *top; /* best first */
    size_t n_top;
    int32_t token;  /* its id (return_tokens_as_token_ids) */
    int no_logprob; /* echo: the prompt's first token (token_logprobs and top_logprobs null) */
};

/* One position of vLLM's prompt_logprobs: the prompt's token there with its raw logprob and
 * 1-based rank, and the most likely tokens there, best first (top[j] has rank j + 1). */
struct openai_prompt_logprob {
    int32_t token;
    const char *text; /* its piece (decoded_token) */
    size_t text_len;
    float logprob;
    int32_t rank;
    const struct openai_top_logprob *top;
    size_t n_top;
};

/* A prompt's prompt_logprobs: positions 1 .. n (position 0 has none: null). */
struct openai_prompt_logprobs {
    const struct openai_prompt_logprob *pos;
    size_t n;
};

struct openai_choice {
    int index;
    const char *text; /* generated text (the delta, for chunks); may be NULL with text_len 0 */
    size_t text_len;
    enum openai_finish finish;
    const char *stop_str; /* stop_reason: the matched stop string, or */
    int64_t stop_token;   /* the stop token id when stop_str is NULL and has_stop_token */
    int has_stop_token;
    const struct openai_token_logprob *logprobs; /* NULL → "logprobs": null */
    size_t n_logprobs;
    size_t text_offset; /* completions logprobs: offset of the first token's text in the
                           choice's whole text (stream chunks continue from earlier ones) */
    /* chat tool calls: a JSON array, the message's "tool_calls" (full bodies) or the delta's
     * entries (chunks); NULL: [] in full bodies, none in chunks */
    const char *tool_calls_json;
    size_t tool_calls_json_len;
    int content_null; /* full chat bodies: "content": null (only tool calls were made) */
    int delta_empty;  /* chat chunks: delta {} (nothing to say but token ids to carry) */
    /* with meta->return_token_ids: "token_ids", the generated ids (full bodies) or this chunk's
     * (NULL with 0: []); completions also "prompt_token_ids", the choice's prompt (chunks: NULL
     * → null, vLLM sends them in a choice's first chunk only) */
    const int32_t *token_ids;
    size_t n_token_ids;
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    /* completions, full bodies: the choice's "prompt_logprobs" (NULL → null) */
    const struct openai_prompt_logprobs *prompt_logprobs;
};

struct openai_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens; /* prompt tokens served from the prefix cache; 0 → details null */
};

struct openai_meta {
    const char *id;                         /* "cmpl-<hex>" / "chatcmpl-<hex>" (openai_make_id) */
    const char *model;                      /* served model name */
    int64_t created;                        /* unix seconds */
    struct json_object *kv_transfer_params; /* top-level "kv_transfer_params" of full bodies
                                               (null when NULL, as vLLM writes it) */
    int tokens_as_ids;    /* return_tokens_as_token_ids: logprobs name tokens "token_id:{id}" */
    int return_token_ids; /* write the token id fields (vLLM's return_token_ids); 0: left out */
    /* chat: the response's "prompt_token_ids" (full bodies, first chunks) */
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    /* chat, full bodies: the response's "prompt_logprobs" (NULL → null) */
    const struct openai_prompt_logprobs *prompt_logprobs;
    /* chat with return_prompt_text: the rendered prompt, "prompt_text" of full bodies and role
     * chunks (NULL: left out) */
    const char *prompt_text;
    size_t prompt_text_len;
};

/* Writes prefix + 32 random hex digits into out (size ≥ strlen(prefix) + 33). */
void openai_make_id(char *out, size_t size, const char *prefix);

/* Full (non-streaming) bodies. usage NULL → "usage": null. With meta->return_token_ids a
 * completion choice has "token_ids" and "prompt_token_ids", a chat choice "token_ids" and the
 * chat response "prompt_token_ids" (vLLM's places); without, none of them.
 *
 * prompt_logprobs (a completion choice's, the chat response's) is vLLM's list: null for the first
 * position, then per position a dict keyed by token id, the prompt's token first, then the top
 * tokens not already in it, each {"logprob", "rank", "decoded_token"} (logprobs below -9999 and
 * -inf written -9999.0). Completions logprobs follow vLLM's _create_completion_logprobs: each
 * top_logprobs dict is keyed by token name, the token first then its top entries (a top entry with
 * the token's id is the token's, a name met again keeps its first place and takes the later
 * value, as a Python dict does), and text_offset advances by each name's length in characters
 * (openai_text_chars). */
int openai_build_completion(const struct openai_meta *meta, const struct openai_choice *choices,
                            size_t n_choices, const struct openai_usage *usage, struct buf *out);
int openai_build_chat(const struct openai_meta *meta, const struct openai_choice *choices,
                      size_t n_choices, const struct openai_usage *usage, struct buf *out);

/*
 * Streaming chunks (the JSON object only; frame it with openai_sse_data). Completions chunk:
 * object "text_completion", choices[{index, text, logprobs, finish_reason, stop_reason}]. Chat
 * chunk: object "chat.completion.chunk"; first != 0 gives the role delta {"role":"assistant",
 * "content": text} (vLLM's first chunk per choice has text "", logprobs and finish null); else
 * delta {"content": text} (or {} when text_len is 0 and a finish reason is set, or delta_empty).
 * usage non-NULL adds "usage" (continuous usage stats); NULL omits it. With
 * meta->return_token_ids: completion choices end with "prompt_token_ids" and "token_ids", chat
 * choices (not the role chunk's) with "token_ids", and a role chunk ends with the response's
 * "prompt_token_ids", as vLLM writes them.
 */
int openai_build_completion_chunk(const struct openai_meta *meta,
                                  const struct openai_choice *choices, size_t n_choices,
                                  const struct openai_usage *usage, struct buf *out);
int openai_build_chat_chunk(const struct openai_meta *meta, const struct openai_choice *choices,
                            size_t n_choices, int first, const struct openai_usage *usage,
                            struct buf *out);

/* The final usage-only chunk of include_usage: choices [] and usage. */
int openai_build_usage_chunk(const struct openai_meta *meta, enum openai_kind kind,
                             const struct openai_usage *usage, struct buf *out);

/* The /v1/embeddings answer: {"id", "object": "list", "created", "model", "data": [{"index",
 * "object": "embedding", "embedding": [floats] | base64 of float32 little endian}], "usage"}.
 * vecs[i] has dims floats. */
int openai_build_embeddings(const struct openai_meta *meta, const float *const *vecs, size_t n,
                            int dims, int base64, const struct openai_usage *usage,
                            struct buf *out);

/* The same answer in fmt's encoding: "float" as above; "base64" the base64 of each vector's bytes
 * (openai_embed_encode). fmt's encoding must not be a bytes one. */
int openai_build_embeddings_fmt(const struct openai_meta *meta, const float *const *vecs, size_t n,
                                int dims, const struct openai_embed_format *fmt,
                                const struct openai_usage *usage, struct buf *out);

/* encoding_format "bytes" / "bytes_only" (vLLM's encode_pooling_bytes): body gets the vectors'
 * bytes back to back (openai_embed_encode); for "bytes", metadata (NUL-terminated) gets the
 * "metadata" header's JSON, as Python's json.dumps writes {"id", "created", "model", "data":
 * [{"index", "embed_dtype", "endianness", "start", "end", "shape": [dims]}], "usage":
 * {"prompt_tokens", "total_tokens"}}; for "bytes_only" metadata stays empty. 0 or a buf error. */
int openai_build_embeddings_bytes(const struct openai_meta *meta, const float *const *vecs,
                                  size_t n, int dims, const struct openai_embed_format *fmt,
                                  const struct openai_usage *usage, struct buf *body,
                                  struct buf *metadata);

/* The bytes of s as a JSON array of numbers ([104,105]): logprobs' "bytes". */
void openai_put_bytes(struct buf *out, const char *s, size_t len);

/* v as Python writes a float: the shortest digits that read back as v (as the float32 (float)v
 * when as_float32), always with a '.' or exponent; a non-finite value (JSON has none) as 0.0. */
void openai_put_repr_float(struct buf *out, double v, int as_float32);

/* An embedding component as /v1/embeddings writes it: the shortest digits that read back as the
 * same float32, always with a '.' or exponent; a non-finite value (JSON has none) as 0.0. */
void openai_put_embed_float(struct buf *out, float f);

/* len bytes as standard base64 with '=' padding (encoding_format "base64"). */
void openai_put_base64(struct buf *out, const uint8_t *bytes, size_t len);

/* Bytes per value of dtype (4, 2 or 1). */
size_t openai_embed_dtype_size(enum openai_embed_dtype dtype);

/* v's n floats in fmt's dtype and byte order into out (n × openai_embed_dtype_size bytes), each
 * converted as torch's Tensor.to rounds on the CPU: float16 and bfloat16 to nearest even (float16
 * overflows to infinity, a NaN is 0x7e00 / 0x7fc0), float8_e4m3fn and float8_e5m2 by c10's
 * fp8e4m3fn_from_fp32_value / fp8e5m2_from_fp32_value (e4m3fn: 480 and above become NaN 0x7f). */
void openai_embed_encode(const float *v, size_t n, const struct openai_embed_format *fmt,
                         uint8_t *out);

/* SSE framing: "data: <json>\n\n" and "data: [DONE]\n\n". */
int openai_sse_data(struct buf *out, const char *json, size_t len);
int openai_sse_done(struct buf *out);

/* /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"vllm",
 * "root","parent":null,"max_model_len","permission":[...]}]}, then one card per LoRA adapter
 * (lora_names[i], root lora_roots[i], parent id, max_model_len null), as vLLM lists them */
int openai_build_models(const char *id, const char *root, int64_t created, int64_t max_model_len,
                        const char *const *lora_names, const char *const *lora_roots,
                        size_t n_loras, struct buf *out);

/* /tokenize answer: {"count","max_model_len","tokens":[...],"token_strs": [...] | null}.
 * token_strs NULL → null; else n strings (lengths in token_str_lens; NULL lens → strlen). */
int openai_build_tokenize(const int32_t *tokens, size_t n, int64_t max_model_len,
                          const char *const *token_strs, const size_t *token_str_lens,
                          struct buf *out);

/* /detokenize answer: {"prompt": text}. */
int openai_build_detokenize(const char *text, size_t len, struct buf *out);

/* Appends text as a JSON string literal (quotes included); invalid UTF-8 → U+FFFD. */
int openai_json_string(struct buf *out, const char *text, size_t len);

/* The characters of text as openai_json_string writes it (code points, an invalid byte one
 * U+FFFD): Python's len() of the string, which vLLM's text offsets count. */
size_t openai_text_chars(const char *text, size_t len);

#endif /* TANDEM_ENGINE_SERVER_OPENAI_H */
