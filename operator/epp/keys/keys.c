/*
 * Block keys from a model server's /tokenizer_info answer (see keys.h). The answer is parsed
 * with json-c; the tokenizer is loaded by the engine's loaders, the template compiled by the
 * engine's template engine, prompts built by engine/server/prompt.c and hashed by the engine's
 * kvc (a two-block pool that only ever hashes), so nothing here re-implements the engine.
 */
#include "operator/epp/keys/keys.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "engine/cache/kvcache.h"
#include "engine/model/gguf.h"
#include "engine/server/openai.h"
#include "engine/server/prompt.h"
#include "engine/server/tokenizer_info.h"
#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/buf.h"
#include "lib/err.h"

struct epp_keys {
    tokenizer *tok;
    struct chat_template *ct;
    kvc *hasher; /* only kvc_hash_block is used: it carries block_size and the seeded chain */
    struct prompt_ctx pc;
    char *bos_token, *eos_token;
    char *model;
    char tokenizer_sha256[65];
    int32_t block_size;
    int32_t max_model_len;
    uint64_t hash_seed;
    bool prefix_caching;
};

/* ---- the answer's fields ---- */

static int field(struct json_object *o, const char *name, json_type t, bool nullable,
                 struct json_object **out, char *err, size_t errlen)
{
    static const char *const tnames[] = {"null",   "a boolean", "a number", "an integer",
                                         "object", "array",     "a string"};
    struct json_object *v = NULL;
    if (!json_object_object_get_ex(o, name, &v)) {
        tandem_set_err(err, errlen, "tokenizer_info: '%s' is missing", name);
        return -EINVAL;
    }
    if (!v && nullable) {
        *out = NULL;
        return 0;
    }
    if (!v || !json_object_is_type(v, t)) {
        tandem_set_err(err, errlen, "tokenizer_info: '%s' must be %s%s", name, tnames[t],
                       nullable ? " or null" : "");
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static int str_field(struct json_object *o, const char *name, bool nullable, const char **out,
                     size_t *len, char *err, size_t errlen)
{
    struct json_object *v;
    int rc = field(o, name, json_type_string, nullable, &v, err, errlen);
    /* a required string is never NULL, even on error, so callers need no NULL checks */
    *out = rc == 0 && v ? json_object_get_string(v) : nullable ? NULL : "";
    if (len) {
        *len = rc == 0 && v ? (size_t)json_object_get_string_len(v) : 0;
    }
    return rc;
}

static int int_field(struct json_object *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                     char *err, size_t errlen)
{
    struct json_object *v;
    int rc = field(o, name, json_type_int, false, &v, err, errlen);
    if (rc != 0) {
        return rc;
    }
    *out = json_object_get_int64(v);
    if (*out < lo || *out > hi) {
        tandem_set_err(err, errlen,
                       "tokenizer_info: '%s' must be in [%" PRId64 ", %" PRId64 "], got %" PRId64,
                       name, lo, hi, *out);
        return -EINVAL;
    }
    return 0;
}

static int scheme_check(struct json_object *o, char *err, size_t errlen)
{
    const char *scheme;
    int64_t version;
    int rc = str_field(o, "scheme", false, &scheme, NULL, err, errlen);
    rc = rc ? rc : int_field(o, "scheme_version", 0, INT32_MAX, &version, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (strcmp(scheme, TOKENIZER_INFO_SCHEME) != 0 || version != TOKENIZER_INFO_SCHEME_VERSION) {
        tandem_set_err(err, errlen,
                       "tokenizer_info: block-hash scheme '%s' version %" PRId64
                       " is not the one this EPP computes ('%s' version %d)",
                       scheme, version, TOKENIZER_INFO_SCHEME, TOKENIZER_INFO_SCHEME_VERSION);
        return -EINVAL;
    }
    return 0;
}

static int seed_field(struct json_object *o, uint64_t *seed, char *err, size_t errlen)
{
    const char *s;
    int rc = str_field(o, "hash_seed", false, &s, NULL, err, errlen);
    if (rc != 0) {
        return rc;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!s[0] || s[0] == '-' || *end || errno == ERANGE) {
        tandem_set_err(err, errlen,
                       "tokenizer_info: 'hash_seed' must be a decimal uint64, got '%s'", s);
        return -EINVAL;
    }
    *seed = (uint64_t)v;
    return 0;
}

/* ---- the tokenizer ---- */

static void sha256_hex(const void *a, size_t alen, const void *b, size_t blen, char out[65])
{
    unsigned char md[32];
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(c, a, alen) != 1 ||
        EVP_DigestUpdate(c, b, blen) != 1 || EVP_DigestFinal_ex(c, md, NULL) != 1) {
        out[0] = '\0';
    } else {
        for (size_t i = 0; i < sizeof md; i++) {
            static const char digits[] = "0123456789abcdef";
            out[2 * i] = digits[md[i] >> 4];
            out[2 * i + 1] = digits[md[i] & 15];
        }
        out[64] = '\0';
    }
    EVP_MD_CTX_free(c);
}

static int b64_decode(const char *s, size_t len, uint8_t **out, size_t *out_len, char *err,
                      size_t errlen)
{
    if (len % 4 != 0 || len > INT32_MAX) {
        tandem_set_err(err, errlen, "tokenizer_info: 'tokenizer' is not base64 (length %zu)", len);
        return -EINVAL;
    }
    *out = malloc(len / 4 * 3 + 1);
    if (!*out) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int n = EVP_DecodeBlock(*out, (const unsigned char *)s, (int)len);
    if (n < 0) {
        free(*out);
        *out = NULL;
        tandem_set_err(err, errlen, "tokenizer_info: 'tokenizer' is not base64");
        return -EINVAL;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes */
    size_t pad = (len > 0 && s[len - 1] == '=') + (len > 1 && s[len - 2] == '=');
    *out_len = (size_t)n - pad;
    return 0;
}

/* Owned copies of a GGUF vocabulary's arrays (the file's may be unaligned). */
struct vocab_copy {
    model_gguf_vocab v;
    char *model, *pre;
    float *scores;
    int32_t *types;
};

static int opt_id(const gguf_ctx *g, const char *key, int32_t *out, char *err, size_t errlen)
{
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err, errlen);
    *out = rc == 0 && v <= INT32_MAX ? (int32_t)v : -1;
    return rc == -ENOENT ? 0 : rc;
}

static int opt_flag(const gguf_ctx *g, const char *key, int *out, char *err, size_t errlen)
{
    bool v;
    int rc = gguf_get_bool(g, key, &v, err, errlen);
    *out = rc == 0 ? v : -1;
    return rc == -ENOENT ? 0 : rc;
}

static int opt_array(const gguf_ctx *g, const char *key, gguf_type t, size_t n, void **out,
                     char *err, size_t errlen)
{
    const gguf_kv *kv;
    int rc = gguf_get_arr(g, key, t, &kv, err, errlen);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc == 0 && kv->n != n) {
        tandem_set_err(err, errlen, "%s: %" PRIu64 " entries for %zu tokens", key, kv->n, n);
        rc = -EINVAL;
    }
    if (rc != 0) {
        return rc;
    }
    *out = malloc(n ? n * 4 : 1);
    if (!*out) {
        return -ENOMEM;
    }
    memcpy(*out, kv->data, n * 4);
    return 0;
}

static int vocab_read(const gguf_ctx *g, struct vocab_copy *c, char *err, size_t errlen)
{
    model_gguf_vocab *v = &c->v;
    model_str s;
    const gguf_kv *kv;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &s, err, errlen);
    c->model = rc == 0 ? strndup(s.s, s.len) : NULL;
    rc = rc ? rc : gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, err, errlen);
    if (rc != 0 || !c->model) {
        return rc ? rc : -ENOMEM;
    }
    v->model = c->model;
    v->tokens = kv->strs;
    v->n_tokens = (size_t)kv->n;
    rc = gguf_get_str(g, "tokenizer.ggml.pre", &s, err, errlen);
    if (rc == 0 && !(c->pre = strndup(s.s, s.len))) {
        return -ENOMEM;
    }
    v->pre = c->pre;
    rc = rc == -ENOENT ? 0 : rc;
    rc = rc ? rc : gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kv, err, errlen);
    if (rc == 0) {
        v->merges = kv->strs;
        v->n_merges = (size_t)kv->n;
    }
    rc = rc == -ENOENT ? 0 : rc;
    rc = rc ? rc
            : opt_array(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->n_tokens,
                        (void **)&c->scores, err, errlen);
    rc = rc ? rc
            : opt_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->n_tokens,
                        (void **)&c->types, err, errlen);
    v->scores = c->scores;
    v->token_types = c->types;
    rc = rc ? rc : opt_id(g, "tokenizer.ggml.bos_token_id", &v->bos_id, err, errlen);
    rc = rc ? rc : opt_id(g, "tokenizer.ggml.eos_token_id", &v->eos_id, err, errlen);
    rc = rc ? rc : opt_id(g, "tokenizer.ggml.unknown_token_id", &v->unk_id, err, errlen);
    rc = rc ? rc : opt_id(g, "tokenizer.ggml.padding_token_id", &v->pad_id, err, errlen);
    rc = rc ? rc : opt_id(g, "tokenizer.ggml.eot_token_id", &v->eot_id, err, errlen);
    rc = rc ? rc : opt_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen);
    rc = rc ? rc : opt_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen);
    rc =
        rc ? rc : opt_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err, errlen);
    return rc;
}

