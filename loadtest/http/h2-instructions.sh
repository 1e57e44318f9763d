#!/usr/bin/env bash
# loadtest/http/h2-instructions.sh: magpied's user-space instructions per static-file request
# over HTTP/2 (h2c by prior knowledge) and, for comparison, over HTTP/1.1, under callgrind.
#
#   loadtest/http/h2-instructions.sh              (MAGPIED=path, else build/release/magpied)
#   REQUESTS=40000 SCENARIOS="a h1" loadtest/http/h2-instructions.sh
#
# magpied with one worker, the access log and the echo listener off, one static route over a
# scratch folder with h2-compare.sh's files, under valgrind --tool=callgrind. Per scenario: a
# warm-up, the counters zeroed (callgrind_control -z), a fixed number of requests by h2load
# (-n), the counters dumped (-d); the load window's instructions divided by the requests that
# succeeded. A fixed request count and one worker make the figure repeat to within a few per
# cent on a machine shared with builds, where wall-clock ratios do not. Scenarios:
#   a   1 KiB file, h2load -c 16 -m 10            (h2-compare.sh's a, fewer connections)
#   b   64 KiB file, h2load -c 4 -m 10
#   c   1 KiB file, h2load -c 1 -m 100
#   h1  1 KiB file over HTTP/1.1 keep-alive, h2load --h1 -c 16
# Prints one Markdown table and each scenario's TOP functions; the profiles stay in the
# scratch folder named at the end. Every process it starts it stops by its PID.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MAGPIED=${MAGPIED:-$ROOT/build/release/magpied}
REQUESTS=${REQUESTS:-20000}
SCENARIOS=${SCENARIOS:-a b c h1}
TOP=${TOP:-15}
PROG=h2-instructions.sh
STOP_WAIT=20 # lib.sh's stop_pid: valgrind writes its profile at exit
RUN=$(mktemp -d /tmp/h2-insn-XXXXXX)

log() { echo "$PROG: $*" >&2; }
die() {
    log "$*"
    exit 1
}
# shellcheck source=lib.sh
source "$HERE/lib.sh"

for tool in valgrind callgrind_control callgrind_annotate h2load curl; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done
[[ -x $MAGPIED ]] || die "no magpied at $MAGPIED (make, or MAGPIED=path)"

cleanup() {
    if [[ -n $SRV_PID ]]; then stop_pid "$SRV_PID"; fi
}
trap cleanup EXIT

mkdir -p "$RUN/www"
head -c 1024 /dev/zero | tr '\0' 'a' >"$RUN/www/1k.txt"
head -c 65536 /dev/zero | tr '\0' 'b' >"$RUN/www/64k.txt"

declare -A PATH_OF=([a]=/1k.txt [b]=/64k.txt [c]=/1k.txt [h1]=/1k.txt)
declare -A ARGS_OF=([a]="-c 16 -m 10" [b]="-c 4 -m 10" [c]="-c 1 -m 100" [h1]="--h1 -c 16 -m 1")
declare -A N_OF=([a]=$REQUESTS [b]=$((REQUESTS / 5)) [c]=$REQUESTS [h1]=$REQUESTS)
declare -A REQ IR

PORT=$(free_port)
cat >"$RUN/magpied.conf" <<EOF
[http]
listen = 127.0.0.1:$PORT
http2 = on
[echo]
listen =
[runtime]
workers = 1
[log]
access_log = off
[route /]
handler = static
root = $RUN/www
EOF
9>&- valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$RUN/cg.%p" \
    "$MAGPIED" -c "$RUN/magpied.conf" >"$RUN/magpied.log" 2>&1 </dev/null &
SRV_PID=$!
for ((i = 0; i < 300; i++)); do
    kill -0 "$SRV_PID" 2>/dev/null || { tail "$RUN/magpied.log" >&2; die "magpied exited"; }
    curl -s -o /dev/null -m 2 --http2-prior-knowledge "http://127.0.0.1:$PORT/1k.txt" && break
    sleep 0.2
done
log "$(date -u '+%F %T') UTC; load average $(cut -d' ' -f1-3 /proc/loadavg); $MAGPIED"
9>&- h2load -n 4000 -c 16 -m 10 "http://127.0.0.1:$PORT/1k.txt" >/dev/null 2>&1 || true
9>&- h2load -n 400 -c 4 -m 10 "http://127.0.0.1:$PORT/64k.txt" >/dev/null 2>&1 || true
dumps=0
for s in $SCENARIOS; do
    callgrind_control -z "$SRV_PID" >/dev/null 2>&1
    # shellcheck disable=SC2086 # ARGS_OF holds several options
    out=$(9>&- timeout 600 h2load -n "${N_OF[$s]}" ${ARGS_OF[$s]} \
        "http://127.0.0.1:$PORT${PATH_OF[$s]}" 2>&1) || true
    callgrind_control -d "$SRV_PID" >/dev/null 2>&1
    dumps=$((dumps + 1))
    dump="$RUN/cg.$SRV_PID.$dumps"
    [[ -f $dump ]] || die "no callgrind dump for $s"
    mv "$dump" "$RUN/$s.cg"
    REQ[$s]=$(awk '/^requests:/ {print $8}' <<<"$out")
    IR[$s]=$(awk '/^summary:/ {print $2}' "$RUN/$s.cg")
    log "$s: ${REQ[$s]} requests, ${IR[$s]} instructions"
done
stop_pid "$SRV_PID"
SRV_PID=

echo "| scenario | h2load | requests | instructions/request |"
echo "|---|---|---:|---:|"
for s in $SCENARIOS; do
    awk -v s="$s" -v a="${ARGS_OF[$s]} ${PATH_OF[$s]}" -v r="${REQ[$s]}" -v i="${IR[$s]}" \
        'BEGIN { printf "| %s | %s | %d | %.0f |\n", s, a, r, (r > 0 ? i / r : 0) }'
done
for s in $SCENARIOS; do
    echo
    echo "$s: instructions per request by function (exclusive), top $TOP"
    callgrind_annotate --threshold=100 --inclusive=no "$RUN/$s.cg" 2>/dev/null |
        awk -v r="${REQ[$s]}" -v n="$TOP" -v total="${IR[$s]}" '
        match($0, /^ *[0-9,]+ +\( *[0-9.]+%\) +/) {
            ir = $1; gsub(",", "", ir)
            if (ir + 0 >= total * 0.999) next
            f = substr($0, RLENGTH + 1); sub(/ \[.*/, "", f); sub(/.*\//, "", f)
            if (shown++ < n) printf "%8.1f  %s\n", ir / r, f
        }'
done
log "profiles: $RUN/<scenario>.cg (callgrind_annotate --inclusive=no FILE)"
