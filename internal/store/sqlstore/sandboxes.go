package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// --- sandboxes

const sbCols = `id, workspace_id, backend, backend_ref, image, spec, state, token_hash, replaces, created_at, updated_at, last_activity_at, node_id`

func scanSandbox(row interface{ Scan(...any) error }) (store.Sandbox, error) {
	var sb store.Sandbox
	var c, u, a int64
	err := row.Scan(&sb.ID, &sb.WorkspaceID, &sb.Backend, &sb.BackendRef, &sb.Image, &sb.Spec, &sb.State, &sb.TokenHash, &sb.Replaces, &c, &u, &a, &sb.Node)
	sb.CreatedAt, sb.UpdatedAt, sb.LastActivityAt = fromTS(c), fromTS(u), fromTS(a)
	return sb, err
}

func (s *Store) CreateSandbox(ctx context.Context, sb store.Sandbox) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandboxes (`+sbCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)`,
		sb.ID, sb.WorkspaceID, sb.Backend, sb.BackendRef, sb.Image, sb.Spec, sb.State, sb.TokenHash, sb.Replaces,
		ts(sb.CreatedAt), ts(sb.UpdatedAt), ts(sb.LastActivityAt), sb.Node)
	return classify(err, "sandbox "+sb.ID)
}

func (s *Store) GetSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := scanSandbox(s.queryRowP(ctx, `SELECT `+sbCols+` FROM sandboxes WHERE id = $1`, id))
	return sb, classify(err, "sandbox "+id)
}

func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error) {
	q := `SELECT ` + sbCols + ` FROM sandboxes WHERE 1=1`
	var args []any
	if f.WorkspaceID != "" {
		args = append(args, f.WorkspaceID)
		q += fmt.Sprintf(" AND workspace_id = $%d", len(args))
	}
	if f.State != "" {
		args = append(args, f.State)
		q += fmt.Sprintf(" AND state = $%d", len(args))
	}
	// The text depends only on which filters are set: prepared.
	rows, err := s.queryP(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, classify(err, "listing sandboxes")
	}
	defer rows.Close()
	out := []store.Sandbox{}
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, classify(err, "listing sandboxes")
		}
		out = append(out, sb)
	}
	return out, classify(rows.Err(), "listing sandboxes")
}

func (s *Store) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	return updateSandbox(ctx, s.db, sb)
}

func updateSandbox(ctx context.Context, q execer, sb store.Sandbox) error {
	return execOne(ctx, q, "sandbox "+sb.ID,
		`UPDATE sandboxes SET backend_ref=$2, image=$3, spec=$4, state=$5, token_hash=$6, replaces=$7, updated_at=$8, last_activity_at=$9 WHERE id=$1`,
		sb.ID, sb.BackendRef, sb.Image, sb.Spec, sb.State, sb.TokenHash, sb.Replaces, ts(sb.UpdatedAt), ts(sb.LastActivityAt))
}

func (s *Store) UpdateSandboxEvent(ctx context.Context, sb store.Sandbox, ev store.Event) (store.Event, error) {
	return s.withEvent(ctx, "sandbox "+sb.ID, ev, func(tx *sql.Tx) error { return updateSandbox(ctx, tx, sb) })
}

func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return execOne(ctx, s.db, "sandbox "+id, `DELETE FROM sandboxes WHERE id = $1`, id)
}

// --- execs

const execCols = `id, sandbox_id, workspace_id, argv, state, exit_code, signal, timed_out, oom, cpu_ns, peak_mem_bytes, stdout_bytes, stderr_bytes, started_at, finished_at, task, wall_ns`

func scanExec(row interface{ Scan(...any) error }) (store.Exec, error) {
	var e store.Exec
	var timedOut, oom int
	var st, fin int64
	err := row.Scan(&e.ID, &e.SandboxID, &e.WorkspaceID, &e.Argv, &e.State, &e.ExitCode, &e.Signal, &timedOut, &oom,
		&e.CPUNanos, &e.PeakMemBytes, &e.StdoutBytes, &e.StderrBytes, &st, &fin, &e.Task, &e.WallNanos)
	e.TimedOut, e.OOM = timedOut != 0, oom != 0
	e.StartedAt, e.FinishedAt = fromTS(st), fromTS(fin)
	return e, err
}

