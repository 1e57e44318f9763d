#!/usr/bin/env bash
# Install the Debian packages named on the command line that are not installed yet, and
# nothing else: no upgrade of an installed package, no recommended packages, and no service
# left enabled or running by what it installed (a test tool's package that ships a daemon,
# such as haproxy, gets its units disabled; the init system itself, systemd, is left alone).
#
# Usage: .ci/deps.sh PACKAGE...                 install the missing ones (as root; otherwise
#                                                 print the apt-get line to run, and exit 1)
#        .ci/deps.sh --missing PACKAGE...       print the missing ones, install nothing
#        .ci/deps.sh --disable-units PACKAGE... disable (and stop) the services those
#                                                 installed packages ship: what an install by
#                                                 this script does, for packages installed before
#
# The Makefile's `deps`, `test-deps` and `lint-deps` run it with their package lists; `make run`,
# `make test` and `make lint` run those first, as a make of their own, so that the build never
# depends on files that appear while the same make is running.
set -euo pipefail

list_missing() {
    command -v dpkg-query >/dev/null || return 0 # not Debian: nothing to check against
    local p
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Abbrev}\n' "$p" 2>/dev/null | grep -q '^ii' || echo "$p"
    done
}

# Units of the packages named: disabled, and stopped where a systemd manager runs them. The
# init system's own package, systemd, is skipped.
disable_units() {
    local pkg unit script booted=false
    [ -d /run/systemd/system ] && booted=true
    for pkg in "$@"; do
        [ "$pkg" = systemd ] && continue
        for unit in $(dpkg -L "$pkg" | sed -nE 's#^(/usr)?/lib/systemd/system/([^/@]+\.(service|socket|timer|path))$#\2#p'); do
            if command -v systemctl >/dev/null &&
                [ "$(systemctl is-enabled "$unit" 2>/dev/null)" = enabled ]; then
                systemctl -q disable "$unit" 2>/dev/null && echo "disabled $unit (from $pkg)"
            fi
            if $booted && systemctl -q is-active "$unit" 2>/dev/null; then
                systemctl -q stop "$unit" && echo "stopped $unit (from $pkg)"
            fi
        done
        # SysV scripts: the links that no unit covered (systemctl disable removes the others),
        # and a daemon that one started without systemd.
        for script in $(dpkg -L "$pkg" | sed -n 's|^/etc/init\.d/\([^/]*\)$|\1|p'); do
            if ls /etc/rc[2-5].d/S??"$script" >/dev/null 2>&1; then
                update-rc.d "$script" disable >/dev/null 2>&1 && echo "disabled /etc/init.d/$script (from $pkg)"
            fi
            if ! $booted && "/etc/init.d/$script" status >/dev/null 2>&1; then
                "/etc/init.d/$script" stop >/dev/null 2>&1 && echo "stopped /etc/init.d/$script (from $pkg)"
            fi
        done
    done
}

if [ "${1:-}" = --disable-units ]; then
    shift
    disable_units "$@"
    exit 0
fi

if [ "${1:-}" = --missing ]; then
    shift
    list_missing "$@" | tr '\n' ' '
    exit 0
fi

mapfile -t missing < <(list_missing "$@")
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages: ${missing[*]}" >&2
    echo "install them, then run make again:" >&2
    echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
installed() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }' | sort; }
before=$(installed)

# No service starts while we install: invoke-rc.d and deb-systemd-invoke ask policy-rc.d,
# and 101 means "not allowed". An existing policy-rc.d (container images ship one) is put back.
policy=/usr/sbin/policy-rc.d
saved=
if [ -e "$policy" ]; then
    saved=$(mktemp)
    cp -p "$policy" "$saved"
fi
restore() {
    if [ -n "$saved" ]; then
        cp -p "$saved" "$policy" && rm -f "$saved"
    else
        rm -f "$policy"
    fi
}
trap restore EXIT
trap 'exit 130' INT TERM
printf '#!/bin/sh\n# .ci/deps.sh is installing packages: no service starts.\nexit 101\n' >"$policy"
chmod 755 "$policy"

apt-get update -q
# The simulation names installed packages that a missing one needs in a newer version
# ("Inst NAME [OLD] (NEW ..."): the only upgrades this can make, said before making them.
forced=$(apt-get -s install --no-install-recommends --no-upgrade "${missing[@]}" |
    sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p')
if [ -n "$forced" ]; then
    echo "these installed packages must be upgraded for the new ones' exact version dependencies:"
    printf '  %s\n' "$forced"
fi
apt-get install -y -q --no-install-recommends --no-upgrade "${missing[@]}"

# Every package this install added, dependencies included. None was started above;
# disabling keeps a boot from starting it.
disable_units $(comm -13 <(echo "$before") <(installed))
