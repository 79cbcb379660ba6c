#!/usr/bin/env bash
# Builds a parallel HDF5 1.14 (what clusters and Spack's default give) from Debian trixie's
# source package, through a private apt configuration (the machine's own sources stay
# bookworm's). Library only: no tools, Fortran, C++ or HDF5's own tests.
# Usage: .ci/hdf5-1.14.sh WORK_DIR PREFIX
set -euo pipefail
work=$1 prefix=$2
[ -x "$prefix/bin/h5pcc" ] && exit 0
mkdir -p "$work/lists/partial" && cd "$work"
echo "deb-src http://deb.debian.org/debian trixie main" > sources.list
apt=(-o Dir::Etc::SourceList="$PWD/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$PWD/lists" -o APT::Sandbox::User=root)
apt-get "${apt[@]}" update -q
apt-get "${apt[@]}" source --download-only -q hdf5 # trixie's: 1.14.5
tar xzf hdf5_1.14.*.orig.tar.gz
cd hdf5-1.14.*/
# the library's default API is 1.14's own (api=default in Spack), as users get it
CC=mpicc CFLAGS=-O1 ./configure -q --prefix="$prefix" --enable-parallel --enable-shared \
  --disable-static --disable-fortran --disable-cxx --disable-java --disable-hl --disable-tools \
  --disable-tests --without-szlib --with-default-api-version=v114 > /dev/null
make -s -j"$(nproc)" > /dev/null
make -s install > /dev/null
"$prefix/bin/h5pcc" -showconfig | grep -E "HDF5 Version|Parallel HDF5|Default API"
