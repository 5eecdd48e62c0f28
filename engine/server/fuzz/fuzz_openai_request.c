/*
 * Fuzz target for engine/server/openai.h's parsers: the same bytes go through the completion,
 * chat, tokenize and detokenize parsers. Each must either succeed with a consistent request
 * (defaults in range, arrays as long as their counts) or fail with a 400/500 error that has a
 * message; accepted requests are then echoed through the builders, whose output must be valid
 * JSON. Any crash, leak or failed check aborts.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/server/openai.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_openai_request: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_valid_json(const struct buf *b)
{
    char err[256];
    struct json_object *o = json_parse(buf_cstr(b), b->len, err, sizeof(err));
    /* a token holding a NUL byte is a "\u0000" key in completions' top_logprobs, as vLLM writes
     * it: valid JSON that json-c (C-string keys) cannot hold, so lib's parser refuses it */
    if (!o && strstr(err, "object key contains \\u0000")) {
        return;
    }
    if (!o) {
        fprintf(stderr, "invalid JSON built (%s): %s\n", err, buf_cstr(b));
        abort();
    }
    json_object_put(o);
}

static void check_error(int rc, const struct openai_error *err)
{
    CHECK(rc == -EINVAL || rc == -ENOMEM);
    CHECK(err->status == 400 || err->status == 500);
    CHECK(err->message[0] != '\0');
    struct buf b;
    buf_init(&b, 1 << 16);
    CHECK(openai_error_body(err, &b) == 0);
    check_valid_json(&b);
    buf_free(&b);
}

/* Builds a response whose texts come from the request (arbitrary bytes) and checks it. */
static void echo_request(const struct openai_request *r)
{
    const char *text = r->prompt_text ? r->prompt_text : "";
    size_t text_len = r->prompt_text ? r->prompt_text_len : 0;
    if (r->n_messages > 0 && r->messages[0].content) {
        text = r->messages[0].content;
        text_len = r->messages[0].content_len;
    }
    struct openai_top_logprob top = {text, text_len, -1.0f, 3};
    struct openai_token_logprob lp[2] = {{text, text_len, 0.0f, NULL, 0, 2, 1},
                                         {text, text_len, -0.5f, &top, 1, 4, 0}};
    /* prompt_logprobs: the request's text as the decoded tokens */
    const struct openai_prompt_logprob pos = {4, text, text_len, -INFINITY, 7, &top, 1};
    const struct openai_prompt_logprobs plp = {&pos, 1};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = text;
    ch.text_len = text_len;
    ch.finish = OPENAI_FINISH_STOP;
    ch.stop_str = r->n_stop ? r->stop[0] : NULL;
    ch.logprobs = r->logprobs >= 0 ? lp + !r->echo : NULL; /* an echo's: the prompt's too */
    ch.n_logprobs = r->echo ? 2 : 1;
    ch.prompt_logprobs = r->has_prompt_logprobs ? &plp : NULL;
    struct openai_meta meta = {.id = "id",
                               .model = r->model,
                               .created = 1,
                               .kv_transfer_params = r->kv_transfer_params,
                               .tokens_as_ids = r->return_tokens_as_token_ids,
                               .return_token_ids = r->return_token_ids,
                               .prompt_logprobs = r->has_prompt_logprobs ? &plp : NULL};
    static const int32_t ids[] = {1, 2, 3};
    ch.token_ids = ids;
    ch.n_token_ids = 3;
    ch.prompt_token_ids = r->n_prompt_tokens ? ids : NULL;
    ch.n_prompt_token_ids = r->n_prompt_tokens ? 2 : 0;
    meta.prompt_token_ids = ids;
    meta.n_prompt_token_ids = 1;
    struct openai_usage usage = {1, 2, 3};
    struct buf b;
    buf_init(&b, 1 << 24);
    CHECK(openai_build_completion(&meta, &ch, 1, &usage, &b) == 0);
    check_valid_json(&b);
    buf_reset(&b);
    CHECK(openai_build_chat(&meta, &ch, 1, &usage, &b) == 0);
    check_valid_json(&b);
    buf_reset(&b);
    CHECK(openai_build_chat_chunk(&meta, &ch, 1, 0, &usage, &b) == 0);
    check_valid_json(&b);
    buf_reset(&b);
    CHECK(openai_build_chat_chunk(&meta, &ch, 1, 1, NULL, &b) == 0);
    check_valid_json(&b);
    buf_reset(&b);
    CHECK(openai_build_completion_chunk(&meta, &ch, 1, NULL, &b) == 0);
    check_valid_json(&b);
    buf_free(&b);
}

/* A structured-output constraint turns into a grammar, or a 400 naming its field; what the
 * JSON-schema, regex and choice front ends write always compiles (a user's GBNF may not). */
