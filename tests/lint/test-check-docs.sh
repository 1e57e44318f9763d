#!/usr/bin/env bash
# check-docs.sh must fail, naming FILE:LINE and the function, on each public declaration that
# has no documentation comment, and pass the documented ones (tests/lint/fixtures/docs.h).
set -u
here=$(cd "$(dirname "$0")" && pwd)
fixture=$here/fixtures/docs.h
out=$("$here/check-docs.sh" "$fixture")
rc=$?
fail() {
    echo "test-check-docs: $*" >&2
    printf '%s\n' "$out" >&2
    exit 1
}
[ "$rc" -eq 1 ] || fail "exit $rc on undocumented declarations, not 1"
grep -qF "$fixture:15: mp_fixture_bare() has no documentation comment" <<<"$out" ||
    fail "missed mp_fixture_bare() at line 15"
grep -qF "$fixture:23: mp_fixture_inline_bare() has no documentation comment" <<<"$out" ||
    fail "missed mp_fixture_inline_bare() at line 23"
[ "$(grep -c . <<<"$out")" -eq 2 ] || fail "reported other than the two undocumented ones"
echo "check-docs: an undocumented public function fails with FILE:LINE (fixture passed)"
