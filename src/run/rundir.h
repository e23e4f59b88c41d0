/* The run directory: created, cleared of an earlier run's files (moved
 * aside, never deleted), and the small files and logs a run writes there.
 *
 * Rank 0 alone calls these, before the other ranks need the directory; the
 * caller makes the outcome collective (ct_comm_agree).
 *
 *     char moved[CT_PATH_MAX];
 *     rc = ct_rundir_prepare(dir, resumed_in_place, moved, sizeof moved);
 *     if (rc == 0 && moved[0]) ct_log_info("moved an earlier run to %s", moved);
 *     rc = ct_rundir_write_file(dir, "config.ini", text);
 *     rc = ct_rundir_open_log(dir, "metrics.jsonl", resumed_in_place, step, &metrics);
 *
 * Deliberately not here: what the files contain (run/record.h, the config
 * writer), checkpoint directories' own protocol (src/ckpt), anything
 * collective.
 */
#ifndef CT_RUN_RUNDIR_H
#define CT_RUN_RUNDIR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Is `name` (an entry of the run directory) one a run owns: metrics.jsonl,
 * steps.jsonl, config.ini, run.json, placement.txt, latest, chain.jsonl or
 * ckpt-* (checkpoints and their temporary directories)? Not owner.json nor
 * heartbeat/: they are the directory's, about the job running there now
 * (written before the directory is prepared: run/owner.h). */
int ct_rundir_owns(const char *name);

/* 1 when dir/name exists (any kind of file), else 0; a path too long to
 * build counts as absent. */
int ct_rundir_has(const char *dir, const char *name);

/* mkdir -p dir. Then, unless the run continues in place (resumed from one of
 * this directory's own checkpoints), move every entry the run owns into a
 * new dir/previous-<UTC yyyymmddThhmmssZ>/ (a "-k" suffix when that exists:
 * nothing is ever overwritten); entries the run does not own stay. moved_to
 * receives that directory's path, or "" when nothing was moved; a moved_cap
 * too small for it is CT_ERANGE before anything moves. */
int ct_rundir_prepare(const char *dir, int continue_in_place, char *moved_to, size_t moved_cap);

/* Replace dir/name with `text` atomically (temporary file, rename). */
int ct_rundir_write_file(const char *dir, const char *name, const char *text);

/* Open the log dir/name for the run to append to. Continuing in place, the
 * log is first trimmed to the lines with step <= max_step (ct_log_trim) and
 * then appended to; otherwise it is created empty. */
int ct_rundir_open_log(const char *dir, const char *name, int continue_in_place, int64_t max_step,
                       FILE **f);

/* The runs `dir` stands for, appended to (*v)[0..*n) as malloc'd paths:
 * dir itself when it holds metrics.jsonl, else its seed-* subdirectories
 * that hold one (train --seeds), in seed order (seed-2 before seed-10).
 * CT_ENOENT naming dir when it is neither. On failure *v and *n hold what
 * was appended before (the caller frees them either way). */
int ct_rundir_expand(const char *dir, char ***v, int *n);

#endif
