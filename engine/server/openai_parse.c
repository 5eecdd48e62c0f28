/*
 * The request half of the OpenAI protocol layer (see openai.h): bodies of /v1/completions,
 * /v1/chat/completions, /tokenize and /detokenize parsed and validated into struct
 * openai_request with vLLM's field names, defaults and checks; every rejection fills a struct
 * openai_error. The response half is openai_build.c.
 */
#include "engine/server/openai.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/json.h"

/* ---- errors ---- */

void openai_error_set(struct openai_error *err, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): clang 14 false positive */
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    const char *type = status == 400   ? "BadRequestError"
                       : status == 404 ? "NotFoundError"
                       : status == 503 ? "ServiceUnavailableError"
                                       : "InternalServerError";
    err->status = status;
    snprintf(err->type, sizeof(err->type), "%s", type);
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
}

/* ---- request parsing ---- */

/* A member of obj: 1 present (*v may be NULL for JSON null), 0 absent. */
static int member(struct json_object *obj, const char *key, struct json_object **v)
{
    *v = NULL;
    return json_object_object_get_ex(obj, key, v) ? 1 : 0;
}

static const char *type_label(struct json_object *v)
{
    return json_type_label(v);
}

/* Reads an optional number (int or double); absent/null → *present 0, *out untouched. */
static int opt_number(struct json_object *obj, const char *key, const char *param, double *out,
                      int *present, struct openai_error *err)
{
    struct json_object *v;
    *present = 0;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    enum json_type t = json_object_get_type(v);
    if (t != json_type_int && t != json_type_double) {
        openai_error_set(err, 400, param, "'%s': input should be a valid number, got %s", param,
                         type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_double(v);
    *present = 1;
    return 0;
}

static int opt_int64(struct json_object *obj, const char *key, const char *param, int64_t *out,
                     int *present, struct openai_error *err)
{
    struct json_object *v;
    *present = 0;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    enum json_type t = json_object_get_type(v);
    if (t == json_type_int) {
        errno = 0;
        int64_t i = json_object_get_int64(v);
        if (errno == 0) {
            *out = i;
            *present = 1;
            return 0;
        }
    } else if (t == json_type_double) {
        double d = json_object_get_double(v);
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            *present = 1;
            return 0;
        }
        openai_error_set(err, 400, param,
                         "'%s': input should be a valid integer, got a number with a fractional "
                         "part or out of range",
                         param);
        return -EINVAL;
    }
    if (t == json_type_int) {
        openai_error_set(err, 400, param, "'%s': integer out of range", param);
    } else {
        openai_error_set(err, 400, param, "'%s': input should be a valid integer, got %s", param,
                         type_label(v));
    }
    return -EINVAL;
}

/* An int within [lo, hi] (range errors are reported by the caller's own message when needed). */
static int opt_int(struct json_object *obj, const char *key, const char *param, int *out,
                   int *present, struct openai_error *err)
{
    int64_t v = 0;
    int rc = opt_int64(obj, key, param, &v, present, err);
    if (rc != 0 || !*present) {
        return rc;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
        openai_error_set(err, 400, param, "'%s': integer %" PRId64 " out of range", param, v);
        return -EINVAL;
    }
    *out = (int)v;
    return 0;
}

static int opt_bool(struct json_object *obj, const char *key, const char *param, int *out,
                    struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_boolean) {
        openai_error_set(err, 400, param, "'%s': input should be a valid boolean, got %s", param,
                         type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

static int opt_string(struct json_object *obj, const char *key, const char *param, const char **out,
                      struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_string) {
        openai_error_set(err, 400, param, "'%s': input should be a valid string, got %s", param,
                         type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_string(v);
    return 0;
}

static int opt_object(struct json_object *obj, const char *key, const char *param,
                      struct json_object **out, struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_object) {
        openai_error_set(err, 400, param, "'%s': input should be an object, got %s", param,
                         type_label(v));
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* Parses an array of token ids (non-negative int32) into a malloc'd array. */
static int parse_token_array(struct json_object *arr, const char *param, size_t max, int32_t **out,
                             size_t *n_out, struct openai_error *err)
{
    size_t n = json_object_array_length(arr);
    *out = NULL;
    *n_out = 0;
    if (n > max) {
        openai_error_set(err, 400, param, "'%s': at most %zu token ids are allowed, got %zu", param,
                         max, n);
        return -EINVAL;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
    if (!ids) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(arr, i);
        if (json_object_get_type(e) != json_type_int) {
            openai_error_set(err, 400, param, "'%s[%zu]': input should be a valid integer, got %s",
                             param, i, type_label(e));
            free(ids);
            return -EINVAL;
        }
        int64_t t = json_object_get_int64(e);
        if (t < 0 || t > INT32_MAX) {
            openai_error_set(err, 400, param, "'%s[%zu]': token id %" PRId64 " is out of range",
                             param, i, t);
            free(ids);
            return -EINVAL;
        }
        ids[i] = (int32_t)t;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static void request_defaults(struct openai_request *req, enum openai_kind kind)
{
    memset(req, 0, sizeof(*req));
    req->kind = kind;
    sampling_params_init(&req->sampling);
    req->n = 1;
    req->logprobs = -1;
    req->skip_special_tokens = 1;
    req->spaces_between_special_tokens = 1;
    req->add_special_tokens = kind == OPENAI_COMPLETION;
    req->add_generation_prompt = 1;
    req->stream_interval = 1;
    req->embed_normalize = -1;
}

void openai_request_deinit(struct openai_request *req)
{
    if (req->messages) {
        for (size_t i = 0; i < req->n_messages; i++) {
            free(req->messages[i].content);
        }
    }
    free(req->messages);
    for (size_t i = 0; req->prompts && i < req->n_prompts; i++) {
        free(req->prompts[i].tokens);
    }
    free(req->prompts);
    free(req->stop);
    free(req->stop_token_ids);
    free(req->allowed_ids);
    free(req->bias_ids);
    free(req->bias_vals);
    free(req->bad_words);
    free(req->bad_word_lens);
    free(req->bad_word_ids);
    free(req->bad_word_seq_lens);
    openai_guide_deinit(&req->guide);
    if (req->root) {
        json_object_put(req->root);
    }
    memset(req, 0, sizeof(*req));
}

static int parse_body(const char *body, size_t len, struct openai_request *req,
                      struct openai_error *err)
{
    char perr[256];
    struct json_object *root = NULL;
    if (json_parse_one(body, len, &root, perr, sizeof(perr)) != 0) {
        openai_error_set(err, 400, NULL, "invalid JSON body: %s", perr);
        return -EINVAL;
    }
    if (!root || json_object_get_type(root) != json_type_object) {
        openai_error_set(err, 400, NULL, "the request body must be a JSON object, got %s",
                         type_label(root));
        if (root) {
            json_object_put(root);
        }
        return -EINVAL;
    }
    req->root = root;
    return 0;
}

static int parse_stop(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "stop", &v) || !v) {
        return 0;
    }
    enum json_type t = json_object_get_type(v);
    size_t n = t == json_type_array ? json_object_array_length(v) : 1;
    if (t != json_type_string && t != json_type_array) {
        openai_error_set(err, 400, "stop",
                         "'stop': input should be a string or an array of "
                         "strings, got %s",
                         type_label(v));
        return -EINVAL;
    }
    if (n > OPENAI_MAX_STOP) {
        openai_error_set(err, 400, "stop", "'stop': at most %d stop strings are allowed, got %zu",
                         OPENAI_MAX_STOP, n);
        return -EINVAL;
    }
    req->stop = calloc(n ? n : 1, sizeof(*req->stop));
    if (!req->stop) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = t == json_type_array ? json_object_array_get_idx(v, i) : v;
        if (json_object_get_type(e) != json_type_string) {
            openai_error_set(err, 400, "stop",
                             "'stop[%zu]': input should be a valid string, got %s", i,
                             type_label(e));
            return -EINVAL;
        }
        if ((size_t)json_object_get_string_len(e) > OPENAI_MAX_STOP_LEN) {
            openai_error_set(err, 400, "stop",
                             "'stop[%zu]': a stop string may have at most %d "
                             "bytes",
                             i, OPENAI_MAX_STOP_LEN);
            return -EINVAL;
        }
        req->stop[i] = json_object_get_string(e);
    }
    req->n_stop = n;
    for (size_t i = 0; i < n; i++) { /* vLLM's SamplingParams._verify_args */
        if (req->stop[i][0] == '\0') {
            openai_error_set(err, 400, "stop", "stop cannot contain an empty string.");
            return -EINVAL;
        }
    }
    return 0;
}

/* A logit_bias key: a token id written in decimal, as Python's int() reads it (surrounding
 * blanks and a sign allowed). */
static int bias_key(const char *k, int32_t *out)
{
    while (*k == ' ' || *k == '\t') {
        k++;
    }
    int neg = *k == '-';
    k += *k == '-' || *k == '+';
    if (*k < '0' || *k > '9') {
        return -1;
    }
    int64_t v = 0;
    for (; *k >= '0' && *k <= '9'; k++) {
        v = v * 10 + (*k - '0');
        if (v > INT32_MAX) {
            return -1;
        }
    }
    while (*k == ' ' || *k == '\t') {
        k++;
    }
    if (*k) {
        return -1;
    }
    *out = (int32_t)(neg ? -v : v);
    return 0;
}

/* logit_bias: {"token id": bias, ...}; biases clamped to [-100, 100] as OpenAI documents them.
 * Ids out of the vocabulary are the engine's 400 (vLLM's message). */
static int parse_logit_bias(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "logit_bias", &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_object) {
        openai_error_set(err, 400, "logit_bias",
                         "'logit_bias': input should be an object of token id → bias, got %s",
                         type_label(v));
        return -EINVAL;
    }
    size_t n = (size_t)json_object_object_length(v);
    if (n == 0) {
        return 0;
    }
    if (n > OPENAI_MAX_LOGIT_BIAS) {
        openai_error_set(err, 400, "logit_bias", "'logit_bias': at most %d entries, got %zu",
                         OPENAI_MAX_LOGIT_BIAS, n);
        return -EINVAL;
    }
    req->bias_ids = malloc(n * sizeof(*req->bias_ids));
    req->bias_vals = malloc(n * sizeof(*req->bias_vals));
    if (!req->bias_ids || !req->bias_vals) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    size_t i = 0;
    json_object_object_foreach(v, key, val)
    {
        enum json_type t = json_object_get_type(val);
        if (bias_key(key, &req->bias_ids[i]) != 0) {
            openai_error_set(err, 400, "logit_bias",
                             "'logit_bias': key '%.40s' is not a token id (an integer)", key);
            return -EINVAL;
        }
        double b = json_object_get_double(val);
        if ((t != json_type_int && t != json_type_double) || !isfinite(b)) {
            openai_error_set(err, 400, "logit_bias",
                             "'logit_bias.%.40s': input should be a number, got %s", key,
                             type_label(val));
            return -EINVAL;
        }
        const float bias = (float)(b < -100.0 ? -100.0 : b > 100.0 ? 100.0 : b);
        size_t j = 0;
        while (j < i && req->bias_ids[j] != req->bias_ids[i]) {
            j++;
        }
        req->bias_vals[j] = bias; /* "7" and "07" are one id: the later wins, as in a dict */
        i += j == i;
    }
    req->n_bias = i;
    req->sampling.bias_ids = req->bias_ids;
    req->sampling.bias_vals = req->bias_vals;
    req->sampling.n_bias = i;
    return 0;
}

#define CHECK(cond, param, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            openai_error_set(err, 400, param, __VA_ARGS__);                                        \
            return -EINVAL;                                                                        \
        }                                                                                          \
    } while (0)

/* Appends s as Python's repr() writes a str (for vLLM's messages that quote a list). */
static void py_repr(struct buf *out, const char *s, size_t len)
{
    const char q = memchr(s, '\'', len) && !memchr(s, '"', len) ? '"' : '\'';
    buf_append(out, &q, 1);
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == (unsigned char)q) {
            buf_appendf(out, "\\%c", c);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            buf_appends(out, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            buf_appendf(out, "\\x%02x", c);
        } else {
            buf_append(out, &s[i], 1);
        }
    }
    buf_append(out, &q, 1);
}

