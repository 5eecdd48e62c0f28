/*
 * Tool-call parsers: vLLM's --tool-call-parser hermes, llama3_json and mistral, which turn the
 * generated text of a chat completion into OpenAI "tool_calls". Each is reproduced from vLLM's
 * sources (vllm/tool_parsers/{hermes,llama,mistral}_tool_parser.py and the serving layer around
 * them, vllm/entrypoints/openai/engine/serving.py: _parse_tool_calls_from_content):
 *
 *   hermes       <tool_call>{"name": ..., "arguments": ...}</tool_call>, any number of blocks (a
 *                last block may lack its end tag); the text before the first block is content,
 *                text between and after blocks is dropped.
 *   llama3_json  one or more JSON objects {"name": ..., "parameters"|"arguments": ...} anywhere in
 *                the text (usually "<|python_tag|>{...}; {...}"); every '{' that is not inside an
 *                object already parsed must start one, or nothing is a call; content is null.
 *   mistral      content[TOOL_CALLS][{"name": ..., "arguments": ...}, ...] when the tokenizer has
 *                no "[ARGS]" token; content[TOOL_CALLS]name[ARGS]{...}[TOOL_CALLS]name{...} (raw
 *                argument text, up to the next [TOOL_CALLS]) when it has one.
 *
 * Arguments are re-serialized as Python's json.dumps(value, ensure_ascii=False) writes them:
 * ", " and ": " separators, floats as repr() ("1e+16", "100000.0", "NaN", "Infinity"), integers
 * as written, a repeated key keeping its first place and its last value, non-ASCII as UTF-8, and
 * an argument given as a JSON string stays a string (vLLM main no longer decodes it). The JSON is
 * read as Python's json.loads reads it (NaN/Infinity accepted, raw control characters in strings
 * refused, integers of more than 4300 digits refused, lone surrogates kept).
 *
 * When the text is not tool calls (no marker, bad JSON, a call without a string "name" or without
 * arguments), the result is the whole text as content and no calls, as vLLM returns it.
 * Deviations, where vLLM answers with an HTTP error instead: mistral's JSON-array form with two
 * [TOOL_CALLS] markers, or whose array holds something other than calls, is content here. A lone
 * surrogate (from a "\ud800" escape) is written back as that escape.
 *
 * Ownership: results and deltas own their strings; free them with tool_result_free and
 * tool_delta_free. A stream is one choice's state; nothing here is thread-safe or does I/O.
 */
#ifndef TANDEM_ENGINE_SERVER_TOOL_PARSER_H
#define TANDEM_ENGINE_SERVER_TOOL_PARSER_H

#include <stddef.h>

#include "lib/buf.h"

#define TOOL_CALL_ID_MAX    46                 /* "chatcmpl-tool-" + 32 hex digits */
#define TOOL_TEXT_MAX       ((size_t)64 << 20) /* longest text a parser takes */
#define TOOL_JSON_MAX_DEPTH 512                /* deeper JSON is refused (Python recurses) */

enum tool_parser_kind {
    TOOL_PARSER_NONE,        /* no parsing: all text is content */
    TOOL_PARSER_HERMES,      /* "hermes" (Qwen 2.5/3, Hermes 2 Pro) */
    TOOL_PARSER_LLAMA3_JSON, /* "llama3_json" (also "llama4_json", the same parser in vLLM) */
    TOOL_PARSER_MISTRAL,     /* "mistral" */
};

/* The kind for a --tool-call-parser name; -EINVAL for an unknown name (*out untouched). */
int tool_parser_kind_from_name(const char *name, enum tool_parser_kind *out);

/* Writes a new call id into out (TOOL_CALL_ID_MAX + 1 bytes, NUL-terminated). */
typedef void (*tool_id_fn)(void *ctx, enum tool_parser_kind kind, char *out);

/* A parser's configuration; plain data, copied by tool_stream_new. */
struct tool_parser {
    enum tool_parser_kind kind;
    int mistral_args_token; /* mistral: the tokenizer's vocabulary has "[ARGS]" (vLLM's test for
                               the name{args} form); 0: the JSON-array form */
    tool_id_fn make_id;     /* NULL: random ids, "chatcmpl-tool-" + 32 lowercase hex digits
                               (uuid4().hex) for hermes and llama3_json, 9 characters of
                               [a-zA-Z0-9] for mistral (mistral-common's rule) */
    void *make_id_ctx;
};

/* kind with everything else off (random ids, mistral's JSON-array form). */
void tool_parser_init(struct tool_parser *p, enum tool_parser_kind kind);

/* One complete call. name and arguments are NUL-terminated and may hold NULs of their own (a
 * "\u0000" in the name, raw text in mistral's name{args} form): use the lengths. */
struct tool_call {
    char id[TOOL_CALL_ID_MAX + 1];
    char *name;
    size_t name_len;
    char *arguments; /* JSON text of the arguments (see the file comment) */
    size_t arguments_len;
};

/* What a whole output parses into: the chat message's content and tool_calls. */
struct tool_result {
    int tools_called;        /* vLLM's tools_called: the text was taken as tool-call output
                                (mistral can say so with no calls) */
    struct tool_call *calls; /* n_calls of them, in order; NULL when none */
    size_t n_calls;
    char *content; /* NUL-terminated; NULL means JSON null */
    size_t content_len;
};

