#!/usr/bin/env bash
# Set up, build and run every test suite (CPU). Tests that read ../shared skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build && ctest --output-on-failure -j"$(nproc)"
