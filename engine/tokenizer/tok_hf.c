/*
 * Hugging Face tokenizer.json (+ tokenizer_config.json) → struct tokenizer. Reads the model
 * (BPE vocab, merges, options), added_tokens, normalizer, pre_tokenizer, post_processor and
 * decoder; anything unsupported is an error naming the field.
 */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/tokenizer/tok_internal.h"
#include "lib/base64.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"

typedef struct hf_ctx {
    tokenizer *t;
    const char *what; /* file name for messages */
    char *err;
    size_t errlen;
} hf_ctx;

/* err = "<what>: <field>: <msg>" with the message from a json_get_* failure. */
static int hf_fail(hf_ctx *c, int rc, const char *field, const char *msg)
{
    return tandem_fail(c->err, c->errlen, rc, "%s: %s%s%s", c->what, field, *msg ? ": " : "", msg);
}

#define TOK_MAX_GAP 65536 /* unused ids a vocabulary may have beyond one per token */

/* Metaspace's replacement is a Rust `char` in Hugging Face tokenizers: a file whose replacement
 * is empty or longer than one character does not load there, and does not load here. */
static int check_one_char(hf_ctx *c, const char *s, const char *field, const char *key)
{
    char f[300];
    snprintf(f, sizeof(f), "%s.%s", field, key);
    size_t n = strlen(s);
    if (n == 0 || tandem_utf8_seq_len((const unsigned char *)s, n) != n) {
        return hf_fail(c, -EINVAL, f, "must be exactly one character");
    }
    return 0;
}

/* An empty String pattern matches between every two characters in Hugging Face tokenizers (its
 * content is inserted everywhere); no real tokenizer does that, so it is refused by name. */
static int check_pattern_nonempty(hf_ctx *c, const char *str, size_t len, const char *field)
{
    char f[300];
    snprintf(f, sizeof(f), "%s.pattern.String", field);
    return str && len == 0 ? hf_fail(c, -EINVAL, f, "an empty pattern is not supported") : 0;
}

/* Fetches an optional string/bool at key of obj; errors are prefixed with field. */
static int opt_bool(hf_ctx *c, struct json_object *obj, const char *key, const char *field,
                    bool def, bool *out)
{
    char e[256];
    int v = 0;
    int rc = json_opt_bool(obj, key, def, &v, e, sizeof(e));
    if (rc) {
        return hf_fail(c, rc, field, e);
    }
    *out = v != 0;
    return 0;
}

