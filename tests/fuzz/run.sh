#!/bin/sh
# run.sh FUZZER CORPUS WORKDIR RUNS [FLAG...]: runs a libFuzzer harness for RUNS
# inputs from seed 1, starting from the committed CORPUS. New inputs it finds
# go to WORKDIR/corpus (never into the source tree); a crash leaves its input
# in WORKDIR as crash-*, to be added to CORPUS as a regression input once
# fixed. FLAGs go to libFuzzer as they are (-dict=FILE).
set -eu
fuzzer=$1 corpus=$2 work=$3 runs=$4
shift 4
# UBSan reports end the run like ASan's do, so that libFuzzer keeps the input.
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export UBSAN_OPTIONS
rm -rf "$work"
mkdir -p "$work/corpus"
exec "$fuzzer" -runs="$runs" -seed=1 -max_len=65536 -timeout=10 -rss_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work/corpus" "$corpus"
