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
# time) for git inside a sandbox; the tool image for the tool battery. A second run finds each matching its
# recipe and skips it. Both land in the engine and, unpacked for the local
# backend, in the default data dir.
build_agentbox
"$AGENTBOX" image build --kind busybox
"$AGENTBOX" image build --kind debian
# The tool battery's image (issue 11): Go, Node and npm, unzip and zip, and
# networkx, whose own test suite is the real suite it runs. apt installs
# them over the cached debootstrap result (about 90 s the first time).
"$AGENTBOX" image build --kind debian --packages golang-go,nodejs,npm,unzip,zip,python3-networkx --tag agentbox/debian:tools
# Checks that depend on the setup above fail instead of skipping.
export AGENTBOX_REQUIRE_SETUP=1
# The Debian image's own build tests (internal/image) run too, from the
# debootstrap result the build above cached (the root's default data dir).
export AGENTBOX_TEST_DEBIAN=1
export AGENTBOX_TEST_DEBIAN_CACHE="${AGENTBOX_TEST_DEBIAN_CACHE:-/var/lib/agentbox/images/debian/cache}"
go vet ./...
# The measurements (-tags measure: they assert nothing about time and take
# minutes to an hour) are not run, but must keep compiling.
go vet -tags measure ./internal/bench ./internal/battery
CGO_ENABLED=0 go build ./...
# cmd/agentbox's end-to-end tests run the Go eval tasks on docker and
# gvisor (about 5 minutes of go test in sandboxes): 30m per package. The
# tests of several daemons sharing PostgreSQL run in its pass below.
nodes_tests='TestLoadThreeNodes|TestKill9Node|TestKill9NodeUnshared'
go test -count=1 -timeout 30m ./... -skip "^($nodes_tests)\$" "$@"
# The daemon's core end-to-end tests again with every daemon on PostgreSQL
# (a real PostgreSQL 15 started by the tests, a database per data dir); the
# store's conformance suite and the PostgreSQL-only tests ran above. With
# them, three daemons sharing one database: the load test spread over them,
# and one killed with SIGKILL mid-load.
AGENTBOX_TEST_STORE=postgres go test -count=1 -timeout 15m ./cmd/agentbox \
	-run "^($nodes_tests|TestCLIEveryCommandJSON|TestKill9Durability|TestRemountAfterReboot|TestExecThroughTheCLI|TestGracefulShutdown.*|TestCLIGC|TestSecretsThroughTheCLI|TestReviewAndPush|TestObservabilityThroughTheCLI|TestSolveSurvivesKill9)\$" "$@"
# The fuzz targets of what parses hostile input (paths from clients, the
# guest's frames, policies, proxy targets, TLS ClientHellos), each for a
# bounded number of inputs. Bounded by count, not time: Go 1.26's fuzzer
# can report a spurious error when a time budget runs out mid-input.
fuzz() { go test -run '^$' -fuzz "^$2\$" -fuzztime "$3" "$1"; }
fuzz ./internal/fileapi FuzzResolve 2000x
fuzz ./internal/guest FuzzDecodeFrame 100000x
fuzz ./internal/policy FuzzParse 30000x
fuzz ./internal/egress FuzzCanonicalHost 50000x
fuzz ./internal/egress FuzzClientHello 50000x