/*
 * Whole-output extraction (non-streamed responses), as vLLM's serving layer does it with
 * tool_choice "auto": content is the text before the calls, or NULL when that is empty or only
 * whitespace (Python's str.isspace) or, for llama3_json, always; when the text is not tool calls
 * tools_called is 0, n_calls 0 and content the whole text. out is always initialised, also on
 * failure (then empty). 0, or -ENOMEM, or -E2BIG (len > TOOL_TEXT_MAX), -EINVAL (NULL text with
 * len > 0); err then says what.
 */
int tool_parse_complete(const struct tool_parser *p, const char *text, size_t len,
                        struct tool_result *out, char *err, size_t errlen);

/* Frees what r owns and empties it; r may be empty. */
void tool_result_free(struct tool_result *r);

/* tool_choice "required": the output is the grammar's JSON array of {"name", "parameters"};
 * each element becomes a call whose arguments are json.dumps(parameters) (vLLM's serving code),
 * with p's ids (hermes-style when p->kind is TOOL_PARSER_NONE), and content "". Output that is
 * not such an array (cut off by max_tokens) is returned as content with no calls. 0, -E2BIG,
 * -ENOMEM. */
int tool_parse_required(const struct tool_parser *p, const char *text, size_t len,
                        struct tool_result *out);

/* Appends calls as the message's "tool_calls" array:
 * [{"id":...,"type":"function","function":{"name":...,"arguments":"..."}},...]. 0 or the
 * buffer's sticky failure. */
int tool_calls_json(const struct tool_call *calls, size_t n, struct buf *out);

/* ---- streaming ---- */

/* One tool-call entry of a streamed delta: the call's first entry carries id and name (name !=
 * NULL, arguments empty), later ones an arguments fragment (name == NULL, id ""). */
struct tool_delta_call {
    size_t index; /* the call's position in the choice's tool_calls, from 0 */
    char id[TOOL_CALL_ID_MAX + 1];
    char *name; /* NUL-terminated, name_len bytes; NULL in fragment entries */
    size_t name_len;
    struct buf arguments; /* fragment entries: the text to append to the call's arguments */
};

/* What one feed (or the finish) produced: content text first, then tool-call entries (content
 * never follows a call in a stream). The caller owns it and empties it between chunks. */
struct tool_delta {
    struct buf content; /* content text to stream (len 0: none) */
    struct tool_delta_call *calls;
    size_t n_calls;
    size_t cap;
};

void tool_delta_init(struct tool_delta *d);
/* Empties d (content and entries), keeping it ready for the next feed. */
void tool_delta_reset(struct tool_delta *d);
void tool_delta_free(struct tool_delta *d);

/* Appends d's entries as a delta's "tool_calls" array, with vLLM's field order:
 * [{"id":...,"type":"function","index":0,"function":{"name":...}},
 *  {"index":0,"function":{"arguments":"..."}}]. 0 or the buffer's sticky failure. */
int tool_delta_json(const struct tool_delta *d, struct buf *out);

/*
 * A streaming parser for one choice, fed the text deltas as they are detokenized. Content is
 * streamed as it comes except the text that could still be the start of a tool-call marker
 * (e.g. a trailing "<tool_"), which is held until decided, so no marker text leaks into content.
 * A call is streamed as its first entry (id and name) as soon as its name and its arguments key
 * have been read (mistral, where arguments are optional: or its object closed), then its
 * arguments as fragments in json.dumps form, as the JSON arrives. The concatenated fragments equal
 * tool_parse_complete's arguments, the calls' order and names are the same, and the content is the
 * same (the whitespace that tool_parse_complete turns into null excepted), for any split of the
 * text into deltas; with these exceptions:
 *  - llama3_json streams text that does not start with "<|python_tag|>" or '{' as content (as
 *    vLLM does), though tool_parse_complete may find calls in it;
 *  - a call seen whole is kept: if later text shows the output was not tool calls after all
 *    (tool_parse_complete returns it all as content), calls already streamed stay, the rest of
 *    the text is dropped (hermes: up to the next block); until the first call is streamed,
 *    everything is held and, on such a failure, streamed as content;
 *  - a repeated key (Python keeps its last value) cannot be taken back once streamed:
 *    tool_stream_exact then says 0;
 *  - mistral's JSON-array form with junk before the array (vLLM's regex fallback) is decided at
 *    the finish, and its calls come then.
 */
struct tool_stream;

/* A new stream with p's configuration. 0, -ENOMEM or -EINVAL (NULL argument). */
int tool_stream_new(const struct tool_parser *p, struct tool_stream **out);
void tool_stream_free(struct tool_stream *s);

/* Feeds the next len bytes of generated text; appends what they release to d. 0, -ENOMEM,
 * -ENOSPC (more than TOOL_TEXT_MAX held), or -EINVAL after the finish. After an error the
 * stream only returns that error. */
int tool_stream_feed(struct tool_stream *s, const char *text, size_t len, struct tool_delta *d);

/* The end of the text: decides what is held and appends it to d. Further feeds are -EINVAL. */
int tool_stream_finish(struct tool_stream *s, struct tool_delta *d);

/* Calls streamed so far (a choice whose stream has any finishes with "tool_calls"). */
size_t tool_stream_calls(const struct tool_stream *s);

/* 1 while what was streamed is what tool_parse_complete gives for the same text, as far as the
 * stream can tell; 0 once a repeated key or a replaced argument made it differ. */
int tool_stream_exact(const struct tool_stream *s);

#endif /* TANDEM_ENGINE_SERVER_TOOL_PARSER_H */
