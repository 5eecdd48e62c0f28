/*
 * tandem-tokenize: encodes a JSON-lines corpus ({"text": "..."} per line) with a tokenizer.json or
 * a GGUF model's vocabulary and prints one JSON line per input, {"ids": [...]} (plus "decoded"
 * with --decode), the same shape as engine/reference/hf_tokenize.mjs. --bench FILE encodes a
 * whole file and reports tokens/s on stderr.
 *
 *   tandem-tokenize (--hf DIR|tokenizer.json | --gguf FILE | --gguf-vocab FILE)
 *                   (--corpus FILE | --bench FILE)
 *                   [--no-special] [--no-parse-special] [--decode] [--repeat N]
 * --no-special: no BOS/EOS added; --no-parse-special: special-token text is plain text.
 * --gguf loads the file as a model (engine/model) and takes its vocabulary; --gguf-vocab reads
 * only the tokenizer.ggml.* keys (a vocabulary-only GGUF, as llama.cpp's vocab_only loads), with
 * the keys model_gguf_vocab does not carry (precompiled_charsmap, remove_extra_whitespaces,
 * add_sep_token, seperator_token_id, normalizer.lowercase/strip_accents) as well.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#ifdef TANDEM_HAVE_MODEL
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#endif
#include "lib/version.h"

#ifdef TANDEM_HAVE_MODEL
/* An optional integer key (any integer type) into *out (-1 absent). */
static int vocab_int(const gguf_ctx *g, const char *key, int32_t *out, char *err, size_t errlen)
{
    int rc = gguf_get_i32(g, key, out, err, errlen);
    if (rc == -ENOENT) {
        *out = -1;
        return 0;
    }
    return rc;
}

static int vocab_flag(const gguf_ctx *g, const char *key, int *out, char *err, size_t errlen)
{
    bool b = false;
    int rc = gguf_get_bool(g, key, &b, err, errlen);
    *out = rc == 0 ? b : -1;
    return rc == -ENOENT ? 0 : rc;
}

/* A per-token array of 4-byte elements copied into owned memory (NULL when absent). */
static int vocab_arr4(const gguf_ctx *g, const char *key, gguf_type elem, size_t n, void **out,
                      char *err, size_t errlen)
{
    const gguf_kv *kv;
    *out = NULL;
    int rc = gguf_get_arr(g, key, elem, &kv, err, errlen);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc == 0 && kv->n != n) {
        snprintf(err, errlen, "%s: %llu entries for %zu tokens", key, (unsigned long long)kv->n, n);
        rc = -EINVAL;
    }
    if (rc == 0) {
        *out = malloc(n * 4 + 4);
        rc = *out ? 0 : -ENOMEM;
    }
    if (rc == 0) {
        memcpy(*out, kv->data, n * 4);
    }
    return rc;
}