/* d as Python's repr() writes a float (vLLM's messages quote values so): the shortest digits that
 * read back as d, in fixed notation for exponents -4 .. 15 with at least one digit after the
 * point, else as d.ddde+XX. size: 48 bytes at least. */
static void py_float(char *out, size_t size, double d)
{
    if (isnan(d) || isinf(d)) {
        snprintf(out, size, "%s", isnan(d) ? "nan" : d < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d) {
            break;
        }
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, d);
    /* e: [-]D[.DDD]e(+|-)XX: the digits and the decimal exponent */
    const char *p = e;
    const int neg = *p == '-';
    p += neg;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++) {
        if (*p != '.' && nd + 1 < sizeof digits) {
            digits[nd++] = *p;
        }
    }
    digits[nd] = '\0';
    const int exp10 = *p == 'e' ? (int)strtol(p + 1, NULL, 10) : 0;
    if (exp10 < -4 || exp10 >= 16) {
        snprintf(out, size, "%s%c%s%se%c%02d", neg ? "-" : "", digits[0], nd > 1 ? "." : "",
                 digits + 1, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return;
    }
    char fixed[48];
    size_t k = 0;
    if (neg) {
        fixed[k++] = '-';
    }
    if (exp10 < 0) {
        fixed[k++] = '0';
        fixed[k++] = '.';
        for (int z = 0; z < -exp10 - 1; z++) {
            fixed[k++] = '0';
        }
        for (size_t i = 0; i < nd; i++) {
            fixed[k++] = digits[i];
        }
    } else {
        for (int i = 0; i <= exp10; i++) {
            fixed[k++] = (size_t)i < nd ? digits[i] : '0';
        }
        fixed[k++] = '.';
        if ((size_t)exp10 + 1 >= nd) {
            fixed[k++] = '0';
        }
        for (size_t i = (size_t)exp10 + 1; i < nd; i++) {
            fixed[k++] = digits[i];
        }
    }
    fixed[k] = '\0';
    snprintf(out, size, "%s", fixed);
}

/* bad_words: a list of strings (vLLM's list[str]: null is a 400 too), deduplicated in order as
 * vLLM's SamplingParams does; an empty string is vLLM's 400. The server tokenizes them
 * (prompt_bad_words). Past OPENAI_MAX_BAD_WORDS + 1 distinct words the rest are not kept: each
 * makes a token sequence, so those are vLLM's "Too many bad words" 400 already. */
static int parse_bad_words(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "bad_words", &v)) {
        return 0;
    }
    CHECK(json_object_get_type(v) == json_type_array, "bad_words",
          "'bad_words': input should be a valid list, got %s", type_label(v));
    size_t n = json_object_array_length(v);
    if (n == 0) {
        return 0;
    }
    req->bad_words = calloc(n, sizeof(*req->bad_words));
    req->bad_word_lens = calloc(n, sizeof(*req->bad_word_lens));
    if (!req->bad_words || !req->bad_word_lens) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    size_t k = 0, empty = 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(v, i);
        CHECK(json_object_get_type(e) == json_type_string, "bad_words",
              "'bad_words[%zu]': input should be a valid string, got %s", i, type_label(e));
        const char *w = json_object_get_string(e);
        const size_t wl = (size_t)json_object_get_string_len(e);
        empty += wl == 0;
        size_t j = 0;
        while (j < k && (req->bad_word_lens[j] != wl || memcmp(req->bad_words[j], w, wl) != 0)) {
            j++;
        }
        if (j == k && k <= OPENAI_MAX_BAD_WORDS) {
            req->bad_words[k] = w;
            req->bad_word_lens[k++] = wl;
        }
    }
    req->n_bad_words = k;
    if (empty) { /* vLLM's _verify_args, with its repr of the (deduplicated) list */
        struct buf list;
        buf_init(&list, 300);
        buf_appends(&list, "[");
        for (size_t i = 0; i < k && list.len < 256; i++) {
            buf_appends(&list, i ? ", " : "");
            py_repr(&list, req->bad_words[i], req->bad_word_lens[i]);
        }
        buf_appends(&list, "]");
        openai_error_set(err, 400, "bad_words",
                         "bad_words cannot contain an empty string. Got bad_words=%s",
                         list.data && buf_error(&list) == 0 ? list.data : "[...]");
        buf_free(&list);
        return -EINVAL;
    }
    return 0;
}

