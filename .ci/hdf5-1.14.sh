#!/usr/bin/env bash
# Builds a parallel HDF5 1.14 (what clusters and Spack's default give) from Debian trixie's
# source package (.ci/trixie-source.sh). Library only: no tools, Fortran, C++ or HDF5's own tests.
# Usage: .ci/hdf5-1.14.sh WORK_DIR PREFIX
set -euo pipefail
work=$1 prefix=$2
[ -x "$prefix/bin/h5pcc" ] && exit 0
src=$("$(dirname "$0")/trixie-source.sh" "$work" hdf5) # trixie's: 1.14.5
cd "$src"
# the library's default API is 1.14's own (api=default in Spack), as users get it
CC=mpicc CFLAGS=-O1 ./configure -q --prefix="$prefix" --enable-parallel --enable-shared \
  --disable-static --disable-fortran --disable-cxx --disable-java --disable-hl --disable-tools \
  --disable-tests --without-szlib --with-default-api-version=v114 > /dev/null
make -s -j"$(nproc)" > /dev/null
make -s install > /dev/null
"$prefix/bin/h5pcc" -showconfig | grep -E "HDF5 Version|Parallel HDF5|Default API"
