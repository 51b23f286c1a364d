#!/usr/bin/env bash
# k8s-cluster.sh starts (up), stops (down) or reports on (status) the single-node
# Kubernetes cluster that the kubernetes backend's tests and benchmarks run on. Its parts
# come from scripts/setup-k8s.sh: etcd, a containerd of its own (its own socket, root and
# state, with the CRI plugin; dockerd's containerd is left alone), kube-apiserver,
# kube-controller-manager, kube-scheduler and a kubelet on this machine. Nothing is pulled:
# the pod sandbox ("pause") image is built here from scripts/k8s/pause and agentbox's images
# are imported from dockerd's store.
#
# The cluster gives pods no network but their loopback: its only CNI plugin, nonet
# (scripts/k8s/nonet), configures nothing and reports an address for containerd's sake, so
# a pod has no interface a packet could leave by. agentbox's sandboxes
# need nothing more (the guest reaches the daemon through a unix socket on a node-local
# volume, egress goes through agentbox's proxy the same way); agentbox still writes a
# default-deny NetworkPolicy for clusters whose network plugin enforces them.
#
# Authentication: static tokens (the admin's and the kubelet's) and a CA made here;
# authorization: RBAC and Node. The kubelet accepts only clients holding a certificate of
# the cluster's CA. Everything listens on 127.0.0.1 only.
#
# `up` is idempotent: a running cluster is reused (it checks the API server and the
# node's readiness); of a partly running one, the parts that run are kept and the others
# started. Concurrent calls wait for each other. On success it prints the kubeconfig's
# path (also at ${STATE}/admin.kubeconfig). `down` stops every part and removes the pods'
# containers; state (certificates, images) stays for the next `up`; `down --purge` removes
# it too.
#
# Environment:
#   AGENTBOX_CACHE     where setup-k8s.sh cached the binaries (default /var/cache/agentbox)
#   AGENTBOX_K8S_STATE the cluster's state (default /var/lib/agentbox-k8s)
#   AGENTBOX_K8S_RUN   pid files, the lock and containerd's socket (default /run/agentbox-k8s)
#   AGENTBOX_K8S_IMAGES images to import from dockerd (default: agentbox/busybox:latest
#                      agentbox/debian:bookworm); each is imported when missing or changed
set -euo pipefail

readonly K8S_VERSION=v1.34.2
readonly BIN=${AGENTBOX_CACHE:-/var/cache/agentbox}/k8s/${K8S_VERSION}
readonly STATE=${AGENTBOX_K8S_STATE:-/var/lib/agentbox-k8s}
readonly RUN=${AGENTBOX_K8S_RUN:-/run/agentbox-k8s}
readonly LOGS=/var/log/agentbox-k8s
readonly HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly CTRD_SOCK=${RUN}/containerd.sock
readonly ETCD_PORT=23791
readonly API_PORT=16443
readonly PAUSE_IMAGE=agentbox/pause:1
readonly NODE=$(hostname)
readonly PARTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)
IMAGES=${AGENTBOX_K8S_IMAGES:-agentbox/busybox:latest agentbox/debian:bookworm}

log() { printf 'k8s-cluster: %s\n' "$*" >&2; }
die() {
	printf 'k8s-cluster: error: %s\n' "$*" >&2
	exit 1
}

kubectl() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

pidfile() { echo "$RUN/$1.pid"; }

# starttime PID prints the process's start time in clock ticks since boot (field 22 of
# /proc/PID/stat), which with the pid names one process: a pid alone may name another
# process by now, since /run is not a tmpfs here and outlives a reboot or a restore
# from a snapshot.
starttime() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	# The fields after the command's name, which may hold spaces, start at field 3.
	# shellcheck disable=SC2086 # split on purpose
	set -- ${stat##*) }
	echo "${20}"
}

# alive NAME: the process recorded for NAME by start runs (same pid, same start time).
alive() {
	local f pid st
	f=$(pidfile "$1")
	[[ -f $f ]] || return 1
	read -r pid st <"$f" || true
	[[ -n $pid && -n $st ]] || return 1
	[[ $(starttime "$pid") == "$st" ]]
}

