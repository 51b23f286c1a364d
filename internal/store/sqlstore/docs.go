package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
)

// Records kept as one JSON document (candidates, solve runs) with the
// columns that are looked up or guarded beside it.

// getDoc reads the doc column of the one row query selects and decodes
// it; what names the object in errors.
func getDoc[T any](ctx context.Context, s *Store, what, query string, args ...any) (T, error) {
	var out T
	var doc string
	if err := s.db.QueryRowContext(ctx, query, args...).Scan(&doc); err != nil {
		return out, classify(err, what)
	}
	if err := json.Unmarshal([]byte(doc), &out); err != nil {
		return out, fmt.Errorf("%s: a corrupt record: %w", what, err)
	}
	return out, nil
}

// listDocs reads the (id, doc) rows query selects and decodes each doc;
// kind names the objects in errors ("candidate", "solve run").
func listDocs[T any](ctx context.Context, s *Store, kind, query string, args ...any) ([]T, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(err, kind+"s")
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var id, doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, classify(err, kind+"s")
		}
		var v T
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return nil, fmt.Errorf("%s %s: a corrupt record: %w", kind, id, err)
		}
		out = append(out, v)
	}
	return out, classify(rows.Err(), kind+"s")
}
