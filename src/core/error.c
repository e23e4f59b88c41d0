/* Error codes, names and per-thread detailed messages (see error.h). */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CT_ERROR_MSG_MAX 2048

static _Thread_local char tls_msg[CT_ERROR_MSG_MAX];

const char *ct_strerror(int code)
{
    switch (code) {
    case CT_OK: return "success";
#define CT__ERR_TEXT(name, c, text) case c: return text;
    CT_ERROR_MAP(CT__ERR_TEXT)
#undef CT__ERR_TEXT
    }
    return "unknown error";
}

const char *ct_err_name(int code)
{
    switch (code) {
    case CT_OK: return "CT_OK";
#define CT__ERR_NAME(name, c, text) case c: return "CT_" #name;
    CT_ERROR_MAP(CT__ERR_NAME)
#undef CT__ERR_NAME
    }
    return "CT_E?";
}

int ct_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    return code;
}

int ct_error_wrap(int code, const char *fmt, ...)
{
    /* Build "<prefix>: <old message>" by hand: the old message may fill the
     * buffer, in which case its tail is cut, never the prefix. */
    char out[CT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, sizeof out, fmt, ap);
    va_end(ap);
    size_t used = n < 0 ? 0 : (size_t)n < sizeof out ? (size_t)n : sizeof out - 1;
    const char *rest = tls_msg[0] ? tls_msg : ct_strerror(code);
    size_t room = sizeof out - 1 - used;
    size_t take = strlen(rest) + 2 <= room ? strlen(rest) : (room > 2 ? room - 2 : 0);
    if (room >= 2) {
        out[used++] = ':';
        out[used++] = ' ';
        memmove(out + used, rest, take);
        used += take;
    }
    out[used] = '\0';
    memcpy(tls_msg, out, used + 1);
    return code;
}

const char *ct_error_message(void) { return tls_msg; }

void ct_error_clear(void) { tls_msg[0] = '\0'; }
