/* What /proc/PID/stat says of a process on this host: its command name,
 * state letter, parent and start time. The run directory's owner check uses
 * the state and start time (a zombie is gone; a pid reused by another start
 * is another process), the partition watcher the parent chain and names.
 * Linux only; a process that is gone (or a /proc that does not parse) is -1,
 * with no error set: callers treat "cannot tell" themselves.
 *
 *     struct ct_proc_stat ps;
 *     if (ct_proc_stat(pid, &ps) == 0 && ps.state != 'Z') ...
 */
#ifndef CT_CORE_PROC_H
#define CT_CORE_PROC_H

#include <stdint.h>

struct ct_proc_stat {
    char comm[16];     /* the command name as the kernel keeps it (15 bytes at most) */
    char state;        /* 'R', 'S', 'D', 'Z', ... */
    int64_t ppid;
    int64_t start;     /* start time after boot, in clock ticks (field 22) */
};

int ct_proc_stat(int64_t pid, struct ct_proc_stat *out);

#endif
