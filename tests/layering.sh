#!/usr/bin/env bash
# The layers of docs/architecture.md, checked on the sources: every header belongs to one layer
# (the table below; a header it does not name fails the check, so a new one must be placed),
# and a source file may include only headers of its own layer and those below it:
#   common (errors, MPI errors) < io/formats (codecs) < base (configuration, the model
#   description, state lists, flags, the backend and data interfaces) < kernels < parallel <
#   model < train < cmd; io/text, io/tensors and io/data sit on base (io/data also on
#   io/text) and below train: io/ never includes a model, a backend's table or a command.
# Then the seams a table cannot say: io/ creates no backend or model, kernels know no
# communicators, public headers include only public headers. Usage: layering.sh SOURCE_DIR
set -u -f # no globbing: included names are words, not patterns
cd "$1" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

declare -A layer=(
  [common.h]=common [agree.h]=common
  [json.h]=formats [sha256.h]=formats [h5util.h]=formats [tensorboard.h]=formats
  [config.h]=base [model.h]=base [state.h]=base [data.h]=base [backend.h]=base [flags.h]=base
  [log.h]=base [progress.h]=base [rng.h]=base
  [backend_impl.h]=kernels [cpu.h]=kernels [native.h]=kernels [dnnl_compat.h]=kernels [cblas_any.h]=kernels [cuda_check.h]=kernels [cuda_impl.h]=kernels [flash16.h]=kernels
  [philox.h]=kernels
  [moe_route.h]=kernels
  [grid.h]=parallel [comm.h]=parallel [comm_impl.h]=parallel [ddp.h]=parallel [tp.h]=parallel [device.h]=parallel [watchdog.h]=parallel
  [gpt.h]=model [optim.h]=model [gpt_impl.h]=model
  [checkpoint.h]=tensors [ckpt_impl.h]=tensors [safetensors.h]=tensors
  [tokenizer.h]=text [chat.h]=text [hf_tok_impl.h]=text [wordpiece.h]=text [tokenizer_impl.h]=text [unicode.h]=text [unicode_bert.h]=text
  [unicode_tables.h]=text
  [dataset.h]=data [dataset_impl.h]=data [tasks.h]=data [mmidx.h]=data [bert_data.h]=data [sentences.h]=data
  [train.h]=train [data_mock.h]=train [report.h]=train
  [session.h]=infer [sample.h]=infer [engine.h]=infer
  [cli.h]=cmd [eval.h]=cmd [generate.h]=cmd [hf.h]=cmd [hf_impl.h]=cmd [plan.h]=cmd [plot.h]=cmd [plot_impl.h]=cmd
  [tokenize.h]=cmd [serve.h]=cmd
)
# what each layer may include, and the layer of each source folder
declare -A allowed=(
  [common]="common"
  [formats]="common formats"
  [base]="common formats base"
  [kernels]="common base kernels"
  [parallel]="common formats base kernels parallel"
  [model]="common formats base kernels parallel model"
  [tensors]="common formats base tensors"
  [text]="common formats base text"
  [data]="common formats base text data"
  [train]="common formats base kernels parallel model tensors text data train"
  [infer]="common formats base kernels parallel model tensors text data train infer"
  [cmd]="common formats base kernels parallel model tensors text data train infer cmd"
)
declare -A folder=(
  [src/base]=base [src/parallel]=parallel [src/model]=model [src/train]=train [src/infer]=infer
  [src/cmd]=cmd
  [io/formats]=formats [io/tensors]=tensors [io/text]=text [io/data]=data [kernels]=kernels
  [kernels/cpu]=kernels [kernels/cuda]=kernels
)

for h in $(find include src io kernels -name '*.h' | sort); do
  [ -n "${layer[$(basename "$h")]:-}" ] || fail "header $h is in no layer (add it to tests/layering.sh)"
done

