#!/usr/bin/env bash
# Build and run the whole test suite twice: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/); then the
# fuzz smoke test (build-fuzz/, clang).
# Run launch/setup.sh first (it installs the Debian packages).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)
# Each phase says how long it took: CI must stay under 20 minutes on a 2-core
# machine, and these lines say where the time goes. ctest -j: every MPI and
# end-to-end test declares the cores it uses (PROCESSORS: its rank count),
# so ctest runs tests side by side only where cores are free.
t0=$(date +%s)
phase() { echo "test.sh: $1 in $(($(date +%s) - t0)) s"; t0=$(date +%s); }

cmake -S . -B build -DCT_WERROR=ON -DCT_BUILD_TESTS=ON
cmake --build build -j"$jobs"
phase "plain build"
ctest --test-dir build --output-on-failure -j"$jobs"
phase "plain tests"

# Under the sanitizers every unit and MPI test runs, and the end-to-end tests
# of bad inputs, placement, the step engine, non-finite values, disk faults,
# durability, the data tool and the gpt; the long whole-run tests (accuracy,
# resume, audit, export, the deterministic-mode runs, the report with
# Chromium, retention, the watchdog's timed stalls, the data formats, the
# gpt's export to PyTorch, generate) and the progress output (whole epochs
# on a pseudo-terminal, ~70 s under ASan) are left to the plain build: the
# code they drive is covered under the sanitizers by test_train, test_zoo,
# test_ckpt, test_ckpt_read, test_record, test_audit, test_export,
# test_report, test_watchdog, test_reprosum, test_npy, test_cifar,
# test_generate and test_progress. The cluster tests (jobs on a local Slurm)
# and the install test run in the plain build only: they drive the same
# binary through Slurm's launchers and pkg-config.
cmake -S . -B build-asan -DCT_WERROR=ON -DCT_BUILD_TESTS=ON -DCT_SANITIZE=address,undefined
cmake --build build-asan -j"$jobs"
phase "ASan+UBSan build"
ctest --test-dir build-asan --output-on-failure -j"$jobs" \
  -E 'e2e\.test_(accuracy|resume|audit|export|deterministic|report|retention|watchdog|data_formats|gpt_export|generate|progress)$|^cluster\.'
phase "ASan+UBSan tests"

# Fuzz smoke (tests/fuzz/README.md): the libFuzzer harnesses built with clang
# in build-fuzz/ (only them), every regression input and seed replayed, then
# 60 s of fuzzing per harness, all seven at once (on 2 cores, about 17 CPU-s
# each: the wall time stays a minute); any finding fails.
CT_FUZZ_JOBS=7 tests/fuzz/run.sh 60
phase "fuzz smoke"
