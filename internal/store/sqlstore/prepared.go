package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// Prepared statements for the queries every exec runs (finding the
// workspace's sandbox, the exec's row before and after, its event):
// without them each call parses its SQL again, which was a third of the
// store's CPU per exec on SQLite. A statement is prepared on first use
// (those run in transactions: when the store opens, see txStatements)
// and kept for the Store's life; database/sql prepares it again on each
// connection that runs it. Only fixed query texts go through here: a
// query built from a filter would grow the set without bound.
type statements struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// txStatements are the prepared statements run inside transactions,
// prepared when the store opens: preparing one on the database from
// within a transaction would take a second connection while the
// transaction holds one, and a bounded pool (PostgreSQL's) could be
// all transactions waiting for that.
var txStatements = []string{updateExecEnd, updateExecActivity, insertEvent}

// prepareTx prepares txStatements.
func (s *Store) prepareTx(ctx context.Context) error {
	for _, q := range txStatements {
		if _, err := s.stmt(ctx, q); err != nil {
			return fmt.Errorf("preparing %q: %w", q, err)
		}
	}
	return nil
}

// stmt returns q prepared on s's database. It must not be called with a
// transaction open (see txStmt). The lock is not held while preparing,
// which waits for a connection; two callers may both prepare q, and the
// second's statement is closed.
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	s.prepared.mu.Lock()
	st, ok := s.prepared.m[q]
	s.prepared.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.prepared.mu.Lock()
	defer s.prepared.mu.Unlock()
	if kept, ok := s.prepared.m[q]; ok {
		st.Close()
		return kept, nil
	}
	if s.prepared.m == nil {
		s.prepared.m = map[string]*sql.Stmt{}
	}
	s.prepared.m[q] = st
	return st, nil
}

// txStmt returns q prepared for tx: the store's statement, or, for a
// query not among txStatements, one prepared on tx's own connection and
// closed with it.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	s.prepared.mu.Lock()
	st, ok := s.prepared.m[q]
	s.prepared.mu.Unlock()
	if ok {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, q)
}

// queryRowP is QueryRowContext of the prepared q.
func (s *Store) queryRowP(ctx context.Context, q string, args ...any) rowScanner {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// queryP is QueryContext of the prepared q.
func (s *Store) queryP(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// execP is ExecContext of the prepared q, in tx when tx is not nil.
func (s *Store) execP(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	var st *sql.Stmt
	var err error
	if tx != nil {
		st, err = s.txStmt(ctx, tx, q)
	} else {
		st, err = s.stmt(ctx, q)
	}
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// closeStatements closes every prepared statement.
func (s *Store) closeStatements() {
	s.prepared.mu.Lock()
	defer s.prepared.mu.Unlock()
	for q, st := range s.prepared.m {
		st.Close()
		delete(s.prepared.m, q)
	}
}

// rowScanner is what *sql.Row and errRow have in common.
type rowScanner interface{ Scan(dest ...any) error }

// errRow is a row whose Scan returns the error that kept the query from
// running.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
