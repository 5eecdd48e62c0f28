/*
 * Process-wide structured logging. Every record is one line written with a single write(2), so
 * lines from different threads never interleave. Two formats:
 *
 *   text: 2026-11-22T06:50:10.123Z INFO  component file.c:12 message
 *   json: {"ts":"2026-11-22T06:50:10.123Z","level":"info","component":"c","caller":"file.c:12",
 *          "msg":"message"}
 *
 * Timestamps are UTC with milliseconds. A call site (file:line) that logs more than the rate limit
 * (default 10 records) within one second is suppressed for the rest of that second; the next record
 * from that site says how many were dropped ("(suppressed K similar messages)").
 *
 * All functions are thread-safe. log_init/log_set_fd/log_set_rate_limit are meant to be called at
 * start-up, but may be called at any time.
 */
#ifndef TANDEM_LIB_LOG_H
#define TANDEM_LIB_LOG_H

#include "lib/common.h"

enum log_level { LOGL_DEBUG, LOGL_INFO, LOGL_WARN, LOGL_ERROR };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

/* Sets the component name (copied; truncated to 63 bytes; NULL means "tandem"), the minimum level
 * that is written, and the format. Before log_init: component "tandem", level INFO, text. */
void log_init(const char *component, enum log_level level, enum log_format format);

/* Where records go; default 2 (stderr). The fd is not owned (never closed). */
void log_set_fd(int fd);

/* Records per call site per second before suppression; 0 turns rate limiting off. Default 10. */
void log_set_rate_limit(int per_sec);

/* "debug", "info", "warn" (or "warning"), "error", case-insensitive → 0; else -EINVAL. */
int log_parse_level(const char *s, enum log_level *out);

/* "text", "json", case-insensitive → 0; else -EINVAL. */
int log_parse_format(const char *s, enum log_format *out);

/* 1 when records of this level are written, so callers can skip expensive formatting. */
int log_enabled(enum log_level level);

/* Writes one record. file may be a full path (only its base name is printed). The message is
 * truncated at 8 KiB; newlines in it are escaped in both formats so a record stays one line. */
void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
    TANDEM_PRINTF(4, 5);

#define log_debug(...) log_write(LOGL_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define log_info(...)  log_write(LOGL_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define log_warn(...)  log_write(LOGL_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define log_error(...) log_write(LOGL_ERROR, __FILE__, __LINE__, __VA_ARGS__)

#endif /* TANDEM_LIB_LOG_H */
