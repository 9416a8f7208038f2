#!/usr/bin/env bash
# Installs the azure backend's test server, Azurite (npm azurite 3.35.0, the
# last that runs on Node 20, pinned by package-lock.json), into
# tests/azure/node_modules with `npm ci`: when node_modules is missing or
# older than package-lock.json. tests/integration/azurefixture.py skips its
# tests without it. Without npm it only warns (the tests then report
# themselves skipped).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../npm-ci.sh" "$here" "the azure backend tests"
