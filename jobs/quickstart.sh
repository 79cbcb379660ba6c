#!/usr/bin/env bash
# From a fresh Debian 12 machine: install the dependencies, build, and run the demo
# (a local 2-rank tensor-parallel training run).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs/deps.sh
cmake -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
jobs/local.sh
