#!/usr/bin/env bash
# Installs the S3 test server's node modules (s3rver and the smithy SigV4
# signer, pinned by package-lock.json) into tests/s3/node_modules, with
# `npm ci`: when node_modules is missing or older than package-lock.json.
# tests/integration/s3fixture.py skips its tests without them.
# Without npm it only warns (the tests then report themselves skipped).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

if ! command -v npm >/dev/null 2>&1; then
    echo "warning: npm not found; the S3 backend tests will be skipped (install nodejs and npm)" >&2
    exit 0
fi
if [ -d node_modules ] && [ -e node_modules/.package-lock.json ] \
    && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
    exit 0
fi
echo "==> npm ci in tests/s3"
npm ci --no-audit --no-fund
