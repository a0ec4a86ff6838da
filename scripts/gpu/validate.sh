#!/usr/bin/env bash
# The GPU validation of a tree, on the device machine (one H200): build, the whole
# suite on CUDA, compute-sanitizer memcheck and racecheck over every kernel, and
# the benchmark grids beside rl-triton, optionally against an earlier commit's
# build measured in the same call (issue 28's speed check: every cell within 3 %).
#
# Here, once (copies rl-triton into the checkout and, with a commit, exports that
# commit's tree; both land in .gpu/, which git ignores and `carry` sends):
#   bash scripts/gpu/validate.sh prepare [BEFORE_COMMIT]
# There, from the checkout's root (device tool: carry [".gpu"]):
#   [STAGES=build,tests,sanitize,bench] [WHEEL=...] [BEFORE=.gpu/before | BEFORE_WHEEL=...] \
#     bash scripts/gpu/validate.sh
#
# Stages (STAGES, comma-separated, in this order whatever the order given):
#   build     the wheel of this tree for sm_90 with the torch operators and the JAX
#             handlers, and, when BEFORE names a tree (default .gpu/before if it
#             exists), the same of that tree, side by side. Both wheels come back
#             under $OUT/wheel-after/ and $OUT/wheel-before/, in 15 MiB parts
#             (NAME.whl.part00, ...) when larger: copy them into .gpu/wheels/ and
#             pass WHEEL / BEFORE_WHEEL (the wheel, or its .part00) to a later
#             call, which then skips the build (the device allows 10 minutes a call).
#   tests     the whole Python suite on every target the machine has (numpy, torch
#             CPU and CUDA, CuPy), pytest -n 6 by file (TEST_FILES: by test); the JAX files after it.
#   sanitize  beside the tests: compute-sanitizer memcheck and racecheck, side by
#             side, over scripts/gpu/kernel_workload.py (every layout the host
#             picks for GAE, TD(lambda), V-trace and the puff advantage, against
#             the CPU), test_gpu.py's and test_gpu_family.py's every_layout cases
#             (every estimator on every layout), the n-step window kernel, the flat
#             and aligned row-group kernels and the long-row kernel
#             (test_gpu_flat_rows.py), and bench_conventions.py's quick GPU == CPU
#             sweep (16-bit inputs, flag types, fused outputs), and the fused backward
#             (scripts/gpu/backward_workload.py).
#   bench     alone on the GPU, the grids named in GRIDS (default std,family,puff):
#             std: benchmarks/bench_conventions.py's peer grid (every estimator
#             beside rl-triton, with the copy bandwidth; STD_ESTIMATORS narrows it),
#             family: issue 20's estimators, per_step: issue 29's per-step forms
#             (puffadv alone, checked against its CPU call), scan: linear_recurrence
#             beside rl-triton's generic scan, puff: bench_gpu.py's puff advantage,
#             backward: benchmarks/bench_backward.py (issue 30; BACKWARD_ARGS, e.g.
#             "--estimators gae --shapes 65536x128").
#             With a before build: each grid for after, then before (ROUNDS=2: then
#             before, after again), rl-triton in the after runs only, and
#             scripts/gpu/compare_bench.py's table in $OUT/before_after.md.
#   variants  the kernel-variant harness (benchmarks/gpu_scan_variants.cu), timed
#             (its arguments in VARIANTS_ARGS, e.g. "--profile --variant 4x6,4x8").
#   ncu       Nsight Compute over short rows (scripts/gpu/short_rows_workload.py).
# Default: build,tests,sanitize,bench. A full run does not fit one call: e.g.
#   call 1  STAGES=build                       (wheels come back; nothing else fits beside it)
#   call 2  STAGES=tests,sanitize WHEEL=...
#   call 3  STAGES=bench WHEEL=... BEFORE_WHEEL=...
# Put nothing else in $OUT: the device returns 8 files, and the wheel's parts are three of them.
#
# PY_OVERLAY=1: this tree's python/puffadv/ is copied over the installed wheel (a carried wheel
# of an earlier commit whose C++ is unchanged since).
# TEST_FILES: the tests stage runs these pytest paths only (space-separated), and not the
# JAX files after them; default the whole suite. TEST_K: a pytest -k expression over them.
# TEST_DIST: pytest-xdist's --dist (default loadfile for the whole suite, load for TEST_FILES).
# Time limits, seconds: LIMIT_BUILD (540: the sm_90 wheel took 410 s on the device's 16 cores
# on 2026-12-06, after an attempt cut off at 300 s in the same folder; build in a call of its
# own), LIMIT_TESTS (540: tests and sanitizers
# run side by side within it), LIMIT_BENCH (300), LIMIT_EXTRA (120: variants, ncu);
# and DEADLINE (570 after the start): no stage runs past it.
# Shapes: STD_SHAPES, FAM_SHAPES, PUFF_SHAPES (RxH,...; defaults below).
# Output ($OUT, at most 8 files come back): summary.txt, logs.tar.gz (every log),
# before_after.md, std-bench.md, family-bench.md, and the wheels.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = prepare ]; then
  set -e
  # ../shared beside the main checkout (a worktree's own parent may not have it).
  main_root="$(dirname "$(git rev-parse --path-format=absolute --git-common-dir)")"
  src="${PUFFADV_RL_TRITON_SRC:-$(realpath -m "$main_root/../shared/peers/rl_triton")}"
  [ -f "$src/__init__.py" ] || { echo "rl-triton not found at $src (PUFFADV_RL_TRITON_SRC)" >&2; exit 1; }
  rm -rf .gpu/peers/rl_triton && mkdir -p .gpu/peers .gpu/wheels
  cp -r "$src" .gpu/peers/rl_triton && chmod -R u+w .gpu/peers/rl_triton
  echo "rl-triton: .gpu/peers/rl_triton (from $src)"
  if [ -n "${2:-}" ]; then
    commit="$(git rev-parse --verify "$2^{commit}")"
    # An exported tree, not a git worktree: its .git file would point at this
    # machine's repository, which does not travel.
    rm -rf .gpu/before && mkdir -p .gpu/before
    git archive "$commit" | tar -x -C .gpu/before
    echo "$commit" > .gpu/before/COMMIT
    echo "before: .gpu/before = $(git log --oneline -1 "$commit")"
  fi
  # The backward grid's peers for CPython 3.12 (the device has no network): TorchRL and
  # tensordict, rlax and what rlax imports (chex, distrax, TensorFlow Probability, ...).
  rm -rf .gpu/pywheels && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d .gpu/pywheels torchrl==0.14.1 tensordict==0.14.3 rlax==0.1.9 \
    chex distrax dm-env tfp-nightly==0.26.0.dev20261027 dm-tree toolz absl-py orjson pyvers decorator gast \
    cloudpickle six
  git check-ignore -q .gpu || echo "warning: .gpu is not ignored by git" >&2
  du -sh .gpu
  exit 0
