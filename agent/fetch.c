/*
 * tandem-agent fetch (see fetch.h): the model downloader the operator runs as the init container
 * of every serving pod. Blocking libcurl easy transfers, one file at a time: an init container has
 * nothing else to do, and a pod that restarts it must find either a complete file or a .part it
 * can resume.
 *
 * A file download: HEAD only when the destination exists (is it still the server's size?), then
 * GET into "<dest>.part" with "Range: bytes=<part size>-" when the part holds something. 206
 * appends, 200 means the server ignored the range (start over), 416 means the part is complete or
 * wrong. Transport errors, 408, 429 and 5xx are retried with backoff (1, 2, 4, 8 s; Retry-After
 * honoured up to a cap); an attempt that grew the part resets the count, so a long download on a
 * flaky network is not given up while it advances. Complete parts are fsynced and renamed.
 *
 * hf:// lists the repository through the hub's API (sizes included, so complete files need no
 * HEAD), picks what the engine reads (fetch_select) and, like vLLM, drops root safetensors files
 * that model.safetensors.index.json does not name (Mistral repositories ship the same weights
 * twice). Errors are one line naming the URI and the cause; progress lines go to stderr.
 */
#include "agent/fetch.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/version.h"

#define FETCH_DEFAULT_RETRIES   4 /* retries after the first attempt: 5 attempts */
#define FETCH_MAX_RETRIES       100
#define FETCH_BACKOFF_MAX_S     30  /* backoff doubles from 1 s up to this */
#define FETCH_RETRY_AFTER_MAX_S 120 /* a longer Retry-After is cut to this */
#define FETCH_CONNECT_TIMEOUT_S 30
#define FETCH_LOW_SPEED_BYTES   1024L /* an attempt slower than this many bytes/s ... */
#define FETCH_LOW_SPEED_TIME_S  60L   /* ... for this many seconds is abandoned (and retried) */
#define FETCH_MAX_REDIRS        10L
#define FETCH_LISTING_MAX       ((size_t)64 << 20) /* hub listing and safetensors index */
#define FETCH_ERRBODY_MAX       512                /* bytes of an error answer kept for messages */
#define FETCH_MAX_INCLUDES      64
#define FETCH_MAX_DEPTH         64 /* file:// directory nesting */
#define FETCH_PROGRESS_TTY_MS   500
#define FETCH_PROGRESS_LOG_MS   5000
#define FETCH_COPY_CHUNK        ((size_t)1 << 20)
#define FETCH_ERR_MAX           1024

/* ---- URIs ---- */

static bool is_alnum_ascii(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

static bool is_dot_segment(const char *s, size_t n)
{
    return (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.');
}

/* An org or repo name of the hub: letters, digits, '-', '_', '.', not "." or "..". */
static bool hf_name_ok(const char *s, size_t n)
{
    if (n == 0 || is_dot_segment(s, n)) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_alnum_ascii(c) && c != '-' && c != '_' && c != '.') {
            return false;
        }
    }
    return true;
}

/* A revision: one URL path segment of letters, digits, '-', '_', '.' and %XX escapes. */
static bool hf_revision_ok(const char *s, size_t n)
{
    if (n == 0 || is_dot_segment(s, n)) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || hex_value((unsigned char)s[i + 1]) < 0 ||
                hex_value((unsigned char)s[i + 2]) < 0) {
                return false;
            }
            i += 2;
        } else if (!is_alnum_ascii(c) && c != '-' && c != '_' && c != '.') {
            return false;
        }
    }
    return true;
}

static int parse_hf(const char *rest, struct fetch_uri *out, char *err, size_t errlen)
{
    static const char form[] = "hf:// needs hf://<org>/<repo>[@<revision>][/<file>]";
    const char *slash = strchr(rest, '/');
    if (!slash || strpbrk(rest, "?#")) {
        return tandem_fail(err, errlen, -EINVAL, "%s", form);
    }
    size_t org_len = (size_t)(slash - rest);
    const char *repo = slash + 1;
    size_t seg_len = strcspn(repo, "/");
    const char *at = memchr(repo, '@', seg_len);
    size_t repo_len = at ? (size_t)(at - repo) : seg_len;
    if (!hf_name_ok(rest, org_len) || !hf_name_ok(repo, repo_len)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s (org and repo are letters, digits, '-', '_' and '.')", form);
    }
    if (org_len + 1 + repo_len >= sizeof(out->repo)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "hf:// repository name too long");
    }
    snprintf(out->repo, sizeof(out->repo), "%.*s/%.*s", (int)org_len, rest, (int)repo_len, repo);
    if (at) {
        size_t rev_len = seg_len - repo_len - 1;
        if (!hf_revision_ok(at + 1, rev_len)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "hf:// revision after '@' must be a branch, tag or commit of "
                               "letters, digits, '-', '_', '.' (a '/' written as %%2F)");
        }
        if (rev_len >= sizeof(out->revision)) {
            return tandem_fail(err, errlen, -ENAMETOOLONG, "hf:// revision too long");
        }
        snprintf(out->revision, sizeof(out->revision), "%.*s", (int)rev_len, at + 1);
    } else {
        snprintf(out->revision, sizeof(out->revision), "main");
    }
    const char *file = repo[seg_len] == '/' ? repo + seg_len + 1 : "";
    if (*file && !fetch_safe_relpath(file)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "hf:// file must be a relative path without empty, '.' or '..' "
                           "segments: \"%s\"",
                           file);
    }
    snprintf(out->file, sizeof(out->file), "%s", file);
    out->scheme = FETCH_SCHEME_HF;
    return 0;
}

static int parse_file(const char *rest, struct fetch_uri *out, char *err, size_t errlen)
{
    if (strncasecmp(rest, "localhost/", 10) == 0) {
        rest += 9;
    }
    if (rest[0] != '/') {
        return tandem_fail(
            err, errlen, -EINVAL,
            "file:// needs an absolute path: file:///path (or file://localhost/path)");
    }
    if (strpbrk(rest, "?#")) {
        return tandem_fail(err, errlen, -EINVAL,
                           "file:// path must not contain '?' or '#' (write them as %%3F, %%23)");
    }
    size_t o = 0;
    for (const char *p = rest; *p; p++) {
        char c = *p;
        if (c == '%') {
            int hi = hex_value((unsigned char)p[1]);
            int lo = hi < 0 ? -1 : hex_value((unsigned char)p[2]);
            if (lo < 0 || (hi == 0 && lo == 0)) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "file:// path has a bad %%XX escape (or %%00)");
            }
            c = (char)(hi * 16 + lo);
            p += 2;
        }
        out->path[o++] = c; /* the decoded path is never longer than the URI */
    }
    out->path[o] = '\0';
    out->scheme = FETCH_SCHEME_FILE;
    return 0;
}

int fetch_parse_uri(const char *uri, struct fetch_uri *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    size_t len = strlen(uri);
    if (len == 0) {
        return tandem_fail(err, errlen, -EINVAL, "empty URI");
    }
    if (len >= FETCH_URI_MAX) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "URI longer than %d bytes",
                           FETCH_URI_MAX - 1);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)uri[i];
        if (c <= 0x20 || c == 0x7f) {
            return tandem_fail(err, errlen, -EINVAL,
                               "URI contains whitespace or a control character");
        }
    }
    if (strncasecmp(uri, "hf://", 5) == 0) {
        return parse_hf(uri + 5, out, err, errlen);
    }
    if (strncasecmp(uri, "file://", 7) == 0) {
        return parse_file(uri + 7, out, err, errlen);
    }
    size_t skip = strncasecmp(uri, "http://", 7) == 0    ? 7
                  : strncasecmp(uri, "https://", 8) == 0 ? 8
                                                         : 0;
    if (skip == 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "unsupported scheme: use http://, https://, hf:// or file://");
    }
    if (strcspn(uri + skip, "/?#") == 0) {
        return tandem_fail(err, errlen, -EINVAL, "http(s):// needs a host");
    }
    memcpy(out->url, uri, len + 1);
    out->scheme = FETCH_SCHEME_HTTP;
    return 0;
}

