#!/usr/bin/env bash
# Would the unit's seccomp filter let magpied run? Run MAGPIED under strace -f through a short
# life (start, notify and watchdog, HTTP requests incl. /metrics, an echo exchange, SIGHUP,
# SIGUSR1, SIGTERM), then
# check every system call it made against the unit's SystemCallFilter= lines, with the groups
# expanded by `systemd-analyze syscall-filter`, and every socket family against
# RestrictAddressFamilies=. Prints what the filter would refuse; exit 0 when nothing.
#
# Usage: tests/systemd/syscalls.sh MAGPIED UNIT_FILE
set -u
magpied=$1 unit=$2
tmp=$(mktemp -d /tmp/magpie-syscalls.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# "@group" -> its system calls, recursively; a plain name -> itself.
expand() {
    local s
    for s in "$@"; do
        case $s in
        @*) systemd-analyze syscall-filter "$s" | sed -n '2,$p' | sed 's/^ *//' |
                grep -v -e '^#' -e '^$' | while read -r x; do expand "$x"; done ;;
        *) printf '%s\n' "${s%%:*}" ;;
        esac
    done
}
allow=() deny=()
while IFS= read -r line; do
    v=${line#SystemCallFilter=}
    if [ "${v#\~}" != "$v" ]; then read -ra w <<<"${v#\~}"; deny+=("${w[@]}")
    else read -ra w <<<"$v"; allow+=("${w[@]}"); fi
done < <(grep '^SystemCallFilter=' "$unit")
[ ${#allow[@]} -gt 0 ] || { echo "$unit: no SystemCallFilter= allow list"; exit 1; }
expand "${allow[@]}" | sort -u >"$tmp/allow"
expand "${deny[@]}" | sort -u >"$tmp/deny"
families=$(sed -n 's/^RestrictAddressFamilies=//p' "$unit")

# LeakSanitizer cannot run under ptrace (an ASan build); leaks are the daemon suites' business.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
# magpied's pid is the shell's: it execs.
# A NOTIFY_SOCKET nobody listens on still makes magpied go through its notify calls, and
# WATCHDOG_USEC its watchdog task's.
NOTIFY_SOCKET=$tmp/notify WATCHDOG_USEC=200000 \
    strace -f -qq -o "$tmp/trace" sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$tmp/pid" \
    "$magpied" -c config/magpied.conf --set http.listen=127.0.0.1:0 \
    --set echo.listen=127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
tracer=$!
for _ in $(seq 100); do grep -q listening "$tmp/out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*http=[^ ]*:\([0-9]*\).*/\1/p' "$tmp/out")
eport=$(sed -n 's/.*echo=[^ ]*:\([0-9]*\).*/\1/p' "$tmp/out")
pid=$(cat "$tmp/pid" 2>/dev/null)
if [ -z "$port" ] || [ -z "$eport" ] || [ -z "$pid" ]; then
    echo "magpied did not start:"; cat "$tmp/out" "$tmp/err"; kill "$tracer" 2>/dev/null; exit 1
fi
for path in / /metrics /healthz /nope; do curl -sS -o /dev/null "http://127.0.0.1:$port$path"; done
curl -sS -o /dev/null -d hello "http://127.0.0.1:$port/echo"
exec 3<>"/dev/tcp/127.0.0.1/$eport" && printf 'ping\n' >&3 && timeout 5 head -c 5 <&3 >/dev/null
exec 3>&-
kill -HUP "$pid"; sleep 0.3
curl -sS -o /dev/null "http://127.0.0.1:$port/"
kill -USR1 "$pid"; sleep 0.3
kill -TERM "$pid"
wait "$tracer"
rc=$?
[ "$rc" -eq 0 ] || { echo "magpied exited $rc:"; cat "$tmp/err"; exit 1; }

# strace lines: "PID name(args) = ..."; resumed and signal lines are skipped. The calls before
# magpied's execve are sh's, and systemd installs the filter before that execve.
bad=0
start=$(grep -n "execve(\"$magpied\"" "$tmp/trace" | head -1 | cut -d: -f1)
tail -n +"${start:-1}" "$tmp/trace" | awk '$2 ~ /^[a-z_0-9]+\(/ { sub(/\(.*/, "", $2); print $2 }' |
    sort -u | grep -vx execve >"$tmp/used"
for s in $(cat "$tmp/used"); do
    grep -qx "$s" "$tmp/allow" || { echo "not in the allow list: $s"; bad=1; }
    grep -qx "$s" "$tmp/deny" && { echo "denied: $s"; bad=1; }
done
for f in $(grep -o 'socket(AF_[A-Z0-9]*' "$tmp/trace" | sort -u | sed 's/socket(//'); do
    case " $families " in *" $f "*) ;; *) echo "socket family not allowed: $f"; bad=1 ;; esac
done
[ "$bad" -eq 0 ] && echo "$(wc -l <"$tmp/used") system calls, all allowed by $unit"
exit "$bad"
