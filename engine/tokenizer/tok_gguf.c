/*
 * GGUF vocabulary (tokenizer.ggml.*) → struct tokenizer, following llama.cpp's llama_vocab:
 * "llama" is SPM (scores, byte tokens, add_space_prefix), "gpt2" is byte-level BPE whose
 * pre-tokenizer regexes are llama.cpp's presets for tokenizer.ggml.pre, "t5" is Unigram (UGM:
 * scores, precompiled charsmap, whitespace options) and "bert" WordPiece (WPM: U+2581-prefixed
 * word starts, lowercase/strip_accents options).
 */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tok_internal.h"
#include "lib/common.h"
#include "lib/err.h"

/* llama.cpp src/llama-vocab.cpp regex_exprs per pre-tokenizer type (applied in order, each an
 * Isolated split of the pieces the previous one produced). */
static const char *const pre_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pre_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pre_deepseek3[] = {
    "\\p{N}{1,3}", "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
/* GPT-2: llama.cpp's custom matcher also takes trailing whitespace ("|\\s+" of the original). */
static const char *const pre_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const pre_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+",
    "[0-9][0-9][0-9]", NULL};

static const struct {
    const char *name;
    const char *const *regexes;
    bool ignore_merges, add_bos;
} presets[] = {
    {"llama3", pre_llama3, true, true},
    {"llama-v3", pre_llama3, true, true},
    {"llama-bpe", pre_llama3, true, true},
    {"qwen2", pre_qwen2, false, false},
    {"deepseek-v3", pre_deepseek3, false, false},
    {"gpt-2", pre_gpt2, false, false},
    {"gpt2", pre_gpt2, false, false},
    {"default", pre_default, false, false},
};

static int add_regex(tokenizer *t, const char *re, char *err, size_t errlen)
{
    tok__pre p = {.kind = TOK_PRE_SPLIT, .behavior = TOK_SPLIT_ISOLATED};
    p.re = tok__compile(re, strlen(re), err, errlen, "tokenizer.ggml.pre");
    if (!p.re) {
        return -EINVAL;
    }
    tok__pre *a = realloc(t->pres, (t->n_pres + 1) * sizeof(*a));
    if (!a) {
        pcre2_code_free(p.re);
        return -ENOMEM;
    }
    t->pres = a;
    a[t->n_pres++] = p;
    return 0;
}

/* Texts llama.cpp (llama-vocab.cpp, load) treats as end-of-turn / end-of-generation or
 * fill-in-the-middle tokens and marks CONTROL when a GGUF file does not, so that GGUF
 * tokenization matches llama.cpp's on the same file. */
static bool control_looking(const char *s, uint32_t len)
{
    static const char *const names[] = {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "</s>",
        "<｜end▁of▁sentence｜>",
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<PRE>",
        "▁<PRE>",
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<SUF>",
        "▁<SUF>",
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<MID>",
        "▁<MID>",
        "<|fim_pad|>",
        "<fim-pad>",
        "<fim_pad>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
        "<|file_sep|>",
        "<fim-file-sep>",
        "<FILE_SEP>",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) {
            return true;
        }
    }
    return false;
}

/* The ▁ → space decoder and byte fallback shared by SPM and Unigram vocabularies. */
static int spm_decoder(tokenizer *t)
{
    t->dec_byte_fallback = true;
    t->dec_from = strdup("\xE2\x96\x81");
    t->dec_to = strdup(" ");
    if (!t->dec_from || !t->dec_to) {
        return -ENOMEM;
    }
    t->dec_from_len = 3;
    t->dec_to_len = 1;
    return 0;
}

