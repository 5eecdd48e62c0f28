/*
 * /score, /rerank and /pooling (see scoring.h): vLLM's ScoreRequest, RerankRequest and
 * PoolingCompletionRequest parsed into an embedding request, and the pooled vectors turned into
 * vLLM's ScoreResponse, RerankResponse and PoolingResponse. The field rules are vLLM's
 * (vllm/entrypoints/pooling/scoring/protocol.py, pooling/base/protocol.py); types are strict as
 * in openai_parse.c (numbers must be JSON numbers, integers may be written 3.0 but not 3.5).
 */
#include "engine/server/scoring.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"

/* torch.nn.functional.cosine_similarity's default eps: each norm is clamped to it */
#define SCORING_COSINE_EPS 1e-8

/* ---- JSON fields ---- */

/* A member of obj: 1 present (*v may be NULL for JSON null), 0 absent. */
static int member(struct json_object *obj, const char *key, struct json_object **v)
{
    *v = NULL;
    return json_object_object_get_ex(obj, key, v) ? 1 : 0;
}

/* An optional integer (absent or null: *present 0). */
static int opt_int64(struct json_object *obj, const char *key, int64_t *out, int *present,
                     struct openai_error *err)
{
    struct json_object *v;
    *present = 0;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    const enum json_type t = json_object_get_type(v);
    if (t == json_type_int) {
        errno = 0;
        const int64_t i = json_object_get_int64(v);
        if (errno == 0) {
            *out = i;
            *present = 1;
            return 0;
        }
        openai_error_set(err, 400, key, "'%s': integer out of range", key);
        return -EINVAL;
    }
    if (t == json_type_double) {
        const double d = json_object_get_double(v);
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            *present = 1;
            return 0;
        }
        openai_error_set(err, 400, key,
                         "'%s': input should be a valid integer, got a number with a fractional "
                         "part or out of range",
                         key);
        return -EINVAL;
    }
    openai_error_set(err, 400, key, "'%s': input should be a valid integer, got %s", key,
                     json_type_label(v));
    return -EINVAL;
}

