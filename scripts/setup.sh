#!/usr/bin/env bash
# setup.sh prepares a bare Debian 12 machine (CI or a new developer box) for agentbox:
# Debian packages, gVisor's runsc registered as a Docker runtime, a running Docker
# engine, and a cached Gitea build for the pull request tests. No systemd is assumed: dockerd is started in the background when it does not
# answer. Run as root. It is idempotent: a second run installs nothing, rewrites nothing,
# restarts nothing, and takes a second or two.
#
# Environment:
#   AGENTBOX_DOCKER_WAIT  seconds to wait for dockerd to answer (default 60)
#   AGENTBOX_DOCKERD_LOG  dockerd's log file (default /var/log/dockerd.log)
#   AGENTBOX_CACHE        builds kept between runs, outside any clone (default /var/cache/agentbox)
#   GO                    the go command that builds runsc (default: go on PATH or /usr/local/go/bin)
set -euo pipefail

# chromium and a font: the dashboard's browser tests (internal/dashboard) drive Debian's chromium headless.
# postgresql-15: the PostgreSQL store's tests start their own server from its binaries
# (/usr/lib/postgresql/15/bin) as its non-root user postgres; the cluster the package makes
# is never started (policy-rc.d below).
readonly PACKAGES=(git docker.io runsc bubblewrap busybox-static debootstrap iproute2 ca-certificates jq gcc libc6-dev util-linux chromium fonts-dejavu-core postgresql-15)
readonly DAEMON_JSON=/etc/docker/daemon.json
readonly DOCKER_SOCK=/var/run/docker.sock
readonly DOCKER_WAIT=${AGENTBOX_DOCKER_WAIT:-60}
readonly DOCKERD_LOG=${AGENTBOX_DOCKERD_LOG:-/var/log/dockerd.log}
readonly APT_LOG=/var/log/agentbox-setup-apt.log
# gVisor, pinned: the runsc built from the Go module proxy (see step 2).
readonly GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
readonly RUNSC_CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}/gvisor
readonly RUNSC_PREFIX=/usr/local/lib/agentbox/gvisor
readonly RUNSC_BUILD_LOG=/var/log/agentbox-setup-runsc.log
# systrap against ptrace, measured on this machine (a Firecracker VM, kernel 6.18):
# see the commit that set it.
readonly RUNSC_PLATFORM=systrap

# This script manages the local engine, whatever DOCKER_HOST or a CLI context says.
export DOCKER_HOST="unix://${DOCKER_SOCK}"
unset DOCKER_CONTEXT

log() { printf 'setup: %s\n' "$*"; }
die() {
	printf 'setup: error: %s\n' "$*" >&2
	exit 1
}

docker_answers() { timeout 10 docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }
docker_runtimes() { timeout 10 docker info --format '{{json .Runtimes}}' 2>/dev/null; }
# runsc_registered: the engine lists runsc with the path and arguments we configure.
# Only path and runtimeArgs are compared: newer engines add fields of their own.
# shellcheck disable=SC2016 # $want is a jq variable, not a shell one
readonly RUNSC_MATCHES='.runsc.path == $want.path and .runsc.runtimeArgs == $want.runtimeArgs'
runsc_registered() { docker_runtimes | jq -e --argjson want "$want_runsc" "$RUNSC_MATCHES" >/dev/null 2>&1; }

# dockerd_pid prints the pid of a live dockerd, if any.
dockerd_pid() {
	local pid
	if [[ -r /var/run/docker.pid ]]; then
		pid=$(<'/var/run/docker.pid')
		if [[ -n $pid && -d /proc/$pid ]] && [[ $(</proc/"$pid"/comm) == dockerd ]]; then
			echo "$pid"
			return 0
		fi
	fi
	pgrep -x -o dockerd 2>/dev/null || true
}

# wait_for checks a condition once a second until it holds or $2 seconds pass. With a
# third argument, a pid, it gives up as soon as that process is gone.
wait_for() {
	local what=$1 end=$((SECONDS + $2)) pid=${3:-}
	while ((SECONDS < end)); do
		if "$what"; then return 0; fi
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null && [[ -z $(dockerd_pid) ]]; then return 1; fi
		sleep 1
	done
	"$what"
}

[[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts dockerd)"
command -v dpkg-query >/dev/null || die "dpkg-query not found: this script supports Debian and its derivatives only"

# 1. Packages. apt-get runs only when something is missing, so a second run is fast.
missing=()
for pkg in "${PACKAGES[@]}"; do
	if [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) != installed ]]; then
		missing+=("$pkg")
	fi
