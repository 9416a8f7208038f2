#!/usr/bin/env bash
# Installs the S3 test server's node modules (s3rver and the smithy SigV4
# signer, pinned by package-lock.json) into tests/s3/node_modules, with
# `npm ci`: when node_modules is missing or older than package-lock.json.
# tests/integration/s3fixture.py skips its tests without them.
# Without npm it only warns (the tests then report themselves skipped).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../npm-ci.sh" "$here" "the S3 backend tests"