/* An optional boolean: absent or null leaves *out as it is. */
static int opt_bool(struct json_object *obj, const char *key, int *out, struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_boolean) {
        openai_error_set(err, 400, key, "'%s': input should be a valid boolean, got %s", key,
                         json_type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

/* An optional string: absent or null leaves *out as it is (borrowed from obj). */
static int opt_string(struct json_object *obj, const char *key, const char **out,
                      struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_get_type(v) != json_type_string) {
        openai_error_set(err, 400, key, "'%s': input should be a valid string, got %s", key,
                         json_type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_string(v);
    return 0;
}

/* An optional string that must be one of choices (NULL-terminated; message lists them). */
static int opt_literal(struct json_object *obj, const char *key, const char *const *choices,
                       const char *expected, const char **out, struct openai_error *err)
{
    const char *s = NULL;
    int rc = opt_string(obj, key, &s, err);
    if (rc != 0 || !s) {
        return rc;
    }
    for (size_t i = 0; choices[i]; i++) {
        if (strcmp(s, choices[i]) == 0) {
            *out = choices[i];
            return 0;
        }
    }
    openai_error_set(err, 400, key, "'%s': input should be %s", key, expected);
    return -EINVAL;
}

/* ---- score / rerank inputs ---- */

/* vLLM's ScoreInput: a string, or a ScoreMultiModalParam ({"content": [parts]}). 1 a string, 2
 * a multi-modal object, 0 anything else. */
static int score_input_type(struct json_object *v)
{
    if (json_object_get_type(v) == json_type_string) {
        return 1;
    }
    struct json_object *content;
    if (json_object_get_type(v) == json_type_object && member(v, "content", &content) &&
        json_object_get_type(content) == json_type_array) {
        return 2;
    }
    return 0;
}

/* One side of a score (rerank) request: key's value v, ScoreInput or (list_ok) a list of them.
 * *n gets the element count, *multimodal is set when one is a multi-modal object. */
static int side_check(struct json_object *v, const char *key, bool list_ok, size_t *n,
                      bool *multimodal, struct openai_error *err)
{
    if (json_object_get_type(v) != json_type_array || !list_ok) {
        const int t = score_input_type(v);
        if (t == 0) {
            openai_error_set(err, 400, key,
                             list_ok ? "'%s': input should be a valid string, an object with "
                                       "'content' or a list of those, got %s"
                                     : "'%s': input should be a valid string or an object with "
                                       "'content', got %s",
                             key, json_type_label(v));
            return -EINVAL;
        }
        *multimodal = *multimodal || t == 2;
        *n = 1;
        return 0;
    }
    const size_t len = json_object_array_length(v);
    if (len > SCORING_MAX_TEXTS) {
        openai_error_set(err, 400, key,
                         "'%s': list length %zu exceeds the maximum allowed count of %d.", key, len,
                         SCORING_MAX_TEXTS);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        struct json_object *e = json_object_array_get_idx(v, i);
        const int t = score_input_type(e);
        if (t == 0) {
            openai_error_set(err, 400, key,
                             "'%s[%zu]': input should be a valid string or an object with "
                             "'content', got %s",
                             key, i, json_type_label(e));
            return -EINVAL;
        }
        *multimodal = *multimodal || t == 2;
    }
    *n = len;
    return 0;
}

/* The i-th text of a side (checked by side_check, text only). */
static struct json_object *side_elem(struct json_object *v, size_t i)
{
    return json_object_get_type(v) == json_type_array ? json_object_array_get_idx(v, i) : v;
}

/* The Hugging Face class vLLM names in its messages for a GGUF architecture name. */
static const char *hf_architecture(const char *arch)
{
    static const char *const map[][2] = {
        {"llama", "LlamaForCausalLM"},       {"qwen2", "Qwen2ForCausalLM"},
        {"qwen3", "Qwen3ForCausalLM"},       {"qwen3moe", "Qwen3MoeForCausalLM"},
        {"qwen2moe", "Qwen2MoeForCausalLM"}, {"phi3", "Phi3ForCausalLM"},
        {"gemma2", "Gemma2ForCausalLM"},     {"gemma3", "Gemma3ForCausalLM"},
    };
    for (size_t i = 0; arch && i < ARRAY_SIZE(map); i++) {
        if (strcmp(arch, map[i][0]) == 0) {
            return map[i][1];
        }
    }
    return arch ? arch : "this model";
}

/* The score request's two sides: the first of vLLM's forms (its ScoreRequest union, in order)
 * whose two fields are both given. */
static int score_sides(struct json_object *root, const char **key1, const char **key2,
                       struct openai_error *err)
{
    static const char *const forms[][2] = {
        {"queries", "documents"}, {"queries", "items"}, {"data_1", "data_2"}, {"text_1", "text_2"}};
    struct json_object *v1, *v2;
    for (size_t f = 0; f < ARRAY_SIZE(forms); f++) {
        if (member(root, forms[f][0], &v1) && v1 && member(root, forms[f][1], &v2) && v2) {
            *key1 = forms[f][0];
            *key2 = forms[f][1];
            return 0;
        }
    }
    for (size_t f = 0; f < ARRAY_SIZE(forms); f++) {
        const bool has1 = member(root, forms[f][0], &v1) && v1;
        const bool has2 = member(root, forms[f][1], &v2) && v2;
        if (has1 || has2) {
            const char *missing = has1 ? forms[f][1] : forms[f][0];
            openai_error_set(err, 400, missing, "'%s' is required", missing);
            return -EINVAL;
        }
    }
    openai_error_set(err, 400, "queries",
                     "'queries' and 'documents' are required (or 'queries' and 'items', 'data_1' "
                     "and 'data_2', 'text_1' and 'text_2')");
    return -EINVAL;
}

/* An embedding request's defaults (openai_parse_embedding's) for a body already parsed. */
static void embedding_defaults(struct openai_request *req, struct json_object *root)
{
    memset(req, 0, sizeof(*req));
    req->kind = OPENAI_EMBEDDING;
    req->root = root;
    sampling_params_init(&req->sampling);
    req->sampling.temperature = 0.0f;
    req->n = 1;
    req->logprobs = -1;
    req->skip_special_tokens = 1;
    req->spaces_between_special_tokens = 1;
    req->add_special_tokens = 1; /* vLLM's TokenizeParams default; scoring has no such field */
    req->add_generation_prompt = 1;
    req->embed_normalize = -1;
    req->max_tokens = 1; /* the engine pools the prompt */
    req->max_tokens_set = 1;
}

/* The fields of vLLM's ScoringRequestMixin (PoolingBasicRequestMixin, ClassifyRequestMixin and
 * max_tokens_per_query / max_tokens_per_doc). */
static int scoring_common(struct json_object *root, struct openai_request *req,
                          struct scoring_request *sc, struct openai_error *err)
{
    static const char *const sides[] = {"left", "right", NULL};
    static const char *const paddings[] = {"max_length", "do_not_pad", NULL};
    const char *side = NULL, *padding = NULL;
    int64_t v = 0;
    int present = 0, use_activation = -1;
    int rc;
    if ((rc = opt_string(root, "model", &req->model, err)) != 0 ||
        (rc = opt_string(root, "user", &req->user, err)) != 0 ||
        (rc = opt_literal(root, "truncation_side", sides, "'left' or 'right'", &side, err)) != 0 ||
        (rc = opt_literal(root, "padding", paddings, "'max_length' or 'do_not_pad'", &padding,
                          err)) != 0 ||
        (rc = opt_bool(root, "use_activation", &use_activation, err)) != 0) {
        return rc;
    }
    /* padding is checked only: vLLM's ScoringRequestMixin.build_tok_params does not pass it */
    req->truncate_right = side && strcmp(side, "right") == 0;
    req->embed_normalize = use_activation; /* the embedding's normalisation: no effect on cosines */
    /* vLLM's validate_cache_salt (as /v1/embeddings checks it, openai_parse.c) */
    struct json_object *sv;
    const char *salt = NULL;
    if (member(root, "cache_salt", &sv) && sv) {
        if (json_object_get_type(sv) != json_type_string || json_object_get_string_len(sv) == 0) {
            openai_error_set(err, 400, "cache_salt",
                             "Parameter 'cache_salt' must be a non-empty string if provided.");
            return -EINVAL;
        }
        salt = json_object_get_string(sv);
        const size_t salt_len = (size_t)json_object_get_string_len(sv);
        bool bad = openai_text_chars(salt, salt_len) > OPENAI_MAX_CACHE_SALT;
        for (size_t i = 0; i < salt_len && !bad; i++) {
            bad = salt[i] == '@' || salt[i] == '/' || salt[i] == '\\' || salt[i] == '\0';
        }
        if (bad) {
            openai_error_set(err, 400, "cache_salt",
                             "Parameter 'cache_salt' must be at most %d characters and must not "
                             "contain '@', '/', '\\\\', or NUL.",
                             OPENAI_MAX_CACHE_SALT);
            return -EINVAL;
        }
    }
    req->cache_salt = salt;
    if ((rc = opt_int64(root, "truncate_prompt_tokens", &v, &present, err)) != 0) {
        return rc;
    }
    if (present && v < -1) {
        openai_error_set(err, 400, "truncate_prompt_tokens",
                         "'truncate_prompt_tokens': input should be greater than or equal to -1");
        return -EINVAL;
    }
    req->truncate_prompt_tokens = !present ? 0 : v > INT32_MAX ? INT32_MAX : (int32_t)v;
    if ((rc = opt_int64(root, "priority", &v, &present, err)) != 0) {
        return rc;
    }
    if (present && (v < INT32_MIN || v > INT32_MAX)) {
        openai_error_set(err, 400, "priority", "'priority': integer %" PRId64 " out of range", v);
        return -EINVAL;
    }
    req->priority = present ? (int)v : 0;
    static const char *const limits[] = {"max_tokens_per_query", "max_tokens_per_doc"};
    int64_t *dst[] = {&sc->max_tokens_per_query, &sc->max_tokens_per_doc};
    for (size_t i = 0; i < ARRAY_SIZE(limits); i++) {
        if ((rc = opt_int64(root, limits[i], &v, &present, err)) != 0) {
            return rc;
        }
        if (present && v < 0) { /* vLLM's _validate_token_limit */
            openai_error_set(err, 400, limits[i], "%s must be a non-negative integer", limits[i]);
            return -EINVAL;
        }
        *dst[i] = present ? v : 0;
    }
    return 0;
}

/* The texts of both sides into req->prompts (queries first) and sc->texts. */
static int collect_texts(struct json_object *v1, size_t n1, struct json_object *v2, size_t n2,
                         struct openai_request *req, struct scoring_request *sc,
                         struct openai_error *err)
{
    const size_t n = n1 + n2;
    req->prompts = calloc(n, sizeof(*req->prompts));
    sc->texts = calloc(n, sizeof(*sc->texts));
    sc->text_lens = calloc(n, sizeof(*sc->text_lens));
    if (!req->prompts || !sc->texts || !sc->text_lens) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    req->n_prompts = n;
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = i < n1 ? side_elem(v1, i) : side_elem(v2, i - n1);
        sc->texts[i] = json_object_get_string(e);
        sc->text_lens[i] = (size_t)json_object_get_string_len(e);
        req->prompts[i].text = sc->texts[i];
        req->prompts[i].text_len = sc->text_lens[i];
    }
    sc->n_queries = n1;
    sc->n_docs = n2;
    openai_request_select_prompt(req, 0);
    return 0;
}

/* ScoreRequest / RerankRequest. */
static int score_fields(enum scoring_kind kind, struct json_object *root, const char *arch,
                        struct openai_request *req, struct scoring_request *sc,
                        struct openai_error *err)
{
    const char *key1 = "query", *key2 = "documents";
    struct json_object *v1 = NULL, *v2 = NULL;
    int rc;
    if (kind == SCORING_SCORE) {
        if ((rc = score_sides(root, &key1, &key2, err)) != 0) {
            return rc;
        }
    } else {
        const char *missing = !(member(root, key1, &v1) && v1)   ? key1
                              : !(member(root, key2, &v2) && v2) ? key2
                                                                 : NULL;
        if (missing) {
            openai_error_set(err, 400, missing, "'%s' is required", missing);
            return -EINVAL;
        }
    }
    member(root, key1, &v1);
    member(root, key2, &v2);
    size_t n1 = 0, n2 = 0;
    bool mm = false;
    if ((rc = side_check(v1, key1, kind == SCORING_SCORE, &n1, &mm, err)) != 0 ||
        (rc = side_check(v2, key2, true, &n2, &mm, err)) != 0) {
        return rc;
    }
    if (kind == SCORING_RERANK) {
        int present = 0;
        if ((rc = opt_int64(root, "top_n", &sc->top_n, &present, err)) != 0) {
            return rc;
        }
    }
    if ((rc = scoring_common(root, req, sc, err)) != 0) {
        return rc;
    }
    /* vLLM's validate_score_input: multi-modal inputs, then the lengths */
    if (mm) {
        openai_error_set(err, 400, NULL, "MultiModalParam is not supported for %s",
                         hf_architecture(arch));
        return -EINVAL;
    }
    if (n1 > 1 && n1 != n2) {
        openai_error_set(err, 400, key2, "Input lengths must be either 1:1, 1:N or N:N");
        return -EINVAL;
    }
    if (n1 == 0) {
        openai_error_set(err, 400, key1, "At least one text element must be given");
        return -EINVAL;
    }
    if (n2 == 0) {
        openai_error_set(err, 400, key2, "At least one text_pair element must be given");
        return -EINVAL;
    }
    return collect_texts(v1, n1, v2, n2, req, sc, err);
}

/* PoolingCompletionRequest: /v1/embeddings' fields (use_activation, encoding_format,
 * embed_dtype, endianness, vLLM's removed normalize and task names included), then what /pooling
 * adds or refuses. */
static int pooling_fields(struct openai_request *req, struct openai_error *err)
{
    static const char *const tasks[] = {
        "embed", "classify", "token_embed", "token_classify", "plugin", "embed&token_classify",
        NULL};
    if (req->embed_dimensions > 0) {
        openai_error_set(err, 400, "dimensions", "dimensions is currently not supported");
        return -EINVAL;
    }
    const char *task = NULL;
    int rc = opt_literal(req->root, "task", tasks,
                         "'embed', 'classify', 'token_embed', 'token_classify', 'plugin' or "
                         "'embed&token_classify'",
                         &task, err);
    if (rc != 0) {
        return rc;
    }
    if (task && strcmp(task, "embed") != 0) {
        openai_error_set(err, 400, "task",
                         "Unsupported task: '%s' Supported tasks: ('generate', "
                         "'embed')",
                         task);
        return -EINVAL;
    }
    return 0;
}

int scoring_parse(enum scoring_kind kind, const char *body, size_t len, const char *arch,
                  struct openai_request *req, struct scoring_request *sc, struct openai_error *err)
{
    memset(sc, 0, sizeof(*sc));
    if (kind == SCORING_POOLING) {
        int rc = openai_parse_embedding(body, len, req, err);
        if (rc != 0) {
            return rc;
        }
        sc->kind = kind;
        if ((rc = pooling_fields(req, err)) != 0) {
            openai_request_deinit(req);
        }
        return rc;
    }
    char perr[256];
    struct json_object *root = NULL;
    if (json_parse_one(body, len, &root, perr, sizeof(perr)) != 0) {
        memset(req, 0, sizeof(*req));
        openai_error_set(err, 400, NULL, "invalid JSON body: %s", perr);
        return -EINVAL;
    }
    if (!root || json_object_get_type(root) != json_type_object) {
        openai_error_set(err, 400, NULL, "the request body must be a JSON object, got %s",
                         json_type_label(root));
        json_object_put(root);
        memset(req, 0, sizeof(*req));
        return -EINVAL;
    }
    embedding_defaults(req, root);
    sc->kind = kind;
    int rc = score_fields(kind, root, arch, req, sc, err);
    if (rc != 0) {
        if (rc == -ENOMEM && err->status != 500) {
            openai_error_set(err, 500, NULL, "out of memory");
        }
        scoring_request_deinit(sc);
        openai_request_deinit(req);
    }
    return rc;
}

void scoring_request_deinit(struct scoring_request *sc)
{
    for (size_t i = 0; sc->owned && i < sc->n_queries + sc->n_docs; i++) {
        free(sc->owned[i]);
    }
    free(sc->owned);
    free(sc->texts);
    free(sc->text_lens);
    memset(sc, 0, sizeof(*sc));
}

/* ---- model-dependent checks, max_tokens_per_query / max_tokens_per_doc ---- */

/* vLLM's truncate_text_to_tokens: the text of the first max_tokens tokens (no special tokens). */
static int cut_text(const tokenizer *tok, const char *text, size_t len, int64_t max_tokens,
                    char **out, size_t *out_len, struct openai_error *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    *out = NULL;
    int rc = tokenizer_encode(tok, text, len, false, true, &ids, &n);
    if (rc != 0) {
        openai_error_set(err, rc == -ENOMEM ? 500 : 400, rc == -ENOMEM ? NULL : "prompt",
                         "cannot tokenize the prompt (%s)", tandem_strerror(rc));
        return rc == -ENOMEM ? -ENOMEM : -EINVAL;
    }
    if ((int64_t)n > max_tokens) {
        rc = tokenizer_decode(tok, ids, (size_t)max_tokens, false, out, out_len);
        if (rc != 0) {
            openai_error_set(err, 500, NULL, "cannot cut the text to %" PRId64 " tokens (%s)",
                             max_tokens, tandem_strerror(rc));
            rc = -ENOMEM;
        }
    }
    free(ids);
    return rc;
}

int scoring_prepare(struct scoring_request *sc, struct openai_request *req, const tokenizer *tok,
                    int32_t max_model_len, struct openai_error *err)
{
    if (req->truncate_prompt_tokens > max_model_len) { /* vLLM's _validate_request */
        openai_error_set(err, 400, "truncate_prompt_tokens",
                         "truncate_prompt_tokens value is greater than max_model_len. Please "
                         "request a smaller truncation size.");
        return -EINVAL;
    }
    if (sc->kind != SCORING_SCORE && sc->kind != SCORING_RERANK) {
        return 0;
    }
    static const char *const names[] = {"max_tokens_per_query", "max_tokens_per_doc"};
    const int64_t limits[] = {sc->max_tokens_per_query, sc->max_tokens_per_doc};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (limits[i] != 0 && limits[i] >= max_model_len) {
            openai_error_set(err, 400, names[i],
                             "%s (%" PRId64 ") must be less than "
                             "max_model_len (%d).",
                             names[i], limits[i], (int)max_model_len);
            return -EINVAL;
        }
    }
    if (limits[0] <= 0 && limits[1] <= 0) {
        return 0;
    }
    const size_t n = sc->n_queries + sc->n_docs;
    sc->owned = calloc(n, sizeof(*sc->owned));
    if (!sc->owned) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n && i < req->n_prompts; i++) {
        const int64_t limit = i < sc->n_queries ? limits[0] : limits[1];
        size_t len = 0;
        if (limit <= 0) {
            continue;
        }
        int rc = cut_text(tok, sc->texts[i], sc->text_lens[i], limit, &sc->owned[i], &len, err);
        if (rc != 0) {
            return rc;
        }
        if (sc->owned[i]) {
            req->prompts[i].text = sc->owned[i];
            req->prompts[i].text_len = len;
        }
    }
    openai_request_select_prompt(req, 0);
    return 0;
}

