// Package config is agentbox's one typed configuration: defaults in code,
// an optional YAML file (strict: unknown keys are errors), environment
// variables, then flags, validated once at start.
package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/store"
)

// Duration is a time.Duration written as "30s" in files.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "30s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		d.Duration = v
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration %s: want a string like \"30s\"", b)
	}
	d.Duration = time.Duration(n * float64(time.Second))
	return nil
}

// Config is the daemon's configuration.
type Config struct {
	// DataDir holds the database, socket, repos and workspaces.
	DataDir string `json:"data_dir"`
	// Store is the database: empty for the SQLite file DataDir/agentbox.db,
	// or a postgres:// URL. The data dir keeps the files either way.
	Store string `json:"store"`
	// Listen is empty for the unix socket DataDir/agentbox.sock, or
	// "tcp://HOST:PORT" (which requires Token).
	Listen string `json:"listen"`
	// NodeAddr is where the other nodes sharing the store reach this one
	// (unix:///path or tcp://HOST:PORT); empty: the listening address,
	// which must then be reachable from them (not 0.0.0.0).
	NodeAddr string `json:"node_addr"`
	// NodeHeartbeat is how often this node records that it is alive; it
	// counts as lost after three missed beats.
	NodeHeartbeat Duration `json:"node_heartbeat"`
	// NodeShared says that this data dir's workspaces directory is on
	// storage every node reaches at the same path (a shared file system):
	// when this node is lost another adopts its copy-driver workspaces.
	NodeShared bool `json:"node_shared"`
	// Token is the bearer token required on TCP.
	Token string `json:"token"`
	// WorkspaceDriver is "auto", "overlay" or "copy".
	WorkspaceDriver string `json:"workspace_driver"`
	// WorkspaceDiskQuota is the disk quota of a workspace whose request
	// names none ("10G"): what it adds to its base lives in a file system
	// of this size. 0 turns quotas off for such workspaces.
	WorkspaceDiskQuota policy.ByteSize `json:"workspace_disk_quota"`
	// SandboxUID and SandboxGID own workspace files: the user commands run
	// as inside sandboxes. -1 keeps the daemon's own user.
	SandboxUID int `json:"sandbox_uid"`
	SandboxGID int `json:"sandbox_gid"`
	// GuestUID and GuestGID are the guest's own user inside sandboxes,
	// apart from the sandbox user, so that commands cannot reach its
	// control channel (SECURITY.md H44); 0 is agentbox's default
	// (manager.DefaultGuestUID), -1 runs the guest as the sandbox user.
	GuestUID int `json:"guest_uid"`
	GuestGID int `json:"guest_gid"`
	// GitTimeout bounds host-side git work on one workspace (diff, commit).
	GitTimeout Duration `json:"git_timeout"`
	// MaxDiffBytes caps the size of a diff.
	MaxDiffBytes int64 `json:"max_diff_bytes"`
	// AuthorName and AuthorEmail sign commits made through the API.
	AuthorName  string `json:"author_name"`
	AuthorEmail string `json:"author_email"`
	// LogLevel is debug, info, warn or error; LogFormat json or text.
	LogLevel  string `json:"log_level"`
	LogFormat string `json:"log_format"`
	// ShutdownGrace is how long a stopping daemon lets requests finish.
	ShutdownGrace Duration `json:"shutdown_grace"`
	// SandboxIdleTimeout stops a sandbox with no API activity and no
	// command running for this long (its workspace stays; the next exec
	// starts a new one); 0 never does.
	SandboxIdleTimeout Duration `json:"sandbox_idle_timeout"`
	// SandboxMaxAge stops a sandbox this long after it started, whatever
	// it does; 0 never does.
	SandboxMaxAge Duration `json:"sandbox_max_age"`
	// DataBudget is the disk the data dir may take ("50GiB"); when it is
	// over, the collector removes idle sandboxes, unused pristine
	// checkouts, least recently used repo caches and (with
	// WorkspaceRetention) clean workspaces until it is within. 0: no
	// budget, no collection.
	DataBudget policy.ByteSize `json:"data_budget"`
	// WorkspaceRetention lets the collector remove a clean workspace
	// unused for this long; 0 (the default) never removes a workspace.
	WorkspaceRetention Duration `json:"workspace_retention"`
	// AutoApprove lets the daemon approve a candidate whose every check
	// passed (tests, regression, diff check), recorded as approved by
	// "policy". false (the default): a person approves.
	AutoApprove bool `json:"auto_approve"`
	// PushBranch names the branch a candidate is pushed to: {task} (the
	// task as a branch word), {ws} and {repo}; default
	// "agentbox/{task}/{ws}". It must hold {ws}, so that attempts never
	// share a branch.
	PushBranch string `json:"push_branch"`
	// GCInterval is how often the daemon collects when a budget is set.
	GCInterval Duration `json:"gc_interval"`
	// ReconcileInterval is how often the reconciler compares the database
	// with what exists and repairs both ways (it always runs once before
	// the daemon serves); 0 runs it only at start.
	ReconcileInterval Duration `json:"reconcile_interval"`
	// DefaultBackend is the execution backend of a sandbox that names none:
	// "auto" (docker when an engine answers, else local), docker, gvisor
	// or local.
	DefaultBackend string `json:"default_backend"`
	// DefaultImage is the image of a sandbox that names none.
	DefaultImage string `json:"default_image"`
	// GuestBinary is the static agentbox-guest binary run as every
	// sandbox's init; default: agentbox-guest next to the agentbox binary.
	GuestBinary string `json:"guest_binary"`
	// DockerHost is the container engine's address (default $DOCKER_HOST
	// or the local socket).
	DockerHost string `json:"docker_host"`
	// WarmPool lists the warm pools: per backend and image, how many
	// environments are kept started (with the default policy) to be handed
	// out on sandbox creation. None by default.
	WarmPool []WarmPool `json:"warm_pool"`
	// E2BListen, "tcp://HOST:PORT", serves the E2B-compatible endpoint
	// there (both its control API and its in-sandbox API, package e2b);
	// empty serves none. It requires Token, which is the E2B API key.
	E2BListen string `json:"e2b_listen"`
	// E2BTemplates maps E2B template IDs to what a sandbox of each runs;
	// "base" (the SDK's default) is the daemon's default image unless
	// this table says otherwise.
	E2BTemplates map[string]E2BTemplate `json:"e2b_templates"`
	// E2BInternetAllow is the allowlist (host[:port] patterns, as in a
	// policy) an E2B sandbox created with allow_internet_access gets;
	// without it, or empty, such a sandbox reaches nothing either: E2B's
	// "internet access" never opens the network.
	E2BInternetAllow []string `json:"e2b_internet_allow"`
	// Egress configures the egress proxy beyond what sandbox policies
	// say: what only the operator may decide.
	Egress Egress `json:"egress"`
	// Dependencies is the operator's dependency manifest: the packages an
	// agent may have admitted into its workspace.
	Dependencies Dependencies `json:"dependencies"`
	// Kubernetes, when set, adds the kubernetes backend: each of its
	// sandboxes is a pod of that cluster on this daemon's node.
	Kubernetes *Kubernetes `json:"kubernetes"`
	// Dashboard configures the web dashboard served at / on Listen.
	Dashboard Dashboard `json:"dashboard"`
}

