# shellcheck shell=bash
# env.sh is sourced by the other scripts: Go on PATH, the repo root, a
# build of the agentbox binary.
export PATH="$PATH:/usr/local/go/bin:/root/go/bin"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ROOT
AGENTBOX="$ROOT/bin/agentbox"
export AGENTBOX

build_agentbox() {
	command -v go >/dev/null || { echo "go not found: install Go 1.26 at /usr/local/go" >&2; exit 1; }
	(cd "$ROOT" && CGO_ENABLED=0 go build -o "$AGENTBOX" ./cmd/agentbox &&
		CGO_ENABLED=0 go build -o "$ROOT/bin/agentbox-guest" ./cmd/agentbox-guest)
}
