#!/bin/sh
# run.sh — seed and run one libFuzzer target of tfe (docs/testing.md, "Fuzzing").
#   fuzz/run.sh TARGET SECONDS [ARTIFACTS_DIR]
# TARGET is parse, interp or onnx (or a path to a fuzz binary). Run it from the
# build folder of `CC=clang ./configure --enable-fuzz && make fuzz/fuzz_parse
# fuzz/fuzz_interp fuzz/fuzz_onnx`, or set FUZZ_BIN to the folder holding the binaries.
# The corpus starts from tests/golden/*.tfe (and stdlib/, examples/); onnx's
# from the models fuzz/onnx_seeds.tfe exports, run by a normally built tfe
# ($TFE, default ./tfe); it lives
# in FUZZ_CORPUS (default /tmp/tfe-fuzz-corpus-TARGET), kept between runs;
# crashes, leaks and hangs go to ARTIFACTS_DIR (default ./fuzz-artifacts-TARGET).
# The fuzzer runs in a scratch folder, since programs may write files.
# Exit status: 0 when nothing was found, 1 when ARTIFACTS_DIR holds findings.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${TFE_SRCDIR:-$(dirname "$here")}
[ $# -ge 2 ] || { echo "usage: $0 parse|interp|onnx SECONDS [ARTIFACTS_DIR]" >&2; exit 2; }
target=$1 secs=$2
case $target in
  parse|interp|onnx) bin=${FUZZ_BIN:-$PWD/fuzz}/fuzz_$target ;;
  *) bin=$target; target=$(basename "$bin" | sed 's/^fuzz_//') ;;
esac
[ -x "$bin" ] || { echo "$0: no $bin (CC=clang ./configure --enable-fuzz && make fuzz/fuzz_$target)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
art=${3:-$PWD/fuzz-artifacts-$target}
mkdir -p "$art"
art=$(cd "$art" && pwd)
corpus=${FUZZ_CORPUS:-/tmp/tfe-fuzz-corpus-$target}
seeds=$corpus.seeds
mkdir -p "$corpus" "$seeds"
dict=-dict=$here/tfe.dict
if [ "$target" = onnx ]; then
  # seeds: models exported at run time (no generated binaries in the tree)
  tfe=${TFE:-$PWD/tfe}
  [ -x "$tfe" ] || { echo "$0: fuzz_onnx's seeds need a normally built tfe: set TFE" >&2; exit 2; }
  TFE_PATH="${TFE_PATH:-$srcdir/stdlib}" TFE_ONNX_SEEDS=$seeds "$tfe" "$srcdir/fuzz/onnx_seeds.tfe" >&2 ||
    { echo "$0: fuzz/onnx_seeds.tfe failed" >&2; exit 2; }
  dict= # (tfe.dict is the language's words)
else
  # seeds: every golden program, the stdlib and the examples (small files only)
  for f in "$srcdir"/tests/golden/*.tfe "$srcdir"/stdlib/*.tfe "$srcdir"/examples/*.tfe; do
    [ -f "$f" ] && [ "$(wc -c < "$f")" -le 4096 ] && cp "$f" "$seeds/"
  done
fi
scratch=$(mktemp -d /tmp/tfe-fuzz-run.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# golden programs read tests/golden/data and lib/ by relative path
[ -d "$srcdir/tests/golden/data" ] && ln -s "$srcdir/tests/golden/data" "$scratch/data"
[ -d "$srcdir/tests/golden/lib" ] && ln -s "$srcdir/tests/golden/lib" "$scratch/lib"
export TFE_PATH="${TFE_PATH:-$srcdir/stdlib}"
# UBSan reports stop the run, except the known ones in ubsan.supp
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# interpreter error messages are noise here: -close_fd_mask=2 drops the
# target's stderr (sanitizer and libFuzzer reports still come through)
quiet=-close_fd_mask=2
[ -n "${FUZZ_VERBOSE:-}" ] && quiet=
echo "fuzz_$target: ${secs}s, corpus $corpus, artifacts $art" >&2
set +e
(cd "$scratch" && "$bin" "$corpus" "$seeds" $dict \
   -max_len=4096 -timeout=10 -rss_limit_mb=2048 -max_total_time="$secs" \
   -print_final_stats=1 -artifact_prefix="$art/" $quiet ${FUZZ_FLAGS:-})
rc=$?
set -e
found=$(ls "$art" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' || true)
if [ -n "$found" ]; then
  echo "fuzz_$target: findings in $art:" >&2
  echo "$found" | sed 's/^/  /' >&2
  echo "reproduce: $bin ARTIFACT; minimise: $bin -minimize_crash=1 -runs=10000 ARTIFACT" >&2
  exit 1
fi
[ $rc -eq 0 ] || { echo "fuzz_$target: libFuzzer exited with $rc" >&2; exit 1; }
echo "fuzz_$target: nothing found" >&2
