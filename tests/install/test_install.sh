#!/usr/bin/env bash
# The installed library, used the way a C programmer outside this tree uses it.
#   1. `cmake --install BUILD --prefix P` puts the binary, the man page, the
#      static library, the public headers (CMakeLists.txt's CT_PUBLIC_HEADERS:
#      no *-impl.h, no cli, none of the internal ones) and
#      lib/pkgconfig/ctrain.pc in place; every installed header compiles on
#      its own (twice in a row: include guards) with -std=c11 -Werror and
#      nothing but `pkg-config --cflags ctrain`.
#   2. The prefix is moved after installing: the .pc file finds it anyway.
#   3. The example (tests/install/tinynet.c, copied out of the tree) builds
#      with build.sh (pkg-config only), registers its own model "tinynet" and
#      trains it on Fashion-MNIST under mpirun -np 2 with its own INI
#      (model.name = tinynet): the first run stops after epoch 1 (max_steps),
#      the second resumes it from its checkpoint (resume auto) and finishes;
#      the final test accuracy, printed and in metrics.jsonl, is above 0.80
#      (an untrained 10-class model is near 0.10).
#   4. Its checkpoints record model.name = tinynet, pass the installed
#      `ctrain-dist inspect` and `audit verify`; the installed ctrain-dist,
#      which does not have the model, refuses the INI (config --check), and
#      the example refuses a typo with the registered names and a did-you-mean.
# ctest runs it on the plain build (install.test_install); CT_BUILD_DIR is the
# build to install (default: the directory of CT_BINARY), CC the compiler
# (default cc). About 8 s, most of it the two trainings.
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
BUILD=${CT_BUILD_DIR:-$(dirname "$CT_BINARY")}
CMAKE=${CT_CMAKE:-cmake}
INSTALLED=$WORK/installed
PREFIX=$WORK/prefix

# ---------------------------------------------------------------- 1. install
if ! "$CMAKE" --install "$BUILD" --prefix "$INSTALLED" >"$WORK/install.log" 2>&1; then
  fail "cmake --install $BUILD"; cat "$WORK/install.log"; finish; exit 1
