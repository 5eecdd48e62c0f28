/*
 * The response half of the OpenAI protocol layer (see openai.h): full bodies, streaming chunks,
 * SSE framing, /v1/models, /tokenize, /detokenize and error bodies written as JSON straight into
 * a struct buf, with vLLM's field names. The request half is openai_parse.c.
 *
 * The writers append without checking each call: struct buf's failure is sticky (lib/buf.h), so
 * the first append past the cap (or out of memory) refuses every later one, and each public
 * builder returns buf_error once at the end. A failed body is a prefix of the whole one, never a
 * body with a hole in it.
 */
#include "engine/server/openai.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lib/common.h"
#include "lib/http_server.h"
#include "lib/json.h"

/* ---- errors ---- */

int openai_error_body(const struct openai_error *err, struct buf *out)
{
    return http_error_body(out, err->status, err->type, err->message,
                           err->param[0] ? err->param : NULL);
}

/* ---- JSON writing ---- */

/* buf_error(out), and on failure out cut back to old bytes: a string or frame is all or nothing. */
static int undo_on_error(struct buf *out, size_t old)
{
    int rc = buf_error(out);
    if (rc != 0 && out->data) {
        out->len = old;
        out->data[old] = '\0';
    }
    return rc;
}

int openai_json_string(struct buf *out, const char *text, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)text;
    size_t old = out->len;
    buf_append(out, "\"", 1);
    size_t i = 0, run = 0; /* run: start of pending bytes copied as they are */
    while (i < len) {
        unsigned char c = p[i];
        const char *esc = NULL;
        char u[7];
        size_t adv = 1;
        if (c == '"') {
            esc = "\\\"";
        } else if (c == '\\') {
            esc = "\\\\";
        } else if (c == '\n') {
            esc = "\\n";
        } else if (c == '\r') {
            esc = "\\r";
        } else if (c == '\t') {
            esc = "\\t";
        } else if (c == '\b') {
            esc = "\\b";
        } else if (c == '\f') {
            esc = "\\f";
        } else if (c < 0x20 || c == 0x7f) {
            u[0] = '\\';
            u[1] = 'u';
            u[2] = '0';
            u[3] = '0';
            u[4] = hex[c >> 4];
            u[5] = hex[c & 15];
            u[6] = '\0';
            esc = u;
        } else if (c >= 0x80) {
            adv = tandem_utf8_seq_len(p + i, len - i);
            if (adv == 0) {
                esc = "\xef\xbf\xbd"; /* U+FFFD for one invalid byte */
                adv = 1;
            }
        }
        if (esc) {
            buf_append(out, p + run, i - run);
            buf_appends(out, esc);
            run = i + adv;
        }
        i += adv;
    }
    if (len > run) {
        buf_append(out, p + run, len - run);
    }
    buf_append(out, "\"", 1);
    return undo_on_error(out, old);
}

size_t openai_text_chars(const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        const size_t adv = tandem_utf8_seq_len(p + i, len - i);
        i += adv ? adv : 1;
    }
    return n;
}

static void json_cstr(struct buf *out, const char *s)
{
    if (!s) {
        buf_appends(out, "null");
        return;
    }
    openai_json_string(out, s, strlen(s));
}

/* A float as JSON: finite, always with a '.' or exponent (vLLM writes -9999.0 for -inf). */
static void json_float(struct buf *out, double v)
{
    if (isnan(v) || v < SAMPLER_LOGPROB_FLOOR) {
        v = SAMPLER_LOGPROB_FLOOR;
    } else if (isinf(v)) {
        v = 1e308;
    }
    char tmp[40];
    float f = (float)v;
    /* the shortest form that reads back as the same float (values are floats: logprobs) */
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtof(tmp, NULL) == f) {
            break;
        }
    }
    if (!strpbrk(tmp, ".eE")) {
        size_t n = strlen(tmp);
        snprintf(tmp + n, sizeof(tmp) - n, ".0");
    }
    buf_appends(out, tmp);
}

/* ---- response building ---- */

void openai_make_id(char *out, size_t size, const char *prefix)
{
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
        for (size_t i = 0; i < sizeof(rnd); i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            rnd[i] = (unsigned char)(x >> 56);
        }
    }
    size_t pl = strlen(prefix);
    if (size < pl + 33) {
        if (size) {
            out[0] = '\0';
        }
        return;
    }
    memcpy(out, prefix, pl);
    for (size_t i = 0; i < sizeof(rnd); i++) {
        snprintf(out + pl + 2 * i, 3, "%02x", rnd[i]);
    }
}

static const char *finish_str(enum openai_finish f)
{
    switch (f) {
    case OPENAI_FINISH_STOP:
        return "\"stop\"";
    case OPENAI_FINISH_LENGTH:
        return "\"length\"";
    case OPENAI_FINISH_ABORT:
        return "\"abort\"";
    case OPENAI_FINISH_TOOL_CALLS:
        return "\"tool_calls\"";
    case OPENAI_FINISH_REPETITION:
        return "\"repetition\"";
    case OPENAI_FINISH_NONE:
    default:
        return "null";
    }
}