bool fetch_safe_relpath(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len >= FETCH_URI_MAX || name[0] == '/') {
        return false;
    }
    const char *seg = name;
    for (const char *p = name;; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '/' || c == '\0') {
            size_t n = (size_t)(p - seg);
            if (n == 0 || is_dot_segment(seg, n)) {
                return false;
            }
            if (c == '\0') {
                return true;
            }
            seg = p + 1;
        } else if (c < 0x20 || c == 0x7f || c == '\\') {
            return false;
        }
    }
}

/* What the engine reads from a Hugging Face model directory (fetch.h, fetch_select). */
static const char *const default_globs[] = {
    "*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.txt", "*.tiktoken",
};

bool fetch_select(const char *name, const char *const *includes, size_t n_includes)
{
    if (n_includes > 0) {
        for (size_t i = 0; i < n_includes; i++) {
            if (fnmatch(includes[i], name, 0) == 0) {
                return true;
            }
        }
        return false;
    }
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    for (const char *seg = name; seg < base;) {
        const char *slash = strchr(seg, '/');
        if (!slash) {
            break;
        }
        size_t n = (size_t)(slash - seg);
        if (seg[0] == '.' || (n == 8 && memcmp(seg, "original", 8) == 0)) {
            return false;
        }
        seg = slash + 1;
    }
    if (base[0] == '.' || base[0] == '\0') {
        return false;
    }
    for (size_t i = 0; i < ARRAY_SIZE(default_globs); i++) {
        if (fnmatch(default_globs[i], base, 0) == 0) {
            return true;
        }
    }
    return false;
}

/* ---- header values ---- */

static const char *skip_blanks(const char *s)
{
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    return s;
}

/* Decimal digits at *s (no sign) into *out, without overflow; advances *s. */
static int parse_digits(const char **s, int64_t *out)
{
    const char *p = *s;
    int64_t v = 0;
    if (*p < '0' || *p > '9') {
        return -EINVAL;
    }
    while (*p >= '0' && *p <= '9') {
        int d = *p - '0';
        if (v > (INT64_MAX - d) / 10) {
            return -EINVAL;
        }
        v = v * 10 + d;
        p++;
    }
    *s = p;
    *out = v;
    return 0;
}

int fetch_parse_content_range(const char *value, int64_t *first, int64_t *last, int64_t *complete)
{
    const char *p = skip_blanks(value);
    int64_t f = -1, l = -1, c = -1;
    if (strncasecmp(p, "bytes", 5) != 0 || (p[5] != ' ' && p[5] != '\t')) {
        return -EINVAL;
    }
    p = skip_blanks(p + 5);
    if (*p == '*') {
        p++;
    } else {
        if (parse_digits(&p, &f) != 0 || *p != '-') {
            return -EINVAL;
        }
        p++;
        if (parse_digits(&p, &l) != 0 || f > l) {
            return -EINVAL;
        }
    }
    if (*p != '/') {
        return -EINVAL;
    }
    p++;
    if (*p == '*') {
        if (f < 0) {
            return -EINVAL; /* "bytes * / *" says nothing */
        }
        p++;
    } else if (parse_digits(&p, &c) != 0) {
        return -EINVAL;
    }
    if (*skip_blanks(p) != '\0' || (c >= 0 && l >= c)) {
        return -EINVAL;
    }
    *first = f;
    *last = l;
    *complete = c;
    return 0;
}

int fetch_parse_retry_after(const char *value, time_t now, long *seconds)
{
    const char *p = skip_blanks(value);
    if (*p >= '0' && *p <= '9') {
        int64_t v;
        if (parse_digits(&p, &v) != 0 || *skip_blanks(p) != '\0') {
            return -EINVAL;
        }
        *seconds = v > LONG_MAX ? LONG_MAX : (long)v;
        return 0;
    }
    /* The three HTTP-date forms all start with a day name. */
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))) {
        return -EINVAL;
    }
    time_t t = curl_getdate(p, NULL);
    if (t == -1) {
        return -EINVAL;
    }
    *seconds = t > now ? (long)(t - now) : 0;
    return 0;
}

/* ---- progress ---- */

static const char *unit_of(double bytes, double *div)
{
    if (bytes >= 1024.0 * 1024.0 * 1024.0) {
        *div = 1024.0 * 1024.0 * 1024.0;
        return "GiB";
    }
    if (bytes >= 1024.0 * 1024.0) {
        *div = 1024.0 * 1024.0;
        return "MiB";
    }
    if (bytes >= 1024.0) {
        *div = 1024.0;
        return "KiB";
    }
    *div = 1.0;
    return "B";
}

/* "12.3 MiB", "512 B". */
static const char *human_size(int64_t bytes, char *out, size_t outlen)
{
    double div;
    const char *unit = unit_of((double)bytes, &div);
    snprintf(out, outlen, div > 1.0 ? "%.1f %s" : "%.0f %s", (double)bytes / div, unit);
    return out;
}

void fetch_format_progress(char *out, size_t outlen, const char *name, int64_t done, int64_t total,
                           double bytes_per_s)
{
    double div, rdiv;
    if (done < 0) {
        done = 0;
    }
    if (!(bytes_per_s >= 0.0) || bytes_per_s > 1e18) {
        bytes_per_s = 0.0; /* NaN, negative or absurd */
    }
    const char *unit = unit_of((double)(total > done ? total : done), &div);
    const char *runit = unit_of(bytes_per_s, &rdiv);
    int prec = div > 1.0 ? 1 : 0, rprec = rdiv > 1.0 ? 1 : 0; /* bytes are whole */
    if (total >= 0) {
        int pct = 100;
        if (total > 0 && done < total) {
            pct = (int)((double)done * 100.0 / (double)total);
            pct = pct > 99 ? 99 : pct; /* 100% only once it is all there */
        }
        snprintf(out, outlen, "fetch: %s %.*f/%.*f %s (%d%%) %.*f %s/s", name, prec,
                 (double)done / div, prec, (double)total / div, unit, pct, rprec,
                 bytes_per_s / rdiv, runit);
    } else {
        snprintf(out, outlen, "fetch: %s %.*f %s %.*f %s/s", name, prec, (double)done / div, unit,
                 rprec, bytes_per_s / rdiv, runit);
    }
}

/* ---- the run ---- */

/* Which request a status answers, for the message it gets. */
enum fetch_what { WHAT_URL, WHAT_HF_LISTING, WHAT_HF_FILE };

struct fetch {
    const char *uri;       /* --uri as given, for messages */
    char output[PATH_MAX]; /* --output without trailing '/' */
    struct fetch_uri u;
    const char *includes[FETCH_MAX_INCLUDES];
    size_t n_includes;
    int retries;                /* retries after the first attempt */
    long timeout_s;             /* per attempt; 0: none */
    bool tty;                   /* stderr is a terminal: \r progress */
    bool line_open;             /* a \r progress line is showing, without its newline */
    char endpoint[1024];        /* hf: $HF_ENDPOINT without trailing '/' */
    bool token;                 /* hf: a token is sent */
    struct curl_slist *headers; /* extra request headers (the hub's Authorization) */
    int files;                  /* files written */
    int files_kept;             /* files that were complete already */
    int64_t bytes;              /* bytes received or copied */
};

