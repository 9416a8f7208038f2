#!/usr/bin/env bash
# Installs the MCP test client's node modules (the official MCP TypeScript
# SDK, pinned by package-lock.json) into tests/mcp/node_modules, with
# `npm ci`: when node_modules is missing or older than package-lock.json.
# tests/integration/test_mcp.py skips its SDK cases without them.
# Without npm it only warns (the test then reports those cases skipped).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../npm-ci.sh" "$here" "the MCP SDK tests"
