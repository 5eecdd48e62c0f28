/*
 * The /tokenizer_info answer (see tokenizer_info.h). The tokenizer travels in the form the
 * engine's own loaders read, so a client reproduces the engine's tokenizer instead of trusting a
 * copy of it: tokenizer.json as it is, or the GGUF vocabulary rewritten with the GGUF writer.
 */
#include "engine/server/tokenizer_info.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "engine/model/gguf_writer.h"
#include "lib/err.h"

static int read_whole(const char *path, struct buf *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tandem_set_err(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -errno ? -errno : -EIO;
    }
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (buf_append(out, chunk, n) != 0) {
            break;
        }
    }
    int rc = ferror(f) ? -EIO : buf_error(out);
    fclose(f);
    if (rc != 0) {
        tandem_set_err(err, errlen, "%s: cannot read (%s)", path, tandem_strerror(rc));
    }
    return rc;
}

static int gguf_vocab_keys(gguf_writer *w, const model_gguf_vocab *v)
{
    const char **toks = calloc(v->n_tokens ? v->n_tokens : 1, sizeof *toks);
    uint32_t *lens = calloc(v->n_tokens ? v->n_tokens : 1, sizeof *lens);
    const char **merges = calloc(v->n_merges ? v->n_merges : 1, sizeof *merges);
    uint32_t *mlens = calloc(v->n_merges ? v->n_merges : 1, sizeof *mlens);
    int rc = -ENOMEM;
    if (!toks || !lens || !merges || !mlens) {
        goto out;
    }
    for (size_t i = 0; i < v->n_tokens; i++) {
        toks[i] = v->tokens[i].s;
        lens[i] = v->tokens[i].len;
    }
    for (size_t i = 0; i < v->n_merges; i++) {
        merges[i] = v->merges[i].s;
        mlens[i] = v->merges[i].len;
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->model ? v->model : "");
    rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, v->n_tokens);
    if (rc == 0 && v->pre) {
        rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    }
    if (rc == 0 && v->scores) {
        rc = gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", v->scores, v->n_tokens);
    }
    if (rc == 0 && v->token_types) {
        rc = gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v->token_types, v->n_tokens);
    }
    if (rc == 0 && v->merges) {
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, mlens, v->n_merges);
    }
out:
    free(toks);
    free(lens);
    free(merges);
    free(mlens);
    return rc;
}

static int gguf_vocab_scalars(gguf_writer *w, const model_gguf_vocab *v)
{
    static const char *const id_keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.eot_token_id"};
    const int32_t ids[] = {v->bos_id, v->eos_id, v->unk_id, v->pad_id, v->eot_id};
    static const char *const flag_keys[] = {"tokenizer.ggml.add_bos_token",
                                            "tokenizer.ggml.add_eos_token",
                                            "tokenizer.ggml.add_space_prefix"};
    const int flags[] = {v->add_bos, v->add_eos, v->add_space_prefix};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof ids / sizeof ids[0]; i++) {
        if (ids[i] >= 0) {
            rc = gguf_writer_set_u32(w, id_keys[i], (uint32_t)ids[i]);
        }
    }
    for (size_t i = 0; rc == 0 && i < sizeof flags / sizeof flags[0]; i++) {
        if (flags[i] >= 0) {
            rc = gguf_writer_set_bool(w, flag_keys[i], flags[i] != 0);
        }
    }
    return rc;
}

/* The writer only writes files: an anonymous memory file keeps this off the disk. */
static int writer_bytes(gguf_writer *w, uint8_t **data, size_t *len, char *err, size_t errlen)
{
    int fd = memfd_create("tokenizer-gguf", MFD_CLOEXEC);
    if (fd < 0) {
        tandem_set_err(err, errlen, "cannot create a memory file (%s)", strerror(errno));
        return -errno;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = gguf_writer_write_file(w, path, err, errlen);
    struct buf b;
    buf_init(&b, (size_t)1 << 31);
    if (rc == 0) {
        rc = read_whole(path, &b, err, errlen);
    }
    close(fd);
    if (rc != 0) {
        buf_free(&b);
        return rc;
    }
    *data = (uint8_t *)b.data;
    *len = b.len;
    return 0;
}

int tokenizer_info_gguf_bytes(const model_gguf_vocab *v, uint8_t **data, size_t *len, char *err,
                              size_t errlen)
{
    gguf_writer *w = gguf_writer_new(0);
    if (!w) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = gguf_vocab_keys(w, v);
    rc = rc ? rc : gguf_vocab_scalars(w, v);
    if (rc != 0) {
        tandem_set_err(err, errlen, "cannot write the GGUF vocabulary (%s)", tandem_strerror(rc));
    } else {
        rc = writer_bytes(w, data, len, err, errlen);
    }
    gguf_writer_free(w);
    return rc;
}

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    }
}

