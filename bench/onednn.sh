#!/usr/bin/env bash
# Builds oneDNN 3 (Debian trixie's source package, 3.7.2) into PREFIX, for measuring native bf16
# and fp32 GEMMs against Debian 12's oneDNN 2.6.3 (docs/install.md, "A newer oneDNN"): the
# matmul and reorder primitives only (all megatron-c calls), OpenMP threads, no tests or graph
# API. About 20 minutes on 2 cores.
# Usage: bench/onednn.sh WORK_DIR PREFIX
#   then: DNNLROOT=PREFIX cmake -B build-dnnl3 -DMGT_ONEDNN=ON ... (mgt version names it)
set -euo pipefail
work=$1 prefix=$2
[ -f "$prefix/include/oneapi/dnnl/dnnl.h" ] && exit 0
src=$("$(dirname "$0")/../.ci/trixie-source.sh" "$work" onednn)
cd "$src"
cmake -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DDNNL_CPU_RUNTIME=OMP \
  -DDNNL_ENABLE_PRIMITIVE="MATMUL;REORDER" -DONEDNN_BUILD_GRAPH=OFF -DDNNL_BUILD_TESTS=OFF \
  -DDNNL_BUILD_EXAMPLES=OFF > /dev/null
cmake --build build -j"$(nproc)" > /dev/null
cmake --install build > /dev/null
grep -h "define DNNL_VERSION_M" "$prefix/include/oneapi/dnnl/dnnl_version.h"
