#!/usr/bin/env bash
# Run Criterion suites one after another; print each suite's synthesis and a closing total.
# Usage: tests/run-suites.sh VARIANT BIN...
set -u
variant=$1
shift
# Criterion's parallel runner leaks 48 bytes in the parent process (libcriterion itself);
# LeakSanitizer would report it on every suite, so the ASan build runs one test at a time.
jobs=2
[ "$variant" = asan ] && jobs=1
passed=0 failed=0 bad_suites=()
for bin in "$@"; do
    name=${bin#build/$variant/tests/}
    # Criterion's timeouts can fail to end a parallel run; a hard limit per suite cannot.
    out=$(timeout --kill-after=10 900 "$bin" --jobs=$jobs 2>&1)
    rc=$?
    summary=$(printf '%s\n' "$out" | grep -a 'Synthesis:' | tail -1)
    t=$(printf '%s' "$summary" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
    p=$(printf '%s' "$summary" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
    t=${t:-0} p=${p:-0}
    # A sanitizer report in a forked test child (a leak found at its exit, a race) does not
    # always fail the test in Criterion's eyes; it fails the suite here.
    reports=$(printf '%s\n' "$out" | grep -aE 'WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:' | head -3)
    if [ "$rc" -ne 0 ] || [ -z "$summary" ] || [ "$t" -ne "$p" ] || [ "$t" -eq 0 ] || [ -n "$reports" ]; then
        printf '%s\n' "$out" | grep -av '^\[----\] ' | tail -60
        bad_suites+=("$name")
        failed=$((failed + (t > p ? t - p : 1)))
    fi
    passed=$((passed + p))
    printf '[%s] %-32s %s\n' "$variant" "$name" "${summary#*Synthesis: }"
done
if [ ${#bad_suites[@]} -gt 0 ]; then
    echo "failing suites: ${bad_suites[*]}"
fi
echo "tests ($variant): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