/* The tokenizer's bytes as they travel: "tokenizer" and "tokenizer_config" values and the hash. */
static int tokenizer_payload(const struct tokenizer_info_params *p, struct json_object *o,
                             char *err, size_t errlen)
{
    struct buf tj, tc;
    buf_init(&tj, TOKENIZER_MAX_JSON_BYTES);
    buf_init(&tc, TOKENIZER_MAX_JSON_BYTES);
    uint8_t *gg = NULL;
    size_t gg_len = 0;
    char *b64 = NULL;
    int rc;
    if (p->m->format == MODEL_FORMAT_HF) {
        rc = read_whole(p->m->hf_tokenizer_json, &tj, err, errlen);
        if (rc == 0 && p->m->hf_tokenizer_config) {
            rc = read_whole(p->m->hf_tokenizer_config, &tc, err, errlen);
        }
    } else {
        rc = tokenizer_info_gguf_bytes(&p->m->vocab, &gg, &gg_len, err, errlen);
    }
    if (rc != 0) {
        goto out;
    }
    unsigned char md[32];
    char md_hex[65];
    EVP_MD_CTX *sc = EVP_MD_CTX_new();
    if (!sc || EVP_DigestInit_ex(sc, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(sc);
        rc = -ENOMEM;
        goto out;
    }
    if (gg) {
        EVP_DigestUpdate(sc, gg, gg_len);
        b64 = malloc(4 * ((gg_len + 2) / 3) + 1);
        if (!b64) {
            EVP_MD_CTX_free(sc);
            rc = -ENOMEM;
            goto out;
        }
        EVP_EncodeBlock((unsigned char *)b64, gg, (int)gg_len);
        json_object_object_add(o, "tokenizer_format", json_object_new_string("gguf"));
        json_object_object_add(o, "tokenizer", json_object_new_string(b64));
        json_object_object_add(o, "tokenizer_config", NULL);
    } else {
        EVP_DigestUpdate(sc, tj.data, tj.len);
        EVP_DigestUpdate(sc, tc.data ? tc.data : "", tc.len);
        json_object_object_add(o, "tokenizer_format", json_object_new_string("hf"));
        json_object_object_add(o, "tokenizer", json_object_new_string_len(tj.data, (int)tj.len));
        json_object_object_add(o, "tokenizer_config",
                               p->m->hf_tokenizer_config
                                   ? json_object_new_string_len(tc.data ? tc.data : "", (int)tc.len)
                                   : NULL);
    }
    EVP_DigestFinal_ex(sc, md, NULL);
    EVP_MD_CTX_free(sc);
    hex(md, sizeof md, md_hex);
    json_object_object_add(o, "tokenizer_sha256", json_object_new_string(md_hex));
out:
    buf_free(&tj);
    buf_free(&tc);
    free(gg);
    free(b64);
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "out of memory");
    }
    return rc;
}

static struct json_object *str_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

int tokenizer_info_build(const struct tokenizer_info_params *p, struct buf *out, char *etag,
                         size_t etag_len, char *err, size_t errlen)
{
    struct json_object *o = json_object_new_object();
    if (!o) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char seed[24];
    snprintf(seed, sizeof seed, "%" PRIu64, p->hash_seed);
    json_object_object_add(o, "scheme", json_object_new_string(TOKENIZER_INFO_SCHEME));
    json_object_object_add(o, "scheme_version", json_object_new_int(TOKENIZER_INFO_SCHEME_VERSION));
    json_object_object_add(o, "model", json_object_new_string(p->served_model_name));
    json_object_object_add(o, "max_model_len", json_object_new_int(p->max_model_len));
    json_object_object_add(o, "block_size", json_object_new_int(p->block_size));
    json_object_object_add(o, "hash_seed", json_object_new_string(seed));
    json_object_object_add(o, "prefix_caching", json_object_new_boolean(p->prefix_caching));
    json_object_object_add(o, "chat_template", json_object_new_string(p->chat_template));
    json_object_object_add(o, "bos_token", str_or_null(p->m->bos_token));
    json_object_object_add(o, "eos_token", str_or_null(p->m->eos_token));
    json_object_object_add(o, "bos_token_id", json_object_new_int(tokenizer_bos(p->tok)));
    json_object_object_add(o, "eos_token_id", json_object_new_int(tokenizer_eos(p->tok)));
    json_object_object_add(o, "add_bos_token", json_object_new_boolean(tokenizer_adds_bos(p->tok)));
    json_object_object_add(o, "add_eos_token", json_object_new_boolean(tokenizer_adds_eos(p->tok)));
    int rc = tokenizer_payload(p, o, err, errlen);
    if (rc == 0) {
        size_t n = 0;
        const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &n);
        rc = s ? buf_append(out, s, n) : -ENOMEM;
        if (rc != 0) {
            tandem_set_err(err, errlen, "cannot hold the answer (%s)", tandem_strerror(rc));
        }
    }
    if (rc == 0) {
        unsigned char md[32];
        char md_hex[65];
        EVP_Digest(out->data, out->len, md, NULL, EVP_sha256(), NULL);
        hex(md, sizeof md, md_hex);
        snprintf(etag, etag_len, "\"%s\"", md_hex);
    }
    json_object_put(o);
    return rc;
}
