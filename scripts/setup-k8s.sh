#!/usr/bin/env bash
# setup-k8s.sh prepares the parts of the single-node Kubernetes cluster that the
# kubernetes backend's tests run on (scripts/k8s-cluster.sh starts it): Debian's etcd,
# containerd, runc and CNI plugins, and kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl built from the Go module proxy, since nothing can be
# downloaded as a release binary here. scripts/setup.sh calls it; it can also be run alone.
# Idempotent: a second run finds the packages and the binaries and takes a moment.
#
# Why a wrapper module (scripts/k8s): k8s.io/kubernetes replaces each k8s.io/* staging
# module with a directory of its own repository, which `go install pkg@version` refuses.
# scripts/k8s requires k8s.io/kubernetes and replaces each staging module with its
# published version of the same release (v0.34.x for v1.34.x); its go.sum is committed, so
# a build resolves nothing anew.
#
# The first build takes minutes (the API server is the largest); Go's build cache makes a
# second one fast, and the binaries are cached outside any clone with a marker file
# (.complete) that the tests look for. A lock keeps two runs from building at once.
#
# Environment:
#   AGENTBOX_CACHE   builds kept between runs, outside any clone (default /var/cache/agentbox)
#   GO               the go command (default: go on PATH or /usr/local/go/bin)
set -euo pipefail

# Keep in step with scripts/k8s/go.mod and scripts/k8s-cluster.sh.
readonly K8S_VERSION=v1.34.2
readonly CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}/k8s
readonly DEST=${CACHE}/${K8S_VERSION}
readonly LOG=${AGENTBOX_K8S_BUILD_LOG:-/var/log/agentbox-setup-k8s.log}
readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf 'setup-k8s: %s\n' "$*"; }
die() {
	printf 'setup-k8s: error: %s\n' "$*" >&2
	exit 1
}

# 1. Debian's parts. docker.io already brought containerd and runc; etcd and the CNI
# plugins come here. etcd's package enables a system service where systemd runs; the
# cluster starts its own etcd on its own port and data dir, so that one is left alone.
need=()
command -v etcd >/dev/null || need+=(etcd-server)
[[ -x /usr/lib/cni/loopback ]] || need+=(containernetworking-plugins)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v openssl >/dev/null || need+=(openssl)
if ((${#need[@]})); then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null || die "apt-get update failed"
	apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
fi

# 2. The binaries.
complete() {
	[[ -f ${DEST}/.complete ]] || return 1
	for c in "${COMMANDS[@]}"; do [[ -x ${DEST}/${c} ]] || return 1; done
}
if complete; then
	log "kubernetes ${K8S_VERSION}: cached at ${DEST}"
	exit 0
fi
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || die "no go command (set GO)"
mkdir -p "$CACHE"
exec 9>"${CACHE}/.lock"
flock 9
if complete; then
	log "kubernetes ${K8S_VERSION}: built by another run, cached at ${DEST}"
	exit 0
fi
log "kubernetes ${K8S_VERSION}: building ${COMMANDS[*]} from the module proxy (minutes the first time; log ${LOG})"
tmp=$(mktemp -d "${CACHE}/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for c in "${COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
start=$SECONDS
(cd "$HERE/k8s" && GOFLAGS=-mod=readonly CGO_ENABLED=0 nice -n 10 "$GO" build -trimpath -ldflags='-s -w' -o "$tmp/" "${pkgs[@]}") >"$LOG" 2>&1 ||
	die "build failed; see ${LOG}: $(tail -3 "$LOG")"
rm -rf "$DEST"
mv "$tmp" "$DEST"
chmod 0755 "$DEST"
touch "${DEST}/.complete"
trap - EXIT
log "kubernetes ${K8S_VERSION}: built in $((SECONDS - start)) s, cached at ${DEST}"
