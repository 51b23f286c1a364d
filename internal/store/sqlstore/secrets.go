package sqlstore

import (
	"context"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// PutSecret upserts: a second put of a name replaces the value and keeps
// the creation time.
func (s *Store) PutSecret(ctx context.Context, sec store.SealedSecret) error {
	if len(sec.Nonce) == 0 || len(sec.Sealed) == 0 {
		return errdefs.Invalid("secret %s: nothing sealed", sec.Name)
	}
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO secrets (name, nonce, sealed, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)
		 ON CONFLICT (name) DO UPDATE SET nonce = excluded.nonce, sealed = excluded.sealed, updated_at = excluded.updated_at`,
		sec.Name, sec.Nonce, sec.Sealed, ts(sec.CreatedAt), ts(sec.UpdatedAt))
	return classify(err, "secret "+sec.Name)
}

func (s *Store) GetSecret(ctx context.Context, name string) (store.SealedSecret, error) {
	sec := store.SealedSecret{Name: name}
	var created, updated int64
	err := s.db.QueryRowContext(ctx, `SELECT nonce, sealed, created_at, updated_at FROM secrets WHERE name = $1`, name).
		Scan(&sec.Nonce, &sec.Sealed, &created, &updated)
	if err != nil {
		return store.SealedSecret{}, classify(err, "secret "+name)
	}
	sec.CreatedAt, sec.UpdatedAt = fromTS(created), fromTS(updated)
	return sec, nil
}

func (s *Store) ListSecrets(ctx context.Context) ([]store.SealedSecret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, created_at, updated_at FROM secrets ORDER BY name`)
	if err != nil {
		return nil, classify(err, "secrets")
	}
	defer rows.Close()
	var out []store.SealedSecret
	for rows.Next() {
		var sec store.SealedSecret
		var created, updated int64
		if err := rows.Scan(&sec.Name, &created, &updated); err != nil {
			return nil, classify(err, "secrets")
		}
		sec.CreatedAt, sec.UpdatedAt = fromTS(created), fromTS(updated)
		out = append(out, sec)
	}
	return out, classify(rows.Err(), "secrets")
}

func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	return execOne(ctx, s.db, "secret "+name, `DELETE FROM secrets WHERE name = $1`, name)
}
