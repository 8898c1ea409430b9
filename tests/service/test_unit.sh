#!/bin/sh
# tools/ssae.service passes `systemd-analyze verify` (Type=notify, watchdog,
# hardening). ExecStart points at the ssae just built (verify checks that
# the program exists). Exit 77 when systemd-analyze is absent.
set -u
command -v systemd-analyze >/dev/null 2>&1 || { echo "SKIP: systemd-analyze not installed (apt-get install systemd)"; exit 77; }
src="${SSAE_SOURCE_ROOT:?}/tools/ssae.service"
tmp=$(mktemp -d /tmp/ssae_unit_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/bin/ssae|${SSAE:?}|" "$src" > "$tmp/ssae.service"
out=$(systemd-analyze verify --man=no "$tmp/ssae.service" 2>&1)
rc=$?
[ -n "$out" ] && echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: systemd-analyze verify exited $rc"; exit 1; }
# Any complaint about the unit counts, even when verify exits 0.
if echo "$out" | grep -q "ssae.service"; then echo "FAIL: verify complained"; exit 1; fi
for key in "Type=notify" "WatchdogSec=" "NoNewPrivileges=yes" "ProtectSystem=strict"; do
  grep -q "^$key" "$src" || { echo "FAIL: $key missing"; exit 1; }
done
echo "unit: systemd-analyze verify passes"
