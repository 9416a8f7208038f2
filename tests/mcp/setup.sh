#!/usr/bin/env bash
# Installs the MCP test client's node modules (the official MCP TypeScript
# SDK, pinned by package-lock.json) into tests/mcp/node_modules, with
# `npm ci`: when node_modules is missing or older than package-lock.json.
# tests/integration/test_mcp.py skips its SDK cases without them.
# Without npm it only warns (the test then reports those cases skipped).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v npm >/dev/null 2>&1; then
    echo "warning: npm not found; the MCP SDK tests will be skipped (install nodejs and npm)" >&2
    exit 0
fi
if [ -d node_modules ] && [ -e node_modules/.package-lock.json ] \
    && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
    exit 0
fi
echo "==> npm ci in tests/mcp"
npm ci --no-audit --no-fund
