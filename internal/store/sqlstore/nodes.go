package sqlstore

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

func (s *Store) RegisterNode(ctx context.Context, n store.Node) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO nodes (id, host, pid, data_dir, addr, version, started_at, heartbeat_at, stopped_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,0)
		 ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, data_dir = excluded.data_dir, addr = excluded.addr,
		 version = excluded.version, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, stopped_at = 0`,
		n.ID, n.Host, n.PID, n.DataDir, n.Addr, n.Version, ts(n.StartedAt), ts(n.HeartbeatAt))
	return classify(err, "node "+n.ID)
}

func (s *Store) HeartbeatNode(ctx context.Context, id string, at time.Time) error {
	return execOne(ctx, s.db, "node "+id, `UPDATE nodes SET heartbeat_at = $2 WHERE id = $1`, id, ts(at))
}

func (s *Store) StopNode(ctx context.Context, id string, at time.Time) error {
	return execOne(ctx, s.db, "node "+id, `UPDATE nodes SET stopped_at = $2, heartbeat_at = $2 WHERE id = $1`, id, ts(at))
}

func (s *Store) ListNodes(ctx context.Context, now time.Time) ([]store.Node, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, host, pid, data_dir, addr, version, started_at, heartbeat_at, stopped_at FROM nodes ORDER BY id`)
	if err != nil {
		return nil, classify(err, "listing nodes")
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		var n store.Node
		var started, beat, stopped int64
		if err := rows.Scan(&n.ID, &n.Host, &n.PID, &n.DataDir, &n.Addr, &n.Version, &started, &beat, &stopped); err != nil {
			return nil, classify(err, "listing nodes")
		}
		n.StartedAt, n.HeartbeatAt = fromTS(started), fromTS(beat)
		if stopped != 0 {
			t := fromTS(stopped)
			n.StoppedAt = &t
		}
		n.State = store.NodeState(n, now)
		out = append(out, n)
	}
	return out, classify(rows.Err(), "listing nodes")
}
