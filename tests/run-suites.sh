#!/usr/bin/env bash
# Run Criterion suites one after another; print each suite's synthesis and seconds, and a closing
# total.
# A suite fails on a failing or crashing test, a run that did not end, or any sanitizer report
# in its output (a report in a forked test child does not always fail the test for Criterion).
# For a failing suite it prints Criterion's report of what failed (the assertion, its file and
# line and message; crashes; time-outs), then each sanitizer report, then the last lines of the
# rest of the output (what the tests wrote themselves, such as the "impossible state" lines of
# the tests that abort on purpose).
#
# Usage: tests/run-suites.sh [--repeat N] VARIANT BIN...
#   --repeat N   run each suite up to N times, stopping a suite at its first failing run
set -u
repeat=1
if [ "${1:-}" = --repeat ]; then
    repeat=$2
    shift 2
fi
variant=$1
shift
jobs=2

# Criterion's parallel runner leaks 48 bytes in its own process (libcriterion itself, not a
# test) when a .timeout test ends while another runs, and LeakSanitizer then fails the suite
# with exit 1. Such a report is dropped here, and only such a report: every stack in it is the
# allocator's interceptor and then libcriterion.so frames alone, which no allocation of ours
# can be (the tree is built with frame pointers, so our code always shows in its stacks). A
# test's own leak is reported by its child process and still fails the suite.
drop_criterion_leaks() {
    awk '
        function flush(   i) {
            if (!own) for (i = 1; i <= n; i++) print buf[i]
            n = 0; inside = 0
        }
        /ERROR: LeakSanitizer: detected memory leaks/ { inside = 1; own = 1; n = 0 }
        inside {
            buf[++n] = $0
            if ($0 ~ /^ +#[0-9]+ / && $0 !~ /libcriterion\.so/ &&
                !($0 ~ /^ +#0 / && $0 ~ /interceptor_/))
                own = 0
            if ($0 ~ /^SUMMARY: /) flush()
            next
        }
        /^=+$/ { next }
        { print }
        END { if (inside) flush() }'
}

sanitizer_start='WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:'

# What to show of a failing run's output ($1).
report() {
    local out=$1 failures reports rest
    failures=$(printf '%s\n' "$out" | grep -aE '^\[(----|FAIL|ERR |WARN)\] ' | head -150)
    [ -n "$failures" ] && printf -- '---- what failed (Criterion):\n%s\n' "$failures"
    # Each sanitizer report from its first line to its SUMMARY line (at most 80 lines each;
    # a UBSan line stands alone), the first three.
    reports=$(printf '%s\n' "$out" | awk -v start="$sanitizer_start" '
        $0 ~ start && !inside { n++; if (n > 3) exit; inside = 1; lines = 0;
                                print "---- sanitizer report " n ":" }
        inside { if (++lines <= 80) print; if ($0 ~ /^SUMMARY: / || $0 ~ /runtime error:/ && lines == 1) inside = 0 }')
    [ -n "$reports" ] && printf '%s\n' "$reports"
    rest=$(printf '%s\n' "$out" | grep -avE '^\[(----|FAIL|ERR |WARN|====|PASS|SKIP|RUN )\] ' | tail -40)
    [ -n "$rest" ] && printf -- '---- the rest of its output (last 40 lines: what the tests wrote):\n%s\n' "$rest"
    echo "----"
}

passed=0 failed=0 bad_suites=()
for bin in "$@"; do
    name=${bin#build/$variant/tests/}
    run=0 suite_passed=0 bad=false summary= t0=$SECONDS
    while [ "$run" -lt "$repeat" ]; do
        run=$((run + 1))
        # Criterion's timeouts can fail to end a parallel run; a hard limit per suite cannot.
        out=$(timeout --kill-after=10 900 "$bin" --jobs=$jobs 2>&1)
        rc=$?
        if [ "$variant" = asan ] && printf '%s\n' "$out" | grep -aq 'ERROR: LeakSanitizer'; then
            out=$(printf '%s\n' "$out" | drop_criterion_leaks)
            # Exit 1 was the dropped report's when nothing else is wrong (checked below).
            [ "$rc" -eq 1 ] && ! printf '%s\n' "$out" | grep -aqE "$sanitizer_start" && rc=0
        fi
        summary=$(printf '%s\n' "$out" | grep -a 'Synthesis:' | tail -1)
        t=$(printf '%s' "$summary" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
        p=$(printf '%s' "$summary" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
        t=${t:-0} p=${p:-0}
        passed=$((passed + p))
        suite_passed=$((suite_passed + p))
        if [ "$rc" -ne 0 ] || [ -z "$summary" ] || [ "$t" -ne "$p" ] || [ "$t" -eq 0 ] ||
            printf '%s\n' "$out" | grep -aqE "$sanitizer_start"; then
            why="exit $rc"
            [ "$rc" -gt 128 ] && why="signal $((rc - 128))"
            [ "$rc" -eq 124 ] && why="killed after 900 s"
            [ "$rc" -eq 0 ] && [ "$t" -gt 0 ] && [ "$t" -eq "$p" ] && why="a sanitizer report"
            [ "$t" -eq 0 ] && [ "$rc" -eq 0 ] && why="no test ran"
            [ "$repeat" -gt 1 ] && why="run $run of $repeat, $why"
            printf '[%s] %-32s FAILED (%s): %s\n' "$variant" "$name" "$why" \
                "${summary:+${summary#*Synthesis: }}"
            report "$out"
            bad_suites+=("$name")
            failed=$((failed + (t > p ? t - p : 1)))
            bad=true
            break
        fi
    done
    $bad && continue
    if [ "$repeat" -gt 1 ]; then
        printf '[%s] %-32s %d runs passed (%d tests) %ds\n' "$variant" "$name" "$run" \
            "$suite_passed" $((SECONDS - t0))
    else
        printf '[%s] %-32s %s %ds\n' "$variant" "$name" "${summary#*Synthesis: }" $((SECONDS - t0))
    fi
done
if [ ${#bad_suites[@]} -gt 0 ]; then
    echo "failing suites: ${bad_suites[*]}"
fi
runs_note=
[ "$repeat" -gt 1 ] && runs_note=", up to $repeat runs a suite"
echo "tests ($variant$runs_note): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
