#!/usr/bin/env bash
# Builds flide with the CUDA backend on a machine that has nvcc, cmake, ninja and a C++ compiler
# but not our Debian -dev packages (the H200 device image, which cannot reach a package
# registry): unpacks the Debian bookworm .debs carried in .devcarry/debs (git-ignored; fetched
# with `apt-get download`, see the list below) into /tmp/flide-deps, points pkg-config, CMake,
# the compiler and the loader at them, configures build-gpu (Release, -DFLIDE_CUDA=ON, Ninja)
# and builds with all cores. Run from anywhere; paths are relative to the repository root.
#
#   scripts/device_build.sh                  # unpack, configure, build
#   scripts/device_build.sh -- CMD ARGS...   # then run CMD in the same environment, e.g.
#     scripts/device_build.sh -- ctest --test-dir build-gpu -R Cuda --output-on-failure
#   source build-gpu/device_env.sh           # that environment, for later commands
#
# Environment knobs: FLIDE_DEPS (unpack dir, /tmp/flide-deps), FLIDE_DEBS (.devcarry/debs),
# FLIDE_BUILD_DIR (build-gpu), FLIDE_JOBS (nproc), FLIDE_CMAKE_ARGS (extra configure flags),
# FLIDE_TARGETS (targets to build, default all), FLIDE_CONFIGURE_ONLY=1 (stop after
# configuring), FLIDE_GTEST_FROM_SOURCE=0/1 (default: from source when the host g++ is older
# than 12, the compiler Debian 12 built libgtest.a with).
#
# How the dependencies are found (the .pc files say prefix=/usr):
#   pkg-config   our own pkgconf (pkgconf-bin) with PKG_CONFIG_SYSROOT_DIR=$FLIDE_DEPS, so every
#                -I/-L of every .pc it reads lands under $FLIDE_DEPS. The top-level CMakeLists
#                prepends /usr/lib/<arch>/openblas-openmp/pkgconfig to PKG_CONFIG_PATH; where
#                that exists (a machine with the package) its openblas.pc is read, and the
#                sysroot still maps it to our copy, whose layout is identical.
#   CMake        CMAKE_PREFIX_PATH: nlohmann_json (usr/share/cmake), GTest
#                (usr/lib/<arch>/cmake/GTest, or a source build under $FLIDE_DEPS/gtest).
#   compiler     CPATH for headers, as a fallback to the -I flags pkg-config gives.
#   loader       the executables carry an old-style DT_RPATH (--disable-new-dtags) to the
#                unpacked library folders, which, unlike RUNPATH, also serves the libraries'
#                own dependencies (libopenblas -> libgfortran, libquadmath): build-gpu's
#                programs run without any environment. LD_LIBRARY_PATH is set too (for pkgconf
#                itself, and for device_env.sh). libgomp1 / libgfortran5 / libquadmath0 are
#                unpacked only when the system lacks them: the system's (newer) libgomp must win
#                over bookworm's. No LIBRARY_PATH: CMake would take its folders for implicit link
#                folders and leave them out of the RPATH.
#
# Packages (bookworm, amd64; keep the folder < 20 MB):
#   libopenblas-openmp-dev libopenblas0-openmp nlohmann-json3-dev libpcre2-dev libpcre2-8-0
#   libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 libgtest-dev
#   libgmock-dev googletest (sources) libgfortran5 libquadmath0 libgomp1 pkgconf pkgconf-bin
#   libpkgconf3; for flide serve: libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev
#   libbrotli-dev libbrotli1 (the folder is then ~19 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
deps=${FLIDE_DEPS:-/tmp/flide-deps}
debs=${FLIDE_DEBS:-$repo/.devcarry/debs}
build=${FLIDE_BUILD_DIR:-build-gpu}
jobs=${FLIDE_JOBS:-$(nproc)}
run_after=()
if (($#)); then
  [[ $1 == -- ]] && shift
  run_after=("$@")
fi
log() { echo "device_build: $*" >&2; }

shopt -s nullglob
all_debs=("$debs"/*.deb)
if ((${#all_debs[@]} == 0)); then
  log "no .deb files in $debs (where apt works: mkdir -p $debs && cd $debs &&" \
    "apt-get download <the packages listed at the top of this script>)"
  exit 1
fi
arch=$(${CC:-gcc} -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
[[ $arch == x86_64-*linux-gnu ]] && arch=x86_64-linux-gnu

# GoogleTest: Debian's libgtest.a was built by g++ 12; an older g++ links against an older
# libstdc++, so build it from the carried sources with the host compiler instead.
cxx=${CXX:-g++}
cxx_major=$("$cxx" -dumpversion 2>/dev/null | cut -d. -f1 || echo 0)
gtest_from_source=${FLIDE_GTEST_FROM_SOURCE:-$( ((cxx_major < 12)) && echo 1 || echo 0)}

have_system_lib() {  # the loader already knows this soname
  { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null || true; } | grep -q " $1 " && return 0
  local d
  for d in /lib/$arch /usr/lib/$arch /lib64 /usr/lib64; do [[ -e $d/$1 ]] && return 0; done
  return 1
}

rm -rf "$deps"
mkdir -p "$deps"
unpacked=()
for deb in "${all_debs[@]}"; do
  name=$(basename "$deb")
  name=${name%%_*}
  case $name in
    libgomp1) have_system_lib libgomp.so.1 && continue ;;
    libgfortran5) have_system_lib libgfortran.so.5 && continue ;;
    libquadmath0) have_system_lib libquadmath.so.0 && continue ;;
    libgtest-dev | libgmock-dev) ((gtest_from_source)) && continue ;;
  esac
  dpkg-deb -x "$deb" "$deps" 2>/dev/null || dpkg -x "$deb" "$deps"
  unpacked+=("$name")
done
log "unpacked into $deps: ${unpacked[*]}"

libdirs="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openblas-openmp"
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset LIBRARY_PATH
export CPATH="$deps/usr/include${CPATH:+:$CPATH}"
pc_path="$deps/usr/lib/$arch/pkgconfig:$deps/usr/lib/$arch/openblas-openmp/pkgconfig"
pc_path="$pc_path:$deps/usr/share/pkgconfig"
export PKG_CONFIG_PATH="$pc_path"
export PKG_CONFIG_LIBDIR="$pc_path"  # no system .pc files behind ours
export PKG_CONFIG_SYSROOT_DIR="$deps"
pkg_config="$deps/usr/bin/pkgconf"
[[ -x $pkg_config ]] || pkg_config=$(command -v pkg-config || true)
if [[ -z $pkg_config ]]; then
  log "no pkgconf in the carried debs and no pkg-config on the system"
  exit 1
fi
export PKG_CONFIG="$pkg_config"

prefix_path="$deps/usr"
if ((gtest_from_source)); then
  if [[ ! -f $deps/usr/src/googletest/CMakeLists.txt ]]; then
    log "googletest sources missing (carry googletest_*.deb)"
    exit 1
  fi
  log "building GoogleTest from source with $cxx $cxx_major"
  cmake -S "$deps/usr/src/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$deps/gtest" -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null
  cmake --build "$deps/gtest-build" -j "$jobs" >/dev/null
  cmake --install "$deps/gtest-build" >/dev/null
  prefix_path="$deps/gtest:$prefix_path"
fi
export CMAKE_PREFIX_PATH="$prefix_path${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v nvcc >/dev/null || { log "nvcc not found (PATH or /usr/local/cuda/bin)"; exit 1; }
export CUDACXX=${CUDACXX:-$(command -v nvcc)}

mkdir -p "$build"
env_file="$build/device_env.sh"
{
  echo "# Written by scripts/device_build.sh: the environment its build and tests run in."
  for v in LD_LIBRARY_PATH CPATH PKG_CONFIG_PATH PKG_CONFIG_LIBDIR \
    PKG_CONFIG_SYSROOT_DIR PKG_CONFIG CMAKE_PREFIX_PATH PATH CUDACXX; do
    printf 'export %s=%q\n' "$v" "${!v}"
  done
} >"$env_file"

generator=(-G Ninja)
if [[ -f $build/CMakeCache.txt ]] &&
  ! grep -q "CMAKE_GENERATOR:INTERNAL=Ninja" "$build/CMakeCache.txt"; then
  generator=()  # an existing build dir keeps its generator
fi
command -v ninja >/dev/null || generator=()
log "configuring $build"
# shellcheck disable=SC2086
cmake -S . -B "$build" "${generator[@]}" -DFLIDE_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DPKG_CONFIG_EXECUTABLE="$pkg_config" -DCMAKE_BUILD_RPATH="${libdirs//:/;}" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" ${FLIDE_CMAKE_ARGS:-}
log "dependencies as configured:"
keys="nlohmann_json_DIR|GTest_DIR|pkgcfg_lib_OPENBLAS_openblas|pkgcfg_lib_PCRE2_pcre2-8"
keys="$keys|pkgcfg_lib_UTF8PROC_utf8proc|PKG_CONFIG_EXECUTABLE|CMAKE_CUDA_COMPILER"
grep -E "^($keys):" \
  "$build/CMakeCache.txt" | sed 's/^/  /' >&2 || true
if [[ ${FLIDE_CONFIGURE_ONLY:-0} == 1 ]]; then
  log "configured (FLIDE_CONFIGURE_ONLY=1); environment in $env_file"
  exit 0
fi
log "building with $jobs jobs"
# FLIDE_TARGETS: a space-separated subset of targets (default: all).
cmake --build "$build" -j "$jobs" ${FLIDE_TARGETS:+--target $FLIDE_TARGETS}
log "built; environment in $env_file"

if ((${#run_after[@]})); then
  log "running: ${run_after[*]}"
  exec "${run_after[@]}"
fi
