// Package kubernetes is the execution backend that runs each sandbox as a
// pod of a Kubernetes cluster, through client-go.
//
// The pod is pinned to the node the daemon runs on (Options.Node): the
// workspace, the guest binary and the run directory, where the daemon
// listens on a unix socket the guest dials, reach it as hostPath volumes,
// exactly as the docker backend binds them. So the guest needs no network,
// and the pod gets none from agentbox: no service account token, no
// service links in its environment, a default-deny NetworkPolicy over
// every agentbox pod of the namespace (for network plugins that enforce
// them), and whatever egress its policy allows goes through agentbox's
// proxy on the same socket path as on the other backends.
//
// Every pod is non-root where the guest allows it, with a read-only root,
// every capability dropped but the few the guest needs to become its own
// user (as on docker), no privilege escalation, the runtime's default
// seccomp profile, requests and limits from the sandbox's limits, and the
// RuntimeClass of Options.RuntimeClass (gVisor, for example).
//
// Stop ends a pod's processes and keeps the pod (through its active
// deadline); Remove deletes it at once and waits until the kubelet reports
// it gone, so that nothing of a sandbox runs after either returns.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/hostbind"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Name is the backend's name.
const Name = "kubernetes"

// LabelBackend names the backend on every pod, beside sandbox's labels.
const LabelBackend = "agentbox.backend"

// guestEnvPrefix starts every variable the guest may be given.
const guestEnvPrefix = "AGENTBOX_GUEST_"

// guestCaps are what a guest with a user of its own starts with (see the
// docker backend): three it keeps, CAP_SETPCAP to empty its bounding set
// before it drops that too.
var guestCaps = []corev1.Capability{"SETUID", "SETGID", "KILL", "SETPCAP"}

// validID is what a sandbox id must look like to name a pod.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,50}$`)

// Options configure a Backend.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; empty: the in-cluster
	// configuration (the daemon running as a pod).
	Kubeconfig string
	// Namespace holds agentbox's pods (default "agentbox"; made if missing).
	Namespace string
	// Node is the node the daemon runs on, where every pod is placed
	// (the workspace is on its disk). Default: the host name.
	Node string
	// RuntimeClass, when set, is the RuntimeClass of a pod whose policy
	// names none (e.g. gvisor).
	RuntimeClass string
	// RuntimeClasses are the other RuntimeClasses a sandbox's policy may
	// name (policy runtime_class); any other is refused, so that a policy
	// never picks a runtime the operator did not list.
	RuntimeClasses []string
	// StopTimeout is the grace period of Stop (default 10s).
	StopTimeout time.Duration
	// MountDir holds the nosuid,nodev binds of workspaces that are not on
	// such a mount already (see package hostbind); one per daemon.
	MountDir string
	// RequireNode fails a create whose node-local settings cannot be
	// applied on this node (the pids limit, the termination log; see
	// node_linux.go); otherwise they are logged and the kubelet's
	// podPidsLimit is all that limits processes.
	RequireNode bool
	// StartTimeout bounds how long Create waits for the pod to run
	// (default 2m: an image being unpacked on a busy node).
	StartTimeout time.Duration
	// Logger receives what the backend does on its own.
	Logger *slog.Logger
}

// Backend runs sandboxes as pods.
type Backend struct {
	c            k8s.Interface
	ns           string
	node         string
	runtimeClass string
	classes      []string
	mountDir     string
	requireNode  bool
	stopTimeout  time.Duration
	startTimeout time.Duration
	log          *slog.Logger
}

