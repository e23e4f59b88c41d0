# Writes the code version header, ${OUT}, from src/core/version.h.in: the
# project version and `git describe --always --dirty --tags` of the source
# tree ${SRC}. Included at configure time and run again at every build
# (cmake -P, by the ct_version target), so a build directory reused across
# commits or edits still records the code it was built from; the header is
# rewritten only when its text changes, so an unchanged tree recompiles
# nothing.
#   -DSRC=<source dir> -DOUT=<header> -DPROJECT_VERSION=<x.y.z> [-DGIT_EXECUTABLE=<git>]
set(CT_GIT_DESCRIBE "unknown")
if(GIT_EXECUTABLE AND EXISTS "${SRC}/.git")
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --tags
                  WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE CT_GIT_DESCRIBE OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(NOT CT_GIT_DESCRIBE)
    set(CT_GIT_DESCRIBE "unknown")
  endif()
endif()
configure_file(${SRC}/src/core/version.h.in ${OUT} @ONLY)
