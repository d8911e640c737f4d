#!/usr/bin/env bash
# Installs what libflashattn needs on Debian 12 / Ubuntu (idempotent; as root or via
# sudo). The CUDA backend is built when nvcc is found (e.g. /usr/local/cuda); the HIP
# backend when hipcc is (Debian's hipcc package, installed here).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git libgtest-dev libbenchmark-dev
          libhwy-dev hipcc libamdhip64-dev rocm-device-libs clang libclang-rt-14-dev librsvg2-bin
          python3-torch python3-numpy python3-pytest python3-venv python3-wheel)  # python/: Debian's, no PyPI
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
