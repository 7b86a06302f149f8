#!/usr/bin/env bash
# Installs flide's build dependencies (Debian packages) when missing, then configures and
# builds into build/. Used by scripts/demo.sh, scripts/test.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libopenblas-openmp-dev nlohmann-json3-dev libpcre2-dev
          libutf8proc-dev libcpp-httplib-dev libgtest-dev libgmock-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "flide setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The CUDA backend is compiled wherever nvcc is (CI has it, without a GPU: its tests skip there).
cuda_flags=()
nvcc=$(command -v nvcc || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
[[ -n $nvcc ]] && cuda_flags=(-DFLIDE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
