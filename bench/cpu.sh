#!/usr/bin/env bash
# CPU benchmark of GPT-2 124M training steps on this machine:
#   1 rank x 2 threads (with the machine's FMA peak, sgemm and oneDNN fp32 rates and memory
#   bandwidth measured in the same run, and each shape's roofline), the same with fp32 GEMMs
#   through oneDNN,
#   the same in bf16 (native GEMMs where the CPU has bf16 units, with its bf16 dot-product peak,
#   AMX's bf16 tile peak where it has AMX, and native GEMM rate; and emulated), PyTorch fp32 and
#   bf16 autocast at the same shapes (bench/torch_gpt2.py, where python3 has torch; MGT_PYTHON
#   chooses the interpreter),
#   tensor-parallel 2 x 1 thread, data-parallel 2 x 1 thread.
# Usage: bench/cpu.sh [build-dir]   (prints one line per configuration)
set -eu
BUILD=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NCPU=$(nproc)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $NCPU CPUs"
OMP_NUM_THREADS=$NCPU "$BUILD/bench/bench_cpu" --steps 5
OMP_NUM_THREADS=$NCPU "$BUILD/bench/bench_cpu" --steps 5 --fp32-gemm onednn --no-peaks
OMP_NUM_THREADS=$NCPU "$BUILD/bench/bench_cpu" --steps 5 --bf16
OMP_NUM_THREADS=$NCPU "$BUILD/bench/bench_cpu" --steps 5 --bf16 --emulated --no-peaks
PY=${MGT_PYTHON:-/usr/bin/python3}
if "$PY" -c "import torch" 2>/dev/null; then
  for shape in "4 64" "8 256"; do
    set -- $shape
    OMP_NUM_THREADS=$NCPU "$PY" "$(dirname "$0")/torch_gpt2.py" --batch "$1" --seq "$2" --steps 3
    OMP_NUM_THREADS=$NCPU "$PY" "$(dirname "$0")/torch_gpt2.py" --batch "$1" --seq "$2" --steps 3 --bf16
  done
else
  echo "pytorch: not importable by $PY (MGT_PYTHON), not measured"
fi
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 2 --no-peaks
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 1 --no-peaks
OMP_NUM_THREADS=$((NCPU / 2)) mpiexec -n 2 --bind-to none "$BUILD/bench/bench_cpu" --steps 5 --tp 1 --no-peaks --overlap-grad-reduce
