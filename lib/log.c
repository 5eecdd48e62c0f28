/*
 * Process-wide logging (see log.h). A record is formatted on the stack and written with one
 * write(2). Settings are atomics; the component name and the per-call-site rate limiter share a
 * mutex. The rate limiter is a fixed open-addressing table of call sites: sites beyond its
 * capacity are simply not limited (a process has a bounded number of log statements).
 */
#include "lib/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"

#define LOG_MSG_MAX      8192 /* formatted message, before escaping */
#define LOG_LINE_MAX     (LOG_MSG_MAX * 2 + 512)
#define LOG_SITES        1024 /* rate-limiter table size (power of two) */
#define LOG_COMPONENT_SZ 64

struct log_site {
    const char *file;      /* __FILE__ of the call site; NULL = free slot */
    int64_t window_ms;     /* start of the current one-second window (monotonic) */
    unsigned long dropped; /* suppressed since the last written record */
    int line;              /* __LINE__ */
    unsigned count;        /* records in the current window */
};

static atomic_int g_level = LOGL_INFO;
static atomic_int g_format = LOG_FORMAT_TEXT;
static atomic_int g_fd = 2;
static atomic_int g_rate = 10;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_component[LOG_COMPONENT_SZ] = "tandem";
static struct log_site g_sites[LOG_SITES];

static const char *const level_text[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
static const char *const level_json[] = {"debug", "info", "warn", "error"};

void log_init(const char *component, enum log_level level, enum log_format format)
{
    pthread_mutex_lock(&g_lock);
    snprintf(g_component, sizeof(g_component), "%s", component ? component : "tandem");
    pthread_mutex_unlock(&g_lock);
    atomic_store(&g_level, (int)level);
    atomic_store(&g_format, (int)format);
}

void log_set_fd(int fd)
{
    atomic_store(&g_fd, fd);
}

void log_set_rate_limit(int per_sec)
{
    atomic_store(&g_rate, per_sec < 0 ? 0 : per_sec);
    /* Forget the windows so that a new limit applies at once. */
    pthread_mutex_lock(&g_lock);
    memset(g_sites, 0, sizeof(g_sites));
    pthread_mutex_unlock(&g_lock);
}

int log_parse_level(const char *s, enum log_level *out)
{
    static const struct {
        const char *name;
        enum log_level level;
    } names[] = {{"debug", LOGL_DEBUG},
                 {"info", LOGL_INFO},
                 {"warn", LOGL_WARN},
                 {"warning", LOGL_WARN},
                 {"error", LOGL_ERROR}};
    if (!s || !out) {
        return -EINVAL;
    }
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -EINVAL;
}

int log_parse_format(const char *s, enum log_format *out)
{
    if (!s || !out) {
        return -EINVAL;
    }
    if (strcasecmp(s, "text") == 0) {
        *out = LOG_FORMAT_TEXT;
        return 0;
    }
    if (strcasecmp(s, "json") == 0) {
        *out = LOG_FORMAT_JSON;
        return 0;
    }
    return -EINVAL;
}

int log_enabled(enum log_level level)
{
    return (int)level >= atomic_load(&g_level);
}

static uint32_t site_hash(const char *file, int line)
{
    uint32_t h = 2166136261u;
    for (const char *p = file; *p; p++) {
        h = (h ^ (unsigned char)*p) * 16777619u;
    }
    return (h ^ (uint32_t)line) * 16777619u;
}

/*
 * Rate limiting for one record of a call site. Returns 0 when the record must be dropped, 1 when
 * it is written; *dropped receives the number of records suppressed before it. Called with g_lock
 * held.
 */
static int site_admit(const char *file, int line, int limit, unsigned long *dropped)
{
    *dropped = 0;
    uint32_t h = site_hash(file, line);
    struct log_site *site = NULL;
    for (size_t probe = 0; probe < 16; probe++) {
        struct log_site *s = &g_sites[(h + probe) & (LOG_SITES - 1)];
        if (!s->file) {
            s->file = file;
            s->line = line;
            s->window_ms = tandem_now_ms();
            s->count = 0;
            s->dropped = 0;
            site = s;
            break;
        }
        if (s->line == line && (s->file == file || strcmp(s->file, file) == 0)) {
            site = s;
            break;
        }
    }
    if (!site) {
        return 1; /* table crowded: this site is not limited */
    }
    int64_t now = tandem_now_ms();
    if (now - site->window_ms >= 1000) {
        site->window_ms = now;
        site->count = 0;
    }
    if (site->count >= (unsigned)limit) {
        site->dropped++;
        return 0;
    }
    site->count++;
    *dropped = site->dropped;
    site->dropped = 0;
    return 1;
}

/* Output cursor over a fixed line buffer; everything past the end is silently cut. */
struct line_out {
    char *p;
    char *end; /* leaves room for the final "\n" */
};

static void out_mem(struct line_out *o, const char *s, size_t n)
{
    size_t room = (size_t)(o->end - o->p);
    if (n > room) {
        n = room;
    }
    memcpy(o->p, s, n);
    o->p += n;
}

static void out_str(struct line_out *o, const char *s)
{
    out_mem(o, s, strlen(s));
}

/* Appends s escaped: JSON string rules when json, else only control characters (so a text record
 * stays on one line). Invalid UTF-8 becomes U+FFFD. Escapes and characters are never cut in half.
 */
static void out_escaped(struct line_out *o, const char *s, int json)
{
    static const char hex[] = "0123456789abcdef";
    size_t left = strlen(s);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, left--) {
        char esc[7];
        size_t n = 0;
        if (*p >= 0x80) {
            size_t seq = tandem_utf8_seq_len(p, left);
            const char *src = seq ? (const char *)p : "\xef\xbf\xbd";
            size_t srclen = seq ? seq : 3;
            if ((size_t)(o->end - o->p) < srclen) {
                return;
            }
            out_mem(o, src, srclen);
            if (seq > 1) {
                p += seq - 1;
                left -= seq - 1;
            }
            continue;
        }
        switch (*p) {
        case '\n':
            memcpy(esc, "\\n", n = 2);
            break;
        case '\r':
            memcpy(esc, "\\r", n = 2);
            break;
        case '\t':
            memcpy(esc, "\\t", n = 2);
            break;
        case '"':
        case '\\':
            if (json) {
                esc[0] = '\\';
                esc[1] = (char)*p;
                n = 2;
            }
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                esc[0] = '\\';
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[*p >> 4];
                esc[5] = hex[*p & 15];
                n = 6;
            }
            break;
        }
        if (n == 0) {
            esc[0] = (char)*p;
            n = 1;
        }
        if ((size_t)(o->end - o->p) < n) {
            return;
        }
        out_mem(o, esc, n);
    }
}

