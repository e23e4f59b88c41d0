/* Rank-aware logging.
 *
 * In a run of N ranks, ordinary progress is printed once, by rank 0, on stdout;
 * warnings go to stderr from rank 0; errors go to stderr from whichever rank
 * hit them, prefixed with the rank, because an error seen only by rank 3 must
 * still reach the user. ct_log_init() is called once the rank is known; before
 * that every process behaves as rank 0 of 1.
 */
#ifndef CT_CORE_LOG_H
#define CT_CORE_LOG_H

enum ct_log_level {
    CT_LOG_LEVEL_ERROR,
    CT_LOG_LEVEL_WARN,
    CT_LOG_LEVEL_INFO,
    CT_LOG_LEVEL_DEBUG,
    CT_LOG_LEVEL_COUNT
};

void ct_log_init(int rank, int world, enum ct_log_level level);
enum ct_log_level ct_log_level(void);

/* Called before each line this process prints (NULL: none): a progress bar
 * drawn on a terminal clears itself there, so that lines never land in the
 * middle of it. */
void ct_log_set_before_line(void (*fn)(void *ctx), void *ctx);

/* Rank 0 only, stdout. */
void ct_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Rank 0 only, stdout, only at CT_LOG_LEVEL_DEBUG. */
void ct_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Rank 0 only, stderr, "warning: ". */
void ct_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Any rank, stderr, "error: " or "[rank r] error: " in a multi-rank run. */
void ct_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