# check FILE LAYER: every project header FILE includes is of LAYER or one it may use
check() {
  local inc l
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$1"); do
    l=${layer[$(basename "$inc")]:-}
    [ -n "$l" ] || continue
    case " ${allowed[$2]} " in
    *" $l "*) ;;
    *) fail "$1 (layer $2) includes $inc, of layer $l, which $2 may not use" ;;
    esac
  done
}
n=0
for f in $(find src io kernels \( -name '*.c' -o -name '*.cu' \) | sort); do
  l=${folder[$(dirname "$f")]:-}
  [ -n "$l" ] || { fail "$f is in a folder of no layer"; continue; }
  check "$f" "$l"
  n=$((n + 1))
done
for h in $(find include src io kernels -name '*.h' | sort); do
  l=${layer[$(basename "$h")]:-}
  [ -n "$l" ] && check "$h" "$l" && n=$((n + 1))
done
[ $fails = 0 ] && echo "ok: $n files include only their layer and the layers below it"

# every function is defined in the layer of the header that declares it (common is base's, a
# base interface may be implemented by kernels: the backends, the RNG)
declare -A declared=()
for h in $(find include src io kernels -name '*.h'); do
  l=${layer[$(basename "$h")]:-}
  [ -n "$l" ] || continue
  for fn in $(grep -hoE '^(MGT_NODISCARD )?[a-z][a-z0-9_]*( [a-z0-9_]+)*[ *]+mgt_[a-z0-9_]+\(' "$h" | grep -oE 'mgt_[a-z0-9_]+\($' | tr -d '('); do
    declared[$fn]=$l
  done
done
m=0
for f in $(find src io kernels \( -name '*.c' -o -name '*.cu' \)); do
  fl=${folder[$(dirname "$f")]}
  for fn in $(grep -hoE '^(extern "C" )?[a-z][a-z0-9_]*( [a-z0-9_]+)*[ *]+mgt_[a-z0-9_]+\(' "$f" | grep -oE 'mgt_[a-z0-9_]+\($' | tr -d '('); do
    hl=${declared[$fn]:-}
    [ -n "$hl" ] || continue
    m=$((m + 1))
    [ "$hl" = "$fl" ] || [ "$hl/$fl" = base/kernels ] || [ "$hl/$fl" = common/base ] ||
      fail "$fn is declared in a header of layer $hl but defined in $f (layer $fl)"
  done
done
[ $fails = 0 ] && echo "ok: $m functions defined in the layer that declares them"

# the configuration is the caller's business: checkpoint files store it as text
bad=$(grep -lE '#include "mgt/config\.h"' $(find io/tensors -type f) include/mgt/checkpoint.h src/mgt/safetensors.h)
[ -z "$bad" ] && echo "ok: io/tensors knows no configuration" || fail "io/tensors reads the configuration: $bad"

bad=$(grep -rlE 'mgt_backend_(cpu|cuda)_create|mgt_device_open|mgt_gpt_create' io)
[ -z "$bad" ] && echo "ok: io/ creates no backend and no model" || fail "io/ creates a backend or model: $bad"
bad=$(grep -rlE '#include "mgt/(comm|grid|device)\.h"|MPI_Comm|ncclComm' kernels/)
[ -z "$bad" ] && echo "ok: kernels know no communicators" || fail "kernels use communicators: $bad"
for h in $(find include/mgt -name '*.h'); do
  for inc in $(sed -n 's/^#include "mgt\/\([a-z_0-9]*\.h\)".*/\1/p' "$h"); do
    [ -f "include/mgt/$inc" ] || fail "public header $h includes the private mgt/$inc"
  done
done
[ $fails = 0 ] && echo "ok: public headers include only public headers"
# what users read names no folder of one machine (a developer's home, scratch or work folder)
bad=$(grep -nE '(^|[^a-zA-Z0-9_.$])/(work|root|home/[a-z])' README.md docs/*.md bench/*.sh jobs/*.sh jobs/*.sbatch 2>/dev/null)
[ -z "$bad" ] && echo "ok: README, docs, bench and jobs name no folder of one machine" ||
  fail "a folder of one machine named: $bad"
echo "layering: $fails failures"
[ $fails = 0 ]
