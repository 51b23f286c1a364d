package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
)

// dialect is what differs between the two databases. Everything else (the
// queries) is shared, so a change to one is a change to both.
type dialect struct {
	name string
	// goose is the migration dialect; migrations/migrationDir the
	// migration files. The two directories carry the same version numbers
	// (TestMigrationsPaired), so that a migration is never written for one
	// database only.
	goose        goose.Dialect
	migrations   embed.FS
	migrationDir string
	// forUpdate ends a SELECT that locks the rows it reads until the
	// transaction ends. SQLite has no row locks and needs none: its write
	// transactions are serial (_txlock=immediate).
	forUpdate string
	// lockEvents, when set, is run first in every transaction that appends
	// events. On PostgreSQL, concurrent transactions would otherwise commit
	// events out of ID order, and a reader following the log with AfterID
	// could pass over an ID whose transaction had not committed yet and
	// never see that event. Holding one transaction-scoped advisory lock
	// from before the first ID is drawn until the commit makes IDs visible
	// in order, across every daemon sharing the database. It is taken
	// before any row lock, so it cannot take part in a deadlock.
	lockEvents string
}

var sqliteDialect = dialect{
	name:         "sqlite",
	goose:        goose.DialectSQLite3,
	migrations:   migrations,
	migrationDir: "migrations",
}

// eventsLockKey is the advisory lock key that orders event IDs
// (arbitrary, but fixed: every daemon must use the same one).
const eventsLockKey int64 = 0x61627845766e7473 // "abxEvnts"

var postgresDialect = dialect{
	name:         "postgres",
	goose:        goose.DialectPostgres,
	migrations:   pgMigrations,
	migrationDir: "pgmigrations",
	forUpdate:    " FOR UPDATE",
	lockEvents:   fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", eventsLockKey),
}

// PostgreSQL's SQLSTATE codes that classify reports: constraint
// violations as conflicts, text it cannot hold as invalid.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
	pgBadCharacter        = "22021" // character_not_in_repertoire: NUL, invalid UTF-8
	pgUntranslatable      = "22P05"
)

// lockEvents runs the dialect's event lock in tx, if it has one.
func (s *Store) lockEvents(ctx context.Context, tx *sql.Tx) error {
	if s.d.lockEvents == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.d.lockEvents)
	return err
}
