// Package sqlstore implements store.Store on SQLite through modernc.org/sqlite
// (pure Go, so CGO_ENABLED=0 builds work) and on PostgreSQL through pgx's
// database/sql driver, with one set of queries: they use $N placeholders and
// SQL both databases accept, and a small dialect carries the few
// differences (the migrations, row locks, the order of event IDs).
//
// SQLite runs in WAL mode with synchronous=FULL (an acknowledged state
// change survives a crash of the daemon or the machine), a busy timeout, and
// immediate write transactions: without _txlock=immediate, concurrent
// read-then-write transactions fail with SQLITE_BUSY instead of waiting.
// That makes every write transaction serial, which PostgreSQL's READ
// COMMITTED does not: see dialect for what takes its place there.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store backed by one SQLite file or one PostgreSQL
// database.
type Store struct {
	db *sql.DB
	d  dialect
	// name is the database for errors: the file, or the URL without its
	// password.
	name string
	// prepared holds the hot queries' statements (see stmt).
	prepared statements
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and applies pending
// migrations.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(15000)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	s := &Store{db: db, d: sqliteDialect, name: path}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating database %s: %w", path, err)
	}
	if err := s.prepareTx(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	return s, nil
}

// migrate applies the dialect's pending migrations.
func (s *Store) migrate(ctx context.Context) error {
	sub, err := fs.Sub(s.d.migrations, s.d.migrationDir)
	if err != nil {
		return err
	}
	// Out of order: migrations written on parallel branches carry
	// numbers that may land after a database already has later ones.
	p, err := goose.NewProvider(s.d.goose, s.db, sub, goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("preparing migrations: %w", err)
	}
	_, err = p.Up(ctx)
	return err
}

// Close closes the database.
func (s *Store) Close() error {
	s.closeStatements()
	return s.db.Close()
}

func ts(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromTS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// classify turns driver errors into errdefs classes, naming the object.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %w", what, errdefs.ErrNotFound)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%s already exists: %w", what, errdefs.ErrConflict)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%s is still referenced or references a missing object: %w", what, errdefs.ErrConflict)
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgUniqueViolation:
			return fmt.Errorf("%s already exists: %w", what, errdefs.ErrConflict)
		case pgForeignKeyViolation:
			return fmt.Errorf("%s is still referenced or references a missing object: %w", what, errdefs.ErrConflict)
		case pgBadCharacter, pgUntranslatable:
			// PostgreSQL's text holds neither NUL nor invalid UTF-8,
			// which SQLite stores as given.
			return fmt.Errorf("%s: a text field holds a NUL byte or invalid UTF-8: %w", what, errdefs.ErrInvalid)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// execer is a database or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func execOne(ctx context.Context, db execer, what, query string, args ...any) error {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return classify(err, what)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return classify(err, what)
	}
	if n == 0 {
		return fmt.Errorf("%s %w", what, errdefs.ErrNotFound)
	}
	return nil
}

// --- repos

const repoCols = `id, url, path, default_branch, size_bytes, created_at, last_fetch_at, last_used_at`

func scanRepo(row interface{ Scan(...any) error }) (store.Repo, error) {
	var r store.Repo
	var c, f, u int64
	err := row.Scan(&r.ID, &r.URL, &r.Path, &r.DefaultBranch, &r.SizeBytes, &c, &f, &u)
	r.CreatedAt, r.LastFetchAt, r.LastUsedAt = fromTS(c), fromTS(f), fromTS(u)
	return r, err
}

func (s *Store) CreateRepo(ctx context.Context, r store.Repo) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO repos (`+repoCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`,
		r.ID, r.URL, r.Path, r.DefaultBranch, r.SizeBytes, ts(r.CreatedAt), ts(r.LastFetchAt), ts(r.LastUsedAt))
	return classify(err, "repo "+r.ID)
}

func (s *Store) GetRepo(ctx context.Context, id string) (store.Repo, error) {
	r, err := scanRepo(s.db.QueryRowContext(ctx, `SELECT `+repoCols+` FROM repos WHERE id = $1`, id))
	return r, classify(err, "repo "+id)
}

