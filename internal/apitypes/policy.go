package apitypes

// Policy is a sandbox's isolation policy document, as a request carries
// it and as agentbox policy check prints it. Package policy reads it
// strictly (unknown fields, duplicate keys and trailing data are errors,
// every error names its field, as in network.allow[2]) and owns its
// validation and canonical form; its Policy is this type with those
// methods.
type Policy struct {
	// Network is what the sandbox may reach; none: no network at all.
	Network PolicyNetwork `json:"network" openapi:"optional"`
	// Secrets are bound by name ("GITHUB_TOKEN"); the sandbox sees the
	// name as an environment variable holding a placeholder, and the
	// egress proxy puts the real value (agentbox secret set) in requests
	// to the bound hosts.
	Secrets map[string]PolicySecretBinding `json:"secrets,omitempty"`
	// Env is the sandbox's whole environment beyond the image's and what
	// agentbox sets: nothing is inherited from the daemon.
	Env map[string]string `json:"env,omitempty"`
	// Limits are resource limits; zero fields take the daemon's defaults.
	Limits PolicyLimits `json:"limits,omitzero"`
	// WritablePaths are globs relative to the workspace (path.Match
	// syntax, and "**" for any number of directories) naming what the
	// sandbox may change. None means everything.
	WritablePaths []string `json:"writable_paths,omitempty"`
	// RuntimeClass is the Kubernetes RuntimeClass of the sandbox's pod
	// (kubernetes backend only), one that the daemon's operator allows
	// (kubernetes.runtime_classes): a policy can pick a stronger runtime,
	// never one the operator did not list. Empty: the daemon's default.
	RuntimeClass string `json:"runtime_class,omitempty"`
}

// PolicyNetwork is the network part of a policy.
type PolicyNetwork struct {
	// Mode is "none" (the default) or "allowlist".
	Mode string `json:"mode" enum:"none,allowlist" openapi:"optional"`
	// Allow are host patterns: a host name, "*.domain" for its
	// subdomains, each with an optional ":port". Only used with the
	// allowlist mode.
	Allow []string `json:"allow,omitempty"`
}

// PolicySecretBinding says where one secret may be sent.
type PolicySecretBinding struct {
	// Hosts are host patterns; each must be reachable under the network
	// allowlist, or the secret could never be used.
	Hosts []string `json:"hosts"`
	// Header is the request header the secret goes in; default
	// "Authorization".
	Header string `json:"header,omitempty"`
	// Format is the header value, with {{value}} standing for the secret
	// ("Bearer {{value}}"); default "{{value}}".
	Format string `json:"format,omitempty"`
}

// PolicyLimits are a sandbox's resource limits. Zero means not set.
type PolicyLimits struct {
	// CPUs is the CPU quota in cores (0.5 is half a core).
	CPUs float64 `json:"cpus,omitempty"`
	// Memory caps memory, /tmp included.
	Memory ByteSize `json:"memory,omitempty"`
	// Pids caps processes and threads.
	Pids int64 `json:"pids,omitempty"`
	// Disk caps what the sandbox may add to its workspace. It is enforced
	// by the workspace's disk quota: a sandbox whose workspace has no
	// quota, or a larger one, is refused.
	Disk ByteSize `json:"disk,omitempty"`
	// Tmp sizes /tmp, a tmpfs charged to Memory.
	Tmp ByteSize `json:"tmp,omitempty"`
	// ExecTimeout bounds each command's wall clock time.
	ExecTimeout Duration `json:"exec_timeout,omitempty"`
	// SandboxTimeout bounds the sandbox's life: it stops at that age.
	SandboxTimeout Duration `json:"sandbox_timeout,omitempty"`
	// OutputBytes caps what one command may print.
	OutputBytes ByteSize `json:"output_bytes,omitempty"`
}