fi

OUT="${OUT:-/tmp/puffadv-validate-out}"
# The logs stay outside $OUT (the device returns at most 8 files: the wheel's parts must fit)
# and come back as logs.tar.gz.
L="${LOGS:-/tmp/puffadv-validate}/logs"; rm -rf "$L"; mkdir -p "$L"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PUFFADV_RL_TRITON="${PUFFADV_RL_TRITON:-$PWD/.gpu/peers/rl_triton}"
STAGES=",${STAGES:-build,tests,sanitize,bench},"
BEFORE="${BEFORE:-$( [ -d .gpu/before ] && echo .gpu/before )}"
SITE=/tmp/puffadv-site  # the wheels are installed here (--target), one folder each
status=0
want() { [[ "$STAGES" == *",$1,"* ]]; }
stamp() { echo "--- $(date -u +%T) ${SECONDS}s $*" | tee -a "$L/timeline.txt"; }
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
fail() { summary "FAILED: $*"; status=1; }
# A stage's limit: its own, cut to what is left before DEADLINE (at least 1 s).
limit() { local left=$(( ${DEADLINE:-570} - SECONDS )); local s=$(( $1 < left ? $1 : left )); echo $(( s < 1 ? 1 : s )); }
pack() {
  tar -C "$(dirname "$L")" -czf "$OUT/logs.tar.gz" logs
  for f in std-bench.md family-bench.md per_step-bench.md scan-bench.md backward-bench.md before_after.md; do [ -f "$L/$f" ] && cp "$L/$f" "$OUT/"; done
  summary "exit status $status"
}
trap pack EXIT

