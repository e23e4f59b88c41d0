/* Scratch directory and input splitting for the fuzz harnesses (see
 * fuzz_util.h). */
#include "fuzz_util.h"

#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

/* Remove the scratch directory and the plain files in it: everything a
 * harness writes there. */
static void remove_dir(void)
{
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

const char *ct_fuzz_dir(void)
{
    if (g_dir[0])
        return g_dir;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(g_dir, sizeof g_dir, "%s/ct-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create a scratch directory under %s: %s\n", base,
                strerror(errno));
        abort();
    }
    atexit(remove_dir);
    return g_dir;
}

void ct_fuzz_path(char *buf, size_t cap, const char *name)
{
    if ((size_t)snprintf(buf, cap, "%s/%s", ct_fuzz_dir(), name) >= cap) {
        fprintf(stderr, "fuzz: path too long for %s\n", name);
        abort();
    }
}

void ct_fuzz_write(const char *name, const void *data, size_t len)
{
    char p[512];
    ct_fuzz_path(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: %s: cannot create: %s\n", p, strerror(errno));
        abort();
    }
    const uint8_t *b = data;
    while (len) {
        ssize_t w = write(fd, b, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "fuzz: %s: write failed: %s\n", p, strerror(errno));
            abort();
        }
        b += w;
        len -= (size_t)w;
    }
    close(fd);
}

void ct_fuzz_remove(const char *name)
{
    char p[512];
    ct_fuzz_path(p, sizeof p, name);
    unlink(p);
}

void ct_fuzz_take(const uint8_t **p, size_t *n, const uint8_t **part, size_t *part_len)
{
    size_t len = 0;
    if (*n >= 4) {
        len = (size_t)(*p)[0] | (size_t)(*p)[1] << 8 | (size_t)(*p)[2] << 16 | (size_t)(*p)[3] << 24;
        *p += 4;
        *n -= 4;
    } else {
        *p += *n;
        *n = 0;
    }
    if (len > *n)
        len = *n;
    *part = *p;
    *part_len = len;
    *p += len;
    *n -= len;
}

void ct_fuzz_verbose(const char *what, int rc)
{
    static int verbose = -1;
    if (verbose < 0) {
        const char *v = getenv("CT_FUZZ_VERBOSE");
        verbose = v && *v && strcmp(v, "0") != 0;
    }
    if (verbose)
        fprintf(stderr, "%s: %s%s%s\n", what, rc == 0 ? "ok" : ct_err_name(rc), rc == 0 ? "" : ": ",
                rc == 0 ? "" : ct_error_message());
}
