package client

import (
	"context"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// GCRequest asks for one disk collection: DryRun lists what would go
// and removes nothing; a non-zero Budget replaces the daemon's
// data_budget for this run.
type GCRequest = apitypes.GCRequest

// GCItem is one object the collector removed, or would remove.
type GCItem = apitypes.GCItem

// GCReport is the outcome of one collection.
type GCReport = apitypes.GCReport

// GC collects disk under the data budget: idle sandboxes, then unused
// pristine checkouts, then least recently used repo caches, then (with a
// retention) clean workspaces, until usage is within the budget. With
// DryRun it only lists what would go.
func (c *Client) GC(ctx context.Context, req GCRequest) (GCReport, error) {
	var rep GCReport
	return rep, c.json(ctx, request{method: "POST", path: "/v1/gc", body: req}, &rep)
}
