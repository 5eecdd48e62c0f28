/*
 * Token sampling for the engine, with vLLM (v1) semantics and defaults.
 *
 * One call of sampler_sample turns the logits of one sequence at one step into one token:
 *   raw logprobs (when asked) → allowed_token_ids → bad_words → logit_bias → repetition /
 * presence / frequency penalties → ban of the stop tokens while fewer than min_tokens tokens were
 * generated → greedy (temperature < 1e-5) or temperature → min_p → top_k → top_p → a draw from the
 * per-sequence RNG. Logprobs follow vLLM's
 * default logprobs_mode "raw_logprobs": log_softmax of the logits as the model produced them,
 * before penalties and temperature.
 *
 * Penalties (vLLM / Hugging Face rules): repetition_penalty p applies to every token seen in the
 * prompt or the output so far (logit > 0 → logit / p, else logit * p); presence and frequency
 * penalties apply to output tokens only (logit -= presence * (count > 0) + frequency * count).
 *
 * Per-sequence state (struct sampler_state) holds the RNG (xoshiro256**, seeded through
 * splitmix64 from the request's seed, or from getrandom() when no seed is given), the counts of
 * the output tokens and the set of prompt tokens (small open-addressing hash tables, allocated
 * only when a penalty needs them), the number of tokens generated and the ids banned before
 * min_tokens. sampler_sample does not record the token it returns: the caller calls
 * sampler_accept with the token that is appended to the sequence (the sampled one, or a teacher
 * token), so the state always describes the real sequence.
 *
 * Work memory: a struct sampler_scratch (per thread, reused across calls) holds the candidate
 * arrays (8 bytes per vocabulary entry) and a copy of the raw logits when logprobs are asked.
 * Nothing sorts the whole vocabulary: top_k uses a partial selection, top_p pops candidates from
 * a heap only until the probability mass is reached, top logprobs use a heap of at most 20.
 *
 * Candidates whose temperature-scaled logit is more than SAMPLER_PRUNE_LOGIT (40) below the best
 * are dropped before the draw: each has probability < 4.3e-18 relative to the best token, all of
 * them together < 1e-12 for a 256k vocabulary, below what a float32 softmax resolves, and it
 * spares the exp of most of a real model's vocabulary.
 *
 * Threading: a state and a scratch are used by one thread at a time; params are read-only.
 */
#ifndef TANDEM_ENGINE_SAMPLER_SAMPLER_H
#define TANDEM_ENGINE_SAMPLER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define SAMPLER_MAX_LOGPROBS  20   /* most top logprobs per token (vLLM's max_logprobs default) */
#define SAMPLER_GREEDY_EPS    1e-5 /* temperature below this is greedy (vLLM's _SAMPLING_EPS) */
#define SAMPLER_MAX_STOP_IDS  1024 /* most stop_token_ids + eos ids per sequence */
#define SAMPLER_LOGPROB_FLOOR -9999.0f /* what -inf logprobs become (vLLM's chat clamp) */
#define SAMPLER_PRUNE_LOGIT   40.0f    /* candidates end this far below the best scaled logit */

/* Sampling parameters of one request. Fill with sampling_params_init, then set fields. */
struct sampling_params {
    float temperature;        /* 1.0; < SAMPLER_GREEDY_EPS → greedy (argmax) */
    int top_k;                /* 0 or -1: off; else keep the k most likely */
    float top_p;              /* 1.0: off; (0, 1] */
    float min_p;              /* 0.0: off; [0, 1], relative to the most likely token */
    float repetition_penalty; /* 1.0: off; > 0 */
    float presence_penalty;   /* 0.0: off; [-2, 2] */
    float frequency_penalty;  /* 0.0: off; [-2, 2] */
    int has_seed;             /* seed is valid: the RNG is reproducible */
    uint64_t seed;            /* per-request seed (any 64-bit value) */
    int logprobs;             /* -1: none; 0..SAMPLER_MAX_LOGPROBS: sampled + that many top */
    int min_tokens;           /* EOS and stop_token_ids banned until this many were generated */
    int ignore_eos;           /* EOS does not end the sequence (and is not banned) */
    const int32_t *stop_token_ids; /* borrowed; read only by sampler_state_init */
    size_t n_stop_token_ids;
    /* logit_bias: bias_vals[i] is added to the logit of bias_ids[i] (ids >= 0; a repeated id
     * adds up) before the penalties, as vLLM v1's logits processors run; raw logprobs do not
     * see it. Borrowed; read only by sampler_state_init, which keeps a copy. */
    const int32_t *bias_ids;
    const float *bias_vals;
    size_t n_bias;
    /* allowed_token_ids: only these may be sampled (applied after the raw logprobs, before
     * logit_bias, as vLLM v1 does). Borrowed; read only by sampler_state_init (kept sorted). */
    const int32_t *allowed_ids;
    size_t n_allowed;
    /* bad_words as token sequences (vLLM's bad_words_token_ids), back to back in bad_words,
     * bad_words_lens[i] (>= 1) tokens for the i-th: at each step the last token of a sequence is
     * banned when the output so far ends with its other tokens (a one-token sequence is always
     * banned). Applied after allowed_token_ids, before logit_bias, as vLLM v1 does; only the
     * output counts, not the prompt. Borrowed; read only by sampler_state_init (kept a copy). */
    const int32_t *bad_words;
    const int32_t *bad_words_lens;
    size_t n_bad_words;
    /* repetition detection (vLLM's repetition_detection): the sequence ends ("repetition") once
     * its output ends with a pattern of rep_min_pattern..rep_max_pattern tokens repeated
     * rep_min_count times in a row; rep_max_pattern 0: off (sampler_is_repetition) */
    int32_t rep_max_pattern;
    int32_t rep_min_pattern; /* 0 counts as 1 */
    int32_t rep_min_count;   /* >= 2 when on */
};

