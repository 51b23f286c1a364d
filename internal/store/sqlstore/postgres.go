package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

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
		// pgx's parse errors quote the string they could not parse: its
		// own redaction is not relied on.
		return nil, errdefs.Invalid("store %s is not a valid PostgreSQL URL: %v", name, scrub(err, urlPasswords(dsn)...))
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
	if err := s.prepareTx(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening database %s: %w", name, scrub(err, cfg.Password))
	}
	return s, nil
}

// scrub makes sure an error's text does not carry the password (pgx's
// connection errors name the host and user, not the password, but this
// does not depend on it).
func scrub(err error, passwords ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, pw := range passwords {
		if pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// urlPasswords returns the passwords a URL carries, in its user info or
// its query, raw and decoded, for scrub.
func urlPasswords(dsn string) []string {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil
	}
	var out []string
	if pw, ok := u.User.Password(); ok {
		out = append(out, pw, url.UserPassword("", pw).String()[1:])
	}
	if pw := u.Query().Get("password"); pw != "" {
		out = append(out, pw, url.QueryEscape(pw))
	}
	return out
}

// daemonLockKey is the session advisory lock a daemon holds on its
// PostgreSQL database (arbitrary, fixed): "abxDaemn".
const daemonLockKey int64 = 0x616278446165_6d6e

// holdCheck is how often a held store lock is checked; a variable for
// tests.
var holdCheck = 5 * time.Second

// HoldExclusive makes this process the only user of the database (a
// migration into it) until release is called or the process ends, or
// fails with ErrConflict naming a daemon that uses it. On SQLite it does
// nothing: the data dir's lock covers its database file.
//
// The lock is PostgreSQL's session advisory lock on a connection kept for
// the purpose, so it dies with the daemon's connection: a crashed or
// partitioned daemon never blocks the next for longer than the server
// takes to notice. The other side of that: a connection that breaks (the
// server restarted, a proxy dropped it) loses the lock. It is checked
// every few seconds and taken again on a new connection; if another
// daemon has taken it meanwhile, lost is called once with the reason, and
// the caller must stop using the store.
func (s *Store) HoldExclusive(ctx context.Context, lost func(error)) (release func(), err error) {
	return s.hold(ctx, false, lost)
}

// HoldShared is HoldExclusive for a daemon: any number of daemons share
// the database as nodes (each owning its objects, see store.NodeStore),
// but none while a migration holds it exclusively, nor a migration while
// one runs.
func (s *Store) HoldShared(ctx context.Context, lost func(error)) (release func(), err error) {
	return s.hold(ctx, true, lost)
}

func (s *Store) hold(ctx context.Context, shared bool, lost func(error)) (release func(), err error) {
	if s.d.name != "postgres" {
		return func() {}, nil
	}
	// A daemon of this machine that has just died may still hold the lock
	// for a moment: the server ends its session when it notices. Its
	// successor waits for that rather than fail; a live holder, or one
	// elsewhere, is refused at once.
	var h held
	for deadline := time.Now().Add(holdDeadWait); ; {
		var holder lockHolder
		h, holder, err = s.lockDaemon(ctx, shared)
		if err == nil {
			break
		}
		if !errors.Is(err, errdefs.ErrConflict) || !holder.deadHere() || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(holdCheck)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if h.conn != nil {
					h.conn.ExecContext(context.Background(), unlockQuery(shared), daemonLockKey)
					h.conn.Close()
				}
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(context.Background(), holdCheck)
			if h.conn != nil {
				if _, err := h.conn.ExecContext(cctx, `SELECT 1`); err != nil {
					h.conn.Close()
					h.conn = nil
				}
			}
			if h.conn == nil {
				// The connection, and the lock with it, is gone: take it
				// again, unless another daemon has.
				nh, holder, err := s.lockDaemon(cctx, shared)
				switch {
				case err == nil:
					h = nh
				case errors.Is(err, errdefs.ErrConflict) && holder.backend == h.backend:
					// Our own old session, which the server has not
					// ended yet: end it, and take the lock at the next
					// check.
					s.db.ExecContext(cctx, `SELECT pg_terminate_backend($1)`, holder.backend)
				case errors.Is(err, errdefs.ErrConflict):
					cancel()
					if lost != nil {
						lost(fmt.Errorf("lost the lock on the database when its connection broke: %w", err))
					}
					<-stop
					return
				}
				// Any other error (the server is down): try again at the
				// next check; no daemon writes meanwhile either.
			}
			cancel()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }, nil
}

// lockQuery takes the daemon lock, shared or not, and names the session.
func lockQuery(shared bool) string {
	if shared {
		return `SELECT pg_try_advisory_lock_shared($1), pg_backend_pid()`
	}
	return `SELECT pg_try_advisory_lock($1), pg_backend_pid()`
}

// unlockQuery gives the daemon lock back.
func unlockQuery(shared bool) string {
	if shared {
		return `SELECT pg_advisory_unlock_shared($1)`
	}
	return `SELECT pg_advisory_unlock($1)`
}

// holdDeadWait bounds the wait for a dead daemon's lock to go.
const holdDeadWait = 15 * time.Second

// held is the daemon lock's connection and its server process.
type held struct {
	conn    *sql.Conn
	backend int
}

// lockHolder is who holds the daemon lock: its server process and the
// application name its connection gave (see OpenPostgres).
type lockHolder struct {
	backend int
	app     string
}

// deadHere reports whether the holder is an agentbox daemon of this
// machine that no longer runs.
func (h lockHolder) deadHere() bool {
	var pid int
	var host string
	if n, _ := fmt.Sscanf(h.app, "agentbox pid %d on %s", &pid, &host); n != 2 || pid <= 0 {
		return false
	}
	me, _ := os.Hostname()
	return host == me && pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// lockDaemon takes the daemon lock on a connection of its own, or fails
// with ErrConflict naming the holder.
func (s *Store) lockDaemon(ctx context.Context, shared bool) (held, lockHolder, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return held{}, lockHolder{}, fmt.Errorf("locking database %s: %w", s.name, err)
	}
	var ok bool
	var backend int
	if err := conn.QueryRowContext(ctx, lockQuery(shared), daemonLockKey).Scan(&ok, &backend); err != nil {
		conn.Close()
		return held{}, lockHolder{}, fmt.Errorf("locking database %s: %w", s.name, err)
	}
	if ok {
		// Over TCP, the server ends the session of a machine that died
		// without a word within about 30 s, rather than the hours of the
		// system's keepalive defaults: the lock must die with its holder.
		// (No effect on a unix socket, where death is seen at once.)
		for _, set := range []string{`SET tcp_keepalives_idle = 10`, `SET tcp_keepalives_interval = 5`,
			`SET tcp_keepalives_count = 3`, `SET tcp_user_timeout = 30000`} {
			if _, err := conn.ExecContext(ctx, set); err != nil {
				conn.ExecContext(ctx, unlockQuery(shared), daemonLockKey)
				conn.Close()
				return held{}, lockHolder{}, fmt.Errorf("locking database %s: %s: %w", s.name, set, err)
			}
		}
		return held{conn: conn, backend: backend}, lockHolder{}, nil
	}
	conn.Close()
	var holder lockHolder
	// An advisory lock on a bigint key shows as classid (high half) and
	// objid (low half).
	key := daemonLockKey
	s.db.QueryRowContext(ctx, `SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1`,
		key>>32, key&0xffffffff).Scan(&holder.backend, &holder.app)
	name := holder.app
	if name == "" {
		name = "unknown"
	}
	return held{}, holder, fmt.Errorf("database %s is used by another agentbox daemon (%s): stop it, or give this one another store: %w",
		s.name, name, errdefs.ErrConflict)
}