stamp start
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
  git log --oneline -1 2>/dev/null || echo "(no git history here)"
  [ -n "$BEFORE" ] && echo "before: $BEFORE $(cat "$BEFORE/COMMIT" 2>/dev/null)"
} > "$L/machine.txt" 2>&1
summary "$(head -2 "$L/machine.txt" | tail -1); stages ${STAGES//,/ }"

build_wheel() {  # name, source tree, seconds
  local name="$1" tree="$2"
  rm -rf "$OUT/wheel-$name"
  ( cd "$tree" && CMAKE_BUILD_PARALLEL_LEVEL="$jobs" timeout "$3" python3 -m pip wheel -q --no-build-isolation \
      --no-deps -w "$OUT/wheel-$name" -C build-dir="/tmp/puffadv-build-$name" -C cmake.define.PUFF_CUDA=ON \
      -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C cmake.define.PUFF_HIP=OFF . ) > "$L/build-$name.log" 2>&1
}
install_wheel() {  # name, wheel
  rm -rf "${SITE:?}/$1" && python3 -m pip install -q --no-deps --no-compile --target "$SITE/$1" "$2" \
    > "$L/install-$1.log" 2>&1
}

# ---- build (or take the given wheels)
WHEEL="${WHEEL:-}" BEFORE_WHEEL="${BEFORE_WHEEL:-}"
if want build && [ -z "$WHEEL" ]; then
  two=$([ -n "$BEFORE" ] && [ -z "$BEFORE_WHEEL" ] && echo 1)
  stamp "building after${two:+ and before}"
  jobs=$(nproc)
  [ -n "$two" ] && jobs=$(( jobs / 2 ))  # the two builds share the cores
  build_wheel after . "$(limit "${LIMIT_BUILD:-540}")" & a=$!
  if [ -n "$two" ]; then
    build_wheel before "$BEFORE" "$(limit "${LIMIT_BUILD:-540}")" || fail "build of $BEFORE (logs/build-before.log)"
    BEFORE_WHEEL="$(ls "$OUT"/wheel-before/puffadv-*.whl 2>/dev/null | head -1)"
  fi
  wait $a || fail "build (logs/build-after.log)"
  WHEEL="$(ls "$OUT"/wheel-after/puffadv-*.whl 2>/dev/null | head -1)"
  stamp built
