#!/usr/bin/env bash
# `make stress`: the user-shaped stress suites, run after run with a new seed each, until the
# time is up. Stops at the first failing run and prints the seed that replays it
# (MP_TEST_SEED=... with the same MP_STRESS_WORKERS and MP_STRESS_MS).
# Usage: tests/stress.sh MINUTES WORKERS BIN...
set -u
minutes=$1 workers=$2
shift 2
end=$(($(date +%s) + minutes * 60))
runs=0
while [ "$(date +%s)" -lt "$end" ]; do
    for bin in "$@"; do
        seed=$(($(date +%s%N) / 1000))
        out=$(MP_TEST_SEED=$seed MP_STRESS_WORKERS=$workers MP_STRESS_MS=${MP_STRESS_MS:-1000} \
            timeout --kill-after=10 1800 "$bin" --jobs=1 2>&1)
        rc=$?
        if [ "$rc" -ne 0 ] || ! grep -aq 'Failing: 0 | Crashing: 0' <<<"$out" ||
            grep -aqE 'WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:' <<<"$out"; then
            printf '%s\n' "$out" | tail -60
            echo "stress: FAILED after $runs runs: MP_TEST_SEED=$seed MP_STRESS_WORKERS=$workers $bin"
            exit 1
        fi
        runs=$((runs + 1))
    done
done
echo "stress: $runs runs passed in $minutes min (workers $workers)"