// New connects to the cluster and makes the namespace and its default-deny
// NetworkPolicy if they are missing.
func New(ctx context.Context, o Options) (*Backend, error) {
	if o.Namespace == "" {
		o.Namespace = "agentbox"
	}
	if o.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("kubernetes backend: the node's name: %w", err)
		}
		o.Node = h
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.MountDir == "" {
		return nil, errdefs.Invalid("kubernetes backend: no mount directory")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: kubeconfig %q: %w", o.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	c, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	b := &Backend{c: c, ns: o.Namespace, node: o.Node, runtimeClass: o.RuntimeClass, classes: o.RuntimeClasses, mountDir: o.MountDir, requireNode: o.RequireNode,
		stopTimeout: o.StopTimeout, startTimeout: o.StartTimeout, log: o.Logger.With("backend", Name)}
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// prepare checks the node and makes the namespace and the NetworkPolicy.
func (b *Backend) prepare(ctx context.Context) error {
	if _, err := b.c.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("kubernetes backend: node %s (the daemon's own, where its workspaces are): %w", b.node, apiErr(err))
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns, Labels: map[string]string{sandbox.LabelManaged: "1"}}}
	if _, err := b.c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes backend: namespace %s: %w", b.ns, apiErr(err))
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "agentbox-default-deny", Labels: map[string]string{sandbox.LabelManaged: "1"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{sandbox.LabelManaged: "1"}},
			// Both directions named and no rule: nothing in, nothing out.
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if _, err := b.c.NetworkingV1().NetworkPolicies(b.ns).Create(ctx, np, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes backend: default-deny NetworkPolicy in %s: %w", b.ns, apiErr(err))
	}
	return nil
}

// Name is "kubernetes".
func (b *Backend) Name() string { return Name }

// Client is the backend's clientset (for tests and the reconciler).
func (b *Backend) Client() k8s.Interface { return b.c }

// Namespace is where the backend's pods are.
func (b *Backend) Namespace() string { return b.ns }

// bindPath is the directory of the workspace binds of sandbox id.
func (b *Backend) bindPath(id string) string { return filepath.Join(b.mountDir, id) }

// classOf is the RuntimeClass of a sandbox of spec: its policy's, or the
// daemon's default.
func (b *Backend) classOf(spec sandbox.Spec) string {
	if spec.Policy != nil && spec.Policy.RuntimeClass != "" {
		return spec.Policy.RuntimeClass
	}
	return b.runtimeClass
}

// podHostname is sandbox id's host name: a DNS label, so no underscore.
func podHostname(id string) string { return strings.ReplaceAll(id, "_", "-") }

// podName is sandbox id's pod: a DNS label, so no underscore.
func podName(id string) string { return "agentbox-" + strings.ReplaceAll(id, "_", "-") }

// Create starts a pod running the guest and waits until its container
// runs. On error the pod is deleted.
func (b *Backend) Create(ctx context.Context, req sandbox.CreateRequest) (_ sandbox.Info, err error) {
	spec := req.Spec.WithDefaults()
	if err := b.validate(req, spec); err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	// The workspace must be nosuid,nodev inside (SECURITY.md B14): a
	// hostPath volume is a bind, which keeps the flags of its source.
	files, release, err := hostbind.Workspace(b.bindPath(req.ID), req.Files, nil)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: workspace %s: %w", req.ID, req.Files, err)
	}
	defer func() {
		if err != nil {
			if rerr := release(); rerr != nil {
				b.log.Warn("releasing the workspace bind of a failed create", "sandbox_id", req.ID, "err", rerr)
			}
		}
	}()
	// /tmp and the /etc files come from tmpfs mounts of the backend's
	// own (see package hostbind): an emptyDir is neither nosuid nor
	// nodev, and the runtime's /etc files name host paths. Both leave the
	// host once the container has started with its copies.
	tmpDir, etcDir := filepath.Join(b.bindPath(req.ID), "tmp"), filepath.Join(b.bindPath(req.ID), "etc")
	releaseTmp, err := hostbind.Tmp(tmpDir, spec.Limits.TmpBytes)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	defer releaseTmp()
	releaseEtc, err := hostbind.Etc(etcDir, podHostname(req.ID))
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	defer releaseEtc()
	pod := b.pod(req, spec, files, tmpDir, etcDir)
	created, err := b.c.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return sandbox.Info{}, fmt.Errorf("creating sandbox %s: pod %s exists: %w", req.ID, pod.Name, errdefs.ErrConflict)
		}
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: pod %s: %w", req.ID, pod.Name, apiErr(err))
	}
	defer func() {
		if err != nil {
			// Not the caller's context: it may be what ended the wait.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.stopTimeout+30*time.Second)
			defer cancel()
			if rerr := b.delete(dctx, pod.Name, 0); rerr != nil {
				b.log.Warn("deleting the pod of a failed create", "sandbox_id", req.ID, "pod", pod.Name, "err", rerr)
			}
		}
	}()
	running, err := b.waitRunning(ctx, created)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: pod %s: %w", req.ID, pod.Name, err)
	}
	if err := b.onNode(ctx, running, spec.Limits.Pids); err != nil {
		if b.requireNode {
			return sandbox.Info{}, fmt.Errorf("creating sandbox %s: pod %s: %w", req.ID, pod.Name, err)
		}
		b.log.Warn("node-local settings of a sandbox pod not applied: its pids limit is the kubelet's podPidsLimit and /dev/termination-log stays writable", "sandbox_id", req.ID, "err", err)
	}
	return b.info(running), nil
}

