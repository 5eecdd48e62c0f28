/*
 * tandem-agent fetch: downloads a model for the pod's init container (the operator renders
 * `fetch --uri URI --output /models/<name>`, operator/controller/desired.c).
 *
 *   http(s)://host/path/file       one file
 *   hf://<org>/<repo>[@<rev>]       a Hugging Face model repository → a directory holding what the
 *                                   engine uses (configs, tokenizers, safetensors weights)
 *   hf://<org>/<repo>[@<rev>]/<path> one file of the repository (a .gguf)
 *   file:///path                    a local file, or a directory copied recursively
 *
 * Downloads go to "<dest>.part" and are renamed into place after fsync, so a destination that
 * exists is complete; a later run (an init container restarts) resumes a .part with a Range
 * request and leaves a destination alone that has the size the server reports.
 *
 * Below fetch_main are the pure parts, exported for the unit tests (agent/tests/test_fetch.c).
 */
#ifndef TANDEM_AGENT_FETCH_H
#define TANDEM_AGENT_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* `tandem-agent fetch --uri URI --output PATH`; argv[0] is "fetch". Exit status: 0 done, 1 the
 * download failed, 2 bad usage (a missing or unknown flag, an unknown scheme, a malformed URI). */
int fetch_main(int argc, char **argv);

/* Longest URI (and so longest path, URL or file name) fetch accepts. */
#define FETCH_URI_MAX 4096
/* Longest "<org>/<repo>" and revision of an hf:// URI. */
#define FETCH_HF_REPO_MAX 256
#define FETCH_HF_REV_MAX  256

enum fetch_scheme { FETCH_SCHEME_HTTP, FETCH_SCHEME_HF, FETCH_SCHEME_FILE };

/* A parsed --uri. Only the fields of its scheme are set; the others are "". */
struct fetch_uri {
    enum fetch_scheme scheme;
    char url[FETCH_URI_MAX];         /* http(s): the URL as given */
    char path[FETCH_URI_MAX];        /* file: the local absolute path, percent-decoded */
    char repo[FETCH_HF_REPO_MAX];    /* hf: "<org>/<repo>" */
    char revision[FETCH_HF_REV_MAX]; /* hf: the revision, "main" when the URI names none */
    char file[FETCH_URI_MAX];        /* hf: one file of the repository, "" for all of it */
};

/*
 * Parses uri into out. Schemes are case-insensitive. hf://: org and repo are letters, digits,
 * '-', '_' and '.' (not "." or ".."); a revision follows the repo after '@' and is one path
 * segment (a branch, tag or commit; write a '/' in a branch name as %2F); the file is a relative
 * path that passes fetch_safe_relpath. file://: an empty or "localhost" host and an absolute path,
 * %XX escapes decoded (%00 refused). http(s)://: a non-empty host. No URI may hold whitespace or
 * control characters. Returns 0, or -EINVAL / -ENAMETOOLONG with a message in err.
 */
int fetch_parse_uri(const char *uri, struct fetch_uri *out, char *err, size_t errlen);

/* True when name may be joined below an output directory: a relative path of non-empty segments,
 * none "." or "..", without backslashes or control characters, shorter than FETCH_URI_MAX. */
bool fetch_safe_relpath(const char *name);

/*
 * Whether a file of a repository listing (or of a file:// directory) is fetched. With includes
 * (n_includes > 0) the name must match one of the fnmatch(3) globs (no FNM_PATHNAME: '*' also
 * matches '/', as in huggingface_hub's allow_patterns). Without, the default set is what the
 * engine (and vLLM) reads from a Hugging Face model: *.json, *.safetensors, *.jinja,
 * tokenizer.model, *.txt and *.tiktoken files, outside hidden directories and "original/" (the
 * checkpoints in the original training format); other weight formats (.bin, .pt, .pth, .h5,
 * .msgpack, .onnx, .gguf, .ot) and hidden files never match the default set.
 */
bool fetch_select(const char *name, const char *const *includes, size_t n_includes);

/*
 * Parses a Content-Range header value: "bytes FIRST-LAST/COMPLETE"; an asterisk for COMPLETE
 * (unknown: complete set to -1); or, as a 416 answer carries it, an asterisk for FIRST-LAST (first
 * and last set to -1). Returns 0, or -EINVAL for anything else (first > last, last >= complete,
 * signs, overflow, both asterisks).
 */
int fetch_parse_content_range(const char *value, int64_t *first, int64_t *last, int64_t *complete);

/* Parses a Retry-After value, delta-seconds or an HTTP-date (then relative to now, 0 when in the
 * past), into *seconds. Returns 0 or -EINVAL. */
int fetch_parse_retry_after(const char *value, time_t now, long *seconds);

/*
 * Formats a progress line (no newline): "fetch: NAME 123.4/456.7 MiB (27%) 45.6 MiB/s", or
 * without "/TOTAL" and the percentage when total < 0 (unknown). The unit (B, KiB, MiB, GiB) is
 * chosen by the larger of done and total, the rate's on its own; bytes have no decimals. The
 * percentage shows 100 only when done reaches total; a negative done counts as 0, a negative or
 * NaN rate as 0. Always NUL-terminates (outlen > 0).
 */
void fetch_format_progress(char *out, size_t outlen, const char *name, int64_t done, int64_t total,
                           double bytes_per_s);

#endif