static void put_finish(struct buf *out, const struct openai_choice *c)
{
    buf_appendf(out, "\"finish_reason\":%s,\"stop_reason\":", finish_str(c->finish));
    if (c->finish == OPENAI_FINISH_REPETITION) {
        buf_appends(out, "\"repetition_detected\""); /* vLLM's check_stop */
    } else if (c->stop_str) {
        json_cstr(out, c->stop_str);
    } else if (c->has_stop_token) {
        buf_appendf(out, "%" PRId64, c->stop_token);
    } else {
        buf_appends(out, "null");
    }
}

static void put_head(struct buf *out, const struct openai_meta *meta, const char *object)
{
    buf_appends(out, "{\"id\":");
    json_cstr(out, meta->id ? meta->id : "");
    buf_appendf(out, ",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":", object,
                meta->created);
    json_cstr(out, meta->model ? meta->model : "");
}

static void put_usage(struct buf *out, const struct openai_usage *u)
{
    if (!u) {
        buf_appends(out, "null");
        return;
    }
    buf_appendf(out,
                "{\"prompt_tokens\":%" PRId64 ",\"total_tokens\":%" PRId64
                ",\"completion_tokens\":%" PRId64 ",\"prompt_tokens_details\":",
                u->prompt_tokens, u->prompt_tokens + u->completion_tokens, u->completion_tokens);
    if (u->cached_tokens > 0) {
        buf_appendf(out, "{\"cached_tokens\":%" PRId64 "}}", u->cached_tokens);
    } else {
        buf_appends(out, "null}");
    }
}

/* ,"kv_transfer_params": the object or null (json_to_buf's own failures are sticky too). */
static void put_kv_params(struct buf *out, const struct openai_meta *meta)
{
    buf_appends(out, ",\"kv_transfer_params\":");
    if (!meta->kv_transfer_params) {
        buf_appends(out, "null");
        return;
    }
    json_to_buf(meta->kv_transfer_params, 0, out);
}

/* ,"prompt_text": the rendered chat prompt (return_prompt_text), or nothing. */
static void put_prompt_text(struct buf *out, const struct openai_meta *meta)
{
    if (meta->prompt_text) {
        buf_appends(out, ",\"prompt_text\":");
        openai_json_string(out, meta->prompt_text, meta->prompt_text_len);
    }
}

/* [id,...] */
static void put_ids(struct buf *out, const int32_t *ids, size_t n)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < n; i++) {
        buf_appendf(out, "%s%" PRId32, i ? "," : "", ids[i]);
    }
    buf_appends(out, "]");
}

/* A token as logprobs name it: its text, or "token_id:{id}" with return_tokens_as_token_ids
 * (vLLM's format_token_id_placeholder). *name_len gets the name's length in bytes. */
static void put_token_name(struct buf *out, int as_ids, int32_t token, const char *text, size_t len,
                           size_t *name_len)
{
    if (as_ids) {
        char name[32];
        int n = snprintf(name, sizeof name, "token_id:%" PRId32, token);
        buf_appendf(out, "\"%s\"", name);
        *name_len = n > 0 ? (size_t)n : 0;
    } else {
        openai_json_string(out, text, len);
        *name_len = len;
    }
}

/* The length of a token's name in characters: "token_id:{id}" with as_ids, else its text. */
static size_t name_chars(int as_ids, int32_t token, const char *text, size_t len)
{
    if (as_ids) {
        char name[32];
        int n = snprintf(name, sizeof name, "token_id:%" PRId32, token);
        return n > 0 ? (size_t)n : 0;
    }
    return openai_text_chars(text, len);
}

/* Entry k of a completions top_logprobs dict before the merge by name (vLLM's dict keyed by id:
 * the token first, then its top entries without the token's id; a top entry with that id gives
 * the token's value). 0 past the end. */
static int top_entry(const struct openai_token_logprob *t, size_t k, int32_t *id, const char **s,
                     size_t *sl, float *lp)
{
    if (k == 0) {
        *id = t->token;
        *s = t->text;
        *sl = t->text_len;
        *lp = t->logprob;
        for (size_t j = 0; j < t->n_top; j++) {
            if (t->top[j].token == t->token) {
                *lp = t->top[j].logprob;
                break;
            }
        }
        return 1;
    }
    for (size_t j = 0; j < t->n_top; j++) {
        if (t->top[j].token != t->token && --k == 0) {
            *id = t->top[j].token;
            *s = t->top[j].text;
            *sl = t->top[j].text_len;
            *lp = t->top[j].logprob;
            return 1;
        }
    }
    return 0;
}

static int same_name(int as_ids, int32_t a_id, const char *a, size_t al, int32_t b_id,
                     const char *b, size_t bl)
{
    return as_ids ? a_id == b_id : al == bl && (al == 0 || memcmp(a, b, al) == 0);
}

/* One top_logprobs dict: the entries keyed by name; a name met again keeps its first place and
 * takes the later value (a Python dict built in order). */
