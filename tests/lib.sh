# Sourced by the test scripts: root-safe MPI, one OpenMP thread, Debian's python, a temporary
# directory $tmp removed on exit, and fail() counting into $fails (book_dataset also needs MGT
# and V).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
PY=${MGT_PYTHON:-/usr/bin/python3} # with numpy and h5py (Debian's, unless MGT_PYTHON names another)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# need_data PATH: the test is skipped (exit 77) without PATH of ../shared/data, and fails
# instead under MGT_REQUIRE_DATA (CI)
need_data() {
  [ -e "$1" ] && return 0
  echo "no $1: skipped"
  [ -n "${MGT_REQUIRE_DATA:-}" ] && exit 1
  exit 77
}

# book_dataset BOOK PARAGRAPHS PREFIX: the book as documents of PARAGRAPHS paragraphs each,
# preprocessed into a WordPiece sentence dataset PREFIX.h5 (its summary line printed)
book_dataset() {
  $PY - "$1" "$tmp/docs.jsonl" "$2" <<'PY'
import json, sys
paras = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if p.strip()]
k = int(sys.argv[3])
with open(sys.argv[2], "w") as f:
    for i in range(0, len(paras), k):
        f.write(json.dumps({"text": "\n\n".join(paras[i:i + k])}) + "\n")
PY
  "$MGT" preprocess --input "$tmp/docs.jsonl" --output-prefix "$3" --split-sentences \
    --tokenizer-type BertWordPieceLowerCase --vocab-file "$V" >"$tmp/pp.log" 2>&1 ||
    { cat "$tmp/pp.log"; exit 1; }
  grep "wrote" "$tmp/pp.log" | tail -1
}

# expect WHAT CMD...: CMD exits 2 with one error line, containing WHAT
expect() {
  local what=$1
  shift
  "$@" >"$tmp/e.log" 2>&1
  local rc=$? n
  n=$(grep -c "error" "$tmp/e.log")
  [ $rc = 2 ] && [ "$n" = 1 ] && grep -q -- "$what" "$tmp/e.log" && echo "ok: $(grep error "$tmp/e.log")" ||
    { fail "$* gave exit $rc and $n error lines, wanted one with '$what'"; sed 's/^/    /' "$tmp/e.log" | head -5; }
}

# expect_error WANT CMD...: under the timeout ${T[@]} (default 120 s), exit 2, one "mgt: error"
# line containing WANT, no MPI_Abort banner, no hang
expect_error() {
  local want=$1
  shift
  [ -n "${T+x}" ] || T=(timeout -k 5 120)
  "${T[@]}" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$? n
  n=$(grep -c '^mgt: error' "$tmp/err")
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "$* hung (killed after the timeout)"
  elif [ $rc != 2 ] || [ "$n" != 1 ] || ! grep -q -F -- "$want" "$tmp/err" || grep -q "MPI_ABORT" "$tmp/err"; then
    fail "$* gave exit $rc and $n error lines, wanted one with '$want'"
    sed 's/^/    /' "$tmp/err" | head -6
  else
    echo "ok: $(grep '^mgt: error' "$tmp/err")"
  fi
}

# serve_start LOG CMD...: an mgt serve command (with --port 0) in the background, its PID in
# $server and the port of its start line in $PORT; fails (and shows LOG) if it does not start
serve_start() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  server=$!
  PORT=
  for _ in $(seq 600); do
    PORT=$(sed -n 's/.* at http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$log")
    [ -n "$PORT" ] && return 0
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
  done
  fail "$(basename "$log" .log) did not start"
  cat "$log"
  return 1
}