// onNode does on the pod's node what the pod spec cannot say (see
// node_linux.go): the sandbox's own pids limit, and no writable host file
// at /dev/termination-log. Under a RuntimeClass whose handler is not runc
// the container's processes are the runtime's (gVisor's sentry), whose
// mount namespace is not the sandbox's, so only the limit is set.
func (b *Backend) onNode(ctx context.Context, p *corev1.Pod, pids int64) error {
	dir, err := podCgroup(string(p.UID))
	if err != nil {
		return err
	}
	if err := limitPids(dir, pids); err != nil {
		return err
	}
	if rc := p.Spec.RuntimeClassName; rc != nil {
		c, err := b.c.NodeV1().RuntimeClasses().Get(ctx, *rc, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("RuntimeClass %s: %w", *rc, apiErr(err))
		}
		if c.Handler != "runc" {
			return nil
		}
	}
	id, err := containerID(p)
	if err != nil {
		return err
	}
	procs, err := containerPids(dir, id)
	if err != nil {
		return err
	}
	if len(procs) == 0 {
		return fmt.Errorf("container %s has no process", id)
	}
	return dropTerminationLog(procs[0])
}

// containerID is the runtime's id of the sandbox's container in pod p.
func containerID(p *corev1.Pod) (string, error) {
	for _, cs := range p.Status.ContainerStatuses {
		if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok && id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("pod %s reports no container id", p.Name)
}

// Pids are the host pids of pod ref's sandbox container (the guest and
// every command), read from its cgroup on this node.
func (b *Backend) Pids(ctx context.Context, ref string) ([]int, error) {
	p, err := b.c.CoreV1().Pods(b.ns).Get(ctx, ref, metav1.GetOptions{})
	if err != nil {
		return nil, apiErr(err)
	}
	id, err := containerID(p)
	if err != nil {
		return nil, err
	}
	dir, err := podCgroup(string(p.UID))
	if err != nil {
		return nil, err
	}
	return containerPids(dir, id)
}

// validate checks what Create needs before anything is made.
func (b *Backend) validate(req sandbox.CreateRequest, spec sandbox.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := req.CheckGuestUser(); err != nil {
		return err
	}
	if len(req.GuestEnv) == 0 {
		return errdefs.Invalid("no guest environment: the guest would start without its token")
	}
	for _, e := range req.GuestEnv {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(k, guestEnvPrefix) || strings.IndexByte(e, 0) >= 0 {
			return errdefs.Invalid("guest environment entry %q is not %s*=value", k, guestEnvPrefix)
		}
	}
	switch {
	case !validID.MatchString(req.ID):
		return errdefs.Invalid("sandbox id %q is not usable in a pod name", req.ID)
	case req.WorkspaceID == "":
		return errdefs.Invalid("no workspace id")
	case req.UID <= 0 || req.GID <= 0:
		return errdefs.Invalid("uid:gid %d:%d: sandboxes run as a non-root user and group", req.UID, req.GID)
	case spec.Backend != "" && spec.Backend != Name:
		return errdefs.Invalid("spec asks for backend %q, this is %q", spec.Backend, Name)
	}
	if rc := b.classOf(spec); rc != b.runtimeClass && !slices.Contains(b.classes, rc) {
		return errdefs.Invalid("policy runtime_class %q is not one this daemon allows (kubernetes.runtime_classes: %s)", rc, strings.Join(b.classes, ", "))
	}
	return req.CheckHostPaths(false)
}

// pod is the pod of one sandbox.
func (b *Backend) pod(req sandbox.CreateRequest, spec sandbox.Spec, files, tmpDir, etcDir string) *corev1.Pod {
	l := spec.Limits
	no, yes := false, true
	grace := int64(b.stopTimeout.Seconds() + 0.999)
	uid, gid := int64(req.UID), int64(req.GID)
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	nonRoot := &yes
	if req.GuestUID != 0 {
		// As on docker: the guest starts as root with only the
		// capabilities it needs to become its own user and run commands
		// as the sandbox user, and drops root before anything else runs.
		uid, gid, nonRoot = 0, 0, &no
		caps.Add = guestCaps
	}
	env := []corev1.EnvVar{}
	for _, e := range append(req.GuestEnvUsers(), req.GuestEnv...) {
		k, v, _ := strings.Cut(e, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	cpu := resource.NewMilliQuantity(int64(l.CPUs*1000+0.5), resource.DecimalSI)
	mem := resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
	// Requests are a tenth of the CPU limit and a quarter of the memory
	// limit: idle sandboxes are the common case, and requests equal to
	// the limits would let a 2-core node hold two sandboxes.
	cpuReq := resource.NewMilliQuantity(max(int64(l.CPUs*100), 10), resource.DecimalSI)
	memReq := resource.NewQuantity(l.MemoryBytes/4, resource.BinarySI)
	file, dir := corev1.HostPathFile, corev1.HostPathDirectory
	lbl := map[string]string{
		sandbox.LabelManaged:   "1",
		sandbox.LabelSandbox:   req.ID,
		sandbox.LabelWorkspace: req.WorkspaceID,
		LabelBackend:           Name,
	}
	if req.Owner != "" {
		lbl[sandbox.LabelOwner] = req.Owner
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(req.ID), Namespace: b.ns, Labels: lbl},
		Spec: corev1.PodSpec{
			NodeName:                      b.node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      podHostname(req.ID),
			TerminationGracePeriodSeconds: &grace,
			// No DNS: the sandbox has no network to ask on. The API
			// requires a nameserver with policy None: loopback, where
			// nothing answers.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "sandbox",
				Image:           spec.Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{sandbox.GuestPath},
				Args:            append([]string{}, req.GuestArgs...),
				WorkingDir:      "/",
				Env:             env,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem},
					Requests: corev1.ResourceList{corev1.ResourceCPU: *cpuReq, corev1.ResourceMemory: *memReq},
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                &uid,
					RunAsGroup:               &gid,
					RunAsNonRoot:             nonRoot,
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities:             caps,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "guest", MountPath: sandbox.GuestPath, ReadOnly: true},
					// Read-only, as on docker: the guest only connects to
					// the daemon's socket there.
					{Name: "run", MountPath: sandbox.RunDir, ReadOnly: true},
					{Name: "workspace", MountPath: sandbox.WorkspaceDir},
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "guest", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: req.Guest, Type: &file}}},
				{Name: "run", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: req.RunDir, Type: &dir}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: files, Type: &dir}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tmpDir, Type: &dir}}},
			},
		},
	}
	c := &p.Spec.Containers[0]
	for i, f := range hostbind.EtcFiles {
		name := fmt.Sprintf("etc%d", i)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(etcDir, f.Name), Type: &file}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: f.Target, ReadOnly: true})
	}
	if rc := b.classOf(spec); rc != "" {
		p.Spec.RuntimeClassName = &rc
	}
	return p
}

