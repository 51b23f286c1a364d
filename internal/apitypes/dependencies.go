package apitypes

// DependencyRequest asks the daemon to admit one package into a
// workspace. The package must be in the operator's approved manifest
// (the daemon's configuration, dependencies.approved) with exactly this
// version; the daemon fetches it from the pinned source, checks its
// digest and writes it under .agentbox/deps/, from where the sandbox
// installs it offline.
type DependencyRequest struct {
	// Spec is ECOSYSTEM:NAME@VERSION with one exact version
	// ("npm:is-number@7.0.0", "npm:@scope/name@1.2.3"); a range or a tag
	// is denied.
	Spec string `json:"spec"`
}

// Dependency is an admitted package, written into the workspace.
type Dependency struct {
	// Ecosystem is "npm".
	Ecosystem string `json:"ecosystem"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	// Integrity is the digest that was approved and verified
	// ("sha512-BASE64").
	Integrity string `json:"integrity"`
	// Source is the registry it came from, as pinned in the manifest.
	Source string `json:"source"`
	// URL is the artifact's address on the source.
	URL string `json:"url"`
	// Path is where the artifact is in the workspace
	// (".agentbox/deps/is-number-7.0.0.tgz").
	Path string `json:"path"`
	// Size is the artifact's size in bytes.
	Size int64 `json:"size"`
	// Install is a command that installs it inside the sandbox, offline
	// ("npm install --offline ./.agentbox/deps/is-number-7.0.0.tgz").
	Install string `json:"install"`
}
