#!/usr/bin/env bash
# check-refs.sh must fail, naming FILE:LINE, on a reference to a name the tree lacks, and
# pass the ones that resolve (tests/lint/fixtures/refs.c).
set -u
here=$(cd "$(dirname "$0")" && pwd)
fixture=$here/fixtures/refs.c
out=$("$here/check-refs.sh" "$fixture")
rc=$?
fail() {
    echo "test-check-refs: $*" >&2
    printf '%s\n' "$out" >&2
    exit 1
}
[ "$rc" -eq 1 ] || fail "exit $rc on dangling references, not 1"
grep -qF "$fixture:17: vanished_function()" <<<"$out" || fail "missed vanished_function() at line 17"
grep -qF "$fixture:18: gone_helper()" <<<"$out" || fail "missed gone_helper() at line 18"
[ "$(grep -c . <<<"$out")" -eq 2 ] || fail "reported more than the two dangling names"
echo "check-refs: a dangling reference fails with FILE:LINE (fixture passed)"

# A "pairs with" split over two lines fails too, naming the line it starts on.
split=$here/fixtures/split.c
out=$("$here/check-refs.sh" "$split")
rc=$?
[ "$rc" -eq 1 ] || fail "exit $rc on a split \"pairs with\", not 1"
grep -qF "$split:7: \"pairs with\" split over two lines" <<<"$out" || fail "missed the split at line 7"
[ "$(grep -c . <<<"$out")" -eq 1 ] || fail "reported more than the one split"
echo "check-refs: a \"pairs with\" split over two lines fails with FILE:LINE (fixture passed)"
