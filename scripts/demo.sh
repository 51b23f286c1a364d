#!/usr/bin/env bash
# demo.sh sets up this machine, starts the agentbox daemon and walks through the
# main job: cache a repo, create two workspaces for one task, edit them through
# the file API, fork one for a parallel attempt, and show each result as a diff
# and a commit. Run as root on Debian 12. Idempotent: it reuses a running daemon.
#
#   AGENTBOX_DATA  data dir (default /var/lib/agentbox)
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

export AGENTBOX_DATA=${AGENTBOX_DATA:-/var/lib/agentbox}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ agentbox %s\n' "$*"; "$AGENTBOX" "$@"; }

step "setting up the machine"
"$ROOT/scripts/setup.sh"
build_agentbox
# The sandbox image: Debian with git, python3, pytest, make, gcc, built from
# Debian packages (a few minutes the first time, seconds afterwards).
"$AGENTBOX" image build --kind debian

step "starting the daemon (data in $AGENTBOX_DATA)"
if "$AGENTBOX" repo ls >/dev/null 2>&1; then
	echo "a daemon is already serving on $AGENTBOX_DATA/agentbox.sock"
else
	mkdir -p "$AGENTBOX_DATA"
	setsid nohup "$AGENTBOX" serve >>"$AGENTBOX_DATA/daemon.log" 2>&1 </dev/null &
	for _ in $(seq 1 100); do
		"$AGENTBOX" repo ls >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$AGENTBOX" repo ls >/dev/null || { tail -n 20 "$AGENTBOX_DATA/daemon.log"; exit 1; }
	echo "agentbox serve is running (pid $(pgrep -n -f "$AGENTBOX serve")); logs: $AGENTBOX_DATA/daemon.log"
fi

step "a sample repository"
SRC="$AGENTBOX_DATA/demo-src/calc"
if [[ ! -d $SRC/.git ]]; then
	mkdir -p "$SRC"
	cp -r "$ROOT/examples/calc/." "$SRC/"
	git -C "$SRC" init -q -b main
	git -C "$SRC" add -A
	git -C "$SRC" -c user.name=demo -c user.email=demo@example.invalid commit -q -m "calc: add and mul"
fi
echo "$SRC (a git repo on branch main)"

step "cache it once (a second add reuses the mirror)"
run repo add "file://$SRC"
run repo add "file://$SRC"

step "two workspaces for one task, each on its own branch"
WS1=$("$AGENTBOX" ws create --repo "file://$SRC" --task demo-sub --json | jq -r .id)
WS2=$("$AGENTBOX" ws create --repo "file://$SRC" --task demo-sub --json | jq -r .id)
run ws ls --task demo-sub

step "run the repo's tests in a sandbox (the first exec starts one: docker, Debian image)"
run exec "$WS1" -- python3 -m pytest -q
run sandbox ls --ws "$WS1"

step "edit through the file API: attempt 1 adds sub() and its test"
cat <<'PY' | run files write "$WS1" calc.py
"""A tiny calculator: the sample project of the agentbox demo."""


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
PY
cat <<'PY' | run files write "$WS1" tests/test_sub.py
from calc import sub


def test_sub():
    assert sub(5, 3) == 2
PY
run ws status "$WS1"
run exec "$WS1" -- python3 -m pytest -q

step "fork attempt 1 (copies only its changes) and try a variant in the fork"
FORK=$("$AGENTBOX" ws fork "$WS1" --json | jq -r .id)
echo "forked $FORK from $WS1"
printf 'def sub(a, b):\n    return add(a, -b)\n' | run files write "$FORK" calc_extra.py
run files rm "$FORK" tests/test_sub.py
run ws status "$FORK"

step "attempt 2, independently, edits docs only"
printf '# calc\n\nNow with subtraction (see attempt 1).\n' | run files write "$WS2" README.md
run files grep "$WS2" 'subtraction'

step "results as diffs against the base commit"
run ws diff "$WS1"
run ws diff "$FORK"

step "the sandbox is disposable: remove it behind agentbox's back, the next exec heals"
SB=$("$AGENTBOX" sandbox ls --ws "$WS1" --json | jq -r '.sandboxes[] | select(.state == "running") | .backend_ref')
docker rm -f "$SB" >/dev/null
run exec "$WS1" -- sh -c 'git status --short && python3 -m pytest -q'

step "commit attempt 1 on its branch; git inside the workspace sees it"
run ws commit "$WS1" -m "calc: add sub()"
# git runs inside the sandbox, never on the host: whatever ran in the
# workspace controls its .git (config, hooks, fsmonitor), so a host git
# there would run the sandbox's code as root. agentbox's own host-side git
# uses a private git directory in a jail.
run exec "$WS1" -- git log --oneline
run exec "$WS1" -- git status --short
run ws status "$WS1"

step "done"
cat <<TXT
The daemon keeps running; try:
  export AGENTBOX_DATA=$AGENTBOX_DATA
  $AGENTBOX ws ls
  $AGENTBOX events --workspace $WS1
  $AGENTBOX doctor
Stop it with: pkill -f '$AGENTBOX serve'
TXT
