#!/usr/bin/env bash
# cibuildwheel's before-all on Linux (the manylinux_2_28 image, AlmaLinux 8): nvcc
# and the static CUDA runtime from NVIDIA's package repository, nothing else (the
# kernels include only cuda_runtime.h: no CCCL, no math libraries). CUDA 12.8: its
# machine code runs on every NVIDIA driver from 525 on (CUDA minor-version
# compatibility; CUDA 13 would need 580), and its PTX, which Blackwell GPUs
# compile at first use, on every driver that knows Blackwell (570 = CUDA 12.8,
# the first). docs/packaging.md: "CUDA".
set -euo pipefail
version="${PUFF_WHEEL_CUDA_VERSION:-12.8}"
case "$(uname -m)" in
  x86_64) repo=x86_64 ;;
  aarch64) repo=sbsa ;;  # Grace Hopper / Grace Blackwell servers
  *) echo "no CUDA packages for $(uname -m): build with PUFF_CUDA=OFF" >&2; exit 1 ;;
esac
dnf install -y -q dnf-plugins-core
dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/${repo}/cuda-rhel8.repo"
dnf install -y -q "cuda-nvcc-${version/./-}" "cuda-cudart-devel-${version/./-}"
ln -sfn "/usr/local/cuda-${version}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
