#!/usr/bin/env bash
# Which GPU architectures a build picks (cmake/PuffCUDA.cmake, cmake/PuffHIP.cmake),
# checked by configuring only, with fake nvidia-smi / rocm_agent_enumerator
# programs standing in for the GPUs: no GPU -> AUTO builds no backend; a GPU ->
# AUTO builds for it; a GPU newer than nvcc -> PTX; ON -> the release list;
# CUDAARCHS -> exactly that. Needs nvcc (the HIP cases need Debian's hipcc
# packages); about 1 minute on 2 cores. Usage: check_arch_choice.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
work="$(realpath -m "${1:-build/arch-choice}")"
rm -rf "${work}" && mkdir -p "${work}/bin"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
failures=0

# expect NAME "wanted configure line" [VAR=VALUE env...] -- [cmake args...]
expect() {
  local name="$1" wanted="$2"; shift 2
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done; shift
  local out
  out="$(env "${env[@]}" cmake -S . -B "${work}/${name}" "${generator[@]}" -DPUFF_PYTHON=OFF \
        -DPUFF_TESTS=OFF -DPUFF_TORCH=OFF -DPUFF_JAX=OFF "$@" 2>&1)" || true
  local got
  got="$(grep -E '^-- puffadv: (CUDA|HIP) backend|older than any' <<<"${out}" || true)"
  if grep -qF -- "${wanted}" <<<"${got}"; then
    echo "ok   ${name}: ${wanted}"
  else
    echo "FAIL ${name}: wanted '${wanted}', configure said:"; echo "${got:-${out}}"
    failures=$((failures + 1))
  fi
  rm -rf "${work:?}/${name}"
}

fake() {  # fake PROGRAM "lines it prints"
  printf '#!/bin/sh\nprintf "%s"\n' "$2" > "${work}/bin/$1"
  chmod +x "${work}/bin/$1"
}

if command -v nvcc >/dev/null 2>&1; then
  cuda=(-DPUFF_HIP=OFF -DPUFF_NVIDIA_SMI="${work}/bin/nvidia-smi")
  fake nvidia-smi ""; chmod -x "${work}/bin/nvidia-smi"  # a driver-less machine: the program fails
  expect cuda-no-gpu "CUDA backend off: nvcc found" -- "${cuda[@]}"
  fake nvidia-smi '9.0\n9.0\n8.6\n'
  expect cuda-local "CUDA backend on: sm_90 sm_86, this machine's GPUs" -- "${cuda[@]}"
  fake nvidia-smi '99.0\n'
  expect cuda-newer-than-nvcc "+PTX compute_" -- "${cuda[@]}"
  fake nvidia-smi '3.0\n'
  expect cuda-older-than-nvcc "older than any architecture" -- "${cuda[@]}"
  expect cuda-on "sm_75 sm_80 sm_86 sm_89 sm_90 +PTX compute_90, the release architectures" -- \
    "${cuda[@]}" -DPUFF_CUDA=ON
  expect cuda-cudaarchs "CUDA backend on: sm_89 +PTX compute_89, as requested" CUDAARCHS=89 -- "${cuda[@]}"
else
  echo "NOTICE: nvcc not found; the CUDA architecture choice was not checked"
fi

if command -v clang++-15 >/dev/null 2>&1 && [ -d /usr/lib/x86_64-linux-gnu/amdgcn/bitcode ]; then
  hip=(-DPUFF_CUDA=OFF -DPUFF_ROCM_AGENT_ENUMERATOR="${work}/bin/rocm_agent_enumerator")
  fake rocm_agent_enumerator 'gfx000\n'
  expect hip-no-gpu "HIP backend off (a HIP compiler was found but no AMD GPU" ROCM_PATH=/usr -- "${hip[@]}"
  fake rocm_agent_enumerator 'gfx000\ngfx1100\n'
  expect hip-local "HIP backend on: gfx1100, this machine's GPUs" ROCM_PATH=/usr -- "${hip[@]}"
  expect hip-on "HIP backend on: gfx90a, the release architectures" -- "${hip[@]}" -DPUFF_HIP=ON
else
  echo "NOTICE: Debian's hipcc packages not found; the HIP architecture choice was not checked"
fi
[ "${failures}" -eq 0 ] || { echo "${failures} architecture-choice case(s) failed"; exit 1; }