static void put_top_dict(struct buf *out, const struct openai_token_logprob *t, int as_ids)
{
    int32_t id, id2;
    const char *s, *s2;
    size_t sl, sl2, name_len;
    float lp, lp2;
    buf_appends(out, "{");
    size_t written = 0;
    for (size_t k = 0; top_entry(t, k, &id, &s, &sl, &lp); k++) {
        int seen = 0;
        for (size_t e = 0; e < k && !seen; e++) {
            top_entry(t, e, &id2, &s2, &sl2, &lp2);
            seen = same_name(as_ids, id, s, sl, id2, s2, sl2);
        }
        if (seen) {
            continue;
        }
        float value = lp;
        for (size_t e = k + 1; top_entry(t, e, &id2, &s2, &sl2, &lp2); e++) {
            if (same_name(as_ids, id, s, sl, id2, s2, sl2)) {
                value = lp2;
            }
        }
        buf_appends(out, written++ ? "," : "");
        put_token_name(out, as_ids, id, s, sl, &name_len);
        buf_appends(out, ":");
        json_float(out, value);
    }
    buf_appends(out, "}");
}

/* Completions logprobs: {"text_offset","token_logprobs","tokens","top_logprobs"}, as vLLM's
 * _create_completion_logprobs: the offsets advance by each token's name in characters
 * ("token_id:{id}" with as_ids); an echoed prompt's first token has null logprob and dict. */
static void put_completion_logprobs(struct buf *out, const struct openai_choice *c, int as_ids)
{
    if (!c->logprobs) {
        buf_appends(out, "null");
        return;
    }
    size_t name_len;
    buf_appends(out, "{\"text_offset\":[");
    size_t off = c->text_offset;
    for (size_t i = 0; i < c->n_logprobs; i++) {
        const struct openai_token_logprob *t = &c->logprobs[i];
        buf_appendf(out, "%s%zu", i ? "," : "", off);
        off += name_chars(as_ids, t->token, t->text, t->text_len);
    }
    buf_appends(out, "],\"token_logprobs\":[");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        int32_t id;
        const char *s;
        size_t sl;
        float lp;
        buf_appends(out, i ? "," : "");
        if (c->logprobs[i].no_logprob) {
            buf_appends(out, "null");
        } else {
            top_entry(&c->logprobs[i], 0, &id, &s, &sl, &lp); /* the dict's value, as vLLM */
            json_float(out, lp);
        }
    }
    buf_appends(out, "],\"tokens\":[");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        buf_appends(out, i ? "," : "");
        put_token_name(out, as_ids, c->logprobs[i].token, c->logprobs[i].text,
                       c->logprobs[i].text_len, &name_len);
    }
    buf_appends(out, "],\"top_logprobs\":[");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        buf_appends(out, i ? "," : "");
        if (c->logprobs[i].no_logprob) {
            buf_appends(out, "null");
        } else {
            put_top_dict(out, &c->logprobs[i], as_ids);
        }
    }
    buf_appends(out, "]}");
}

/* "<id>":{"logprob","rank","decoded_token"} */
static void put_prompt_logprob_entry(struct buf *out, bool comma, int32_t token, float logprob,
                                     int32_t rank, const char *text, size_t len)
{
    buf_appendf(out, "%s\"%" PRId32 "\":{\"logprob\":", comma ? "," : "", token);
    json_float(out, logprob);
    buf_appendf(out, ",\"rank\":%" PRId32 ",\"decoded_token\":", rank);
    openai_json_string(out, text ? text : "", text ? len : 0);
    buf_appends(out, "}");
}

/* vLLM's prompt_logprobs: [null, {id: Logprob, ...} per later position], each dict built as
 * vLLM's _make_logprob_dict (the prompt's token, then the top tokens; the token found among the
 * tops takes that entry's value, in the first place). NULL → null. */
static void put_prompt_logprobs(struct buf *out, const struct openai_prompt_logprobs *plp)
{
    if (!plp) {
        buf_appends(out, "null");
        return;
    }
    buf_appends(out, "[null");
    for (size_t i = 0; i < plp->n; i++) {
        const struct openai_prompt_logprob *p = &plp->pos[i];
        float lp = p->logprob;
        int32_t rank = p->rank;
        for (size_t j = 0; j < p->n_top; j++) {
            if (p->top[j].token == p->token) {
                lp = p->top[j].logprob;
                rank = (int32_t)j + 1;
                break;
            }
        }
        buf_appends(out, ",{");
        put_prompt_logprob_entry(out, false, p->token, lp, rank, p->text, p->text_len);
        for (size_t j = 0; j < p->n_top; j++) {
            const struct openai_top_logprob *t = &p->top[j];
            if (t->token != p->token) {
                put_prompt_logprob_entry(out, true, t->token, t->logprob, (int32_t)j + 1, t->text,
                                         t->text_len);
            }
        }
        buf_appends(out, "}");
    }
    buf_appends(out, "]");
}

void openai_put_bytes(struct buf *out, const char *s, size_t len)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < len; i++) {
        buf_appendf(out, "%s%u", i ? "," : "", (unsigned)(unsigned char)s[i]);
    }
    buf_appends(out, "]");
}

