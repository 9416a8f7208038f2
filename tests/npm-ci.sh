#!/usr/bin/env bash
# npm-ci.sh DIR WHAT: installs the node modules a test fixture pins in
# DIR/package-lock.json into DIR/node_modules with `npm ci`, when
# node_modules is missing or older than the lock file. WHAT names the tests
# that need them, for the warning when npm is missing: then it only warns,
# and those tests report themselves skipped. The fixtures' setup.sh call it.
set -euo pipefail

dir=$1
what=$2
cd "$dir"

if ! command -v npm >/dev/null 2>&1; then
    echo "warning: npm not found; $what will be skipped (install nodejs and npm)" >&2
    exit 0
fi
if [ -d node_modules ] && [ -e node_modules/.package-lock.json ] \
    && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
    exit 0
fi
echo "==> npm ci in tests/$(basename "$dir")"
npm ci --no-audit --no-fund
