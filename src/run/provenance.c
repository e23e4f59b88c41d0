/* Library and code versions for provenance records (see provenance.h).
 * The version strings come from the libraries linked in at run time, not
 * from the headers we were compiled against, where a library offers both:
 * the run is produced by the former. (hwloc reports its API version, which
 * is what it offers.) */
#include "run/provenance.h"

#include <hwloc.h>
#include <mpi.h>
#include <openssl/crypto.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/threads.h"
#include "core/version.h"

enum {
    LIB_MPI,
    LIB_HWLOC,
    LIB_OPENBLAS,
    LIB_PROTOBUFC,
    LIB_ZLIB,
    LIB_OPENSSL,
    LIB_GEMM,
    LIB_GEMM_THREADS,
    LIB_COUNT
};

/* Append-only in this order: manifests written before list them so. */
static const char *const lib_names[LIB_COUNT] = {"mpi",  "hwloc",   "openblas", "protobuf-c",
                                                 "zlib", "openssl", "gemm",
                                                 "gemm_threads"};

_Static_assert(LIB_COUNT <= CT_PROVENANCE_MAX_LIBS, "CT_PROVENANCE_MAX_LIBS too small");

static void mpi_version(char *out, size_t n)
{
    /* The full text runs over several lines (package, repository, date);
     * the first names the implementation and its version: "Open MPI v4.1.4,
     * package: ...", "MPICH Version:\t4.0.2" (whose tab, like any run of
     * blanks, becomes one space: "MPICH Version: 4.0.2"). */
    char s[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    s[0] = '\0';
    if (MPI_Get_library_version(s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "unknown");
    char *nl = strchr(s, '\n');
    if (nl)
        *nl = '\0';
    size_t w = 0;
    for (size_t r = 0; s[r]; r++) {
        int blank = s[r] == ' ' || s[r] == '\t' || s[r] == '\r';
        if (blank && (w == 0 || s[w - 1] == ' '))
            continue;
        s[w++] = blank ? ' ' : s[r];
    }
    while (w > 0 && s[w - 1] == ' ')
        w--;
    s[w] = '\0';
    snprintf(out, n, "%s", s);
}

static void version_of(int lib, char *out, size_t n)
{
    switch (lib) {
    case LIB_MPI:
        mpi_version(out, n);
        break;
    case LIB_HWLOC: {
        unsigned hv = hwloc_get_api_version();
        snprintf(out, n, "%u.%u.%u", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
        break;
    }
    case LIB_OPENBLAS:
        snprintf(out, n, "%s", ct_blas_config());
        break;
    case LIB_PROTOBUFC:
        snprintf(out, n, "%s", protobuf_c_version());
        break;
    case LIB_ZLIB:
        snprintf(out, n, "%s", zlibVersion());
        break;
    case LIB_OPENSSL:
        snprintf(out, n, "%s", OpenSSL_version(OPENSSL_VERSION));
        break;
    case LIB_GEMM:
        snprintf(out, n, "%s", ct_gemm_impl());
        break;
    case LIB_GEMM_THREADS:
        /* Not a library: the bits do not depend on it (core/gemm.h), but a
         * reader of the manifest sees how the products ran. */
        snprintf(out, n, "%d", ct_gemm_threads());
        break;
    default:
        snprintf(out, n, "?");
    }
}

int ct_provenance_libraries(struct ct_library_version *out, int max)
{
    if (max <= 0)
        return 0;
    if (!out)
        return ct_error_set(CT_EINVAL, "provenance: no room for %d library versions", max);
    int n = max < LIB_COUNT ? max : LIB_COUNT;
    for (int i = 0; i < n; i++) {
        out[i].name = lib_names[i];
        version_of(i, out[i].version, sizeof out[i].version);
    }
    return n;
}

const char *ct_code_version(void)
{
    return CT_VERSION " (" CT_GIT_DESCRIBE ")";
}