all_alive() {
	local p
	for p in "${PARTS[@]}"; do alive "$p" || return 1; done
}

# start NAME CMD...: runs one part in the background, its output in $LOGS/NAME.log.
start() {
	local name=$1
	shift
	if alive "$name"; then
		return
	fi
	setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
	local pid=$!
	# setsid execs in the same process (a background job does not lead its group), so
	# the start time read now stays the part's own.
	echo "$pid $(starttime "$pid")" >"$(pidfile "$name")"
}

stop_part() {
	local f pid
	f=$(pidfile "$1")
	[[ -f $f ]] || return 0
	if alive "$1"; then
		read -r pid _ <"$f"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			alive "$1" || break
			sleep 0.1
		done
		if alive "$1"; then kill -KILL "$pid" 2>/dev/null || true; fi
	fi
	rm -f "$f"
}

# report: which parts run, and the end of each part's log, for a start that failed (CI
# keeps only what the tests print).
report() {
	local p
	for p in "${PARTS[@]}"; do
		if alive "$p"; then log "$p: running"; else log "$p: not running"; fi
		[[ -f $LOGS/$p.log ]] && tail -n 8 "$LOGS/$p.log" | sed "s/^/k8s-cluster:   $p: /" >&2
	done
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || {
			report
			die "$what did not come up in ${secs}s (logs in $LOGS)"
		}
		sleep 0.2
	done
}

pki() {
	local d=$STATE/pki
	[[ -f $d/.complete ]] && return
	mkdir -p "$d"
	chmod 0700 "$d"
	log "making the cluster's CA, serving certificate, service-account key and tokens"
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=agentbox-k8s-ca \
		-keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
		-keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n' >"$d/san.ext"
	openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 3650 -extfile "$d/san.ext" -out "$d/apiserver.crt" 2>/dev/null
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	local admin kubelet
	admin=$(openssl rand -hex 24)
	kubelet=$(openssl rand -hex 24)
	printf '%s,admin,admin,system:masters\n%s,system:node:%s,kubelet,system:nodes\n' \
		"$admin" "$kubelet" "$NODE" >"$d/tokens.csv"
	kubeconfig "$STATE/admin.kubeconfig" admin "$admin"
	kubeconfig "$STATE/kubelet.kubeconfig" "system:node:$NODE" "$kubelet"
	touch "$d/.complete"
}

# kubeconfig FILE USER TOKEN
kubeconfig() {
	umask 077
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentbox
  cluster:
    server: https://127.0.0.1:${API_PORT}
    certificate-authority: ${STATE}/pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: agentbox
  context: {cluster: agentbox, user: $2}
current-context: agentbox
EOF
	umask 022
}

configs() {
	mkdir -p "$STATE/cni" "$STATE/cni-bin" "$STATE/containerd" "$STATE/kubelet"
	rm -f "$STATE/cni/10-loopback.conflist"
	cat >"$STATE/cni/10-nonet.conflist" <<'EOF'
{"cniVersion": "0.4.0", "name": "agentbox-nonet", "plugins": [{"type": "nonet"}]}
EOF
	ln -sf /usr/lib/cni/loopback "$STATE/cni-bin/loopback"
	if [[ ! -x $STATE/cni-bin/nonet || $HERE/k8s/nonet/main.go -nt $STATE/cni-bin/nonet ]]; then
		(cd "$HERE/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$STATE/cni-bin/nonet" ./nonet)
	fi
	# The runsc handler: gVisor's own containerd shim, which runs a pod's containers in one
	# sandbox, with the flags this machine's gVisor needs (as dockerd's registration has
	# them), when a shim built at the version of the runsc registered with dockerd is in the
	# cache (`GOBIN=DIR CGO_ENABLED=0 go install gvisor.dev/gvisor/shim@VERSION`, renamed
	# containerd-shim-runsc-v1). Not built by setup-k8s.sh: the shim sets its own
	# oom_score_adj to -999, which root cannot here (it lacks CAP_SYS_RESOURCE: the machine is
	# itself a sandbox), so it fails to start on this machine. The runc shim running runsc as
	# its runtime does not work either: a pod's containers must share one gVisor sandbox.
	local runsc shim=""
	runsc=$(jq -r '.runtimes.runsc.path // empty' /etc/docker/daemon.json 2>/dev/null || true)
	rm -f "$STATE/runsc"
	mkdir -p "$STATE/bin"
	if [[ -n $runsc && -x $runsc ]]; then
		shim=${AGENTBOX_CACHE:-/var/cache/agentbox}/k8s/gvisor-shim/$(basename "$(dirname "$runsc")")/containerd-shim-runsc-v1
	fi
	if [[ -n $shim && -x $shim ]]; then
		ln -sf "$shim" "$STATE/bin/containerd-shim-runsc-v1"
		cat >"$STATE/runsc.toml" <<EOF
binary_name = "$runsc"
root = "${RUN}/runsc"
[runsc_config]
  network = "none"
  host-uds = "open"
  platform = "systrap"
EOF
		touch "$STATE/runsc"
	fi
	cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "${STATE}/containerd/root"
state = "${RUN}/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri.v1alpha2"]

