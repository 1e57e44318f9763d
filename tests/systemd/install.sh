#!/usr/bin/env bash
# `make install` and `make uninstall`, both ways they are used.
#
# A packager's: `make install DESTDIR=... PREFIX=/usr` puts every file in its place, the
# configuration in /etc/magpied/ (SYSCONFDIR is /etc for PREFIX=/usr) where the installed
# magpied's default -c, its man pages and the installed units look for it; the units pass
# `systemd-analyze verify`; the shared library has its SONAME and links.
#
# A user's: `make install PREFIX=$tmp/prefix` (no DESTDIR) writes nothing outside the prefix
# (every file the make and what it runs write is traced with strace: only the prefix, the
# build folder and the compiler's temporary files) and runs no ldconfig; a program including
# magpie.h, built with -std=c11 -pedantic and the flags of the .pc files alone, runs: shared
# (with the .pc file's rpath, no LD_LIBRARY_PATH) and static (no libmagpie.so); its
# MP_VERSION_* is what pkg-config says; `make uninstall` then leaves no file in the prefix.
#
# Usage: tests/systemd/install.sh [SANITIZE]   (the build variant to install; run from the root)
set -u
san=${1:-}
tmp=$(mktemp -d /tmp/magpie-install.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Not the jobserver of the make that runs the tests.
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory "$@" SANITIZE="$san"; }
sanflags=${san:+-fsanitize=$san}
# The version, from the one place it is kept (magpie_core.h), and the SONAME the Makefile derives
# from it: 0.MINOR before 1.0 (any 0.x minor may break the ABI), the major after.
ver() { sed -n "s/^#define MP_VERSION_$1 \([0-9]*\)$/\1/p" runtime/include/magpie_core.h; }
version=$(ver MAJOR).$(ver MINOR).$(ver PATCH) hversion=$version
if [ "$(ver MAJOR)" = 0 ]; then sover=0.$(ver MINOR); else sover=$(ver MAJOR); fi
[ "$version" != .. ] || fail "no MP_VERSION_* in runtime/include/magpie_core.h"
so=libmagpie.so.$sover

# ---- the packager's: DESTDIR, PREFIX=/usr ----
root=$tmp/root prefix=/usr
mk install DESTDIR="$root" PREFIX="$prefix" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; fail "make install DESTDIR"; }
for f in sbin/magpied lib/libmagpie.a lib/libmagpie.so.$version include/magpie.h \
    include/magpie_core.h include/magpie_io.h \
    lib/pkgconfig/magpie.pc lib/pkgconfig/magpie-static.pc share/man/man8/magpied.8 share/man/man5/magpied.conf.5 \
    share/doc/magpied/haproxy.cfg.example lib/systemd/system/magpied.service \
    lib/systemd/system/magpied@.service lib/systemd/system/magpied.socket \
    lib/systemd/system/magpied-echo.socket share/man/man3/magpie.3 share/man/man3/mp_tcp.3 \
    share/man/man3/mp_tcp_read_poll.3 share/doc/magpie/README.md share/doc/magpie/DESIGN.md \
    share/doc/magpie/examples/fan_out.c; do
    [ -f "$root$prefix/$f" ] || fail "missing $prefix/$f"
done
[ -f "$root/etc/magpied/magpied.conf" ] || fail "missing /etc/magpied/magpied.conf"
cmp -s config/magpied.conf "$root/etc/magpied/magpied.conf" || fail "magpied.conf differs"
[ -x "$root$prefix/sbin/magpied" ] || fail "magpied is not executable"
"$root$prefix/sbin/magpied" -h | grep -q '(default /etc/magpied/magpied.conf)' ||
    fail "the installed magpied's default -c is not /etc/magpied/magpied.conf"
[ "$(readlink "$root$prefix/lib/$so")" = "libmagpie.so.$version" ] || fail "$so link"
[ "$(readlink "$root$prefix/lib/libmagpie.so")" = "$so" ] || fail "libmagpie.so link"
soname=$(readelf -d "$root$prefix/lib/libmagpie.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$so" ] || fail "SONAME is '$soname', not $so"
grep -q "^prefix=$prefix\$" "$root$prefix/lib/pkgconfig/magpie.pc" || fail "magpie.pc prefix"
grep -q "^prefix=$prefix\$" "$root$prefix/lib/pkgconfig/magpie-static.pc" || fail "magpie-static.pc prefix"
if nm -D --defined-only "$root$prefix/lib/libmagpie.so.$version" | grep -q ' mp__'; then
    fail "libmagpie.so exports mp__ internals"
