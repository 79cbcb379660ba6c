#!/usr/bin/env bash
# The local launcher: runs `mgt train` on this machine through mpiexec, without a
# scheduler. Environment (all optional):
#   NP   ranks (default 2)          TP   tensor-parallel size (default: NP if it divides 4, else 1)
#   MGT  the mgt binary (default: build/mgt beside this script, else mgt on PATH)
# Extra arguments are passed to `mgt train` and override the demo's flags.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NP=${NP:-2}
case "$NP" in 1 | 2 | 4) TP=${TP:-$NP} ;; *) TP=${TP:-1} ;; esac
MGT=${MGT:-$here/../build/mgt}
[ -x "$MGT" ] || MGT=$(command -v mgt) || { echo "local.sh: no mgt binary (build first)" >&2; exit 2; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One OpenMP thread per core of this rank's share of the machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(($(nproc) / NP > 0 ? $(nproc) / NP : 1))}
exec mpiexec -n "$NP" --oversubscribe --bind-to none "$MGT" train \
  --mock-data --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --vocab-size 128 --micro-batch-size 16 --global-batch-size 32 --train-iters 300 \
  --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 20 --lr-decay-style cosine --log-interval 25 \
  --tensor-model-parallel-size "$TP" "$@"
