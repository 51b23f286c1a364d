package api

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// taskUsage is the API's view of one task's usage (see manager.Usage for
// what is counted): times in seconds, egress summed as well.
func taskUsage(u store.TaskUsage) apitypes.TaskUsage {
	return apitypes.TaskUsage{Task: u.Task, WorkspaceID: u.WorkspaceID, Workspaces: u.Workspaces, Execs: u.Execs,
		CPUSeconds: time.Duration(u.CPUNanos).Seconds(), PeakMemBytes: u.PeakMemBytes,
		WallSeconds: time.Duration(u.WallNanos).Seconds(), OutputBytes: u.OutputBytes,
		EgressBytes: u.EgressBytesUp + u.EgressBytesDown, EgressBytesUp: u.EgressBytesUp, EgressBytesDown: u.EgressBytesDown,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: u.CostUSD, SolveRun: u.SolveRun}
}

// usage sums usage per task label (?by=workspace: per task and
// workspace): ?task=LABEL keeps one, ?since=T (RFC 3339, or a Go duration
// meaning that long ago) keeps what started since.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.UsageFilter{Task: q.Get("task")}
	switch by := q.Get("by"); by {
	case "", "task":
	case "workspace":
		f.ByWorkspace = true
	default:
		writeError(w, errdefs.Invalid("usage: by %q is not task or workspace", by))
		return
	}
	var reply apitypes.Usage
	if v := q.Get("since"); v != "" {
		t, err := ParseSince(v, time.Now())
		if err != nil {
			writeError(w, err)
			return
		}
		f.Since = t
		reply.Since = &t
	}
	us, err := s.m.Usage(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	rows := make([]apitypes.TaskUsage, 0, len(us))
	for _, u := range us {
		rows = append(rows, taskUsage(u))
	}
	reply.Tasks = rows
	if f.ByWorkspace {
		reply.Tasks, reply.Workspaces = []apitypes.TaskUsage{}, rows
	}
	writeJSON(w, 200, reply)
}

// ParseSince reads a point in time: RFC 3339, or a Go duration ("90m")
// meaning that long before now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, errdefs.Invalid("since %q is neither an RFC 3339 time (2006-01-02T15:04:05Z) nor a duration like 2h", v)
}

// sandboxUsage is what one sandbox used: its execs summed, and its
// cgroup and egress totals.
func (s *Server) sandboxUsage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.m.GetSandbox(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	u, err := s.m.SandboxUsage(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, u)
}