/* One line on stderr, after the progress line in progress (if any). */
static void TANDEM_PRINTF(2, 3) say(struct fetch *f, const char *fmt, ...)
{
    char line[FETCH_ERR_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sfetch: %s\n", f->line_open ? "\n" : "", line);
    f->line_open = false;
}

/* name, with control characters (a hostile listing's) shown as '?', for messages. */
static const char *printable(const char *name, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 1 < outlen; p++) {
        unsigned char c = (unsigned char)*p;
        out[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[o] = '\0';
    return out;
}

struct progress {
    struct fetch *f;
    const char *name;
    int64_t total;    /* the file's size, -1 unknown */
    int64_t done;     /* bytes of the file present */
    int64_t received; /* bytes this process received or copied for it */
    int64_t start_ns;
    int64_t last_ns; /* when the last line went out */
};

static void progress_init(struct progress *p, struct fetch *f, const char *name, int64_t done,
                          int64_t total)
{
    *p = (struct progress){.f = f, .name = name, .total = total, .done = done};
    p->start_ns = p->last_ns = tandem_now_ns();
}

/* A line when one is due (tty: every 0.5 s, redrawn with \r; otherwise every 5 s), or always when
 * final (the file is complete). */
static void progress_show(struct progress *p, bool final)
{
    int64_t now = tandem_now_ns();
    int64_t every_ms = p->f->tty ? FETCH_PROGRESS_TTY_MS : FETCH_PROGRESS_LOG_MS;
    if (!final && now - p->last_ns < every_ms * 1000000) {
        return;
    }
    p->last_ns = now;
    double secs = (double)(now - p->start_ns) * 1e-9;
    double rate = secs > 0.0 ? (double)p->received / secs : 0.0;
    char line[512];
    fetch_format_progress(line, sizeof(line), p->name, p->done, p->total, rate);
    if (p->f->tty) {
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
        p->f->line_open = !final;
    } else {
        fprintf(stderr, "%s\n", line);
    }
}

static void progress_add(struct progress *p, size_t n)
{
    p->done += (int64_t)n;
    p->received += (int64_t)n;
    p->f->bytes += (int64_t)n;
    progress_show(p, false);
}

static void sleep_s(long s)
{
    struct timespec ts = {.tv_sec = s, .tv_nsec = 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Backoff before retry number `failures` (1-based): 1, 2, 4, 8 ... s, capped; or what the
 * server's Retry-After asks, capped. */
static long retry_delay(int failures, const char *retry_after)
{
    long s = 0;
    if (retry_after[0] && fetch_parse_retry_after(retry_after, time(NULL), &s) == 0) {
        return s > FETCH_RETRY_AFTER_MAX_S ? FETCH_RETRY_AFTER_MAX_S : s;
    }
    s = 1;
    for (int i = 1; i < failures && s < FETCH_BACKOFF_MAX_S; i++) {
        s *= 2;
    }
    return s > FETCH_BACKOFF_MAX_S ? FETCH_BACKOFF_MAX_S : s;
}

/* ---- files ---- */

/* mkdir -p. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(tmp)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "path too long: %.200s", path);
    }
    memcpy(tmp, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') {
            continue;
        }
        if (tmp[i - 1] == '/') {
            continue;
        }
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            return tandem_fail(err, errlen, -errno, "creating %s: %s", tmp, strerror(errno));
        }
        tmp[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return tandem_fail(err, errlen, -ENOTDIR, "%s exists and is not a directory", path);
    }
    return 0;
}

/* Creates the directory path's file goes into. */
static int make_parent(const char *path, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) {
        return 0;
    }
    char dir[PATH_MAX];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof(dir)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "path too long: %.200s", path);
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    return make_dirs(dir, err, errlen);
}

/* "dir/name", or the one that is not "" when the other is. */
static int join_path(char *out, size_t outlen, const char *dir, const char *name, char *err,
                     size_t errlen)
{
    int n = snprintf(out, outlen, "%s%s%s", dir, dir[0] && name[0] ? "/" : "", name);
    if (n < 0 || (size_t)n >= outlen) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "path too long: %.200s/%.200s", dir, name);
    }
    return 0;
}

/* -ENOSPC with a message when the filesystem of path has less than need bytes free. Filesystems
 * that report no blocks at all (some FUSE and virtual ones) are not checked. */
static int check_space(const char *path, int64_t need, char *err, size_t errlen)
{
    struct statvfs vs;
    if (need <= 0 || statvfs(path, &vs) != 0 || vs.f_blocks == 0) {
        return 0;
    }
    uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    if ((uint64_t)need <= avail) {
        return 0;
    }
    return tandem_fail(err, errlen, -ENOSPC,
                       "not enough space: needs %.1f MiB more, %.1f MiB free for %s",
                       (double)need / 1048576.0, (double)avail / 1048576.0, path);
}

/* fsync, close, rename part to dest, and fsync the directory so the rename survives a crash
 * (best effort: some filesystems refuse fsync on directories). Closes fd in every case. */
static int finish_part(int fd, const char *part, const char *dest, char *err, size_t errlen)
{
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return tandem_fail(err, errlen, -e, "fsync %s: %s", part, strerror(e));
    }
    if (close(fd) != 0) {
        return tandem_fail(err, errlen, -errno, "close %s: %s", part, strerror(errno));
    }
    if (rename(part, dest) != 0) {
        return tandem_fail(err, errlen, -errno, "rename %s to %s: %s", part, dest, strerror(errno));
    }
    char dir[PATH_MAX];
    const char *slash = strrchr(dest, '/');
    size_t n = slash ? (size_t)(slash - dest) : 0;
    if (n == 0 && slash) {
        n = 1; /* "/file" */
    }
    if (n < sizeof(dir)) {
        memcpy(dir, n ? dest : ".", n ? n : 1);
        dir[n ? n : 1] = '\0';
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

/* Opens "<dest>.part" for writing (created 0644, not through a symlink); *size gets its size. */
static int open_part(const char *part, int64_t *size, char *err, size_t errlen)
{
    int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        return tandem_fail(err, errlen, -errno, "opening %s: %s", part, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tandem_fail(err, errlen, -EINVAL, "%s is not a regular file", part);
    }
    *size = (int64_t)st.st_size;
    return fd;
}

static int truncate_part(int fd, const char *part, char *err, size_t errlen)
{
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
        return tandem_fail(err, errlen, -errno, "truncating %s: %s", part, strerror(errno));
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- HTTP ---- */

#define RETRY_AFTER_LEN 64

/* What one attempt ended in. */
enum outcome {
    OUT_DONE,    /* 200 or 206, body complete */
    OUT_RETRY,   /* transient: transport error, 408, 429, 5xx */
    OUT_RESTART, /* the part does not fit the server's file: start it over */
    OUT_RANGE,   /* 416: the part may be complete already */
    OUT_FAIL,    /* permanent */
};

struct attempt {
    struct fetch *f;
    struct progress *prog; /* file mode: the file's progress */
    int fd;                /* file mode: the .part; -1 otherwise */
    int64_t offset;        /* file mode: bytes in the part when it began (the Range start) */
    int64_t total;         /* file mode: the whole file's size per the answer, -1 unknown */
    struct buf *body;      /* memory mode: the body of a 200 */
    struct buf errbody;    /* the start of a non-2xx answer's body */
    bool started;          /* the body of a 2xx answer has begun */
    bool range_mismatch;   /* a 206 for another range than asked */
    bool too_large;        /* memory mode: the body passed its buffer's cap */
    int write_errno;       /* file mode: writing the part failed */
    /* the latest answer's headers (a followed redirect's are replaced by its target's) */
    long status;
    int64_t content_length; /* -1 absent */
    char content_range[96];
    char retry_after[RETRY_AFTER_LEN];
    char hf_error_code[64];     /* X-Error-Code of the hub: RepoNotFound, GatedRepo ... */
    char hf_error_message[256]; /* X-Error-Message of the hub */
    char curl_err[CURL_ERROR_SIZE];
};

static void attempt_init(struct attempt *a, struct fetch *f, int fd, int64_t offset,
                         struct progress *prog, struct buf *body)
{
    memset(a, 0, sizeof(*a));
    a->f = f;
    a->fd = fd;
    a->offset = offset;
    a->prog = prog;
    a->body = body;
    a->total = -1;
    a->content_length = -1;
    buf_init(&a->errbody, FETCH_ERRBODY_MAX);
}

static bool header_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

static void copy_value(char *dst, size_t dstlen, const char *v, size_t len)
{
    if (len >= dstlen) {
        len = dstlen - 1;
    }
    memcpy(dst, v, len);
    dst[len] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ud)
{
    struct attempt *a = ud;
    size_t len = size * nitems;
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        /* A new answer (after a redirect or a 1xx): forget the previous one's headers. */
        a->content_length = -1;
        a->content_range[0] = a->retry_after[0] = '\0';
        a->hf_error_code[0] = a->hf_error_message[0] = '\0';
        a->status = 0;
        const char *sp = memchr(data, ' ', len);
        if (sp && (size_t)(sp - data) + 4 <= len) {
            long st = 0;
            for (int i = 1; i <= 3; i++) {
                char c = sp[i];
                st = (c >= '0' && c <= '9') ? st * 10 + (c - '0') : -1000;
            }
            a->status = st > 0 ? st : 0;
        }
        return len;
    }
    const char *colon = memchr(data, ':', len);
    if (!colon) {
        return len;
    }
    size_t name_len = (size_t)(colon - data);
    const char *v = colon + 1;
    size_t vlen = len - name_len - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' ' ||
                        v[vlen - 1] == '\t')) {
        vlen--;
    }
    if (header_is(data, name_len, "content-length")) {
        char tmp[32];
        const char *p = tmp;
        int64_t n;
        copy_value(tmp, sizeof(tmp), v, vlen);
        a->content_length = (parse_digits(&p, &n) == 0 && *p == '\0') ? n : -1;
    } else if (header_is(data, name_len, "content-range")) {
        copy_value(a->content_range, sizeof(a->content_range), v, vlen);
    } else if (header_is(data, name_len, "retry-after")) {
        copy_value(a->retry_after, sizeof(a->retry_after), v, vlen);
    } else if (header_is(data, name_len, "x-error-code")) {
        copy_value(a->hf_error_code, sizeof(a->hf_error_code), v, vlen);
    } else if (header_is(data, name_len, "x-error-message")) {
        copy_value(a->hf_error_message, sizeof(a->hf_error_message), v, vlen);
    }
    return len;
}

