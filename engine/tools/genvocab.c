/*
 * Synthetic byte-level BPE vocabularies and HF tokenizer.json -> GGUF conversion (see
 * genvocab.h for the rules and their reasons).
 */
#include "engine/tools/genvocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/err.h"
#include "lib/json.h"

#define GENV_FILE_MAX ((size_t)256 << 20) /* largest tokenizer file read */
#define GENV_JSON_MAX ((size_t)512 << 20) /* largest JSON text written */

/* ---- token table ---------------------------------------------------------------------- */

static int vocab_alloc(genvocab *v, size_t n, bool scores)
{
    v->n_tokens = n;
    v->tokens = calloc(n, sizeof(*v->tokens));
    v->lens = calloc(n, sizeof(*v->lens));
    v->types = calloc(n, sizeof(*v->types));
    v->scores = scores ? calloc(n, sizeof(*v->scores)) : NULL;
    if (v->tokens == NULL || v->lens == NULL || v->types == NULL || (scores && v->scores == NULL)) {
        return -ENOMEM;
    }
    v->bos = v->eos = v->pad = v->unk = v->sep = -1;
    v->lowercase = v->strip_accents = -1;
    return 0;
}

static int set_token(genvocab *v, size_t id, const char *s, size_t len, int32_t type)
{
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return -ENOMEM;
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    free(v->tokens[id]);
    v->tokens[id] = copy;
    v->lens[id] = (uint32_t)len;
    v->types[id] = type;
    return 0;
}

static int fill_pads(genvocab *v)
{
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (v->tokens[i] == NULL) {
            char name[32];
            int n = snprintf(name, sizeof(name), "[PAD%zu]", i);
            int rc = set_token(v, i, name, (size_t)n, GENV_UNUSED);
            if (rc < 0) {
                return rc;
            }
        }
    }
    return 0;
}

void genvocab_free(genvocab *v)
{
    if (v == NULL) {
        return;
    }
    if (v->tokens != NULL) {
        for (size_t i = 0; i < v->n_tokens; i++) {
            free(v->tokens[i]);
        }
    }
    if (v->merges != NULL) {
        for (size_t i = 0; i < v->n_merges; i++) {
            free(v->merges[i]);
        }
    }
    free(v->tokens);
    free(v->lens);
    free(v->types);
    free(v->scores);
    free(v->merges);
    free(v->chat_template);
    free(v->charsmap);
    free(v->tokenizer_json);
    free(v->tokenizer_config_json);
    memset(v, 0, sizeof(*v));
}

/* ---- string -> id hash map -------------------------------------------------------------- */

typedef struct strmap {
    size_t cap;   /* power of two */
    int64_t *ids; /* -1 = empty */
    const genvocab *v;
} strmap;

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int strmap_build(strmap *m, const genvocab *v)
{
    m->cap = 16;
    while (m->cap < v->n_tokens * 2) {
        m->cap <<= 1;
    }
    m->v = v;
    m->ids = malloc(m->cap * sizeof(*m->ids));
    if (m->ids == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        m->ids[i] = -1;
    }
    for (size_t id = 0; id < v->n_tokens; id++) {
        if (v->tokens[id] == NULL) {
            continue;
        }
        size_t slot = fnv1a(v->tokens[id], v->lens[id]) & (m->cap - 1);
        while (m->ids[slot] >= 0) {
            int64_t o = m->ids[slot];
            if (v->lens[o] == v->lens[id] &&
                memcmp(v->tokens[o], v->tokens[id], v->lens[id]) == 0) {
                break; /* duplicate text: the lowest id wins */
            }
            slot = (slot + 1) & (m->cap - 1);
        }
        if (m->ids[slot] < 0) {
            m->ids[slot] = (int64_t)id;
        }
    }
    return 0;
}

static int64_t strmap_get(const strmap *m, const char *s, size_t n)
{
    size_t slot = fnv1a(s, n) & (m->cap - 1);
    while (m->ids[slot] >= 0) {
        int64_t id = m->ids[slot];
        if (m->v->lens[id] == n && memcmp(m->v->tokens[id], s, n) == 0) {
            return id;
        }
        slot = (slot + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- synthetic vocabulary ------------------------------------------------------------------ */

static const char synth_text[] =
    "The quick brown fox jumps over the lazy dog. A language model reads text as a sequence of "
    "tokens and predicts the next one. The engine keeps the keys and values of every token in a "
    "paged cache, so that requests which share a prefix can share the blocks that hold it. When "
    "the cache runs out of blocks, the scheduler preempts the newest request and computes it "
    "again later. Each step of the engine gathers the tokens of all running requests into one "
    "batch, runs the model over the batch, and samples the next token of every request. Prompt "
    "processing is limited by arithmetic, while generation is limited by the memory bandwidth "
    "that streams the weights. The tokenizer turns text into numbers and the detokenizer turns "
    "the numbers back into text, one piece at a time, without breaking a character in two. "
    "There are 365 days in a year, 24 hours in a day and 60 minutes in an hour. Models, "
    "tokenizers, templates and kernels are tested against independent references, and the tests "
    "check that the results are the same to the last bit where they should be, and within a "
    "small, justified bound where they cannot be.\n";

static const char synth_specials[4][20] = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                           "<|im_end|>"};

static const char synth_chat_template[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

static const char llama3_split_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode: the code point that stands for byte b. */
static unsigned byte_code_point(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        return b;
    }
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++) {
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) {
            n++;
        }
    }
    return 256 + n;
}

typedef struct synth_word {
    int32_t *sym; /* token ids */
    size_t n;
    int64_t count;
} synth_word;

static int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Splits synth_text into chunks (" word", "word", digit runs, punctuation runs, spaces) and
 * gathers the distinct ones with their counts. */
static int synth_words(synth_word **out, size_t *n_out)
{
    size_t len = sizeof(synth_text) - 1;
    synth_word *w = calloc(len, sizeof(*w));
    if (w == NULL) {
        return -ENOMEM;
    }
    size_t n = 0;
    size_t i = 0;
    while (i < len) {
        size_t start = i;
        const unsigned char *t = (const unsigned char *)synth_text;
        if (t[i] == ' ' && i + 1 < len && is_alpha(t[i + 1])) {
            i++;
        }
        if (is_alpha(t[i])) {
            while (i < len && is_alpha(t[i])) {
                i++;
            }
        } else if (t[i] >= '0' && t[i] <= '9') {
            while (i < len && t[i] >= '0' && t[i] <= '9' && i - start < 3) {
                i++;
            }
        } else {
            i++;
        }
        size_t wl = i - start;
        size_t k;
        for (k = 0; k < n; k++) {
            if (w[k].n == wl) {
                size_t j = 0;
                while (j < wl && w[k].sym[j] == t[start + j]) {
                    j++;
                }
                if (j == wl) {
                    break;
                }
            }
        }
        if (k < n) {
            w[k].count++;
            continue;
        }
        w[n].sym = malloc(wl * sizeof(int32_t));
        if (w[n].sym == NULL) {
            for (k = 0; k < n; k++) {
                free(w[k].sym);
            }
            free(w);
            return -ENOMEM;
        }
        for (size_t j = 0; j < wl; j++) {
            w[n].sym[j] = t[start + j];
        }
        w[n].n = wl;
        w[n].count = 1;
        n++;
    }
    *out = w;
    *n_out = n;
    return 0;
}