/* Sets vLLM's defaults (the comments above) and no stop tokens. */
void sampling_params_init(struct sampling_params *p);

/* Open-addressing table token → count; internal to the sampler (keys -1 = empty). */
struct sampler_counts {
    int32_t *keys;
    int32_t *vals;
    size_t cap; /* power of two, 0 when not allocated */
    size_t len; /* distinct keys */
};

struct sampler_state {
    uint64_t rng[4];              /* xoshiro256** state */
    struct sampler_counts output; /* output token counts (when any penalty is on) */
    struct sampler_counts prompt; /* prompt token set (when repetition_penalty != 1) */
    int track_output;             /* output counts are kept */
    int n_generated;              /* tokens accepted so far */
    int32_t *stop_ids;            /* eos (unless ignore_eos) + stop_token_ids, deduplicated */
    size_t n_stop_ids;
    size_t n_eos;      /* the first n_eos entries of stop_ids are eos ids */
    int32_t *bias_ids; /* logit_bias (params' copy), n_bias entries */
    float *bias_vals;
    size_t n_bias;
    int32_t *allowed_ids; /* allowed_token_ids, sorted and deduplicated; n_allowed 0: all */
    size_t n_allowed;
    int32_t *bad_words; /* bad_words (params' copy), n_bad_words sequences back to back */
    int32_t *bad_words_lens;
    size_t n_bad_words;
    int32_t *recent;   /* the last recent_cap output tokens, a ring indexed by n_generated (kept
                          only for bad_words of two tokens or more: their longest prefix) */
    size_t recent_cap; /* 0: none kept */
};

/* Work memory reused across calls (see the file comment). Zero-initialise or sampler_scratch_init.
 */
struct sampler_scratch {
    int32_t *idx; /* candidate token ids */
    float *val;   /* candidate logits */
    float *raw;   /* raw logits copy (logprobs) */
    size_t cap;   /* entries allocated in each array */
};

void sampler_scratch_init(struct sampler_scratch *s);
void sampler_scratch_deinit(struct sampler_scratch *s);

struct sample_top {
    int32_t token;
    float logprob;
};

struct sample_result {
    int32_t token; /* the sampled token */
    float logprob; /* its raw logprob (0 when params->logprobs < 0) */
    int rank;      /* 1-based rank of the token among raw logits (0 when no logprobs) */
    int n_top;     /* entries in top (min(params->logprobs, n_vocab), 0 when none) */
    struct sample_top top[SAMPLER_MAX_LOGPROBS]; /* most likely raw tokens, best first */
};

/*
 * Prepares the state of one sequence: RNG from params->seed when has_seed, else from the OS;
 * the prompt token set when repetition_penalty != 1; the banned/stop ids from eos_ids (skipped
 * when params->ignore_eos) and params->stop_token_ids; copies of the logit_bias, allowed ids and
 * bad_words. prompt and eos_ids are read, not kept. 0, -EINVAL (too many stop ids, negative ids,
 * NULL with a count, a bad_words sequence of no tokens), -ENOMEM. On error the state
 * needs no deinit.
 */
int sampler_state_init(struct sampler_state *st, const struct sampling_params *params,
                       const int32_t *prompt, size_t n_prompt, const int32_t *eos_ids,
                       size_t n_eos);

/* Frees the state's memory. Safe on a zeroed state. */
void sampler_state_deinit(struct sampler_state *st);

/* Records token as appended to the output (counts for the penalties, n_generated). 0/-ENOMEM. */
int sampler_accept(struct sampler_state *st, int32_t token);

/*
 * Samples one token from logits[0..n_vocab) (modified in place: penalties, bans, temperature).
 * scratch may be NULL: memory is then allocated and freed inside the call. Advances the RNG only
 * when it draws (never for greedy). Returns 0, -EINVAL (n_vocab < 1, or every token masked to
 * -inf / NaN logits so that nothing can be drawn), -ENOMEM.
 */
int sampler_sample(const struct sampling_params *params, struct sampler_state *st,
                   struct sampler_scratch *scratch, float *logits, int n_vocab,
                   struct sample_result *out);

/* The raw logprobs of one row of logits without sampling (vLLM's prompt logprobs): token's
 * logprob and rank and the n_top (capped at SAMPLER_MAX_LOGPROBS and n_vocab) most likely
 * tokens, as sampler_sample reports them for a sampled token. 0, or -EINVAL (token outside
 * [0, n_vocab), n_top < 0). */
int sampler_logprobs(const float *raw, int n_vocab, int32_t token, int n_top,
                     struct sample_result *out);

/* 1 when token ends the sequence: an eos id (unless ignore_eos) or a stop_token_id, and the
 * output has at least min_tokens tokens. Call it after sampler_accept(token) (vLLM's order). */
int sampler_is_stop_token(const struct sampling_params *params, const struct sampler_state *st,
                          int32_t token);

/* 1 when the output tokens out[0..n) end with a repeated pattern (sampling_params'
 * repetition detection; vLLM's check_sequence_repetition): for some pattern length L in
 * [max(rep_min_pattern, 1), rep_max_pattern] with L * rep_min_count <= n, the last L tokens
 * equal each of the rep_min_count - 1 blocks of L before them. 0 when off. The caller applies
 * min_tokens first (vLLM checks it before repetition). */
int sampler_is_repetition(const struct sampling_params *params, const int32_t *out, int32_t n);

/* A uniform double in [0, 1) from the state's RNG (53 bits). Exposed for tests. */
double sampler_rng_uniform(struct sampler_state *st);

#endif /* TANDEM_ENGINE_SAMPLER_SAMPLER_H */