fi
missing=""
for f in bin/ctrain-dist bin/ctrain-run lib/libctrain.a lib/pkgconfig/ctrain.pc \
         share/man/man1/ctrain-dist.1 include/ctrain/core/version.h include/ctrain/models/models.h \
         include/ctrain/nn/module.h include/ctrain/train/trainer.h include/ctrain/nn/linear.h \
         include/ctrain/config/config.h include/ctrain/parallel/comm.h; do
  [ -e "$INSTALLED/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && pass "install: binary, man page, library, headers, ctrain.pc" \
                  || fail "install: missing$missing"
private=$(cd "$INSTALLED/include/ctrain" && find . -name '*-impl.h' -o -path './cli*' -o -path './train/session.h' \
           -o -path './ckpt/chain.h' -o -path './train/state.h' -o -path './core/simd.h' \
           -o -path './core/liveness.h' -o -path './report/*' | sort)
[ -z "$private" ] && pass "install: no internal headers" || fail "install: internal headers installed: $private"

# ---------------------------------------------------------------- 2. relocate
mv "$INSTALLED" "$PREFIX"
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
if [ "$(pkg-config --modversion ctrain 2>&1)" = "$(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/ctrain.pc")" ] &&
   pkg-config --cflags ctrain | grep -q -- "-I$PREFIX/lib/pkgconfig/../../include/ctrain"; then
  pass "pkg-config: ctrain $(pkg-config --modversion ctrain) from the moved prefix"
else
  fail "pkg-config: $(pkg-config --cflags --libs ctrain 2>&1)"
fi

# Each header alone, from a directory that holds no headers, so only the -I
# flags pkg-config gives can find anything.
mkdir -p "$WORK/hdr"
bad=0
n=0
while read -r h; do
  n=$((n + 1))
  printf '#include "%s"\n#include "%s"\n' "$h" "$h" >"$WORK/hdr/probe.c"
  if ! (cd "$WORK/hdr" && ${CC:-cc} -std=c11 -Wall -Wextra -Werror -fsyntax-only probe.c \
          $(pkg-config --cflags ctrain)) >"$WORK/hdr/out.log" 2>&1; then
    bad=$((bad + 1)); echo "  $h:"; head -5 "$WORK/hdr/out.log"
  fi
done < <(cd "$PREFIX/include/ctrain" && find . -name '*.h' | sed 's|^\./||' | sort)
[ "$n" -gt 20 ] && [ "$bad" -eq 0 ] && pass "headers: all $n compile on their own" \
                                     || fail "headers: $bad of $n do not compile on their own"

# ---------------------------------------------------------------- 3. the example
EX=$WORK/example
mkdir -p "$EX"
cp "$CT_SOURCE_DIR/tests/install/tinynet.c" "$CT_SOURCE_DIR/tests/install/tinynet.ini" \
   "$CT_SOURCE_DIR/tests/install/build.sh" "$EX/"
if ! (cd "$EX" && bash ./build.sh "$PREFIX" "$EX/tinynet") >"$WORK/build.log" 2>&1; then
  fail "example: build.sh against $PREFIX"; cat "$WORK/build.log"; finish; exit 1
fi
pass "example: built with pkg-config only"

run=$WORK/run
if CT_BINARY=$EX/tinynet run_np 2 "$WORK/ex1" "$EX/tinynet.ini" "$run" --set train.max_steps=234; then
  pass "example: epoch 1 of tinynet at 2 ranks ($(metric "$run/metrics.jsonl" -1 test_acc))"
else
  fail "example: first run"; cat "$WORK/ex1.log"
fi
if CT_BINARY=$EX/tinynet run_np 2 "$WORK/ex2" "$EX/tinynet.ini" "$run" &&
   grep -q "resum.*ckpt-234" "$WORK/ex2.log"; then
  pass "example: resumed from ckpt-234 and finished"
else
  fail "example: resumed run"; cat "$WORK/ex2.log"
fi
printed=$(sed -n 's/^tinynet: 468 steps, .* test_acc \([0-9.]*\) .*/\1/p' "$WORK/ex2.log")
last=$(metric "$run/metrics.jsonl" -1 test_acc 2>/dev/null || true)
if [ -n "$printed" ] && [ "$printed" = "$(printf '%.4f' "$last")" ] && ge "$printed" 0.80; then
  pass "example: test_acc $printed after 2 epochs (> 0.80; metrics.jsonl $last)"
else
  fail "example: test_acc printed '$printed', metrics.jsonl '$last' (want equal and > 0.80)"
  tail -5 "$WORK/ex2.log"
fi

# ---------------------------------------------------------------- 4. checkpoints, refusals
ck=$run/ckpt-468
if "$PREFIX/bin/ctrain-dist" inspect "$ck" >"$WORK/inspect.log" 2>&1 &&
   grep -q "params/layers.0.weight .* \[64, 784\]" "$WORK/inspect.log" && ! grep -q BAD "$WORK/inspect.log"; then
  pass "installed ctrain-dist inspect: $ck"
else
  fail "installed ctrain-dist inspect $ck"; cat "$WORK/inspect.log"
fi
if "$PREFIX/bin/ctrain-dist" audit verify "$run" >"$WORK/audit.log" 2>&1 &&
   grep -q "verdict: OK (2 checkpoints" "$WORK/audit.log"; then
  pass "installed ctrain-dist audit verify: $run"
else
  fail "installed ctrain-dist audit verify $run"; cat "$WORK/audit.log"
fi
grep -qx "name = tinynet" "$run/config.ini" && pass "the run records model.name = tinynet" \
                                            || fail "config.ini lacks name = tinynet"

CT_BINARY=$PREFIX/bin/ctrain-dist run_np 1 "$WORK/check" config --check "$EX/tinynet.ini" || true
if every_rank_exited 1 "$WORK/check" 2 &&
   grep -q "tinynet.ini:$(grep -n '^name = tinynet' "$EX/tinynet.ini" | cut -d: -f1): model.name: unknown value 'tinynet' (expected one of: mlp, cnn, resnet, vit, gpt)" "$WORK/check.log"; then
  pass "ctrain-dist, without the model, refuses model.name = tinynet"
else
  fail "ctrain-dist config --check tinynet.ini"; cat "$WORK/check.log"
fi
CT_BINARY=$EX/tinynet run_np 2 "$WORK/typo" "$EX/tinynet.ini" "$WORK/typo-run" --set model.name=tinynt || true
if every_rank_exited 2 "$WORK/typo" 2 &&
   grep -q "model.name: unknown value 'tinynt' (expected one of: mlp, cnn, resnet, vit, gpt, tinynet); did you mean 'tinynet'?" "$WORK/typo.log"; then
  pass "example: a typo in model.name lists the registered models and suggests tinynet"
else
  fail "example: --set model.name=tinynt"; cat "$WORK/typo.log"
fi
finish
