package sqlstore

import (
	"context"
	"database/sql"
	"math"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

func (s *Store) RegisterNode(ctx context.Context, n store.Node) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO nodes (id, host, pid, data_dir, addr, version, started_at, heartbeat_at, stopped_at, lease_ms, shared) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,0,$9,$10)
		 ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, data_dir = excluded.data_dir, addr = excluded.addr,
		 version = excluded.version, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, stopped_at = 0,
		 lease_ms = excluded.lease_ms, shared = excluded.shared`,
		n.ID, n.Host, n.PID, n.DataDir, n.Addr, n.Version, ts(n.StartedAt), ts(n.HeartbeatAt), n.Lease.Milliseconds(), boolInt(n.Shared))
	return classify(err, "node "+n.ID)
}

func (s *Store) HeartbeatNode(ctx context.Context, id string, at time.Time) error {
	return execOne(ctx, s.db, "node "+id, `UPDATE nodes SET heartbeat_at = $2 WHERE id = $1`, id, ts(at))
}

func (s *Store) StopNode(ctx context.Context, id string, at time.Time) error {
	return execOne(ctx, s.db, "node "+id, `UPDATE nodes SET stopped_at = $2, heartbeat_at = $2 WHERE id = $1`, id, ts(at))
}

func (s *Store) ListNodes(ctx context.Context, now time.Time) ([]store.Node, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, host, pid, data_dir, addr, version, started_at, heartbeat_at, stopped_at, lease_ms, shared,
		(SELECT COUNT(*) FROM workspaces w WHERE w.node_id = n.id),
		(SELECT COUNT(*) FROM sandboxes sb WHERE sb.node_id = n.id AND sb.state IN ('creating', 'running'))
		FROM nodes n ORDER BY id`)
	if err != nil {
		return nil, classify(err, "listing nodes")
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		var n store.Node
		var started, beat, stopped, lease int64
		var shared int
		if err := rows.Scan(&n.ID, &n.Host, &n.PID, &n.DataDir, &n.Addr, &n.Version, &started, &beat, &stopped, &lease, &shared,
			&n.Workspaces, &n.Sandboxes); err != nil {
			return nil, classify(err, "listing nodes")
		}
		n.StartedAt, n.HeartbeatAt = fromTS(started), fromTS(beat)
		n.Lease, n.Shared = time.Duration(lease)*time.Millisecond, shared != 0
		if stopped != 0 {
			t := fromTS(stopped)
			n.StoppedAt = &t
		}
		n.State = store.NodeState(n, now)
		out = append(out, n)
	}
	return out, classify(rows.Err(), "listing nodes")
}

func (s *Store) Clock(ctx context.Context) (time.Time, error) {
	if s.d.name != "postgres" {
		return time.Now().UTC(), nil
	}
	var t time.Time
	if err := s.db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, classify(err, "reading the database's clock")
	}
	return t.UTC(), nil
}

func (s *Store) ClaimUnowned(ctx context.Context, node string) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, classify(err, "claiming unowned rows")
	}
	defer tx.Rollback()
	total := 0
	for _, q := range []string{`UPDATE workspaces SET node_id = $1 WHERE node_id = ''`, `UPDATE sandboxes SET node_id = $1 WHERE node_id = ''`} {
		res, err := tx.ExecContext(ctx, q, node)
		if err != nil {
			return 0, classify(err, "claiming unowned rows")
		}
		n, _ := res.RowsAffected()
		total += int(n)
	}
	return total, classify(tx.Commit(), "claiming unowned rows")
}

// nodeLost is the condition, on node $1 at time $2 (nanoseconds), that
// it is lost: no clean stop, and its heartbeat older than its lease.
const nodeLost = `EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.stopped_at = 0
	AND n.heartbeat_at + (CASE WHEN n.lease_ms > 0 THEN n.lease_ms ELSE $3 END) * 1000000 < $2)`

func (s *Store) MarkNodeLost(ctx context.Context, node string, now time.Time, actor string) ([]string, error) {
	what := "marking the sandboxes of node " + node + " lost"
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	if err := s.lockEvents(ctx, tx); err != nil {
		return nil, classify(err, what)
	}
	// One statement checks and marks: a row another node marked first
	// no longer matches (PostgreSQL re-checks it after the other's
	// commit), and a node that beat meanwhile no longer is lost.
	rows, err := tx.QueryContext(ctx, `UPDATE sandboxes SET state = 'lost', updated_at = $2
		WHERE node_id = $1 AND state IN ('creating', 'running') AND `+nodeLost+` RETURNING id, workspace_id`,
		node, ts(now), store.NodeLease.Milliseconds())
	if err != nil {
		return nil, classify(err, what)
	}
	type marked struct{ id, ws string }
	var got []marked
	for rows.Next() {
		var m marked
		if err := rows.Scan(&m.id, &m.ws); err != nil {
			rows.Close()
			return nil, classify(err, what)
		}
		got = append(got, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(err, what)
	}
	ids := []string{}
	for _, m := range got {
		if _, err := tx.ExecContext(ctx, insertEvent, ts(now), actor, "sandbox.lost", "", m.ws, m.id,
			`{"reason":"its node `+node+` is lost"}`); err != nil {
			return nil, classify(err, what)
		}
		ids = append(ids, m.id)
	}
	return ids, classify(tx.Commit(), what)
}

func (s *Store) AdoptWorkspaces(ctx context.Context, from, to string, now time.Time, limit int) ([]store.Workspace, error) {
	what := "adopting the workspaces of node " + from
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	if err := s.lockEvents(ctx, tx); err != nil {
		return nil, classify(err, what)
	}
	if limit <= 0 {
		limit = math.MaxInt32
	}
	// The events lock (above) makes adopters take turns: the next one
	// sees what this one moved.
	rows, err := tx.QueryContext(ctx, `UPDATE workspaces SET node_id = $4, updated_at = $2
		WHERE id IN (SELECT id FROM workspaces WHERE node_id = $1 AND state = 'ready' AND driver = 'copy' AND disk_quota = 0 ORDER BY id LIMIT $5)
		AND node_id = $1 AND `+nodeLost+`
		AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = $1 AND n.shared = 1)
		RETURNING `+wsCols, from, ts(now), store.NodeLease.Milliseconds(), to, limit)
	if err != nil {
		return nil, classify(err, what)
	}
	out := []store.Workspace{}
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			rows.Close()
			return nil, classify(err, what)
		}
		out = append(out, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(err, what)
	}
	for _, w := range out {
		if _, err := tx.ExecContext(ctx, insertEvent, ts(now), "node "+to, "workspace.adopted", w.RepoID, w.ID, "",
			`{"from":"`+from+`","to":"`+to+`"}`); err != nil {
			return nil, classify(err, what)
		}
	}
	return out, classify(tx.Commit(), what)
}

func (s *Store) ClusterValue(ctx context.Context, name, value string) (string, error) {
	what := "cluster value " + name
	if _, err := s.db.ExecContext(ctx, `INSERT INTO cluster (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, value); err != nil {
		return "", classify(err, what)
	}
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM cluster WHERE name = $1`, name).Scan(&v)
	if err == sql.ErrNoRows {
		return "", classify(err, what)
	}
	return v, classify(err, what)
}
