/* Error codes and detailed error messages.
 *
 * Library functions return 0 on success or a negative CT_E* code. One X-macro
 * list generates the enum, ct_strerror() and ct_err_name(), so codes and texts
 * cannot drift apart. A failing function also records a detailed, human-readable
 * message for the calling thread (which file, which line or offset, what was
 * expected and what was found) with ct_error_set(); callers read it back with
 * ct_error_message(). Nothing here prints or exits: only src/cli does that.
 *
 *     if (bad) return ct_error_set(CT_EFORMAT, "%s: expected magic 0x%08x, found 0x%08x",
 *                                  path, want, got);
 */
#ifndef CT_CORE_ERROR_H
#define CT_CORE_ERROR_H

#include <stddef.h>

/* Append-only: codes are part of the exit status contract of tools built on us. */
#define CT_ERROR_MAP(X)                                                     \
    X(EINVAL,   -1, "invalid argument")                                     \
    X(ENOMEM,   -2, "out of memory")                                        \
    X(EIO,      -3, "input/output error")                                   \
    X(ENOENT,   -4, "no such file or directory")                            \
    X(EFORMAT,  -5, "malformed file")                                       \
    X(ECONFIG,  -6, "invalid configuration")                                \
    X(EMPI,     -7, "MPI error")                                            \
    X(ERANGE,   -8, "value out of range")                                   \
    X(EMISMATCH,-9, "mismatch between ranks or against expectation")        \
    X(EUSAGE,  -10, "invalid command line")                                 \
    X(ENOSYS,  -11, "not supported")                                        \
    X(ESTATE,  -12, "invalid state")                                       \
    X(EBUSY,   -13, "in use by another job")

enum ct_error {
    CT_OK = 0,
#define CT__ERR_ENUM(name, code, text) CT_##name = (code),
    CT_ERROR_MAP(CT__ERR_ENUM)
#undef CT__ERR_ENUM
};

/* Short description of a code ("malformed file"); never NULL. */
const char *ct_strerror(int code);
/* Symbolic name of a code ("CT_EFORMAT"); never NULL. */
const char *ct_err_name(int code);

/* Record a detailed message for this thread and return `code` (so it can be
 * used in a return statement). The message is formatted like printf. */
int ct_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with more context ("loading data: ...") and
 * return `code`. */
int ct_error_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last detailed message of this thread ("" if none). */
const char *ct_error_message(void);
/* Forget the current message. */
void ct_error_clear(void);

#endif
