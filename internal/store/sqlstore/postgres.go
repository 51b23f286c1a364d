package sqlstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentbox/agentbox/internal/errdefs"
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

// RedactURL returns u with any password replaced by "xxxxx", for errors and
// logs. A string that does not parse as a URL is replaced entirely: it may
// hold a password in a form this cannot find.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable database URL)"
	}
	q := p.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}

// OpenPostgres connects to the PostgreSQL database at dsn
// (postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=..., or with host=/dir
// for a unix socket) and applies pending migrations. Errors name the
// database with its password redacted.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	name := RedactURL(dsn)
	if !IsPostgresURL(dsn) {
		return nil, errdefs.Invalid("store %s is not a postgres:// URL", name)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the string they could not parse.
		return nil, errdefs.Invalid("store %s is not a valid PostgreSQL URL", name)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxPostgresConns)
	db.SetMaxIdleConns(maxPostgresConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to database %s: %w", name, scrub(err, cfg.Password))
	}
	s := &Store{db: db, d: postgresDialect}
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
