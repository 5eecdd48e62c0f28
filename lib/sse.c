/*
 * Server-Sent Events parser and writer (see sse.h for the rules followed).
 */
#include "lib/sse.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void sse_parser_init(struct sse_parser *p, size_t max_event, sse_event_cb on_event,
                     sse_comment_cb on_comment, void *ud)
{
    TANDEM_ASSERT(p != NULL && on_event != NULL);
    memset(p, 0, sizeof(*p));
    p->max_event = max_event ? max_event : SSE_DEFAULT_MAX_EVENT;
    buf_init(&p->line, p->max_event);
    buf_init(&p->data, p->max_event);
    buf_init(&p->type, p->max_event);
    buf_init(&p->id, p->max_event);
    p->retry_ms = -1;
    p->event_retry = -1;
    p->on_event = on_event;
    p->on_comment = on_comment;
    p->ud = ud;
}

void sse_parser_deinit(struct sse_parser *p)
{
    buf_free(&p->line);
    buf_free(&p->data);
    buf_free(&p->type);
    buf_free(&p->id);
}

void sse_parser_reset(struct sse_parser *p)
{
    buf_reset(&p->line);
    buf_reset(&p->data);
    buf_reset(&p->type);
    buf_reset(&p->id);
    p->retry_ms = -1;
    p->event_retry = -1;
    p->after_cr = 0;
    p->bom_checked = 0;
    p->error = 0;
}

const char *sse_parser_last_id(const struct sse_parser *p)
{
    return buf_cstr(&p->id);
}

long sse_parser_retry(const struct sse_parser *p)
{
    return p->retry_ms;
}

/* Whether the event being built (data, type, id) plus extra bytes stays within max_event. The
 * carried-over line is passed in extra by the callers that have one, so that the result does not
 * depend on how the stream was cut into chunks. */
static int within_bound(const struct sse_parser *p, size_t extra)
{
    size_t used = p->data.len + p->type.len + p->id.len;
    return used <= p->max_event && extra <= p->max_event - used;
}

static int fail(struct sse_parser *p, int rc, size_t offset, char *err, size_t errlen)
{
    p->error = rc;
    if (err && errlen) {
        if (rc == -EMSGSIZE) {
            snprintf(err, errlen, "sse: event exceeds %zu bytes (at byte %zu of this chunk)",
                     p->max_event, offset);
        } else if (rc == -ENOMEM) {
            snprintf(err, errlen, "sse: out of memory");
        } else {
            snprintf(err, errlen, "sse: stopped by the event callback (%d)", rc);
        }
    }
    return rc;
}

static int dispatch(struct sse_parser *p)
{
    if (p->data.len == 0) {
        buf_reset(&p->type);
        p->event_retry = -1;
        return 0;
    }
    /* the data buffer always ends with the \n appended after each data line */
    p->data.len--;
    p->data.data[p->data.len] = '\0';
    struct sse_event ev = {
        .type = p->type.len ? buf_cstr(&p->type) : "message",
        .data = buf_cstr(&p->data),
        .data_len = p->data.len,
        .id = buf_cstr(&p->id),
        .retry_ms = p->event_retry,
    };
    int rc = p->on_event(p->ud, &ev);
    buf_reset(&p->data);
    buf_reset(&p->type);
    p->event_retry = -1;
    return rc < 0 ? rc : 0;
}

static int set_buf(struct buf *b, const char *s, size_t n)
{
    buf_reset(b);
    return n ? buf_append(b, s, n) : 0;
}

static int field_is(const char *name, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && memcmp(name, lit, l) == 0;
}

/* One complete line (without its terminator). p->line may hold it, so it is reset only after. */
static int process_line(struct sse_parser *p, const char *s, size_t n)
{
    if (!p->bom_checked) {
        p->bom_checked = 1;
        if (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            n -= 3;
        }
    }
    if (n == 0) {
        return dispatch(p);
    }
    if (s[0] == ':') {
        if (p->on_comment) {
            p->on_comment(p->ud, s + 1, n - 1);
        }
        return 0;
    }
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    const char *value = colon ? colon + 1 : s + n;
    size_t value_len = colon ? n - name_len - 1 : 0;
    if (value_len > 0 && value[0] == ' ') {
        value++;
        value_len--;
    }
    int rc = 0;
    if (field_is(s, name_len, "data")) {
        if (!within_bound(p, value_len + 1)) {
            return -EMSGSIZE;
        }
        rc = buf_append(&p->data, value, value_len);
        if (rc == 0) {
            rc = buf_append(&p->data, "\n", 1);
        }
    } else if (field_is(s, name_len, "event")) {
        if (!within_bound(p, value_len)) {
            return -EMSGSIZE;
        }
        rc = set_buf(&p->type, value, value_len);
    } else if (field_is(s, name_len, "id")) {
        if (memchr(value, '\0', value_len) == NULL) {
            if (!within_bound(p, value_len)) {
                return -EMSGSIZE;
            }
            rc = set_buf(&p->id, value, value_len);
        }
    } else if (field_is(s, name_len, "retry")) {
        long v = 0;
        size_t i;
        for (i = 0; i < value_len && value[i] >= '0' && value[i] <= '9'; i++) {
            int d = value[i] - '0';
            v = v > (LONG_MAX - d) / 10 ? LONG_MAX : v * 10 + d;
        }
        if (value_len > 0 && i == value_len) {
            p->retry_ms = v;
            p->event_retry = v;
        }
    }
    return rc == -ENOSPC ? -EMSGSIZE : rc;
}