static void check_guide(const struct openai_request *r)
{
    if (r->guide.kind == OPENAI_GUIDE_NONE) {
        return;
    }
    CHECK(r->guide.param[0] != '\0');
    struct buf gbnf;
    buf_init(&gbnf, (size_t)1 << 20);
    struct openai_error err;
    int rc = openai_guide_gbnf(&r->guide, &gbnf, &err);
    if (rc != 0) {
        check_error(rc, &err);
    } else {
        grammar *g = NULL;
        char msg[256] = "";
        rc = grammar_compile(gbnf.data, gbnf.len, NULL, &g, msg, sizeof msg);
        if (rc != 0 && r->guide.kind != OPENAI_GUIDE_GRAMMAR && rc != -E2BIG) {
            fprintf(stderr, "front end wrote a grammar that does not compile (%s):\n%s\n", msg,
                    gbnf.data);
            abort();
        }
        grammar_free(g);
    }
    buf_free(&gbnf);
}

static void check_request(const struct openai_request *r)
{
    CHECK(r->root != NULL);
    CHECK(r->n >= 1 && r->n <= OPENAI_MAX_N);
    CHECK(r->sampling.temperature >= 0.0f);
    CHECK(r->sampling.top_p > 0.0f && r->sampling.top_p <= 1.0f);
    CHECK(r->sampling.top_k >= -1);
    CHECK(r->sampling.min_p >= 0.0f && r->sampling.min_p <= 1.0f);
    CHECK(r->sampling.repetition_penalty > 0.0f);
    CHECK(r->logprobs >= -1 && r->logprobs <= OPENAI_MAX_LOGPROBS);
    CHECK(r->sampling.logprobs == r->logprobs);
    CHECK(!r->max_tokens_set || r->max_tokens >= 1);
    CHECK(!r->max_tokens_set || r->sampling.min_tokens <= r->max_tokens);
    CHECK(r->n_stop <= OPENAI_MAX_STOP);
    for (size_t i = 0; i < r->n_stop; i++) {
        CHECK(r->stop[i] != NULL && strlen(r->stop[i]) <= OPENAI_MAX_STOP_LEN);
    }
    for (size_t i = 0; i < r->n_stop_token_ids; i++) {
        CHECK(r->stop_token_ids[i] >= 0);
    }
    if (r->kind == OPENAI_COMPLETION) {
        CHECK((r->prompt_text != NULL) != (r->prompt_tokens != NULL));
        CHECK(r->n_prompts >= 1 && r->n_prompts <= OPENAI_MAX_PROMPTS);
        CHECK(r->n_prompts * (size_t)r->n <= OPENAI_MAX_CHOICES);
        for (size_t i = 0; i < r->n_prompts; i++) { /* every prompt is text or non-empty ids */
            CHECK((r->prompts[i].tokens != NULL) != (r->prompts[i].text != NULL));
            CHECK(!r->prompts[i].tokens || r->prompts[i].n_tokens > 0);
        }
    }
    for (size_t i = 0; i < r->n_bias; i++) {
        CHECK(r->bias_vals[i] >= -100.0f && r->bias_vals[i] <= 100.0f);
        for (size_t j = 0; j < i; j++) {
            CHECK(r->bias_ids[j] != r->bias_ids[i]);
        }
    }
    for (size_t i = 0; i < r->n_messages; i++) {
        CHECK(r->messages[i].role != NULL);
    }
    echo_request(r);
    check_guide(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct openai_request r;
    struct openai_error err;
    int rc = openai_parse_completion(body, size, &r, &err);
    if (rc == 0) {
        CHECK(r.kind == OPENAI_COMPLETION);
        check_request(&r);
        openai_request_deinit(&r);
    } else {
        check_error(rc, &err);
    }
    rc = openai_parse_chat(body, size, &r, &err);
    if (rc == 0) {
        CHECK(r.kind == OPENAI_CHAT && r.n_messages > 0);
        check_request(&r);
        openai_request_deinit(&r);
    } else {
        check_error(rc, &err);
    }
    rc = openai_parse_embedding(body, size, &r, &err);
    if (rc == 0) {
        CHECK(r.kind == OPENAI_EMBEDDING && r.n_prompts > 0 && r.max_tokens == 1);
        openai_request_deinit(&r);
    } else {
        check_error(rc, &err);
    }
    int strs;
    rc = openai_parse_tokenize(body, size, &r, &strs, &err);
    if (rc == 0) {
        openai_request_deinit(&r);
    } else {
        check_error(rc, &err);
    }
    struct json_object *root;
    const char *model;
    int32_t *toks;
    size_t n;
    rc = openai_parse_detokenize(body, size, &root, &model, &toks, &n, &err);
    if (rc == 0) {
        struct buf b;
        buf_init(&b, 1 << 24);
        CHECK(openai_build_tokenize(toks, n, 8, NULL, NULL, &b) == 0);
        check_valid_json(&b);
        buf_free(&b);
        free(toks);
        json_object_put(root);
    } else {
        check_error(rc, &err);
    }
    return 0;
}