// waitRunning watches pod until its container runs, or fails with the
// reason the kubelet gives.
func (b *Backend) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, b.startTimeout)
	defer cancel()
	p, gone, err := b.waitPod(ctx, pod, started)
	switch {
	case gone:
		return nil, fmt.Errorf("deleted while starting: %w", errdefs.ErrNotFound)
	case err != nil:
		return nil, startErr(ctx, err)
	}
	return p, nil
}

// waitPod watches pod p, as last read, until done says so (its error ends
// the wait too), the pod is gone (gone: deleted, or its name taken by
// another pod), or ctx ends. A watch the server ends is opened again from
// the pod read anew.
func (b *Backend) waitPod(ctx context.Context, p *corev1.Pod, done func(*corev1.Pod) (bool, error)) (_ *corev1.Pod, gone bool, _ error) {
	pods := b.c.CoreV1().Pods(b.ns)
	uid := p.UID
	for {
		if ok, err := done(p); ok || err != nil {
			return p, false, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name, ResourceVersion: p.ResourceVersion})
		if err != nil {
			return p, false, apiErr(err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return p, true, nil
			}
			q, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Error {
				continue
			}
			p = q
			if ok, err := done(p); ok || err != nil {
				w.Stop()
				return p, false, err
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return p, false, err
		}
		q, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && q.UID != uid) {
			return p, true, nil
		}
		if err != nil {
			return p, false, apiErr(err)
		}
		p = q
	}
}