func (s *Store) GetRepoByURL(ctx context.Context, u string) (store.Repo, error) {
	r, err := scanRepo(s.db.QueryRowContext(ctx, `SELECT `+repoCols+` FROM repos WHERE url = $1`, u))
	return r, classify(err, "repo "+u)
}

func (s *Store) ListRepos(ctx context.Context) ([]store.Repo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+repoCols+` FROM repos ORDER BY created_at, id`)
	if err != nil {
		return nil, classify(err, "listing repos")
	}
	defer rows.Close()
	out := []store.Repo{}
	for rows.Next() {
		r, err := scanRepo(rows)
		if err != nil {
			return nil, classify(err, "listing repos")
		}
		out = append(out, r)
	}
	return out, classify(rows.Err(), "listing repos")
}

func (s *Store) UpdateRepo(ctx context.Context, r store.Repo) error {
	return execOne(ctx, s.db, "repo "+r.ID,
		`UPDATE repos SET url=$2, path=$3, default_branch=$4, size_bytes=$5, last_fetch_at=$6, last_used_at=$7 WHERE id=$1`,
		r.ID, r.URL, r.Path, r.DefaultBranch, r.SizeBytes, ts(r.LastFetchAt), ts(r.LastUsedAt))
}

func (s *Store) DeleteRepo(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, "repo "+id)
	}
	defer tx.Rollback()
	// Lock the repo row: a workspace made from it meanwhile waits, then
	// fails on its foreign key, rather than slipping in after the count.
	var locked string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM repos WHERE id = $1`+s.d.forUpdate, id).Scan(&locked); err != nil {
		return classify(err, "repo "+id)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces WHERE repo_id = $1`, id).Scan(&n); err != nil {
		return classify(err, "repo "+id)
	}
	if n > 0 {
		return fmt.Errorf("repo %s is used by %d workspace(s): %w", id, n, errdefs.ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM pristines WHERE repo_id = $1`, id); err != nil {
		return classify(err, "repo "+id)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM repos WHERE id = $1`, id)
	if err != nil {
		return classify(err, "repo "+id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("repo %s %w", id, errdefs.ErrNotFound)
	}
	return classify(tx.Commit(), "repo "+id)
}

// --- pristines

const pristineCols = `p.id, p.repo_id, p.commit_sha, p.path, p.size_bytes, p.created_at, p.last_used_at,
	(SELECT COUNT(*) FROM workspaces w WHERE w.pristine_id = p.id)`

func scanPristine(row interface{ Scan(...any) error }) (store.Pristine, error) {
	var p store.Pristine
	var c, u int64
	err := row.Scan(&p.ID, &p.RepoID, &p.Commit, &p.Path, &p.SizeBytes, &c, &u, &p.RefCount)
	p.CreatedAt, p.LastUsedAt = fromTS(c), fromTS(u)
	return p, err
}

func (s *Store) CreatePristine(ctx context.Context, p store.Pristine) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO pristines (id, repo_id, commit_sha, path, size_bytes, created_at, last_used_at) VALUES ($1,$2,$3,$4,$5,$6,$7)`,
		p.ID, p.RepoID, p.Commit, p.Path, p.SizeBytes, ts(p.CreatedAt), ts(p.LastUsedAt))
	return classify(err, "pristine checkout "+p.ID)
}

func (s *Store) GetPristine(ctx context.Context, id string) (store.Pristine, error) {
	p, err := scanPristine(s.db.QueryRowContext(ctx, `SELECT `+pristineCols+` FROM pristines p WHERE p.id = $1`, id))
	return p, classify(err, "pristine checkout "+id)
}

func (s *Store) FindPristine(ctx context.Context, repoID, commit string) (store.Pristine, error) {
	p, err := scanPristine(s.db.QueryRowContext(ctx, `SELECT `+pristineCols+` FROM pristines p WHERE p.repo_id = $1 AND p.commit_sha = $2`, repoID, commit))
	return p, classify(err, fmt.Sprintf("pristine checkout of %s@%s", repoID, commit))
}

func (s *Store) ListPristines(ctx context.Context, repoID string) ([]store.Pristine, error) {
	q := `SELECT ` + pristineCols + ` FROM pristines p`
	var args []any
	if repoID != "" {
		q += ` WHERE p.repo_id = $1`
		args = append(args, repoID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY p.created_at, p.id`, args...)
	if err != nil {
		return nil, classify(err, "listing pristine checkouts")
	}
	defer rows.Close()
	out := []store.Pristine{}
	for rows.Next() {
		p, err := scanPristine(rows)
		if err != nil {
			return nil, classify(err, "listing pristine checkouts")
		}
		out = append(out, p)
	}
	return out, classify(rows.Err(), "listing pristine checkouts")
}

