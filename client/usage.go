package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// TaskUsage is what the workspaces of one task label used: their execs'
// CPU time (the commands' whole process trees), the largest peak memory
// of one command, wall time, output, and the bytes their egress moved.
type TaskUsage = apitypes.TaskUsage

// UsageFilter selects what Usage sums. Zero fields match everything.
type UsageFilter struct {
	// Task keeps one task label.
	Task string
	// Since keeps the execs that started (and the egress that ended) at or
	// after it: an RFC 3339 time, or a Go duration ("2h") meaning that long
	// before the daemon's now.
	Since string
	// ByWorkspace sums per task and workspace: the rows are then in
	// Usage.Workspaces, each with its solve run.
	ByWorkspace bool
}

// Usage is the reply of Usage.
type Usage = apitypes.Usage

// Usage sums usage per task label, or per task and workspace.
func (c *Client) Usage(ctx context.Context, f UsageFilter) (Usage, error) {
	q := url.Values{}
	if f.Task != "" {
		q.Set("task", f.Task)
	}
	if f.Since != "" {
		q.Set("since", f.Since)
	}
	if f.ByWorkspace {
		q.Set("by", "workspace")
	}
	var u Usage
	return u, c.json(ctx, request{method: "GET", path: "/v1/usage", query: q}, &u)
}

// SandboxUsage is what one sandbox used: its execs summed, and what its
// environment's cgroup counted (read when it stopped; 0 before or when
// the backend cannot read it) and its egress moved.
type SandboxUsage = apitypes.SandboxUsage

// SandboxUsage returns what sandbox id used.
func (c *Client) SandboxUsage(ctx context.Context, id string) (SandboxUsage, error) {
	var u SandboxUsage
	return u, c.json(ctx, request{method: "GET", path: "/v1/sandboxes/" + esc(id) + "/usage"}, &u)
}

// FollowEvents calls fn with every event f selects: those already logged
// after f.After, then each new one as the daemon records it, until ctx
// ends (which returns nil), fn returns an error (returned), or the daemon
// ends the stream (an error). f.Limit is ignored.
func (c *Client) FollowEvents(ctx context.Context, f EventFilter, fn func(Event) error) error {
	q := url.Values{"follow": {"true"}}
	for k, v := range map[string]string{"repo": f.Repo, "workspace": f.Workspace, "sandbox": f.Sandbox, "type": f.Type} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.After > 0 {
		q.Set("after", strconv.FormatInt(f.After, 10))
	}
	resp, err := c.do(ctx, request{method: "GET", path: "/v1/events", query: q, accept: "application/x-ndjson"})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue // keepalive
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("decoding event stream: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading event stream: %w", err)
	}
	return fmt.Errorf("the daemon ended the event stream")
}
