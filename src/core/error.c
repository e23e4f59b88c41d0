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
    char prefix[CT_ERROR_MSG_MAX];
    char old[CT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tls_msg, sizeof old);
    if (old[0])
        snprintf(tls_msg, sizeof tls_msg, "%s: %s", prefix, old);
    else
        snprintf(tls_msg, sizeof tls_msg, "%s: %s", prefix, ct_strerror(code));
    return code;
}

const char *ct_error_message(void) { return tls_msg; }

void ct_error_clear(void) { tls_msg[0] = '\0'; }
