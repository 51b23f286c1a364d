package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func (s *Store) CreateCandidate(ctx context.Context, c store.Candidate) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO candidates (id, workspace_id, disposition, doc, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		c.ID, c.WorkspaceID, c.Disposition, string(doc), ts(c.CreatedAt), ts(c.UpdatedAt))
	return classify(err, "candidate "+c.ID)
}

func (s *Store) GetCandidate(ctx context.Context, id string) (store.Candidate, error) {
	return getDoc[store.Candidate](ctx, s, "candidate "+id, `SELECT doc FROM candidates WHERE id = $1`, id)
}

func (s *Store) ListCandidates(ctx context.Context, workspaceID string) ([]store.Candidate, error) {
	if workspaceID == "" {
		return listDocs[store.Candidate](ctx, s, "candidate", `SELECT id, doc FROM candidates ORDER BY created_at DESC, id DESC`)
	}
	return listDocs[store.Candidate](ctx, s, "candidate", `SELECT id, doc FROM candidates WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC`, workspaceID)
}

func (s *Store) UpdateCandidate(ctx context.Context, c store.Candidate, from string) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	err = execOne(ctx, s.db, "candidate "+c.ID,
		`UPDATE candidates SET disposition = $1, doc = $2, updated_at = $3 WHERE id = $4 AND disposition = $5`,
		c.Disposition, string(doc), ts(c.UpdatedAt), c.ID, from)
	if errors.Is(err, errdefs.ErrNotFound) {
		// Missing, or decided meanwhile: tell which.
		cur, gerr := s.GetCandidate(ctx, c.ID)
		if gerr != nil {
			return gerr
		}
		return fmt.Errorf("candidate %s is %s now, not %s: %w", c.ID, cur.Disposition, from, errdefs.ErrConflict)
	}
	return err
}

func (s *Store) PutForge(ctx context.Context, f store.ForgeBinding) error {
	doc, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx,
		`INSERT INTO forges (host, doc, created_at, updated_at) VALUES ($1, $2, $3, $4)
		 ON CONFLICT (host) DO UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at`,
		f.Host, string(doc), ts(f.CreatedAt), ts(f.UpdatedAt))
	return classify(err, "forge "+f.Host)
}

func (s *Store) GetForge(ctx context.Context, host string) (store.ForgeBinding, error) {
	var doc string
	var created int64
	if err := s.db.QueryRowContext(ctx, `SELECT doc, created_at FROM forges WHERE host = $1`, host).Scan(&doc, &created); err != nil {
		return store.ForgeBinding{}, classify(err, "forge "+host)
	}
	var f store.ForgeBinding
	if err := json.Unmarshal([]byte(doc), &f); err != nil {
		return store.ForgeBinding{}, fmt.Errorf("forge %s: a corrupt record: %w", host, err)
	}
	f.CreatedAt = fromTS(created) // kept across replacements
	return f, nil
}

func (s *Store) ListForges(ctx context.Context) ([]store.ForgeBinding, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT host, doc, created_at FROM forges ORDER BY host`)
	if err != nil {
		return nil, classify(err, "forges")
	}
	defer rows.Close()
	out := []store.ForgeBinding{}
	for rows.Next() {
		var host, doc string
		var created int64
		if err := rows.Scan(&host, &doc, &created); err != nil {
			return nil, classify(err, "forges")
		}
		var f store.ForgeBinding
		if err := json.Unmarshal([]byte(doc), &f); err != nil {
			return nil, fmt.Errorf("forge %s: a corrupt record: %w", host, err)
		}
		f.CreatedAt = fromTS(created)
		out = append(out, f)
	}
	return out, classify(rows.Err(), "forges")
}

func (s *Store) DeleteForge(ctx context.Context, host string) error {
	return execOne(ctx, s.db, "forge "+host, `DELETE FROM forges WHERE host = $1`, host)
}