/* Rejects fields this engine does not support (vLLM supports them). */
static int reject_unsupported(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (member(req->root, "best_of", &v) && v) {
        int64_t b = 0;
        int present;
        if (opt_int64(req->root, "best_of", "best_of", &b, &present, err) != 0) {
            return -EINVAL;
        }
        if (b > 1) { /* vLLM v1's processor, word for word */
            openai_error_set(err, 400, "best_of", "vLLM V1 does not yet support best_of.");
            return -EINVAL;
        }
    }
    if (member(req->root, "prompt_embeds", &v) && v) {
        openai_error_set(err, 400, "prompt_embeds", "'prompt_embeds' is not supported");
        return -EINVAL;
    }
    /* vLLM request fields not honoured yet: set (not null, not false, not empty) they are a 400
     * naming them, never silently dropped */
    static const char *const not_yet[] = {
        "logprob_token_ids",
        "use_beam_search",
    };
    for (size_t i = 0; i < ARRAY_SIZE(not_yet); i++) {
        if (!member(req->root, not_yet[i], &v) || !v) {
            continue;
        }
        enum json_type t = json_object_get_type(v);
        if ((t == json_type_boolean && !json_object_get_boolean(v)) ||
            (t == json_type_array && json_object_array_length(v) == 0)) {
            continue;
        }
        openai_error_set(err, 400, not_yet[i], "'%s' is not supported by this server yet",
                         not_yet[i]);
        return -EINVAL;
    }
    if (req->kind == OPENAI_COMPLETION && member(req->root, "suffix", &v) && v) {
        openai_error_set(err, 400, "suffix", "'suffix' is not currently supported");
        return -EINVAL;
    }
    return 0;
}

/* prompt_logprobs: an integer or null, with vLLM's checks in its order (check_logprobs runs on
 * the raw value, before the field is read as an integer). */
static int parse_prompt_logprobs(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "prompt_logprobs", &v) || !v) {
        return 0;
    }
    const enum json_type t = json_object_get_type(v);
    CHECK(t == json_type_int || t == json_type_double, "prompt_logprobs",
          "`prompt_logprobs` must be an integer.");
    const double d = json_object_get_double(v);
    CHECK(!req->stream || !(d > 0 || d == -1), "prompt_logprobs",
          "`prompt_logprobs` are not available when `stream=True`.");
    CHECK(d >= 0 || d == -1, "prompt_logprobs",
          "`prompt_logprobs` must be a positive value or -1.");
    int present = 0;
    int rc = opt_int64(req->root, "prompt_logprobs", "prompt_logprobs", &req->prompt_logprobs,
                       &present, err);
    req->has_prompt_logprobs = rc == 0 && present;
    return rc;
}

int openai_resolve_sampling(struct openai_request *req, int32_t n_vocab, struct openai_error *err)
{
    struct sampling_params *sp = &req->sampling;
    /* vLLM's SamplingParams.__post_init__: temperatures below _MAX_TEMP are raised to it, and
     * greedy sampling (only 0 then) takes one sequence */
    if (sp->temperature > 0.0f && sp->temperature < 0.01f) {
        sp->temperature = 0.01f;
    }
    CHECK(sp->temperature >= SAMPLER_GREEDY_EPS || req->n <= 1, "n",
          "n must be 1 when using greedy sampling, got %d.", req->n);
    /* its verify: -1 is the vocabulary, more than max_logprobs a 400 */
    if (req->logprobs_vocab) {
        CHECK(n_vocab <= OPENAI_MAX_LOGPROBS, "logprobs",
              "Requested sample logprobs of %d, which is greater than max allowed: %d",
              (int)n_vocab, OPENAI_MAX_LOGPROBS);
        req->logprobs = (int)n_vocab;
        sp->logprobs = (int)n_vocab;
        req->logprobs_vocab = 0;
    }
    if (!req->has_prompt_logprobs) {
        return 0;
    }
    const int64_t k = req->prompt_logprobs == -1 ? n_vocab : req->prompt_logprobs;
    CHECK(k <= OPENAI_MAX_LOGPROBS, "prompt_logprobs",
          "Requested prompt logprobs of %" PRId64 ", which is greater than max allowed: %d", k,
          OPENAI_MAX_LOGPROBS);
    req->prompt_logprobs = k;
    return 0;
}

int openai_resolve_prompt_logprobs(struct openai_request *req, int32_t n_vocab,
                                   struct openai_error *err)
{
    return openai_resolve_sampling(req, n_vocab, err);
}

/* cache_salt, with vLLM's validate_cache_salt (completions, chat, embeddings). */
static int parse_cache_salt(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "cache_salt", &v) || !v) {
        return 0;
    }
    CHECK(json_object_get_type(v) == json_type_string && json_object_get_string_len(v) > 0,
          "cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.");
    const char *salt = json_object_get_string(v);
    const size_t len = (size_t)json_object_get_string_len(v);
    int forbidden = openai_text_chars(salt, len) > OPENAI_MAX_CACHE_SALT;
    for (size_t i = 0; i < len && !forbidden; i++) {
        forbidden = salt[i] == '@' || salt[i] == '/' || salt[i] == '\\' || salt[i] == '\0';
    }
    CHECK(!forbidden, "cache_salt",
          "Parameter 'cache_salt' must be at most %d characters and must not contain '@', '/', "
          "'\\\\', or NUL.",
          OPENAI_MAX_CACHE_SALT);
    req->cache_salt = salt;
    return 0;
}

/* truncate_prompt_tokens (-1: max_model_len) and truncation_side ("left" | "right"). */
static int parse_truncation(struct openai_request *req, struct openai_error *err)
{
    int64_t trunc = 0;
    int present = 0;
    int rc = opt_int64(req->root, "truncate_prompt_tokens", "truncate_prompt_tokens", &trunc,
                       &present, err);
    if (rc != 0) {
        return rc;
    }
    CHECK(!present || trunc >= -1, "truncate_prompt_tokens",
          "'truncate_prompt_tokens': input should be greater than or equal to -1");
    req->truncate_prompt_tokens = present && trunc > INT32_MAX ? INT32_MAX : (int32_t)trunc;
    const char *side = NULL;
    if ((rc = opt_string(req->root, "truncation_side", "truncation_side", &side, err)) != 0) {
        return rc;
    }
    CHECK(!side || strcmp(side, "left") == 0 || strcmp(side, "right") == 0, "truncation_side",
          "'truncation_side': input should be 'left' or 'right'");
    req->truncate_right = side && strcmp(side, "right") == 0;
    return 0;
}

/* request_id: a string (vLLM's str field: null is a 400 too); the response id's suffix when the
 * request has no X-Request-Id. Up to OPENAI_MAX_REQUEST_ID characters of [A-Za-z0-9._:-] here
 * (as /v1/responses reads it), since it names the request in logs, traces and P/D transfers. */
static int parse_request_id(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "request_id", &v)) {
        return 0;
    }
    CHECK(v && json_object_get_type(v) == json_type_string, "request_id",
          "'request_id': input should be a valid string, got %s", type_label(v));
    const char *id = json_object_get_string(v);
    const size_t len = (size_t)json_object_get_string_len(v);
    CHECK(len <= OPENAI_MAX_REQUEST_ID &&
              strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") ==
                  len,
          "request_id", "'request_id': at most %d characters of [A-Za-z0-9._:-] are supported",
          OPENAI_MAX_REQUEST_ID);
    req->request_id = id;
    return 0;
}

/* repetition_detection: {max_pattern_size, min_pattern_size, min_count} (vLLM's
 * RepetitionDetectionParams, each 0 by default); the engine checks the values with vLLM's
 * messages (engine_submit). */
static int parse_repetition_detection(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "repetition_detection", &v) || !v) {
        return 0;
    }
    CHECK(json_object_get_type(v) == json_type_object, "repetition_detection",
          "'repetition_detection': input should be an object, got %s", type_label(v));
    const struct {
        const char *key, *param;
        int32_t *dst;
    } fields[] = {
        {"max_pattern_size", "repetition_detection.max_pattern_size",
         &req->sampling.rep_max_pattern},
        {"min_pattern_size", "repetition_detection.min_pattern_size",
         &req->sampling.rep_min_pattern},
        {"min_count", "repetition_detection.min_count", &req->sampling.rep_min_count},
    };
    for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
        int val = 0, present = 0;
        int rc = opt_int(v, fields[i].key, fields[i].param, &val, &present, err);
        if (rc != 0) {
            return rc;
        }
        *fields[i].dst = present ? val : 0;
    }
    return 0;
}

