#!/usr/bin/env bash
# libmagpie's reference as man pages, generated from the public headers' comments: one page
# per group of functions (runtime/doc/pages.txt), holding every paragraph of the headers (a
# comment and the declarations under it, as written) that declares one of its functions, with
# the type and introduction paragraphs just before it; and a page per function that points to
# its group's (.so), so `man mp_tcp_read_poll` opens mp_tcp(3).
#
# Usage: runtime/doc/gen-man.sh OUTDIR VERSION   write OUTDIR/man3/*.3
#        runtime/doc/gen-man.sh --list           print the pages' file names (for uninstall)
# Fails, naming it, on a public function that no page's names match.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
headers=("$here/../include/magpie_core.h" "$here/../include/magpie_io.h")
pages=$here/pages.txt

# Every public function, "page name" per line, in the headers' order.
functions() {
    awk -v pages="$pages" '
        BEGIN {
            while ((getline l < pages) > 0) {
                if (l ~ /^#/ || l == "") continue
                split(l, f, ";"); np++; page[np] = f[1]; re[np] = f[3]
            }
        }
        /^#ifdef __cplusplus/ { c = 1; next }
        c { if ($0 ~ /^#endif/) c = 0; next }
        /^[ \t]*(static[ \t]+inline[ \t]+)?[A-Za-z_][A-Za-z0-9_ \t]*[ \t*]+mp_[a-z0-9_]+\(/ {
            match($0, /mp_[a-z0-9_]+\(/); name = substr($0, RSTART, RLENGTH - 1)
            for (i = 1; i <= np; i++)
                if (name ~ re[i]) { print page[i], name; next }
            printf "gen-man: %s:%d: %s() is in no page of %s\n", FILENAME, FNR, name, pages > "/dev/stderr"
            bad = 1
        }
        END { exit bad }
    ' "${headers[@]}"
}

list=$(functions)
if [ "${1:-}" = --list ]; then
    { cut -d' ' -f1 <<<"$list" | sort -u; cut -d' ' -f2 <<<"$list"; } | sed 's/$/.3/'
    exit 0
fi
out=${1:?usage: gen-man.sh OUTDIR VERSION}/man3
version=${2:?usage: gen-man.sh OUTDIR VERSION}
mkdir -p "$out"
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)}" +%Y-%m-%d)

# The paragraphs of the headers that belong to one page: those that declare one of its
# functions, each with the paragraphs without functions (types, introductions) before it.
paragraphs() { # PAGE
    awk -v want="$(awk -v p="$1" '$1 == p { print $2 }' <<<"$list" | tr '\n' ' ')" '
        BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) mine[w[i]] = 1 }
        function flush() {
            if (para == "") return
            if (hasmine) { printf "%s%s\n", held, para; held = "" }
            else if (hasfn) held = ""
            else held = held para "\n"
            para = ""; hasmine = 0; hasfn = 0
        }
        FNR == 1 { flush(); held = "" }
        /^#ifdef __cplusplus/ { c = 1; next }
        c { if ($0 ~ /^#endif/) c = 0; next }
        /^#(ifndef|define|endif|include)/ && para == "" { next }
        /^[ \t]*$/ { flush(); next }
        {
            para = para $0 "\n"
            if ($0 ~ /^[ \t]*(static[ \t]+inline[ \t]+)?[A-Za-z_][A-Za-z0-9_ \t]*[ \t*]+mp_[a-z0-9_]+\(/) {
                match($0, /mp_[a-z0-9_]+\(/); name = substr($0, RSTART, RLENGTH - 1)
                hasfn = 1; if (name in mine) hasmine = 1
            }
        }
        END { flush() }
    ' "${headers[@]}"
}

# Text into roff, verbatim: backslashes escaped, no line read as a request.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

while IFS=";" read -r page title _; do
    [[ -z $page || $page == \#* ]] && continue
    {
        printf '.TH %s 3 %s "libmagpie %s" "libmagpie reference"\n' "$(tr a-z A-Z <<<"$page")" "$date" "$version"
        printf '.SH NAME\n%s \\- %s\n' "$page" "$title"
        printf '.SH SYNOPSIS\n.nf\n.B #include <magpie.h>\n.fi\n.PP\n'
        printf 'Link with \\fB$(pkg-config \\-\\-cflags \\-\\-libs magpie)\\fP.\n'
        if [ "$page" = magpie ]; then
            cat "$here/magpie.3.in"
        fi
        printf '.SH DESCRIPTION\n'
        printf 'The declarations below are those of the public headers, each under the comment that\n'
        printf 'documents it, as they stand in magpie_core.h and magpie_io.h.\n'
        printf 'Errors are 0 or a negative code; \\fBmp_strerror\\fP(3) gives the message of each.\n'
        printf '.PP\n.nf\n'
        paragraphs "$page" | roff
        printf '.fi\n.SH SEE ALSO\n'
        others=$(sed -n 's/^\([a-z_]*\);.*/\1/p' "$pages" | grep -vx "$page")
        last=$(tail -1 <<<"$others")
        for o in $others; do
            [ "$o" = "$last" ] && printf '.BR %s (3)\n' "$o" || printf '.BR %s (3),\n' "$o"
        done
    } >"$out/$page.3"
done <"$pages"

# One page per function, pointing to its group's.
while read -r page name; do
    printf '.so man3/%s.3\n' "$page" >"$out/$name.3"
done <<<"$list"
