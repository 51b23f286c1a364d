package client

import (
	"context"
	"encoding/json"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// DiffReport is a workspace's result checked before it leaves: changed
// paths outside the policy's writable paths, and added lines that look
// like secrets. OK is true when neither list has anything.
type DiffReport = apitypes.DiffReport

// DiffPathFinding is a changed path outside the writable paths.
type DiffPathFinding = apitypes.PathFinding

// DiffSecretFinding is an added line that looks like it holds a secret.
type DiffSecretFinding = apitypes.SecretFinding

// CheckDiff checks workspace ws's diff against the writable paths of
// policy (a policy document as JSON; nil means the policy of the
// workspace's most recent sandbox) and for secrets. A report that found
// problems is not an error: see DiffReport.OK.
func (c *Client) CheckDiff(ctx context.Context, ws string, policy json.RawMessage) (DiffReport, error) {
	var r DiffReport
	body := apitypes.DiffCheckRequest{Policy: policy}
	return r, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/diff/check", body: body}, &r)
}