static int load_gguf_tokenizer(const char *b64, size_t len, const char *sha, tokenizer **tok,
                               char *err, size_t errlen)
{
    uint8_t *bytes = NULL;
    size_t n = 0;
    int rc = b64_decode(b64, len, &bytes, &n, err, errlen);
    if (rc != 0) {
        return rc;
    }
    char got[65];
    sha256_hex(bytes, n, "", 0, got);
    if (strcmp(got, sha) != 0) {
        free(bytes);
        tandem_set_err(err, errlen,
                       "tokenizer_info: the tokenizer bytes do not match "
                       "'tokenizer_sha256' (truncated or altered)");
        return -EINVAL;
    }
    char e[256] = "";
    gguf_ctx *g = gguf_open_buffer(bytes, n, "tokenizer_info", e, sizeof e);
    struct vocab_copy c;
    memset(&c, 0, sizeof c);
    rc = g ? vocab_read(g, &c, e, sizeof e) : -EINVAL;
    rc = rc ? rc : tokenizer_load_gguf(&c.v, tok, e, sizeof e);
    if (rc != 0) {
        tandem_set_err(err, errlen, "tokenizer_info: 'tokenizer' (gguf): %s",
                       e[0] ? e : tandem_strerror(rc));
    }
    gguf_close(g);
    free(c.model);
    free(c.pre);
    free(c.scores);
    free(c.types);
    free(bytes);
    return rc;
}