fi

# The installed units name the installed binary and configuration; verify them with that path
# moved into the staging root, and with the installed man pages for Documentation=.
mkdir "$tmp/units"
for u in "$root$prefix"/lib/systemd/system/*; do
    grep -q "$prefix/sbin/magpied" "$u" || [ "${u%.socket}" != "$u" ] ||
        fail "$(basename "$u") does not name $prefix/sbin/magpied"
    grep -q "/etc/magpied/magpied.conf" "$u" || [ "${u%.socket}" != "$u" ] ||
        fail "$(basename "$u") does not name /etc/magpied/magpied.conf"
    sed "s|$prefix/sbin/magpied|$root$prefix/sbin/magpied|g" "$u" >"$tmp/units/$(basename "$u")"
done
out=$(cd "$tmp/units" && MANPATH="$root$prefix/share/man" systemd-analyze verify \
    magpied.service magpied@.service magpied.socket magpied-echo.socket 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify of the installed units"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify printed something"; }
grep -q '/etc/magpied/magpied.conf' "$root$prefix/share/man/man8/magpied.8" || fail "magpied.8 path"
# The reference: a function's page opens its group's, from the installed tree.
MANPATH="$root$prefix/share/man" man -P cat mp_tcp_read_poll 2>/dev/null | grep -q 'mp_tcp_read_poll(' ||
    fail "man mp_tcp_read_poll does not show it"
mk uninstall DESTDIR="$root" PREFIX="$prefix" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; fail "make uninstall DESTDIR"; }
left=$(find "$root" -not -type d)
[ -z "$left" ] || fail "make uninstall DESTDIR left: $left"

# ---- the user's: PREFIX alone, traced ----
prefix=$tmp/prefix
mkdir -p "$tmp/bin" "$tmp/cc-tmp"
# An ldconfig first on PATH that says it ran: nothing here may refresh the loader's cache.
printf '#!/bin/sh\necho "$0 $*" >>"%s/ldconfig-ran"\n' "$tmp" >"$tmp/bin/ldconfig"
chmod 755 "$tmp/bin/ldconfig"
# What writes or removes a file, and opens for writing.
calls=creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,rmdir,symlink,symlinkat
calls=$calls,link,linkat,chmod,fchmodat,truncate,utimensat,open,openat
PATH="$tmp/bin:$PATH" TMPDIR="$tmp/cc-tmp" strace -f -qq -o "$tmp/trace" -e trace="$calls" \
    env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory install \
    SANITIZE="$san" PREFIX="$prefix" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; fail "make install PREFIX=$prefix"; }
[ ! -e "$tmp/ldconfig-ran" ] || fail "make install ran $(cat "$tmp/ldconfig-ran")"
[ -f "$prefix/etc/magpied/magpied.conf" ] || fail "missing \$PREFIX/etc/magpied/magpied.conf"
"$prefix/sbin/magpied" -h | grep -q "(default $prefix/etc/magpied/magpied.conf)" ||
    fail "the installed magpied's default -c is not in \$PREFIX/etc"
grep -q "ExecStart=$prefix/sbin/magpied -c $prefix/etc/magpied/magpied.conf" \
    "$prefix/lib/systemd/system/magpied.service" || fail "magpied.service names other paths"
# Every path a writing call named that succeeded: relative ones are under the tree (make runs
# at its root).
here=$(pwd -P)
grep -E '^[0-9]+ +(open|openat)\(' "$tmp/trace" | grep -E 'O_WRONLY|O_RDWR|O_CREAT' >"$tmp/writes"
grep -vE '^[0-9]+ +(open|openat)\(' "$tmp/trace" | grep -E '^[0-9]+ +[a-z0-9]+\("' >>"$tmp/writes"
grep -E '^[0-9]+ +[a-z0-9]+\(AT_FDCWD, "' "$tmp/trace" | grep -vE '^[0-9]+ +openat\(' >>"$tmp/writes"
# A call that failed wrote nothing (mkdir -p tries each folder above the prefix).
grep -vE '\) += -1 E' "$tmp/writes" >"$tmp/writes.ok"
mv "$tmp/writes.ok" "$tmp/writes"
[ -s "$tmp/writes" ] || fail "strace recorded no write (is strace working?)"
outside=$(grep -o '"/[^"]*"' "$tmp/writes" | tr -d '"' | sort -u | while read -r p; do
    case $p in
    "$prefix"/* | "$prefix" | "$here"/* | "$tmp"/cc-tmp/* | /dev/null | /dev/tty) ;;
    *) echo "$p" ;;
    esac
done)
[ -z "$outside" ] || { grep -F "$outside" "$tmp/writes" | head -20; fail "make install wrote outside \$PREFIX: $outside"; }
grep -q "\"$prefix/lib/libmagpie.so.$version\"" "$tmp/writes" || fail "the trace missed the library's install"

# A program of magpie.h, built from the .pc files alone, -std=c11 -pedantic, no feature macro.
cat >"$tmp/hello.c" <<'C'
#include <magpie.h>
#include <stdio.h>

typedef struct hello { mp_task task; int n; } hello;

static mp_poll hello_poll(mp_task *t, mp_context *cx)
{
    hello *h = mp_container_of(t, hello, task);
    if (h->n-- > 0)
        return mp_yield(cx);
    printf("hello from a task, libmagpie %d.%d.%d\n", MP_VERSION_MAJOR, MP_VERSION_MINOR,
           MP_VERSION_PATCH);
    return MP_READY;
}

static const mp_task_vtable hello_vt = {.poll = hello_poll};

int main(void)
{
    mp_runtime *rt;
    if (mp_runtime_new(&rt, NULL) != 0)
        return 1;
    hello h = {.n = 3};
    mp_task_init(&h.task, &hello_vt);
    mp_block_on(rt, &h.task);
    mp_runtime_free(rt);
    return 0;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
version=$(pkg-config --modversion magpie) || fail "pkg-config --modversion magpie"
[ "$version" = "$hversion" ] || fail "magpie.pc says $version, magpie_core.h $hversion"
want="hello from a task, libmagpie $version"
flags=$(pkg-config --cflags --libs magpie) || fail "pkg-config magpie"
rpath=$(pkg-config --variable=rpath magpie) || fail "pkg-config --variable=rpath magpie"
[ "$rpath" = "-Wl,-rpath,$prefix/lib" ] || fail "magpie.pc rpath is '$rpath'"
cc -std=c11 -pedantic -Werror $sanflags "$tmp/hello.c" $flags $rpath -o "$tmp/hello" 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log"; fail "cc -std=c11 hello.c \$(pkg-config --cflags --libs magpie)"; }
readelf -d "$tmp/hello" | grep NEEDED | grep -qF "[$so]" || fail "hello does not need $so"
out=$(env -u LD_LIBRARY_PATH "$tmp/hello" 2>&1) || { echo "$out"; fail "hello exited $?"; }
[ "$out" = "$want" ] || { echo "$out"; fail "hello printed the wrong thing (want: $want)"; }
env -u LD_LIBRARY_PATH ldd "$tmp/hello" | grep -qF "$so => $prefix/lib/" ||
    fail "hello did not load the installed $so"

# The static line: libmagpie.a inside the program, no libmagpie.so needed at run time.
flags=$(pkg-config --static --cflags --libs magpie-static) || fail "pkg-config --static magpie-static"
cc -std=c11 -pedantic -Werror $sanflags "$tmp/hello.c" $flags -o "$tmp/hello-static" 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log"; fail "cc hello.c \$(pkg-config --static --cflags --libs magpie-static)"; }
if readelf -d "$tmp/hello-static" | grep -q 'NEEDED.*libmagpie'; then
    fail "hello-static needs libmagpie.so"
fi
out=$("$tmp/hello-static" 2>&1) || { echo "$out"; fail "hello-static exited $?"; }
[ "$out" = "$want" ] || { echo "$out"; fail "hello-static printed the wrong thing"; }

PATH="$tmp/bin:$PATH" mk uninstall PREFIX="$prefix" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; fail "make uninstall PREFIX=$prefix"; }
[ ! -e "$tmp/ldconfig-ran" ] || fail "make uninstall ran $(cat "$tmp/ldconfig-ran")"
left=$(find "$prefix" -not -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "installed trees OK"