func startErr(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("not running before the start timeout: %w", errdefs.ErrUnavailable)
	}
	return err
}

// waitingFatal are container waiting reasons that do not resolve by
// waiting: an image that is not on the node (nothing is pulled) or a
// container the runtime cannot make.
var waitingFatal = map[string]bool{
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
}

// started reports whether pod's container runs (true, nil), will never
// run (error), or may still (false, nil).
func started(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("ended before it ran (%s: %s %s)%w", pod.Status.Phase, pod.Status.Reason, pod.Status.Message, containerEnd(pod))
	}
	if pod.DeletionTimestamp != nil {
		return false, fmt.Errorf("deleted while starting: %w", errdefs.ErrNotFound)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		switch {
		case cs.State.Running != nil:
			return true, nil
		case cs.State.Terminated != nil:
			return false, fmt.Errorf("the guest ended at once (exit %d, %s: %s)", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason, cs.State.Terminated.Message)
		case cs.State.Waiting != nil && waitingFatal[cs.State.Waiting.Reason]:
			err := fmt.Errorf("%s: %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
			if strings.Contains(cs.State.Waiting.Reason, "Image") {
				return false, fmt.Errorf("image %s is not on node %s (nothing is pulled; import it into the node's container runtime): %w: %w", pod.Spec.Containers[0].Image, pod.Spec.NodeName, err, errdefs.ErrInvalid)
			}
			return false, err
		}
	}
	return false, nil
}

func containerEnd(pod *corev1.Pod) error {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Errorf("; the guest exited %d (%s)", t.ExitCode, t.Reason)
		}
	}
	return nil
}

// info is what agentbox knows of a pod.
func (b *Backend) info(p *corev1.Pod) sandbox.Info {
	st := sandbox.StateStopped
	if p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending) {
		st = sandbox.StateRunning
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				st = sandbox.StateStopped
			}
		}
	}
	lbl := map[string]string{}
	for k, v := range p.Labels {
		if strings.HasPrefix(k, "agentbox.") {
			lbl[k] = v
		}
	}
	return sandbox.Info{ID: p.Labels[sandbox.LabelSandbox], Backend: Name, Ref: p.Name, State: st, Labels: lbl}
}

// Inspect reports on pod ref. A pod that is not agentbox's is not found.
func (b *Backend) Inspect(ctx context.Context, ref string) (sandbox.Info, error) {
	if ref == "" {
		return sandbox.Info{}, errdefs.Invalid("empty pod reference")
	}
	p, err := b.c.CoreV1().Pods(b.ns).Get(ctx, ref, metav1.GetOptions{})
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("inspecting sandbox pod %s: %w", ref, apiErr(err))
	}
	if p.Labels[sandbox.LabelManaged] != "1" || p.Labels[LabelBackend] != Name {
		return sandbox.Info{}, fmt.Errorf("inspecting sandbox pod %s: not an agentbox pod: %w", ref, errdefs.ErrNotFound)
	}
	return b.info(p), nil
}

