/*
 * The error table's two lookups and the one message formatter (see err.h).
 */
#include "lib/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *tandem_err_name(int code)
{
    switch (code) {
    case 0:
        return "OK";
#define XX(name, value, msg)                                                                       \
    case name:                                                                                     \
        return #name;
        TANDEM_ERROR_MAP(XX)
#undef XX
#define XX(name)                                                                                   \
    case -(name):                                                                                  \
        return #name;
        TANDEM_ERRNO_MAP(XX)
#undef XX
    default:
        return NULL;
    }
}

const char *tandem_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
#define XX(name, value, msg)                                                                       \
    case name:                                                                                     \
        return msg;
        TANDEM_ERROR_MAP(XX)
#undef XX
    default:
        break;
    }
    static __thread char unknown[48];
    if (code < 0 && code > -2000) {
        /* an errno: the C library's words */
        return strerror_r(-code, unknown, sizeof(unknown));
    }
    snprintf(unknown, sizeof(unknown), "unknown error %d", code);
    return unknown;
}

void tandem_set_errv(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (!err || errlen == 0) {
        return;
    }
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): clang 14 false positive */
    vsnprintf(err, errlen, fmt, ap);
}

void tandem_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(err, errlen, fmt, ap);
    va_end(ap);
}