/* The first body bytes of a 2xx in file mode: where they go in the part. */
static bool begin_file_body(struct attempt *a)
{
    int64_t first, last, complete;
    if (a->status == 206) {
        if (fetch_parse_content_range(a->content_range, &first, &last, &complete) != 0 ||
            first != a->offset) {
            a->range_mismatch = true;
            return false;
        }
        a->total = complete;
    } else {
        /* The whole file: the server ignored the range (or none was asked). */
        if (a->offset > 0 && ftruncate(a->fd, 0) != 0) {
            a->write_errno = errno;
            return false;
        }
        a->offset = 0;
        a->total = a->content_length;
        if (a->prog) {
            a->prog->done = 0;
        }
    }
    if (lseek(a->fd, (off_t)a->offset, SEEK_SET) < 0) {
        a->write_errno = errno;
        return false;
    }
    if (a->prog && a->total >= 0) {
        a->prog->total = a->total;
    }
    return true;
}

static size_t on_body(char *data, size_t size, size_t nitems, void *ud)
{
    struct attempt *a = ud;
    size_t len = size * nitems;
    if (a->status < 200 || a->status > 299) {
        size_t room = FETCH_ERRBODY_MAX - a->errbody.len;
        (void)buf_append(&a->errbody, data, len < room ? len : room);
        return len;
    }
    if (a->fd < 0) {
        if (!a->body || buf_append(a->body, data, len) != 0) {
            a->too_large = true;
            return 0;
        }
        return len;
    }
    if (!a->started) {
        a->started = true;
        if (!begin_file_body(a)) {
            return 0;
        }
    }
    int rc = write_all(a->fd, data, len);
    if (rc != 0) {
        a->write_errno = -rc;
        return 0;
    }
    if (a->prog) {
        progress_add(a->prog, len);
    }
    return len;
}

#define EASY_SET(e, rc, opt, val)                                                                  \
    do {                                                                                           \
        if ((rc) == CURLE_OK) {                                                                    \
            (rc) = curl_easy_setopt((e), (opt), (val));                                            \
        }                                                                                          \
    } while (0)

/* One request: GET (a Range from a->offset in file mode when it is > 0) or HEAD. */
static CURLcode perform(struct attempt *a, const char *url, bool head)
{
    struct fetch *f = a->f;
    CURL *e = curl_easy_init();
    if (!e) {
        return CURLE_OUT_OF_MEMORY;
    }
    char range[32];
    CURLcode rc = CURLE_OK;
    EASY_SET(e, rc, CURLOPT_URL, url);
    EASY_SET(e, rc, CURLOPT_PROTOCOLS_STR, "http,https");
    EASY_SET(e, rc, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    /* Redirects are followed (the hub sends files to its CDN); curl sends the Authorization
     * header only to the host the URL names, never to another host a redirect leads to. */
    EASY_SET(e, rc, CURLOPT_FOLLOWLOCATION, 1L);
    EASY_SET(e, rc, CURLOPT_MAXREDIRS, FETCH_MAX_REDIRS);
    EASY_SET(e, rc, CURLOPT_HTTPHEADER, f->headers);
    EASY_SET(e, rc, CURLOPT_USERAGENT, "tandem-agent/" TANDEM_VERSION);
    EASY_SET(e, rc, CURLOPT_FAILONERROR, 0L);
    EASY_SET(e, rc, CURLOPT_NOSIGNAL, 1L);
    EASY_SET(e, rc, CURLOPT_CONNECTTIMEOUT, (long)FETCH_CONNECT_TIMEOUT_S);
    EASY_SET(e, rc, CURLOPT_LOW_SPEED_LIMIT, FETCH_LOW_SPEED_BYTES);
    EASY_SET(e, rc, CURLOPT_LOW_SPEED_TIME, FETCH_LOW_SPEED_TIME_S);
    EASY_SET(e, rc, CURLOPT_TIMEOUT, f->timeout_s);
    EASY_SET(e, rc, CURLOPT_ERRORBUFFER, a->curl_err);
    EASY_SET(e, rc, CURLOPT_HEADERFUNCTION, on_header);
    EASY_SET(e, rc, CURLOPT_HEADERDATA, a);
    EASY_SET(e, rc, CURLOPT_WRITEFUNCTION, on_body);
    EASY_SET(e, rc, CURLOPT_WRITEDATA, a);
    if (head) {
        EASY_SET(e, rc, CURLOPT_NOBODY, 1L);
    } else if (a->fd < 0) {
        EASY_SET(e, rc, CURLOPT_ACCEPT_ENCODING, ""); /* listings compress well */
    } else if (a->offset > 0) {
        snprintf(range, sizeof(range), "%" PRId64 "-", a->offset);
        EASY_SET(e, rc, CURLOPT_RANGE, range);
    }
    if (rc == CURLE_OK) {
        rc = curl_easy_perform(e);
    }
    curl_easy_cleanup(e);
    return rc;
}

static const char *reason_of(long status)
{
    switch (status) {
    case 400:
        return " Bad Request";
    case 401:
        return " Unauthorized";
    case 403:
        return " Forbidden";
    case 404:
        return " Not Found";
    case 408:
        return " Request Timeout";
    case 410:
        return " Gone";
    case 416:
        return " Range Not Satisfiable";
    case 429:
        return " Too Many Requests";
    case 500:
        return " Internal Server Error";
    case 502:
        return " Bad Gateway";
    case 503:
        return " Service Unavailable";
    case 504:
        return " Gateway Timeout";
    default:
        return "";
    }
}

/* The hub's X-Error-Message, else the first line of the answer's body, as " (...)"; "" when
 * neither says anything. */
static void answer_detail(const struct attempt *a, char *out, size_t outlen)
{
    char text[256];
    const char *src = a->hf_error_message[0] ? a->hf_error_message : buf_cstr(&a->errbody);
    size_t n = 0;
    while (src[n] && src[n] != '\n' && src[n] != '\r' && n + 1 < sizeof(text)) {
        n++;
    }
    copy_value(text, sizeof(text), src, n);
    char clean[256];
    printable(text, clean, sizeof(clean));
    snprintf(out, outlen, clean[0] ? " (%s)" : "%s", clean);
}

/* The message for a non-2xx answer. */
static void status_message(const struct attempt *a, enum fetch_what what, char *err, size_t errlen)
{
    const struct fetch *f = a->f;
    const char *repo = f->u.repo, *rev = f->u.revision, *code = a->hf_error_code;
    long st = a->status;
    char detail[300];
    answer_detail(a, detail, sizeof(detail));
    if (what == WHAT_URL || (st != 401 && st != 403 && st != 404)) {
        tandem_set_err(err, errlen, "HTTP %ld%s%s", st, reason_of(st), detail);
    } else if (st == 401 && f->token) {
        tandem_set_err(err, errlen,
                       "HTTP 401 Unauthorized: the hub did not accept the token in HF_TOKEN "
                       "(expired or revoked?)%s",
                       detail);
    } else if (st == 401 || (st == 403 && !f->token)) {
        tandem_set_err(
            err, errlen,
            "HTTP %ld%s: %s needs a token: set HF_TOKEN (the hub answers %ld for private "
            "and gated repositories, and for ones that do not exist)%s",
            st, reason_of(st), repo, st, detail);
    } else if (st == 403) {
        tandem_set_err(err, errlen,
                       "HTTP 403 Forbidden: the token in HF_TOKEN lacks access to %s (a gated "
                       "model needs its terms accepted on the hub by the token's account)%s",
                       repo, detail);
    } else if (strcmp(code, "RepoNotFound") == 0) {
        tandem_set_err(err, errlen, "repository %s not found (HTTP 404)", repo);
    } else if (strcmp(code, "RevisionNotFound") == 0) {
        tandem_set_err(err, errlen, "revision %s of %s not found (HTTP 404)", rev, repo);
    } else if (what == WHAT_HF_LISTING) {
        tandem_set_err(err, errlen, "repository %s or its revision %s not found (HTTP 404)", repo,
                       rev);
    } else {
        tandem_set_err(err, errlen, "file not found in %s at revision %s (HTTP 404)", repo, rev);
    }
}

/* curl errors that another attempt cannot fix. */
static bool curl_permanent(CURLcode rc)
{
    switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_OUT_OF_MEMORY:
        return true;
    default:
        return false;
    }
}

