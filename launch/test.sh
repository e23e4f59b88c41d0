#!/usr/bin/env bash
# Build and run the whole test suite: a normal build (build/), the MPI and
# end-to-end tests again against MPICH (build-mpich/), an AddressSanitizer +
# UndefinedBehaviorSanitizer build (build-asan/), the fuzz smoke test
# (build-fuzz/, clang) and the cluster tests (a local Slurm, build/'s binary).
# Run launch/setup.sh first (it installs the Debian packages).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)
# Each phase says how long it took: CI must stay under 25 minutes on a 2-core
# machine, and these lines say where the time goes. ctest -j: every MPI and
# end-to-end test declares the cores it uses (PROCESSORS: its rank count),
# and ctest is given twice the cores: an end-to-end test keeps about one
# core busy, not two (start-up, file I/O, fsync, bash and python between its
# runs: e2e.test_step_engine + test_resume took 100 s alone for 100 CPU-s,
# 74 s side by side), so two of them run at once on two cores (the plain
# phase: 557 -> 450 s).
slots=$((2 * jobs))
t0=$(date +%s)
phase() { echo "test.sh: $1 in $(($(date +%s) - t0)) s"; t0=$(date +%s); }

cmake -S . -B build -DCT_WERROR=ON -DCT_BUILD_TESTS=ON
cmake --build build -j"$jobs"
phase "plain build"

# The ASan+UBSan build (below: what runs under it) compiles in the
# background while the plain tests run, at the lowest priority (nice 19:
# CFS gives it ~1.5 % of a core the tests want), so it takes the cycles
# they leave idle and does not slow them; what is left of it runs after.
# (setsid: its own process group, which the EXIT trap ends should the plain
# tests fail first.)
asan_log=$(mktemp)
setsid nice -n 19 bash -c 'cmake -S . -B build-asan -DCT_WERROR=ON -DCT_BUILD_TESTS=ON \
  -DCT_SANITIZE=address,undefined && cmake --build build-asan -j"$1"' _ "$jobs" >"$asan_log" 2>&1 &
asan_pid=$!
trap 'kill -TERM -- -"$asan_pid" 2>/dev/null || true; rm -f "$asan_log"' EXIT

# The cluster tests (label cluster) and the tests across namespaced hosts
# (label net) run later, beside MPICH and the fuzz smoke (below).
ctest --test-dir build --output-on-failure -j"$slots" -LE '^(cluster|net)$'
phase "plain tests"

asan_rc=0
wait "$asan_pid" || asan_rc=$?
trap - EXIT
[ "$asan_rc" -eq 0 ] || { cat "$asan_log"; rm -f "$asan_log"; echo "test.sh: ASan+UBSan build failed"; exit 1; }
tail -1 "$asan_log"
rm -f "$asan_log"
phase "ASan+UBSan build (the rest of it, after the plain tests)"

# The cluster tests (~3.5 minutes on 2 cores) are mostly waits on Slurm's
# own timers (a time limit's warning comes on slurmctld's 30 s check, a
# requeued job starts on the scheduler's next pass): they run in the
# background from here, on build/'s binary, while MPICH and the fuzz smoke
# use the cores, and the ASan tests wait for them (those include the
# watchdog's timed stalls, which want the machine to themselves). Their
# output is printed when they end.
# (setsid: their own process group, which the EXIT trap ends should a later
# phase fail first.)
# The tests across hosts made of network namespaces (tests/net, ~2 minutes:
# a watchdog's deadline, TCP over veth) run after them, in the same
# background ctest; their MPICH runs are tests/mpich/ci.sh's.
cluster_log=$(mktemp)
setsid ctest --test-dir build --output-on-failure -L '^(cluster|net)$' >"$cluster_log" 2>&1 &
cluster_pid=$!
cluster_t0=$(date +%s)
trap 'kill -TERM -- -"$cluster_pid" 2>/dev/null || true; rm -f "$cluster_log"' EXIT

# MPICH (issue 23): build-mpich/ (ctrain-dist and the MPI test programs
# only), every MPI test at N = 1, 2, 4 under hydra, e2e.cross_mpi (resumes
# across MPIs against build/'s Open MPI binary) and the e2e tests of bad
# inputs, generate and disk faults (tests/mpich/ci.sh says why these).
tests/mpich/ci.sh "$root" "$jobs"
phase "MPICH build and tests"

# Fuzz smoke (tests/fuzz/README.md): the libFuzzer harnesses built with clang
# in build-fuzz/ (only them), every regression input and seed replayed, then
# 60 s of fuzzing per harness, all nine at once, beside the cluster tests'
# jobs (about 15 CPU-s a harness on 2 cores: a smoke test that the harnesses
# build, run and find nothing quickly; the long runs are by hand,
# tests/fuzz/README.md); any finding fails. (Stop 24: 90 -> 60 s, for CI's
# 20 minutes.)
CT_FUZZ_JOBS=9 tests/fuzz/run.sh 60
phase "fuzz smoke"

cluster_rc=0
wait "$cluster_pid" || cluster_rc=$?
trap - EXIT
cat "$cluster_log"
rm -f "$cluster_log"
echo "test.sh: cluster tests (beside MPICH and the fuzz smoke) took $(($(date +%s) - cluster_t0)) s"
[ "$cluster_rc" -eq 0 ] || { echo "test.sh: cluster tests failed"; exit 1; }
phase "waiting for the cluster tests"

# Under the sanitizers every unit and MPI test runs, and the end-to-end tests
# of bad inputs, placement, non-finite values, disk faults, durability, the
# data tool, ZeRO-1 sharding and the gpt; the long whole-run tests (accuracy,
# resume, audit, export, the deterministic-mode runs, the report with
# Chromium, retention, the watchdog's timed stalls, the data formats, the
# gpt's export to PyTorch, generate), the step engine's same-bits runs (its
# buckets, overlap and prefetch are test_gradsync's and test_loader's under
# the sanitizers; ~50 s of the phase), the progress output (whole epochs
# on a pseudo-terminal, ~70 s under ASan), the run directory's owner and
# shared-directory checks, the TensorBoard files, the timeline trace and
# the BPE against node's reference encoder and train.init_from's round trip
# with PyTorch (whole jobs started, killed and taken over, a book tokenized,
# or weights made by torch; their modules are unit test_owner's, mpi
# test_shared_dir's, unit test_tbevents', test_trace's, test_bpe's,
# test_weights' and test_init_from's and fuzz_weights' under the sanitizers;
# ~150 s of the phase, for CI's 25 minutes) are left to the
# plain build: the code they drive is covered under the sanitizers by test_train, test_zoo,
# test_ckpt, test_ckpt_read, test_record, test_audit, test_export,
# test_report, test_watchdog, test_reprosum, test_npy, test_cifar,
# test_generate and test_progress. The cluster tests (jobs on a local Slurm),
# the tests across namespaced hosts and the install test run in the plain
# build only: they drive the same binary through Slurm's launchers, TCP
# between namespaces and pkg-config.
ctest --test-dir build-asan --output-on-failure -j"$slots" \
  -E 'e2e\.test_(accuracy|resume|audit|export|deterministic|report|retention|watchdog|data_formats|gpt_export|generate|progress|step_engine|owner|shared_dir|tensorboard|trace|bpe|init_from)$|^cluster\.|^net\.'
phase "ASan+UBSan tests"