fi
# The device returns files of at most 16 MiB and the CUDA wheel is larger: it comes back
# in 15 MiB parts (WHEEL.part00, ...) beside a copy kept here for this call. A later call
# takes WHEEL=.gpu/wheels/NAME.whl.part00 (the parts carried in .gpu/wheels/) and joins them.
join_parts() {  # a wheel path or its first part -> a whole wheel path
  case "$1" in
    *.part00) local whole="/tmp/$(basename "${1%.part00}")"; cat "${1%00}"?? > "$whole"; echo "$whole" ;;
    *) echo "$1" ;;
  esac
}
split_wheel() {  # the wheel under $OUT/wheel-NAME/, in parts if it is too large to return
  local w="$1"
  case "$w" in "$OUT"/*) ;; *) echo "$w"; return ;; esac  # a carried wheel stays as it is
  [ -f "$w" ] && [ "$(stat -c %s "$w")" -gt $((15 * 1024 * 1024)) ] || { echo "$w"; return; }
  local kept="/tmp/$(basename "$w")"
  split -b 15m -d "$w" "$w.part" && mv "$w" "$kept" && echo "$kept"
}
[ -n "$WHEEL" ] && WHEEL="$(join_parts "$(split_wheel "$WHEEL")")"
[ -n "$BEFORE_WHEEL" ] && BEFORE_WHEEL="$(join_parts "$(split_wheel "$BEFORE_WHEEL")")"
[ -n "$WHEEL" ] && [ -f "$WHEEL" ] || { fail "no wheel: build it (STAGES=build) or give WHEEL=path"; exit 1; }
install_wheel after "$WHEEL" || { fail "install of $WHEEL"; exit 1; }
# PY_OVERLAY=1: this tree's Python package files over the installed wheel's (a carried wheel
# built from an earlier commit whose C++ is this tree's; its compiled modules stay).
[ "${PY_OVERLAY:-0}" = 1 ] && cp -r python/puffadv/. "$SITE/after/puffadv/" && summary "python/puffadv/ laid over the wheel"
if [ -n "$BEFORE_WHEEL" ]; then
  install_wheel before "$BEFORE_WHEEL" || fail "install of $BEFORE_WHEEL"
fi
EXTRA_PATH="${PYTHONPATH:-}"  # what the caller put there (carried wheels, say) stays behind the build
# The backward grid's peers (TorchRL, rlax and what they import), when `prepare` downloaded them:
# installed beside the build, behind it on the path, for the bench stage only (the suite's peer
# cross-checks run in CI).
if want bench && ls .gpu/pywheels/*.whl > /dev/null 2>&1; then
  rm -rf "$SITE/peers" && python3 -m pip install -q --no-deps --no-compile --target "$SITE/peers" .gpu/pywheels/*.whl \
    > "$L/install-peers.log" 2>&1 && EXTRA_PATH="${EXTRA_PATH:+$EXTRA_PATH:}$SITE/peers" || fail "install of .gpu/pywheels"
fi
export PYTHONPATH="$SITE/after${EXTRA_PATH:+:$EXTRA_PATH}"
python3 -m puffadv > "$L/selfcheck.txt" 2>&1 || fail "self-check (logs/selfcheck.txt)"
summary "after: $(basename "$WHEEL"); $(tail -1 "$L/selfcheck.txt")${BEFORE_WHEEL:+; before: $BEFORE_WHEEL}"

# ---- tests and sanitizers, side by side
sanitize() {  # tool: its seven commands in turn, each within an equal share of the stage's time left
  # (a fixed seventh each cut three commands off beside the whole suite, H100 2026-12-06, while
  # the first four had finished in well under theirs)
  local tool="$1" rc=0 left=7 end=$(( SECONDS + $(limit "${LIMIT_TESTS:-540}") ))
  under() {  # python3 arguments
    local each=$(( (end - SECONDS) / left )); left=$(( left - 1 )); [ "$each" -lt 1 ] && each=1
    echo "=== $tool: python3 $* (within ${each} s)" >> "$L/$tool.txt"
    PUFFADV_UNDER_SANITIZER=1 timeout "$each" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      python3 "$@" >> "$L/$tool.txt" 2>&1
    local code=$?
    echo "=== $tool exit status $code: python3 $*" >> "$L/$tool.txt"
    [ $code -eq 0 ] || rc=1
  }
  local pytest=(-m pytest -q -p no:cacheprovider)
  under scripts/gpu/kernel_workload.py
  under "${pytest[@]}" tests/python/test_gpu.py tests/python/test_gpu_family.py -k "every_layout and float32"
  under "${pytest[@]}" tests/python/test_gpu_family.py -k "n_step_vector_kernel and float32"
  under "${pytest[@]}" tests/python/test_gpu_flat_rows.py -k "(match_the_cpu and float32 and (shape4 or shape8)) \
or (nan_stays and shape1) or (aligned and (shape6 or shape7)) or long_rows"
  under benchmarks/bench_conventions.py --quick --check-only
  under scripts/gpu/new_kernels_check.py  # linear_recurrence, next_values, overflow caps, backward, issue 29 forms (forms_check.py)
  # The fused backward (value_vjp) on every traversal: by default two cases, plain and with ratios
  # (three cases took up to 200 s under each tool beside the tests, 2026-12-06); SANITIZE_BACKWARD_CASES=""
  # runs them all.
  WORKLOAD_CASES="${SANITIZE_BACKWARD_CASES-gae_last_value,gae_ratios}" \
    under scripts/gpu/backward_workload.py
  return $rc
}
pids=()
if want sanitize; then
  stamp "sanitizers"
  sanitize memcheck & pids+=("$!:memcheck")
  sanitize racecheck & pids+=("$!:racecheck")
fi
if want tests; then
  stamp "tests"
  t=$(limit "${LIMIT_TESTS:-540}")
  # The whole suite by file (its GPU fixtures are per file); a few TEST_FILES by test, else
  # they get a worker each (2026-12-06: two files on two of six workers ran past the limit).
  # TEST_DIST=load spreads the whole suite by test (no file's tail on one worker).
  dist="${TEST_DIST:-$([ -n "${TEST_FILES:-}" ] && echo load || echo loadfile)}"
  # Each worker's torch would take every core for its CPU ops: six workers of 16 threads on 16
  # cores (beside the sanitizers) made the CPU half of test_cuda_gradients_equal_the_cpu's
  # n_step_returns_long (6000 small ops) take 89 s instead of 0.7 (H100, 2026-12-06); with
  # OMP_NUM_THREADS=2 all 36 cases took 9.9 s.
  workers="${TEST_WORKERS:-6}"
  case "$workers" in  # a count: nproc / workers threads each (0 or auto: torch's own default)
    ''|*[!0-9]*|0) threads="${OMP_NUM_THREADS:-$(nproc)}" ;;
    *) threads="${OMP_NUM_THREADS:-$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))}" ;;
  esac
  # -v: each test's outcome on its own line as it ends (under xdist the -r summary comes only
  # at the end, which a timeout loses); the summary greps the FAILED ones.
  OMP_NUM_THREADS="$threads" timeout "$t" python3 -m pytest -v -rfs --tb=line -p no:cacheprovider -n "$workers" --dist "$dist" ${TEST_FILES:-tests/python} ${TEST_K:+-k "$TEST_K"} \
    --ignore=tests/python/test_jax.py --ignore=tests/python/test_jax_vmap.py --ignore=tests/python/test_jax_errors.py \
    --ignore=tests/python/test_family_jax.py > "$L/pytest-gpu.txt" 2>&1 \
    || fail "pytest on CUDA (logs/pytest-gpu.txt)"
  [ -z "${TEST_FILES:-}" ] && { timeout "$(limit 150)" python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_jax.py \
    tests/python/test_jax_vmap.py tests/python/test_jax_errors.py tests/python/test_family_jax.py > "$L/pytest-jax.txt" 2>&1 || fail "JAX tests (logs/pytest-jax.txt)"; }
  for f in pytest-gpu pytest-jax; do summary "$f: $(grep -E '[0-9]+ (passed|failed)' "$L/$f.txt" | tail -1)"; done
  grep -hE "(^| )(FAILED|ERROR) tests/" "$L/pytest-gpu.txt" "$L/pytest-jax.txt" | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' \
    | sort -u | head -80 | tee -a "$OUT/summary.txt"
fi
for entry in "${pids[@]}"; do
  wait "${entry%%:*}" || fail "${entry#*:} (logs/${entry#*:}.txt)"
  summary "${entry#*:}: $(grep -cE 'exit status 0:' "$L/${entry#*:}.txt") of $(grep -cE '^=== .* exit status' "$L/${entry#*:}.txt") commands clean; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/${entry#*:}.txt" | sort | uniq -c | tr '\n' ' ')"
done
want tests || want sanitize && stamp "tests and sanitizers done"

# ---- benchmarks, alone on the GPU
bench_round() {  # name (after|before), round, with rl-triton (1|0)
  local name="$1" round="$2" peer="$3" dir="$L/bench-$1"
  mkdir -p "$dir"
  local env=(env)  # env's options come before its assignments
  [ "$peer" = 1 ] || env+=(-u PUFFADV_RL_TRITON)
  env+=(PYTHONPATH="$SITE/$name${EXTRA_PATH:+:$EXTRA_PATH}")
  local grid all="1024x128,8192x64,8192x91,65536x128,262144x128,1048576x8,4096x1024,64x16384,8x131072"
  peers() {  # grid, estimators, shapes: one bench_conventions.py peer grid
    timeout "$(limit "$share")" "${env[@]}" python3 benchmarks/bench_conventions.py --sections peers \
      --estimators "$2" --shapes "$3" --json "$dir/$1.$round.json" --markdown "$dir/$1.$round.md" \
      > "$dir/$1.$round.txt" 2>&1
  }
  for grid in ${GRIDS//,/ }; do
    case "$grid" in
      std) peers std "${STD_ESTIMATORS:-}" "${STD_SHAPES:-$all}" ;;
      family) peers family family "${FAM_SHAPES:-1024x128,8192x64,8192x91,65536x128,262144x128,4096x1024}" ;;
      per_step) peers per_step per_step \
        "${STEP_SHAPES:-1024x128,65536x128,262144x128,1048576x8,4096x1024,64x16384,8x131072}" ;;
      scan) peers scan "linear_recurrence reverse,linear_recurrence forward" "${SCAN_SHAPES:-$all}" ;;
      puff) timeout "$(limit "$share")" "${env[@]}" python3 benchmarks/bench_gpu.py --quick \
        --shapes "${PUFF_SHAPES:-$all}" > "$dir/puff.$round.txt" 2>&1 ;;
      backward) timeout "$(limit "$share")" "${env[@]}" python3 benchmarks/bench_backward.py \
        ${BACKWARD_ARGS:-} --out "$dir/backward.$round.md" > "$dir/backward.$round.txt" 2>&1 ;;
      *) fail "unknown grid $grid (GRIDS: std, family, per_step, scan, puff, backward)" ;;
    esac
  done
  stamp "bench $name round $round"
}
if want bench; then
  stamp "bench"
  rounds=1; order=(after)
  if [ -n "$BEFORE_WHEEL" ]; then
    rounds="${ROUNDS:-1}"; order=(after before)
    [ "$rounds" = 2 ] && order+=(before after)
  fi
  # Each grid run gets an equal share of the stage.
  GRIDS="${GRIDS:-std,family,puff}"
  grids=(${GRIDS//,/ })
  share=$(( $(limit "${LIMIT_BENCH:-300}") / (${#grids[@]} * ${#order[@]}) ))
  i=0
  for name in "${order[@]}"; do
    i=$(( i + 1 )); round=$(( (i + 1) / 2 ))
    [ "$name" = after ] && peer=1 || peer=0
    bench_round "$name" "$round" "$peer"
  done
  for grid in std family per_step scan backward; do cp "$L/bench-after/$grid.1.md" "$L/$grid-bench.md" 2>/dev/null; done
  grep -hE "MISMATCH|MISSED|Error" "$L"/bench-after/*.txt | head -20 | tee -a "$OUT/summary.txt"
  if [ -n "$BEFORE_WHEEL" ]; then
    python3 scripts/gpu/compare_bench.py "$L/bench-after" "$L/bench-before" --markdown "$L/before_after.md" \
      > "$L/before_after.txt" 2>&1 || fail "before/after: a cell slower by more than 3 %, or none measured on both sides (before_after.md)"
    tail -1 "$L/before_after.txt" | tee -a "$OUT/summary.txt"
  fi
fi

# ---- research extras
if want variants; then
  timeout "$(limit "${LIMIT_EXTRA:-120}")" bash -c "nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Isrc \
    benchmarks/gpu_scan_variants.cu -o /tmp/puffadv-variants && /tmp/puffadv-variants ${VARIANTS_ARGS:-}" \
    > "$L/variants.txt" 2>&1 \
    || fail "variants harness (logs/variants.txt)"
  stamp variants
fi
if want ncu; then
  timeout "$(limit "${LIMIT_EXTRA:-120}")" ncu --profile-from-start off --section SpeedOfLight --section LaunchStats \
    --section Occupancy python3 scripts/gpu/short_rows_workload.py > "$L/ncu-short-rows.txt" 2>&1 \
    || fail "ncu (logs/ncu-short-rows.txt)"
  stamp ncu
fi
exit $status
