/* Rank-aware logging (see log.h). Lines are written with one fprintf each so
 * that lines of different ranks interleave whole, not character by character. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static int g_rank = 0;
static int g_world = 1;
static enum ct_log_level g_level = CT_LOG_LEVEL_INFO;

void ct_log_init(int rank, int world, enum ct_log_level level)
{
    g_rank = rank;
    g_world = world;
    g_level = level;
}

enum ct_log_level ct_log_level(void) { return g_level; }

static void (*g_before_line)(void *ctx);
static void *g_before_line_ctx;

void ct_log_set_before_line(void (*fn)(void *ctx), void *ctx)
{
    g_before_line = fn;
    g_before_line_ctx = ctx;
}

static void emit(FILE *f, const char *prefix, const char *fmt, va_list ap)
{
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    if (g_before_line)
        g_before_line(g_before_line_ctx);
    if (g_world > 1 && f == stderr)
        fprintf(f, "[rank %d] %s%s\n", g_rank, prefix, line);
    else
        fprintf(f, "%s%s\n", prefix, line);
    fflush(f);
}

void ct_log_info(const char *fmt, ...)
{
    if (g_rank != 0 || g_level < CT_LOG_LEVEL_INFO)
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(stdout, "", fmt, ap);
    va_end(ap);
}

void ct_log_debug(const char *fmt, ...)
{
    if (g_rank != 0 || g_level < CT_LOG_LEVEL_DEBUG)
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(stdout, "", fmt, ap);
    va_end(ap);
}

void ct_log_warn(const char *fmt, ...)
{
    if (g_rank != 0 || g_level < CT_LOG_LEVEL_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void ct_log_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(stderr, "error: ", fmt, ap);
    va_end(ap);
}
