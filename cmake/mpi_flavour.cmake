# Which MPI this build uses, and how its tests launch ranks (included by the
# top-level CMakeLists.txt after find_package(MPI)).
#
# The flavour comes from the MPI header the code is compiled against, not
# from a name: mpi.h defines OMPI_MAJOR_VERSION in Open MPI and
# MPICH_VERSION in MPICH and its family (Intel MPI, Cray MPICH, MVAPICH),
# whose launcher is hydra or one like it. The launcher must be of the same
# flavour (an MPICH program under Open MPI's mpirun starts N singletons):
# FindMPI takes the first mpiexec beside the compiler, which on Debian is
# the one the alternatives point at, so a mismatched launcher is replaced by
# mpiexec.<flavour> when there is one, and refused otherwise.
#
# Sets:
#   CT_MPI_FLAVOUR    openmpi | mpich
#   CT_MPI_PC         the MPI's pkg-config module, for ctrain.pc (ompi-c | mpich)
#   CT_MPIEXEC_FLAGS  launcher flags for the tests (a list)
#   CT_MPI_TEST_ENV   environment the launcher needs in tests (a list)
include(CheckCSourceCompiles)

function(ct_mpi_header_flavour out)
  set(CMAKE_REQUIRED_INCLUDES ${MPI_C_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_QUIET ON)
  # Checked at every configure: a cached answer would outlive a changed
  # MPI_C_COMPILER.
  unset(CT_MPI_IS_OPENMPI CACHE)
  unset(CT_MPI_IS_MPICH CACHE)
  check_c_source_compiles("#include <mpi.h>
#ifndef OMPI_MAJOR_VERSION
#error not Open MPI
#endif
int main(void) { return 0; }" CT_MPI_IS_OPENMPI)
  check_c_source_compiles("#include <mpi.h>
#ifndef MPICH_VERSION
#error not MPICH
#endif
int main(void) { return 0; }" CT_MPI_IS_MPICH)
  if(CT_MPI_IS_OPENMPI)
    set(${out} openmpi PARENT_SCOPE)
  elseif(CT_MPI_IS_MPICH)
    set(${out} mpich PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# ct_mpi_launcher_flavour(<out> <launcher>): openmpi (mpirun/mpiexec of
# Open MPI: "(OpenRTE)" up to 4.x, "(Open MPI)" from 5), mpich (hydra), or
# empty (anything else, e.g. srun).
function(ct_mpi_launcher_flavour out exe)
  execute_process(COMMAND ${exe} --version OUTPUT_VARIABLE text ERROR_VARIABLE text
                  TIMEOUT 30 RESULT_VARIABLE rc)
  if(text MATCHES "OpenRTE|Open MPI|open-mpi")
    set(${out} openmpi PARENT_SCOPE)
  elseif(text MATCHES "HYDRA|Hydra")
    set(${out} mpich PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

ct_mpi_header_flavour(CT_MPI_FLAVOUR)
if(NOT CT_MPI_FLAVOUR)
  message(FATAL_ERROR "MPI: ${MPI_C_COMPILER} gives an mpi.h that is neither Open MPI nor MPICH "
                      "(neither OMPI_MAJOR_VERSION nor MPICH_VERSION is defined)")
endif()
if(CT_MPI AND NOT CT_MPI STREQUAL CT_MPI_FLAVOUR)
  message(FATAL_ERROR "CT_MPI=${CT_MPI}, but this build directory's MPI_C_COMPILER (${MPI_C_COMPILER}) "
                      "is ${CT_MPI_FLAVOUR}: configure a fresh build directory for each MPI")
endif()

ct_mpi_launcher_flavour(ct_launcher ${MPIEXEC_EXECUTABLE})
if(NOT ct_launcher STREQUAL CT_MPI_FLAVOUR)
  get_filename_component(ct_dir ${MPI_C_COMPILER} DIRECTORY)
  find_program(ct_mpiexec_flavour mpiexec.${CT_MPI_FLAVOUR} HINTS ${ct_dir} NO_CACHE)
  if(ct_mpiexec_flavour)
    ct_mpi_launcher_flavour(ct_launcher ${ct_mpiexec_flavour})
  endif()
  if(NOT ct_mpiexec_flavour OR NOT ct_launcher STREQUAL CT_MPI_FLAVOUR)
    message(FATAL_ERROR "MPI: the library is ${CT_MPI_FLAVOUR} but the launcher ${MPIEXEC_EXECUTABLE} "
                        "is not (its --version); set -DMPIEXEC_EXECUTABLE to the ${CT_MPI_FLAVOUR} mpiexec")
  endif()
  message(STATUS "MPI: ${MPIEXEC_EXECUTABLE} is not ${CT_MPI_FLAVOUR}'s launcher; using ${ct_mpiexec_flavour}")
  set(MPIEXEC_EXECUTABLE ${ct_mpiexec_flavour} CACHE FILEPATH "MPI launcher" FORCE)
endif()

if(CT_MPI_FLAVOUR STREQUAL "openmpi")
  set(CT_MPI_PC ompi-c)
  # The ranks pin themselves (dist.placement): mpirun must not bind. Tests
  # run more ranks than a small machine has cores, and as root in CI, which
  # Open MPI refuses unless told.
  set(CT_MPIEXEC_FLAGS --oversubscribe --bind-to none)
  set(CT_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                      OMPI_MCA_rmaps_base_oversubscribe=1)
else()
  set(CT_MPI_PC mpich)
  # Hydra neither counts slots nor minds root; binding is off by default,
  # said anyway in case a site's defaults (HYDRA_BINDING) turn it on.
  set(CT_MPIEXEC_FLAGS -bind-to none)
  set(CT_MPI_TEST_ENV "")
endif()
string(REPLACE ";" " " ct_flags "${CT_MPIEXEC_FLAGS}")
message(STATUS "MPI: ${CT_MPI_FLAVOUR} (${MPI_C_COMPILER}; tests launch with ${MPIEXEC_EXECUTABLE} ${ct_flags})")
