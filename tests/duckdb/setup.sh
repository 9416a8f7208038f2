#!/usr/bin/env bash
# Installs DuckDB's Node client (@duckdb/node-api, pinned by
# package-lock.json) into tests/duckdb/node_modules, with `npm ci`: when
# node_modules is missing or older than package-lock.json. query.js needs
# it; tests/integration/test_mount_s3.py skips its DuckDB cases and the
# bench suite `mount` its DuckDB rows without it.
# Without npm it only warns (the tests then report those cases skipped).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../npm-ci.sh" "$here" "the DuckDB tests through cairn mount"
