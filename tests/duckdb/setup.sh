#!/usr/bin/env bash
# Installs DuckDB's Node client (@duckdb/node-api, pinned by
# package-lock.json) into tests/duckdb/node_modules, with `npm ci`: when
# node_modules is missing or older than package-lock.json. query.js needs
# it; tests/integration/test_mount_s3.py skips its DuckDB cases and the
# bench suite `mount` its DuckDB rows without it.
# Without npm it only warns (the tests then report those cases skipped).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v npm >/dev/null 2>&1; then
    echo "warning: npm not found; the DuckDB tests through cairn mount will be skipped (install nodejs and npm)" >&2
    exit 0
fi
if [ -d node_modules ] && [ -e node_modules/.package-lock.json ] \
    && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
    exit 0
fi
echo "==> npm ci in tests/duckdb"
npm ci --no-audit --no-fund
