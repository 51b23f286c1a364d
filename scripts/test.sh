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
# Nothing is pulled: build the images the tests run. busybox (seconds) for
# most tests; Debian (debootstrap from Debian's mirror: minutes the first
# time) for git inside a sandbox. A second run finds each matching its
# recipe and skips it. Both land in the engine and, unpacked for the local
# backend, in the default data dir.
build_agentbox
"$AGENTBOX" image build --kind busybox
"$AGENTBOX" image build --kind debian
# Checks that depend on the setup above fail instead of skipping.
export AGENTBOX_REQUIRE_SETUP=1
go vet ./...
CGO_ENABLED=0 go build ./...
go test -count=1 -timeout 20m ./... "$@"
