#!/bin/bash
# Builds the C API example against an installed libctrain, with pkg-config and
# nothing else from this source tree: what a user outside it would type.
#   tests/install/build.sh PREFIX [OUTPUT]      (OUTPUT defaults to ./tinynet)
# PREFIX is where `cmake --install build --prefix PREFIX` put the library; its
# pkg-config file is looked up under PREFIX/lib*/pkgconfig.
set -euo pipefail
prefix=${1:?usage: build.sh PREFIX [OUTPUT]}
out=${2:-tinynet}
here=$(cd "$(dirname "$0")" && pwd)
pcdir=
for d in "$prefix"/lib/pkgconfig "$prefix"/lib64/pkgconfig "$prefix"/lib/*/pkgconfig; do
  if [ -f "$d/ctrain.pc" ]; then pcdir=$d; break; fi
done
if [ -z "$pcdir" ]; then
  echo "build.sh: no ctrain.pc in $prefix/lib*/pkgconfig (was the library installed there?)" >&2
  exit 1
fi
export PKG_CONFIG_PATH="$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# -std=c11 and no feature macros: the installed headers must stand on their own.
set -x
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror "$here/tinynet.c" -o "$out" \
  $(pkg-config --cflags --libs ctrain)