static enum outcome classify(const struct attempt *a, CURLcode rc, enum fetch_what what, char *err,
                             size_t errlen)
{
    if (a->write_errno) {
        tandem_set_err(err, errlen, "writing the .part file: %s", strerror(a->write_errno));
        return OUT_FAIL;
    }
    if (a->too_large) {
        tandem_set_err(err, errlen, "the answer is larger than %zu MiB", FETCH_LISTING_MAX >> 20);
        return OUT_FAIL;
    }
    if (a->range_mismatch) {
        tandem_set_err(err, errlen, "the server answered another range than asked (%s)",
                       a->content_range[0] ? a->content_range : "no Content-Range");
        return OUT_RESTART;
    }
    if (rc != CURLE_OK) {
        tandem_set_err(err, errlen, "%s", a->curl_err[0] ? a->curl_err : curl_easy_strerror(rc));
        return curl_permanent(rc) ? OUT_FAIL : OUT_RETRY;
    }
    long st = a->status;
    if (st == 200 || (st == 206 && a->fd >= 0)) {
        return OUT_DONE;
    }
    status_message(a, what, err, errlen);
    if (st == 416 && a->fd >= 0) {
        return OUT_RANGE;
    }
    if (st == 408 || st == 429 || (st >= 500 && st <= 599)) {
        return OUT_RETRY;
    }
    return OUT_FAIL;
}

/* Prints why an attempt failed and waits before the next; false when no retry is left. */
static bool retry_or_give_up(struct fetch *f, const char *name, int failures, long delay,
                             const char *cause, char *err, size_t errlen)
{
    if (failures > f->retries) {
        tandem_set_err(err, errlen, "%s (gave up after %d attempt%s)", cause, failures,
                       failures == 1 ? "" : "s");
        return false;
    }
    say(f, "%s: %s; retrying in %ld s (retry %d of %d)", name, cause, delay, failures, f->retries);
    sleep_s(delay);
    return true;
}

/* GET into body (a 200 only), or HEAD when body is NULL (*length: its Content-Length, -1 when
 * none); retried like downloads. */
static int http_request(struct fetch *f, const char *url, enum fetch_what what, const char *name,
                        struct buf *body, int64_t *length, char *err, size_t errlen)
{
    for (int failures = 1;; failures++) {
        struct attempt a;
        char cause[FETCH_ERR_MAX];
        attempt_init(&a, f, -1, 0, NULL, body);
        if (body) {
            buf_reset(body);
        }
        CURLcode rc = perform(&a, url, body == NULL);
        enum outcome o = classify(&a, rc, what, cause, sizeof(cause));
        long delay = retry_delay(failures, a.retry_after);
        int64_t content_length = a.content_length;
        buf_free(&a.errbody);
        if (o == OUT_DONE) {
            if (length) {
                *length = content_length;
            }
            return 0;
        }
        if (o != OUT_RETRY) {
            return tandem_fail(err, errlen, -EIO, "%s", cause);
        }
        if (!retry_or_give_up(f, name, failures, delay, cause, err, errlen)) {
            return -EIO;
        }
    }
}

/* The size the server reports for url (HEAD), -1 when it reports none. */
static int http_size(struct fetch *f, const char *url, enum fetch_what what, const char *name,
                     int64_t *size, char *err, size_t errlen)
{
    *size = -1;
    return http_request(f, url, what, name, NULL, size, err, errlen);
}

/*
 * Downloads url to dest through "<dest>.part", resuming what the part holds. expected: the size
 * the hub's listing gives, -1 unknown. A dest that exists is kept when it has the server's size
 * (or the server cannot be asked: it was renamed into place complete). name is shown in progress
 * and notes. 0, or a negative code with the cause in err.
 */
static int download(struct fetch *f, const char *url, enum fetch_what what, const char *dest,
                    const char *name, int64_t expected, char *err, size_t errlen)
{
    char part[PATH_MAX], cause[FETCH_ERR_MAX], size_text[32];
    int rc;
    if (snprintf(part, sizeof(part), "%s.part", dest) >= (int)sizeof(part)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "path too long: %.200s", dest);
    }
    struct stat st;
    if (stat(dest, &st) == 0 && S_ISREG(st.st_mode)) {
        int64_t size = expected;
        if (size < 0 && http_size(f, url, what, name, &size, cause, sizeof(cause)) != 0) {
            say(f, "%s: cannot ask the server for its size (%s); keeping the complete file", name,
                cause);
            size = -1;
        }
        if (size < 0 || size == (int64_t)st.st_size) {
            say(f, "%s already complete (%s)", name,
                human_size((int64_t)st.st_size, size_text, sizeof(size_text)));
            f->files_kept++;
            return 0;
        }
        say(f, "%s: the server has %" PRId64 " bytes, the file %" PRId64 ": fetching it again",
            name, size, (int64_t)st.st_size);
    }
    int64_t have = 0;
    int fd = open_part(part, &have, err, errlen);
    if (fd < 0) {
        return fd;
    }
    if (expected >= 0 && have > expected) {
        if ((rc = truncate_part(fd, part, err, errlen)) != 0) {
            goto err_close;
        }
        have = 0;
    }
    if (expected >= 0 && (rc = check_space(part, expected - have, err, errlen)) != 0) {
        goto err_close;
    }
    struct progress prog;
    progress_init(&prog, f, name, have, expected);
    for (int failures = 1;; failures++) {
        int64_t before = have, complete = expected;
        enum outcome o = OUT_DONE;
        char retry_after[RETRY_AFTER_LEN] = "";
        if (expected < 0 || have != expected) {
            struct attempt a;
            attempt_init(&a, f, fd, have, &prog, NULL);
            CURLcode cc = perform(&a, url, false);
            o = classify(&a, cc, what, cause, sizeof(cause));
            memcpy(retry_after, a.retry_after, sizeof(retry_after));
            if (a.total >= 0) {
                complete = a.total;
            }
            if (o == OUT_RANGE) {
                int64_t first, last;
                if (fetch_parse_content_range(a.content_range, &first, &last, &complete) != 0 ||
                    complete < 0) {
                    complete = expected;
                }
                if (complete < 0 &&
                    http_size(f, url, what, name, &complete, cause, sizeof(cause)) != 0) {
                    complete = -1;
                }
                o = (complete >= 0 && have == complete) ? OUT_DONE : OUT_RESTART;
                snprintf(cause, sizeof(cause),
                         "the partial file does not match the server's "
                         "(HTTP 416)");
            } else if (o == OUT_DONE && a.status == 200 && !a.started) {
                /* An empty file: no body, so nothing truncated the part yet. */
                if ((rc = truncate_part(fd, part, err, errlen)) != 0) {
                    buf_free(&a.errbody);
                    goto err_close;
                }
                complete = 0;
            }
            buf_free(&a.errbody);
            struct stat pst;
            if (fstat(fd, &pst) != 0) {
                rc = tandem_fail(err, errlen, -errno, "stat %s: %s", part, strerror(errno));
                goto err_close;
            }
            have = (int64_t)pst.st_size;
        }
        if (o == OUT_DONE) {
            if ((complete >= 0 && have != complete) || (expected >= 0 && have != expected)) {
                rc = tandem_fail(err, errlen, -EIO,
                                 "size mismatch: got %" PRId64 " bytes, expected %" PRId64, have,
                                 expected >= 0 ? expected : complete);
                goto err_close;
            }
            prog.done = have;
            prog.total = have;
            progress_show(&prog, true);
            f->files++;
            return finish_part(fd, part, dest, err, errlen);
        }
        if (o == OUT_FAIL) {
            rc = tandem_fail(err, errlen, -EIO, "%s", cause);
            goto err_close;
        }
        if (have > before) {
            failures = 1; /* it advanced: a fresh set of retries */
        }
        long delay = retry_delay(failures, retry_after);
        if (o == OUT_RESTART) {
            if ((rc = truncate_part(fd, part, err, errlen)) != 0) {
                goto err_close;
            }
            have = 0;
            prog.done = 0;
            delay = 0;
        }
        if (!retry_or_give_up(f, name, failures, delay, cause, err, errlen)) {
            rc = -EIO;
            goto err_close;
        }
    }

