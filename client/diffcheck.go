package client

import (
	"context"
	"encoding/json"
)

// DiffReport is a workspace's result checked before it leaves: changed
// paths outside the policy's writable paths, and added lines that look
// like secrets. OK is true when neither list has anything.
type DiffReport struct {
	ID              string              `json:"id"`
	OK              bool                `json:"ok"`
	OutsideWritable []DiffPathFinding   `json:"outside_writable"`
	Secrets         []DiffSecretFinding `json:"secrets"`
	// Truncated says a list was cut short (at 1000 findings).
	Truncated bool `json:"truncated,omitempty"`
}

// DiffPathFinding is a changed path outside the writable paths.
type DiffPathFinding struct {
	Path string `json:"path"`
	// Status is A, M, D, T, or R for a side of a rename.
	Status      string `json:"status"`
	RenamedFrom string `json:"renamed_from,omitempty"`
	RenamedTo   string `json:"renamed_to,omitempty"`
}

// DiffSecretFinding is an added line that looks like it holds a secret.
type DiffSecretFinding struct {
	Path string `json:"path"`
	// Line is the line number in the new file; Column the byte offset in
	// it, both from 1.
	Line   int `json:"line"`
	Column int `json:"column"`
	// Kind is "aws-access-key-id", "github-token", "private-key",
	// "known-secret", ...
	Kind string `json:"kind"`
	// Excerpt is redacted ("AKIA…(20 bytes)"): never the whole value.
	Excerpt string `json:"excerpt"`
}

// CheckDiff checks workspace ws's diff against the writable paths of
// policy (a policy document as JSON; nil means the policy of the
// workspace's most recent sandbox) and for secrets. A report that found
// problems is not an error: see DiffReport.OK.
func (c *Client) CheckDiff(ctx context.Context, ws string, policy json.RawMessage) (DiffReport, error) {
	var r DiffReport
	body := map[string]any{}
	if len(policy) > 0 {
		body["policy"] = policy
	}
	return r, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/diff/check", body: body}, &r)
}