/* One {"token","logprob","bytes"} entry (without the closing brace). With as_ids the token is
 * "token_id:{id}" and bytes are the name's when name_bytes, else the token text's: vLLM gives a
 * sampled token the bytes of its text and a top entry the bytes of its name. */
static void put_chat_token(struct buf *out, int as_ids, int name_bytes, int32_t token,
                           const char *s, size_t len, float lp)
{
    size_t name_len;
    buf_appends(out, "{\"token\":");
    put_token_name(out, as_ids, token, s, len, &name_len);
    buf_appends(out, ",\"logprob\":");
    json_float(out, lp);
    buf_appends(out, ",\"bytes\":");
    if (as_ids && name_bytes) {
        char name[32];
        snprintf(name, sizeof name, "token_id:%" PRId32, token);
        openai_put_bytes(out, name, strlen(name));
    } else {
        openai_put_bytes(out, s, len);
    }
}

/* Chat logprobs: {"content":[{token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}]} */
static void put_chat_logprobs(struct buf *out, const struct openai_choice *c, int as_ids)
{
    if (!c->logprobs) {
        buf_appends(out, "null");
        return;
    }
    buf_appends(out, "{\"content\":[");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        const struct openai_token_logprob *t = &c->logprobs[i];
        buf_appends(out, i ? "," : "");
        put_chat_token(out, as_ids, 0, t->token, t->text, t->text_len, t->logprob);
        buf_appends(out, ",\"top_logprobs\":[");
        for (size_t j = 0; j < t->n_top; j++) {
            buf_appends(out, j ? "," : "");
            put_chat_token(out, as_ids, 1, t->top[j].token, t->top[j].text, t->top[j].text_len,
                           t->top[j].logprob);
            buf_appends(out, "}");
        }
        buf_appends(out, "]}");
    }
    buf_appends(out, "]}");
}

static void put_text(struct buf *out, const struct openai_choice *c)
{
    openai_json_string(out, c->text ? c->text : "", c->text ? c->text_len : 0);
}

/* One completions choice: {"index","text","logprobs","finish_reason","stop_reason"}, then for a
 * full body "prompt_logprobs" (vLLM's CompletionResponseChoice: "token_ids" before it and
 * "prompt_token_ids" after it with return_token_ids), for a chunk nothing more (vLLM's
 * CompletionResponseStreamChoice: "prompt_token_ids" then "token_ids"). */
static void put_completion_choice(struct buf *out, const struct openai_meta *meta,
                                  const struct openai_choice *c, bool comma, bool full)
{
    buf_appendf(out, "%s{\"index\":%d,\"text\":", comma ? "," : "", c->index);
    put_text(out, c);
    buf_appends(out, ",\"logprobs\":");
    put_completion_logprobs(out, c, meta->tokens_as_ids);
    buf_appends(out, ",");
    put_finish(out, c);
    if (meta->return_token_ids) {
        if (full) {
            buf_appends(out, ",\"token_ids\":");
            put_ids(out, c->token_ids, c->n_token_ids);
        }
        if (full) {
            buf_appends(out, ",\"prompt_logprobs\":");
            put_prompt_logprobs(out, c->prompt_logprobs);
        }
        buf_appends(out, ",\"prompt_token_ids\":");
        if (c->prompt_token_ids || full) {
            put_ids(out, c->prompt_token_ids, c->n_prompt_token_ids);
        } else {
            buf_appends(out, "null");
        }
        if (!full) {
            buf_appends(out, ",\"token_ids\":");
            put_ids(out, c->token_ids, c->n_token_ids);
        }
    } else if (full) {
        buf_appends(out, ",\"prompt_logprobs\":");
        put_prompt_logprobs(out, c->prompt_logprobs);
    }
    buf_appends(out, "}");
}

int openai_build_completion(const struct openai_meta *meta, const struct openai_choice *choices,
                            size_t n_choices, const struct openai_usage *usage, struct buf *out)
{
    put_head(out, meta, "text_completion");
    buf_appends(out, ",\"choices\":[");
    for (size_t i = 0; i < n_choices; i++) {
        put_completion_choice(out, meta, &choices[i], i > 0, true);
    }
    buf_appends(out, "],\"usage\":");
    put_usage(out, usage);
    put_kv_params(out, meta);
    buf_appends(out, "}");
    return buf_error(out);
}