/* ---- answers ---- */

const char *scoring_id_prefix(enum scoring_kind kind)
{
    return kind == SCORING_POOLING ? "pooling-" : "score-";
}

float scoring_cosine(const float *a, const float *b, size_t dims)
{
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < dims; i++) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    const double den = fmax(sqrt(na), SCORING_COSINE_EPS) * fmax(sqrt(nb), SCORING_COSINE_EPS);
    return (float)(dot / den);
}

static void put_string(struct buf *out, const char *s)
{
    openai_json_string(out, s ? s : "", s ? strlen(s) : 0);
}

/* "usage" of score and pooling answers: vLLM's UsageInfo with prompt tokens only. */
static void put_usage(struct buf *out, int64_t prompt_tokens)
{
    buf_appendf(out,
                "\"usage\":{\"prompt_tokens\":%" PRId64 ",\"total_tokens\":%" PRId64
                ",\"completion_tokens\":0,\"prompt_tokens_details\":null}",
                prompt_tokens, prompt_tokens);
}

/* One scored pair: its document's index and score. */
struct scored {
    size_t index;
    float score;
};

/* Best first; equal scores in document order (Python's stable sort with reverse=True). */
static int scored_cmp(const void *pa, const void *pb)
{
    const struct scored *a = pa, *b = pb;
    if (a->score != b->score) {
        return a->score > b->score ? -1 : 1;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

static int build_pooling(const struct scoring_output *o, struct buf *out)
{
    const bool base64 = o->fmt && o->fmt->encoding == OPENAI_EMBED_BASE64;
    const size_t size = base64 ? o->dims * openai_embed_dtype_size(o->fmt->dtype) : 0;
    uint8_t *enc = base64 ? malloc(size ? size : 1) : NULL;
    if (base64 && !enc) {
        return -ENOMEM;
    }
    int64_t tokens = 0;
    buf_appends(out, "{\"id\":");
    put_string(out, o->id);
    buf_appendf(out, ",\"object\":\"list\",\"created\":%" PRId64 ",\"model\":", o->created);
    put_string(out, o->model);
    buf_appends(out, ",\"data\":[");
    for (size_t i = 0; i < o->n; i++) {
        buf_appendf(out, "%s{\"index\":%zu,\"object\":\"pooling\",\"data\":", i ? "," : "", i);
        if (base64) { /* vLLM's encode_pooling_output_base64: embed_dtype, endianness */
            openai_embed_encode(o->vecs[i], o->dims, o->fmt, enc);
            buf_appends(out, "\"");
            openai_put_base64(out, enc, size);
            buf_appends(out, "\"");
        } else {
            buf_appends(out, "[");
            for (size_t d = 0; d < o->dims; d++) {
                if (d) {
                    buf_appends(out, ",");
                }
                openai_put_embed_float(out, o->vecs[i][d]);
            }
            buf_appends(out, "]");
        }
        buf_appends(out, "}");
        tokens += o->n_tokens[i];
    }
    buf_appends(out, "],");
    put_usage(out, tokens);
    buf_appends(out, "}");
    free(enc);
    return buf_error(out);
}

int scoring_build(const struct scoring_request *sc, const struct scoring_output *o, struct buf *out)
{
    if (sc->kind == SCORING_POOLING) {
        return build_pooling(o, out);
    }
    const size_t nq = sc->n_queries, nd = sc->n_docs;
    if ((sc->kind != SCORING_SCORE && sc->kind != SCORING_RERANK) || nq == 0 || nd == 0 ||
        (nq != 1 && nq != nd) || o->n != nq + nd || !sc->texts) {
        return -EINVAL;
    }
    struct scored *pairs = calloc(nd, sizeof(*pairs));
    if (!pairs) {
        return -ENOMEM;
    }
    int64_t tokens = 0;
    for (size_t i = 0; i < nd; i++) {
        const size_t q = nq == 1 ? 0 : i;
        pairs[i].index = i;
        pairs[i].score = scoring_cosine(o->vecs[q], o->vecs[nq + i], o->dims);
        tokens += (int64_t)o->n_tokens[q] + (o->pad_token ? 1 : 0) + o->n_tokens[nq + i];
    }
    buf_appends(out, "{\"id\":");
    put_string(out, o->id);
    if (sc->kind == SCORING_SCORE) {
        buf_appendf(out, ",\"object\":\"list\",\"created\":%" PRId64 ",\"model\":", o->created);
        put_string(out, o->model);
        buf_appends(out, ",\"data\":[");
        for (size_t i = 0; i < nd; i++) {
            buf_appendf(out, "%s{\"index\":%zu,\"object\":\"score\",\"score\":", i ? "," : "", i);
            openai_put_repr_float(out, pairs[i].score, 0);
            buf_appends(out, "}");
        }
        buf_appends(out, "],");
        put_usage(out, tokens);
        buf_appends(out, "}");
    } else {
        /* vLLM: top_n > 0 keeps that many (all when more than the documents) */
        const size_t keep = sc->top_n > 0 && (uint64_t)sc->top_n < nd ? (size_t)sc->top_n : nd;
        qsort(pairs, nd, sizeof(*pairs), scored_cmp);
        buf_appends(out, ",\"model\":");
        put_string(out, o->model);
        buf_appendf(out,
                    ",\"usage\":{\"prompt_tokens\":%" PRId64 ",\"total_tokens\":%" PRId64
                    "},\"results\":[",
                    tokens, tokens);
        for (size_t k = 0; k < keep; k++) {
            const size_t d = nq + pairs[k].index;
            buf_appendf(out, "%s{\"index\":%zu,\"document\":{\"text\":", k ? "," : "",
                        pairs[k].index);
            openai_json_string(out, sc->texts[d], sc->text_lens[d]);
            buf_appends(out, ",\"multi_modal\":null},\"relevance_score\":");
            openai_put_repr_float(out, pairs[k].score, 0);
            buf_appends(out, "}");
        }
        buf_appends(out, "]}");
    }
    free(pairs);
    return buf_error(out);
}
