#!/usr/bin/env bash
# Comments that send the reader elsewhere must name something that exists: every "pairs with
# f()", "paired with ... f()", "see f()" (and "pairs with the X in f()") in a comment of the
# C sources names a function or macro defined or declared in the tree. Prints FILE:LINE: name
# for each dangling one and exits 1; 0 when every reference resolves.
#
# Usage: tests/lint/check-refs.sh [FILE_OR_DIR...]   (default: runtime daemon tests loadtest)
# A definition is a line of the files checked that does not start as a comment and has the
# name at the start of a declarator ("int f(", "static void f(", "#define F(", "#define F "),
# or a name listed in tests/lint/external-refs.txt (functions of the libraries the tree
# calls, such as uv_run, when a comment names one). Set CHECK_REFS_LIST=1 to print every
# reference found.
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 0 ] && set -- runtime daemon tests loadtest
# Folders named fixtures hold deliberate mistakes (tests/lint/fixtures/): skipped unless a
# file in them is named.
mapfile -t files < <(find "$@" -type d -name fixtures -prune -o \
    -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) -print | sort)
[ ${#files[@]} -eq 0 ] && { echo "check-refs: no C sources under $*" >&2; exit 2; }

# The references: the first "name()" within a sentence after a trigger phrase, comments
# joined across lines so that "pairs with the acquire in\n * f()" is found.
refs=$(awk '
    FNR == 1 { incomment = 0 }
    {
        line = $0; text = ""
        # Keep the comment parts of the line only.
        while (length(line) > 0) {
            if (incomment) {
                e = index(line, "*/")
                if (e == 0) { text = text " " line; line = "" }
                else { text = text " " substr(line, 1, e - 1); line = substr(line, e + 2); incomment = 0 }
            } else {
                s = index(line, "/*"); d = index(line, "//")
                if (d > 0 && (s == 0 || d < s)) { text = text " " substr(line, d + 2); line = "" }
                else if (s > 0) { line = substr(line, s + 2); incomment = 1 }
                else line = ""
            }
        }
        gsub(/^[ \t]*\*+/, " ", text)
        # A pending reference from the previous lines continues here.
        if (pending != "") {
            buf = pending " " text
            pending = ""
            # Only a comment that goes on carries a sentence over.
            if (text !~ /^[ \t]*$/) {
                r = resolve(buf, FILENAME, FNR)
                if (r != "") pending = r
            }
        }
        scan(text, FILENAME, FNR)
    }
    # Print every name() of the sentence that starts at s (it ends at ". ", "; " or ": ").
    # Returns the rest to carry to the next comment line, or "" when the sentence ended.
    function resolve(s, f, l,    pre) {
        while (match(s, /[A-Za-z_][A-Za-z0-9_]*\(\)/)) {
            pre = substr(s, 1, RSTART - 1)
            if (pre ~ /(\. |; |: )/)
                return ""
            print f ":" l ": " substr(s, RSTART, RLENGTH - 2)
            s = substr(s, RSTART + RLENGTH)
        }
        if (s ~ /(\. |; |: |\.[ \t]*$|;[ \t]*$)/ || length(s) > 200)
            return ""
        return s
    }
    function scan(t, f, l,    rest, r) {
        rest = t
        while (match(rest, /(^|[^A-Za-z])([Pp]airs? with|[Pp]aired with|[Ss]ee)[ \t]/)) {
            rest = substr(rest, RSTART + RLENGTH)
            r = resolve(rest, f, l)
            if (r != "") pending = r
        }
    }
' "${files[@]}")

# The phrase itself must not be split ("pairs\n * with f()"): a reader searching for "pairs
# with" would miss it. FILE:LINE names the line where the phrase starts.
split=$(awk '
    FNR == 1 { tail = 0 }
    {
        text = $0
        sub(/^[ \t]*(\/\*+|\*+|\/\/)?/, "", text)
        if (tail && text ~ /^[ \t]*with([ \t]|$)/)
            print FILENAME ":" (FNR - 1) ": \"pairs with\" split over two lines"
        tail = $0 ~ /(^|[^A-Za-z])([Pp]airs?|[Pp]aired)[ \t]*$/
    }
' "${files[@]}")

# Files whose splits predate the check, listed in split-known.txt until their owners rejoin
# the phrase (then the line goes): reported, not failed.
known=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/split-known.txt" 2>/dev/null)
if [ -n "$split" ] && [ -n "$known" ]; then
    while IFS= read -r f; do
        split=$(grep -vF -- "$f:" <<<"$split")
    done <<<"$known"
fi
split_bad=0
if [ -n "$split" ]; then
    printf "%s\n" "$split"
    split_bad=1
fi

[ -z "$refs" ] && exit $split_bad
[ -n "${CHECK_REFS_LIST:-}" ] && printf "%s\n" "$refs"

# The names the tree defines or declares.
defined=$(sed -nE \
    -e 's/^#[[:space:]]*define[[:space:]]+([A-Za-z_][A-Za-z0-9_]*).*/\1/p' \
    -e '/^[[:space:]]*(\/\*|\*|\/\/)/d' \
    -e 's/^[A-Za-z_][A-Za-z0-9_ \*]*[ \*]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p' \
    "${files[@]}" | sort -u)
external=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/external-refs.txt" 2>/dev/null)

bad=0
while IFS= read -r ref; do
    name=${ref##*: }
    if ! grep -qxF -- "$name" <<<"$defined" && ! grep -qxF -- "$name" <<<"$external"; then
        echo "$ref(): no such function or macro in the tree"
        bad=1
    fi
done <<<"$refs"
[ $split_bad -eq 1 ] && bad=1
exit $bad
