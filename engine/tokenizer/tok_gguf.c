/*
 * GGUF vocabulary (tokenizer.ggml.*) → struct tokenizer, following llama.cpp's llama_vocab:
 * "llama" is SPM (scores, byte tokens, add_space_prefix), "gpt2" is byte-level BPE whose
 * pre-tokenizer regexes are llama.cpp's presets for tokenizer.ggml.pre.
 */
#include <errno.h>
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

static int gguf_build(const model_gguf_vocab *v, tokenizer *t, char *err, size_t errlen)
{
    bool spm = strcmp(v->model, "llama") == 0;
    t->kind = spm ? TOKENIZER_SPM : TOKENIZER_BPE;
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
        t->dec_byte_fallback = true;
        t->dec_from = strdup("\xE2\x96\x81");
        t->dec_to = strdup(" ");
        if (!t->dec_from || !t->dec_to) {
            return -ENOMEM;
        }
        t->dec_from_len = 3;
        t->dec_to_len = 1;
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
    if (spm && v->bos_id >= 0) {
        t->n_prefix = 1; /* SPM default: BOS on */
    }
    if (v->add_bos >= 0) {
        t->n_prefix = v->add_bos ? 1 : 0;
    }
    t->n_suffix = v->add_eos > 0 ? 1 : 0;
    t->bos = v->bos_id;
    t->eos = v->eos_id;
    t->unk_id = v->unk_id;
    if ((t->n_prefix && t->bos < 0) || (t->n_suffix && t->eos < 0)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml: add_bos/add_eos set but bos/eos token id missing");
    }
    t->prefix_ids[0] = t->bos;
    t->suffix_ids[0] = t->eos;
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

int tokenizer_load_gguf(const model_gguf_vocab *v, tokenizer **out, char *err, size_t errlen)
{
    if (!v || !out) {
        return tandem_fail(err, errlen, -EINVAL, "no vocabulary");
    }
    *out = NULL;
    if (!v->model || (strcmp(v->model, "llama") != 0 && strcmp(v->model, "gpt2") != 0)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tokenizer.ggml.model: unsupported \"%.64s\" (llama or gpt2)",
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
    int rc = gguf_build(v, t, err, errlen);
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
        return tokenizer_load_gguf(&m->vocab, out, err, errlen);
    }
    if (!m->hf_tokenizer_json) {
        return tandem_fail(err, errlen, -ENOENT, "%s: no tokenizer.json", m->path ? m->path : "");
    }
    return tokenizer_load_hf(m->hf_tokenizer_json, m->hf_tokenizer_config, out, err, errlen);
}