err_close:
    /* An empty part holds no progress: a failure (a 404) leaves nothing behind. */
    if (fstat(fd, &st) == 0 && st.st_size == 0) {
        (void)unlink(part);
    }
    close(fd);
    return rc;
}

/* ---- schemes ---- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Appends s to b percent-encoded, keeping unreserved characters and '/'. */
static void append_encoded(struct buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (is_alnum_ascii(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~' || *p == '/') {
            (void)buf_append(b, p, 1);
        } else {
            (void)buf_appendf(b, "%%%02X", *p);
        }
    }
}

static int resolve_url(const struct fetch *f, const char *file, struct buf *url)
{
    buf_reset(url);
    (void)buf_appendf(url, "%s/%s/resolve/%s/", f->endpoint, f->u.repo, f->u.revision);
    append_encoded(url, file);
    return buf_error(url);
}

struct hf_file {
    const char *name; /* rfilename, borrowed from the listing */
    int64_t size;     /* from the listing, -1 unknown */
    bool selected;
    bool done;
};

static bool is_root_safetensors(const char *name)
{
    return !strchr(name, '/') && fnmatch("*.safetensors", name, 0) == 0;
}

static bool weight_map_names(struct json_object *map, const char *name)
{
    json_object_object_foreach(map, key, val)
    {
        (void)key;
        if (json_object_is_type(val, json_type_string) &&
            strcmp(json_object_get_string(val), name) == 0) {
            return true;
        }
    }
    return false;
}

/* Like vLLM: root safetensors files that model.safetensors.index.json (already at index_path) does
 * not name are not read, so they are not fetched (consolidated.safetensors of Mistral repos). An
 * index that cannot be read changes nothing. */
static void apply_safetensors_index(struct fetch *f, const char *index_path, struct hf_file *files,
                                    size_t n)
{
    struct buf text;
    char jerr[256];
    buf_init(&text, FETCH_LISTING_MAX);
    FILE *in = fopen(index_path, "rb");
    if (!in) {
        return;
    }
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), in)) > 0) {
        if (buf_append(&text, chunk, got) != 0) {
            break;
        }
    }
    fclose(in);
    struct json_object *root = NULL, *map = NULL;
    if (buf_error(&text) == 0) {
        root = json_parse(text.data ? text.data : "", text.len, jerr, sizeof(jerr));
    }
    buf_free(&text);
    if (!root || json_get_object(root, "weight_map", &map, jerr, sizeof(jerr)) != 0 ||
        json_object_object_length(map) == 0) {
        say(f, "model.safetensors.index.json has no usable weight_map; fetching every "
               "*.safetensors file");
        json_object_put(root);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (files[i].selected && !files[i].done && is_root_safetensors(files[i].name) &&
            !weight_map_names(map, files[i].name)) {
            files[i].selected = false;
            say(f, "skipping %s: model.safetensors.index.json does not name it", files[i].name);
        }
    }
    json_object_put(root);
}

static int fetch_repo_file(struct fetch *f, struct hf_file *file, struct buf *url, char *err,
                           size_t errlen)
{
    char dest[PATH_MAX], cause[FETCH_ERR_MAX];
    int rc;
    if ((rc = join_path(dest, sizeof(dest), f->output, file->name, cause, sizeof(cause))) != 0 ||
        (rc = make_parent(dest, cause, sizeof(cause))) != 0 ||
        (rc = resolve_url(f, file->name, url)) != 0 ||
        (rc = download(f, buf_cstr(url), WHAT_HF_FILE, dest, file->name, file->size, cause,
                       sizeof(cause))) != 0) {
        return tandem_fail(err, errlen, rc, "%s: %s", file->name, cause);
    }
    file->done = true;
    return 0;
}

/* hf://<org>/<repo>[@rev]: the listing, the selection, the files. */
static int fetch_hf_repo(struct fetch *f, char *err, size_t errlen)
{
    static const char index_name[] = "model.safetensors.index.json";
    struct buf url, body;
    struct json_object *root = NULL, *siblings = NULL;
    struct hf_file *files = NULL;
    char jerr[256], shown[256];
    int rc;
    buf_init(&url, FETCH_URI_MAX * 4);
    buf_init(&body, FETCH_LISTING_MAX);
    (void)buf_appendf(&url, "%s/api/models/%s/revision/%s?blobs=true", f->endpoint, f->u.repo,
                      f->u.revision);
    if ((rc = buf_error(&url)) != 0) {
        tandem_set_err(err, errlen, "URL too long");
        goto out;
    }
    if ((rc = http_request(f, buf_cstr(&url), WHAT_HF_LISTING, f->uri, &body, NULL, err, errlen)) !=
        0) {
        goto out;
    }
    root = json_parse(body.data ? body.data : "", body.len, jerr, sizeof(jerr));
    if (!root || json_get_array(root, "siblings", &siblings, jerr, sizeof(jerr)) != 0) {
        rc = tandem_fail(err, errlen, -EINVAL, "the hub's listing of %s is not usable: %s",
                         f->u.repo, jerr);
        goto out;
    }
    size_t n = json_object_array_length(siblings), selected = 0;
    files = calloc(n ? n : 1, sizeof(*files));
    if (!files) {
        rc = tandem_fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *item = json_object_array_get_idx(siblings, i);
        const char *name = NULL;
        int64_t size = -1;
        if (json_get_string(item, "rfilename", &name, jerr, sizeof(jerr)) != 0) {
            rc = tandem_fail(err, errlen, -EINVAL, "the hub's listing: siblings[%zu].%s", i, jerr);
            goto out;
        }
        /* A listing that points outside --output fails the fetch before anything is written. */
        if (!fetch_safe_relpath(name)) {
            rc = tandem_fail(err, errlen, -EINVAL,
                             "refusing the unsafe file name \"%s\" in the hub's listing (absolute, "
                             "or with empty, '.' or '..' segments, or control characters)",
                             printable(name, shown, sizeof(shown)));
            goto out;
        }
        if (json_opt_int64(item, "size", -1, &size, jerr, sizeof(jerr)) != 0 || size < 0) {
            if (json_opt_int64(item, "lfs.size", -1, &size, jerr, sizeof(jerr)) != 0) {
                size = -1;
            }
        }
        files[i] = (struct hf_file){.name = name, .size = size < 0 ? -1 : size};
        files[i].selected = fetch_select(name, f->includes, f->n_includes);
        selected += files[i].selected;
    }
    if (selected == 0) {
        rc = tandem_fail(err, errlen, -ENOENT, "no file of %s at revision %s matches %s", f->u.repo,
                         f->u.revision,
                         f->n_includes ? "--include" : "the default set (see --help)");
        goto out;
    }
    if ((rc = make_dirs(f->output, err, errlen)) != 0) {
        goto out;
    }
    if (f->n_includes == 0) {
        for (size_t i = 0; i < n; i++) {
            if (files[i].selected && strcmp(files[i].name, index_name) == 0) {
                char path[PATH_MAX];
                if ((rc = fetch_repo_file(f, &files[i], &url, err, errlen)) != 0 ||
                    (rc = join_path(path, sizeof(path), f->output, index_name, err, errlen)) != 0) {
                    goto out;
                }
                apply_safetensors_index(f, path, files, n);
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (files[i].selected && !files[i].done &&
            (rc = fetch_repo_file(f, &files[i], &url, err, errlen)) != 0) {
            goto out;
        }
    }
out:
    free(files);
    json_object_put(root);
    buf_free(&body);
    buf_free(&url);
    return rc;
}

static int fetch_hf(struct fetch *f, char *err, size_t errlen)
{
    if (!f->u.file[0]) {
        return fetch_hf_repo(f, err, errlen);
    }
    struct buf url;
    buf_init(&url, FETCH_URI_MAX * 4);
    int rc = resolve_url(f, f->u.file, &url);
    if (rc != 0) {
        rc = tandem_fail(err, errlen, rc, "URL too long");
    } else if ((rc = make_parent(f->output, err, errlen)) == 0) {
        rc = download(f, buf_cstr(&url), WHAT_HF_FILE, f->output, base_name(f->output), -1, err,
                      errlen);
    }
    buf_free(&url);
    return rc;
}

static int fetch_url(struct fetch *f, char *err, size_t errlen)
{
    int rc = make_parent(f->output, err, errlen);
    if (rc != 0) {
        return rc;
    }
    return download(f, f->u.url, WHAT_URL, f->output, base_name(f->output), -1, err, errlen);
}

/* Copies the regular file src (sst: its stat) to dest through "<dest>.part"; a dest of the same
 * size (or the very same file) is kept. */
static int copy_file(struct fetch *f, const char *src, const struct stat *sst, const char *dest,
                     const char *name, char *err, size_t errlen)
{
    char part[PATH_MAX], size_text[32];
    struct stat dst;
    int rc = 0;
    if (stat(dest, &dst) == 0 && S_ISREG(dst.st_mode) &&
        ((dst.st_dev == sst->st_dev && dst.st_ino == sst->st_ino) || dst.st_size == sst->st_size)) {
        say(f, "%s already complete (%s)", name,
            human_size((int64_t)dst.st_size, size_text, sizeof(size_text)));
        f->files_kept++;
        return 0;
    }
    if (snprintf(part, sizeof(part), "%s.part", dest) >= (int)sizeof(part)) {
        return tandem_fail(err, errlen, -ENAMETOOLONG, "path too long: %.200s", dest);
    }
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        return tandem_fail(err, errlen, -errno, "opening %s: %s", src, strerror(errno));
    }
    int64_t have;
    char *chunk = NULL;
    int out = open_part(part, &have, err, errlen);
    if (out < 0) {
        rc = out;
        goto err_close_in;
    }
    chunk = malloc(FETCH_COPY_CHUNK);
    if (!chunk) {
        rc = tandem_fail(err, errlen, -ENOMEM, "out of memory");
        goto err_close_out;
    }
    if ((rc = truncate_part(out, part, err, errlen)) != 0 ||
        (rc = check_space(part, (int64_t)sst->st_size, err, errlen)) != 0) {
        goto err_close_out;
    }
    struct progress prog;
    progress_init(&prog, f, name, 0, (int64_t)sst->st_size);
    for (;;) {
        ssize_t n = read(in, chunk, FETCH_COPY_CHUNK);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            rc = tandem_fail(err, errlen, -errno, "reading %s: %s", src, strerror(errno));
            goto err_close_out;
        }
        if (n == 0) {
            break;
        }
        if ((rc = write_all(out, chunk, (size_t)n)) != 0) {
            rc = tandem_fail(err, errlen, rc, "writing %s: %s", part, strerror(-rc));
            goto err_close_out;
        }
        progress_add(&prog, (size_t)n);
    }
    free(chunk);
    close(in);
    prog.total = prog.done;
    progress_show(&prog, true);
    f->files++;
    return finish_part(out, part, dest, err, errlen);

err_close_out:
    free(chunk);
    close(out);
err_close_in:
    close(in);
    return rc;
}

