#!/usr/bin/env bash
# tests/run-suites.sh on suites made to fail: it must show the failing assertion (file, line,
# message) of a suite whose other tests abort on purpose and print "impossible state" lines,
# fail a suite whose tests pass but whose output has a sanitizer report, pass a clean suite,
# and with --repeat stop a suite at its first failing run.
#
# Usage: tests/systemd/runner.sh   (from the repository root)
set -u
# Run from a Criterion test, whose BoxFort variable would make the fixtures' Criterion take
# itself for a sandboxed test child.
unset BXFI_MAP
tmp=$(mktemp -d /tmp/magpie-runner.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bins=$tmp/build/fix/tests
mkdir -p "$bins"

cat >"$tmp/failing.c" <<'C'
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
Test(fixture, aborts_on_purpose, .signal = SIGABRT)
{
    fprintf(stderr, "magpie: fixture.c:1: impossible state: on purpose\n");
    abort();
}
Test(fixture, passes) { cr_assert(1); }
Test(fixture, fails)
{
    int got = 41;
    cr_assert_eq(got, 42, "the answer was %d", got);
}
C
cat >"$tmp/reported.c" <<'C'
#include <criterion/criterion.h>
#include <stdio.h>
/* Passes for Criterion; the line is what a sanitizer prints in a forked test child. */
Test(fixture, passes_with_a_report)
{
    fprintf(stderr, "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\n"
                    "    #0 0x1 in fixture reported.c:9\n"
                    "SUMMARY: AddressSanitizer: heap-use-after-free reported.c:9 in fixture\n");
}
C
cat >"$tmp/clean.c" <<'C'
#include <criterion/criterion.h>
Test(fixture, passes) { cr_assert(1); }
C
cat >"$tmp/flaky.c" <<'C'
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
/* Fails on its third run: a counter in a file beside it. */
Test(fixture, third_run_fails)
{
    const char *path = getenv("FLAKY_COUNTER");
    FILE *f = fopen(path, "a+");
    cr_assert_not_null(f);
    fputc('x', f);
    long n = ftell(f);
    fclose(f);
    cr_assert_neq(n, 3, "run %ld failed", n);
}
C
for f in failing reported clean flaky; do
    cc "$tmp/$f.c" -o "$bins/$f" -lcriterion 2>"$tmp/cc.log" || { cat "$tmp/cc.log"; fail "cc $f.c"; }
done

cd "$tmp" || fail "cd"
out=$("$OLDPWD/tests/run-suites.sh" fix "$bins/failing" "$bins/clean" 2>&1) &&
    { echo "$out"; fail "a failing suite passed"; }
echo "$out" | grep -q 'failing.c:[0-9]*: Assertion Failed' ||
    { echo "$out"; fail "no file:line of the failing assertion"; }
echo "$out" | grep -q 'the answer was 41' || { echo "$out"; fail "no message of the failing assertion"; }
echo "$out" | grep -q '\[FAIL\] fixture::fails' || { echo "$out"; fail "no [FAIL] line"; }
# The failure comes before the deliberate abort's line.
[ "$(echo "$out" | grep -n 'the answer was 41' | cut -d: -f1)" -lt \
    "$(echo "$out" | grep -n 'impossible state: on purpose' | cut -d: -f1)" ] ||
    { echo "$out"; fail "the impossible-state line comes first"; }
echo "$out" | grep -q '^tests (fix): 3 passed, 1 failed$' || { echo "$out"; fail "closing line"; }

out=$("$OLDPWD/tests/run-suites.sh" fix "$bins/reported" 2>&1) &&
    { echo "$out"; fail "a suite with a sanitizer report passed"; }
echo "$out" | grep -q 'FAILED (a sanitizer report)' || { echo "$out"; fail "no reason given"; }
echo "$out" | grep -q 'SUMMARY: AddressSanitizer' || { echo "$out"; fail "the report is not shown"; }

out=$("$OLDPWD/tests/run-suites.sh" fix "$bins/clean" 2>&1) || { echo "$out"; fail "a clean suite failed"; }

out=$(FLAKY_COUNTER=$tmp/counter "$OLDPWD/tests/run-suites.sh" --repeat 5 fix "$bins/flaky" "$bins/clean" 2>&1) &&
    { echo "$out"; fail "a suite failing its third run passed"; }
echo "$out" | grep -q 'flaky .*FAILED (run 3 of 5' || { echo "$out"; fail "the failing run is not named"; }
echo "$out" | grep -q 'run 3 failed' || { echo "$out"; fail "no message of the failing run"; }
echo "$out" | grep -q 'clean .*5 runs passed' || { echo "$out"; fail "the clean suite did not run 5 times"; }
[ "$(wc -c <"$tmp/counter")" -eq 3 ] || fail "the flaky suite ran on after its failing run"
echo "tests/run-suites.sh OK"
