/* /proc/PID/stat of core/proc.h. */
#include "core/proc.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* "pid (comm) state ppid pgrp ... starttime(22) ...": comm may hold spaces
 * and parentheses, so it ends at the last ')'; the fields after it count
 * from 3 (state). */
int ct_proc_stat(int64_t pid, struct ct_proc_stat *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%" PRId64 "/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *open_p = strchr(buf, '('), *p = strrchr(buf, ')');
    if (!open_p || !p || p < open_p)
        return -1;
    size_t len = (size_t)(p - open_p - 1);
    len = len < sizeof out->comm ? len : sizeof out->comm - 1;
    memcpy(out->comm, open_p + 1, len);
    out->comm[len] = '\0';
    long long ppid, start;
    if (sscanf(p + 1, " %c %lld", &out->state, &ppid) != 2)
        return -1;
    for (int field = 3; field <= 22 && p; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p, " %lld", &start) != 1)
        return -1;
    out->ppid = ppid;
    out->start = start;
    return 0;
}
