package client

import (
	"context"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Dependency is a package admitted into a workspace.
type Dependency = apitypes.Dependency

// AddDependency asks the daemon to admit the package spec
// ("npm:is-number@7.0.0") into workspace ws. A package the operator's
// manifest does not approve at exactly that version, or whose artifact
// fails its digest, is refused with an error of class
// errdefs.ErrPolicyDenied naming the reason.
func (c *Client) AddDependency(ctx context.Context, ws, spec string) (Dependency, error) {
	var d Dependency
	return d, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/dependencies", body: apitypes.DependencyRequest{Spec: spec}}, &d)
}