int openai_build_chat(const struct openai_meta *meta, const struct openai_choice *choices,
                      size_t n_choices, const struct openai_usage *usage, struct buf *out)
{
    put_head(out, meta, "chat.completion");
    buf_appends(out, ",\"choices\":[");
    for (size_t i = 0; i < n_choices; i++) {
        const struct openai_choice *c = &choices[i];
        buf_appendf(out, "%s{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":",
                    i ? "," : "", c->index);
        if (c->content_null) {
            buf_appends(out, "null");
        } else {
            put_text(out, c);
        }
        buf_appends(out, ",\"reasoning_content\":null,\"tool_calls\":");
        if (c->tool_calls_json) {
            buf_append(out, c->tool_calls_json, c->tool_calls_json_len);
        } else {
            buf_appends(out, "[]");
        }
        buf_appends(out, "},\"logprobs\":");
        put_chat_logprobs(out, c, meta->tokens_as_ids);
        buf_appends(out, ",");
        put_finish(out, c);
        if (meta->return_token_ids) {
            buf_appends(out, ",\"token_ids\":");
            put_ids(out, c->token_ids, c->n_token_ids);
        }
        buf_appends(out, "}");
    }
    buf_appends(out, "],\"usage\":");
    put_usage(out, usage);
    buf_appends(out, ",\"prompt_logprobs\":");
    put_prompt_logprobs(out, meta->prompt_logprobs);
    if (meta->return_token_ids) { /* vLLM's ChatCompletionResponse: response level */
        buf_appends(out, ",\"prompt_token_ids\":");
        put_ids(out, meta->prompt_token_ids, meta->n_prompt_token_ids);
    }
    put_prompt_text(out, meta);
    put_kv_params(out, meta);
    buf_appends(out, "}");
    return buf_error(out);
}

/* ,"usage":{...} of a chunk (continuous usage stats); nothing when usage is NULL. */
static void put_chunk_usage(struct buf *out, const struct openai_usage *usage)
{
    if (usage) {
        buf_appends(out, ",\"usage\":");
        put_usage(out, usage);
    }
}

int openai_build_completion_chunk(const struct openai_meta *meta,
                                  const struct openai_choice *choices, size_t n_choices,
                                  const struct openai_usage *usage, struct buf *out)
{
    put_head(out, meta, "text_completion");
    buf_appends(out, ",\"choices\":[");
    for (size_t i = 0; i < n_choices; i++) {
        put_completion_choice(out, meta, &choices[i], i > 0, false);
    }
    buf_appends(out, "]");
    put_chunk_usage(out, usage);
    buf_appends(out, "}");
    return buf_error(out);
}

int openai_build_chat_chunk(const struct openai_meta *meta, const struct openai_choice *choices,
                            size_t n_choices, int first, const struct openai_usage *usage,
                            struct buf *out)
{
    put_head(out, meta, "chat.completion.chunk");
    buf_appends(out, ",\"choices\":[");
    for (size_t i = 0; i < n_choices; i++) {
        const struct openai_choice *c = &choices[i];
        buf_appendf(out, "%s{\"index\":%d,\"delta\":", i ? "," : "", c->index);
        if (first) {
            buf_appends(out, "{\"role\":\"assistant\",\"content\":");
            put_text(out, c);
            buf_appends(out, "}");
        } else if (c->tool_calls_json) {
            /* vLLM's DeltaMessage with exclude_unset: content only when there is some */
            buf_appends(out, "{");
            if (c->text_len > 0) {
                buf_appends(out, "\"content\":");
                put_text(out, c);
                buf_appends(out, ",");
            }
            buf_appends(out, "\"tool_calls\":");
            buf_append(out, c->tool_calls_json, c->tool_calls_json_len);
            buf_appends(out, "}");
        } else if ((c->text_len == 0 && c->finish != OPENAI_FINISH_NONE) || c->delta_empty) {
            buf_appends(out, "{}");
        } else {
            buf_appends(out, "{\"content\":");
            put_text(out, c);
            buf_appends(out, "}");
        }
        buf_appends(out, ",\"logprobs\":");
        put_chat_logprobs(out, c, meta->tokens_as_ids);
        buf_appends(out, ",");
        put_finish(out, c);
        if (meta->return_token_ids && !first) { /* vLLM's role chunk carries none */
            buf_appends(out, ",\"token_ids\":");
            put_ids(out, c->token_ids, c->n_token_ids);
        }
        buf_appends(out, "}");
    }
    buf_appends(out, "]");
    put_chunk_usage(out, usage);
    if (meta->return_token_ids && first) { /* vLLM: the prompt's ids with the role, at the end */
        buf_appends(out, ",\"prompt_token_ids\":");
        put_ids(out, meta->prompt_token_ids, meta->n_prompt_token_ids);
    }
    if (first) {
        put_prompt_text(out, meta);
    }
    buf_appends(out, "}");
    return buf_error(out);
}

int openai_build_usage_chunk(const struct openai_meta *meta, enum openai_kind kind,
                             const struct openai_usage *usage, struct buf *out)
{
    put_head(out, meta, kind == OPENAI_CHAT ? "chat.completion.chunk" : "text_completion");
    buf_appends(out, ",\"choices\":[],\"usage\":");
    put_usage(out, usage);
    buf_appends(out, "}");
    return buf_error(out);
}

int openai_sse_data(struct buf *out, const char *json, size_t len)
{
    size_t old = out->len;
    buf_append(out, "data: ", 6);
    buf_append(out, json, len);
    buf_append(out, "\n\n", 2);
    return undo_on_error(out, old);
}

int openai_sse_done(struct buf *out)
{
    return buf_appends(out, "data: [DONE]\n\n");
}