int sse_parser_feed(struct sse_parser *p, const void *data, size_t len, char *err, size_t errlen)
{
    const char *s = data;
    size_t i = 0;

    if (p->error) {
        return fail(p, p->error, 0, err, errlen);
    }
    if (len > 0 && p->after_cr) {
        p->after_cr = 0;
        if (s[0] == '\n') {
            i = 1;
        }
    }
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != '\n' && s[j] != '\r') {
            j++;
        }
        if (j == len) {
            /* an unterminated line: carry it over to the next chunk */
            if (len - i > SIZE_MAX - p->line.len || !within_bound(p, p->line.len + (len - i))) {
                return fail(p, -EMSGSIZE, len, err, errlen);
            }
            int rc = buf_append(&p->line, s + i, len - i);
            if (rc) {
                return fail(p, rc == -ENOSPC ? -EMSGSIZE : rc, len, err, errlen);
            }
            break;
        }
        int rc;
        if (p->line.len > 0) {
            if (!within_bound(p, p->line.len + (j - i))) {
                return fail(p, -EMSGSIZE, j, err, errlen);
            }
            int arc = buf_append(&p->line, s + i, j - i);
            if (arc) {
                return fail(p, arc == -ENOSPC ? -EMSGSIZE : arc, j, err, errlen);
            }
            rc = process_line(p, p->line.data, p->line.len);
            buf_reset(&p->line);
        } else {
            if (!within_bound(p, j - i)) {
                return fail(p, -EMSGSIZE, j, err, errlen);
            }
            rc = process_line(p, s + i, j - i);
        }
        if (rc) {
            return fail(p, rc, j, err, errlen);
        }
        if (s[j] == '\r') {
            if (j + 1 < len) {
                if (s[j + 1] == '\n') {
                    j++;
                }
            } else {
                p->after_cr = 1;
            }
        }
        i = j + 1;
    }
    return 0;
}

int sse_parser_finish(struct sse_parser *p)
{
    buf_reset(&p->line);
    buf_reset(&p->data);
    buf_reset(&p->type);
    p->event_retry = -1;
    p->after_cr = 0;
    return p->error;
}

/* Appends "<prefix><s>\n"; -EINVAL (nothing appended) when s contains CR or LF. */
static int append_field(struct buf *out, const char *prefix, const char *s, size_t n)
{
    if (memchr(s, '\r', n) || memchr(s, '\n', n)) {
        return -EINVAL;
    }
    int rc = buf_appends(out, prefix);
    if (rc == 0) {
        rc = buf_append(out, s, n);
    }
    if (rc == 0) {
        rc = buf_append(out, "\n", 1);
    }
    return rc;
}

int sse_write_event(struct buf *out, const char *type, const char *id, const void *data, size_t len)
{
    const char *s = data;
    size_t start = out->len;
    int rc = 0;

    if (len > 0 && s == NULL) {
        return -EINVAL;
    }
    if (type) {
        rc = append_field(out, "event: ", type, strlen(type));
    }
    if (rc == 0 && id) {
        rc = append_field(out, "id: ", id, strlen(id));
    }
    size_t i = 0;
    while (rc == 0) {
        size_t j = i;
        while (j < len && s[j] != '\n' && s[j] != '\r') {
            j++;
        }
        rc = buf_appends(out, "data: ");
        if (rc == 0 && j > i) {
            rc = buf_append(out, s + i, j - i);
        }
        if (rc == 0) {
            rc = buf_append(out, "\n", 1);
        }
        if (j >= len) {
            break;
        }
        if (s[j] == '\r' && j + 1 < len && s[j + 1] == '\n') {
            j++;
        }
        i = j + 1;
        if (i == len) {
            /* data ending with a line break: the last line is empty */
            rc = rc ? rc : buf_appends(out, "data: \n");
            break;
        }
    }
    if (rc == 0) {
        rc = buf_append(out, "\n", 1);
    }
    if (rc) {
        out->len = start;
        if (out->data) {
            out->data[start] = '\0';
        }
    }
    return rc;
}

int sse_write_data(struct buf *out, const char *text)
{
    return sse_write_event(out, NULL, NULL, text, text ? strlen(text) : 0);
}

int sse_write_comment(struct buf *out, const char *text)
{
    size_t start = out->len;
    int rc = append_field(out, ": ", text, strlen(text));
    if (rc && rc != -EINVAL) {
        out->len = start;
        if (out->data) {
            out->data[start] = '\0';
        }
    }
    return rc;
}

int sse_write_retry(struct buf *out, long ms)
{
    if (ms < 0) {
        return -EINVAL;
    }
    return buf_appendf(out, "retry: %ld\n\n", ms);
}
