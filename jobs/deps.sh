#!/usr/bin/env bash
# Installs what megatron-c needs on Debian 12 (bookworm): compiler, CMake, Open MPI,
# parallel HDF5, OpenBLAS (OpenMP build), oneDNN (bf16 GEMMs on the CPU), libmicrohttpd (mgt serve),
# fortunes (English quotations: the demo's text where ../shared/data is missing),
# and for the tests Python with numpy, h5py and jinja2 (chat templates rendered as transformers
# renders them), curl and rsvg-convert (librsvg2-bin, to render mgt
# plot's pictures).
# With --test also what only CI and the optional tests use: clang-format, clang (the second
# compiler CI builds with), and Slurm with munge
# and PMIx for the real-Slurm test (the daemons are started by the test itself, never as
# services).
# Needs root or sudo. Skips the install when everything is already there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libpcre2-dev libutf8proc-dev libdnnl-dev
  libmicrohttpd-dev hdf5-tools libopenblas-openmp-dev python3 python3-numpy python3-h5py python3-jinja2 librsvg2-bin curl
  fortunes)
[ "${1:-}" = --test ] && pkgs+=(clang-format clang slurm-wlm munge libpmix-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
