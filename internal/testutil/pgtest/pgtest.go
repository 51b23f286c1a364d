// Package pgtest gives tests a real PostgreSQL 15: one server per test
// binary, started on first use from Debian's binaries in a temporary
// directory, listening only on a unix socket there, and an empty database
// per test. A package using it calls Main from its TestMain, which stops
// the server and removes its directory when the tests are done.
//
// The server runs as a non-root user (PostgreSQL refuses root): the
// current one, or "postgres" when the tests run as root. A machine without
// the binaries or that user skips through skip.OrFail, so CI, which has
// them (scripts/setup.sh installs postgresql-15), fails instead.
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// BinDirEnv overrides where the server binaries are looked for.
const BinDirEnv = "AGENTBOX_PG_BIN"

// DefaultBinDir is where Debian's postgresql-15 puts them.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// startTimeout bounds initdb plus the server's start.
const startTimeout = 60 * time.Second

var (
	mainCalled atomic.Bool
	once       sync.Once
	srv        *server
	srvErr     error
	srvSkip    string
	dbSeq      atomic.Int64
)

// server is the running PostgreSQL of this test binary.
type server struct {
	dir     string // temporary directory: data/ and the socket
	cmd     *exec.Cmd
	exited  chan struct{}
	admin   *sql.DB
	startup time.Duration
}

// Main runs the tests and then stops the server, if one was started; use
// it as os.Exit(pgtest.Main(m)) in TestMain.
func Main(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	if srv != nil {
		srv.stop()
	}
	return code
}

// StartupTime is how long initdb and the server's start took, or 0 before
// the server started.
func StartupTime() time.Duration {
	if srv == nil {
		return 0
	}
	return srv.startup
}

// NewDatabase creates an empty database on the shared server and returns
// its URL (postgres://postgres@/NAME?host=SOCKETDIR). The database is
// dropped when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("pgtest: the package's TestMain must call pgtest.Main (it stops the server)")
	}
	once.Do(func() { srv, srvSkip, srvErr = start() })
	if srvSkip != "" {
		skip.OrFail(t, srvSkip)
	}
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := srv.admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return srv.url(name)
}

func (s *server) url(db string) string {
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "", Path: "/" + db,
		RawQuery: url.Values{"host": {s.dir}}.Encode()}).String()
}

// start runs initdb and the server. A missing binary or user is a reason
// to skip; anything else is an error.
func start() (*server, string, error) {
	began := time.Now()
	bin := os.Getenv(BinDirEnv)
	if bin == "" {
		bin = DefaultBinDir
	}
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Sprintf("PostgreSQL server binaries not found in %s (install postgresql-15, or set %s)", bin, BinDirEnv), nil
		}
	}
	var cred *syscall.Credential
	uid := os.Getuid()
	if uid == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root and there is no postgres user to run PostgreSQL as (install postgresql-15)", nil
		}
		id, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(id), Gid: uint32(gid)}
		uid = id
	}
	removeStale()
	// The socket path must fit in 107 bytes: a short directory under
	// $TMPDIR, named with this process's pid for removeStale.
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*server, string, error) {
		os.RemoveAll(dir)
		return nil, "", err
	}
	if err := os.Chown(dir, uid, -1); err != nil {
		return fail(err)
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("pgtest: %s: %v\n%s", name, err, out.Bytes())
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	// No fsync anywhere: the server lives as long as the tests.
	if err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		return fail(err)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	// The server dies with the test binary even when Main never gets to
	// stop it (a panic, a timeout): SIGQUIT is its immediate shutdown.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("pgtest: starting postgres: %w", err))
	}
	s := &server{dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	s.admin, err = sql.Open("pgx", s.url("postgres"))
	if err != nil {
		s.stop()
		return nil, "", err
	}
	// Ready when a connection succeeds; gone if the process exits first.
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = s.admin.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			s.stop()
			return nil, "", fmt.Errorf("pgtest: postgres exited at start: %s", log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, "", fmt.Errorf("pgtest: postgres not ready after %s: %w", startTimeout, err)
		}
	}
	s.startup = time.Since(began)
	return s, "", nil
}

// dirPrefix starts the name of a server's directory: dirPrefix, the pid
// of the test binary, "-", random.
const dirPrefix = "abpg"

// removeStale removes the directories of servers whose test binary died
// without stopping them (killed: its server went with it, through
// Pdeathsig, but the files stay).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*-*"))
	for _, d := range dirs {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), dirPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// stop shuts the server down fast (SIGINT) and removes its directory.
func (s *server) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if err := os.RemoveAll(s.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "pgtest: removing %s: %v\n", s.dir, err)
	}
}
