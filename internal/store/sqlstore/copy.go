package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// gooseTable is goose's own bookkeeping, which every database keeps for
// itself and Copy leaves alone.
const gooseTable = "goose_db_version"

// Schema returns every table agentbox's migrations made (goose's own
// excepted) with its columns, sorted.
func (s *Store) Schema(ctx context.Context) (map[string][]string, error) {
	var q string
	switch s.d.name {
	case "sqlite":
		q = `SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c
			WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> $1`
	default:
		q = `SELECT table_name, column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name <> $1`
	}
	rows, err := s.db.QueryContext(ctx, q, gooseTable)
	if err != nil {
		return nil, fmt.Errorf("reading the schema: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return nil, fmt.Errorf("reading the schema: %w", err)
		}
		out[t] = append(out[t], c)
	}
	for _, cols := range out {
		slices.Sort(cols)
	}
	return out, rows.Err()
}

// copyOrder returns the tables parents first, so that every row's
// foreign keys find their targets when it is inserted.
func (s *Store) copyOrder(ctx context.Context, schema map[string][]string) ([]string, error) {
	deps := map[string][]string{}
	for t := range schema {
		rows, err := s.db.QueryContext(ctx, `SELECT "table" FROM pragma_foreign_key_list($1)`, t)
		if err != nil {
			return nil, fmt.Errorf("reading the foreign keys of %s: %w", t, err)
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				return nil, err
			}
			if p != t {
				deps[t] = append(deps[t], p)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var order []string
	done := map[string]bool{}
	var visit func(t string, depth int) error
	visit = func(t string, depth int) error {
		if done[t] {
			return nil
		}
		if depth > len(schema) {
			return fmt.Errorf("the foreign keys of table %s form a cycle", t)
		}
		for _, p := range deps[t] {
			if err := visit(p, depth+1); err != nil {
				return err
			}
		}
		done[t] = true
		order = append(order, t)
		return nil
	}
	names := make([]string, 0, len(schema))
	for t := range schema {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		if err := visit(t, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// CopyStats is what Copy moved: rows per table.
type CopyStats map[string]int64

// CopyTo copies every row of every table of s, a SQLite store, into dst, a
// migrated and empty PostgreSQL store, in one transaction of dst: all of
// it arrives or none of it does. It refuses a dst with any row in any
// table, and one whose schema differs from s's (a database migrated by
// another version of agentbox). Secrets move sealed, as they are. s is
// read in one transaction too, so the copy is one consistent state of it;
// the caller makes sure no daemon writes to it meanwhile.
func (s *Store) CopyTo(ctx context.Context, dst *Store) (CopyStats, error) {
	if s.d.name != "sqlite" || dst.d.name != "postgres" {
		return nil, errdefs.Invalid("copying a %s store into a %s one: only SQLite into PostgreSQL is supported", s.d.name, dst.d.name)
	}
	schema, err := s.Schema(ctx)
	if err != nil {
		return nil, err
	}
	dschema, err := dst.Schema(ctx)
	if err != nil {
		return nil, err
	}
	for t, cols := range schema {
		if dc, ok := dschema[t]; !ok || !slices.Equal(cols, dc) {
			return nil, fmt.Errorf("table %s: columns %v here, %v in the target: run the same agentbox version on both: %w", t, cols, dc, errdefs.ErrConflict)
		}
	}
	order, err := s.copyOrder(ctx, schema)
	if err != nil {
		return nil, err
	}
	src, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the source: %w", err)
	}
	defer src.Rollback()
	// The target is written through pgx itself, for COPY: a row costs
	// microseconds, not a round trip.
	conn, err := dst.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("writing the target: %w", err)
	}
	defer conn.Close()
	stats := CopyStats{}
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("writing the target: a %T, not a pgx connection", dc)
		}
		tx, err := pc.Conn().Begin(ctx)
		if err != nil {
			return fmt.Errorf("writing the target: %w", err)
		}
		defer tx.Rollback(ctx)
		// Lock every table of the target against writers for the whole
		// copy, and make sure it is empty: a migration never merges two
		// states.
		for _, t := range order {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+t+` IN EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("locking table %s of the target: %w", t, err)
			}
			var n int64
			if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM `+t).Scan(&n); err != nil {
				return fmt.Errorf("counting table %s of the target: %w", t, err)
			}
			if n > 0 {
				return fmt.Errorf("the target database is not empty: table %s has %d row(s): %w", t, n, errdefs.ErrConflict)
			}
		}
		for _, t := range order {
			n, err := copyTable(ctx, src, tx, t, schema[t])
			if err != nil {
				return err
			}
			stats[t] = n
		}
		// Identity columns (event IDs, ...) continue after the copied rows.
		rows, err := tx.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND is_identity = 'YES' AND table_name <> $1`, gooseTable)
		if err != nil {
			return fmt.Errorf("finding identity columns: %w", err)
		}
		type ident struct{ table, col string }
		var idents []ident
		for rows.Next() {
			var i ident
			if err := rows.Scan(&i.table, &i.col); err != nil {
				rows.Close()
				return err
			}
			idents = append(idents, i)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("finding identity columns: %w", err)
		}
		for _, i := range idents {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT setval(pg_get_serial_sequence('%s', '%s'), COALESCE((SELECT MAX(%s) FROM %s), 0) + 1, false)`,
				i.table, i.col, i.col, i.table)); err != nil {
				return fmt.Errorf("moving the sequence of %s.%s past the copied rows: %w", i.table, i.col, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("committing the copy: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return stats, nil
}

// copyTable copies one table's rows from src into dst with COPY, column
// by column by name.
func copyTable(ctx context.Context, src *sql.Tx, dst pgx.Tx, table string, cols []string) (int64, error) {
	rows, err := src.QueryContext(ctx, `SELECT `+strings.Join(cols, ", ")+` FROM `+table)
	if err != nil {
		return 0, fmt.Errorf("reading table %s: %w", table, err)
	}
	defer rows.Close()
	rs := &rowSource{rows: rows, vals: make([]any, len(cols)), ptrs: make([]any, len(cols))}
	for i := range rs.vals {
		rs.ptrs[i] = &rs.vals[i]
	}
	n, err := dst.CopyFrom(ctx, pgx.Identifier{table}, cols, rs)
	if err != nil {
		return n, fmt.Errorf("copying table %s: %w", table, err)
	}
	return n, nil
}

// rowSource feeds COPY from a query's rows.
type rowSource struct {
	rows       *sql.Rows
	vals, ptrs []any
	err        error
}

func (r *rowSource) Next() bool {
	if !r.rows.Next() {
		return false
	}
	if err := r.rows.Scan(r.ptrs...); err != nil {
		r.err = err
		return false
	}
	return true
}

func (r *rowSource) Values() ([]any, error) { return r.vals, nil }

func (r *rowSource) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.rows.Err()
}

// Dump renders every row of every table as text, one line per row with
// its columns in name order, the lines of a table sorted: two stores hold
// the same state when their dumps are equal. For tests and checks of a
// copy; it reads everything into memory.
func (s *Store) Dump(ctx context.Context) (map[string][]string, error) {
	schema, err := s.Schema(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for t, cols := range schema {
		rows, err := s.db.QueryContext(ctx, `SELECT `+strings.Join(cols, ", ")+` FROM `+t)
		if err != nil {
			return nil, fmt.Errorf("reading table %s: %w", t, err)
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		lines := []string{}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return nil, err
			}
			var b strings.Builder
			for i, v := range vals {
				if i > 0 {
					b.WriteString(" | ")
				}
				switch v := v.(type) {
				case nil:
					b.WriteString("NULL")
				case []byte:
					b.WriteString("x" + hex.EncodeToString(v))
				case string:
					fmt.Fprintf(&b, "%q", v)
				default:
					fmt.Fprintf(&b, "%v", v)
				}
			}
			lines = append(lines, b.String())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		slices.Sort(lines)
		out[t] = lines
	}
	return out, nil
}