func (s *Store) TouchPristine(ctx context.Context, id string, at time.Time) error {
	return execOne(ctx, s.db, "pristine checkout "+id, `UPDATE pristines SET last_used_at=$2 WHERE id=$1`, id, ts(at))
}

func (s *Store) DeletePristine(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, "pristine checkout "+id)
	}
	defer tx.Rollback()
	var locked string
	if err := tx.QueryRowContext(ctx, `SELECT id FROM pristines WHERE id = $1`+s.d.forUpdate, id).Scan(&locked); err != nil {
		return classify(err, "pristine checkout "+id)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces WHERE pristine_id = $1`, id).Scan(&n); err != nil {
		return classify(err, "pristine checkout "+id)
	}
	if n > 0 {
		return fmt.Errorf("pristine checkout %s is used by %d workspace(s): %w", id, n, errdefs.ErrConflict)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM pristines WHERE id = $1`, id)
	if err != nil {
		return classify(err, "pristine checkout "+id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("pristine checkout %s %w", id, errdefs.ErrNotFound)
	}
	return classify(tx.Commit(), "pristine checkout "+id)
}

// --- workspaces

const wsCols = `id, repo_id, COALESCE(pristine_id, ''), COALESCE(parent_id, ''), ref, base_commit, branch, task, driver, dir, state, dirty, size_bytes, disk_quota, created_at, updated_at, node_id`