static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return; /* nowhere to report a failure to log */
        }
        data += n;
        len -= (size_t)n;
    }
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
{
    if (!log_enabled(level) || (int)level < LOGL_DEBUG || (int)level > LOGL_ERROR) {
        return;
    }
    if (!file) {
        file = "?";
    }
    int limit = atomic_load(&g_rate);
    char component[LOG_COMPONENT_SZ];
    unsigned long dropped = 0;
    pthread_mutex_lock(&g_lock);
    int admit = limit > 0 ? site_admit(file, line, limit, &dropped) : 1;
    memcpy(component, g_component, sizeof(component));
    pthread_mutex_unlock(&g_lock);
    if (!admit) {
        return;
    }

    char msg[LOG_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        snprintf(msg, sizeof(msg), "(bad log format)");
    }
    if (dropped > 0) {
        size_t used = strlen(msg);
        snprintf(msg + used, sizeof(msg) - used, " (suppressed %lu similar messages)", dropped);
    }

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[96];
    snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000));
    char caller[256];
    snprintf(caller, sizeof(caller), "%s:%d", base_name(file), line);

    char line_buf[LOG_LINE_MAX];
    struct line_out o = {line_buf, line_buf + sizeof(line_buf) - 1};
    if (atomic_load(&g_format) == LOG_FORMAT_JSON) {
        out_str(&o, "{\"ts\":\"");
        out_str(&o, stamp);
        out_str(&o, "\",\"level\":\"");
        out_str(&o, level_json[level]);
        out_str(&o, "\",\"component\":\"");
        out_escaped(&o, component, 1);
        out_str(&o, "\",\"caller\":\"");
        out_escaped(&o, caller, 1);
        out_str(&o, "\",\"msg\":\"");
        /* Keep room for the closing characters so the object stays valid when cut. */
        o.end -= 2;
        out_escaped(&o, msg, 1);
        o.end += 2;
        out_str(&o, "\"}");
    } else {
        out_str(&o, stamp);
        out_str(&o, " ");
        out_str(&o, level_text[level]);
        out_str(&o, " ");
        out_escaped(&o, component, 0);
        out_str(&o, " ");
        out_escaped(&o, caller, 0);
        out_str(&o, " ");
        out_escaped(&o, msg, 0);
    }
    *o.p++ = '\n';
    write_all(atomic_load(&g_fd), line_buf, (size_t)(o.p - line_buf));
}