// Dashboard configures the web dashboard.
type Dashboard struct {
	// PublicOrigin is the origin browsers open the dashboard at when a
	// reverse proxy stands in front of the daemon's TCP listener, such as
	// one that ends TLS: "https://agentbox.example.com" (scheme, host and
	// port; nothing else). The session cookie is then Secure when it is
	// https, and a state-changing request must come from exactly this
	// origin (the proxy may rewrite Host). Empty: the origin is the
	// request's own, http:// unless the daemon itself served TLS.
	PublicOrigin string `json:"public_origin"`
}

// Backends are the execution backends' names.
var Backends = []string{"docker", "gvisor", "local", "kubernetes"}

// Kubernetes configures the kubernetes backend.
type Kubernetes struct {
	// Kubeconfig is the kubeconfig file's absolute path; empty: the
	// in-cluster configuration (the daemon runs as a pod).
	Kubeconfig string `json:"kubeconfig"`
	// Namespace holds the sandboxes' pods (default agentbox).
	Namespace string `json:"namespace"`
	// Node is the daemon's own node, where the pods are placed (default:
	// the host name).
	Node string `json:"node"`
	// RuntimeClass, when set, is the RuntimeClass of a pod whose policy
	// names none (e.g. gvisor).
	RuntimeClass string `json:"runtime_class"`
	// RuntimeClasses are the other RuntimeClasses a sandbox's policy may
	// name (policy runtime_class); none by default.
	RuntimeClasses []string `json:"runtime_classes"`
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// Egress is the operator's part of the egress proxy's configuration.
type Egress struct {
	// ResolveAllow lets named hosts resolve to internal addresses
	// (private, loopback, documentation, reserved) that the proxy
	// otherwise refuses: an internal package mirror, or a registry whose
	// name resolves into such a range on this network. Each entry is one
	// exact host and the addresses or CIDR ranges it may resolve to; a
	// sandbox still needs the host in its own allowlist, and its policy
	// can never carry an allowance. Every use is logged and counted.
	ResolveAllow []ResolveAllow `json:"resolve_allow"`
}

// ResolveAllow is one host's resolve allowance, e.g. {host:
// registry.npmjs.org, addresses: ["192.0.2.0/24"]}.
type ResolveAllow struct {
	// Host is one host name, exactly as the proxy canonicalises it (lower
	// case, no trailing dot); no wildcard.
	Host string `json:"host"`
	// Addresses are IP addresses or CIDR ranges, none wider than /8 (IPv4)
	// or /32 (IPv6), none covering a metadata, unspecified, broadcast or
	// multicast address.
	Addresses []string `json:"addresses"`
}

// Dependencies is the dependency manifest.
type Dependencies struct {
	// Approved are the packages that may be admitted, each with one exact
	// version, its digest and its pinned source. A request for anything
	// else is denied with the reason.
	Approved []deps.Entry `json:"approved"`
}

// ResolveAllowances returns egress.resolve_allow, checked.
func (c Config) ResolveAllowances() ([]egress.ResolveAllowance, error) {
	var out []egress.ResolveAllowance
	var probs []string
	seen := map[string]bool{}
	for i, r := range c.Egress.ResolveAllow {
		a, err := egress.ParseResolveAllowance(r.Host, r.Addresses)
		if err != nil {
			probs = append(probs, fmt.Sprintf("egress.resolve_allow[%d]: %s", i, errdefs.Message(err)))
			continue
		}
		if seen[a.Host] {
			probs = append(probs, fmt.Sprintf("egress.resolve_allow[%d]: host %s is listed already", i, a.Host))
			continue
		}
		seen[a.Host] = true
		out = append(out, a)
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("%s: %w", strings.Join(probs, "; "), errdefs.ErrInvalid)
	}
	return out, nil
}

// Manifest returns dependencies.approved, checked.
func (c Config) Manifest() (*deps.Manifest, error) { return deps.NewManifest(c.Dependencies.Approved) }

// E2BTemplate is what an E2B template ID stands for.
type E2BTemplate struct {
	// Image is an image in the engine; empty: default_image.
	Image string `json:"image"`
	// Backend is one of Backends; empty: default_backend.
	Backend string `json:"backend"`
	// User is the account E2B code runs as (E2B's "user"); a command that
	// asks for another is refused. Default "user".
	User string `json:"user"`
	// Home is that account's home and the default working directory,
	// where E2B code expects its files; it stands for the workspace (an
	// image built for E2B links it to /workspace). Default /workspace.
	Home string `json:"home"`
}

// WarmPool is one warm pool, e.g. {backend: docker, image:
// agentbox/busybox:latest, size: 2}. Only the docker backend can hand out
// pooled environments; a pool of another starts nothing and its sandboxes
// start cold.
type WarmPool struct {
	// Backend is one of Backends; empty means default_backend.
	Backend string `json:"backend"`
	// Image is an image in the engine; empty means default_image.
	Image string `json:"image"`
	// Size is how many environments are kept ready.
	Size int `json:"size"`
	// CPUs, Memory, Pids and Tmp are the pool's policy class (empty: the
	// defaults): only a sandbox asking for exactly these limits takes one
	// of its environments.
	CPUs   float64         `json:"cpus"`
	Memory policy.ByteSize `json:"memory"`
	Pids   int64           `json:"pids"`
	Tmp    policy.ByteSize `json:"tmp"`
}

// DefaultDataDir is /var/lib/agentbox for root, else
// $XDG_DATA_HOME/agentbox (or ~/.local/share/agentbox).
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/agentbox"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "agentbox")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "agentbox")
}