/* Reads the tokenizer.ggml.* keys of a GGUF file (no tensors needed) into a tokenizer. */
static int load_gguf_vocab(const char *path, tokenizer **t, char *err, size_t errlen)
{
    gguf_ctx *g = gguf_open(path, err, errlen);
    if (!g) {
        return -EINVAL;
    }
    model_gguf_vocab v;
    memset(&v, 0, sizeof(v));
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    model_str ms = {0}, ps = {0};
    char *name = NULL, *pre = NULL;
    void *scores = NULL, *types = NULL;
    const gguf_kv *kv;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &ms, err, errlen);
    if (rc == 0) {
        name = strndup(ms.s, ms.len);
        rc = gguf_get_str(g, "tokenizer.ggml.pre", &ps, err, errlen);
        pre = rc == 0 ? strndup(ps.s, ps.len) : NULL;
        rc = rc == -ENOENT ? 0 : rc;
    }
    if (rc == 0) {
        rc = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, err, errlen);
    }
    if (rc == 0) {
        v.tokens = kv->strs;
        v.n_tokens = (size_t)kv->n;
        rc = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kv, err, errlen);
        if (rc == 0) {
            v.merges = kv->strs;
            v.n_merges = (size_t)kv->n;
        }
        rc = rc == -ENOENT ? 0 : rc;
    }
    if (rc == 0) {
        rc = vocab_arr4(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.n_tokens, &scores, err,
                        errlen);
    }
    if (rc == 0) {
        rc = vocab_arr4(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.n_tokens, &types, err,
                        errlen);
    }
    if (rc == 0) {
        rc = gguf_get_arr(g, "tokenizer.ggml.precompiled_charsmap", GGUF_TYPE_COUNT, &kv, err,
                          errlen);
        if (rc == 0 && kv->arr_type != GGUF_TYPE_UINT8 && kv->arr_type != GGUF_TYPE_INT8) {
            snprintf(err, errlen, "tokenizer.ggml.precompiled_charsmap: expected u8 or i8 array");
            rc = -EINVAL;
        } else if (rc == 0) {
            x.precompiled_charsmap = kv->data;
            x.charsmap_len = (size_t)kv->n;
        }
        rc = rc == -ENOENT ? 0 : rc;
    }
    const struct {
        const char *key;
        int32_t *id;
    } ids[] = {{"tokenizer.ggml.bos_token_id", &v.bos_id},
               {"tokenizer.ggml.eos_token_id", &v.eos_id},
               {"tokenizer.ggml.unknown_token_id", &v.unk_id},
               {"tokenizer.ggml.padding_token_id", &v.pad_id},
               {"tokenizer.ggml.eot_token_id", &v.eot_id},
               {"tokenizer.ggml.seperator_token_id", &x.sep_id}};
    for (size_t i = 0; i < ARRAY_SIZE(ids) && rc == 0; i++) {
        rc = vocab_int(g, ids[i].key, ids[i].id, err, errlen);
    }
    const struct {
        const char *key;
        int *flag;
    } flags[] = {{"tokenizer.ggml.add_bos_token", &v.add_bos},
                 {"tokenizer.ggml.add_eos_token", &v.add_eos},
                 {"tokenizer.ggml.add_sep_token", &x.add_sep},
                 {"tokenizer.ggml.add_space_prefix", &v.add_space_prefix},
                 {"tokenizer.ggml.remove_extra_whitespaces", &x.remove_extra_whitespaces},
                 {"tokenizer.ggml.normalizer.lowercase", &x.lowercase},
                 {"tokenizer.ggml.normalizer.strip_accents", &x.strip_accents}};
    for (size_t i = 0; i < ARRAY_SIZE(flags) && rc == 0; i++) {
        rc = vocab_flag(g, flags[i].key, flags[i].flag, err, errlen);
    }
    if (rc == 0) {
        v.model = name;
        v.pre = pre;
        v.scores = scores;
        v.token_types = types;
        rc = tokenizer_load_gguf_ext(&v, &x, t, err, errlen);
    }
    free(name);
    free(pre);
    free(scores);
    free(types);
    gguf_close(g);
    return rc;
}
#endif

