#!/usr/bin/env bash
# Downloads and unpacks Debian trixie's source package PACKAGE into WORK_DIR through an apt
# configuration private to that folder (the machine's own sources stay bookworm's); prints the
# unpacked folder's path. Usage: .ci/trixie-source.sh WORK_DIR PACKAGE
set -euo pipefail
work=$1 package=$2
mkdir -p "$work/lists/partial" && cd "$work"
echo "deb-src http://deb.debian.org/debian trixie main" > sources.list
apt=(-o Dir::Etc::SourceList="$PWD/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$PWD/lists" -o APT::Sandbox::User=root)
apt-get "${apt[@]}" update -q >&2
apt-get "${apt[@]}" source --download-only -q "$package" >&2
origs=("$package"_*.orig.tar.*)
# awk reads the whole listing: under pipefail a reader that leaves early may kill tar by SIGPIPE
dir=$(tar tf "${origs[0]}" | awk -F/ 'NR == 1 { print $1 }')
tar xf "${origs[0]}"
echo "$PWD/$dir"
