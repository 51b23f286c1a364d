package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// --- usage

// RecordEgress is one transaction, one commit: the ledger row, the
// sandbox's totals and the event move together. A sandbox row already
// removed keeps only the ledger row, which is what task usage reads.
func (s *Store) RecordEgress(ctx context.Context, e store.EgressUsage, ev store.Event) (store.Event, error) {
	what := "egress usage of sandbox " + e.SandboxID
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if ev.Time.IsZero() {
		ev.Time = e.Time
	}
	return s.withEvent(ctx, what, ev, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO egress_usage (at, sandbox_id, workspace_id, task, bytes_up, bytes_down) VALUES ($1,$2,$3,$4,$5,$6)`,
			ts(e.Time), e.SandboxID, e.WorkspaceID, e.Task, e.BytesUp, e.BytesDown); err != nil {
			return classify(err, what)
		}
		_, err := tx.ExecContext(ctx, `UPDATE sandboxes SET egress_bytes_up = egress_bytes_up + $2, egress_bytes_down = egress_bytes_down + $3 WHERE id = $1`,
			e.SandboxID, e.BytesUp, e.BytesDown)
		return classify(err, what)
	})
}

// RecordEgressBatch records recs in one transaction, one commit: under
// a steady stream of decisions, the egress log costs a commit per batch
// instead of one per connection.
func (s *Store) RecordEgressBatch(ctx context.Context, recs []store.EgressRecord) error {
	if len(recs) == 0 {
		return nil
	}
	what := fmt.Sprintf("%d egress decisions", len(recs))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	if err := s.lockEvents(ctx, tx); err != nil {
		return classify(err, what)
	}
	for _, r := range recs {
		ev := r.Event
		if ev.Time.IsZero() {
			ev.Time = time.Now().UTC()
		}
		if e := r.Usage; e != nil {
			if e.Time.IsZero() {
				e.Time = ev.Time
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO egress_usage (at, sandbox_id, workspace_id, task, bytes_up, bytes_down) VALUES ($1,$2,$3,$4,$5,$6)`,
				ts(e.Time), e.SandboxID, e.WorkspaceID, e.Task, e.BytesUp, e.BytesDown); err != nil {
				return classify(err, "egress usage of sandbox "+e.SandboxID)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET egress_bytes_up = egress_bytes_up + $2, egress_bytes_down = egress_bytes_down + $3 WHERE id = $1`,
				e.SandboxID, e.BytesUp, e.BytesDown); err != nil {
				return classify(err, "egress usage of sandbox "+e.SandboxID)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (at, actor, type, repo_id, workspace_id, sandbox_id, detail) VALUES ($1,$2,$3,$4,$5,$6,$7)`,
			ts(ev.Time), ev.Actor, ev.Type, ev.RepoID, ev.WorkspaceID, ev.SandboxID, ev.Detail); err != nil {
			return classify(err, "event "+ev.Type)
		}
	}
	return classify(tx.Commit(), what)
}

func (s *Store) SetSandboxCgroupUsage(ctx context.Context, id string, cpuNanos, peakMemBytes int64) error {
	return execOne(ctx, s.db, "sandbox "+id, `UPDATE sandboxes SET cgroup_cpu_ns=$2, cgroup_peak_mem_bytes=$3 WHERE id=$1`, id, cpuNanos, peakMemBytes)
}

