/*
 * vLLM's scoring endpoints for an embedding (bi-encoder) model, served over the embeddings path:
 * POST /score and /v1/score, /rerank, /v1/rerank and /v2/rerank, /pooling
 * (vllm/entrypoints/pooling/scoring/{protocol,io_processor,serving}.py and
 * pooling/pooling/{protocol,serving}.py).
 *
 * A request is parsed into the openai_request of an embedding request (kind OPENAI_EMBEDDING, one
 * text prompt per text: the queries first, then the documents, as vLLM's BiEncoderIOProcessor
 * orders them) plus a struct scoring_request saying how the pooled vectors become the answer. The
 * server (server.c) runs every prompt through the engine at once, as /v1/embeddings does, and
 * scoring_build writes the answer: for score and rerank, pair i is (query 0 or query i, document
 * i) and its score the cosine similarity of the two vectors (torch's cosine_similarity: each norm
 * clamped to 1e-8); for pooling, the vectors themselves (vLLM's "embed" pooling task).
 *
 * Errors are 400s naming the field with vLLM's messages ("Input lengths must be either 1:1, 1:N
 * or N:N", "At least one text element must be given", ...). No I/O here.
 */
#ifndef TANDEM_ENGINE_SERVER_SCORING_H
#define TANDEM_ENGINE_SERVER_SCORING_H

#include <stddef.h>
#include <stdint.h>

#include "engine/server/openai.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/buf.h"

#define SCORING_MAX_TEXTS OPENAI_MAX_PROMPTS /* most queries, and most documents, per request */

enum scoring_kind {
    SCORING_NONE = 0,
    SCORING_SCORE,   /* /score, /v1/score: ScoreRequest */
    SCORING_RERANK,  /* /rerank, /v1/rerank, /v2/rerank: RerankRequest */
    SCORING_POOLING, /* /pooling: PoolingCompletionRequest */
};

/*
 * What turns the pooled vectors of a request's prompts into its answer. Zeroed (kind
 * SCORING_NONE) means "not a scoring request"; scoring_request_deinit is safe on it.
 */
struct scoring_request {
    enum scoring_kind kind;
    size_t n_queries;             /* score/rerank: prompts [0, n_queries) (rerank: 1) */
    size_t n_docs;                /* then [n_queries, n_queries + n_docs) */
    int64_t top_n;                /* rerank: the best top_n results; 0 or less: all */
    int64_t max_tokens_per_query; /* score/rerank: 0 none, else a query's first N tokens */
    int64_t max_tokens_per_doc;   /* and a document's */
    /* score/rerank: every text as the body gave it (borrowed from the request's root), for the
     * rerank answer's documents; n_queries + n_docs of them */
    const char **texts;
    size_t *text_lens;
    char **owned; /* [n_queries + n_docs] texts cut by scoring_prepare (owned), or NULL */
};

/*
 * Parses the body of a kind request (len bytes) into *req (an embedding request: release with
 * openai_request_deinit) and *sc (release with scoring_request_deinit). arch names the model's
 * architecture for vLLM's message on multi-modal inputs ("MultiModalParam is not supported for
 * <arch>"; a GGUF name such as "qwen3" is written as the Hugging Face class, Qwen3ForCausalLM).
 * /pooling is vLLM's PoolingCompletionRequest: /v1/embeddings' fields (openai_parse_embedding)
 * and "task" ("embed" or null; vLLM's other tasks are its "Unsupported task" 400). 0, or -EINVAL
 * with err a 400 naming the field, -ENOMEM (500); on failure neither needs releasing.
 */
int scoring_parse(enum scoring_kind kind, const char *body, size_t len, const char *arch,
                  struct openai_request *req, struct scoring_request *sc, struct openai_error *err);

void scoring_request_deinit(struct scoring_request *sc);

/*
 * The checks and cuts vLLM makes once the model is known: truncate_prompt_tokens above
 * max_model_len, max_tokens_per_query / max_tokens_per_doc not below max_model_len (400s); then
 * each query (document) longer than max_tokens_per_query (max_tokens_per_doc) tokens, counted
 * without special tokens, is cut to the text of its first that many tokens (the prompt then
 * points at sc->owned). 0, -EINVAL (400), -ENOMEM (500).
 */
int scoring_prepare(struct scoring_request *sc, struct openai_request *req, const tokenizer *tok,
                    int32_t max_model_len, struct openai_error *err);

/* The answer id's prefix: "score-" (score, rerank) or "pooling-", as vLLM's request_id_prefix. */
const char *scoring_id_prefix(enum scoring_kind kind);

/* torch.nn.functional.cosine_similarity of a and b (dims floats), in float32 as vLLM's. */
float scoring_cosine(const float *a, const float *b, size_t dims);

/* The pooled results of a request's prompts, in prompt order. */
struct scoring_output {
    const char *id;           /* "score-..." / "pooling-..." */
    const char *model;        /* the served model name (vLLM: the base model's, even for LoRA) */
    int64_t created;          /* unix seconds */
    const float *const *vecs; /* [n] each prompt's vector, dims floats */
    const int32_t *n_tokens;  /* [n] each prompt's tokens */
    size_t n;                 /* n_queries + n_docs (pooling: the inputs) */
    size_t dims;
    int pad_token; /* the tokenizer has a pad token: vLLM counts one between a pair's prompts */
    /* pooling: the request's encoding_format, embed_dtype and endianness (NULL: floats); a
     * bytes encoding is written as floats here (server.c answers it as /v1/embeddings does) */
    const struct openai_embed_format *fmt;
};

/*
 * Appends the answer to out:
 *   score:   {"id","object":"list","created","model","data":[{"index","object":"score","score"}],
 *             "usage":{"prompt_tokens","total_tokens","completion_tokens":0,
 *             "prompt_tokens_details":null}}
 *   rerank:  {"id","model","usage":{"prompt_tokens","total_tokens"},"results":[{"index",
 *             "document":{"text","multi_modal":null},"relevance_score"}]}, best first (ties in
 *             document order), the first top_n
 *   pooling: {"id","object":"list","created","model","data":[{"index","object":"pooling",
 *             "data":[floats] | base64 of the vector in embed_dtype and endianness}],
 *             "usage":{...as score}}
 * A pair's tokens are its query's, one pad token (o->pad_token) and its document's (vLLM's
 * _post_process), so a 1:N query counts N times. 0, -EINVAL (o does not fit sc), or out's error.
 */
int scoring_build(const struct scoring_request *sc, const struct scoring_output *o,
                  struct buf *out);

#endif /* TANDEM_ENGINE_SERVER_SCORING_H */