static int append_merge(genvocab *v, const char *a, size_t la, const char *b, size_t lb)
{
    char *m = malloc(la + lb + 2);
    if (m == NULL) {
        return -ENOMEM;
    }
    memcpy(m, a, la);
    m[la] = ' ';
    memcpy(m + la + 1, b, lb);
    m[la + 1 + lb] = '\0';
    v->merges[v->n_merges++] = m;
    return 0;
}

/* Learns up to max_merges BPE merges over the words; new tokens take ids from 256 upwards. */
static int synth_learn(genvocab *v, synth_word *w, size_t nw, size_t max_merges)
{
    size_t next_id = 256;
    for (size_t step = 0; step < max_merges; step++) {
        int32_t best_a = -1, best_b = -1;
        int64_t best = 0;
        /* O(pairs^2) counting is fine: the text has a few hundred distinct words. */
        for (size_t i = 0; i < nw; i++) {
            for (size_t j = 0; j + 1 < w[i].n; j++) {
                int32_t a = w[i].sym[j], b = w[i].sym[j + 1];
                int64_t c = 0;
                for (size_t k = 0; k < nw; k++) {
                    for (size_t l = 0; l + 1 < w[k].n; l++) {
                        if (w[k].sym[l] == a && w[k].sym[l + 1] == b) {
                            c += w[k].count;
                        }
                    }
                }
                if (c > best || (c == best && (a < best_a || (a == best_a && b < best_b)))) {
                    best = c;
                    best_a = a;
                    best_b = b;
                }
            }
        }
        if (best == 0) {
            break;
        }
        size_t la = v->lens[best_a], lb = v->lens[best_b];
        char joined[256];
        if (la + lb >= sizeof(joined)) {
            break;
        }
        memcpy(joined, v->tokens[best_a], la);
        memcpy(joined + la, v->tokens[best_b], lb);
        int64_t id = -1;
        for (size_t t = 0; t < next_id; t++) {
            if (v->lens[t] == la + lb && memcmp(v->tokens[t], joined, la + lb) == 0) {
                id = (int64_t)t;
                break;
            }
        }
        int rc = append_merge(v, v->tokens[best_a], la, v->tokens[best_b], lb);
        if (rc < 0) {
            return rc;
        }
        if (id < 0) {
            id = (int64_t)next_id++;
            rc = set_token(v, (size_t)id, joined, la + lb, GENV_NORMAL);
            if (rc < 0) {
                return rc;
            }
        }
        for (size_t i = 0; i < nw; i++) {
            size_t o = 0;
            for (size_t j = 0; j < w[i].n; j++) {
                if (j + 1 < w[i].n && w[i].sym[j] == best_a && w[i].sym[j + 1] == best_b) {
                    w[i].sym[o++] = (int32_t)id;
                    j++;
                } else {
                    w[i].sym[o++] = w[i].sym[j];
                }
            }
            w[i].n = o;
        }
    }
    return 0;
}