/* thinking_token_budget: vLLM's validate_thinking_token_budget (an integer, not a float or a
 * bool; -1 is unset), then its input processor's 400 for a server without a reasoning parser,
 * which this one never has. */
static int parse_thinking_token_budget(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "thinking_token_budget", &v) || !v) {
        return 0;
    }
    const char *bad = "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.";
    CHECK(json_object_get_type(v) == json_type_int, "thinking_token_budget", "%s", bad);
    const int64_t budget = json_object_get_int64(v);
    CHECK(budget >= -1, "thinking_token_budget", "%s", bad);
    CHECK(budget == -1, "thinking_token_budget",
          "thinking_token_budget is set but reasoning_config is not configured. Please set "
          "--reasoning-parser and/or --reasoning-config to use thinking_token_budget.");
    return 0;
}

/* Fields common to completions and chat. */
static int parse_common(struct openai_request *req, struct openai_error *err)
{
    struct json_object *root = req->root;
    struct sampling_params *sp = &req->sampling;
    double d;
    int64_t i64;
    int present, iv;
    int rc;

    if ((rc = opt_string(root, "model", "model", &req->model, err)) != 0) {
        return rc;
    }
    if ((rc = opt_int(root, "n", "n", &iv, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(iv >= 1, "n", "'n' must be at least 1, got %d.", iv);
        CHECK(iv <= OPENAI_MAX_N, "n", "'n' must be at most %d, got %d.", OPENAI_MAX_N, iv);
        req->n = iv;
    }
    if ((rc = opt_number(root, "temperature", "temperature", &d, &present, err)) != 0) {
        return rc;
    }
    if (present) { /* vLLM's SamplingParams._verify_args, its messages */
        char f[48];
        py_float(f, sizeof f, d);
        CHECK(isfinite(d), "temperature", "temperature must be a finite number, got %s.", f);
        CHECK(d >= 0.0, "temperature", "temperature must be non-negative, got %s.", f);
        CHECK(d <= 2.0, "temperature", "temperature must be in [0, 2], got %s.", f);
        sp->temperature = (float)d;
    }
    if ((rc = opt_number(root, "top_p", "top_p", &d, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(d > 0.0 && d <= 1.0, "top_p", "'top_p' must be in (0, 1], got %g.", d);
        sp->top_p = (float)d;
    }
    if ((rc = opt_int(root, "top_k", "top_k", &iv, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(iv >= -1, "top_k", "'top_k' must be 0 or -1 (disable), or at least 1, got %d.", iv);
        sp->top_k = iv;
    }
    if ((rc = opt_number(root, "min_p", "min_p", &d, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(d >= 0.0 && d <= 1.0, "min_p", "'min_p' must be in [0, 1], got %g.", d);
        sp->min_p = (float)d;
    }
    if ((rc = opt_number(root, "presence_penalty", "presence_penalty", &d, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(d >= -2.0 && d <= 2.0, "presence_penalty",
              "'presence_penalty' must be in [-2, 2], got %g.", d);
        sp->presence_penalty = (float)d;
    }
    if ((rc = opt_number(root, "frequency_penalty", "frequency_penalty", &d, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(d >= -2.0 && d <= 2.0, "frequency_penalty",
              "'frequency_penalty' must be in [-2, 2], got %g.", d);
        sp->frequency_penalty = (float)d;
    }
    if ((rc = opt_number(root, "repetition_penalty", "repetition_penalty", &d, &present, err)) !=
        0) {
        return rc;
    }
    if (present) {
        CHECK(d > 0.0 && d <= 1e6, "repetition_penalty",
              "'repetition_penalty' must be greater than zero, got %g.", d);
        sp->repetition_penalty = (float)d;
    }
    if ((rc = opt_int64(root, "seed", "seed", &i64, &present, err)) != 0) {
        return rc;
    }
    if (present && i64 != -1) { /* vLLM: seed -1 is no seed */
        sp->has_seed = 1;
        sp->seed = (uint64_t)i64;
    }
    if ((rc = opt_int(root, "min_tokens", "min_tokens", &iv, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(iv >= 0, "min_tokens", "'min_tokens' must be greater than or equal to 0, got %d.",
              iv);
        sp->min_tokens = iv;
    }
    /* the flags, in the order their errors are reported */
    const struct {
        const char *key;
        int *dst;
    } flags[] = {
        {"ignore_eos", &sp->ignore_eos},
        {"include_stop_str_in_output", &req->include_stop_str_in_output},
        {"stream", &req->stream},
        {"echo", &req->echo},
        {"skip_special_tokens", &req->skip_special_tokens},
        {"spaces_between_special_tokens", &req->spaces_between_special_tokens},
        {"add_special_tokens", &req->add_special_tokens},
        {"return_tokens_as_token_ids", &req->return_tokens_as_token_ids},
        {"return_token_ids", &req->return_token_ids},
    };
    for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
        if ((rc = opt_bool(root, flags[i].key, flags[i].key, flags[i].dst, err)) != 0) {
            return rc;
        }
    }
    if ((rc = opt_int(root, "priority", "priority", &iv, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        req->priority = iv;
    }
    if ((rc = parse_cache_salt(req, err)) != 0 || (rc = parse_request_id(req, err)) != 0 ||
        (rc = opt_object(root, "kv_transfer_params", "kv_transfer_params", &req->kv_transfer_params,
                         err)) != 0 ||
        (rc = opt_string(root, "user", "user", &req->user, err)) != 0 ||
        (rc = parse_repetition_detection(req, err)) != 0 ||
        (rc = parse_thinking_token_budget(req, err)) != 0) {
        return rc;
    }
    if ((rc = opt_int(root, "stream_interval", "stream_interval", &iv, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(iv >= 1, "stream_interval",
              "'stream_interval': input should be greater than or equal to 1");
        req->stream_interval = iv;
    }

    struct json_object *so = NULL;
    if ((rc = opt_object(root, "stream_options", "stream_options", &so, err)) != 0) {
        return rc;
    }
    if (so) { /* vLLM tests the options' truthiness: {} is fine without stream */
        CHECK(req->stream || json_object_object_length(so) == 0, "stream_options",
              "Stream options can only be defined when `stream=True`.");
        if ((rc = opt_bool(so, "include_usage", "stream_options.include_usage", &req->include_usage,
                           err)) != 0 ||
            (rc = opt_bool(so, "continuous_usage_stats", "stream_options.continuous_usage_stats",
                           &req->continuous_usage_stats, err)) != 0) {
            return rc;
        }
    }

    if ((rc = parse_stop(req, err)) != 0) {
        return rc;
    }
    struct json_object *v;
    if (member(root, "stop_token_ids", &v) && v) {
        CHECK(json_object_get_type(v) == json_type_array, "stop_token_ids",
              "'stop_token_ids': input should be an array of integers, got %s", type_label(v));
        if ((rc = parse_token_array(v, "stop_token_ids", OPENAI_MAX_STOP_TOKENS,
                                    &req->stop_token_ids, &req->n_stop_token_ids, err)) != 0) {
            return rc;
        }
        sp->stop_token_ids = req->stop_token_ids;
        sp->n_stop_token_ids = req->n_stop_token_ids;
    }
    if ((rc = parse_truncation(req, err)) != 0) {
        return rc;
    }
    if (member(root, "allowed_token_ids", &v) && v) {
        CHECK(json_object_get_type(v) == json_type_array, "allowed_token_ids",
              "'allowed_token_ids': input should be an array of integers, got %s", type_label(v));
        CHECK(json_object_array_length(v) > 0, "allowed_token_ids",
              "'allowed_token_ids' is not None and empty!");
        if ((rc = parse_token_array(v, "allowed_token_ids", OPENAI_MAX_ALLOWED_TOKENS,
                                    &req->allowed_ids, &req->n_allowed, err)) != 0) {
            return rc;
        }
        sp->allowed_ids = req->allowed_ids;
        sp->n_allowed = req->n_allowed;
    }
    if ((rc = parse_logit_bias(req, err)) != 0 || (rc = parse_bad_words(req, err)) != 0 ||
        (rc = parse_prompt_logprobs(req, err)) != 0) {
        return rc;
    }
    if (reject_unsupported(req, err) != 0) {
        return -EINVAL;
    }
    rc = openai_parse_structured(req, err);
    if (rc == 0 && req->kind == OPENAI_CHAT) {
        rc = openai_parse_tools(req, err);
    }
    return rc;
}

/* max_tokens (completions: default 16, null too as vLLM's normalize_null_max_tokens makes it;
 * 0 with echo: vLLM's echo without generation, one token generated and not returned) and its
 * checks against min_tokens. */
static int parse_max_tokens(struct openai_request *req, const char *key, int has_default,
                            struct openai_error *err)
{
    struct json_object *v;
    int present = member(req->root, key, &v);
    if (!present || (!v && has_default)) {
        if (has_default) {
            req->max_tokens = OPENAI_DEFAULT_MAX_TOKENS;
            req->max_tokens_set = 1;
        }
        return 0;
    }
    int iv, got;
    int rc = opt_int(req->root, key, key, &iv, &got, err);
    if (rc != 0) {
        return rc;
    }
    if (got && iv == 0 && req->kind == OPENAI_COMPLETION && req->echo) {
        req->echo_only = 1;
        iv = 1;
    }
    if (got) {
        CHECK(iv >= 1, key, "'%s' must be at least 1, got %d.", key, iv);
        req->max_tokens = iv;
        req->max_tokens_set = 1;
    } else {
        req->max_tokens_set = 0;
    }
    return 0;
}

static int check_min_max(struct openai_request *req, const char *max_key, struct openai_error *err)
{
    if (req->max_tokens_set && req->sampling.min_tokens > req->max_tokens) {
        openai_error_set(err, 400, "min_tokens",
                         "'min_tokens' must be less than or equal to %s=%d, got %d.", max_key,
                         req->max_tokens, req->sampling.min_tokens);
        return -EINVAL;
    }
    return 0;
}

/* One prompt of the list: a string or an array of token ids (kind fixed by the first). */
static int parse_one_prompt(struct json_object *e, const char *key, size_t i, enum json_type kind,
                            struct openai_prompt *p, struct openai_error *err)
{
    char param[48];
    snprintf(param, sizeof param, "%s[%zu]", key, i);
    if (json_object_get_type(e) != kind) {
        openai_error_set(err, 400, key, "'%s': input should be %s like %s[0], got %s", param,
                         kind == json_type_string ? "a string" : "an array of token ids", key,
                         type_label(e));
        return -EINVAL;
    }
    if (kind == json_type_string) {
        p->text = json_object_get_string(e);
        p->text_len = (size_t)json_object_get_string_len(e);
        return 0;
    }
    CHECK(json_object_array_length(e) > 0, key, "'%s': '%s' cannot be empty", param, key);
    return parse_token_array(e, key, SIZE_MAX / sizeof(int32_t), &p->tokens, &p->n_tokens, err);
}

/* key ("prompt", or "input" for embeddings): string | [ids] | [string, ...] | [[ids], ...];
 * prompt_text / prompt_tokens then name the first. */
static int parse_prompt_key(struct openai_request *req, const char *key, int text_only,
                            struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, key, &v) || !v) {
        openai_error_set(err, 400, key, "'%s' is required", key);
        return -EINVAL;
    }
    enum json_type t = json_object_get_type(v);
    if (t != json_type_string && (t != json_type_array || text_only)) {
        openai_error_set(err, 400, key,
                         text_only ? "'%s': input should be a valid string, got %s"
                                   : "'%s': input should be a string, an array of token ids, "
                                     "or an array of those, got %s",
                         key, type_label(v));
        return -EINVAL;
    }
    size_t n = t == json_type_string ? 1 : json_object_array_length(v);
    CHECK(n > 0, key, "'%s' cannot be empty", key);
    struct json_object *first = t == json_type_string ? v : json_object_array_get_idx(v, 0);
    enum json_type ft = json_object_get_type(first);
    const int ids = t == json_type_array && ft == json_type_int; /* one prompt of token ids */
    if (t == json_type_array && !ids) {
        CHECK(ft == json_type_string || ft == json_type_array, key,
              "'%s[0]': input should be a string, a token id or an array of token ids, got %s", key,
              type_label(first));
        CHECK(n <= OPENAI_MAX_PROMPTS, key,
              "'%s': prompt list length %zu exceeds the maximum allowed count of %d.", key, n,
              OPENAI_MAX_PROMPTS);
    } else {
        n = 1;
    }
    req->prompts = calloc(n, sizeof(*req->prompts));
    if (!req->prompts) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    req->n_prompts = n;
    int rc = 0;
    if (t == json_type_string) {
        req->prompts[0].text = json_object_get_string(v);
        req->prompts[0].text_len = (size_t)json_object_get_string_len(v);
    } else if (ids) {
        rc = parse_token_array(v, key, SIZE_MAX / sizeof(int32_t), &req->prompts[0].tokens,
                               &req->prompts[0].n_tokens, err);
    } else {
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = parse_one_prompt(json_object_array_get_idx(v, i), key, i, ft, &req->prompts[i],
                                  err);
        }
    }
    if (rc != 0) {
        return rc;
    }
    openai_request_select_prompt(req, 0);
    return 0;
}

static int parse_prompt(struct openai_request *req, int text_only, struct openai_error *err)
{
    return parse_prompt_key(req, "prompt", text_only, err);
}

void openai_request_select_prompt(struct openai_request *req, size_t i)
{
    const struct openai_prompt *p = &req->prompts[i];
    req->prompt_text = p->tokens ? NULL : p->text;
    req->prompt_text_len = p->tokens ? 0 : p->text_len;
    req->prompt_tokens = p->tokens;
    req->n_prompt_tokens = p->n_tokens;
}

static int is_role(const char *r)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
    for (size_t i = 0; i < ARRAY_SIZE(roles); i++) {
        if (strcmp(r, roles[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The text of part i of messages[idx].content: {"type": "text", "text": ...}. */
static int content_part_text(struct json_object *part, size_t idx, size_t i, const char **text,
                             struct openai_error *err)
{
    char pp[96];
    const char *ptype = NULL;
    *text = NULL;
    snprintf(pp, sizeof(pp), "messages[%zu].content[%zu]", idx, i);
    CHECK(json_object_get_type(part) == json_type_object, pp,
          "'%s': input should be an object, got %s", pp, type_label(part));
    snprintf(pp, sizeof(pp), "messages[%zu].content[%zu].type", idx, i);
    int rc = opt_string(part, "type", pp, &ptype, err);
    if (rc != 0) {
        return rc;
    }
    CHECK(ptype && strcmp(ptype, "text") == 0, pp,
          "'%s': content part type '%.40s' is not supported (only 'text')", pp,
          ptype ? ptype : "null");
    snprintf(pp, sizeof(pp), "messages[%zu].content[%zu].text", idx, i);
    if ((rc = opt_string(part, "text", pp, text, err)) != 0) {
        return rc;
    }
    CHECK(*text, pp, "'%s' is required", pp);
    return 0;
}

/* messages[idx].content (param): a string, or an array of text parts joined with "\n", copied
 * into out->content. */
static int parse_content(struct json_object *c, size_t idx, const char *param,
                         struct openai_message *out, struct openai_error *err)
{
    enum json_type t = json_object_get_type(c);
    CHECK(t == json_type_string || t == json_type_array, param,
          "'%s': input should be a string or an array of content parts, got %s", param,
          type_label(c));
    struct buf text;
    buf_init(&text, SIZE_MAX / 2);
    if (t == json_type_string) {
        buf_append(&text, json_object_get_string(c), (size_t)json_object_get_string_len(c));
    }
    size_t n = t == json_type_array ? json_object_array_length(c) : 0;
    for (size_t i = 0; i < n && !buf_error(&text); i++) {
        const char *part;
        int rc = content_part_text(json_object_array_get_idx(c, i), idx, i, &part, err);
        if (rc != 0) {
            buf_free(&text);
            return rc;
        }
        if (i > 0) {
            buf_append(&text, "\n", 1);
        }
        buf_appends(&text, part);
    }
    char *content = buf_error(&text) ? NULL : buf_detach(&text, &out->content_len);
    buf_free(&text);
    if (!content) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    out->content = content;
    return 0;
}

static int parse_message(struct json_object *m, size_t idx, struct openai_message *out,
                         struct openai_error *err)
{
    char param[96];
    snprintf(param, sizeof(param), "messages[%zu]", idx);
    CHECK(json_object_get_type(m) == json_type_object, param,
          "'%s': input should be an object, got %s", param, type_label(m));
    snprintf(param, sizeof(param), "messages[%zu].role", idx);
    int rc = opt_string(m, "role", param, &out->role, err);
    if (rc != 0) {
        return rc;
    }
    CHECK(out->role, param, "'%s' is required", param);
    CHECK(is_role(out->role), param,
          "'%s': unknown role '%.40s' (expected system, user, assistant, tool or developer)", param,
          out->role);
    snprintf(param, sizeof(param), "messages[%zu].name", idx);
    if ((rc = opt_string(m, "name", param, &out->name, err)) != 0) {
        return rc;
    }
    snprintf(param, sizeof(param), "messages[%zu].tool_call_id", idx);
    if ((rc = opt_string(m, "tool_call_id", param, &out->tool_call_id, err)) != 0) {
        return rc;
    }
    /* vLLM's _normalize_messages_before: reasoning_content is the deprecated name of reasoning */
    snprintf(param, sizeof(param), "messages[%zu].reasoning", idx);
    if ((rc = opt_string(m, "reasoning", param, &out->reasoning, err)) != 0) {
        return rc;
    }
    snprintf(param, sizeof(param), "messages[%zu].reasoning_content", idx);
    if (!out->reasoning &&
        (rc = opt_string(m, "reasoning_content", param, &out->reasoning, err)) != 0) {
        return rc;
    }
    snprintf(param, sizeof(param), "messages[%zu].tool_calls", idx);
    struct json_object *tcs;
    if (member(m, "tool_calls", &tcs) && tcs) {
        CHECK(json_object_get_type(tcs) == json_type_array, param,
              "'%s': input should be an array, got %s", param, type_label(tcs));
        out->tool_calls = tcs;
    }
    snprintf(param, sizeof(param), "messages[%zu].content", idx);
    struct json_object *c;
    if (!member(m, "content", &c) || !c) {
        CHECK(strcmp(out->role, "assistant") == 0, param,
              "'%s' is required for role '%s' (only assistant content may be null)", param,
              out->role);
        return 0;
    }
    return parse_content(c, idx, param, out, err);
}

static int parse_messages(struct openai_request *req, struct openai_error *err)
{
    struct json_object *v;
    if (!member(req->root, "messages", &v) || !v) {
        openai_error_set(err, 400, "messages", "'messages' is required");
        return -EINVAL;
    }
    CHECK(json_object_get_type(v) == json_type_array, "messages",
          "'messages': input should be an array, got %s", type_label(v));
    size_t n = json_object_array_length(v);
    CHECK(n > 0, "messages", "'messages' cannot be empty");
    CHECK(n <= OPENAI_MAX_MESSAGES, "messages", "'messages': at most %d messages are allowed",
          OPENAI_MAX_MESSAGES);
    req->messages = calloc(n, sizeof(*req->messages));
    if (!req->messages) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = parse_message(json_object_array_get_idx(v, i), i, &req->messages[i], err);
        req->n_messages = i + 1;
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static int parse_chat_template_fields(struct openai_request *req, struct openai_error *err)
{
    int rc;
    if ((rc = opt_bool(req->root, "add_generation_prompt", "add_generation_prompt",
                       &req->add_generation_prompt, err)) != 0 ||
        (rc = opt_bool(req->root, "continue_final_message", "continue_final_message",
                       &req->continue_final_message, err)) != 0 ||
        (rc = opt_string(req->root, "chat_template", "chat_template", &req->chat_template, err)) !=
            0 ||
        (rc = opt_object(req->root, "chat_template_kwargs", "chat_template_kwargs",
                         &req->chat_template_kwargs, err)) != 0) {
        return rc;
    }
    CHECK(!(req->continue_final_message && req->add_generation_prompt), "continue_final_message",
          "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    return 0;
}

/* Chat only: reasoning_effort (vLLM's Literal), documents (list[dict[str, str]]) and
 * return_prompt_text. */
static int parse_chat_extras(struct openai_request *req, struct openai_error *err)
{
    static const char *const efforts[] = {"none", "minimal", "low", "medium",
                                          "high", "xhigh",   "max"};
    int rc =
        opt_string(req->root, "reasoning_effort", "reasoning_effort", &req->reasoning_effort, err);
    if (rc != 0) {
        return rc;
    }
    int known = !req->reasoning_effort;
    for (size_t i = 0; !known && i < ARRAY_SIZE(efforts); i++) {
        known = strcmp(req->reasoning_effort, efforts[i]) == 0;
    }
    CHECK(known, "reasoning_effort",
          "'reasoning_effort': input should be 'none', 'minimal', 'low', 'medium', 'high', "
          "'xhigh' or 'max'");
    struct json_object *v;
    if (member(req->root, "documents", &v) && v) {
        CHECK(json_object_get_type(v) == json_type_array, "documents",
              "'documents': input should be a valid list, got %s", type_label(v));
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            struct json_object *doc = json_object_array_get_idx(v, i);
            CHECK(json_object_get_type(doc) == json_type_object, "documents",
                  "'documents[%zu]': input should be a valid dictionary, got %s", i,
                  type_label(doc));
            json_object_object_foreach(doc, key, val)
            {
                CHECK(json_object_get_type(val) == json_type_string, "documents",
                      "'documents[%zu].%.40s': input should be a valid string, got %s", i, key,
                      type_label(val));
            }
        }
        req->documents = v;
    }
    return opt_bool(req->root, "return_prompt_text", "return_prompt_text", &req->return_prompt_text,
                    err);
}

static int finish_parse(int rc, struct openai_request *req, struct openai_error *err)
{
    if (rc != 0) {
        if (rc != -EINVAL && rc != -ENOMEM) {
            rc = -ENOMEM;
        }
        if (rc == -ENOMEM && err->status != 500) {
            openai_error_set(err, 500, NULL, "out of memory");
        }
        openai_request_deinit(req);
    }
    return rc;
}

/* The body of a /v1/completions request into req (defaults set). */
static int completion_fields(const char *body, size_t len, struct openai_request *req,
                             struct openai_error *err)
{
    int rc;
    struct json_object *v;
    if ((rc = parse_body(body, len, req, err)) != 0 || (rc = parse_common(req, err)) != 0) {
        return rc;
    }
    /* vLLM's validate_prompt_and_prompt_embeds (prompt_embeds was refused above) */
    CHECK(member(req->root, "prompt", &v) && v &&
              !(json_object_get_type(v) == json_type_string && json_object_get_string_len(v) == 0),
          "prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
    if ((rc = parse_prompt(req, 0, err)) != 0 ||
        (rc = parse_max_tokens(req, "max_tokens", 1, err)) != 0 ||
        (rc = check_min_max(req, "max_tokens", err)) != 0) {
        return rc;
    }
    CHECK(req->n_prompts * (size_t)req->n <= OPENAI_MAX_CHOICES, "prompt",
          "'prompt': %zu prompts with n = %d make %zu choices, more than %d in one request",
          req->n_prompts, req->n, req->n_prompts * (size_t)req->n, OPENAI_MAX_CHOICES);
    CHECK(req->n_prompts == 1 || !req->kv_transfer_params, "kv_transfer_params",
          "'kv_transfer_params' needs a single prompt (got %zu)", req->n_prompts);
    int present = 0, lp = 0;
    if (member(req->root, "logprobs", &v) && v) { /* vLLM's check_logprobs, then the int field */
        const enum json_type t = json_object_get_type(v);
        CHECK(t == json_type_int || t == json_type_double, "logprobs",
              "`logprobs` must be an integer.");
        const double d = json_object_get_double(v);
        CHECK(d >= 0 || d == -1, "logprobs", "`logprobs` must be a positive value or -1.");
    }
    if ((rc = opt_int(req->root, "logprobs", "logprobs", &lp, &present, err)) != 0) {
        return rc;
    }
    if (present) {
        CHECK(lp <= OPENAI_MAX_LOGPROBS, "logprobs",
              "Requested sample logprobs of %d, which is greater than max allowed: %d", lp,
              OPENAI_MAX_LOGPROBS);
        req->logprobs = lp; /* -1: the vocabulary (openai_resolve_sampling) */
        req->logprobs_vocab = lp == -1;
    }
    req->sampling.logprobs = req->logprobs;
    if (!req->has_prompt_logprobs && req->echo && present) {
        req->has_prompt_logprobs = 1; /* vLLM: the echoed prompt's logprobs */
        req->prompt_logprobs = lp;
    }
    return 0;
}

/* The body of a /v1/chat/completions request into req (defaults set). */
static int chat_fields(const char *body, size_t len, struct openai_request *req,
                       struct openai_error *err)
{
    int rc;
    if ((rc = parse_body(body, len, req, err)) != 0 || (rc = parse_common(req, err)) != 0 ||
        (rc = parse_messages(req, err)) != 0 || (rc = parse_chat_template_fields(req, err)) != 0 ||
        (rc = parse_chat_extras(req, err)) != 0) {
        return rc;
    }
    /* max_completion_tokens wins over the deprecated max_tokens */
    struct json_object *v;
    const char *max_key = member(req->root, "max_completion_tokens", &v) && v
                              ? "max_completion_tokens"
                              : "max_tokens";
    if ((rc = parse_max_tokens(req, max_key, 0, err)) != 0 ||
        (rc = check_min_max(req, max_key, err)) != 0) {
        return rc;
    }
    int logprobs = 0, top = 0, present = 0;
    if ((rc = opt_bool(req->root, "logprobs", "logprobs", &logprobs, err)) != 0) {
        return rc;
    }
    if (member(req->root, "top_logprobs", &v) && v) { /* vLLM's check_logprobs, its order */
        const enum json_type t = json_object_get_type(v);
        CHECK(t == json_type_int || t == json_type_double, "top_logprobs",
              "`top_logprobs` must be an integer.");
        const double d = json_object_get_double(v);
        CHECK(d >= 0 || d == -1, "top_logprobs", "`top_logprobs` must be a positive value or -1.");
        CHECK(!(d == -1 || d > 0) || logprobs, "top_logprobs",
              "when using `top_logprobs`, `logprobs` must be set to true.");
    }
    if ((rc = opt_int(req->root, "top_logprobs", "top_logprobs", &top, &present, err)) != 0) {
        return rc;
    }
    CHECK(top <= OPENAI_MAX_LOGPROBS, "top_logprobs",
          "Requested sample logprobs of %d, which is greater than max allowed: %d", top,
          OPENAI_MAX_LOGPROBS);
    /* vLLM returns logprobs with logprobs true and top_logprobs not null (default 0) */
    const int top_null = member(req->root, "top_logprobs", &v) && !v;
    if (logprobs && !top_null) {
        req->logprobs = top; /* -1: the vocabulary (openai_resolve_sampling) */
        req->logprobs_vocab = top == -1;
    }
    req->sampling.logprobs = req->logprobs;
    /* vLLM: echo asks for the prompt's logprobs, top_logprobs of them (0 when absent; none when
     * null) */
    if (!req->has_prompt_logprobs && req->echo &&
        (present || !member(req->root, "top_logprobs", &v))) {
        req->has_prompt_logprobs = 1;
        req->prompt_logprobs = present ? top : 0;
    }
    return 0;
}

/* The body of a /tokenize request into req (defaults set): messages or a text prompt. */
static int tokenize_fields(const char *body, size_t len, struct openai_request *req,
                           int *return_token_strs, struct openai_error *err)
{
    int rc = parse_body(body, len, req, err);
    if (rc != 0) {
        return rc;
    }
    struct json_object *v;
    if (member(req->root, "messages", &v) && v) {
        req->kind = OPENAI_CHAT;
        req->add_special_tokens = 0;
        if ((rc = parse_messages(req, err)) != 0 ||
            (rc = parse_chat_template_fields(req, err)) != 0 ||
            (rc = openai_parse_tools(req, err)) != 0) { /* tools reach the template */
            return rc;
        }
    } else if ((rc = parse_prompt(req, 1, err)) != 0) {
        return rc;
    }
    if ((rc = opt_string(req->root, "model", "model", &req->model, err)) != 0 ||
        (rc = opt_bool(req->root, "add_special_tokens", "add_special_tokens",
                       &req->add_special_tokens, err)) != 0) {
        return rc;
    }
    return opt_bool(req->root, "return_token_strs", "return_token_strs", return_token_strs, err);
}

int openai_parse_completion(const char *body, size_t len, struct openai_request *req,
                            struct openai_error *err)
{
    request_defaults(req, OPENAI_COMPLETION);
    return finish_parse(completion_fields(body, len, req, err), req, err);
}

int openai_parse_chat(const char *body, size_t len, struct openai_request *req,
                      struct openai_error *err)
{
    request_defaults(req, OPENAI_CHAT);
    return finish_parse(chat_fields(body, len, req, err), req, err);
}

/* One of a Literal's values (names[i] → i), or a 400 quoting them as pydantic does. Absent or
 * null: *out untouched. */
static int opt_literal(struct json_object *obj, const char *key, const char *const *names, size_t n,
                       int *out, struct openai_error *err)
{
    const char *val = NULL;
    int rc = opt_string(obj, key, key, &val, err);
    if (rc != 0 || !val) {
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(val, names[i]) == 0) {
            *out = (int)i;
            return 0;
        }
    }
    char list[160] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s'%s'",
                         i == 0       ? ""
                         : i + 1 == n ? " or "
                                      : ", ",
                         names[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    openai_error_set(err, 400, key, "'%s': input should be %s", key, list);
    return -EINVAL;
}

/* /v1/embeddings (vLLM's EmbeddingCompletionRequest): {"model", "input", "encoding_format",
 * "embed_dtype", "endianness", "dimensions", "use_activation", "user", "truncate_prompt_tokens",
 * "truncation_side", "padding", "add_special_tokens", "priority", "cache_salt", "request_id"}. */
static int embedding_fields(const char *body, size_t len, struct openai_request *req,
                            struct openai_error *err)
{
    static const char *const encodings[] = {"float", "base64", "bytes", "bytes_only"};
    static const char *const dtypes[] = {"float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
    static const char *const endians[] = {"native", "big", "little"};
    static const char *const paddings[] = {"max_length", "do_not_pad"};
    int rc = parse_body(body, len, req, err);
    if (rc != 0) {
        return rc;
    }
    /* vLLM's reject_removed_pooling_parameters, before anything else: normalize (even null) and
     * the removed task names */
    struct json_object *v;
    CHECK(!member(req->root, "normalize", &v), "normalize",
          "Parameter `normalize` was removed; use `use_activation` instead.");
    if (member(req->root, "task", &v) && json_object_get_type(v) == json_type_string) {
        CHECK(strcmp(json_object_get_string(v), "score") != 0, "task",
              "`score` task was removed; use `classify` instead.");
        CHECK(strcmp(json_object_get_string(v), "encode") != 0, "task",
              "`encode` task was removed; use `token_embed` or `token_classify` instead.");
    }
    int enc = OPENAI_EMBED_FLOAT, dtype = OPENAI_DTYPE_FLOAT32, endian = OPENAI_ENDIAN_NATIVE;
    int padding = 1;
    if ((rc = parse_prompt_key(req, "input", 0, err)) != 0 ||
        (rc = opt_string(req->root, "model", "model", &req->model, err)) != 0 ||
        (rc = opt_string(req->root, "user", "user", &req->user, err)) != 0 ||
        (rc = opt_bool(req->root, "add_special_tokens", "add_special_tokens",
                       &req->add_special_tokens, err)) != 0 ||
        (rc = opt_literal(req->root, "encoding_format", encodings, ARRAY_SIZE(encodings), &enc,
                          err)) != 0 ||
        (rc = opt_literal(req->root, "embed_dtype", dtypes, ARRAY_SIZE(dtypes), &dtype, err)) !=
            0 ||
        (rc = opt_literal(req->root, "endianness", endians, ARRAY_SIZE(endians), &endian, err)) !=
            0 ||
        (rc = opt_literal(req->root, "padding", paddings, ARRAY_SIZE(paddings), &padding, err)) !=
            0) {
        return rc;
    }
    req->embed_fmt.encoding = (enum openai_embed_encoding)enc;
    req->embed_fmt.dtype = (enum openai_embed_dtype)dtype;
    req->embed_fmt.endian = (enum openai_endianness)endian;
    req->embed_base64 = enc == OPENAI_EMBED_BASE64;
    /* "max_length" pads the prompt to max_model_len with the pad token (for models trained so,
     * such as SigLIP); the engine here generates a token after every prompt, so it cannot take
     * a prompt that long */
    CHECK(padding != 0, "padding",
          "'padding': \"max_length\" is not supported by this server (\"do_not_pad\" is)");
    int present = 0, dims = 0;
    if ((rc = opt_int(req->root, "dimensions", "dimensions", &dims, &present, err)) != 0) {
        return rc;
    }
    CHECK(!present || dims >= 1, "dimensions", "'dimensions' must be a positive integer");
    req->embed_dimensions = present ? dims : 0;
    int act = 0;
    if (member(req->root, "use_activation", &v) && v) { /* null: the pooler's default */
        if ((rc = opt_bool(req->root, "use_activation", "use_activation", &act, err)) != 0) {
            return rc;
        }
        req->embed_normalize = act;
    }
    if ((rc = parse_truncation(req, err)) != 0 || (rc = parse_cache_salt(req, err)) != 0 ||
        (rc = parse_request_id(req, err)) != 0) {
        return rc;
    }
    int iv = 0;
    if ((rc = opt_int(req->root, "priority", "priority", &iv, &present, err)) != 0) {
        return rc;
    }
    req->priority = present ? iv : 0;
    req->max_tokens = 1;
    req->max_tokens_set = 1;
    req->sampling.temperature = 0.0f;
    return 0;
}

int openai_parse_embedding(const char *body, size_t len, struct openai_request *req,
                           struct openai_error *err)
{
    request_defaults(req, OPENAI_EMBEDDING);
    req->add_special_tokens = 1; /* vLLM's embedding requests default to true */
    return finish_parse(embedding_fields(body, len, req, err), req, err);
}

int openai_parse_tokenize(const char *body, size_t len, struct openai_request *req,
                          int *return_token_strs, struct openai_error *err)
{
    request_defaults(req, OPENAI_COMPLETION);
    *return_token_strs = 0;
    return finish_parse(tokenize_fields(body, len, req, return_token_strs, err), req, err);
}

int openai_parse_detokenize(const char *body, size_t len, struct json_object **root,
                            const char **model, int32_t **tokens, size_t *n_tokens,
                            struct openai_error *err)
{
    struct openai_request req;
    request_defaults(&req, OPENAI_COMPLETION);
    *root = NULL;
    *model = NULL;
    *tokens = NULL;
    *n_tokens = 0;
    int rc = parse_body(body, len, &req, err);
    if (rc != 0) {
        return rc;
    }
    struct json_object *v;
    if ((rc = opt_string(req.root, "model", "model", model, err)) != 0) {
        goto err_put;
    }
    if (!member(req.root, "tokens", &v) || !v) {
        openai_error_set(err, 400, "tokens", "'tokens' is required");
        rc = -EINVAL;
        goto err_put;
    }
    if (json_object_get_type(v) != json_type_array) {
        openai_error_set(err, 400, "tokens",
                         "'tokens': input should be an array of integers, "
                         "got %s",
                         type_label(v));
        rc = -EINVAL;
        goto err_put;
    }
    rc = parse_token_array(v, "tokens", SIZE_MAX / sizeof(int32_t), tokens, n_tokens, err);
    if (rc != 0) {
        goto err_put;
    }
    *root = req.root;
    return 0;
err_put:
    *model = NULL;
    json_object_put(req.root);
    return rc;
}

/* ---- server-side sampling defaults (generation config) ---- */

static int default_number(struct json_object *root, const char *key, double lo, double hi,
                          int lo_open, double *out, int *has, char *err, size_t errlen)
{
    struct json_object *v;
    if (!member(root, key, &v) || !v) {
        return 0;
    }
    enum json_type t = json_object_get_type(v);
    if (t != json_type_int && t != json_type_double) {
        snprintf(err, errlen, "'%s' must be a number, got %s", key, type_label(v));
        return -EINVAL;
    }
    double d = json_object_get_double(v);
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
        snprintf(err, errlen, "'%s' must be in %s%g, %g], got %g", key, lo_open ? "(" : "[", lo, hi,
                 d);
        return -EINVAL;
    }
    *out = d;
    *has = 1;
    return 0;
}

int openai_defaults_merge(struct openai_defaults *d, const char *text, size_t len, char *err,
                          size_t errlen)
{
    char perr[256] = "";
    struct json_object *root = json_parse(text, len, perr, sizeof perr);
    if (!root) {
        snprintf(err, errlen, "not valid JSON: %s", perr);
        return -EINVAL;
    }
    if (!json_object_is_type(root, json_type_object)) {
        snprintf(err, errlen, "must be a JSON object, got %s", type_label(root));
        json_object_put(root);
        return -EINVAL;
    }
    struct openai_defaults n = *d;
    double v = 0;
    int rc = 0;
    struct {
        const char *key;
        double lo, hi;
        int lo_open;
        int *has;
        float *f;
        int *i;
    } keys[] = {
        {"temperature", 0, 1e6, 0, &n.has_temperature, &n.temperature, NULL},
        {"top_p", 0, 1, 1, &n.has_top_p, &n.top_p, NULL},
        {"top_k", -1, 1 << 30, 0, &n.has_top_k, NULL, &n.top_k},
        {"min_p", 0, 1, 0, &n.has_min_p, &n.min_p, NULL},
        {"repetition_penalty", 0, 1e6, 1, &n.has_repetition_penalty, &n.repetition_penalty, NULL},
        {"max_new_tokens", 1, INT32_MAX, 0, &n.has_max_tokens, NULL, &n.max_tokens},
    };
    for (size_t k = 0; rc == 0 && k < ARRAY_SIZE(keys); k++) {
        int has = 0;
        rc = default_number(root, keys[k].key, keys[k].lo, keys[k].hi, keys[k].lo_open, &v, &has,
                            err, errlen);
        if (rc != 0 || !has) {
            continue;
        }
        if (keys[k].i && v != floor(v)) {
            snprintf(err, errlen, "'%s' must be an integer, got %g", keys[k].key, v);
            rc = -EINVAL;
            break;
        }
        if (keys[k].i && keys[k].key[0] == 't' && v == -1) {
            v = 0; /* top_k -1 and 0 both mean "off" */
        }
        *keys[k].has = 1;
        if (keys[k].f) {
            *keys[k].f = (float)v;
        } else {
            *keys[k].i = (int)v;
        }
    }
    json_object_put(root);
    if (rc == 0) {
        *d = n;
    }
    return rc;
}

static int body_sets(const struct openai_request *req, const char *key)
{
    struct json_object *v;
    return member(req->root, key, &v) && v;
}

void openai_apply_defaults(struct openai_request *req, const struct openai_defaults *d)
{
    if (!d) {
        return;
    }
    struct sampling_params *sp = &req->sampling;
    if (d->has_temperature && !body_sets(req, "temperature")) {
        sp->temperature = d->temperature;
    }
    if (d->has_top_p && !body_sets(req, "top_p")) {
        sp->top_p = d->top_p;
    }
    if (d->has_top_k && !body_sets(req, "top_k")) {
        sp->top_k = d->top_k;
    }
    if (d->has_min_p && !body_sets(req, "min_p")) {
        sp->min_p = d->min_p;
    }
    if (d->has_repetition_penalty && !body_sets(req, "repetition_penalty")) {
        sp->repetition_penalty = d->repetition_penalty;
    }
}

void openai_defaults_describe(const struct openai_defaults *d, char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = '\0';
#define DESCRIBE(cond, fmt, val)                                                                   \
    do {                                                                                           \
        if ((cond) && n < outlen) {                                                                \
            int w = snprintf(out + n, outlen - n, "%s" fmt, n ? " " : "", val);                    \
            n += w > 0 ? (size_t)w : 0;                                                            \
        }                                                                                          \
    } while (0)
    DESCRIBE(d->has_temperature, "temperature=%g", (double)d->temperature);
    DESCRIBE(d->has_top_p, "top_p=%g", (double)d->top_p);
    DESCRIBE(d->has_top_k, "top_k=%d", d->top_k);
    DESCRIBE(d->has_min_p, "min_p=%g", (double)d->min_p);
    DESCRIBE(d->has_repetition_penalty, "repetition_penalty=%g", (double)d->repetition_penalty);
    DESCRIBE(d->has_max_tokens, "max_new_tokens=%d", d->max_tokens);
#undef DESCRIBE
}