static int usage(void)
{
    fprintf(stderr, "usage: tandem-tokenize (--hf DIR|tokenizer.json | --gguf FILE | "
                    "--gguf-vocab FILE) "
                    "(--corpus FILE | --bench FILE) [--no-special] [--no-parse-special] [--decode] "
                    "[--repeat N]\n");
    return 2;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) {
        fclose(f);
        return NULL;
    }
    for (;;) {
        if (n == cap) {
            char *nb = cap < ((size_t)1 << 30) ? tandem_grow(b, &cap, n + 1, 1, 0) : NULL;
            if (!nb) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = nb;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static int run_corpus(const tokenizer *t, const char *corpus, bool special, bool parse_special,
                      bool decode)
{
    size_t len = 0;
    char *data = slurp(corpus, &len);
    if (!data) {
        fprintf(stderr, "%s: cannot read\n", corpus);
        return 1;
    }
    int status = 0;
    size_t line_no = 0;
    for (char *line = data; line < data + len && status == 0;) {
        char *nl = memchr(line, '\n', (size_t)(data + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(data + len - line);
        line_no++;
        if (ll == 0) {
            line = nl ? nl + 1 : data + len;
            continue;
        }
        char err[256];
        struct json_object *o = json_parse(line, ll, err, sizeof(err));
        struct json_object *tv = o ? json_get(o, "text") : NULL;
        if (!tv || !json_object_is_type(tv, json_type_string)) {
            fprintf(stderr, "%s:%zu: expected {\"text\": string} %s\n", corpus, line_no, err);
            json_object_put(o);
            status = 1;
            break;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        int rc =
            tokenizer_encode(t, json_object_get_string(tv), (size_t)json_object_get_string_len(tv),
                             special, parse_special, &ids, &n);
        if (rc) {
            fprintf(stderr, "%s:%zu: encode failed: %s\n", corpus, line_no, tandem_strerror(rc));
            json_object_put(o);
            status = 1;
            break;
        }
        struct json_object *rec = json_object_new_object();
        struct json_object *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            json_object_array_add(arr, json_object_new_int(ids[i]));
        }
        json_object_object_add(rec, "ids", arr);
        if (decode) {
            char *text = NULL;
            size_t tl = 0;
            rc = tokenizer_decode(t, ids, n, false, &text, &tl);
            if (rc == 0) {
                json_object_object_add(rec, "decoded", json_object_new_string_len(text, (int)tl));
            }
            free(text);
        }
        printf("%s\n", json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN |
                                                               JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(rec);
        json_object_put(o);
        free(ids);
        line = nl ? nl + 1 : data + len;
    }
    free(data);
    return status;
}

static int run_bench(const tokenizer *t, const char *path, int repeat)
{
    size_t len = 0;
    char *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    size_t total = 0;
    double t0 = tandem_now_s();
    for (int r = 0; r < repeat; r++) {
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = tokenizer_encode(t, data, len, false, false, &ids, &n);
        free(ids);
        if (rc) {
            fprintf(stderr, "encode failed: %s\n", tandem_strerror(rc));
            free(data);
            return 1;
        }
        total += n;
    }
    double dt = tandem_now_s() - t0;
    fprintf(stderr, "%zu bytes x %d: %zu tokens in %.3f s = %.0f tokens/s, %.2f MB/s\n", len,
            repeat, total, dt, (double)total / dt, (double)len * repeat / dt / 1e6);
    free(data);
    return 0;
}

int main(int argc, char **argv)
{
    const char *hf = NULL, *gguf = NULL, *gguf_vocab = NULL, *corpus = NULL, *bench = NULL;
    bool special = true, decode = false, parse_special = true;
    int repeat = 1;
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tandem-tokenize %s\n", TANDEM_VERSION);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hf") == 0 && i + 1 < argc) {
            hf = argv[++i];
        } else if (strcmp(argv[i], "--gguf") == 0 && i + 1 < argc) {
            gguf = argv[++i];
        } else if (strcmp(argv[i], "--gguf-vocab") == 0 && i + 1 < argc) {
            gguf_vocab = argv[++i];
        } else if (strcmp(argv[i], "--corpus") == 0 && i + 1 < argc) {
            corpus = argv[++i];
        } else if (strcmp(argv[i], "--bench") == 0 && i + 1 < argc) {
            bench = argv[++i];
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--no-special") == 0) {
            special = false;
        } else if (strcmp(argv[i], "--no-parse-special") == 0) {
            parse_special = false;
        } else if (strcmp(argv[i], "--decode") == 0) {
            decode = true;
        } else {
            return usage();
        }
    }
    if ((!!hf + !!gguf + !!gguf_vocab != 1) || (!corpus == !bench) || repeat < 1) {
        return usage();
    }
    char err[512] = "";
    tokenizer *t = NULL;
    int rc;
    if (hf) {
        rc = tokenizer_load_hf(hf, NULL, &t, err, sizeof(err));
    } else if (gguf_vocab) {
#ifdef TANDEM_HAVE_MODEL
        rc = load_gguf_vocab(gguf_vocab, &t, err, sizeof(err));
#else
        snprintf(err, sizeof(err), "%s: built without engine/model (tandem_model)", gguf_vocab);
        rc = -ENOTSUP;
#endif
    } else {
#ifdef TANDEM_HAVE_MODEL
        model *m = model_load(gguf, err, sizeof(err));
        rc = m ? tokenizer_from_model(m, &t, err, sizeof(err)) : -EINVAL;
        model_free(m);
#else
        snprintf(err, sizeof(err), "%s: built without engine/model (tandem_model)", gguf);
        rc = -ENOTSUP;
#endif
    }
    if (rc) {
        fprintf(stderr, "tandem-tokenize: %s\n", err);
        return 1;
    }
    int status = corpus ? run_corpus(t, corpus, special, parse_special, decode)
                        : run_bench(t, bench, repeat);
    tokenizer_free(t);
    return status;
}
