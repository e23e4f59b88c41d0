#!/usr/bin/env bash
# Build and run the whole test suite twice: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/); then the
# fuzz smoke test (build-fuzz/, clang).
# Run launch/setup.sh first (it installs the Debian packages).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)

cmake -S . -B build -DCT_WERROR=ON -DCT_BUILD_TESTS=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure

# Under the sanitizers every unit and MPI test runs, and the end-to-end tests
# of bad inputs, placement, progress, the step engine, non-finite values,
# disk faults and durability; the long whole-run tests (accuracy, resume,
# ~3 min here, audit, ~40 s plain, export, ~40 s: two trainings and PyTorch,
# the deterministic-mode runs, ~1 min, the report, ~70 s under ASan with
# Chromium, retention, ~30 s, the watchdog's timed stalls, the gpt's export to
# PyTorch, ~45 s, and generate, ~15 s) are left to the
# plain build: the code they drive is covered under the sanitizers by
# test_train, test_zoo, test_ckpt, test_ckpt_read, test_record, test_audit,
# test_export, test_report, test_watchdog and test_reprosum. The cluster tests
# (jobs on a local Slurm) and the install test run in the plain build only:
# they drive the same binary through Slurm's launchers and pkg-config.
cmake -S . -B build-asan -DCT_WERROR=ON -DCT_BUILD_TESTS=ON -DCT_SANITIZE=address,undefined
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure \
  -E 'e2e\.test_(accuracy|resume|audit|export|deterministic|report|retention|watchdog|data_formats|gpt_export|generate)$|^cluster\.'

# Fuzz smoke (tests/fuzz/README.md): the libFuzzer harnesses built with clang
# in build-fuzz/ (only them), every regression input and seed replayed, then
# 60 s of fuzzing per harness, all seven at once (on 2 cores, about 17 CPU-s
# each: the wall time stays a minute); any finding fails.
CT_FUZZ_JOBS=7 tests/fuzz/run.sh 60