/* "t5" (UGM) and "bert" (WPM) settings, as llama.cpp's llama_vocab::impl::load reads them. */
static int gguf_ugm_wpm(const model_gguf_vocab *v, const tokenizer_gguf_extra *x, tokenizer *t,
                        char *err, size_t errlen)
{
    t->flavor = TOK_FLAVOR_GGUF;
    for (size_t i = 0; i < v->n_tokens; i++) {
        int32_t ty = v->token_types ? v->token_types[i] : 1;
        if (ty != 1 && ty != 4 && ty != 5) {
            t->flags[i] |= TOKF_NOMATCH; /* llama.cpp's UGM trie: normal, user-defined, unused */
        }
        if (ty == 4) {
            t->flags[i] |= TOKF_USER;
        }
    }
    if (t->kind == TOKENIZER_WORDPIECE) {
        t->wp_lowercase = x->lowercase != 0; /* absent (-1): on */
        t->wp_strip_accents = x->strip_accents >= 0 ? x->strip_accents != 0 : t->wp_lowercase;
        t->strip_rule = TOK_STRIP_OUTPUT; /* the first word's U+2581 */
        t->strip_n = 1;
        return spm_decoder(t);
    }
    t->uscores = calloc(v->n_tokens + 1, sizeof(*t->uscores));
    if (!t->uscores) {
        return -ENOMEM;
    }
    float min_score = FLT_MAX;
    for (size_t i = 0; i < v->n_tokens; i++) {
        float sc = v->scores ? v->scores[i] : 0.0f;
        t->uscores[i] = sc;
        if ((!v->token_types || v->token_types[i] == 1) && sc < min_score) {
            min_score = sc;
        }
    }
    t->unk_score = (double)(min_score - 10.0f); /* float arithmetic, as llama.cpp */
    t->add_space_prefix = v->add_space_prefix > 0;
    t->remove_extra_ws = x->remove_extra_whitespaces > 0;
    t->escape_ws = true;
    t->strip_rule = t->add_space_prefix ? TOK_STRIP_SPM : TOK_STRIP_NONE;
    if (x->precompiled_charsmap && x->charsmap_len > 0) {
        int rc = tok__charsmap_init(&t->charsmap, x->precompiled_charsmap, x->charsmap_len,
                                    "tokenizer.ggml.precompiled_charsmap", err, errlen);
        if (rc) {
            return rc;
        }
    }
    return spm_decoder(t);
}

/* llama.cpp's default id for a special token the file does not name (-1 when out of range). */
static int32_t default_id(int32_t id, int32_t def, size_t n)
{
    if (id >= 0) {
        return id;
    }
    return def >= 0 && (size_t)def < n ? def : -1;
}