func scanWorkspace(row interface{ Scan(...any) error }) (store.Workspace, error) {
	var w store.Workspace
	var dirty int
	var c, u int64
	err := row.Scan(&w.ID, &w.RepoID, &w.PristineID, &w.ParentID, &w.Ref, &w.BaseCommit, &w.Branch, &w.Task,
		&w.Driver, &w.Dir, &w.State, &dirty, &w.SizeBytes, &w.DiskQuota, &c, &u, &w.Node)
	w.Dirty = dirty != 0
	w.CreatedAt, w.UpdatedAt = fromTS(c), fromTS(u)
	return w, err
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Store) CreateWorkspace(ctx context.Context, w store.Workspace) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO workspaces (id, repo_id, pristine_id, parent_id, ref, base_commit, branch, task, driver, dir, state, dirty, size_bytes, disk_quota, created_at, updated_at, node_id)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)`,
		w.ID, w.RepoID, nullable(w.PristineID), nullable(w.ParentID), w.Ref, w.BaseCommit, w.Branch, w.Task,
		w.Driver, w.Dir, w.State, boolInt(w.Dirty), w.SizeBytes, w.DiskQuota, ts(w.CreatedAt), ts(w.UpdatedAt), w.Node)
	return classify(err, "workspace "+w.ID)
}

func (s *Store) GetWorkspace(ctx context.Context, id string) (store.Workspace, error) {
	w, err := scanWorkspace(s.queryRowP(ctx, `SELECT `+wsCols+` FROM workspaces WHERE id = $1`, id))
	return w, classify(err, "workspace "+id)
}

func (s *Store) ListWorkspaces(ctx context.Context, repoID string) ([]store.Workspace, error) {
	q := `SELECT ` + wsCols + ` FROM workspaces`
	var args []any
	if repoID != "" {
		q += ` WHERE repo_id = $1`
		args = append(args, repoID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, classify(err, "listing workspaces")
	}
	defer rows.Close()
	out := []store.Workspace{}
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, classify(err, "listing workspaces")
		}
		out = append(out, w)
	}
	return out, classify(rows.Err(), "listing workspaces")
}

func (s *Store) UpdateWorkspace(ctx context.Context, w store.Workspace) error {
	return updateWorkspace(ctx, s.db, w)
}

func (s *Store) UpdateWorkspaceEvent(ctx context.Context, w store.Workspace, ev store.Event) (store.Event, error) {
	return s.withEvent(ctx, "workspace "+w.ID, ev, func(tx *sql.Tx) error { return updateWorkspace(ctx, tx, w) })
}

func updateWorkspace(ctx context.Context, q execer, w store.Workspace) error {
	return execOne(ctx, q, "workspace "+w.ID,
		`UPDATE workspaces SET pristine_id=$2, parent_id=$3, ref=$4, base_commit=$5, branch=$6, task=$7, driver=$8, dir=$9, state=$10, dirty=$11, size_bytes=$12, updated_at=$13, disk_quota=$14 WHERE id=$1`,
		w.ID, nullable(w.PristineID), nullable(w.ParentID), w.Ref, w.BaseCommit, w.Branch, w.Task, w.Driver, w.Dir, w.State,
		boolInt(w.Dirty), w.SizeBytes, ts(w.UpdatedAt), w.DiskQuota)
}

func (s *Store) SetWorkspaceSandboxSpec(ctx context.Context, id, spec string) error {
	return execOne(ctx, s.db, "workspace "+id, `UPDATE workspaces SET sandbox_spec=$2 WHERE id=$1`, id, spec)
}

func (s *Store) WorkspaceSandboxSpec(ctx context.Context, id string) (string, error) {
	var spec string
	err := s.db.QueryRowContext(ctx, `SELECT sandbox_spec FROM workspaces WHERE id = $1`, id).Scan(&spec)
	return spec, classify(err, "workspace "+id)
}

func (s *Store) DeleteWorkspace(ctx context.Context, id string) error {
	return execOne(ctx, s.db, "workspace "+id, `DELETE FROM workspaces WHERE id = $1`, id)
}

// --- events

func (s *Store) AppendEvent(ctx context.Context, e store.Event) (store.Event, error) {
	return s.withEvent(ctx, "event "+e.Type, e, func(*sql.Tx) error { return nil })
}

const insertEvent = `INSERT INTO events (at, actor, type, repo_id, workspace_id, sandbox_id, detail) VALUES ($1,$2,$3,$4,$5,$6,$7) RETURNING id`

func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	var where []string
	var args []any
	add := func(col string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf("%s = $%d", col, len(args)))
	}
	if f.RepoID != "" {
		add("repo_id", f.RepoID)
	}
	if f.WorkspaceID != "" {
		add("workspace_id", f.WorkspaceID)
	}
	if f.SandboxID != "" {
		add("sandbox_id", f.SandboxID)
	}
	if f.Type != "" {
		add("type", f.Type)
	}
	if f.Actor != "" {
		add("actor", f.Actor)
	}
	if f.TypePrefix != "" {
		// substr, not LIKE: types hold _, which LIKE would match as any
		// character. Both engines count characters.
		args = append(args, f.TypePrefix)
		where = append(where, fmt.Sprintf("substr(type, 1, %d) = $%d", utf8.RuneCountInString(f.TypePrefix), len(args)))
	}
	if f.Object != "" {
		args = append(args, f.Object)
		n := len(args)
		where = append(where, fmt.Sprintf("(repo_id = $%d OR workspace_id = $%d OR sandbox_id = $%d)", n, n, n))
	}
	args = append(args, f.AfterID)
	where = append(where, fmt.Sprintf("id > $%d", len(args)))
	if f.BeforeID > 0 {
		args = append(args, f.BeforeID)
		where = append(where, fmt.Sprintf("id < $%d", len(args)))
	}
	limit := f.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	order := "id"
	if f.Newest {
		order = "id DESC"
	}
	args = append(args, limit)
	q := `SELECT id, at, actor, type, repo_id, workspace_id, sandbox_id, detail FROM events WHERE ` +
		strings.Join(where, " AND ") + fmt.Sprintf(" ORDER BY %s LIMIT $%d", order, len(args))
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err, "listing events")
	}
	defer rows.Close()
	out := []store.Event{}
	for rows.Next() {
		var e store.Event
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Type, &e.RepoID, &e.WorkspaceID, &e.SandboxID, &e.Detail); err != nil {
			return nil, classify(err, "listing events")
		}
		e.Time = fromTS(at)
		out = append(out, e)
	}
	return out, classify(rows.Err(), "listing events")
}