static char *dup_str(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Serializes o into *out / *out_len (malloc'd). */
static int json_dump(struct json_object *o, char **out, size_t *out_len)
{
    struct buf b;
    buf_init(&b, GENV_JSON_MAX);
    int rc = json_to_buf(o, 1, &b);
    if (rc == 0) {
        rc = buf_appends(&b, "\n");
    }
    if (rc < 0) {
        buf_free(&b);
        return rc;
    }
    *out = buf_detach(&b, out_len);
    return *out == NULL ? -ENOMEM : 0;
}

static int add(struct json_object *o, const char *key, struct json_object *val)
{
    if (val == NULL) {
        return -ENOMEM;
    }
    return json_object_object_add(o, key, val) == 0 ? 0 : -ENOMEM;
}

static struct json_object *jstr(const char *s)
{
    return json_object_new_string(s);
}

static struct json_object *special_piece(const char *name)
{
    struct json_object *o = json_object_new_object();
    struct json_object *st = json_object_new_object();
    if (o == NULL || st == NULL || add(st, "id", jstr(name)) < 0 ||
        add(st, "type_id", json_object_new_int(0)) < 0 || add(o, "SpecialToken", st) < 0) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* The tokenizer.json of the synthetic vocabulary, shaped like Llama 3's. */
static int synth_tokenizer_json(genvocab *v)
{
    int rc = -ENOMEM;
    struct json_object *root = json_object_new_object();
    if (root == NULL) {
        return -ENOMEM;
    }
    struct json_object *added = json_object_new_array();
    if (add(root, "version", jstr("1.0")) < 0) {
        goto out;
    }
    /* A NULL value is JSON null in json-c. */
    json_object_object_add(root, "truncation", NULL);
    json_object_object_add(root, "padding", NULL);
    if (add(root, "added_tokens", added) < 0) {
        goto out;
    }
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (v->types[i] != GENV_CONTROL) {
            continue;
        }
        struct json_object *t = json_object_new_object();
        if (json_object_array_add(added, t) != 0 ||
            add(t, "id", json_object_new_int64((int64_t)i)) < 0 ||
            add(t, "content", jstr(v->tokens[i])) < 0 ||
            add(t, "single_word", json_object_new_boolean(0)) < 0 ||
            add(t, "lstrip", json_object_new_boolean(0)) < 0 ||
            add(t, "rstrip", json_object_new_boolean(0)) < 0 ||
            add(t, "normalized", json_object_new_boolean(0)) < 0 ||
            add(t, "special", json_object_new_boolean(1)) < 0) {
            goto out;
        }
    }
    json_object_object_add(root, "normalizer", NULL);
    struct json_object *pre = json_object_new_object();
    struct json_object *seq = json_object_new_array();
    struct json_object *split = json_object_new_object();
    struct json_object *pat = json_object_new_object();
    struct json_object *bl = json_object_new_object();
    if (add(root, "pre_tokenizer", pre) < 0 || add(pre, "type", jstr("Sequence")) < 0 ||
        add(pre, "pretokenizers", seq) < 0 || json_object_array_add(seq, split) != 0 ||
        add(split, "type", jstr("Split")) < 0 || add(split, "pattern", pat) < 0 ||
        add(pat, "Regex", jstr(llama3_split_regex)) < 0 ||
        add(split, "behavior", jstr("Isolated")) < 0 ||
        add(split, "invert", json_object_new_boolean(0)) < 0 ||
        json_object_array_add(seq, bl) != 0 || add(bl, "type", jstr("ByteLevel")) < 0 ||
        add(bl, "add_prefix_space", json_object_new_boolean(0)) < 0 ||
        add(bl, "trim_offsets", json_object_new_boolean(1)) < 0 ||
        add(bl, "use_regex", json_object_new_boolean(0)) < 0) {
        goto out;
    }
    const char *bos = v->tokens[v->bos];
    struct json_object *post = json_object_new_object();
    struct json_object *single = json_object_new_array();
    struct json_object *pair = json_object_new_array();
    struct json_object *seq_a = json_object_new_object();
    struct json_object *sa = json_object_new_object();
    struct json_object *seq_b = json_object_new_object();
    struct json_object *sb = json_object_new_object();
    struct json_object *sts = json_object_new_object();
    struct json_object *stb = json_object_new_object();
    struct json_object *ids = json_object_new_array();
    struct json_object *toks = json_object_new_array();
    if (add(root, "post_processor", post) < 0 ||
        add(post, "type", jstr("TemplateProcessing")) < 0 || add(post, "single", single) < 0 ||
        json_object_array_add(single, special_piece(bos)) != 0 ||
        json_object_array_add(single, seq_a) != 0 || add(seq_a, "Sequence", sa) < 0 ||
        add(sa, "id", jstr("A")) < 0 || add(sa, "type_id", json_object_new_int(0)) < 0 ||
        add(post, "pair", pair) < 0 || json_object_array_add(pair, special_piece(bos)) != 0 ||
        json_object_array_add(pair, json_object_get(seq_a)) != 0 ||
        json_object_array_add(pair, special_piece(bos)) != 0 ||
        json_object_array_add(pair, seq_b) != 0 || add(seq_b, "Sequence", sb) < 0 ||
        add(sb, "id", jstr("B")) < 0 || add(sb, "type_id", json_object_new_int(1)) < 0 ||
        add(post, "special_tokens", sts) < 0 || add(sts, bos, stb) < 0 ||
        add(stb, "id", jstr(bos)) < 0 || add(stb, "ids", ids) < 0 ||
        json_object_array_add(ids, json_object_new_int64(v->bos)) != 0 ||
        add(stb, "tokens", toks) < 0 || json_object_array_add(toks, jstr(bos)) != 0) {
        goto out;
    }
    struct json_object *dec = json_object_new_object();
    if (add(root, "decoder", dec) < 0 || add(dec, "type", jstr("ByteLevel")) < 0 ||
        add(dec, "add_prefix_space", json_object_new_boolean(1)) < 0 ||
        add(dec, "trim_offsets", json_object_new_boolean(1)) < 0 ||
        add(dec, "use_regex", json_object_new_boolean(1)) < 0) {
        goto out;
    }
    struct json_object *model = json_object_new_object();
    struct json_object *vocab = json_object_new_object();
    struct json_object *merges = json_object_new_array();
    if (add(root, "model", model) < 0 || add(model, "type", jstr("BPE")) < 0) {
        goto out;
    }
    json_object_object_add(model, "dropout", NULL);
    json_object_object_add(model, "unk_token", NULL);
    json_object_object_add(model, "continuing_subword_prefix", NULL);
    json_object_object_add(model, "end_of_word_suffix", NULL);
    if (add(model, "fuse_unk", json_object_new_boolean(0)) < 0 ||
        add(model, "byte_fallback", json_object_new_boolean(0)) < 0 ||
        add(model, "ignore_merges", json_object_new_boolean(1)) < 0 ||
        add(model, "vocab", vocab) < 0 || add(model, "merges", merges) < 0) {
        goto out;
    }
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (v->types[i] == GENV_CONTROL) {
            continue;
        }
        if (add(vocab, v->tokens[i], json_object_new_int64((int64_t)i)) < 0) {
            goto out;
        }
    }
    for (size_t i = 0; i < v->n_merges; i++) {
        if (json_object_array_add(merges, jstr(v->merges[i])) != 0) {
            goto out;
        }
    }
    rc = json_dump(root, &v->tokenizer_json, &v->tokenizer_json_len);
out:
    json_object_put(root);
    return rc;
}

static int synth_config_json(genvocab *v, int64_t ctx)
{
    int rc = -ENOMEM;
    struct json_object *root = json_object_new_object();
    if (root == NULL) {
        return rc;
    }
    if (add(root, "add_bos_token", json_object_new_boolean(v->add_bos)) < 0 ||
        add(root, "add_eos_token", json_object_new_boolean(v->add_eos)) < 0 ||
        add(root, "bos_token", jstr(v->tokens[v->bos])) < 0 ||
        add(root, "eos_token", jstr(v->tokens[v->eos])) < 0 ||
        add(root, "pad_token", jstr(v->tokens[v->pad])) < 0 ||
        add(root, "chat_template", jstr(v->chat_template)) < 0 ||
        add(root, "clean_up_tokenization_spaces", json_object_new_boolean(0)) < 0 ||
        add(root, "model_max_length", json_object_new_int64(ctx)) < 0 ||
        add(root, "tokenizer_class", jstr("PreTrainedTokenizerFast")) < 0) {
        goto out;
    }
    rc = json_dump(root, &v->tokenizer_config_json, &v->tokenizer_config_json_len);
out:
    json_object_put(root);
    return rc;
}

int genvocab_synthetic(genvocab *v, int64_t vocab_size, int64_t ctx, char *err, size_t errlen)
{
    memset(v, 0, sizeof(*v));
    if (vocab_size < 260 || vocab_size > (int64_t)GENV_MAX_TOKENS) {
        tandem_set_err(err, errlen,
                       "--vocab: %lld is out of range (260..%u for the synthetic tokenizer)",
                       (long long)vocab_size, GENV_MAX_TOKENS);
        return -EINVAL;
    }
    size_t n = (size_t)vocab_size;
    synth_word *words = NULL;
    size_t nw = 0;
    int rc = vocab_alloc(v, n, false);
    if (rc < 0) {
        goto fail;
    }
    snprintf(v->model, sizeof(v->model), "gpt2");
    snprintf(v->pre, sizeof(v->pre), "llama-bpe");
    for (unsigned b = 0; b < 256; b++) {
        char s[4];
        size_t l = tandem_utf8_put(s, byte_code_point(b));
        rc = set_token(v, b, s, l, GENV_NORMAL);
        if (rc < 0) {
            goto fail;
        }
    }
    size_t max_merges = n - 260;
    v->merges = calloc(max_merges + 1, sizeof(*v->merges));
    if (v->merges == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = synth_words(&words, &nw);
    if (rc == 0) {
        rc = synth_learn(v, words, nw, max_merges);
    }
    for (size_t i = 0; i < nw; i++) {
        free(words[i].sym);
    }
    free(words);
    if (rc < 0) {
        goto fail;
    }
    for (size_t i = 0; i < 4; i++) {
        rc = set_token(v, n - 4 + i, synth_specials[i], strlen(synth_specials[i]), GENV_CONTROL);
        if (rc < 0) {
            goto fail;
        }
    }
    rc = fill_pads(v);
    if (rc < 0) {
        goto fail;
    }
    v->bos = (int64_t)n - 4;
    v->pad = (int64_t)n - 3;
    v->eos = (int64_t)n - 1;
    v->add_bos = true;
    v->chat_template = dup_str(synth_chat_template, strlen(synth_chat_template));
    if (v->chat_template == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = synth_tokenizer_json(v);
    if (rc == 0) {
        rc = synth_config_json(v, ctx);
    }
    if (rc < 0) {
        goto fail;
    }
    return 0;
fail:
    tandem_set_err(err, errlen, "synthetic tokenizer: out of memory");
    genvocab_free(v);
    return rc;
}

/* ---- Hugging Face conversion --------------------------------------------------------------- */

static int read_file(const char *path, char **out, size_t *out_len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        tandem_set_err(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? -ENOENT : -EINVAL;
    }
    struct buf b;
    buf_init(&b, GENV_FILE_MAX);
    char chunk[65536];
    size_t got;
    int rc = 0;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = buf_append(&b, chunk, got);
        if (rc < 0) {
            tandem_set_err(err, errlen, "%s: too large or out of memory", path);
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        tandem_set_err(err, errlen, "%s: read error", path);
        rc = -EINVAL;
    }
    fclose(f);
    if (rc < 0) {
        buf_free(&b);
        return rc;
    }
    *out = buf_detach(&b, out_len);
    return *out == NULL ? -ENOMEM : 0;
}

/* The content of a config token entry: a string, or an AddedToken object's "content". */
static const char *token_content(struct json_object *cfg, const char *key)
{
    struct json_object *t = cfg != NULL ? json_get(cfg, key) : NULL;
    if (t == NULL) {
        return NULL;
    }
    if (json_object_is_type(t, json_type_string)) {
        return json_object_get_string(t);
    }
    if (json_object_is_type(t, json_type_object)) {
        struct json_object *c = json_get(t, "content");
        if (c != NULL && json_object_is_type(c, json_type_string)) {
            return json_object_get_string(c);
        }
    }
    return NULL;
}

static int64_t lookup(const strmap *m, const char *s)
{
    return s != NULL ? strmap_get(m, s, strlen(s)) : -1;
}

/* The special token the post-processor's "single" template (itself or inside a Sequence) starts
 * with, or NULL. */
static const char *post_first_special(struct json_object *post)
{
    if (post == NULL || !json_object_is_type(post, json_type_object)) {
        return NULL;
    }
    struct json_object *procs = json_get(post, "processors");
    if (procs != NULL && json_object_is_type(procs, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(procs); i++) {
            const char *s = post_first_special(json_object_array_get_idx(procs, i));
            if (s != NULL) {
                return s;
            }
        }
        return NULL;
    }
    struct json_object *single = json_get(post, "single");
    if (single == NULL || !json_object_is_type(single, json_type_array) ||
        json_object_array_length(single) == 0) {
        return NULL;
    }
    struct json_object *id = json_get(json_object_array_get_idx(single, 0), "SpecialToken.id");
    return id != NULL && json_object_is_type(id, json_type_string) ? json_object_get_string(id)
                                                                   : NULL;
}

static const char *detect_pre(const char *pre_json)
{
    if (pre_json == NULL) {
        return "default";
    }
    if (strstr(pre_json, "\"\\\\p{N}{1,3}\"") != NULL) {
        return "deepseek-v3"; /* a separate digit split before the word regex */
    }
    if (strstr(pre_json, "\\\\p{N}{1,3}|") != NULL) {
        return "llama-bpe";
    }
    if (strstr(pre_json, "|\\\\p{N}|") != NULL) {
        return "qwen2";
    }
    return "default";
}

/* Replaces every U+2581 in token id by a space (user-defined SPM tokens are pre-normalized). */
static void unescape_spaces(genvocab *v, size_t id)
{
    char *s = v->tokens[id];
    size_t o = 0;
    for (size_t i = 0; i < v->lens[id]; i++) {
        if (i + 2 < v->lens[id] && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
            (unsigned char)s[i + 2] == 0x81) {
            s[o++] = ' ';
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    v->lens[id] = (uint32_t)o;
}

static bool has_ends(const char *s, size_t n, const char *pre, const char *suf)
{
    size_t lp = strlen(pre), ls = strlen(suf);
    return n >= lp + ls && memcmp(s, pre, lp) == 0 && memcmp(s + n - ls, suf, ls) == 0;
}

/* convert_hf_to_gguf.py's does_token_look_special: added tokens that ought to be control
 * tokens although the tokenizer does not mark them special (llama.cpp would otherwise
 * override their type at load with a warning). */
static bool looks_special(const char *s, size_t n)
{
    static const char *const names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (n == strlen(names[i]) && memcmp(s, names[i], n) == 0) {
            return true;
        }
    }
    return has_ends(s, n, "<|", "|>") || has_ends(s, n, "<\xef\xbd\x9c", "\xef\xbd\x9c>") ||
           has_ends(s, n, "<unused", ">");
}

static bool is_byte_token(const char *s, size_t n)
{
    return n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>';
}

static size_t utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    }
    return c;
}

/* Gets merge i as its two parts: either "a b" or ["a", "b"]. */
static int merge_parts(struct json_object *m, const char **a, size_t *la, const char **b,
                       size_t *lb)
{
    if (json_object_is_type(m, json_type_string)) {
        const char *s = json_object_get_string(m);
        const char *sp = strchr(s, ' ');
        if (sp == NULL) {
            return -EINVAL;
        }
        *a = s;
        *la = (size_t)(sp - s);
        *b = sp + 1;
        *lb = strlen(sp + 1);
        return 0;
    }
    if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
        struct json_object *x = json_object_array_get_idx(m, 0);
        struct json_object *y = json_object_array_get_idx(m, 1);
        if (json_object_is_type(x, json_type_string) && json_object_is_type(y, json_type_string)) {
            *a = json_object_get_string(x);
            *la = (size_t)json_object_get_string_len(x);
            *b = json_object_get_string(y);
            *lb = (size_t)json_object_get_string_len(y);
            return 0;
        }
    }
    return -EINVAL;
}

/* Raises *max_id to the largest token id of a {piece: id} vocab object (NULL: none) and of the
 * added_tokens array (NULL: none), checking every id and added token. */
static int max_token_id(struct json_object *vocab, struct json_object *added, const char *tpath,
                        int64_t *max_id, char *err, size_t errlen)
{
    if (vocab != NULL) {
        json_object_object_foreach(vocab, key, val)
        {
            int64_t id = json_object_get_int64(val);
            if (!json_object_is_type(val, json_type_int) || id < 0 ||
                id >= (int64_t)GENV_MAX_TOKENS) {
                tandem_set_err(err, errlen, "%s: model.vocab[\"%s\"]: bad token id", tpath, key);
                return -EINVAL;
            }
            *max_id = id > *max_id ? id : *max_id;
        }
    }
    size_t n_added = added != NULL ? json_object_array_length(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        struct json_object *idv = json_get(json_object_array_get_idx(added, i), "id");
        struct json_object *content = json_get(json_object_array_get_idx(added, i), "content");
        int64_t id = idv != NULL ? json_object_get_int64(idv) : -1;
        if (idv == NULL || !json_object_is_type(idv, json_type_int) || id < 0 ||
            id >= (int64_t)GENV_MAX_TOKENS || content == NULL ||
            !json_object_is_type(content, json_type_string)) {
            tandem_set_err(err, errlen, "%s: added_tokens[%zu]: bad id or content", tpath, i);
            return -EINVAL;
        }
        *max_id = id > *max_id ? id : *max_id;
    }
    return 0;
}

static int hf_tokens(genvocab *v, struct json_object *tok, const char *tpath, int64_t min_vocab,
                     char *err, size_t errlen)
{
    struct json_object *vocab = json_get(tok, "model.vocab");
    struct json_object *added = json_get(tok, "added_tokens");
    if (vocab == NULL || !json_object_is_type(vocab, json_type_object)) {
        tandem_set_err(err, errlen, "%s: model.vocab: expected an object", tpath);
        return -EINVAL;
    }
    if (added != NULL && !json_object_is_type(added, json_type_array)) {
        tandem_set_err(err, errlen, "%s: added_tokens: expected an array", tpath);
        return -EINVAL;
    }
    int64_t max_id = -1;
    int rc = max_token_id(vocab, added, tpath, &max_id, err, errlen);
    if (rc != 0) {
        return rc;
    }
    const size_t n_added = added != NULL ? json_object_array_length(added) : 0;
    if (max_id < 0) {
        tandem_set_err(err, errlen, "%s: model.vocab: no tokens", tpath);
        return -EINVAL;
    }
    /* The tables are indexed by id, as the engine's tokenizer's are, with the same rule: a few
     * tokens with a huge id would cost megabytes each and seconds to scan. Real vocabularies are
     * dense; gaps up to the number of tokens plus GENV_MAX_GAP are tolerated. */
    size_t n_tokens = (size_t)json_object_object_length(vocab) + n_added;
    if ((size_t)max_id + 1 > 2 * n_tokens + GENV_MAX_GAP) {
        tandem_set_err(err, errlen,
                       "%s: model.vocab: ids reach %lld for %zu tokens: more than %zu unused ids "
                       "(a sparse vocabulary)",
                       tpath, (long long)max_id, n_tokens, n_tokens + (size_t)GENV_MAX_GAP);
        return -EINVAL;
    }
    size_t n = (size_t)(max_id + 1);
    if (min_vocab > (int64_t)n) {
        n = (size_t)min_vocab;
    }
    rc = vocab_alloc(v, n, strcmp(v->model, "llama") == 0);
    if (rc < 0) {
        return rc;
    }
    const char *unk = NULL;
    struct json_object *unkv = json_get(tok, "model.unk_token");
    if (unkv != NULL && json_object_is_type(unkv, json_type_string)) {
        unk = json_object_get_string(unkv);
    }
    bool spm = v->scores != NULL;
    json_object_object_foreach(vocab, k2, v2)
    {
        size_t id = (size_t)json_object_get_int64(v2);
        size_t len = strlen(k2);
        int32_t type = GENV_NORMAL;
        if (spm && is_byte_token(k2, len)) {
            type = GENV_BYTE;
        } else if (spm && unk != NULL && strcmp(k2, unk) == 0) {
            type = GENV_UNKNOWN;
        }
        rc = set_token(v, id, k2, len, type);
        if (rc < 0) {
            return rc;
        }
    }
    for (size_t i = 0; i < n_added; i++) {
        struct json_object *a = json_object_array_get_idx(added, i);
        struct json_object *content = json_get(a, "content");
        size_t id = (size_t)json_object_get_int64(json_get(a, "id"));
        struct json_object *special = json_get(a, "special");
        const char *c = json_object_get_string(content);
        size_t clen = (size_t)json_object_get_string_len(content);
        bool is_special =
            (special != NULL && json_object_get_boolean(special)) || looks_special(c, clen);
        int32_t type = is_special ? GENV_CONTROL : GENV_USER_DEFINED;
        if (spm && unk != NULL && strcmp(c, unk) == 0) {
            type = GENV_UNKNOWN;
        }
        rc = set_token(v, id, c, clen, type);
        if (rc < 0) {
            return rc;
        }
        if (spm && type == GENV_USER_DEFINED) {
            unescape_spaces(v, id);
        }
    }
    return fill_pads(v);
}

static int hf_merges(genvocab *v, struct json_object *tok, const char *tpath, char *err,
                     size_t errlen)
{
    struct json_object *merges = json_get(tok, "model.merges");
    if (merges == NULL || !json_object_is_type(merges, json_type_array)) {
        tandem_set_err(err, errlen, "%s: model.merges: expected an array", tpath);
        return -EINVAL;
    }
    size_t nm = json_object_array_length(merges);
    bool spm = v->scores != NULL;
    strmap map = {0};
    int rc = 0;
    if (spm) {
        rc = strmap_build(&map, v);
        if (rc < 0) {
            return rc;
        }
        for (size_t i = 0; i < v->n_tokens; i++) {
            bool base = v->types[i] != GENV_NORMAL || utf8_count(v->tokens[i], v->lens[i]) <= 1;
            v->scores[i] = base ? 0.0f : -1e9f;
        }
    } else {
        v->merges = calloc(nm + 1, sizeof(*v->merges));
        if (v->merges == NULL) {
            return -ENOMEM;
        }
    }
    char *joined = NULL;
    size_t joined_cap = 0;
    for (size_t i = 0; i < nm; i++) {
        const char *a, *b;
        size_t la, lb;
        if (merge_parts(json_object_array_get_idx(merges, i), &a, &la, &b, &lb) < 0) {
            tandem_set_err(err, errlen, "%s: model.merges[%zu]: expected \"a b\" or [a, b]", tpath,
                           i);
            rc = -EINVAL;
            break;
        }
        if (!spm) {
            rc = append_merge(v, a, la, b, lb);
            if (rc < 0) {
                break;
            }
            continue;
        }
        if (joined == NULL || la + lb > joined_cap) {
            joined_cap = (la + lb) * 2 + 16;
            char *nj = realloc(joined, joined_cap);
            if (nj == NULL) {
                rc = -ENOMEM;
                break;
            }
            joined = nj;
        }
        memcpy(joined, a, la);
        memcpy(joined + la, b, lb);
        int64_t id = strmap_get(&map, joined, la + lb);
        if (id >= 0 && v->scores != NULL && v->types[id] == GENV_NORMAL && v->scores[id] == -1e9f) {
            v->scores[id] = -(float)(i + 1);
        }
    }
    free(joined);
    free(map.ids);
    return rc;
}

static int hf_specials(genvocab *v, struct json_object *tok, struct json_object *cfg,
                       const char *cpath, char *err, size_t errlen)
{
    strmap map = {0};
    int rc = strmap_build(&map, v);
    if (rc < 0) {
        return rc;
    }
    const char *bos_s = token_content(cfg, "bos_token");
    v->bos = lookup(&map, bos_s);
    v->eos = lookup(&map, token_content(cfg, "eos_token"));
    v->pad = lookup(&map, token_content(cfg, "pad_token"));
    const char *unk_s = token_content(cfg, "unk_token");
    struct json_object *unkv = json_get(tok, "model.unk_token");
    if (unk_s == NULL && unkv != NULL && json_object_is_type(unkv, json_type_string)) {
        unk_s = json_object_get_string(unkv);
    }
    v->unk = lookup(&map, unk_s);
    const char *first = post_first_special(json_get(tok, "post_processor"));
    if (v->bos < 0 && bos_s == NULL && first != NULL) {
        v->bos = lookup(&map, first); /* the template's leading special token is the bos */
        bos_s = first;
    }
    free(map.ids);
    if (v->bos < 0) {
        v->bos = v->pad >= 0 ? v->pad : v->eos;
    }
    struct json_object *ab = cfg != NULL ? json_get(cfg, "add_bos_token") : NULL;
    if (ab != NULL && json_object_is_type(ab, json_type_boolean)) {
        v->add_bos = json_object_get_boolean(ab) != 0;
    } else {
        v->add_bos = first != NULL && bos_s != NULL && strcmp(first, bos_s) == 0;
    }
    struct json_object *ae = cfg != NULL ? json_get(cfg, "add_eos_token") : NULL;
    v->add_eos =
        ae != NULL && json_object_is_type(ae, json_type_boolean) && json_object_get_boolean(ae);
    struct json_object *ct = cfg != NULL ? json_get(cfg, "chat_template") : NULL;
    const char *tmpl = NULL;
    if (ct != NULL && json_object_is_type(ct, json_type_string)) {
        tmpl = json_object_get_string(ct);
    } else if (ct != NULL && json_object_is_type(ct, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(ct); i++) {
            struct json_object *e = json_object_array_get_idx(ct, i);
            struct json_object *name = json_get(e, "name");
            struct json_object *t = json_get(e, "template");
            if (name != NULL && t != NULL && json_object_is_type(t, json_type_string) &&
                strcmp(json_object_get_string(name), "default") == 0) {
                tmpl = json_object_get_string(t);
            }
        }
    } else if (ct != NULL) {
        tandem_set_err(err, errlen, "%s: chat_template: expected a string or a list", cpath);
        return -EINVAL;
    }
    if (tmpl != NULL) {
        v->chat_template = dup_str(tmpl, strlen(tmpl));
        if (v->chat_template == NULL) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- Unigram and WordPiece ------------------------------------------------------------- */

/* The first step of the given type in a normalizer / pre-tokenizer tree (the node itself or,
 * recursively, an element of its `list` array), or NULL. */
static struct json_object *find_step(struct json_object *n, const char *list, const char *type)
{
    if (n == NULL || !json_object_is_type(n, json_type_object)) {
        return NULL;
    }
    struct json_object *t = json_get(n, "type");
    if (t != NULL && json_object_is_type(t, json_type_string) &&
        strcmp(json_object_get_string(t), type) == 0) {
        return n;
    }
    struct json_object *arr = json_get(n, list);
    for (size_t i = 0; arr != NULL && json_object_is_type(arr, json_type_array) &&
                       i < json_object_array_length(arr);
         i++) {
        struct json_object *f = find_step(json_object_array_get_idx(arr, i), list, type);
        if (f != NULL) {
            return f;
        }
    }
    return NULL;
}

/* The special token the post-processor's "single" template ends with (BertProcessing and
 * RobertaProcessing: their sep), or NULL. */
static const char *post_last_special(struct json_object *post)
{
    if (post == NULL || !json_object_is_type(post, json_type_object)) {
        return NULL;
    }
    struct json_object *sep = json_get(post, "sep[0]");
    if (sep != NULL && json_object_is_type(sep, json_type_string)) {
        return json_object_get_string(sep);
    }
    struct json_object *procs = json_get(post, "processors");
    if (procs != NULL && json_object_is_type(procs, json_type_array)) {
        const char *last = NULL;
        for (size_t i = 0; i < json_object_array_length(procs); i++) {
            const char *s = post_last_special(json_object_array_get_idx(procs, i));
            last = s != NULL ? s : last;
        }
        return last;
    }
    struct json_object *single = json_get(post, "single");
    size_t n = single != NULL && json_object_is_type(single, json_type_array)
                   ? json_object_array_length(single)
                   : 0;
    struct json_object *id =
        n > 0 ? json_get(json_object_array_get_idx(single, n - 1), "SpecialToken.id") : NULL;
    return id != NULL && json_object_is_type(id, json_type_string) ? json_object_get_string(id)
                                                                   : NULL;
}

/* Tokens and types of a Unigram (vocab [[piece, score], ...]) or WordPiece ({piece: id})
 * model plus the added tokens, by id. */
static int hf_vocab_ugm_wpm(genvocab *v, struct json_object *tok, const char *tpath,
                            int64_t min_vocab, bool ugm, char *err, size_t errlen)
{
    struct json_object *vocab = json_get(tok, "model.vocab");
    struct json_object *added = json_get(tok, "added_tokens");
    if (vocab == NULL || !json_object_is_type(vocab, ugm ? json_type_array : json_type_object)) {
        tandem_set_err(err, errlen, "%s: model.vocab: expected %s", tpath,
                       ugm ? "an array of [piece, score]" : "an object");
        return -EINVAL;
    }
    if (added != NULL && !json_object_is_type(added, json_type_array)) {
        tandem_set_err(err, errlen, "%s: added_tokens: expected an array", tpath);
        return -EINVAL;
    }
    size_t n_model =
        ugm ? json_object_array_length(vocab) : (size_t)json_object_object_length(vocab);
    int64_t max_id = ugm ? (int64_t)n_model - 1 : -1;
    int rc = max_token_id(ugm ? NULL : vocab, added, tpath, &max_id, err, errlen);
    if (rc != 0) {
        return rc;
    }
    const size_t n_added = added != NULL ? json_object_array_length(added) : 0;
    if (max_id < 0 || n_model > GENV_MAX_TOKENS) {
        tandem_set_err(err, errlen, "%s: model.vocab: no tokens (or too many)", tpath);
        return -EINVAL;
    }
    if ((size_t)max_id + 1 > 2 * (n_model + n_added) + GENV_MAX_GAP) {
        tandem_set_err(err, errlen, "%s: model.vocab: ids too sparse (a sparse vocabulary)", tpath);
        return -EINVAL;
    }
    size_t n = (size_t)(max_id + 1);
    if (min_vocab > (int64_t)n) {
        n = (size_t)min_vocab;
    }
    rc = vocab_alloc(v, n, ugm);
    if (rc < 0) {
        return rc;
    }
    int64_t unk_id = -1;
    bool bf = false;
    if (ugm) {
        struct json_object *u = json_get(tok, "model.unk_id");
        struct json_object *b = json_get(tok, "model.byte_fallback");
        unk_id = u != NULL && json_object_is_type(u, json_type_int) ? json_object_get_int64(u) : -1;
        unk_id = unk_id < (int64_t)n_model ? unk_id : -1;
        bf = b != NULL && json_object_is_type(b, json_type_boolean) && json_object_get_boolean(b);
        for (size_t i = 0; i < n_model; i++) {
            struct json_object *e = json_object_array_get_idx(vocab, i);
            struct json_object *p = json_get(e, "[0]"), *sc = json_get(e, "[1]");
            if (!json_object_is_type(e, json_type_array) || json_object_array_length(e) != 2 ||
                p == NULL || !json_object_is_type(p, json_type_string) || sc == NULL ||
                !(json_object_is_type(sc, json_type_double) ||
                  json_object_is_type(sc, json_type_int))) {
                tandem_set_err(err, errlen, "%s: model.vocab[%zu]: expected [piece, score]", tpath,
                               i);
                return -EINVAL;
            }
            const char *ps = json_object_get_string(p);
            size_t pl = (size_t)json_object_get_string_len(p);
            int32_t type = (int64_t)i == unk_id          ? GENV_UNKNOWN
                           : bf && is_byte_token(ps, pl) ? GENV_BYTE
                                                         : GENV_NORMAL;
            rc = set_token(v, i, ps, pl, type);
            if (rc < 0) {
                return rc;
            }
            v->scores[i] = (float)json_object_get_double(sc);
        }
        v->unk = unk_id;
    } else {
        json_object_object_foreach(vocab, k2, v2)
        {
            rc = set_token(v, (size_t)json_object_get_int64(v2), k2, strlen(k2), GENV_NORMAL);
            if (rc < 0) {
                return rc;
            }
        }
    }
    for (size_t i = 0; i < n_added; i++) {
        struct json_object *a = json_object_array_get_idx(added, i);
        struct json_object *content = json_get(a, "content");
        struct json_object *special = json_get(a, "special");
        int64_t id = json_object_get_int64(json_get(a, "id"));
        const char *c = json_object_get_string(content);
        size_t clen = (size_t)json_object_get_string_len(content);
        bool is_special =
            (special != NULL && json_object_get_boolean(special)) || looks_special(c, clen);
        int32_t type = id == unk_id ? GENV_UNKNOWN : is_special ? GENV_CONTROL : GENV_USER_DEFINED;
        rc = set_token(v, (size_t)id, c, clen, type);
        if (rc < 0) {
            return rc;
        }
    }
    return fill_pads(v);
}

/* model.type "Unigram" → "t5", "WordPiece" → "bert" (see genvocab.h). */
static int from_ugm_wpm(genvocab *v, struct json_object *tok, struct json_object *cfg,
                        const char *tpath, const char *cpath, int64_t min_vocab, bool ugm,
                        char *err, size_t errlen)
{
    snprintf(v->model, sizeof(v->model), "%s", ugm ? "t5" : "bert");
    snprintf(v->pre, sizeof(v->pre), "default");
    int rc = hf_vocab_ugm_wpm(v, tok, tpath, min_vocab, ugm, err, errlen);
    int64_t unk = v->unk;
    if (rc == 0) {
        rc = hf_specials(v, tok, cfg, cpath, err, errlen);
    }
    if (rc < 0) {
        return rc;
    }
    struct json_object *norm = json_get(tok, "normalizer");
    struct json_object *pre = json_get(tok, "pre_tokenizer");
    const char *last = post_last_special(json_get(tok, "post_processor"));
    strmap map = {0};
    rc = strmap_build(&map, v);
    if (rc < 0) {
        return rc;
    }
    int64_t last_id = lookup(&map, last);
    free(map.ids);
    if (ugm) {
        v->unk = unk >= 0 ? unk : v->unk;
        struct json_object *ae = cfg != NULL ? json_get(cfg, "add_eos_token") : NULL;
        if (ae == NULL || !json_object_is_type(ae, json_type_boolean)) {
            v->add_eos = v->eos >= 0 && last_id == v->eos;
        }
        struct json_object *pc =
            json_get(find_step(norm, "normalizers", "Precompiled"), "precompiled_charsmap");
        if (pc != NULL && json_object_is_type(pc, json_type_string) &&
            json_object_get_string_len(pc) > 0) {
            rc = tandem_base64_decode(json_object_get_string(pc),
                                      (size_t)json_object_get_string_len(pc), &v->charsmap,
                                      &v->charsmap_len);
            if (rc == -EINVAL) {
                tandem_set_err(err, errlen, "%s: normalizer.precompiled_charsmap: not base64",
                               tpath);
            }
            if (rc < 0) {
                return rc;
            }
        }
        struct json_object *meta = find_step(pre, "pretokenizers", "Metaspace");
        struct json_object *scheme = json_get(meta, "prepend_scheme");
        struct json_object *aps = json_get(meta, "add_prefix_space");
        if (scheme != NULL && json_object_is_type(scheme, json_type_string)) {
            v->add_space_prefix = strcmp(json_object_get_string(scheme), "never") != 0;
        } else {
            v->add_space_prefix = meta != NULL && (aps == NULL || json_object_get_boolean(aps));
        }
        const char *ns =
            norm != NULL ? json_object_to_json_string_ext(norm, JSON_C_TO_STRING_PLAIN) : "";
        v->remove_extra_ws = find_step(pre, "pretokenizers", "WhitespaceSplit") != NULL ||
                             strstr(ns, "\" {2,}\"") != NULL;
        return 0;
    }
    v->sep = last_id;
    v->add_sep = last_id >= 0;
    v->add_eos = false;
    struct json_object *bn = find_step(norm, "normalizers", "BertNormalizer");
    if (bn != NULL) {
        struct json_object *lc = json_get(bn, "lowercase"), *sa = json_get(bn, "strip_accents");
        v->lowercase = lc == NULL || json_object_get_boolean(lc) ? 1 : 0;
        v->strip_accents = sa == NULL || json_object_is_type(sa, json_type_null)
                               ? -1
                               : (json_object_get_boolean(sa) ? 1 : 0);
    } else {
        v->lowercase = find_step(norm, "normalizers", "Lowercase") != NULL;
        v->strip_accents = find_step(norm, "normalizers", "StripAccents") != NULL;
    }
    /* convert_hf_to_gguf.py BertModel: "##x" → "x", other non-control x → "▁x" */
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (v->types[i] == GENV_CONTROL) {
            continue;
        }
        char *t = v->tokens[i];
        size_t l = v->lens[i];
        if (l >= 2 && t[0] == '#' && t[1] == '#') {
            if (l == 2) {
                tandem_set_err(err, errlen, "%s: model.vocab: token %zu \"##\" has no GGUF form",
                               tpath, i);
                return -EINVAL;
            }
            memmove(t, t + 2, l - 1);
            v->lens[i] = (uint32_t)(l - 2);
        } else {
            char *p = malloc(l + 4);
            if (p == NULL) {
                return -ENOMEM;
            }
            p[0] = '\xE2'; /* U+2581 */
            p[1] = '\x96';
            p[2] = '\x81';
            memcpy(p + 3, t, l + 1); /* with its NUL */
            free(t);
            v->tokens[i] = p;
            v->lens[i] = (uint32_t)(l + 3);
        }
    }
    return 0;
}

/* Converts the already parsed documents; tpath / cpath name them in messages. */
static int from_parsed(genvocab *v, struct json_object *tok, struct json_object *cfg,
                       const char *tpath, const char *cpath, const char *pre_override,
                       int64_t min_vocab, char *err, size_t errlen)
{
    if (!json_object_is_type(tok, json_type_object)) {
        tandem_set_err(err, errlen, "%s: expected a JSON object", tpath);
        return -EINVAL;
    }
    if (cfg != NULL && !json_object_is_type(cfg, json_type_object)) {
        tandem_set_err(err, errlen, "%s: expected a JSON object", cpath);
        return -EINVAL;
    }
    struct json_object *type = json_get(tok, "model.type");
    const char *ts = type != NULL && json_object_is_type(type, json_type_string)
                         ? json_object_get_string(type)
                         : "";
    if (strcmp(ts, "Unigram") == 0 || strcmp(ts, "WordPiece") == 0) {
        return from_ugm_wpm(v, tok, cfg, tpath, cpath, min_vocab, ts[0] == 'U', err, errlen);
    }
    if (strcmp(ts, "BPE") != 0) {
        tandem_set_err(err, errlen, "%s: model.type: BPE, Unigram or WordPiece tokenizers only",
                       tpath);
        return -EINVAL;
    }
    struct json_object *bf = json_get(tok, "model.byte_fallback");
    bool spm =
        bf != NULL && json_object_is_type(bf, json_type_boolean) && json_object_get_boolean(bf);
    snprintf(v->model, sizeof(v->model), "%s", spm ? "llama" : "gpt2");
    if (spm) {
        snprintf(v->pre, sizeof(v->pre), "default");
        struct json_object *norm = json_get(tok, "normalizer");
        const char *ns =
            norm != NULL ? json_object_to_json_string_ext(norm, JSON_C_TO_STRING_PLAIN) : "";
        v->add_space_prefix = strstr(ns, "\"Prepend\"") != NULL;
    } else {
        struct json_object *pre = json_get(tok, "pre_tokenizer");
        snprintf(v->pre, sizeof(v->pre), "%s",
                 detect_pre(pre != NULL
                                ? json_object_to_json_string_ext(pre, JSON_C_TO_STRING_PLAIN)
                                : NULL));
    }
    if (pre_override != NULL) {
        snprintf(v->pre, sizeof(v->pre), "%s", pre_override);
    }
    int rc = hf_tokens(v, tok, tpath, min_vocab, err, errlen);
    if (rc == 0) {
        rc = hf_merges(v, tok, tpath, err, errlen);
    }
    if (rc == 0) {
        rc = hf_specials(v, tok, cfg, cpath, err, errlen);
    }
    return rc;
}

int genvocab_from_hf_json(genvocab *v, const char *tok_json, size_t tok_len, const char *cfg_json,
                          size_t cfg_len, const char *pre_override, int64_t min_vocab, char *err,
                          size_t errlen)
{
    memset(v, 0, sizeof(*v));
    struct json_object *tok = NULL, *cfg = NULL;
    char perr[256];
    int rc = -ENOMEM;
    v->tokenizer_json = dup_str(tok_json, tok_len);
    v->tokenizer_json_len = tok_len;
    if (v->tokenizer_json == NULL) {
        goto fail;
    }
    if (cfg_json != NULL) {
        v->tokenizer_config_json = dup_str(cfg_json, cfg_len);
        v->tokenizer_config_json_len = cfg_len;
        if (v->tokenizer_config_json == NULL) {
            goto fail;
        }
    }
    tok = json_parse(tok_json, tok_len, perr, sizeof(perr));
    if (tok == NULL) {
        tandem_set_err(err, errlen, "tokenizer.json: %s", perr);
        rc = -EINVAL;
        goto fail;
    }
    if (cfg_json != NULL) {
        cfg = json_parse(cfg_json, cfg_len, perr, sizeof(perr));
        if (cfg == NULL) {
            tandem_set_err(err, errlen, "tokenizer_config.json: %s", perr);
            rc = -EINVAL;
            goto fail;
        }
    }
    rc = from_parsed(v, tok, cfg, "tokenizer.json", "tokenizer_config.json", pre_override,
                     min_vocab, err, errlen);
    if (rc < 0) {
        goto fail;
    }
    json_object_put(tok);
    json_object_put(cfg);
    return 0;
fail:
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "tokenizer: out of memory");
    }
    json_object_put(tok);
    json_object_put(cfg);
    genvocab_free(v);
    return rc;
}

