#!/usr/bin/env bash
# Every public function has a documentation comment: in the public headers, each function
# declared at file scope (a prototype, or a static inline definition) stands in a paragraph
# (lines between blank lines) that holds a comment, or has one on its own line. A comment may
# document a few declarations that follow it without a blank line (mp_tcp_set_nodelay,
# mp_tcp_set_keepalive and mp_tcp_set_buffers share one). Prints FILE:LINE: name for each
# undocumented one and exits 1; 0 when every one is documented.
#
# Usage: tests/lint/check-docs.sh [HEADER...]   (default: runtime/include/*.h)
set -u
[ $# -eq 0 ] && set -- runtime/include/*.h
awk '
    function flush(   i) {
        if (!para_comment)
            for (i = 1; i <= nfn; i++)
                printf "%s:%d: %s() has no documentation comment\n", FILENAME_AT[i], LINE_AT[i], NAME_AT[i]
        nfn = 0; para_comment = 0
    }
    FNR == 1 { flush(); incomment = 0; depth = 0; incpp = 0 }
    # extern "C" { ... } for C++ readers: its braces are no scope.
    /^#ifdef __cplusplus/ { incpp = 1; next }
    incpp { if ($0 ~ /^#endif/) incpp = 0; next }
    {
        line = $0; code = ""; has_comment = incomment
        # Split the line into code and comment parts.
        while (length(line) > 0) {
            if (incomment) {
                e = index(line, "*/")
                if (e == 0) { line = ""; break }
                line = substr(line, e + 2); incomment = 0
            } else {
                s = index(line, "/*"); d = index(line, "//")
                if (d > 0 && (s == 0 || d < s)) { code = code substr(line, 1, d - 1); has_comment = 1; line = ""; break }
                if (s == 0) { code = code line; line = ""; break }
                code = code substr(line, 1, s - 1); has_comment = 1
                line = substr(line, s + 2); incomment = 1
            }
        }
        if ($0 ~ /^[ \t]*$/ && depth == 0) { flush(); next }
        if (has_comment && depth == 0) para_comment = 1
        if (depth == 0 && code !~ /^[ \t]*#/ &&
            match(code, /^[ \t]*(static[ \t]+inline[ \t]+)?[A-Za-z_][A-Za-z0-9_ \t]*[ \t*]+mp_[a-z0-9_]+\(/)) {
            name = substr(code, 1, RLENGTH - 1); sub(/.*[ \t*]/, "", name)
            if (has_comment) para_comment = 1
            nfn++; NAME_AT[nfn] = name; LINE_AT[nfn] = FNR; FILENAME_AT[nfn] = FILENAME
        }
        n = gsub(/\{/, "{", code); m = gsub(/\}/, "}", code); depth += n - m
    }
    END { flush() }
' "$@" | { out=$(cat); [ -z "$out" ] && exit 0; printf '%s\n' "$out"; exit 1; }