func (s *Store) CreateExec(ctx context.Context, e store.Exec) error {
	_, err := s.execP(ctx, nil, `INSERT INTO execs (`+execCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)`,
		e.ID, e.SandboxID, e.WorkspaceID, e.Argv, e.State, e.ExitCode, e.Signal, boolInt(e.TimedOut), boolInt(e.OOM),
		e.CPUNanos, e.PeakMemBytes, e.StdoutBytes, e.StderrBytes, ts(e.StartedAt), ts(e.FinishedAt), e.Task, e.WallNanos)
	return classify(err, "exec "+e.ID)
}

// FinishExec is one transaction, so one commit (one fsync of the WAL) per
// exec besides CreateExec's.
func (s *Store) FinishExec(ctx context.Context, e store.Exec) error {
	what := "exec " + e.ID
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	if err := s.finishExec(ctx, tx, e); err != nil {
		return err
	}
	return classify(tx.Commit(), what)
}

// The statements of finishExec.
const (
	updateExecEnd      = `UPDATE execs SET state=$2, exit_code=$3, signal=$4, timed_out=$5, oom=$6, cpu_ns=$7, peak_mem_bytes=$8, stdout_bytes=$9, stderr_bytes=$10, finished_at=$11, wall_ns=$12 WHERE id=$1`
	updateExecActivity = `UPDATE sandboxes SET last_activity_at=$2 WHERE id=(SELECT sandbox_id FROM execs WHERE id=$1) AND last_activity_at < $2`
)

// finishExec is FinishExec's work within tx.
func (s *Store) finishExec(ctx context.Context, tx *sql.Tx, e store.Exec) error {
	what := "exec " + e.ID
	res, err := s.execP(ctx, tx, updateExecEnd,
		e.ID, e.State, e.ExitCode, e.Signal, boolInt(e.TimedOut), boolInt(e.OOM), e.CPUNanos, e.PeakMemBytes,
		e.StdoutBytes, e.StderrBytes, ts(e.FinishedAt), e.WallNanos)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %w", what, errdefs.ErrNotFound)
	}
	if _, err := s.execP(ctx, tx, updateExecActivity,
		e.ID, ts(e.FinishedAt)); err != nil {
		return classify(err, what)
	}
	return nil
}

func (s *Store) GetExec(ctx context.Context, id string) (store.Exec, error) {
	e, err := scanExec(s.db.QueryRowContext(ctx, `SELECT `+execCols+` FROM execs WHERE id = $1`, id))
	return e, classify(err, "exec "+id)
}

func (s *Store) ListExecs(ctx context.Context, f store.ExecFilter) ([]store.Exec, error) {
	q := `SELECT ` + execCols + ` FROM execs WHERE 1=1`
	var args []any
	if f.SandboxID != "" {
		args = append(args, f.SandboxID)
		q += fmt.Sprintf(" AND sandbox_id = $%d", len(args))
	}
	if f.WorkspaceID != "" {
		args = append(args, f.WorkspaceID)
		q += fmt.Sprintf(" AND workspace_id = $%d", len(args))
	}
	limit := f.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	args = append(args, limit)
	// The most recent ones, returned oldest first.
	q = `SELECT * FROM (` + q + fmt.Sprintf(` ORDER BY started_at DESC, id DESC LIMIT $%d`, len(args)) + `) AS recent ORDER BY started_at, id`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err, "listing execs")
	}
	defer rows.Close()
	out := []store.Exec{}
	for rows.Next() {
		e, err := scanExec(rows)
		if err != nil {
			return nil, classify(err, "listing execs")
		}
		out = append(out, e)
	}
	return out, classify(rows.Err(), "listing execs")
}