static int load_tokenizer(struct json_object *o, struct epp_keys *k, char *err, size_t errlen)
{
    const char *fmt, *tj, *tc, *sha;
    size_t tj_len, tc_len;
    int rc = str_field(o, "tokenizer_format", false, &fmt, NULL, err, errlen);
    rc = rc ? rc : str_field(o, "tokenizer", false, &tj, &tj_len, err, errlen);
    rc = rc ? rc : str_field(o, "tokenizer_config", true, &tc, &tc_len, err, errlen);
    rc = rc ? rc : str_field(o, "tokenizer_sha256", false, &sha, NULL, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (strlen(sha) != 64) {
        tandem_set_err(err, errlen, "tokenizer_info: 'tokenizer_sha256' must be 64 hex digits");
        return -EINVAL;
    }
    memcpy(k->tokenizer_sha256, sha, 65);
    if (strcmp(fmt, "gguf") == 0) {
        return load_gguf_tokenizer(tj, tj_len, sha, &k->tok, err, errlen);
    }
    if (strcmp(fmt, "hf") != 0) {
        tandem_set_err(err, errlen,
                       "tokenizer_info: 'tokenizer_format' must be \"hf\" or \"gguf\", "
                       "got '%s'",
                       fmt);
        return -EINVAL;
    }
    char got[65];
    sha256_hex(tj, tj_len, tc ? tc : "", tc_len, got);
    if (strcmp(got, sha) != 0) {
        tandem_set_err(err, errlen,
                       "tokenizer_info: the tokenizer bytes do not match "
                       "'tokenizer_sha256' (truncated or altered)");
        return -EINVAL;
    }
    char e[256] = "";
    rc = tokenizer_load_hf_mem(tj, tj_len, tc, tc_len, "tokenizer_info", &k->tok, e, sizeof e);
    if (rc != 0) {
        tandem_set_err(err, errlen, "tokenizer_info: 'tokenizer': %s", e);
    }
    return rc;
}

/* ---- building ---- */

static int keys_fill(struct json_object *o, struct epp_keys *k, char *err, size_t errlen)
{
    int64_t bs, mml;
    const char *name, *tmpl, *bos, *eos;
    struct json_object *pcache;
    int rc = scheme_check(o, err, errlen);
    rc = rc ? rc : int_field(o, "block_size", 1, KVC_MAX_BLOCK_SIZE, &bs, err, errlen);
    rc = rc ? rc : int_field(o, "max_model_len", 1, INT32_MAX, &mml, err, errlen);
    rc = rc ? rc : seed_field(o, &k->hash_seed, err, errlen);
    rc = rc ? rc : field(o, "prefix_caching", json_type_boolean, false, &pcache, err, errlen);
    rc = rc ? rc : str_field(o, "model", false, &name, NULL, err, errlen);
    rc = rc ? rc : str_field(o, "chat_template", false, &tmpl, NULL, err, errlen);
    rc = rc ? rc : str_field(o, "bos_token", true, &bos, NULL, err, errlen);
    rc = rc ? rc : str_field(o, "eos_token", true, &eos, NULL, err, errlen);
    rc = rc ? rc : load_tokenizer(o, k, err, errlen);
    if (rc != 0) {
        return rc;
    }
    k->block_size = (int32_t)bs;
    k->max_model_len = (int32_t)mml;
    k->prefix_caching = json_object_get_boolean(pcache);
    k->model = strdup(name);
    k->bos_token = bos ? strdup(bos) : NULL;
    k->eos_token = eos ? strdup(eos) : NULL;
    k->hasher = kvc_new(2, k->block_size, true, k->hash_seed, NULL);
    if (!k->model || (bos && !k->bos_token) || (eos && !k->eos_token) || !k->hasher) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char e[512] = "";
    k->ct = chat_template_new(tmpl, k->bos_token, k->eos_token, e, sizeof e);
    if (!k->ct) {
        tandem_set_err(err, errlen, "tokenizer_info: 'chat_template': %s", e);
        return -EINVAL;
    }
    k->pc = (struct prompt_ctx){
        .tok = k->tok, .ct = k->ct, .bos_token = k->bos_token, .eos_token = k->eos_token};
    return 0;
}

struct epp_keys *epp_keys_new(const char *answer, size_t len, char *err, size_t errlen)
{
    if (len > EPP_KEYS_MAX_ANSWER || len > INT32_MAX) {
        tandem_set_err(err, errlen, "tokenizer_info: answer of %zu bytes is too large", len);
        return NULL;
    }
    struct json_tokener *t = json_tokener_new_ex(64);
    if (!t) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    struct json_object *o = json_tokener_parse_ex(t, answer ? answer : "", (int)len);
    enum json_tokener_error je = json_tokener_get_error(t);
    size_t used = json_tokener_get_parse_end(t);
    json_tokener_free(t);
    if (!o || je != json_tokener_success || used != len ||
        !json_object_is_type(o, json_type_object)) {
        tandem_set_err(err, errlen, "tokenizer_info: the answer is not one JSON object (%s)",
                       je != json_tokener_success ? json_tokener_error_desc(je)
                                                  : "trailing bytes or another type");
        json_object_put(o);
        return NULL;
    }
    struct epp_keys *k = calloc(1, sizeof *k);
    int rc = k ? keys_fill(o, k, err, errlen) : -ENOMEM;
    json_object_put(o);
    if (rc != 0) {
        if (!k) {
            tandem_set_err(err, errlen, "out of memory");
        }
        epp_keys_free(k);
        return NULL;
    }
    return k;
}

void epp_keys_free(struct epp_keys *k)
{
    if (!k) {
        return;
    }
    tokenizer_free(k->tok);
    chat_template_free(k->ct);
    kvc_free(k->hasher);
    free(k->bos_token);
    free(k->eos_token);
    free(k->model);
    free(k);
}

int32_t epp_keys_block_size(const struct epp_keys *k)
{
    return k->block_size;
}

uint64_t epp_keys_hash_seed(const struct epp_keys *k)
{
    return k->hash_seed;
}

const char *epp_keys_model(const struct epp_keys *k)
{
    return k->model;
}

int32_t epp_keys_max_model_len(const struct epp_keys *k)
{
    return k->max_model_len;
}

const char *epp_keys_tokenizer_sha256(const struct epp_keys *k)
{
    return k->tokenizer_sha256;
}

bool epp_keys_prefix_caching(const struct epp_keys *k)
{
    return k->prefix_caching;
}

/* ---- a request's keys ---- */

static int hash_blocks(const struct epp_keys *k, const int32_t *ids, size_t n, const char *salt,
                       const char *lora, uint64_t **keys, size_t *n_keys)
{
    size_t nb = k->prefix_caching ? n / (size_t)k->block_size : 0;
    *keys = malloc((nb ? nb : 1) * sizeof **keys);
    if (!*keys) {
        return -ENOMEM;
    }
    /* as kvc_seq_init: an empty salt or lora name counts as none */
    kvc_hash salt_h = salt && salt[0] ? kvc_hash_string(salt) : 0;
    kvc_hash lora_h = lora && lora[0] ? kvc_hash_string(lora) : 0;
    for (size_t i = 0; i < nb; i++) {
        (*keys)[i] = kvc_hash_block(
            k->hasher, i ? &(*keys)[i - 1] : NULL, ids + i * (size_t)k->block_size, k->block_size,
            lora && lora[0] ? &lora_h : NULL, i == 0 && salt && salt[0] ? &salt_h : NULL);
    }
    *n_keys = nb;
    return 0;
}

static void openai_err_text(const struct openai_error *oe, char *err, size_t errlen)
{
    tandem_set_err(err, errlen, "%s%s%s", oe->param[0] ? oe->param : "", oe->param[0] ? ": " : "",
                   oe->message);
}

int epp_keys_for_request(const struct epp_keys *k, const char *path, const char *body, size_t len,
                         const char *lora_name, int32_t **tokens, size_t *n_tokens,
                         uint64_t **block_keys, size_t *n_keys, char *err, size_t errlen)
{
    *tokens = NULL;
    *block_keys = NULL;
    *n_tokens = *n_keys = 0;
    bool chat = path && strcmp(path, "/v1/chat/completions") == 0;
    if (!path || (!chat && strcmp(path, "/v1/completions") != 0)) {
        tandem_set_err(err, errlen, "no block keys for path '%s'", path ? path : "(null)");
        return -EINVAL;
    }
    struct openai_request o;
    struct openai_error oe;
    memset(&oe, 0, sizeof oe);
    int rc = chat ? openai_parse_chat(body ? body : "", len, &o, &oe)
                  : openai_parse_completion(body ? body : "", len, &o, &oe);
    if (rc != 0) {
        openai_err_text(&oe, err, errlen);
        return rc;
    }
    char *text = NULL;
    size_t text_len = 0;
    rc = prompt_build(&k->pc, &o, tokens, n_tokens, &text, &text_len, &oe);
    free(text);
    if (rc != 0) {
        openai_err_text(&oe, err, errlen);
    } else if (*n_tokens >= (size_t)k->max_model_len) {
        tandem_set_err(err, errlen, "%s: %zu prompt tokens exceed the model's context of %d",
                       chat ? "messages" : "prompt", *n_tokens, (int)k->max_model_len);
        rc = -EINVAL;
    } else {
        rc = hash_blocks(k, *tokens, *n_tokens, o.cache_salt, lora_name, block_keys, n_keys);
        if (rc != 0) {
            tandem_set_err(err, errlen, "out of memory");
        }
    }
    openai_request_deinit(&o);
    if (rc != 0) {
        free(*tokens);
        *tokens = NULL;
        *n_tokens = 0;
    }
    return rc;
}

/* ---- fetching ---- */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    return buf_append(b, p, size * n) == 0 ? size * n : 0;
}

struct epp_keys *epp_keys_fetch(const char *base_url, long timeout_ms, char *err, size_t errlen)
{
    char url[1024];
    size_t bl = strlen(base_url);
    while (bl > 0 && base_url[bl - 1] == '/') {
        bl--;
    }
    if (bl + sizeof "/tokenizer_info" > sizeof url) {
        tandem_set_err(err, errlen, "tokenizer_info: url too long");
        return NULL;
    }
    snprintf(url, sizeof url, "%.*s/tokenizer_info", (int)bl, base_url);
    CURL *c = curl_easy_init();
    if (!c) {
        tandem_set_err(err, errlen, "tokenizer_info: curl_easy_init failed");
        return NULL;
    }
    struct buf b;
    buf_init(&b, EPP_KEYS_MAX_ANSWER);
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    struct epp_keys *k = NULL;
    if (cc != CURLE_OK) {
        tandem_set_err(err, errlen, "GET %s: %s", url, cerr[0] ? cerr : curl_easy_strerror(cc));
    } else if (status != 200) {
        tandem_set_err(err, errlen, "GET %s: HTTP %ld", url, status);
    } else {
        k = epp_keys_new(b.data, b.len, err, errlen);
    }
    buf_free(&b);
    return k;
}