/* One /v1/models card; parent NULL: null, max_model_len < 0: null. */
static void model_card(struct buf *out, const char *id, const char *root, const char *parent,
                       int64_t created, int64_t max_model_len)
{
    char perm_id[64];
    openai_make_id(perm_id, sizeof(perm_id), "modelperm-");
    buf_appends(out, "{\"id\":");
    json_cstr(out, id);
    buf_appendf(
        out,
        ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":\"vllm\",\"root\":", created);
    json_cstr(out, root);
    buf_appends(out, ",\"parent\":");
    if (parent) {
        json_cstr(out, parent);
    } else {
        buf_appends(out, "null");
    }
    if (max_model_len >= 0) {
        buf_appendf(out, ",\"max_model_len\":%" PRId64, max_model_len);
    } else {
        buf_appends(out, ",\"max_model_len\":null");
    }
    buf_appendf(out,
                ",\"permission\":[{\"id\":\"%s\",\"object\":\"model_permission\","
                "\"created\":%" PRId64 ",\"allow_create_engine\":false,\"allow_sampling\":true,"
                "\"allow_logprobs\":true,\"allow_search_indices\":false,"
                "\"allow_view\":true,\"allow_fine_tuning\":false,\"organization\":\"*\","
                "\"group\":null,\"is_blocking\":false}]}",
                perm_id, created);
}

int openai_build_models(const char *id, const char *root, int64_t created, int64_t max_model_len,
                        const char *const *lora_names, const char *const *lora_roots,
                        size_t n_loras, struct buf *out)
{
    buf_appends(out, "{\"object\":\"list\",\"data\":[");
    model_card(out, id, root, NULL, created, max_model_len);
    for (size_t i = 0; i < n_loras; i++) {
        buf_appends(out, ",");
        model_card(out, lora_names[i], lora_roots[i], id, created, -1);
    }
    buf_appends(out, "]}");
    return buf_error(out);
}

int openai_build_tokenize(const int32_t *tokens, size_t n, int64_t max_model_len,
                          const char *const *token_strs, const size_t *token_str_lens,
                          struct buf *out)
{
    buf_appendf(out, "{\"count\":%zu,\"max_model_len\":%" PRId64 ",\"tokens\":[", n, max_model_len);
    for (size_t i = 0; i < n; i++) {
        buf_appendf(out, "%s%" PRId32, i ? "," : "", tokens[i]);
    }
    buf_appends(out, "],\"token_strs\":");
    if (!token_strs) {
        buf_appends(out, "null");
    } else {
        buf_appends(out, "[");
        for (size_t i = 0; i < n; i++) {
            const char *s = token_strs[i] ? token_strs[i] : "";
            size_t sl = token_str_lens ? token_str_lens[i] : strlen(s);
            buf_appends(out, i ? "," : "");
            openai_json_string(out, s, sl);
        }
        buf_appends(out, "]");
    }
    buf_appends(out, "}");
    return buf_error(out);
}

int openai_build_detokenize(const char *text, size_t len, struct buf *out)
{
    buf_appends(out, "{\"prompt\":");
    openai_json_string(out, text ? text : "", text ? len : 0);
    buf_appends(out, "}");
    return buf_error(out);
}

void openai_put_repr_float(struct buf *out, double v, int as_float32)
{
    char tmp[40];
    if (!isfinite(v)) {
        v = 0.0;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (as_float32 ? strtof(tmp, NULL) == (float)v : strtod(tmp, NULL) == v) {
            break;
        }
    }
    if (!strpbrk(tmp, ".eE")) {
        const size_t n = strlen(tmp);
        snprintf(tmp + n, sizeof tmp - n, ".0");
    }
    buf_appends(out, tmp);
}

void openai_put_embed_float(struct buf *out, float f)
{
    char tmp[40];
    if (!isfinite(f)) {
        f = 0.0f;
    }
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, (double)f);
        if (strtof(tmp, NULL) == f) {
            break;
        }
    }
    if (!strpbrk(tmp, ".eE")) {
        size_t n = strlen(tmp);
        snprintf(tmp + n, sizeof(tmp) - n, ".0");
    }
    buf_appends(out, tmp);
}