static int get_str(hf_ctx *c, struct json_object *obj, const char *key, const char *field,
                   bool required, const char **out)
{
    char e[256];
    int rc = required ? json_get_string(obj, key, out, e, sizeof(e))
                      : json_opt_string(obj, key, NULL, out, e, sizeof(e));
    return rc ? hf_fail(c, rc, field, e) : 0;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* pattern: {"String": s} or {"Regex": r}. Fills either *re or *str. */
static int parse_pattern(hf_ctx *c, struct json_object *obj, const char *field, pcre2_code **re,
                         char **str, size_t *str_len)
{
    char f[256];
    snprintf(f, sizeof(f), "%s.pattern", field);
    struct json_object *p = json_get(obj, "pattern");
    if (!p || !json_object_is_type(p, json_type_object)) {
        return hf_fail(c, -EINVAL, f, "expected an object with String or Regex");
    }
    const char *s = NULL;
    int rc = get_str(c, p, "String", f, false, &s);
    if (rc) {
        return rc;
    }
    if (s) {
        *str_len = strlen(s);
        *str = dupn(s, *str_len);
        return *str ? 0 : -ENOMEM;
    }
    rc = get_str(c, p, "Regex", f, true, &s);
    if (rc) {
        return rc;
    }
    snprintf(f, sizeof(f), "%s.pattern.Regex", field);
    char e[256];
    *re = tok__compile(s, strlen(s), e, sizeof(e), f);
    return *re ? 0 : hf_fail(c, -EINVAL, "", e);
}

typedef int (*hf_step_fn)(hf_ctx *c, struct json_object *n, const char *field);

/* A "Sequence" normalizer / pre-tokenizer / decoder / post-processor: every element of the
 * array n[key] goes through add, named "<field>.<key>[i]" in errors. */
static int add_sequence(hf_ctx *c, struct json_object *n, const char *key, const char *field,
                        hf_step_fn add)
{
    struct json_object *arr = NULL;
    char e[256];
    int rc = json_get_array(n, key, &arr, e, sizeof(e));
    if (rc) {
        return hf_fail(c, rc, field, e);
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        char f[256];
        snprintf(f, sizeof(f), "%s.%s[%zu]", field, key, i);
        rc = add(c, json_object_array_get_idx(arr, i), f);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

static int add_norm(hf_ctx *c, struct json_object *n, const char *field)
{
    tokenizer *t = c->t;
    if (!n) {
        return 0;
    }
    const char *type = NULL;
    int rc = get_str(c, n, "type", field, true, &type);
    if (rc) {
        return rc;
    }
    char f[256];
    if (strcmp(type, "Sequence") == 0) {
        return add_sequence(c, n, "normalizers", field, add_norm);
    }
    tok__norm nm = {0};
    if (strcmp(type, "NFC") == 0) {
        nm.kind = TOK_NORM_NFC;
    } else if (strcmp(type, "NFD") == 0) {
        nm.kind = TOK_NORM_NFD;
    } else if (strcmp(type, "NFKC") == 0) {
        nm.kind = TOK_NORM_NFKC;
    } else if (strcmp(type, "NFKD") == 0) {
        nm.kind = TOK_NORM_NFKD;
    } else if (strcmp(type, "Lowercase") == 0) {
        nm.kind = TOK_NORM_LOWERCASE;
    } else if (strcmp(type, "StripAccents") == 0) {
        nm.kind = TOK_NORM_STRIP_ACCENTS;
    } else if (strcmp(type, "Strip") == 0) {
        bool left = true, right = true;
        if ((rc = opt_bool(c, n, "strip_left", field, true, &left)) ||
            (rc = opt_bool(c, n, "strip_right", field, true, &right))) {
            return rc;
        }
        nm.kind = TOK_NORM_STRIP;
        nm.flags = (left ? 1U : 0U) | (right ? 2U : 0U);
    } else if (strcmp(type, "BertNormalizer") == 0) {
        bool clean = true, chinese = true, lower = true, accents = false;
        struct json_object *sa = json_get(n, "strip_accents");
        if ((rc = opt_bool(c, n, "clean_text", field, true, &clean)) ||
            (rc = opt_bool(c, n, "handle_chinese_chars", field, true, &chinese)) ||
            (rc = opt_bool(c, n, "lowercase", field, true, &lower))) {
            return rc;
        }
        if (sa && !json_object_is_type(sa, json_type_null)) {
            if ((rc = opt_bool(c, n, "strip_accents", field, false, &accents))) {
                return rc;
            }
        } else {
            accents = lower; /* HF: strip_accents defaults to lowercase */
        }
        nm.kind = TOK_NORM_BERT;
        nm.flags = (clean ? TOK_BERT_CLEAN : 0U) | (chinese ? TOK_BERT_CHINESE : 0U) |
                   (accents ? TOK_BERT_ACCENTS : 0U) | (lower ? TOK_BERT_LOWER : 0U);
    } else if (strcmp(type, "Precompiled") == 0) {
        struct json_object *pc = json_get(n, "precompiled_charsmap");
        snprintf(f, sizeof(f), "%s.precompiled_charsmap", field);
        if (!pc || json_object_is_type(pc, json_type_null) ||
            (json_object_is_type(pc, json_type_string) && json_object_get_string_len(pc) == 0)) {
            return 0; /* no charsmap: the identity */
        }
        if (!json_object_is_type(pc, json_type_string)) {
            return hf_fail(c, -EINVAL, f, "expected a base64 string");
        }
        if (t->charsmap.size > 0) {
            return hf_fail(c, -EINVAL, f, "more than one Precompiled normalizer");
        }
        uint8_t *bin = NULL;
        size_t bin_len = 0;
        rc = tandem_base64_decode(json_object_get_string(pc),
                                  (size_t)json_object_get_string_len(pc), &bin, &bin_len);
        if (rc == -EINVAL) {
            return hf_fail(c, -EINVAL, f, "not valid base64");
        }
        if (rc) {
            return rc;
        }
        char e[300];
        rc = tok__charsmap_init(&t->charsmap, bin, bin_len, f, e, sizeof(e));
        free(bin);
        if (rc) {
            return tandem_fail(c->err, c->errlen, rc, "%s: %s", c->what, e);
        }
        nm.kind = TOK_NORM_PRECOMPILED;
    } else if (strcmp(type, "Prepend") == 0) {
        const char *s;
        snprintf(f, sizeof(f), "%s", field);
        rc = get_str(c, n, "prepend", f, true, &s);
        if (rc) {
            return rc;
        }
        nm.kind = TOK_NORM_PREPEND;
        nm.pat_len = strlen(s);
        nm.pat = dupn(s, nm.pat_len);
        if (!nm.pat) {
            return -ENOMEM;
        }
    } else if (strcmp(type, "Replace") == 0) {
        const char *with;
        nm.kind = TOK_NORM_REPLACE;
        rc = parse_pattern(c, n, field, &nm.re, &nm.pat, &nm.pat_len);
        if (rc == 0) {
            rc = check_pattern_nonempty(c, nm.pat, nm.pat_len, field);
        }
        if (rc == 0) {
            rc = get_str(c, n, "content", field, true, &with);
        }
        if (rc == 0) {
            nm.with_len = strlen(with);
            nm.with = dupn(with, nm.with_len);
            rc = nm.with ? 0 : -ENOMEM;
        }
        if (rc) {
            pcre2_code_free(nm.re);
            free(nm.pat);
            free(nm.with);
            return rc;
        }
    } else {
        snprintf(f, sizeof(f), "unsupported normalizer type \"%s\"", type);
        return hf_fail(c, -EINVAL, field, f);
    }
    tok__norm *a = realloc(t->norms, (t->n_norms + 1) * sizeof(*a));
    if (!a) {
        pcre2_code_free(nm.re);
        free(nm.pat);
        free(nm.with);
        return -ENOMEM;
    }
    t->norms = a;
    a[t->n_norms++] = nm;
    return 0;
}

static int push_pre(tokenizer *t, tok__pre *p)
{
    tok__pre *a = realloc(t->pres, (t->n_pres + 1) * sizeof(*a));
    if (!a) {
        pcre2_code_free(p->re);
        free(p->str);
        return -ENOMEM;
    }
    t->pres = a;
    a[t->n_pres++] = *p;
    return 0;
}

static int add_pre(hf_ctx *c, struct json_object *n, const char *field)
{
    tokenizer *t = c->t;
    if (!n) {
        return 0;
    }
    const char *type = NULL;
    int rc = get_str(c, n, "type", field, true, &type);
    if (rc) {
        return rc;
    }
    char f[256];
    if (t->byte_level) {
        return hf_fail(c, -EINVAL, field, "steps after ByteLevel are not supported");
    }
    if (strcmp(type, "Sequence") == 0) {
        return add_sequence(c, n, "pretokenizers", field, add_pre);
    }
    tok__pre p = {0};
    if (strcmp(type, "Split") == 0) {
        const char *beh = NULL;
        p.kind = TOK_PRE_SPLIT;
        rc = get_str(c, n, "behavior", field, true, &beh);
        if (rc == 0) {
            rc = opt_bool(c, n, "invert", field, false, &p.invert);
        }
        if (rc) {
            return rc;
        }
        static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious",
                                            "MergedWithNext", "Contiguous"};
        size_t k = 0;
        while (k < ARRAY_SIZE(names) && strcmp(names[k], beh) != 0) {
            k++;
        }
        if (k == ARRAY_SIZE(names)) {
            snprintf(f, sizeof(f), "unknown behavior \"%s\"", beh);
            return hf_fail(c, -EINVAL, field, f);
        }
        p.behavior = (tok__behavior)k;
        rc = parse_pattern(c, n, field, &p.re, &p.str, &p.str_len);
        if (rc == 0) {
            rc = check_pattern_nonempty(c, p.str, p.str_len, field);
        }
        if (rc) {
            pcre2_code_free(p.re);
            free(p.str);
            return rc;
        }
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        p.kind = TOK_PRE_WHITESPACE_SPLIT;
    } else if (strcmp(type, "BertPreTokenizer") == 0) {
        p.kind = TOK_PRE_BERT;
    } else if (strcmp(type, "Whitespace") == 0) {
        /* HF: the matches of \w+|[^\w\s]+ are the words, the rest is dropped */
        static const char ws[] = "\\w+|[^\\w\\s]+";
        p.kind = TOK_PRE_SPLIT;
        p.behavior = TOK_SPLIT_REMOVED;
        p.invert = true;
        p.re = tok__compile(ws, strlen(ws), c->err, c->errlen, field);
        if (!p.re) {
            return -EINVAL;
        }
    } else if (strcmp(type, "Digits") == 0) {
        bool individual = false;
        rc = opt_bool(c, n, "individual_digits", field, false, &individual);
        if (rc) {
            return rc;
        }
        const char *pat = individual ? "[0-9]" : "[0-9]+";
        p.kind = TOK_PRE_SPLIT;
        p.behavior = TOK_SPLIT_ISOLATED;
        p.re = tok__compile(pat, strlen(pat), c->err, c->errlen, field);
        if (!p.re) {
            return -EINVAL;
        }
    } else if (strcmp(type, "ByteLevel") == 0) {
        bool use_regex = true;
        p.kind = TOK_PRE_BYTELEVEL;
        rc = opt_bool(c, n, "add_prefix_space", field, true, &p.add_prefix);
        if (rc == 0) {
            rc = opt_bool(c, n, "use_regex", field, true, &use_regex);
        }
        if (rc) {
            return rc;
        }
        if (use_regex) {
            /* the GPT-2 pattern, shared with GGUF "gpt2" */
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                       "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            p.re = tok__compile(gpt2, strlen(gpt2), c->err, c->errlen, field);
            if (!p.re) {
                return -EINVAL;
            }
        }
        t->byte_level = true;
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *rep = NULL, *scheme = NULL;
        bool add_prefix = true;
        p.kind = TOK_PRE_METASPACE;
        rc = get_str(c, n, "replacement", field, true, &rep);
        if (rc == 0) {
            rc = get_str(c, n, "prepend_scheme", field, false, &scheme);
        }
        if (rc == 0) {
            rc = opt_bool(c, n, "add_prefix_space", field, true, &add_prefix);
        }
        if (rc == 0) {
            rc = opt_bool(c, n, "split", field, true, &p.meta_split);
        }
        if (rc == 0) {
            rc = check_one_char(c, rep, field, "replacement");
        }
        if (rc) {
            return rc;
        }
        p.add_prefix = scheme ? strcmp(scheme, "never") != 0 : add_prefix;
        p.prefix_first = scheme && strcmp(scheme, "first") == 0;
        p.str_len = strlen(rep);
        p.str = dupn(rep, p.str_len);
        if (!p.str) {
            return -ENOMEM;
        }
    } else {
        snprintf(f, sizeof(f), "unsupported pre_tokenizer type \"%s\"", type);
        return hf_fail(c, -EINVAL, field, f);
    }
    return push_pre(t, &p);
}

static int add_decoder(hf_ctx *c, struct json_object *n, const char *field)
{
    tokenizer *t = c->t;
    if (!n) {
        return 0;
    }
    const char *type = NULL;
    int rc = get_str(c, n, "type", field, true, &type);
    if (rc) {
        return rc;
    }
    char f[256];
    if (strcmp(type, "Sequence") == 0) {
        return add_sequence(c, n, "decoders", field, add_decoder);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        t->dec_byte_level = true;
    } else if (strcmp(type, "WordPiece") == 0) {
        const char *prefix = NULL;
        rc = get_str(c, n, "prefix", field, false, &prefix);
        if (rc == 0) {
            rc = opt_bool(c, n, "cleanup", field, true, &t->dec_cleanup);
        }
        if (rc) {
            return rc;
        }
        prefix = prefix ? prefix : "##";
        if (t->wp_prefix && strcmp(t->wp_prefix, prefix) != 0) {
            return hf_fail(c, -EINVAL, field,
                           "prefix differs from model.continuing_subword_prefix (not supported)");
        }
        if (!t->wp_prefix) {
            t->wp_prefix_len = strlen(prefix);
            t->wp_prefix = dupn(prefix, t->wp_prefix_len);
            if (!t->wp_prefix) {
                return -ENOMEM;
            }
        }
        t->dec_wordpiece = true;
        t->strip_rule = TOK_STRIP_WORDPIECE;
    } else if (strcmp(type, "ByteFallback") == 0) {
        t->dec_byte_fallback = true;
    } else if (strcmp(type, "Fuse") == 0) {
        return 0;
    } else if (strcmp(type, "Replace") == 0 || strcmp(type, "Metaspace") == 0) {
        char *pat = NULL, *with = NULL;
        size_t pat_len = 0, with_len = 1;
        if (type[0] == 'R') {
            pcre2_code *re = NULL;
            const char *content = NULL;
            rc = parse_pattern(c, n, field, &re, &pat, &pat_len);
            if (rc == 0 && re) {
                pcre2_code_free(re);
                free(pat);
                return hf_fail(c, -EINVAL, field, "Replace decoder with a Regex is not supported");
            }
            if (rc == 0) {
                rc = check_pattern_nonempty(c, pat, pat_len, field);
            }
            if (rc == 0) {
                rc = get_str(c, n, "content", field, true, &content);
            }
            if (rc == 0) {
                with_len = strlen(content);
                with = dupn(content, with_len);
            }
        } else {
            const char *rep = NULL, *scheme = NULL;
            bool add_prefix = true;
            rc = get_str(c, n, "replacement", field, true, &rep);
            if (rc == 0) {
                rc = get_str(c, n, "prepend_scheme", field, false, &scheme);
            }
            if (rc == 0) {
                rc = opt_bool(c, n, "add_prefix_space", field, true, &add_prefix);
            }
            if (rc == 0) {
                rc = check_one_char(c, rep, field, "replacement");
            }
            if (rc == 0) {
                pat_len = strlen(rep);
                pat = dupn(rep, pat_len);
                with = dupn(" ", 1);
                if (scheme ? strcmp(scheme, "never") != 0 : add_prefix) {
                    t->strip_rule = TOK_STRIP_OUTPUT;
                    t->strip_n = 1;
                }
            }
        }
        if (rc == 0 && (!pat || !with)) {
            rc = -ENOMEM;
        }
        if (rc == 0 && t->dec_from) {
            rc = hf_fail(c, -EINVAL, field, "more than one Replace decoder is not supported");
        }
        if (rc) {
            free(pat);
            free(with);
            return rc;
        }
        t->dec_from = pat;
        t->dec_from_len = pat_len;
        t->dec_to = with;
        t->dec_to_len = with_len;
    } else if (strcmp(type, "Strip") == 0) {
        const char *content = NULL;
        int start = 0, stop = 0;
        char e[256];
        rc = get_str(c, n, "content", field, true, &content);
        if (rc == 0 && (json_opt_int(n, "start", 0, &start, e, sizeof(e)) ||
                        json_opt_int(n, "stop", 0, &stop, e, sizeof(e)))) {
            return hf_fail(c, -EINVAL, field, e);
        }
        if (rc) {
            return rc;
        }
        if (strcmp(content, " ") != 0 || stop != 0 || start < 0) {
            return hf_fail(c, -EINVAL, field, "only Strip of leading spaces is supported");
        }
        t->strip_rule = TOK_STRIP_OUTPUT;
        t->strip_n = (size_t)start;
    } else {
        snprintf(f, sizeof(f), "unsupported decoder type \"%s\"", type);
        return hf_fail(c, -EINVAL, field, f);
    }
    return 0;
}

/* Resolves a TemplateProcessing special token name to an id. */
static int template_id(hf_ctx *c, struct json_object *proc, const char *name, const char *field,
                       int32_t *id)
{
    struct json_object *st = json_get(proc, "special_tokens");
    struct json_object *e = NULL;
    if (st && json_object_object_get_ex(st, name, &e)) {
        struct json_object *ids = json_get(e, "ids[0]");
        if (ids && json_object_is_type(ids, json_type_int)) {
            int64_t v = json_object_get_int64(ids);
            if (v >= 0 && v < c->t->n_vocab) {
                *id = (int32_t)v;
                return 0;
            }
        }
    }
    *id = tokenizer_token_id(c->t, name, strlen(name));
    if (*id < 0) {
        char m[300];
        snprintf(m, sizeof(m), "special token \"%.200s\" is not in the vocabulary", name);
        return hf_fail(c, -EINVAL, field, m);
    }
    return 0;
}

static int add_post(hf_ctx *c, struct json_object *n, const char *field)
{
    tokenizer *t = c->t;
    if (!n) {
        return 0;
    }
    const char *type = NULL;
    int rc = get_str(c, n, "type", field, true, &type);
    if (rc) {
        return rc;
    }
    char f[256], e[256];
    if (strcmp(type, "Sequence") == 0) {
        return add_sequence(c, n, "processors", field, add_post);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        return 0;
    }
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        /* single sequence: cls $A sep, each given as [text, id] */
        int32_t ids[2];
        static const char *const keys[] = {"cls", "sep"};
        for (int k = 0; k < 2; k++) {
            struct json_object *pair = json_get(n, keys[k]);
            snprintf(f, sizeof(f), "%s.%s", field, keys[k]);
            struct json_object *idv = pair && json_object_is_type(pair, json_type_array) &&
                                              json_object_array_length(pair) == 2
                                          ? json_object_array_get_idx(pair, 1)
                                          : NULL;
            if (!idv || !json_object_is_type(idv, json_type_int) ||
                json_object_get_int64(idv) < 0 || json_object_get_int64(idv) >= t->n_vocab) {
                return hf_fail(c, -EINVAL, f, "expected [token, id] with an id in the vocabulary");
            }
            ids[k] = (int32_t)json_object_get_int64(idv);
        }
        t->prefix_ids[0] = ids[0];
        t->suffix_ids[0] = ids[1];
        t->n_prefix = t->n_suffix = 1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0) {
        snprintf(f, sizeof(f), "unsupported post_processor type \"%s\"", type);
        return hf_fail(c, -EINVAL, field, f);
    }
    struct json_object *single = NULL;
    snprintf(f, sizeof(f), "%s.single", field);
    rc = json_get_array(n, "single", &single, e, sizeof(e));
    if (rc) {
        return hf_fail(c, rc, field, e);
    }
    bool seen_a = false;
    t->n_prefix = t->n_suffix = 0;
    for (size_t i = 0; i < json_object_array_length(single); i++) {
        struct json_object *it = json_object_array_get_idx(single, i);
        const char *name = NULL;
        snprintf(f, sizeof(f), "%s.single[%zu]", field, i);
        if (json_get(it, "Sequence")) {
            seen_a = true;
            continue;
        }
        rc = get_str(c, it, "SpecialToken.id", f, true, &name);
        if (rc) {
            return rc;
        }
        int32_t id;
        rc = template_id(c, n, name, f, &id);
        if (rc) {
            return rc;
        }
        size_t *cnt = seen_a ? &t->n_suffix : &t->n_prefix;
        int32_t *dst = seen_a ? t->suffix_ids : t->prefix_ids;
        if (*cnt >= ARRAY_SIZE(t->prefix_ids)) {
            return hf_fail(c, -EINVAL, f, "too many special tokens");
        }
        dst[(*cnt)++] = id;
    }
    return 0;
}

/* Token text of a tokenizer_config entry: a string or {"content": ...}. */
static const char *config_token(struct json_object *cfg, const char *key)
{
    struct json_object *v = json_get(cfg, key);
    if (v && json_object_is_type(v, json_type_object)) {
        v = json_get(v, "content");
    }
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* added_tokens[i].id, checked to be in [0, TOKENIZER_MAX_VOCAB). */
static int added_id(hf_ctx *c, struct json_object *added, size_t i, int64_t *id)
{
    char f[64], e[256];
    snprintf(f, sizeof(f), "added_tokens[%zu]", i);
    int rc = json_get_int64(json_object_array_get_idx(added, i), "id", id, e, sizeof(e));
    if (rc == 0 && (*id < 0 || *id >= TOKENIZER_MAX_VOCAB)) {
        return hf_fail(c, -EINVAL, f, "id out of range");
    }
    return rc ? hf_fail(c, rc, f, e) : 0;
}

/* Sets the text of every added token (pass 0) or registers it as added (pass 1). */
static int added_pass(hf_ctx *c, struct json_object *added, int pass)
{
    tokenizer *t = c->t;
    size_t n_added = added ? json_object_array_length(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        char f[64];
        int64_t id;
        snprintf(f, sizeof(f), "added_tokens[%zu]", i);
        struct json_object *a = json_object_array_get_idx(added, i);
        int rc = added_id(c, added, i, &id);
        if (rc) {
            return rc;
        }
        if (pass == 0) {
            const char *content;
            rc = get_str(c, a, "content", f, true, &content);
            if (rc == 0 && !*content) {
                rc = hf_fail(c, -EINVAL, f, "empty content");
            }
            if (rc == 0) {
                rc = tok__set_text(t, (int32_t)id, content, strlen(content));
            }
        } else {
            bool special = false, lstrip = false, rstrip = false, single = false;
            if ((rc = opt_bool(c, a, "special", f, false, &special)) ||
                (rc = opt_bool(c, a, "lstrip", f, false, &lstrip)) ||
                (rc = opt_bool(c, a, "rstrip", f, false, &rstrip)) ||
                (rc = opt_bool(c, a, "single_word", f, false, &single))) {
                return rc;
            }
            rc = tok__add_added(t, (int32_t)id, special, lstrip, rstrip, single);
        }
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/* model.type "Unigram" (vocab [[piece, score], ...], unk_id, byte_fallback) or "WordPiece"
 * (vocab {piece: id}, unk_token, continuing_subword_prefix, max_input_chars_per_word). */
static int load_ugm_wpm(hf_ctx *c, struct json_object *root, struct json_object *mobj, bool ugm)
{
    char e[300];
    struct json_object *vocab = NULL, *added = NULL;
    int rc = ugm ? json_get_array(mobj, "vocab", &vocab, e, sizeof(e))
                 : json_get_object(mobj, "vocab", &vocab, e, sizeof(e));
    if (rc == 0) {
        rc = json_opt_array(root, "added_tokens", NULL, &added, e, sizeof(e));
    }
    if (rc) {
        return hf_fail(c, rc, "model", e);
    }
    size_t n_vocab =
        ugm ? json_object_array_length(vocab) : (size_t)json_object_object_length(vocab);
    if (n_vocab == 0 || n_vocab > TOKENIZER_MAX_VOCAB) {
        return hf_fail(c, -EINVAL, "model.vocab", "empty or too large");
    }
    int64_t max_id = ugm ? (int64_t)n_vocab - 1 : -1;
    if (!ugm) {
        json_object_object_foreach(vocab, key, val)
        {
            snprintf(e, sizeof(e), "model.vocab[\"%.64s\"]", key);
            if (!json_object_is_type(val, json_type_int)) {
                return hf_fail(c, -EINVAL, e, "expected integer");
            }
            int64_t id = json_object_get_int64(val);
            if (id < 0 || id >= TOKENIZER_MAX_VOCAB) {
                return hf_fail(c, -EINVAL, e, "id out of range");
            }
            max_id = id > max_id ? id : max_id;
        }
    }
    size_t n_added = added ? json_object_array_length(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        int64_t id;
        rc = added_id(c, added, i, &id);
        if (rc) {
            return rc;
        }
        max_id = id > max_id ? id : max_id;
    }
    if ((size_t)max_id + 1 > 2 * (n_vocab + n_added) + TOK_MAX_GAP) {
        return hf_fail(c, -EINVAL, "model.vocab", "ids too sparse");
    }
    tokenizer *t = tok__alloc((int32_t)(max_id + 1));
    if (!t) {
        return -ENOMEM;
    }
    c->t = t;
    t->kind = ugm ? TOKENIZER_UNIGRAM : TOKENIZER_WORDPIECE;
    t->flavor = TOK_FLAVOR_HF;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->flags[id] |= TOKF_NOMATCH; /* cleared for model vocabulary entries below */
    }
    if (ugm) {
        t->uscores = calloc((size_t)t->n_vocab, sizeof(*t->uscores));
        if (!t->uscores) {
            return -ENOMEM;
        }
        double min_score = DBL_MAX;
        for (size_t i = 0; i < n_vocab; i++) {
            struct json_object *it = json_object_array_get_idx(vocab, i);
            struct json_object *ps =
                it && json_object_is_type(it, json_type_array) && json_object_array_length(it) == 2
                    ? json_object_array_get_idx(it, 0)
                    : NULL;
            struct json_object *sc = ps ? json_object_array_get_idx(it, 1) : NULL;
            snprintf(e, sizeof(e), "model.vocab[%zu]", i);
            if (!ps || !json_object_is_type(ps, json_type_string) || !sc ||
                !(json_object_is_type(sc, json_type_double) ||
                  json_object_is_type(sc, json_type_int))) {
                return hf_fail(c, -EINVAL, e, "expected [piece, score]");
            }
            rc = tok__set_text(t, (int32_t)i, json_object_get_string(ps),
                               (size_t)json_object_get_string_len(ps));
            if (rc) {
                return rc;
            }
            t->uscores[i] = json_object_get_double(sc);
            min_score = t->uscores[i] < min_score ? t->uscores[i] : min_score;
            t->flags[i] &= (uint8_t)~TOKF_NOMATCH;
        }
        t->unk_score = min_score - 10.0; /* HF tokenizers' K_UNK_PENALTY */
    } else {
        json_object_object_foreach(vocab, vkey, vval)
        {
            int32_t id = (int32_t)json_object_get_int64(vval);
            rc = tok__set_text(t, id, vkey, strlen(vkey));
            if (rc) {
                return rc;
            }
            t->flags[id] &= (uint8_t)~TOKF_NOMATCH;
        }
    }
    if ((rc = added_pass(c, added, 0)) != 0 || (rc = tok__build_map(t)) != 0 ||
        (rc = added_pass(c, added, 1)) != 0) {
        return rc;
    }
    if (ugm) {
        struct json_object *u = json_get(mobj, "unk_id");
        if ((rc = opt_bool(c, mobj, "byte_fallback", "model", false, &t->byte_fallback))) {
            return rc;
        }
        if (u && json_object_is_type(u, json_type_int)) {
            int64_t id = json_object_get_int64(u);
            if (id < 0 || (size_t)id >= n_vocab) {
                return hf_fail(c, -EINVAL, "model.unk_id", "not an id of the vocabulary");
            }
            t->unk_id = (int32_t)id;
        } else if (u && !json_object_is_type(u, json_type_null)) {
            return hf_fail(c, -EINVAL, "model.unk_id", "expected an integer or null");
        } else if (!t->byte_fallback) {
            return hf_fail(c, -EINVAL, "model.unk_id",
                           "missing: an unknown token is required without byte_fallback");
        }
        return 0;
    }
    const char *unk = NULL, *pfx = NULL;
    int max_chars = 100;
    if ((rc = get_str(c, mobj, "unk_token", "model", false, &unk)) ||
        (rc = get_str(c, mobj, "continuing_subword_prefix", "model", false, &pfx))) {
        return rc;
    }
    if (json_opt_int(mobj, "max_input_chars_per_word", 100, &max_chars, e, sizeof(e)) ||
        max_chars <= 0) {
        return hf_fail(c, -EINVAL, "model.max_input_chars_per_word", "expected a positive integer");
    }
    t->wp_max_chars = (size_t)max_chars;
    unk = unk ? unk : "[UNK]";
    t->unk_id = tokenizer_token_id(t, unk, strlen(unk));
    if (t->unk_id < 0) {
        return hf_fail(c, -EINVAL, "model.unk_token", "not in the vocabulary");
    }
    pfx = pfx ? pfx : "##";
    t->wp_prefix_len = strlen(pfx);
    t->wp_prefix = dupn(pfx, t->wp_prefix_len);
    return t->wp_prefix ? 0 : -ENOMEM;
}

static int load_model(hf_ctx *c, struct json_object *root)
{
    char e[256];
    struct json_object *mobj = NULL, *vocab = NULL, *merges = NULL, *added = NULL;
    const char *type = NULL;
    int rc = json_get_object(root, "model", &mobj, e, sizeof(e));
    if (rc) {
        return hf_fail(c, rc, "", e);
    }
    rc = get_str(c, mobj, "type", "model", false, &type);
    if (rc) {
        return rc;
    }
    if (type && (strcmp(type, "Unigram") == 0 || strcmp(type, "WordPiece") == 0)) {
        return load_ugm_wpm(c, root, mobj, type[0] == 'U');
    }
    if (type && strcmp(type, "BPE") != 0) {
        snprintf(e, sizeof(e), "unsupported model type \"%s\" (BPE, Unigram or WordPiece)", type);
        return hf_fail(c, -EINVAL, "model.type", e);
    }
    rc = json_get_object(root, "model.vocab", &vocab, e, sizeof(e));
    if (rc == 0) {
        rc = json_get_array(root, "model.merges", &merges, e, sizeof(e));
    }
    if (rc == 0) {
        rc = json_opt_array(root, "added_tokens", NULL, &added, e, sizeof(e));
    }
    if (rc) {
        return hf_fail(c, rc, "", e);
    }
    const char *pfx = NULL, *sfx = NULL;
    if (get_str(c, mobj, "continuing_subword_prefix", "model", false, &pfx) ||
        get_str(c, mobj, "end_of_word_suffix", "model", false, &sfx)) {
        return -EINVAL;
    }
    if ((pfx && *pfx) || (sfx && *sfx)) {
        return hf_fail(c, -EINVAL, "model",
                       "continuing_subword_prefix/end_of_word_suffix are not supported");
    }
    /* vocabulary size: the largest id + 1 */
    int64_t max_id = -1;
    json_object_object_foreach(vocab, key, val)
    {
        if (!json_object_is_type(val, json_type_int)) {
            snprintf(e, sizeof(e), "model.vocab[\"%.64s\"]", key);
            return hf_fail(c, -EINVAL, e, "expected integer");
        }
        int64_t id = json_object_get_int64(val);
        if (id < 0 || id >= TOKENIZER_MAX_VOCAB) {
            snprintf(e, sizeof(e), "model.vocab[\"%.64s\"]", key);
            return hf_fail(c, -EINVAL, e, "id out of range");
        }
        max_id = id > max_id ? id : max_id;
    }
    size_t n_added = added ? json_object_array_length(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        int64_t id;
        char f[64];
        snprintf(f, sizeof(f), "added_tokens[%zu].id", i);
        rc = json_get_int64(root, f, &id, e, sizeof(e));
        if (rc == 0 && (id < 0 || id >= TOKENIZER_MAX_VOCAB)) {
            rc = -EINVAL;
            snprintf(e, sizeof(e), "%s: id out of range", f);
        }
        if (rc) {
            return hf_fail(c, rc, "", e);
        }
        max_id = id > max_id ? id : max_id;
    }
    if (max_id < 0) {
        return hf_fail(c, -EINVAL, "model.vocab", "empty vocabulary");
    }
    /* The tables are indexed by id: a few tokens with a huge id would cost megabytes each. Real
     * vocabularies are dense; tolerate gaps up to the number of tokens plus TOK_MAX_GAP. */
    size_t n_tokens = (size_t)json_object_object_length(vocab) + n_added;
    if ((size_t)max_id + 1 > 2 * n_tokens + TOK_MAX_GAP) {
        snprintf(e, sizeof(e),
                 "ids reach %lld for %zu tokens: more than %d unused ids (a sparse vocabulary)",
                 (long long)max_id, n_tokens, TOK_MAX_GAP + (int)n_tokens);
        return hf_fail(c, -EINVAL, "model.vocab", e);
    }
    tokenizer *t = tok__alloc((int32_t)(max_id + 1));
    if (!t) {
        return -ENOMEM;
    }
    c->t = t;
    t->kind = TOKENIZER_BPE;
    {
        json_object_object_foreach(vocab, vkey, vval)
        {
            int32_t id = (int32_t)json_object_get_int64(vval);
            rc = tok__set_text(t, id, vkey, strlen(vkey));
            if (rc) {
                return rc;
            }
        }
    }
    for (size_t i = 0; i < n_added; i++) {
        char f[64];
        const char *content;
        int64_t id;
        snprintf(f, sizeof(f), "added_tokens[%zu]", i);
        struct json_object *a = json_object_array_get_idx(added, i);
        (void)json_get_int64(a, "id", &id, e, sizeof(e));
        rc = get_str(c, a, "content", f, true, &content);
        if (rc) {
            return rc;
        }
        if (!*content) {
            return hf_fail(c, -EINVAL, f, "empty content");
        }
        rc = tok__set_text(t, (int32_t)id, content, strlen(content));
        if (rc) {
            return rc;
        }
    }
    rc = tok__build_map(t);
    if (rc) {
        return rc;
    }
    for (size_t i = 0; i < n_added; i++) {
        char f[64];
        bool special = false, lstrip = false, rstrip = false, single = false;
        int64_t id;
        snprintf(f, sizeof(f), "added_tokens[%zu]", i);
        struct json_object *a = json_object_array_get_idx(added, i);
        (void)json_get_int64(a, "id", &id, e, sizeof(e));
        if ((rc = opt_bool(c, a, "special", f, false, &special)) ||
            (rc = opt_bool(c, a, "lstrip", f, false, &lstrip)) ||
            (rc = opt_bool(c, a, "rstrip", f, false, &rstrip)) ||
            (rc = opt_bool(c, a, "single_word", f, false, &single))) {
            return rc;
        }
        rc = tok__add_added(t, (int32_t)id, special, lstrip, rstrip, single);
        if (rc) {
            return rc;
        }
    }
    /* model options */
    const char *unk = NULL;
    if ((rc = opt_bool(c, mobj, "byte_fallback", "model", false, &t->byte_fallback)) ||
        (rc = opt_bool(c, mobj, "ignore_merges", "model", false, &t->ignore_merges)) ||
        (rc = opt_bool(c, mobj, "fuse_unk", "model", false, &t->fuse_unk)) ||
        (rc = get_str(c, mobj, "unk_token", "model", false, &unk))) {
        return rc;
    }
    if (unk) {
        t->unk_id = tokenizer_token_id(t, unk, strlen(unk));
        if (t->unk_id < 0) {
            return hf_fail(c, -EINVAL, "model.unk_token", "not in the vocabulary");
        }
    }
    /* merges: "a b" or ["a", "b"]; rank = position */
    size_t n_merges = json_object_array_length(merges);
    rc = tok__merges_reserve(t, n_merges);
    if (rc) {
        return rc;
    }
    struct buf cat;
    buf_init(&cat, (size_t)1 << 20);
    for (size_t i = 0; i < n_merges && rc == 0; i++) {
        struct json_object *m = json_object_array_get_idx(merges, i);
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        char f[64];
        snprintf(f, sizeof(f), "model.merges[%zu]", i);
        if (json_object_is_type(m, json_type_string)) {
            a = json_object_get_string(m);
            const char *sp = strchr(a, ' ');
            if (!sp || sp == a || !sp[1] || strchr(sp + 1, ' ')) {
                rc = hf_fail(c, -EINVAL, f, "expected \"left right\"");
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
                   json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
                   json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
            a = json_object_get_string(json_object_array_get_idx(m, 0));
            b = json_object_get_string(json_object_array_get_idx(m, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            rc = hf_fail(c, -EINVAL, f, "expected a string or an array of two strings");
            break;
        }
        int32_t ia = tokenizer_token_id(t, a, la), ib = tokenizer_token_id(t, b, lb);
        buf_reset(&cat);
        rc = buf_append(&cat, a, la);
        if (rc == 0) {
            rc = buf_append(&cat, b, lb);
        }
        int32_t ir = rc == 0 ? tokenizer_token_id(t, cat.data, cat.len) : -1;
        if (rc == 0 && (ia < 0 || ib < 0 || ir < 0)) {
            rc = hf_fail(c, -EINVAL, f, "merge of tokens not in the vocabulary");
        }
        if (rc == 0) {
            rc = tok__add_merge(t, ia, ib, ir, (int32_t)i);
        }
    }
    buf_free(&cat);
    return rc;
}

static int hf_build(hf_ctx *c, struct json_object *root, struct json_object *cfg)
{
    int rc = load_model(c, root);
    if (rc) {
        return rc;
    }
    tokenizer *t = c->t;
    if ((rc = add_norm(c, json_get(root, "normalizer"), "normalizer")) ||
        (rc = add_pre(c, json_get(root, "pre_tokenizer"), "pre_tokenizer")) ||
        (rc = add_post(c, json_get(root, "post_processor"), "post_processor")) ||
        (rc = add_decoder(c, json_get(root, "decoder"), "decoder"))) {
        return rc;
    }
    if (t->n_prefix > 0) {
        t->bos = t->prefix_ids[0];
    }
    if (t->n_suffix > 0) {
        t->eos = t->suffix_ids[t->n_suffix - 1];
    }
    if (cfg) {
        const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
        if (bos && tokenizer_token_id(t, bos, strlen(bos)) >= 0) {
            t->bos = tokenizer_token_id(t, bos, strlen(bos));
        }
        if (eos && tokenizer_token_id(t, eos, strlen(eos)) >= 0) {
            t->eos = tokenizer_token_id(t, eos, strlen(eos));
        }
        /* transformers' Llama/Gemma fast tokenizers rebuild the template from these flags */
        const char *cls = NULL;
        struct json_object *cv = json_get(cfg, "tokenizer_class");
        if (cv && json_object_is_type(cv, json_type_string)) {
            cls = json_object_get_string(cv);
        }
        bool llama_like = cls && (strncmp(cls, "LlamaTokenizer", 14) == 0 ||
                                  strncmp(cls, "GemmaTokenizer", 14) == 0 ||
                                  strncmp(cls, "CodeLlamaTokenizer", 18) == 0);
        struct json_object *ab = json_get(cfg, "add_bos_token"),
                           *ae = json_get(cfg, "add_eos_token");
        if (llama_like && ab && json_object_is_type(ab, json_type_boolean)) {
            t->n_prefix = 0;
            if (json_object_get_boolean(ab) && t->bos >= 0) {
                t->prefix_ids[t->n_prefix++] = t->bos;
            }
        }
        if (llama_like && ae && json_object_is_type(ae, json_type_boolean)) {
            t->n_suffix = 0;
            if (json_object_get_boolean(ae) && t->eos >= 0) {
                t->suffix_ids[t->n_suffix++] = t->eos;
            }
        }
    }
    return tok__finish(t, c->err, c->errlen);
}

int tokenizer_load_hf_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                          const char *what, tokenizer **out, char *err, size_t errlen)
{
    hf_ctx c = {.t = NULL, .what = what ? what : "tokenizer.json", .err = err, .errlen = errlen};
    if (!json || !out) {
        return tandem_fail(err, errlen, -EINVAL, "%s: no data", c.what);
    }
    *out = NULL;
    char e[256];
    struct json_object *root = NULL, *cfg = NULL;
    int rc = json_parse_one(json, len, &root, e, sizeof(e));
    if (rc) {
        return tandem_fail(err, errlen, rc, "%s: %s", c.what, e);
    }
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return tandem_fail(err, errlen, -EINVAL, "%s: expected a JSON object", c.what);
    }
    if (config_json) {
        rc = json_parse_one(config_json, config_len, &cfg, e, sizeof(e));
        if (rc || !cfg || !json_object_is_type(cfg, json_type_object)) {
            json_object_put(root);
            json_object_put(cfg);
            return tandem_fail(err, errlen, rc ? rc : -EINVAL, "tokenizer_config.json: %s",
                               rc ? e : "expected a JSON object");
        }
    }
    rc = hf_build(&c, root, cfg);
    json_object_put(root);
    json_object_put(cfg);
    if (rc) {
        tokenizer_free(c.t);
        return rc;
    }
    *out = c.t;
    return 0;
}

static int read_file(const char *path, size_t max, char **data, size_t *len, char *err,
                     size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return tandem_fail(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        fclose(f);
        return tandem_fail(err, errlen, -EINVAL, "%s: not a regular file or larger than %zu bytes",
                           path, max);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return tandem_fail(err, errlen, -EIO, "%s: short read", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int tokenizer_load_hf(const char *tokenizer_json, const char *tokenizer_config_json,
                      tokenizer **out, char *err, size_t errlen)
{
    if (!tokenizer_json || !out) {
        return tandem_fail(err, errlen, -EINVAL, "no tokenizer.json path");
    }
    char path[4096], cpath[4096];
    const char *cfg_path = tokenizer_config_json;
    struct stat st;
    if (stat(tokenizer_json, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof(path), "%s/tokenizer.json", tokenizer_json);
        snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", tokenizer_json);
        if (!cfg_path && stat(cpath, &st) == 0) {
            cfg_path = cpath;
        }
    } else {
        snprintf(path, sizeof(path), "%s", tokenizer_json);
    }
    char *data = NULL, *cdata = NULL;
    size_t len = 0, clen = 0;
    int rc = read_file(path, TOKENIZER_MAX_JSON_BYTES, &data, &len, err, errlen);
    if (rc == 0 && cfg_path) {
        rc = read_file(cfg_path, TOKENIZER_MAX_JSON_BYTES, &cdata, &clen, err, errlen);
    }
    if (rc == 0) {
        rc = tokenizer_load_hf_mem(data, len, cdata, clen, path, out, err, errlen);
    }
    free(data);
    free(cdata);
    return rc;
}