static int gguf_build(const model_gguf_vocab *v, const tokenizer_gguf_extra *x, tokenizer *t,
                      char *err, size_t errlen)
{
    bool spm = strcmp(v->model, "llama") == 0;
    bool ugm = strcmp(v->model, "t5") == 0, wpm = strcmp(v->model, "bert") == 0;
    t->kind = spm   ? TOKENIZER_SPM
              : ugm ? TOKENIZER_UNIGRAM
              : wpm ? TOKENIZER_WORDPIECE
                    : TOKENIZER_BPE;
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (!v->tokens[i].s && v->tokens[i].len > 0) {
            return tandem_fail(err, errlen, -EINVAL, "tokenizer.ggml.tokens[%zu]: no data", i);
        }
        int rc =
            tok__set_text(t, (int32_t)i, v->tokens[i].s ? v->tokens[i].s : "", v->tokens[i].len);
        if (rc) {
            return rc;
        }
    }
    int rc = tok__build_map(t);
    if (rc) {
        return rc;
    }
    if (spm) {
        t->scores = calloc(v->n_tokens + 1, sizeof(float));
        if (!t->scores) {
            return -ENOMEM;
        }
        if (v->scores) {
            memcpy(t->scores, v->scores, v->n_tokens * sizeof(float));
        }
        t->add_space_prefix = v->add_space_prefix != 0;
        t->strip_rule = t->add_space_prefix ? TOK_STRIP_SPM : TOK_STRIP_NONE;
        rc = spm_decoder(t);
        if (rc) {
            return rc;
        }
    } else if (ugm || wpm) {
        rc = gguf_ugm_wpm(v, x, t, err, errlen);
        if (rc) {
            return rc;
        }
    } else {
        const char *pre = v->pre ? v->pre : "default";
        size_t k = 0;
        while (k < ARRAY_SIZE(presets) && strcmp(presets[k].name, pre) != 0) {
            k++;
        }
        if (k == ARRAY_SIZE(presets)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "tokenizer.ggml.pre: unsupported pre-tokenizer \"%.64s\"", pre);
        }
        for (const char *const *r = presets[k].regexes; *r; r++) {
            rc = add_regex(t, *r, err, errlen);
            if (rc) {
                return rc;
            }
        }
        t->ignore_merges = presets[k].ignore_merges;
        t->byte_level = true;
        t->dec_byte_level = true;
        if (v->add_bos < 0 && presets[k].add_bos && v->bos_id >= 0) {
            t->n_prefix = 1;
        }
        rc = tok__merges_reserve(t, v->n_merges);
        if (rc) {
            return rc;
        }
        for (size_t i = 0; i < v->n_merges; i++) {
            const model_str *m = &v->merges[i];
            const char *sp = m->s ? memchr(m->s, ' ', m->len) : NULL;
            if (!sp || sp == m->s || (size_t)(sp - m->s) + 1 >= m->len) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "tokenizer.ggml.merges[%zu]: expected \"left right\"", i);
            }
            size_t la = (size_t)(sp - m->s), lb = m->len - la - 1;
            int32_t a = tokenizer_token_id(t, m->s, la), b = tokenizer_token_id(t, sp + 1, lb);
            char *cat = malloc(la + lb + 1);
            if (!cat) {
                return -ENOMEM;
            }
            memcpy(cat, m->s, la);
            memcpy(cat + la, sp + 1, lb);
            int32_t r = tokenizer_token_id(t, cat, la + lb);
            free(cat);
            if (a < 0 || b < 0 || r < 0) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "tokenizer.ggml.merges[%zu]: tokens not in the vocabulary", i);
            }
            (void)tok__add_merge(t, a, b, r, (int32_t)i);
        }
    }
    /* llama.cpp's defaults: t5 eos 1 unk 2 (EOS added); bert [CLS] 101 [UNK] 100 [SEP] 102
     * (CLS and SEP added) */
    t->bos = wpm ? default_id(v->bos_id, 101, v->n_tokens) : v->bos_id;
    t->eos = ugm ? default_id(v->eos_id, 1, v->n_tokens) : v->eos_id;
    t->unk_id = ugm   ? default_id(v->unk_id, 2, v->n_tokens)
                : wpm ? default_id(v->unk_id, 100, v->n_tokens)
                      : v->unk_id;
    int32_t sep = wpm ? default_id(x->sep_id, 102, v->n_tokens) : x->sep_id;
    bool add_bos = (spm && t->bos >= 0) || wpm || t->n_prefix > 0;
    if (v->add_bos >= 0) {
        add_bos = v->add_bos != 0;
    }
    bool add_eos = v->add_eos >= 0 ? v->add_eos != 0 : ugm;
    bool add_sep = x->add_sep >= 0 ? x->add_sep != 0 : wpm;
    if ((add_bos && t->bos < 0) || (add_eos && t->eos < 0) || (add_sep && sep < 0)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml: add_bos/add_eos/add_sep set but the bos/eos/"
                           "seperator token id is missing");
    }
    if ((ugm || wpm) && t->unk_id < 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml.unknown_token_id: missing (needed by \"%s\")", v->model);
    }
    if (sep >= (int32_t)v->n_tokens || sep < -1) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml.seperator_token_id: %d out of range (vocab %zu)", sep,
                           v->n_tokens);
    }
    t->n_prefix = 0;
    t->n_suffix = 0;
    if (add_bos) {
        t->prefix_ids[t->n_prefix++] = t->bos;
    }
    if (add_eos) {
        t->suffix_ids[t->n_suffix++] = t->eos;
    }
    if (add_sep) {
        t->suffix_ids[t->n_suffix++] = sep;
    }
    for (size_t i = 0; i < v->n_tokens && v->token_types; i++) {
        int32_t ty = v->token_types[i];
        if (ty != 3 && control_looking(v->tokens[i].s, v->tokens[i].len)) {
            ty = 3; /* llama.cpp forces end-of-turn / FIM tokens to control at load time */
        }
        if (ty == 3 || ty == 4 || ty == 2) {
            /* control, user-defined and unknown tokens are split out of the text (control and
             * unknown only with parse_special), as llama.cpp's special-token partition does */
            if (t->text_len[i] > 0) {
                rc = tok__add_added(t, (int32_t)i, ty != 4, false, false, false);
                if (rc) {
                    return rc;
                }
            } else if (ty != 4) {
                t->flags[i] |= TOKF_SPECIAL;
            }
        } else if (ty == 5) {
            t->flags[i] |= TOKF_UNUSED;
        }
    }
    if (t->bos >= 0) {
        t->flags[t->bos] |= TOKF_SPECIAL;
    }
    if (t->eos >= 0) {
        t->flags[t->eos] |= TOKF_SPECIAL;
    }
    rc = tok__finish(t, err, errlen);
    if (rc == 0 && v->eot_id >= 0 && v->eot_id < t->n_vocab) {
        t->flags[v->eot_id] |= TOKF_EOG;
    }
    return rc;
}

