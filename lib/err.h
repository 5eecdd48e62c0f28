/*
 * One error space for all of Tandem, after libuv's UV_ERRNO_MAP (include/uv.h, src/uv-common.c).
 *
 * Functions that act return 0 or a negative code. A code is either a negated errno (-ENOMEM,
 * -EINVAL: system errors keep their numbers, as libuv's UV_E* do on unix) or one of Tandem's own
 * codes below, which live at -2000 and beyond so they never collide with errno. Both kinds have
 * a name and a message from one table: tandem_err_name(-ENOENT) is "ENOENT",
 * tandem_strerror(KUBE_ENOTFOUND) is "not found". Add a code by adding a line to
 * TANDEM_ERROR_MAP; nothing else needs to change.
 *
 * Messages for people go into a caller's `char *err, size_t errlen` buffer (which may be
 * NULL/0) through tandem_set_err, or tandem_fail to set and return a code in one statement.
 */
#ifndef TANDEM_LIB_ERR_H
#define TANDEM_LIB_ERR_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>

#include "lib/common.h"

/* Tandem's own codes: XX(NAME, value, message). Values are negative and below -2000. */
#define TANDEM_ERROR_MAP(XX)                                                                       \
    /* lib/kube: answers of the Kubernetes API server (client.h) */                                \
    XX(KUBE_ENOTFOUND, -2001, "not found")                                                         \
    XX(KUBE_ECONFLICT, -2002, "conflict")                                                          \
    XX(KUBE_EEXISTS, -2003, "already exists")                                                      \
    XX(KUBE_EINVALID, -2004, "invalid")                                                            \
    XX(KUBE_EEXPIRED, -2005, "expired")                                                            \
    XX(KUBE_EFORBIDDEN, -2006, "forbidden")                                                        \
    XX(KUBE_EUNAUTHORIZED, -2007, "unauthorized")                                                  \
    XX(KUBE_ETOOMANY, -2008, "too many requests")                                                  \
    XX(KUBE_ESERVER, -2009, "server error")                                                        \
    XX(KUBE_ETRANSPORT, -2010, "transport error")                                                  \
    XX(KUBE_EBADREQUEST, -2011, "bad request")                                                     \
    XX(KUBE_ETIMEOUT, -2012, "timeout")                                                            \
    XX(KUBE_EOTHER, -2099, "unexpected response")                                                  \
    /* operator: server-side apply refused to take over a field another manager owns */            \
    XX(APPLY_EOWNED, -3001, "object is owned by another controller")                               \
    /* engine/template: the template called raise_exception() */                                   \
    XX(JINJA_ERAISED, -3101, "template raised an exception")

/* The errno values Tandem returns, named as libuv names them: XX(NAME). Their messages are the C
 * library's (strerror), as people know them from every other tool. */
#define TANDEM_ERRNO_MAP(XX)                                                                       \
    XX(E2BIG)                                                                                      \
    XX(EADDRINUSE)                                                                                 \
    XX(EADDRNOTAVAIL)                                                                              \
    XX(EAFNOSUPPORT)                                                                               \
    XX(EAGAIN)                                                                                     \
    XX(EALREADY)                                                                                   \
    XX(EBUSY)                                                                                      \
    XX(ECANCELED)                                                                                  \
    XX(ECONNREFUSED)                                                                               \
    XX(EEXIST)                                                                                     \
    XX(EFAULT)                                                                                     \
    XX(EFBIG)                                                                                      \
    XX(EINVAL)                                                                                     \
    XX(EIO)                                                                                        \
    XX(EISDIR)                                                                                     \
    XX(EMSGSIZE)                                                                                   \
    XX(ENAMETOOLONG)                                                                               \
    XX(ENOENT)                                                                                     \
    XX(ENOMEM)                                                                                     \
    XX(ENOSPC)                                                                                     \
    XX(ENOTSUP)                                                                                    \
    XX(EPIPE)                                                                                      \
    XX(ESHUTDOWN)                                                                                  \
    XX(ETIMEDOUT)

enum tandem_error {
#define XX(name, value, msg) name = (value),
    TANDEM_ERROR_MAP(XX)
#undef XX
};

/* A short description of any code: "success" for 0, the table's message for Tandem's codes,
 * strerror's text for an errno, "unknown error N" otherwise. Static or thread-local storage. */
const char *tandem_strerror(int code);

/* The code's symbolic name ("ENOMEM", "KUBE_ENOTFOUND"), "OK" for 0, NULL when unknown. */
const char *tandem_err_name(int code);

/* Formats a message into err (NULL or errlen 0: nothing is written). Always NUL-terminates. */
void tandem_set_err(char *err, size_t errlen, const char *fmt, ...) TANDEM_PRINTF(3, 4);

/* tandem_set_err with a va_list, for formatters that add a prefix of their own first. */
void tandem_set_errv(char *err, size_t errlen, const char *fmt, va_list ap) TANDEM_PRINTF(3, 0);

/* tandem_set_err, then returns code: `return tandem_fail(err, errlen, -EINVAL, "...", ...);`. */
static inline TANDEM_PRINTF(4, 5) int tandem_fail(char *err, size_t errlen, int code,
                                                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

#ifdef __clang_analyzer__
/* clang's analyzer does not model calls to variadic functions, so it would not know that
 * tandem_fail returns its code and would walk the callers' success paths with it. */
#define tandem_fail(err, errlen, code, ...) (tandem_set_err((err), (errlen), __VA_ARGS__), (code))
#endif

#endif /* TANDEM_LIB_ERR_H */