// Default returns the built-in defaults.
func Default() Config {
	uid, gid := 1000, 1000
	if os.Geteuid() != 0 {
		uid, gid = -1, -1
	}
	return Config{
		DataDir:            DefaultDataDir(),
		WorkspaceDriver:    "auto",
		WorkspaceDiskQuota: 10 << 30,
		SandboxUID:         uid,
		SandboxGID:         gid,
		GitTimeout:         Duration{2 * time.Minute},
		MaxDiffBytes:       64 << 20,
		AuthorName:         "agentbox",
		AuthorEmail:        "agentbox@localhost",
		LogLevel:           "info",
		LogFormat:          "json",
		ShutdownGrace:      Duration{30 * time.Second},
		SandboxIdleTimeout: Duration{30 * time.Minute},
		GCInterval:         Duration{5 * time.Minute},
		ReconcileInterval:  Duration{time.Minute},
		NodeHeartbeat:      Duration{10 * time.Second},
		DefaultBackend:     "auto",
		DefaultImage:       "agentbox/debian:bookworm",
	}
}

// Load builds the configuration: defaults, then the file at path (if path
// is empty, $AGENTBOX_CONFIG), then environment variables. Flags are
// applied by the caller afterwards, then Validate.
func Load(path string) (Config, error) {
	c := Default()
	if path == "" {
		path = os.Getenv("AGENTBOX_CONFIG")
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("reading config %s: %w", path, err)
		}
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return c, fmt.Errorf("config %s: %v: %w", path, err, errdefs.ErrInvalid)
		}
	}
	if v := os.Getenv("AGENTBOX_DATA"); v != "" {
		c.DataDir = v
	}
	if v := os.Getenv("AGENTBOX_STORE"); v != "" {
		c.Store = v
	}
	if v := os.Getenv("AGENTBOX_LISTEN"); v != "" {
		c.Listen = v
	}
	if v := os.Getenv("AGENTBOX_TOKEN"); v != "" {
		c.Token = v
	}
	if v := os.Getenv("AGENTBOX_E2B_LISTEN"); v != "" {
		c.E2BListen = v
	}
	if v := os.Getenv("AGENTBOX_WORKSPACE_DRIVER"); v != "" {
		c.WorkspaceDriver = v
	}
	if v := os.Getenv("AGENTBOX_KUBECONFIG"); v != "" {
		if c.Kubernetes == nil {
			c.Kubernetes = &Kubernetes{}
		}
		c.Kubernetes.Kubeconfig = v
	}
	if v := os.Getenv("AGENTBOX_KUBERNETES_NODE"); v != "" && c.Kubernetes != nil {
		c.Kubernetes.Node = v
	}
	return c, nil
}