/* ---- embedding encodings (vLLM's tensor2binary: Tensor.to(dtype), then the bytes) ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16, round to nearest even; overflow → infinity, NaN → 0x7e00. */
static uint16_t f32_to_f16(float f)
{
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (a >= 0x477ff000u) { /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    /* below 2^-14: a subnormal half in 2^-24 units, nearest even; below 2^-25: zero */
    if (a < 0x38800000u) {
        if (a < 0x33000000u) {
            return sign;
        }
        /* the value in 2^-24 units is mant × 2^(exp - 126): shift the 24-bit mantissa right */
        const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        const int shift = 126 - (int)(a >> 23);
        const uint32_t q = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        const uint32_t r = q + (rem > halfway || (rem == halfway && (q & 1)));
        return (uint16_t)(sign | r);
    }
    /* normal: rebias the exponent, keep 10 mantissa bits, round to nearest even */
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

/* bfloat16: c10's round_to_nearest_even (NaN → 0x7fc0). */
static uint16_t f32_to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if (isnan(f)) {
        return 0x7fc0u;
    }
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float8_e4m3fn, c10's fp8e4m3fn_from_fp32_value: magnitudes from 480 (and inf, NaN) → 0x7f;
 * below 2^-6 rounded by a float add against 2^(141-127); else round to nearest even. */
static uint8_t f32_to_e4m3(float f)
{
    uint32_t u = f32_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint8_t r;
    if (u >= (1087u << 20)) {
        r = 0x7f;
    } else if (u < (121u << 23)) {
        const uint32_t denorm = 141u << 23;
        r = (uint8_t)(f32_bits(f32_of(u) + f32_of(denorm)) - denorm);
    } else {
        const uint32_t odd = (u >> 20) & 1u;
        u += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
        r = (uint8_t)(u >> 20);
    }
    return (uint8_t)(r | (sign >> 24));
}

/* float8_e5m2, c10's fp8e5m2_from_fp32_value: from 65536 → infinity 0x7c (NaN 0x7f); below
 * 2^-14 by a float add against 2^(134-127); else round to nearest even. */
static uint8_t f32_to_e5m2(float f)
{
    uint32_t u = f32_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint8_t r;
    if (u >= (143u << 23)) {
        r = u > 0x7f800000u ? 0x7f : 0x7c;
    } else if (u < (113u << 23)) {
        const uint32_t denorm = 134u << 23;
        r = (uint8_t)(f32_bits(f32_of(u) + f32_of(denorm)) - denorm);
    } else {
        const uint32_t odd = (u >> 21) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffffu + odd;
        r = (uint8_t)(u >> 21);
    }
    return (uint8_t)(r | (sign >> 24));
}

size_t openai_embed_dtype_size(enum openai_embed_dtype dtype)
{
    switch (dtype) {
    case OPENAI_DTYPE_FLOAT16:
    case OPENAI_DTYPE_BFLOAT16:
        return 2;
    case OPENAI_DTYPE_FP8_E4M3:
    case OPENAI_DTYPE_FP8_E5M2:
        return 1;
    case OPENAI_DTYPE_FLOAT32:
    default:
        return 4;
    }
}

void openai_embed_encode(const float *v, size_t n, const struct openai_embed_format *fmt,
                         uint8_t *out)
{
    const size_t size = openai_embed_dtype_size(fmt->dtype);
    const uint16_t probe = 1;
    uint8_t first;
    memcpy(&first, &probe, 1);
    const bool host_big = first == 0;
    const bool big =
        fmt->endian == OPENAI_ENDIAN_BIG || (fmt->endian == OPENAI_ENDIAN_NATIVE && host_big);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        switch (fmt->dtype) {
        case OPENAI_DTYPE_FLOAT16:
            bits = f32_to_f16(v[i]);
            break;
        case OPENAI_DTYPE_BFLOAT16:
            bits = f32_to_bf16(v[i]);
            break;
        case OPENAI_DTYPE_FP8_E4M3:
            bits = f32_to_e4m3(v[i]);
            break;
        case OPENAI_DTYPE_FP8_E5M2:
            bits = f32_to_e5m2(v[i]);
            break;
        case OPENAI_DTYPE_FLOAT32:
        default:
            bits = f32_bits(v[i]);
            break;
        }
        uint8_t *o = out + i * size;
        for (size_t b = 0; b < size; b++) {
            const size_t shift = 8 * (big ? size - 1 - b : b);
            o[b] = (uint8_t)(bits >> shift);
        }
    }
}

void openai_put_base64(struct buf *out, const uint8_t *bytes, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[4];
    for (size_t i = 0; i < len; i += 3) {
        const size_t got = len - i < 3 ? len - i : 3;
        const uint8_t c0 = bytes[i];
        const uint8_t c1 = got > 1 ? bytes[i + 1] : 0;
        const uint8_t c2 = got > 2 ? bytes[i + 2] : 0;
        quad[0] = tab[c0 >> 2];
        quad[1] = tab[((c0 & 3) << 4) | (c1 >> 4)];
        quad[2] = got > 1 ? tab[((c1 & 15) << 2) | (c2 >> 6)] : '=';
        quad[3] = got > 2 ? tab[c2 & 63] : '=';
        buf_append(out, quad, 4);
    }
}

int openai_build_embeddings_fmt(const struct openai_meta *meta, const float *const *vecs, size_t n,
                                int dims, const struct openai_embed_format *fmt,
                                const struct openai_usage *usage, struct buf *out)
{
    const size_t bytes = (size_t)(dims > 0 ? dims : 0) * openai_embed_dtype_size(fmt->dtype);
    uint8_t *enc = fmt->encoding == OPENAI_EMBED_FLOAT ? NULL : malloc(bytes ? bytes : 1);
    if (fmt->encoding != OPENAI_EMBED_FLOAT && !enc) {
        return -ENOMEM;
    }
    buf_appends(out, "{\"id\":");
    json_cstr(out, meta->id ? meta->id : "");
    buf_appendf(out, ",\"object\":\"list\",\"created\":%" PRId64 ",\"model\":", meta->created);
    json_cstr(out, meta->model ? meta->model : "");
    buf_appends(out, ",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        buf_appendf(out, "%s{\"index\":%zu,\"object\":\"embedding\",\"embedding\":", i ? "," : "",
                    i);
        if (enc) {
            openai_embed_encode(vecs[i], (size_t)dims, fmt, enc);
            buf_appends(out, "\"");
            openai_put_base64(out, enc, bytes);
            buf_appends(out, "\"");
        } else {
            buf_appends(out, "[");
            for (int d = 0; d < dims; d++) {
                if (d) {
                    buf_appends(out, ",");
                }
                openai_put_embed_float(out, vecs[i][d]);
            }
            buf_appends(out, "]");
        }
        buf_appends(out, "}");
    }
    buf_appends(out, "],\"usage\":");
    put_usage(out, usage);
    buf_appends(out, "}");
    free(enc);
    return buf_error(out);
}

int openai_build_embeddings(const struct openai_meta *meta, const float *const *vecs, size_t n,
                            int dims, int base64, const struct openai_usage *usage, struct buf *out)
{
    const struct openai_embed_format fmt = {
        .encoding = base64 ? OPENAI_EMBED_BASE64 : OPENAI_EMBED_FLOAT,
        .dtype = OPENAI_DTYPE_FLOAT32,
        .endian = OPENAI_ENDIAN_LITTLE,
    };
    return openai_build_embeddings_fmt(meta, vecs, n, dims, &fmt, usage, out);
}

/* s as Python's json.dumps writes a str (ensure_ascii: every non-ASCII code point \uXXXX, those
 * past U+FFFF as a surrogate pair; an invalid byte as U+FFFD). */
static void put_py_json_string(struct buf *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    const size_t len = strlen(s);
    buf_appends(out, "\"");
    for (size_t i = 0; i < len;) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            if (c == '"' || c == '\\') {
                buf_appendf(out, "\\%c", c);
            } else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') {
                buf_appends(out, c == '\n'   ? "\\n"
                                 : c == '\r' ? "\\r"
                                 : c == '\t' ? "\\t"
                                 : c == '\b' ? "\\b"
                                             : "\\f");
            } else if (c < 0x20) {
                buf_appendf(out, "\\u%04x", c);
            } else {
                buf_append(out, &p[i], 1);
            }
            i++;
            continue;
        }
        const size_t adv = tandem_utf8_seq_len(p + i, len - i);
        uint32_t cp = 0xfffd;
        if (adv == 2) {
            cp = ((uint32_t)(c & 0x1f) << 6) | (p[i + 1] & 0x3f);
        } else if (adv == 3) {
            cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(p[i + 1] & 0x3f) << 6) |
                 (p[i + 2] & 0x3f);
        } else if (adv == 4) {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3f) << 12) |
                 ((uint32_t)(p[i + 2] & 0x3f) << 6) | (p[i + 3] & 0x3f);
        }
        if (cp > 0xffff) {
            cp -= 0x10000;
            buf_appendf(out, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            buf_appendf(out, "\\u%04x", cp);
        }
        i += adv ? adv : 1;
    }
    buf_appends(out, "\"");
}