int genvocab_from_hf(genvocab *v, const char *path, const char *pre_override, int64_t min_vocab,
                     char *err, size_t errlen)
{
    memset(v, 0, sizeof(*v));
    char tpath[4096], cpath[4096];
    size_t pl = strlen(path);
    if (pl >= 5 && strcmp(path + pl - 5, ".json") == 0) {
        snprintf(tpath, sizeof(tpath), "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash == NULL) {
            snprintf(cpath, sizeof(cpath), "tokenizer_config.json");
        } else {
            snprintf(cpath, sizeof(cpath), "%.*s/tokenizer_config.json", (int)(slash - path), path);
        }
    } else {
        snprintf(tpath, sizeof(tpath), "%s/tokenizer.json", path);
        snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", path);
    }
    char *tok_text = NULL, *cfg_text = NULL;
    size_t tok_len = 0, cfg_len = 0;
    int rc = read_file(tpath, &tok_text, &tok_len, err, errlen);
    if (rc == 0) {
        rc = read_file(cpath, &cfg_text, &cfg_len, err, errlen);
        if (rc == -ENOENT) {
            rc = 0;
        }
    }
    if (rc == 0) {
        char inner[400];
        rc = genvocab_from_hf_json(v, tok_text, tok_len, cfg_text, cfg_len, pre_override, min_vocab,
                                   inner, sizeof(inner));
        if (rc < 0) {
            tandem_set_err(err, errlen, "%s: %s", path, inner);
        }
    }
    free(tok_text);
    free(cfg_text);
    return rc;
}