// List returns the pods carrying all the given labels, in name order.
func (b *Backend) List(ctx context.Context, want map[string]string) ([]sandbox.Info, error) {
	sel := map[string]string{LabelBackend: Name}
	for k, v := range want {
		sel[k] = v
	}
	pods, err := b.c.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		return nil, fmt.Errorf("listing sandbox pods: %w", apiErr(err))
	}
	out := make([]sandbox.Info, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, b.info(&pods.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, nil
}

// Stop ends every process of pod ref and keeps the pod: it sets the pod's
// active deadline to one second after its start, so the kubelet kills its
// containers (with the grace period) and marks it Failed, and waits for
// that. Stopping a pod that has ended, or is gone, is not an error.
func (b *Backend) Stop(ctx context.Context, ref string) error {
	if err := b.stop(ctx, ref); err != nil {
		return fmt.Errorf("stopping sandbox pod %s: %w", ref, err)
	}
	return nil
}

func (b *Backend) stop(ctx context.Context, name string) error {
	pods := b.c.CoreV1().Pods(b.ns)
	p, err := b.ownPod(ctx, name)
	if p == nil || err != nil {
		return err
	}
	if ended(p) {
		return nil
	}
	patch := []byte(`{"spec":{"activeDeadlineSeconds":1}}`)
	if p, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return apiErr(err)
	}
	_, _, err = b.waitPod(ctx, p, func(p *corev1.Pod) (bool, error) { return ended(p), nil })
	return err
}

// ended reports whether every process of pod p has ended.
func ended(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// Remove deletes pod ref at once and waits until it is gone. A pod that is
// already gone is not an error.
func (b *Backend) Remove(ctx context.Context, ref string) error {
	if err := b.delete(ctx, ref, 0); err != nil {
		return fmt.Errorf("removing sandbox pod %s: %w", ref, err)
	}
	if id, ok := sandboxID(ref); ok {
		if err := hostbind.UnmountAndRemove(b.bindPath(id)); err != nil {
			return fmt.Errorf("removing sandbox pod %s: %w", ref, err)
		}
	}
	return nil
}

// sandboxID is the sandbox id of pod name, if it is one of agentbox's.
func sandboxID(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "agentbox-")
	if !ok {
		return "", false
	}
	id := strings.ReplaceAll(rest, "-", "_")
	return id, validID.MatchString(id) && podName(id) == name
}

// ownPod is agentbox's pod name; nil when it is gone, an error wrapping
// ErrNotFound when it is not agentbox's.
func (b *Backend) ownPod(ctx context.Context, name string) (*corev1.Pod, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		return nil, errdefs.Invalid("pod reference %q", name)
	}
	p, err := b.c.CoreV1().Pods(b.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, apiErr(err)
	}
	if p.Labels[sandbox.LabelManaged] != "1" || p.Labels[LabelBackend] != Name {
		return nil, fmt.Errorf("not an agentbox pod: %w", errdefs.ErrNotFound)
	}
	return p, nil
}

// delete deletes pod name with grace seconds and waits until the API
// server no longer has it, which it only allows once the kubelet has
// ended its containers.
func (b *Backend) delete(ctx context.Context, name string, grace int64) error {
	pods := b.c.CoreV1().Pods(b.ns)
	p, err := b.ownPod(ctx, name)
	if p == nil || err != nil {
		return err
	}
	uid := p.UID
	err = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return apiErr(err)
	}
	// Until it is gone: the API server keeps it until the kubelet has
	// ended its containers.
	_, _, err = b.waitPod(ctx, p, func(*corev1.Pod) (bool, error) { return false, nil })
	return err
}

// apiErr classifies an error of the API server.
func apiErr(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrConflict)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
	case apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
	}
	return err
}