done
if ((${#missing[@]} > 0)); then
	log "installing ${missing[*]} (apt output in ${APT_LOG})"
	# Keep package scripts from starting services: dockerd is started below, on our terms.
	# A policy-rc.d already present (common in container images) is left as it is.
	own_policy_rc=false
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		own_policy_rc=true
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	export DEBIAN_FRONTEND=noninteractive
	{
		apt-get update -q &&
			apt-get install -y -q --no-install-recommends \
				-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
				"${missing[@]}"
	} >>"$APT_LOG" 2>&1 || die "apt-get failed installing ${missing[*]}: see ${APT_LOG}"
	if $own_policy_rc; then
		rm -f /usr/sbin/policy-rc.d
		trap - EXIT
	fi
else
	log "packages: all ${#PACKAGES[@]} present"
fi

# 2. gVisor. Debian's runsc (0.0~20221219) mishandles statx: `ls -l`, `stat` and `ls /` fail
# with EINVAL inside it. A current runsc is built from the Go module proxy at a pinned version,
# statically (CGO_ENABLED=0): a cgo build is linked against the host's libc, and once runsc
# has pivoted into its empty chroot its re-execution of /proc/self/exe fails with ENOENT (the
# ELF interpreter is gone), which is the "error executing umounter" a plain `go install`
# gives. The build is cached under RUNSC_CACHE by version and installed under RUNSC_PREFIX
# by version, so that changing the pin builds once, registers the new path and reloads
# dockerd, and a second run with the same pin builds nothing. Debian's runsc stays the
# fallback when the build fails (no Go, no module proxy) or the result does not run.
build_runsc() {
	local go=${GO:-} out tmp
	[[ -n $go ]] || go=$(PATH="$PATH:/usr/local/go/bin" command -v go) || {
		log "gvisor: no go toolchain (install Go at /usr/local/go) to build runsc ${GVISOR_VERSION}" >&2
		return 1
	}
	out="${RUNSC_CACHE}/${GVISOR_VERSION}/runsc"
	if [[ ! -x $out ]]; then
		log "gvisor: building runsc ${GVISOR_VERSION} (static, about a minute the first time; log ${RUNSC_BUILD_LOG})" >&2
		mkdir -p "${RUNSC_CACHE}/${GVISOR_VERSION}"
		tmp=$(mktemp -d "${RUNSC_CACHE}/${GVISOR_VERSION}/.build.XXXXXX")
		# -X sets what `runsc --version` prints (else VERSION_MISSING), so that doctor can name it.
		if ! CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="-trimpath -buildvcs=false" GOTOOLCHAIN=local \
			"$go" install -ldflags "-X gvisor.dev/gvisor/runsc/version.version=${GVISOR_VERSION}" \
			"gvisor.dev/gvisor/runsc@${GVISOR_VERSION}" >>"$RUNSC_BUILD_LOG" 2>&1; then
			rm -rf "$tmp"
			log "gvisor: building runsc ${GVISOR_VERSION} failed: see ${RUNSC_BUILD_LOG}" >&2
			return 1
		fi
		mv -f "$tmp/runsc" "$out"
		rm -rf "$tmp"
	fi
	echo "$out"
}

# runsc_static: a dynamically linked runsc cannot re-execute itself from its chroot.
runsc_static() {
	local out
	out=$(LC_ALL=C ldd "$1" 2>&1) || true # ldd fails on a static binary, saying so
	[[ $out == *"not a dynamic executable"* || $out == *"statically linked"* ]]
}

# runsc_boots: the functional probe of a runsc outside dockerd: a sandbox over the host's
# root that lists / and stats a file (what Debian's 2022 build fails).
runsc_boots() {
	timeout 60 "$1" --network=none --platform="$RUNSC_PLATFORM" --ignore-cgroups do \
		/bin/sh -c 'ls -la / >/dev/null && stat /etc/hostname >/dev/null' >>"$RUNSC_BUILD_LOG" 2>&1
}

install_runsc() {
	local built=$1 dst="${RUNSC_PREFIX}/${GVISOR_VERSION}/runsc"
	if [[ ! -x $dst ]] || ! cmp -s "$built" "$dst"; then
		mkdir -p "$(dirname "$dst")"
		install -m 0755 "$built" "${dst}.new"
		mv -f "${dst}.new" "$dst"
		log "gvisor: installed runsc ${GVISOR_VERSION} at ${dst}" >&2
	fi
	echo "$dst"
}

RUNSC=""
if built=$(build_runsc); then
	if ! runsc_static "$built"; then
		log "gvisor: ${built} is dynamically linked; it cannot boot from its chroot: not used"
	elif ! runsc_boots "$built"; then
		log "gvisor: ${built} failed its probe (runsc do ls -la /; stat): see ${RUNSC_BUILD_LOG}; not used"
	else
		RUNSC=$(install_runsc "$built")
	fi
fi
if [[ -z $RUNSC ]]; then
	RUNSC=$(command -v runsc) || die "no runsc: the build failed and the runsc package put none on PATH"
	log "gvisor: falling back to Debian's ${RUNSC}: ls -l and stat fail inside it"
fi

# Register runsc in daemon.json, merging with whatever the file already holds.
# --network=none: sandboxes have no network stack of their own; egress goes through the guest.
# --host-uds=open: lets the guest reach a unix socket bind-mounted from the host.
# --platform: measured, see RUNSC_PLATFORM. Debian's fallback keeps its own default (ptrace).
runsc_args=(--network=none --host-uds=open)
[[ $RUNSC == /usr/bin/runsc ]] || runsc_args+=("--platform=${RUNSC_PLATFORM}")
daemon_json_changed=false
# (jq 1.6 takes "--network=none" after --args for an option of its own: one JSON string each.)
want_runsc=$(printf '%s\n' "${runsc_args[@]}" | jq -cRn --arg path "$RUNSC" '{path: $path, runtimeArgs: [inputs]}')
mkdir -p "$(dirname "$DAEMON_JSON")"
if [[ -s $DAEMON_JSON ]]; then
	jq -e . "$DAEMON_JSON" >/dev/null 2>&1 ||
		die "${DAEMON_JSON} is not valid JSON; fix or remove it, then run again (left untouched)"
	current=$(<"$DAEMON_JSON")
else
	current='{}'
fi
if jq -e --argjson want "$want_runsc" '.runtimes.runsc == $want' <<<"$current" >/dev/null; then
	log "daemon.json: runsc already registered (${RUNSC})"
else
	tmp=$(mktemp "${DAEMON_JSON}.XXXXXX")
	jq --argjson want "$want_runsc" '.runtimes.runsc = $want' <<<"$current" >"$tmp"
	chmod 0644 "$tmp"
	mv -f "$tmp" "$DAEMON_JSON"
	daemon_json_changed=true
	log "daemon.json: registered runsc (${RUNSC}) in ${DAEMON_JSON}"
fi

# 3. A running engine that lists runsc.
if docker_answers; then
	if $daemon_json_changed || ! runsc_registered; then
		pid=$(dockerd_pid)
		[[ -n $pid ]] || die "docker answers on ${DOCKER_SOCK} but no local dockerd process was found to reload"
		log "dockerd: reloading configuration (SIGHUP to pid ${pid})"
		kill -HUP "$pid"
		wait_for runsc_registered 15 ||
			die "dockerd reloaded but does not list runsc; see ${DOCKERD_LOG} or restart dockerd"
	else
		log "dockerd: running, runsc registered"
	fi
else
	pid=$(dockerd_pid)
	if [[ -n $pid ]]; then
		log "dockerd: pid ${pid} exists but does not answer yet; waiting up to ${DOCKER_WAIT}s"
	else
		command -v dockerd >/dev/null || die "dockerd not found: is docker.io installed?"
		log "dockerd: starting in the background (log ${DOCKERD_LOG}); waiting up to ${DOCKER_WAIT}s"
		# setsid detaches it from this script's session so that it outlives the caller's
		# terminal or job; nohup guards against a stray SIGHUP from the same.
		setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
		pid=$!
	fi
	if ! wait_for docker_answers "$DOCKER_WAIT" "$pid"; then
		why="did not answer on ${DOCKER_SOCK} within ${DOCKER_WAIT}s"
		[[ -n $(dockerd_pid) ]] || why="exited before answering"
		die "dockerd ${why}; last lines of ${DOCKERD_LOG}: $(tail -n 3 "$DOCKERD_LOG" 2>/dev/null | tr '\n' ' ')"
	fi
	runsc_registered || die "dockerd is up but does not list runsc as ${want_runsc}; check ${DAEMON_JSON} and ${DOCKERD_LOG}"
fi

# 4. cgroup v1 (and hybrid) hosts: the local backend moves its spawner thread into each new
# sandbox's cgroups, and without favordynmods every such move first waits for an RCU grace
# period (5-15 ms here, on the path of every local create). The flag is global to the kernel
# but can only be set on a cgroup2 mount; it costs fork and exit a little. It does not
# survive a reboot, so this step runs every time. `agentbox doctor` reports it.
cgroup_root_type=$(stat -f -c %T /sys/fs/cgroup 2>/dev/null || echo missing)
if [[ $cgroup_root_type != cgroup2fs ]]; then
	if grep -qE ' - cgroup2? [^ ]+ ([^ ]*,)?favordynmods(,|$)' /proc/self/mountinfo; then
		log "cgroups: v1 with favordynmods already on"
	elif [[ $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]; then
		if mount -o remount,favordynmods /sys/fs/cgroup/unified 2>/dev/null; then
			log "cgroups: v1; remounted /sys/fs/cgroup/unified with favordynmods (fast cgroup migrations)"
		else
			log "cgroups: v1; this kernel refused favordynmods (older than 6.0?): local sandbox creates wait for RCU grace periods"
		fi
	else
		log "cgroups: v1 without a cgroup2 mount: boot with cgroup_favordynmods=true for fast local sandbox creates"
	fi
fi

# 4b. Process ids. Every thread takes one, and an idle docker sandbox holds about 40 (its
# shim, the guest, docker-init). With the kernel's default pid_max of 32768, `bench density`
# stopped at 750 sandboxes: the daemon could not start a thread and died (fatal error
# newosproc), runc failed, and dockerd wedged on the removals until it was restarted. The
# 64-bit maximum costs nothing until used. Not persistent across a reboot: runs every time.
pid_max=$(cat /proc/sys/kernel/pid_max)
if ((pid_max < 4194304)); then
	if sysctl -q -w kernel.pid_max=4194304 2>/dev/null; then
		log "kernel.pid_max: raised from $pid_max to 4194304 (about 40 per idle sandbox)"
	else
		log "kernel.pid_max is $pid_max and cannot be raised here: about $((pid_max / 40)) idle sandboxes at most"
	fi
fi

# 5. The real Gitea the pull request tests run against (issue 14): built once from the Go
# module proxy and cached under AGENTBOX_CACHE, with the system user it runs as. See
# setup-gitea.sh. The first build takes minutes; later runs find it cached. A failed build
# does not stop the setup: the tests that need Gitea then fail under AGENTBOX_REQUIRE_SETUP.
if ! "$(dirname "${BASH_SOURCE[0]}")/setup-gitea.sh"; then
	log "gitea: not prepared (see above); the forge tests will fail under CI"
fi

# 5b. The single-node Kubernetes cluster the kubernetes backend's tests run on (issue 16):
# Debian's etcd and CNI plugins, and the Kubernetes binaries built once from the Go module
# proxy and cached under AGENTBOX_CACHE (setup-k8s.sh; scripts/k8s-cluster.sh starts the
# cluster when a test needs it). As with Gitea, a failed build does not stop the setup.
if ! "$(dirname "${BASH_SOURCE[0]}")/setup-k8s.sh"; then
	log "kubernetes: not prepared (see above); the kubernetes backend's tests will fail under CI"
fi

# 6. Verify everything agentbox needs, and name what is missing.
problems=()
git_v=$(git --version 2>&1) || problems+=("git: ${git_v}")
bwrap_v=$(bwrap --version 2>&1) || problems+=("bwrap: ${bwrap_v}")
# No pipe into head here: under pipefail, runsc dying of SIGPIPE would fail the check.
runsc_v=$(timeout 10 "$RUNSC" --version 2>&1) || problems+=("runsc: ${runsc_v}")
runsc_v=${runsc_v%%$'\n'*}
if runtimes=$(docker_runtimes) && [[ -n $runtimes ]]; then
	jq -e --argjson want "$want_runsc" "has(\"runc\") and ${RUNSC_MATCHES}" <<<"$runtimes" >/dev/null 2>&1 ||
		problems+=("docker runtimes ${runtimes} lack runc, or runsc as ${want_runsc}")
else
	problems+=("docker info on ${DOCKER_SOCK} failed")
fi
api_v=$(timeout 10 docker version --format '{{.Server.APIVersion}}' 2>/dev/null) || api_v=unknown
if ((${#problems[@]} > 0)); then
	die "verification failed: $(IFS=';'; echo "${problems[*]}")"
fi
log "ok: ${git_v}; ${bwrap_v}; ${runsc_v} at ${RUNSC}; docker API ${api_v}, runtimes $(jq -c 'keys' <<<"$runtimes")"