/* Copies the directory src/rel to dest/rel: regular files (through symlinks too: the Hugging Face
 * cache keeps snapshots as links into blobs/) matching --include, if given. Symlinked directories,
 * devices, FIFOs and sockets are skipped with a note, and so is the destination when it lies
 * inside src (dest_st: its stat); nesting is bounded. */
static int copy_tree(struct fetch *f, const char *src, const char *dest, const struct stat *dest_st,
                     const char *rel, int depth, char *err, size_t errlen)
{
    char dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX], child[PATH_MAX], shown[256];
    int rc = 0;
    if (depth > FETCH_MAX_DEPTH) {
        return tandem_fail(err, errlen, -ELOOP, "%s/%s: nested deeper than %d directories", src,
                           rel, FETCH_MAX_DEPTH);
    }
    if ((rc = join_path(dir, sizeof(dir), src, rel, err, errlen)) != 0) {
        return rc;
    }
    DIR *d = opendir(dir);
    if (!d) {
        return tandem_fail(err, errlen, -errno, "opening %s: %s", dir, strerror(errno));
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0) {
                rc = tandem_fail(err, errlen, -errno, "reading %s: %s", dir, strerror(errno));
            }
            break;
        }
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            continue;
        }
        struct stat lst, st;
        if ((rc = join_path(child, sizeof(child), rel, name, err, errlen)) != 0 ||
            (rc = join_path(from, sizeof(from), src, child, err, errlen)) != 0) {
            break;
        }
        if (lstat(from, &lst) != 0) {
            rc = tandem_fail(err, errlen, -errno, "stat %s: %s", from, strerror(errno));
            break;
        }
        if (S_ISDIR(lst.st_mode)) {
            if (lst.st_dev == dest_st->st_dev && lst.st_ino == dest_st->st_ino) {
                say(f, "skipping %s: it is the destination", from);
                continue;
            }
            if ((rc = copy_tree(f, src, dest, dest_st, child, depth + 1, err, errlen)) != 0) {
                break;
            }
            continue;
        }
        if (stat(from, &st) != 0 || !S_ISREG(st.st_mode)) {
            say(f, "skipping %s: not a regular file", printable(from, shown, sizeof(shown)));
            continue;
        }
        if (f->n_includes > 0 && !fetch_select(child, f->includes, f->n_includes)) {
            continue;
        }
        if ((rc = join_path(to, sizeof(to), dest, child, err, errlen)) != 0 ||
            (rc = make_parent(to, err, errlen)) != 0 ||
            (rc = copy_file(f, from, &st, to, child, err, errlen)) != 0) {
            break;
        }
    }
    closedir(d);
    return rc;
}

