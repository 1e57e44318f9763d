#!/usr/bin/env bash
# The first command on a fresh machine, `make run`, replayed without touching the machine's
# packages. On a fresh machine the llhttp sources and header appear while make runs: its
# install step puts them there. Here a copy of the working tree builds with LLHTTP_DIR and
# LLHTTP_INC_DIR naming empty folders, and with DEPS (the install step) replaced by a script
# that fills them as `apt-get install node-llhttp` would, then runs the real .ci/deps.sh.
# In one invocation, `make run` must then build everything, start magpied and answer curl.
#
# Also: a plain `make` never runs the install step, and stops at once, naming the packages,
# when one it builds from is missing.
#
# Usage: tests/systemd/first-run.sh   (from the repository root)
set -u
tmp=$(mktemp -d /tmp/magpie-first-run.XXXXXX)
pgid=
cleanup() {
    [ -n "$pgid" ] && kill -TERM -- "-$pgid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Not the jobserver nor the variables of the make that runs the tests.
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory "$@"; }

# The working tree as it is (committed or not), without build outputs.
src=$tmp/src
mkdir "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$src" ||
        fail "copying the tree"
else
    tar --exclude=./build -cf - . | tar -xf - -C "$src" || fail "copying the tree"
fi

# What node-llhttp puts in place, in folders empty until the install step runs.
mkdir "$tmp/llhttp" "$tmp/llhttp-include"
cat >"$tmp/deps.sh" <<EOF
#!/bin/sh
if [ "\$1" != --missing ]; then
    echo "\$*" >>"$tmp/deps.log"
    cp /usr/share/llhttp/*.c "$tmp/llhttp/" &&
        cp /usr/share/include/llhttp/llhttp.h "$tmp/llhttp-include/" || exit 1
fi
exec "$src/.ci/deps.sh" "\$@"
EOF
chmod +x "$tmp/deps.sh"
[ -z "$(ls -A "$tmp/llhttp")" ] || fail "llhttp folder not empty before make"

# make run, in a process group of its own so that the daemon it starts can be stopped with it.
# (A background job of a script is no group leader, so setsid makes it one without forking.)
(cd "$src" && exec setsid env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory run \
    LLHTTP_DIR="$tmp/llhttp" LLHTTP_INC_DIR="$tmp/llhttp-include" DEPS="$tmp/deps.sh" \
    RUN_ARGS="--set http.listen=127.0.0.1:0 --set echo.listen=127.0.0.1:0" \
    </dev/null >"$tmp/run.log" 2>&1) &
pid=$!
pgid=$pid
port=
for _ in $(seq 1800); do # the whole build: up to 180 s on a busy machine
    # magpied's stdout and stderr are one file here: the log's "started: listening" line.
    port=$(sed -n 's/.*listening http=127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$tmp/run.log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || { tail -40 "$tmp/run.log"; fail "make run did not start magpied"; }
body=$(curl -s --max-time 10 "http://127.0.0.1:$port/") || fail "curl 127.0.0.1:$port/ failed"
[ "$body" = "Hello, World!" ] || fail "GET / answered '$body'"
kill -TERM -- "-$pgid"
wait "$pid"
pgid=
grep -q "No rule to make target" "$tmp/run.log" && { cat "$tmp/run.log"; fail "make run"; }
[ "$(wc -l <"$tmp/deps.log")" -eq 1 ] || { cat "$tmp/deps.log"; fail "the install step ran $(wc -l <"$tmp/deps.log") times"; }
[ -f "$tmp/llhttp/api.c" ] || fail "the install step did not fill the llhttp folder"
echo "make run: built with llhttp from the install step, answered on port $port"

# A plain make installs nothing: with everything built it does nothing at all...
rm -f "$tmp/deps.log"
(cd "$src" && mk LLHTTP_DIR="$tmp/llhttp" LLHTTP_INC_DIR="$tmp/llhttp-include" \
    DEPS="$tmp/deps.sh" >"$tmp/make.log" 2>&1) || { cat "$tmp/make.log"; fail "plain make"; }
[ ! -e "$tmp/deps.log" ] || fail "plain make ran the install step"
# ...and with a package missing it stops before building, naming it and `make deps`.
cat >"$tmp/missing.sh" <<EOF
#!/bin/sh
[ "\$1" = --missing ] && { echo node-llhttp; exit 0; }
echo "\$*" >>"$tmp/deps.log"
EOF
chmod +x "$tmp/missing.sh"
rm -rf "$src/build"
(cd "$src" && mk DEPS="$tmp/missing.sh" >"$tmp/make.log" 2>&1) && fail "make with node-llhttp missing succeeded"
grep -q 'missing Debian packages: node-llhttp.*`make deps`' "$tmp/make.log" ||
    { cat "$tmp/make.log"; fail "make with node-llhttp missing did not say so"; }
[ ! -e "$tmp/deps.log" ] || fail "plain make ran the install step"
[ ! -d "$src/build" ] || fail "plain make built something with a package missing"
echo "plain make: installs nothing; names what is missing"