func (s *Store) SandboxUsage(ctx context.Context, id string) (store.SandboxUsage, error) {
	u := store.SandboxUsage{SandboxID: id}
	err := s.db.QueryRowContext(ctx, `SELECT cgroup_cpu_ns, cgroup_peak_mem_bytes, egress_bytes_up, egress_bytes_down FROM sandboxes WHERE id = $1`, id).
		Scan(&u.CgroupCPUNanos, &u.CgroupPeakMemBytes, &u.EgressBytesUp, &u.EgressBytesDown)
	if err != nil {
		return u, classify(err, "sandbox "+id)
	}
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*), CAST(COALESCE(SUM(cpu_ns),0) AS BIGINT), COALESCE(MAX(peak_mem_bytes),0), CAST(COALESCE(SUM(wall_ns),0) AS BIGINT),
		CAST(COALESCE(SUM(stdout_bytes + stderr_bytes),0) AS BIGINT) FROM execs WHERE sandbox_id = $1`, id).
		Scan(&u.Execs, &u.CPUNanos, &u.PeakMemBytes, &u.WallNanos, &u.OutputBytes)
	return u, classify(err, "usage of sandbox "+id)
}

// UsageByTask sums two queries, execs and egress, each grouped by the task
// label copied onto its rows, so that removed workspaces still count.
func (s *Store) UsageByTask(ctx context.Context, f store.UsageFilter) ([]store.TaskUsage, error) {
	// Grouped by task, or by task and workspace: key is then both.
	type key struct{ task, ws string }
	byTask := map[key]*store.TaskUsage{}
	get := func(k key) *store.TaskUsage {
		u, ok := byTask[k]
		if !ok {
			u = &store.TaskUsage{Task: k.task, WorkspaceID: k.ws}
			byTask[k] = u
		}
		return u
	}
	group, wsCol := "task", "''"
	if f.ByWorkspace {
		group, wsCol = "task, workspace_id", "workspace_id"
	}
	where, args := usageWhere(f, "started_at")
	rows, err := s.db.QueryContext(ctx, `SELECT task, `+wsCol+`, COUNT(*), CAST(COALESCE(SUM(cpu_ns),0) AS BIGINT), COALESCE(MAX(peak_mem_bytes),0), CAST(COALESCE(SUM(wall_ns),0) AS BIGINT),
		CAST(COALESCE(SUM(stdout_bytes + stderr_bytes),0) AS BIGINT) FROM execs WHERE `+where+` GROUP BY `+group, args...)
	if err != nil {
		return nil, classify(err, "summing exec usage")
	}
	for rows.Next() {
		var k key
		var u store.TaskUsage
		if err := rows.Scan(&k.task, &k.ws, &u.Execs, &u.CPUNanos, &u.PeakMemBytes, &u.WallNanos, &u.OutputBytes); err != nil {
			rows.Close()
			return nil, classify(err, "summing exec usage")
		}
		t := get(k)
		t.Execs, t.CPUNanos, t.PeakMemBytes, t.WallNanos, t.OutputBytes = u.Execs, u.CPUNanos, u.PeakMemBytes, u.WallNanos, u.OutputBytes
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(err, "summing exec usage")
	}
	where, args = usageWhere(f, "at")
	rows, err = s.db.QueryContext(ctx, `SELECT task, `+wsCol+`, CAST(COALESCE(SUM(bytes_up),0) AS BIGINT), CAST(COALESCE(SUM(bytes_down),0) AS BIGINT) FROM egress_usage WHERE `+where+` GROUP BY `+group, args...)
	if err != nil {
		return nil, classify(err, "summing egress usage")
	}
	for rows.Next() {
		var k key
		var up, down int64
		if err := rows.Scan(&k.task, &k.ws, &up, &down); err != nil {
			rows.Close()
			return nil, classify(err, "summing egress usage")
		}
		t := get(k)
		t.EgressBytesUp, t.EgressBytesDown = up, down
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(err, "summing egress usage")
	}
	// Distinct workspaces over both tables.
	wsWhere, wsArgs := usageWhere(f, "started_at")
	egWhere, _ := usageWhereFrom(f, "at", len(wsArgs))
	_, egArgs := usageWhere(f, "at")
	rows, err = s.db.QueryContext(ctx, `SELECT task, `+wsCol+`, COUNT(DISTINCT workspace_id) FROM (
		SELECT task, workspace_id FROM execs WHERE `+wsWhere+`
		UNION SELECT task, workspace_id FROM egress_usage WHERE `+egWhere+` AND workspace_id <> ''
	) AS u GROUP BY `+group, append(wsArgs, egArgs...)...)
	if err != nil {
		return nil, classify(err, "counting workspaces")
	}
	for rows.Next() {
		var k key
		var n int64
		if err := rows.Scan(&k.task, &k.ws, &n); err != nil {
			rows.Close()
			return nil, classify(err, "counting workspaces")
		}
		get(k).Workspaces = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(err, "counting workspaces")
	}
	out := make([]store.TaskUsage, 0, len(byTask))
	for _, u := range byTask {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b store.TaskUsage) int {
		return cmp.Or(strings.Compare(a.Task, b.Task), strings.Compare(a.WorkspaceID, b.WorkspaceID))
	})
	return out, nil
}

func usageWhere(f store.UsageFilter, timeCol string) (string, []any) {
	return usageWhereFrom(f, timeCol, 0)
}

// usageWhereFrom builds the filter with placeholders numbered after n.
func usageWhereFrom(f store.UsageFilter, timeCol string, n int) (string, []any) {
	where := "1=1"
	var args []any
	if f.Task != "" {
		args = append(args, f.Task)
		where += fmt.Sprintf(" AND task = $%d", n+len(args))
	}
	if !f.Since.IsZero() {
		args = append(args, ts(f.Since))
		where += fmt.Sprintf(" AND %s >= $%d", timeCol, n+len(args))
	}
	return where, args
}

func (s *Store) FinishExecEvent(ctx context.Context, e store.Exec, ev store.Event) (store.Event, error) {
	return s.withEvent(ctx, "exec "+e.ID, ev, func(tx *sql.Tx) error { return s.finishExec(ctx, tx, e) })
}

// withEvent runs do and appends ev (stamped now if it has no time) in one
// transaction: both are recorded, or neither is.
func (s *Store) withEvent(ctx context.Context, what string, ev store.Event, do func(tx *sql.Tx) error) (store.Event, error) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return ev, classify(err, what)
	}
	defer tx.Rollback()
	if err := s.lockEvents(ctx, tx); err != nil {
		return ev, classify(err, what)
	}
	if err := do(tx); err != nil {
		return ev, err
	}
	ins, err := s.txStmt(ctx, tx, insertEvent)
	if err == nil {
		err = ins.QueryRowContext(ctx, ts(ev.Time), ev.Actor, ev.Type, ev.RepoID, ev.WorkspaceID, ev.SandboxID, ev.Detail).Scan(&ev.ID)
	}
	if err != nil {
		return ev, classify(err, "event "+ev.Type)
	}
	return ev, classify(tx.Commit(), what)
}
