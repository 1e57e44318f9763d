#!/usr/bin/env bash
# `make install DESTDIR=...` as a packager runs it: every file in its place, the shared library
# with its SONAME and links, a program built with `pkg-config --cflags --libs magpie` against
# the installed tree that runs on the installed libmagpie.so.0, one built with
# `pkg-config --static --cflags --libs magpie-static` that needs no libmagpie.so, and installed
# units that name the installed magpied and pass `systemd-analyze verify`.
#
# Usage: tests/systemd/install.sh [SANITIZE]   (the build variant to install; run from the root)
set -u
san=${1:-}
tmp=$(mktemp -d /tmp/magpie-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root prefix=/usr/local
fail() { echo "FAIL: $*"; exit 1; }

# Not the jobserver of the make that runs the tests.
env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory install \
    SANITIZE="$san" DESTDIR="$root" PREFIX="$prefix" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; fail "make install"; }

for f in sbin/magpied lib/libmagpie.a lib/libmagpie.so.0.1.0 include/magpie.h \
    include/magpie_core.h include/magpie_io.h \
    lib/pkgconfig/magpie.pc lib/pkgconfig/magpie-static.pc share/man/man8/magpied.8 share/man/man5/magpied.conf.5 \
    share/doc/magpied/haproxy.cfg.example lib/systemd/system/magpied.service \
    lib/systemd/system/magpied@.service lib/systemd/system/magpied.socket \
    lib/systemd/system/magpied-echo.socket; do
    [ -f "$root$prefix/$f" ] || fail "missing $prefix/$f"
done
[ -f "$root/etc/magpied/magpied.conf" ] || fail "missing /etc/magpied/magpied.conf"
cmp -s config/magpied.conf "$root/etc/magpied/magpied.conf" || fail "magpied.conf differs"
[ -x "$root$prefix/sbin/magpied" ] || fail "magpied is not executable"
[ "$(readlink "$root$prefix/lib/libmagpie.so.0")" = libmagpie.so.0.1.0 ] || fail "libmagpie.so.0 link"
[ "$(readlink "$root$prefix/lib/libmagpie.so")" = libmagpie.so.0 ] || fail "libmagpie.so link"
soname=$(readelf -d "$root$prefix/lib/libmagpie.so.0.1.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libmagpie.so.0 ] || fail "SONAME is '$soname', not libmagpie.so.0"
grep -q "^prefix=$prefix\$" "$root$prefix/lib/pkgconfig/magpie.pc" || fail "magpie.pc prefix"
grep -q "^prefix=$prefix\$" "$root$prefix/lib/pkgconfig/magpie-static.pc" || fail "magpie-static.pc prefix"
if nm -D --defined-only "$root$prefix/lib/libmagpie.so.0.1.0" | grep -q ' mp__'; then
    fail "libmagpie.so exports mp__ internals"
fi

# A program built against the installed tree, as its users build theirs.
cat >"$tmp/hello.c" <<'C'
#include <magpie_core.h>
#include <stdio.h>

typedef struct hello { mp_task task; int n; } hello;

static mp_poll hello_poll(mp_task *t, mp_context *cx)
{
    hello *h = mp_container_of(t, hello, task);
    if (h->n-- > 0)
        return mp_yield(cx);
    puts("hello from a task");
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
pc() { PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$root$prefix/lib/pkgconfig:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig" pkg-config "$@"; }
flags=$(pc --cflags --libs magpie) || fail "pkg-config magpie"
sanflags=${san:+-fsanitize=$san}
# As the README says: magpie_core.h needs no feature macro beside -std=c11.
cc -std=c11 -pedantic $sanflags "$tmp/hello.c" $flags -o "$tmp/hello" 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log"; fail "cc hello.c \$(pkg-config --cflags --libs magpie)"; }
readelf -d "$tmp/hello" | grep -q 'NEEDED.*\[libmagpie.so.0\]' || fail "hello does not need libmagpie.so.0"
out=$(LD_LIBRARY_PATH="$root$prefix/lib" "$tmp/hello" 2>&1) || { echo "$out"; fail "hello exited $?"; }
[ "$out" = "hello from a task" ] || { echo "$out"; fail "hello printed the wrong thing"; }
LD_LIBRARY_PATH="$root$prefix/lib" ldd "$tmp/hello" | grep -q "libmagpie.so.0 => $root$prefix/lib/" ||
    fail "hello did not load the installed libmagpie.so.0"

# The umbrella magpie.h (with magpie_io.h and uv.h) wants -D_DEFAULT_SOURCE, as the README says.
printf '#include <magpie.h>\nint main(void) { return mp_now_ms() == 0; }\n' >"$tmp/io.c"
cc -std=c11 -D_DEFAULT_SOURCE $sanflags "$tmp/io.c" $flags -o "$tmp/io" 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log"; fail "cc io.c (magpie.h) \$(pkg-config --cflags --libs magpie)"; }

# The README's static line: libmagpie.a inside the program, no libmagpie.so needed at run time.
flags=$(pc --static --cflags --libs magpie-static) || fail "pkg-config --static magpie-static"
cc -std=c11 -pedantic $sanflags "$tmp/hello.c" $flags -o "$tmp/hello-static" 2>"$tmp/cc.log" ||
    { cat "$tmp/cc.log"; fail "cc hello.c \$(pkg-config --static --cflags --libs magpie-static)"; }
if readelf -d "$tmp/hello-static" | grep -q 'NEEDED.*libmagpie'; then
    fail "hello-static needs libmagpie.so"
fi
if ldd "$tmp/hello-static" | grep -q libmagpie; then
    fail "ldd finds libmagpie.so in hello-static"
fi
out=$("$tmp/hello-static" 2>&1) || { echo "$out"; fail "hello-static exited $?"; }
[ "$out" = "hello from a task" ] || { echo "$out"; fail "hello-static printed the wrong thing"; }

# The installed units name the installed binary; verify them with that path moved into the
# staging root, and with the installed man pages for Documentation=.
mkdir "$tmp/units"
for u in "$root$prefix"/lib/systemd/system/*; do
    grep -q "$prefix/sbin/magpied" "$u" || [ "${u%.socket}" != "$u" ] ||
        fail "$(basename "$u") does not name $prefix/sbin/magpied"
    sed "s|$prefix/sbin/magpied|$root$prefix/sbin/magpied|g" "$u" >"$tmp/units/$(basename "$u")"
done
out=$(cd "$tmp/units" && MANPATH="$root$prefix/share/man" systemd-analyze verify \
    magpied.service magpied@.service magpied@1.service magpied.socket magpied-echo.socket 2>&1) ||
    { echo "$out"; fail "systemd-analyze verify of the installed units"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify printed something"; }
echo "installed tree OK"
