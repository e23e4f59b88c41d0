/* What produced a run: the code version and the versions of the libraries
 * that can change its numbers or its files. Checkpoint manifests, run
 * records and the start line record these, so that an auditor can tell which
 * build made which weights.
 *
 * This is the one place that asks MPI, hwloc, protobuf-c, zlib and OpenSSL
 * for their versions, so that the trainer needs none of their headers. It
 * does not write anything; callers put the values where they belong.
 *
 *     struct ct_library_version libs[CT_PROVENANCE_MAX_LIBS];
 *     int n = ct_provenance_libraries(libs, CT_PROVENANCE_MAX_LIBS);
 *     for (int i = 0; i < n; i++) kv[i] = (struct ct_ckpt_kv){libs[i].name, libs[i].version};
 */
#ifndef CT_RUN_PROVENANCE_H
#define CT_RUN_PROVENANCE_H

/* Room for every library ct_provenance_libraries reports (7 today). */
#define CT_PROVENANCE_MAX_LIBS 8

struct ct_library_version {
    const char *name;    /* static: "mpi", "hwloc", ... */
    char version[256];   /* "Open MPI v4.1.4, package: ...", "2.9.0", ... */
};

/* Fill out[0..n-1] and return n = min(max, the number of libraries), in this
 * order: mpi (first line of MPI_Get_library_version; callable before
 * MPI_Init), hwloc (its API version), openblas (ct_blas_config), protobuf-c,
 * zlib, openssl, gemm (ct_gemm_impl: the matrix products the layers run,
 * which round differently, so an audit replay needs the same one; in bf16
 * "ctrain-avx512bf16" or "software-bf16", which compute the same bits).
 * Names, order and values are those checkpoint manifests have always held.
 * CT_EINVAL when out is NULL and max > 0; 0 when max <= 0. */
int ct_provenance_libraries(struct ct_library_version *out, int max);

/* CT_VERSION " (" CT_GIT_DESCRIBE ")" of this build (core/version.h), as
 * checkpoints record it. */
const char *ct_code_version(void);

#endif