void tokenizer_gguf_extra_init(tokenizer_gguf_extra *x)
{
    *x = (tokenizer_gguf_extra){.precompiled_charsmap = NULL,
                                .charsmap_len = 0,
                                .remove_extra_whitespaces = -1,
                                .add_sep = -1,
                                .sep_id = -1,
                                .lowercase = -1,
                                .strip_accents = -1};
}

int tokenizer_load_gguf(const model_gguf_vocab *v, tokenizer **out, char *err, size_t errlen)
{
    return tokenizer_load_gguf_ext(v, NULL, out, err, errlen);
}

int tokenizer_load_gguf_ext(const model_gguf_vocab *v, const tokenizer_gguf_extra *x,
                            tokenizer **out, char *err, size_t errlen)
{
    tokenizer_gguf_extra none;
    tokenizer_gguf_extra_init(&none);
    if (!x) {
        x = &none;
    }
    if (!v || !out) {
        return tandem_fail(err, errlen, -EINVAL, "no vocabulary");
    }
    *out = NULL;
    if (!v->model || (strcmp(v->model, "llama") != 0 && strcmp(v->model, "gpt2") != 0 &&
                      strcmp(v->model, "t5") != 0 && strcmp(v->model, "bert") != 0)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml.model: unsupported \"%.64s\" (llama, gpt2, t5 or bert)",
                           v->model ? v->model : "(missing)");
    }
    if (v->n_tokens == 0 || v->n_tokens > TOKENIZER_MAX_VOCAB || !v->tokens) {
        return tandem_fail(err, errlen, -EINVAL, "tokenizer.ggml.tokens: missing or too many (%zu)",
                           v->n_tokens);
    }
    int32_t n = (int32_t)v->n_tokens;
    const int32_t ids[] = {v->bos_id, v->eos_id, v->unk_id, v->eot_id, v->pad_id};
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
        if (ids[i] < -1 || ids[i] >= n) {
            return tandem_fail(err, errlen, -EINVAL,
                               "tokenizer.ggml: special token id %d out of range (vocab %d)",
                               ids[i], n);
        }
    }
    if (strcmp(v->model, "gpt2") == 0 && v->n_merges > 0 && !v->merges) {
        return tandem_fail(err, errlen, -EINVAL, "tokenizer.ggml.merges: missing");
    }
    tokenizer *t = tok__alloc(n);
    if (!t) {
        return -ENOMEM;
    }
    int rc = gguf_build(v, x, t, err, errlen);
    if (rc) {
        tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tokenizer_from_model(const model *m, tokenizer **out, char *err, size_t errlen)
{
    if (!m || !out) {
        return tandem_fail(err, errlen, -EINVAL, "no model");
    }
    if (m->format == MODEL_FORMAT_GGUF) {
        const model_gguf_vocab *v = &m->vocab;
        tokenizer_gguf_extra x;
        tokenizer_gguf_extra_init(&x);
        x.precompiled_charsmap = v->precompiled_charsmap;
        x.charsmap_len = v->charsmap_len;
        x.remove_extra_whitespaces = v->remove_extra_whitespaces;
        x.add_sep = v->add_sep;
        x.sep_id = v->sep_id;
        x.lowercase = v->lowercase;
        x.strip_accents = v->strip_accents;
        return tokenizer_load_gguf_ext(v, &x, out, err, errlen);
    }
    if (!m->hf_tokenizer_json) {
        return tandem_fail(err, errlen, -ENOENT, "%s: no tokenizer.json", m->path ? m->path : "");
    }
    return tokenizer_load_hf(m->hf_tokenizer_json, m->hf_tokenizer_config, out, err, errlen);
}
