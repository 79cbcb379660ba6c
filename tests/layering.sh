#!/usr/bin/env bash
# The seams of docs/architecture.md, checked on the sources: io/ includes no model, optimizer
# or training header and creates no backend; kernels know no communicators; a public header
# (include/mgt/) includes only public headers. Usage: layering.sh SOURCE_DIR
set -u
cd "$1" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
bad=$(grep -lE '#include "mgt/(gpt|optim|train|session|hf)\.h"' io/*.c io/*.h)
[ -z "$bad" ] && echo "ok: io/ includes no model, optimizer or training header" ||
  fail "io/ files include model or optimizer headers: $bad"
bad=$(grep -lE 'mgt_backend_(cpu|cuda)_create|mgt_device_open|mgt_gpt_create' io/*.c)
[ -z "$bad" ] && echo "ok: io/ creates no backend and no model" || fail "io/ creates a backend or model: $bad"
bad=$(grep -rlE '#include "mgt/(comm|grid|device)\.h"|MPI_Comm|ncclComm' kernels/)
[ -z "$bad" ] && echo "ok: kernels know no communicators" || fail "kernels use communicators: $bad"
for h in include/mgt/*.h; do
  for inc in $(sed -n 's/^#include "mgt\/\([a-z_0-9]*\.h\)"/\1/p' "$h"); do
    [ -f "include/mgt/$inc" ] || fail "public header $h includes the private mgt/$inc"
  done
done
[ $fails = 0 ] && echo "ok: public headers include only public headers"
echo "layering: $fails failures"
[ $fails = 0 ]
