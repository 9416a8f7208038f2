#!/usr/bin/env bash
# Puts promtool, Prometheus's checker of the metrics text format, in
# tests/metrics/bin/promtool, for test_metrics.py: taken out of Debian's
# prometheus package (apt-get download, dpkg-deb -x), which is not
# installed - its package would start a Prometheus server on the machine.
# Nothing when it is already there. Without apt-get it only warns (the
# tests that need promtool then report themselves skipped).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/bin/promtool"
[ -x "$bin" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "warning: apt-get or dpkg-deb missing: promtool not fetched; test_metrics.py skips its promtool check" >&2
    exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt-get download drops privileges to _apt where it can
if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    # no package lists yet on a fresh machine
    apt-get update >/dev/null
    (cd "$tmp" && apt-get download prometheus >/dev/null)
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
mkdir -p "$here/bin"
install -m 0755 "$tmp/x/usr/bin/promtool" "$bin"
echo "promtool: $("$bin" --version 2>&1 | head -1)"
