#!/usr/bin/env bash
# test.sh runs agentbox's whole test suite for real: it first sets the machine
# up (Debian packages, dockerd with runsc) so that nothing is skipped, then runs
# every Go test with real git, real SQLite, real overlay mounts and a real
# daemon. Run as root. CI runs exactly this (see .ci/run).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

"$ROOT/scripts/setup.sh"
cd "$ROOT"
# The docker and gvisor tests run agentbox/busybox:latest; nothing is pulled,
# so build it (seconds; a second run finds it matching its recipe and skips).
build_agentbox
"$AGENTBOX" image build --kind busybox
# Checks that depend on the setup above fail instead of skipping.
export AGENTBOX_REQUIRE_SETUP=1
go vet ./...
CGO_ENABLED=0 go build ./...
go test -count=1 -timeout 20m ./... "$@"
