/*
 * Server-Sent Events (text/event-stream): an incremental parser following the WHATWG HTML
 * "event stream interpretation" rules, and a writer of events.
 *
 * The parser is fed bytes as they arrive from the network, in chunks of any size (a chunk may end
 * in the middle of a line, or between the CR and LF of a CRLF). Lines end with CRLF, LF or CR.
 * Fields: "data" (appended to the data buffer, lines joined with \n), "event" (event type),
 * "id" (last event id; ignored when the value contains NUL; persists across events), "retry"
 * (reconnection time in ms; only ASCII digits, else ignored); other fields are ignored; lines
 * starting with ':' are comments. A blank line dispatches the event unless its data buffer is
 * empty. A leading UTF-8 BOM is skipped. At end of stream an unterminated event is discarded
 * (sse_parser_finish). Bytes are passed through as they are (no UTF-8 decoding).
 *
 * Bounds: one event (its pending line, data, type and id together) may not exceed max_event
 * bytes; past that the parser fails with -EMSGSIZE and stays failed (sticky) until reset.
 *
 * Ownership: struct sse_parser is the caller's (embed it or put it on the stack); its buffers are
 * freed by sse_parser_deinit. Strings in struct sse_event are valid only during the callback.
 * Not thread-safe: one parser per stream.
 */
#ifndef TANDEM_LIB_SSE_H
#define TANDEM_LIB_SSE_H

#include <stddef.h>

#include "lib/buf.h"
#include "lib/common.h"

#define SSE_DEFAULT_MAX_EVENT (1024 * 1024) /* bytes per event when max_event is 0 */

struct sse_event {
    const char *type; /* the "event" field, "message" when none was given */
    const char *data; /* data lines joined with \n (no trailing \n); NUL-terminated */
    size_t data_len;  /* may contain NUL bytes; data_len counts them */
    const char *id;   /* last event id seen on this stream ("" when none) */
    long retry_ms;    /* reconnection time from this event's "retry" field, or -1 */
};

/* Called once per dispatched event. Return 0 to go on, or a negative errno to stop: feeding
 * stops at once and sse_parser_feed returns that value (the parser then stays failed). */
typedef int (*sse_event_cb)(void *ud, const struct sse_event *ev);

/* Called for each comment line (without the leading ':'), e.g. keep-alives. May be NULL. */
typedef void (*sse_comment_cb)(void *ud, const char *text, size_t len);

struct sse_parser {
    /* private: use the functions below */
    struct buf line;  /* bytes of an unterminated line carried over between chunks */
    struct buf data;  /* data buffer of the event being built */
    struct buf type;  /* event type buffer */
    struct buf id;    /* last event id buffer */
    size_t max_event; /* cap on line + data + type + id */
    long retry_ms;    /* reconnection time of the stream, -1 until a retry field */
    long event_retry; /* retry seen since the last dispatch, -1 if none */
    int after_cr;     /* the previous chunk ended with CR: skip a leading LF */
    int bom_checked;  /* the first bytes have been checked for a BOM */
    int error;        /* sticky error (negative errno), 0 when fine */
    sse_event_cb on_event;
    sse_comment_cb on_comment;
    void *ud;
};

/* Prepares a parser. max_event 0 → SSE_DEFAULT_MAX_EVENT. on_event must not be NULL. */
void sse_parser_init(struct sse_parser *p, size_t max_event, sse_event_cb on_event,
                     sse_comment_cb on_comment, void *ud);

/* Frees the parser's buffers. The struct may be initialised again afterwards. */
void sse_parser_deinit(struct sse_parser *p);

/* Forgets all state (partial line, event, last id, retry, error); keeps callbacks and memory. */
void sse_parser_reset(struct sse_parser *p);

/*
 * Parses len bytes, calling on_event for every event completed by them. Returns 0; -EMSGSIZE
 * when an event grows past max_event (err says at which byte of this chunk); -ENOMEM; or the
 * negative value a callback returned. After a failure every call returns the same error.
 */
int sse_parser_feed(struct sse_parser *p, const void *data, size_t len, char *err, size_t errlen);

/* End of stream: discards an unterminated event, as the standard says. Returns the sticky error
 * (0 if none). The parser can be reused for a new stream after sse_parser_reset. */
int sse_parser_finish(struct sse_parser *p);

/* Last event id ("" when none) and the stream's reconnection time (-1 if never set). */
const char *sse_parser_last_id(const struct sse_parser *p);
long sse_parser_retry(const struct sse_parser *p);

/*
 * Writer. Appends one event to out: "event: <type>\n" when type is non-NULL, "id: <id>\n" when
 * id is non-NULL, one "data: <line>\n" per line of data (split at CRLF, LF or CR, so that a
 * parser gives back the same data with \n between lines; empty data gives one "data: \n"), then
 * the blank line. type and id must not contain CR, LF (or NUL, for id) → -EINVAL. -ENOSPC/-ENOMEM
 * from the buffer (out is then left as it was).
 */
int sse_write_event(struct buf *out, const char *type, const char *id, const void *data,
                    size_t len);

/* "data: <text>\n\n" for a C string (the common case: one JSON object per event). */
int sse_write_data(struct buf *out, const char *text);

/* ": <text>\n" (a comment, e.g. a keep-alive); text must not contain CR or LF → -EINVAL. */
int sse_write_comment(struct buf *out, const char *text);

/* "retry: <ms>\n\n" (sets the client's reconnection time). -EINVAL when ms < 0. */
int sse_write_retry(struct buf *out, long ms);

#endif /* TANDEM_LIB_SSE_H */
