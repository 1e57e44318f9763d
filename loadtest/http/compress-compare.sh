#!/usr/bin/env bash
# loadtest/http/compress-compare.sh: gzip on the fly, magpied against nginx's gzip module.
#
#   loadtest/http/compress-compare.sh                  levels 1 and 6, 10 s runs, 2 rounds
#   ROUNDS=1 DURATION=3 loadtest/http/compress-compare.sh     a smoke run
#
# Both serve the same 64 KiB text file (text/plain: the repository's documentation, cut to
# 65536 bytes), one worker each, compressed with gzip at the same level (magpied's
# compress_level_gzip, nginx's gzip_comp_level), min length 512, to
#   wrk -t1 -c64 -dDURATION -H 'Accept-Encoding: gzip'
# Rounds are interleaved (round 1: every level, magpied then nginx; round 2 the other way
# round). Per run: req/s from wrk, the server's CPU per request (utime+stime of its process
# tree from /proc/PID/stat before and after, over the requests wrk completed), and the coded
# size of one response (checked to be gzip before the run). Every process it starts it
# stops by its PID, also on Ctrl-C; everything it writes is under a mktemp folder.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
LEVELS=${LEVELS:-1 6}
CONNS=${CONNS:-64}
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
NGINX=${NGINX:-/usr/sbin/nginx}
CLK_TCK=$(getconf CLK_TCK)

log() { echo "compress-compare: $*" >&2; }
die() {
    log "$*"
    exit 1
}
PROG=compress-compare.sh
# free_port and cpu_ticks
# shellcheck source=loadtest/http/lib.sh
source "$HERE/lib.sh"
[[ -x $MAGPIED ]] || die "no $MAGPIED (make -j2 build/release/magpied)"
[[ -x $NGINX ]] || die "no $NGINX (apt-get install nginx-light)"
command -v wrk >/dev/null || die "no wrk"

RUN=$(mktemp -d /tmp/compress-compare.XXXXXX)
chmod 755 "$RUN"
SRV_PID=
cleanup() {
    if [[ -n $SRV_PID ]]; then
        kill "$SRV_PID" 2>/dev/null || true
        wait "$SRV_PID" 2>/dev/null || true
    fi
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$RUN/www"
cat "$ROOT"/daemon/README.md "$ROOT"/runtime/*.md "$ROOT"/loadtest/README.md >"$RUN/all.txt"
head -c 65536 "$RUN/all.txt" >"$RUN/www/64k.txt"
[[ $(stat -c %s "$RUN/www/64k.txt") == 65536 ]] || die "could not make a 64 KiB text file"

start() { # SERVER LEVEL: sets SRV_PID and PORT
    PORT=$(free_port)
    case $1 in
    magpied)
        cat >"$RUN/magpied.conf" <<EOF
[http]
listen = 127.0.0.1:$PORT
[echo]
listen =
[runtime]
workers = 1
[route /]
handler = static
root = $RUN/www
compress = gzip
compress_level_gzip = $2
compress_min_length = 512
compress_types = text/plain
EOF
        "$MAGPIED" -c "$RUN/magpied.conf" >"$RUN/magpied.out" 2>"$RUN/magpied.err" 9>&- &
        ;;
    nginx)
        cat >"$RUN/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    server_tokens off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    client_body_temp_path $RUN/client_body;
    proxy_temp_path $RUN/proxy;
    fastcgi_temp_path $RUN/fastcgi;
    uwsgi_temp_path $RUN/uwsgi;
    scgi_temp_path $RUN/scgi;
    types { text/plain txt; }
    server {
        listen 127.0.0.1:$PORT backlog=1024;
        root $RUN/www;
        open_file_cache max=1000 inactive=20s;
        gzip on;
        gzip_comp_level $2;
        gzip_types text/plain;
        gzip_min_length 512;
        gzip_vary on;
    }
}
EOF
        "$NGINX" -p "$RUN/" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" 9>&- &
        ;;
    esac
    SRV_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        curl -s -o /dev/null "http://127.0.0.1:$PORT/64k.txt" && return 0
        sleep 0.1
    done
    die "$1 did not start"
}

stop() {
    kill "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
    SRV_PID=
}

RESULTS=$RUN/results
: >"$RESULTS"
measure() { # SERVER LEVEL ROUND
    start "$1" "$2"
    local url="http://127.0.0.1:$PORT/64k.txt" ce size
    ce=$(curl -s -D - -o "$RUN/one.gz" -H 'Accept-Encoding: gzip' "$url" |
        tr -d '\r' | awk -F': ' 'tolower($1) == "content-encoding" { print $2 }')
    [[ $ce == gzip ]] || die "$1 did not answer gzip (Content-Encoding: '$ce')"
    gzip -dc "$RUN/one.gz" | cmp -s - "$RUN/www/64k.txt" || die "$1's gzip body does not decode to the file"
    size=$(stat -c %s "$RUN/one.gz")
    wrk -t1 -c"$CONNS" -d1s -H 'Accept-Encoding: gzip' "$url" >/dev/null 2>&1 9>&- # warm-up
    local t0 t1 out reqs rps
    t0=$(cpu_ticks "$SRV_PID")
    out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" -H 'Accept-Encoding: gzip' "$url" 9>&-)
    t1=$(cpu_ticks "$SRV_PID")
    reqs=$(awk '/requests in/ { print $1 }' <<<"$out")
    rps=$(awk '/^Requests\/sec/ { print $2 }' <<<"$out")
    grep -q "Non-2xx" <<<"$out" && die "$1: non-2xx responses: $out"
    local us
    us=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
    echo "$1 $2 $3 $rps $us $size" >>"$RESULTS"
    log "round $3 level $2 $1: $rps req/s, $us us CPU/req, $size bytes/response"
    stop
}

for ((round = 1; round <= ROUNDS; round++)); do
    for level in $LEVELS; do
        if ((round % 2 == 1)); then order="magpied nginx"; else order="nginx magpied"; fi
        for s in $order; do measure "$s" "$level" "$round"; done
    done
done

echo
echo "gzip on the fly, 64 KiB text/plain, wrk -t1 -c$CONNS -d${DURATION}s, $ROUNDS round(s), medians; $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo
echo "| level | magpied req/s | nginx req/s | ratio | magpied CPU µs/req | nginx CPU µs/req | ratio | bytes (magpied / nginx) |"
echo "|---|---|---|---|---|---|---|---|"
for level in $LEVELS; do
    med() { # SERVER FIELD
        awk -v s="$1" -v l="$level" -v f="$2" '$1 == s && $2 == l { print $f }' "$RESULTS" |
            sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    }
    mr=$(med magpied 4) nr=$(med nginx 4) mc=$(med magpied 5) nc=$(med nginx 5)
    ms=$(med magpied 6) ns=$(med nginx 6)
    awk -v l="$level" -v mr="$mr" -v nr="$nr" -v mc="$mc" -v nc="$nc" -v ms="$ms" -v ns="$ns" \
        'BEGIN { printf "| %s | %.0f | %.0f | %.2f× | %.1f | %.1f | %.2f× | %d / %d |\n", l, mr, nr, mr / nr, mc, nc, mc / nc, ms, ns }'
done