int openai_build_embeddings_bytes(const struct openai_meta *meta, const float *const *vecs,
                                  size_t n, int dims, const struct openai_embed_format *fmt,
                                  const struct openai_usage *usage, struct buf *body,
                                  struct buf *metadata)
{
    static const char *const dtype_names[] = {"float32", "float16", "bfloat16", "fp8_e4m3",
                                              "fp8_e5m2"};
    static const char *const endian_names[] = {"native", "big", "little"};
    const size_t bytes = (size_t)(dims > 0 ? dims : 0) * openai_embed_dtype_size(fmt->dtype);
    uint8_t *enc = malloc(bytes ? bytes : 1);
    if (!enc) {
        return -ENOMEM;
    }
    const bool with_meta = fmt->encoding == OPENAI_EMBED_BYTES;
    if (with_meta) {
        buf_appends(metadata, "{\"id\": ");
        put_py_json_string(metadata, meta->id ? meta->id : "");
        buf_appendf(metadata, ", \"created\": %" PRId64 ", \"model\": ", meta->created);
        put_py_json_string(metadata, meta->model ? meta->model : "");
        buf_appends(metadata, ", \"data\": [");
    }
    for (size_t i = 0; i < n; i++) {
        openai_embed_encode(vecs[i], (size_t)dims, fmt, enc);
        buf_append(body, enc, bytes);
        if (with_meta) {
            buf_appendf(metadata,
                        "%s{\"index\": %zu, \"embed_dtype\": \"%s\", \"endianness\": \"%s\", "
                        "\"start\": %zu, \"end\": %zu, \"shape\": [%d]}",
                        i ? ", " : "", i, dtype_names[fmt->dtype], endian_names[fmt->endian],
                        i * bytes, (i + 1) * bytes, dims);
        }
    }
    if (with_meta) {
        const int64_t prompt = usage ? usage->prompt_tokens : 0;
        buf_appendf(metadata,
                    "], \"usage\": {\"prompt_tokens\": %" PRId64 ", \"total_tokens\": %" PRId64
                    "}}",
                    prompt, prompt);
    }
    free(enc);
    int rc = buf_error(body);
    return rc != 0 ? rc : buf_error(metadata);
}
