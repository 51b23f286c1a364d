package sqlstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

//go:embed pgmigrations/*.sql
var pgMigrations embed.FS

// maxPostgresConns bounds one daemon's connections, so that several
// daemons fit in a server's default max_connections (100).
const maxPostgresConns = 16

// IsPostgresURL reports whether u names a PostgreSQL database.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// OpenPostgres connects to the PostgreSQL database at dsn
// (postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=..., or with host=/dir
// for a unix socket) and applies pending migrations. Errors name the
// database with its password redacted.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	name := store.RedactURL(dsn)
	if !IsPostgresURL(dsn) {
		return nil, errdefs.Invalid("store %s is not a postgres:// URL", name)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the string they could not parse.
		return nil, errdefs.Invalid("store %s is not a valid PostgreSQL URL", name)
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		// Names this daemon in pg_stat_activity, and to a second daemon
		// that HoldExclusive refuses.
		host, _ := os.Hostname()
		cfg.RuntimeParams["application_name"] = fmt.Sprintf("agentbox pid %d on %s", os.Getpid(), host)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxPostgresConns)
	db.SetMaxIdleConns(maxPostgresConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to database %s: %w", name, scrub(err, cfg.Password))
	}
	s := &Store{db: db, d: postgresDialect, name: name}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating database %s: %w", name, scrub(err, cfg.Password))
	}
	return s, nil
}

// scrub makes sure an error's text does not carry the password (pgx's
// connection errors name the host and user, not the password, but this
// does not depend on it).
func scrub(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "xxxxx"))
}

// daemonLockKey is the session advisory lock a daemon holds on its
// PostgreSQL database (arbitrary, fixed): "abxDaemn".
const daemonLockKey int64 = 0x616278446165_6d6e

// HoldExclusive makes this process the only agentbox daemon on the
// database until release is called or the process ends, or fails with
// ErrConflict naming the one that is. Until daemons share a store as nodes
// (each owning its sandboxes), a second daemon would take the first's
// running sandboxes for the leftovers of a crash. On SQLite it does
// nothing: the data dir's lock covers its database file.
//
// The lock is PostgreSQL's session advisory lock on a connection kept for
// the purpose, so it dies with the daemon's connection: a crashed or
// partitioned daemon never blocks the next for longer than the server
// takes to notice.
func (s *Store) HoldExclusive(ctx context.Context) (release func(), err error) {
	if s.d.name != "postgres" {
		return func() {}, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("locking database %s: %w", s.name, err)
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, daemonLockKey).Scan(&ok); err != nil {
		conn.Close()
		return nil, fmt.Errorf("locking database %s: %w", s.name, err)
	}
	if !ok {
		conn.Close()
		holder := "unknown"
		// An advisory lock on a bigint key shows as classid (high half) and objid (low half).
		var app string
		key := daemonLockKey
		if err := s.db.QueryRowContext(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1 LIMIT 1`,
			key>>32, key&0xffffffff).Scan(&app); err == nil && app != "" {
			holder = app
		}
		return nil, fmt.Errorf("database %s is used by another agentbox daemon (%s): stop it, or give this one another store: %w",
			s.name, holder, errdefs.ErrConflict)
	}
	return func() {
		conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, daemonLockKey)
		conn.Close()
	}, nil
}