[grpc]
  address = "${CTRD_SOCK}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/${PAUSE_IMAGE}"
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  # Root here lacks CAP_SYS_RESOURCE (the machine is itself a sandbox), so no process may
  # lower its oom_score_adj: the kubelet's -998 for a pod's sandbox container would fail
  # runc's init. This keeps every container's at or above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${STATE}/cni-bin"
    conf_dir = "${STATE}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "${RUN}/runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "${STATE}/runsc.toml"
EOF
	cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# Only clients with a certificate of the cluster's CA (none is issued: the API
# server's logs and exec through the kubelet are not needed) and nothing
# anonymous; it listens on loopback only.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ${STATE}/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${CTRD_SOCK}
failSwapOn: false
failCgroupV1: false
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "64Mi", nodefs.available: "1%", imagefs.available: "1%"}
maxPods: 250
# A backstop for every pod; agentbox writes each sandbox's own, lower, limit into
# its pod's cgroup.
podPidsLimit: 4096
EOF
}

# import_images: the pause image, built here, and agentbox's images from dockerd.
import_images() {
	local ctr=(ctr --address "$CTRD_SOCK" --namespace k8s.io)
	if ! "${ctr[@]}" images ls -q | grep -qx "docker.io/${PAUSE_IMAGE}"; then
		log "building the pod sandbox image ${PAUSE_IMAGE}"
		local tmp
		tmp=$(mktemp -d)
		(cd "$HERE/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/pause" ./pause)
		printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$tmp/Dockerfile"
		DOCKER_BUILDKIT=0 docker build -q -t "$PAUSE_IMAGE" "$tmp" >/dev/null
		rm -rf "$tmp"
		IMAGES="$PAUSE_IMAGE $IMAGES"
	fi
	local img id want mark
	mkdir -p "$STATE/imported"
	for img in $IMAGES; do
		id=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) || {
			log "image $img: not in dockerd, not imported"
			continue
		}
		want=docker.io/$img
		[[ $img == */*/* ]] && want=$img
		# What was imported is recorded by dockerd's image id: containerd
		# lists the manifest's digest, which a docker save makes anew.
		mark=$STATE/imported/$(printf '%s' "$img" | tr '/:' '__')
		if [[ -f $mark && $(cat "$mark") == "$id" ]] && "${ctr[@]}" images ls -q | grep -qx "$want"; then
			continue
		fi
		log "importing $img into the cluster's containerd"
		docker save "$img" | "${ctr[@]}" images import - >/dev/null
		echo "$id" >"$mark"
	done
}

up() {
	[[ -f $BIN/.complete ]] || die "no kubernetes binaries at $BIN: run scripts/setup-k8s.sh"
	mkdir -p "$RUN" "$LOGS" "$STATE"
	if all_alive && kubectl get --raw /readyz >/dev/null 2>&1 &&
		kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True; then
		import_images
		runtime_classes
		echo "$STATE/admin.kubeconfig"
		return
	fi
	pki
	configs
	# kubectl beside the kubeconfig, for whoever holds one (agentbox bench looks there).
	ln -sf "$BIN/kubectl" "$STATE/kubectl"
	start etcd etcd --name agentbox --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
		--listen-peer-urls http://127.0.0.1:23792 --initial-advertise-peer-urls http://127.0.0.1:23792 \
		--initial-cluster agentbox=http://127.0.0.1:23792
	PATH="$STATE/bin:$PATH" start containerd containerd --config "$STATE/containerd/config.toml"
	wait_for containerd 30 ctr --address "$CTRD_SOCK" version
	import_images
	# --allow-privileged as kubeadm has it: agentbox's own DaemonSet (deploy/kubernetes) is
	# privileged; its sandbox pods never are.
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:${ETCD_PORT}" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
		--tls-cert-file "$STATE/pki/apiserver.crt" --tls-private-key-file "$STATE/pki/apiserver.key" \
		--client-ca-file "$STATE/pki/ca.crt" --token-auth-file "$STATE/pki/tokens.csv" \
		--authorization-mode Node,RBAC \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$STATE/pki/sa.pub" \
		--service-account-signing-key-file "$STATE/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
		--kubelet-preferred-address-types InternalIP,Hostname \
		--allow-privileged=true --profiling=false
	wait_for kube-apiserver 90 kubectl get --raw /readyz
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/admin.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=false \
		--service-account-private-key-file "$STATE/pki/sa.key" --root-ca-file "$STATE/pki/ca.crt" \
		--controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' --profiling=false
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$STATE/admin.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false
	start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" \
		--kubeconfig "$STATE/kubelet.kubeconfig" --root-dir "$STATE/kubelet/root" \
		--hostname-override "$NODE" --node-ip 127.0.0.1
	wait_for "the node ${NODE}" 120 sh -c "'$BIN/kubectl' --kubeconfig '$STATE/admin.kubeconfig' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
	wait_for "the default service account" 60 kubectl -n default get serviceaccount default
	runtime_classes
	log "up: node ${NODE} ready (kubeconfig ${STATE}/admin.kubeconfig)"
	echo "$STATE/admin.kubeconfig"
}

# runtime_classes: runc under a RuntimeClass name of its own (for tests of pods that name
# a class), and gvisor where its shim is wired in (see configs), else none of that name.
runtime_classes() {
	printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: runc}\nhandler: runc\n' |
		kubectl apply -f - >/dev/null
	if [[ -f $STATE/runsc ]]; then
		printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n' |
			kubectl apply -f - >/dev/null
	else
		kubectl delete runtimeclass gvisor --ignore-not-found >/dev/null
	fi
}

down() {
	local i
	for ((i = ${#PARTS[@]} - 1; i >= 0; i--)); do
		if [[ ${PARTS[i]} == containerd ]] && alive containerd; then
			# The pods' containers outlive the kubelet: end them with their runtime.
			crictl_rm || true
		fi
		stop_part "${PARTS[i]}"
	done
	# The kubelet's volume mounts.
	{ grep -o " ${STATE}/kubelet/root/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	if [[ ${1:-} == --purge ]]; then
		rm -rf "$STATE"
	fi
	log "down"
}

crictl_rm() {
	local ctr=(ctr --address "$CTRD_SOCK" --namespace k8s.io)
	local t
	for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
	sleep 0.5
	for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks rm -f "$t" >/dev/null 2>&1 || true; done
	for t in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers rm "$t" >/dev/null 2>&1 || true; done
}

status() {
	local p
	for p in "${PARTS[@]}"; do
		if alive "$p"; then echo "$p: running (pid $(cut -d' ' -f1 "$(pidfile "$p")"))"; else echo "$p: stopped"; fi
	done
}

# lock: one up or down at a time (test binaries run in parallel and each brings the
# cluster up); the lock dies with its holder.
lock() {
	mkdir -p "$RUN"
	exec 9>"$RUN/lock"
	flock 9
}

case ${1:-} in
up)
	lock
	up
	;;
down)
	lock
	down "${2:-}"
	;;
status) status ;;
*) die "usage: k8s-cluster.sh up|down [--purge]|status" ;;
esac