// SocketPath is the daemon's unix socket in the data dir.
func (c Config) SocketPath() string { return filepath.Join(c.DataDir, "agentbox.sock") }

// Validate checks every field and returns all problems at once.
func (c *Config) Validate() error {
	var probs []string
	if c.DataDir == "" {
		probs = append(probs, "data_dir is empty")
	} else if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if len(c.SocketPath()) > 107 {
		probs = append(probs, fmt.Sprintf("data_dir %s is too long for a unix socket path (max 107 bytes with /agentbox.sock)", c.DataDir))
	}
	if c.Store != "" {
		if err := checkStoreURL(c.Store); err != "" {
			probs = append(probs, err)
		}
	}
	switch {
	case c.Listen == "":
	case strings.HasPrefix(c.Listen, "tcp://"):
		if c.Token == "" {
			probs = append(probs, "listen on TCP requires a token (token or AGENTBOX_TOKEN)")
		} else if len(c.Token) < 16 {
			probs = append(probs, "token must be at least 16 characters")
		}
	default:
		probs = append(probs, fmt.Sprintf("listen %q must be empty (unix socket) or tcp://HOST:PORT", c.Listen))
	}
	switch {
	case c.E2BListen == "":
	case !strings.HasPrefix(c.E2BListen, "tcp://"):
		probs = append(probs, fmt.Sprintf("e2b_listen %q must be empty or tcp://HOST:PORT", c.E2BListen))
	case c.Token == "":
		probs = append(probs, "e2b_listen requires a token (token or AGENTBOX_TOKEN): it is the E2B API key")
	}
	for name, t := range c.E2BTemplates {
		switch {
		case name == "" || strings.ContainsAny(name, "/?#% \t\n"):
			probs = append(probs, fmt.Sprintf("e2b_templates: template name %q is empty or has a character a path cannot carry", name))
		case t.Backend != "" && !slices.Contains(Backends, t.Backend):
			probs = append(probs, fmt.Sprintf("e2b_templates.%s.backend %q is not one of %s", name, t.Backend, strings.Join(Backends, ", ")))
		case t.Home != "" && (!strings.HasPrefix(t.Home, "/") || t.Home != filepath.Clean(t.Home)):
			probs = append(probs, fmt.Sprintf("e2b_templates.%s.home %q is not a clean absolute path", name, t.Home))
		case t.User == "root":
			probs = append(probs, fmt.Sprintf("e2b_templates.%s.user is root: sandboxes never run as root", name))
		}
	}
	switch c.WorkspaceDriver {
	case "auto", "overlay", "copy":
	default:
		probs = append(probs, fmt.Sprintf("workspace_driver %q is not one of auto, overlay, copy", c.WorkspaceDriver))
	}
	if q := c.WorkspaceDiskQuota; q != 0 && q < 1<<20 {
		probs = append(probs, fmt.Sprintf("workspace_disk_quota %s is under the minimum of 1M (0 turns quotas off)", q))
	}
	if (c.SandboxUID < 0) != (c.SandboxGID < 0) {
		probs = append(probs, "sandbox_uid and sandbox_gid must both be set or both be -1")
	}
	switch {
	case (c.GuestUID < 0) != (c.GuestGID < 0) || (c.GuestUID == 0) != (c.GuestGID == 0):
		probs = append(probs, "guest_uid and guest_gid must both be set, both be 0 (the default) or both be -1")
	case c.GuestUID > 0 && c.GuestUID == c.SandboxUID:
		probs = append(probs, "guest_uid must not be sandbox_uid: the guest's user is its own")
	}
	if c.GitTimeout.Duration <= 0 {
		probs = append(probs, "git_timeout must be positive")
	}
	if c.SandboxIdleTimeout.Duration < 0 || c.SandboxMaxAge.Duration < 0 {
		probs = append(probs, "sandbox_idle_timeout and sandbox_max_age must not be negative (0 turns them off)")
	}
	if c.PushBranch != "" && !strings.Contains(c.PushBranch, "{ws}") {
		probs = append(probs, fmt.Sprintf("push_branch %q must hold {ws}, so that two workspaces never push to one branch", c.PushBranch))
	}
	if c.DataBudget < 0 || c.WorkspaceRetention.Duration < 0 {
		probs = append(probs, "data_budget and workspace_retention must not be negative (0 turns them off)")
	}
	if c.DataBudget > 0 && c.GCInterval.Duration <= 0 {
		probs = append(probs, "gc_interval must be positive when data_budget is set")
	}
	if c.NodeHeartbeat.Duration < 100*time.Millisecond {
		probs = append(probs, "node_heartbeat must be at least 100ms")
	}
	if c.NodeAddr != "" && !strings.HasPrefix(c.NodeAddr, "unix://") && !strings.HasPrefix(c.NodeAddr, "tcp://") {
		probs = append(probs, fmt.Sprintf("node_addr %q must be unix:///PATH or tcp://HOST:PORT", c.NodeAddr))
	}
	if c.ReconcileInterval.Duration < 0 {
		probs = append(probs, "reconcile_interval must not be negative (0 reconciles only at start)")
	}
	if c.MaxDiffBytes <= 0 {
		probs = append(probs, "max_diff_bytes must be positive")
	}
	if c.AuthorName == "" || c.AuthorEmail == "" || strings.ContainsAny(c.AuthorName+c.AuthorEmail, "<>\n") {
		probs = append(probs, "author_name and author_email must be set and contain no <, > or newline")
	}
	if c.Dashboard.PublicOrigin != "" {
		o, err := CanonicalOrigin(c.Dashboard.PublicOrigin)
		if err != nil {
			probs = append(probs, "dashboard.public_origin: "+err.Error())
		} else {
			c.Dashboard.PublicOrigin = o
		}
	}
	if c.DefaultBackend != "auto" && !slices.Contains(Backends, c.DefaultBackend) {
		probs = append(probs, fmt.Sprintf("default_backend %q is not one of auto, %s", c.DefaultBackend, strings.Join(Backends, ", ")))
	}
	if k := c.Kubernetes; k != nil {
		switch {
		case k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig):
			probs = append(probs, fmt.Sprintf("kubernetes.kubeconfig %q is not an absolute path", k.Kubeconfig))
		case k.Namespace != "" && !dnsLabel.MatchString(k.Namespace):
			probs = append(probs, fmt.Sprintf("kubernetes.namespace %q is not a DNS label", k.Namespace))
		case k.RuntimeClass != "" && !dnsSubdomain.MatchString(k.RuntimeClass):
			probs = append(probs, fmt.Sprintf("kubernetes.runtime_class %q is not a DNS subdomain", k.RuntimeClass))
		case k.Node != "" && !dnsSubdomain.MatchString(k.Node):
			probs = append(probs, fmt.Sprintf("kubernetes.node %q is not a DNS subdomain", k.Node))
		}
		for _, rc := range k.RuntimeClasses {
			if !dnsSubdomain.MatchString(rc) {
				probs = append(probs, fmt.Sprintf("kubernetes.runtime_classes: %q is not a DNS subdomain", rc))
			}
		}
	}
	for i, p := range c.WarmPool {
		switch {
		case p.Backend != "" && !slices.Contains(Backends, p.Backend):
			probs = append(probs, fmt.Sprintf("warm_pool[%d].backend %q is not one of %s", i, p.Backend, strings.Join(Backends, ", ")))
		case p.Size < 0 || p.Size > 256:
			probs = append(probs, fmt.Sprintf("warm_pool[%d].size %d is outside 0..256", i, p.Size))
		}
	}
	if _, err := c.ResolveAllowances(); err != nil {
		probs = append(probs, errdefs.Message(err))
	}
	if _, err := c.Manifest(); err != nil {
		probs = append(probs, errdefs.Message(err))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		probs = append(probs, fmt.Sprintf("log_level %q is not one of debug, info, warn, error", c.LogLevel))
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		probs = append(probs, fmt.Sprintf("log_format %q is not one of json, text", c.LogFormat))
	}
	if len(probs) > 0 {
		return fmt.Errorf("invalid configuration: %s: %w", strings.Join(probs, "; "), errdefs.ErrInvalid)
	}
	return nil
}

// checkStoreURL returns what is wrong with a store URL, naming it with its
// password redacted, or "".
func checkStoreURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// url's errors quote the string, password and all.
		return "store is not a valid URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
	}
	switch {
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		return fmt.Sprintf("store %s is not a postgres:// URL (leave it empty for the SQLite file in the data dir)", store.RedactURL(s))
	case strings.TrimPrefix(u.Path, "/") == "":
		return fmt.Sprintf("store %s names no database (postgres://HOST/DATABASE)", store.RedactURL(s))
	}
	return ""
}

// CanonicalOrigin checks that s is a web origin, http(s)://HOST[:PORT]
// with no user, path (but "/"), query or fragment, and returns it as a
// browser sends it in an Origin header: scheme and host in lower case,
// no trailing slash, no default port.
func CanonicalOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL", s)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("%q is not an http:// or https:// origin", s)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%q names no host", s)
	case u.User != nil:
		return "", fmt.Errorf("%q holds a user name: an origin is scheme, host and port only", s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || u.Opaque != "":
		return "", fmt.Errorf("%q has a path, query or fragment: an origin is scheme, host and port only", s)
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q has port %q, not 1 to 65535", s, port)
		}
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}
