#!/usr/bin/env bash
# Install ctrain-dist's Debian packages (launch/packages.txt) and build it.
#
#   launch/setup.sh [BUILD_DIR] [extra cmake args...]     (default build dir: build)
#
# Then the data sets that Debian does not package, for every config in
# configs/ that reads one (data.dir = data/NAME: configs/moby-gpt.ini reads
# data/moby-dick): launch/get-data.sh NAME, once (it keeps what it checked).
# Offline that is a warning (the other configs work), under CI=true an error.
#
# Idempotent: packages already installed are not touched (apt-get runs only
# when something is missing), and an existing build directory is reused.
# Needs root (or sudo) only when packages are missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
build=${1:-build}
shift || true

mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages.txt")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#pkgs[@]} Debian packages present"
fi

cd "$root"
cmake -S . -B "$build" -DCT_WERROR=ON "$@"
cmake --build "$build" -j"$(nproc)"
echo "setup: built $build/ctrain-dist"

data_sets=$(sed -n 's|^dir *= *data/\([a-z0-9-]*\).*|\1|p' configs/*.ini | sort -u)
# launch/get-data.sh fetches with `npm pack`: Debian's npm where none is on
# the PATH (a Node.js from elsewhere brings its own, which Debian's conflicts with).
if [ -n "$data_sets" ] && ! command -v npm >/dev/null; then
  echo "setup: installing npm (for launch/get-data.sh)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends npm ||
    echo "setup: warning: could not install npm" >&2
fi
for name in $data_sets; do
  if ! "$here/get-data.sh" "$name"; then
    echo "setup: warning: could not fetch $name: the configs reading data/$name need" \
         "launch/get-data.sh $name to succeed first" >&2
    [ "${CI:-}" != true ] || exit 1
  fi
done
