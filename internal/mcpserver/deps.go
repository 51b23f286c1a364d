package mcpserver

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// The dependency tool joins the list from here, so that the tool table
// stays as it is.
func init() {
	tools = append(tools, newTool(spec{name: "add_dependency", title: "Admit a package", description: `Ask for a package to use in the workspace (default: the session's), as ECOSYSTEM:NAME@VERSION with one exact version ("npm:is-number@7.0.0"). ` +
		`The sandbox has no network: the daemon admits only packages the operator approved at exactly that version, fetches the artifact from its pinned source, verifies its digest and writes it under .agentbox/deps/. ` +
		`Returns its path and the command that installs it inside the sandbox, offline (run it with run_command). A denied request (not approved, a range such as ^1.2 or a tag such as latest, a digest mismatch) fails with the reason: do without the package, or ask for an approved version.`},
		(*call).addDependency))
}

type addDependencyIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Spec      string `json:"spec" jsonschema:"ECOSYSTEM:NAME@VERSION with one exact version, e.g. npm:is-number@7.0.0"`
}

func (c *call) addDependency(in addDependencyIn) (apitypes.Dependency, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.Dependency{}, "", err
	}
	d, err := c.s.b.AddDependency(c.ctx, id, in.Spec)
	if err != nil {
		return d, "", err
	}
	return d, fmt.Sprintf("Admitted %s:%s@%s (%s) at %s. Install it in the sandbox with: %s", d.Ecosystem, d.Name, d.Version, d.Integrity, d.Path, d.Install), nil
}