static int fetch_local(struct fetch *f, char *err, size_t errlen)
{
    const char *src = f->u.path;
    struct stat st;
    if (stat(src, &st) != 0) {
        return tandem_fail(err, errlen, -errno, "%s: %s", src, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        struct stat dest_st;
        int rc = make_dirs(f->output, err, errlen);
        if (rc == 0 && stat(f->output, &dest_st) != 0) {
            rc = tandem_fail(err, errlen, -errno, "stat %s: %s", f->output, strerror(errno));
        }
        return rc != 0 ? rc : copy_tree(f, src, f->output, &dest_st, "", 0, err, errlen);
    }
    if (!S_ISREG(st.st_mode)) {
        return tandem_fail(err, errlen, -EINVAL, "%s is not a regular file or a directory", src);
    }
    if (f->n_includes > 0) {
        say(f, "--include applies to directories; copying the file %s", src);
    }
    int rc = make_parent(f->output, err, errlen);
    return rc != 0 ? rc : copy_file(f, src, &st, f->output, base_name(f->output), err, errlen);
}

/* ---- the command ---- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tandem-agent fetch --uri URI --output PATH [flags]\n"
            "\n"
            "Downloads a model (the init container of a serving pod). URI is one of\n"
            "  http(s)://HOST/PATH         one file\n"
            "  hf://ORG/REPO[@REV]         a Hugging Face model repository: PATH becomes a "
            "directory\n"
            "                              with its *.json, *.safetensors, *.jinja, *.txt, "
            "*.tiktoken\n"
            "                              and tokenizer.model files (not original/, not other "
            "weight\n"
            "                              formats); REV is a branch, tag or commit (main)\n"
            "  hf://ORG/REPO[@REV]/FILE    one file of the repository (a .gguf)\n"
            "  file:///PATH                a local file, or a directory copied recursively\n"
            "\n"
            "  --uri URI          what to fetch (required)\n"
            "  --output PATH      where to put it; missing parent directories are created "
            "(required)\n"
            "  --include GLOB     only the repository (or directory) files matching GLOB "
            "(fnmatch,\n"
            "                     '*' matches '/' too); repeatable; replaces the default set\n"
            "  --retries N        retries of a failed attempt (%d; 0-%d); an attempt that made\n"
            "                     progress starts a fresh count\n"
            "  --timeout SECS     limit of each attempt (0: none, the default); a transfer "
            "under\n"
            "                     1 KiB/s for 60 s is abandoned and retried in any case\n"
            "  --help, -h         this text\n"
            "\n"
            "environment:\n"
            "  HF_ENDPOINT        the hub (https://huggingface.co)\n"
            "  HF_TOKEN           a Hugging Face token, sent as \"Authorization: Bearer\" to the "
            "hub\n"
            "                     only (HUGGING_FACE_HUB_TOKEN when HF_TOKEN is unset)\n"
            "  https_proxy, no_proxy ...  read by libcurl\n"
            "\n"
            "Files are written to PATH.part and renamed when complete. A later run resumes a "
            ".part\n"
            "with a Range request and keeps a file that has the size the server reports.\n"
            "Exit status: 0 done, 1 failed, 2 bad usage.\n",
            FETCH_DEFAULT_RETRIES, FETCH_MAX_RETRIES);
}

static int parse_count(const char *s, long max, long *out)
{
    const char *p = s;
    int64_t v;
    if (parse_digits(&p, &v) != 0 || *p != '\0' || v > max) {
        return -EINVAL;
    }
    *out = (long)v;
    return 0;
}

enum { OPT_URI = 256, OPT_OUTPUT, OPT_INCLUDE, OPT_RETRIES, OPT_TIMEOUT };

/* 0 run, 1 --help printed, 2 usage error (the usage text, then what was wrong). */
static int parse_flags(int argc, char **argv, struct fetch *f)
{
    static const struct option opts[] = {
        {"uri", required_argument, NULL, OPT_URI},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"include", required_argument, NULL, OPT_INCLUDE},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char msg[2 * FETCH_ERR_MAX], err[FETCH_ERR_MAX];
    size_t len;
    long v;
    int c;
    f->retries = FETCH_DEFAULT_RETRIES;
    optind = 0; /* glibc: start over (fetch_main may run more than once in a process) */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_URI:
            f->uri = optarg;
            break;
        case OPT_OUTPUT:
            len = strlen(optarg);
            while (len > 1 && optarg[len - 1] == '/') {
                len--;
            }
            if (len >= sizeof(f->output) || strcmp(optarg, "/") == 0) {
                snprintf(msg, sizeof(msg), "--output: '%.512s' is not a path to create", optarg);
                goto bad;
            }
            copy_value(f->output, sizeof(f->output), optarg, len);
            break;
        case OPT_INCLUDE:
            if (f->n_includes == FETCH_MAX_INCLUDES || !optarg[0]) {
                snprintf(msg, sizeof(msg), "--include: at most %d non-empty globs",
                         FETCH_MAX_INCLUDES);
                goto bad;
            }
            f->includes[f->n_includes++] = optarg;
            break;
        case OPT_RETRIES:
            if (parse_count(optarg, FETCH_MAX_RETRIES, &v) != 0) {
                snprintf(msg, sizeof(msg), "--retries: '%s' is not a number from 0 to %d", optarg,
                         FETCH_MAX_RETRIES);
                goto bad;
            }
            f->retries = (int)v;
            break;
        case OPT_TIMEOUT:
            if (parse_count(optarg, 7L * 24 * 3600, &v) != 0) {
                snprintf(msg, sizeof(msg), "--timeout: '%s' is not a number of seconds (0: none)",
                         optarg);
                goto bad;
            }
            f->timeout_s = v;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            snprintf(msg, sizeof(msg), "bad flag (see above)");
            goto bad;
        }
    }
    if (optind < argc) {
        snprintf(msg, sizeof(msg), "unexpected argument '%s'", argv[optind]);
        goto bad;
    }
    if (!f->uri || !f->output[0]) {
        snprintf(msg, sizeof(msg), "%s", !f->uri ? "--uri is required" : "--output is required");
        goto bad;
    }
    if (fetch_parse_uri(f->uri, &f->u, err, sizeof(err)) != 0) {
        snprintf(msg, sizeof(msg), "--uri %.512s: %s", f->uri, err);
        goto bad;
    }
    if (f->n_includes > 0 &&
        (f->u.scheme == FETCH_SCHEME_HTTP || (f->u.scheme == FETCH_SCHEME_HF && f->u.file[0]))) {
        snprintf(msg, sizeof(msg),
                 "--include selects files of a repository or directory; %s names one file", f->uri);
        goto bad;
    }
    return 0;

bad:
    usage(stderr);
    fprintf(stderr, "fetch: %s\n", msg);
    return 2;
}

/* The hub's endpoint and token from the environment. */
static int hf_setup(struct fetch *f, char *err, size_t errlen)
{
    const char *endpoint = getenv("HF_ENDPOINT");
    if (!endpoint || !endpoint[0]) {
        endpoint = "https://huggingface.co";
    }
    size_t len = strlen(endpoint);
    while (len > 0 && endpoint[len - 1] == '/') {
        len--;
    }
    if (len >= sizeof(f->endpoint) ||
        (strncasecmp(endpoint, "http://", 7) != 0 && strncasecmp(endpoint, "https://", 8) != 0)) {
        return tandem_fail(err, errlen, -EINVAL, "HF_ENDPOINT must be an http(s):// URL");
    }
    copy_value(f->endpoint, sizeof(f->endpoint), endpoint, len);

    const char *token = getenv("HF_TOKEN");
    if (!token || !token[0]) {
        token = getenv("HUGGING_FACE_HUB_TOKEN");
    }
    if (!token) {
        return 0;
    }
    /* Tokens mounted from a Secret often end in a newline. */
    while (*token == ' ' || *token == '\t' || *token == '\r' || *token == '\n') {
        token++;
    }
    len = strlen(token);
    while (len > 0 && (token[len - 1] == ' ' || token[len - 1] == '\t' || token[len - 1] == '\r' ||
                       token[len - 1] == '\n')) {
        len--;
    }
    if (len == 0) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)token[i];
        if (c < 0x21 || c == 0x7f) {
            return tandem_fail(err, errlen, -EINVAL,
                               "HF_TOKEN holds whitespace or control characters");
        }
    }
    char header[1024];
    if (len > sizeof(header) - 32) {
        return tandem_fail(err, errlen, -EINVAL, "HF_TOKEN is too long");
    }
    snprintf(header, sizeof(header), "Authorization: Bearer %.*s", (int)len, token);
    struct curl_slist *l = curl_slist_append(f->headers, header);
    explicit_bzero(header, sizeof(header));
    if (!l) {
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    f->headers = l;
    f->token = true;
    return 0;
}

int fetch_main(int argc, char **argv)
{
    char err[FETCH_ERR_MAX];
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f) {
        fprintf(stderr, "fetch: out of memory\n");
        return 1;
    }
    int rc = parse_flags(argc, argv, f);
    if (rc != 0) {
        free(f);
        return rc == 1 ? 0 : 2;
    }
    f->tty = isatty(STDERR_FILENO) == 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "fetch: %s: libcurl failed to initialise\n", f->uri);
        free(f);
        return 1;
    }
    int64_t start_ms = tandem_now_ms();
    switch (f->u.scheme) {
    case FETCH_SCHEME_HF:
        rc = hf_setup(f, err, sizeof(err));
        if (rc == 0) {
            rc = fetch_hf(f, err, sizeof(err));
        }
        break;
    case FETCH_SCHEME_FILE:
        rc = fetch_local(f, err, sizeof(err));
        break;
    case FETCH_SCHEME_HTTP:
    default:
        rc = fetch_url(f, err, sizeof(err));
        break;
    }
    if (rc != 0) {
        fprintf(stderr, "%sfetch: %s: %s\n", f->line_open ? "\n" : "", f->uri, err);
    } else {
        char size_text[32];
        say(f, "%s ready: %d file%s fetched, %d already complete, %s in %.1f s", f->output,
            f->files, f->files == 1 ? "" : "s", f->files_kept,
            human_size(f->bytes, size_text, sizeof(size_text)),
            (double)(tandem_now_ms() - start_ms) / 1000.0);
    }
    curl_slist_free_all(f->headers);
    curl_global_cleanup();
    free(f);
    return rc == 0 ? 0 : 1;
}
