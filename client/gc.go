package client

import "context"

// GCRequest asks for one disk collection.
type GCRequest struct {
	// DryRun lists what would go and removes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Budget, a size like "10G" or a number of bytes as a string, replaces
	// the daemon's data_budget for this run; empty keeps it.
	Budget string `json:"budget,omitempty"`
}

// GCItem is one object the collector removed, or would remove.
type GCItem struct {
	// Tier is 1 (sandboxes), 2 (pristine checkouts), 3 (repo caches) or
	// 4 (clean workspaces); Kind is sandbox, pristine, repo or workspace.
	Tier int    `json:"tier"`
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Bytes is what removing it frees.
	Bytes   int64  `json:"bytes"`
	Reason  string `json:"reason"`
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

// GCReport is the outcome of one collection.
type GCReport struct {
	DryRun      bool     `json:"dry_run"`
	BudgetBytes int64    `json:"budget_bytes"`
	UsageBytes  int64    `json:"usage_bytes"`
	Method      string   `json:"method"`
	FreedBytes  int64    `json:"freed_bytes"`
	AfterBytes  int64    `json:"after_bytes"`
	UnderBudget bool     `json:"under_budget"`
	Items       []GCItem `json:"items"`
}

// GC collects disk under the data budget: idle sandboxes, then unused
// pristine checkouts, then least recently used repo caches, then (with a
// retention) clean workspaces, until usage is within the budget. With
// DryRun it only lists what would go.
func (c *Client) GC(ctx context.Context, req GCRequest) (GCReport, error) {
	var rep GCReport
	return rep, c.json(ctx, request{method: "POST", path: "/v1/gc", body: req}, &rep)
}
