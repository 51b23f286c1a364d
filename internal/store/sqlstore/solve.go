package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func (s *Store) CreateSolveRun(ctx context.Context, r store.SolveRun) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO solve_runs (id, state, doc, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)`,
		r.ID, r.State, string(doc), ts(r.CreatedAt), ts(r.UpdatedAt))
	return classify(err, "solve run "+r.ID)
}

func (s *Store) GetSolveRun(ctx context.Context, id string) (store.SolveRun, error) {
	return getDoc[store.SolveRun](ctx, s, "solve run "+id, `SELECT doc FROM solve_runs WHERE id = $1`, id)
}

func (s *Store) ListSolveRuns(ctx context.Context, state string) ([]store.SolveRun, error) {
	if state == "" {
		return listDocs[store.SolveRun](ctx, s, "solve run", `SELECT id, doc FROM solve_runs ORDER BY created_at DESC, id DESC`)
	}
	return listDocs[store.SolveRun](ctx, s, "solve run", `SELECT id, doc FROM solve_runs WHERE state = $1 ORDER BY created_at DESC, id DESC`, state)
}

func (s *Store) UpdateSolveRun(ctx context.Context, r store.SolveRun, from string) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	err = execOne(ctx, s.db, "solve run "+r.ID,
		`UPDATE solve_runs SET state = $1, doc = $2, updated_at = $3 WHERE id = $4 AND state = $5`,
		r.State, string(doc), ts(r.UpdatedAt), r.ID, from)
	if errors.Is(err, errdefs.ErrNotFound) {
		cur, gerr := s.GetSolveRun(ctx, r.ID)
		if gerr != nil {
			return gerr
		}
		return fmt.Errorf("solve run %s is %s now, not %s: %w", r.ID, cur.State, from, errdefs.ErrConflict)
	}
	return err
}

func (s *Store) AppendSolveStep(ctx context.Context, st store.SolveStep) error {
	doc := string(st.Doc)
	if doc == "" {
		doc = "null"
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO solve_steps (run_id, attempt, seq, role, kind, doc, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		st.RunID, st.Attempt, st.Seq, st.Role, st.Kind, doc, ts(st.CreatedAt))
	return classify(err, fmt.Sprintf("solve run %s attempt %d step %d", st.RunID, st.Attempt, st.Seq))
}

func (s *Store) ListSolveSteps(ctx context.Context, runID string, attempt int) ([]store.SolveStep, error) {
	const cols = `SELECT attempt, seq, role, kind, doc, created_at FROM solve_steps WHERE run_id = $1`
	var rows *sql.Rows
	var err error
	if attempt < 0 {
		rows, err = s.db.QueryContext(ctx, cols+` ORDER BY attempt, seq`, runID)
	} else {
		rows, err = s.db.QueryContext(ctx, cols+` AND attempt = $2 ORDER BY attempt, seq`, runID, attempt)
	}
	if err != nil {
		return nil, classify(err, "solve run "+runID+" steps")
	}
	defer rows.Close()
	out := []store.SolveStep{}
	for rows.Next() {
		st := store.SolveStep{RunID: runID}
		var doc string
		var at int64
		if err := rows.Scan(&st.Attempt, &st.Seq, &st.Role, &st.Kind, &doc, &at); err != nil {
			return nil, classify(err, "solve run "+runID+" steps")
		}
		st.Doc, st.CreatedAt = json.RawMessage(doc), fromTS(at)
		out = append(out, st)
	}
	return out, classify(rows.Err(), "solve run "+runID+" steps")
}
