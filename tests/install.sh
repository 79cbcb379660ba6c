#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a consumer project against the
# installed CMake package. Usage: install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/mgt"
test -f "$tmp/prefix/include/mgt/gpt.h"
# the public headers, and no private one
got=$(cd "$tmp/prefix/include/mgt" && ls | tr '\n' ' ')
want="agree.h backend.h chat.h checkpoint.h comm.h common.h config.h data.h data_mock.h dataset.h gpt.h grid.h model.h optim.h state.h tasks.h tokenizer.h train.h "
[ "$got" = "$want" ] || { echo "installed headers: $got; expected: $want"; exit 1; }
"$tmp/prefix/bin/mgt" version
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/consumer/consumer"
