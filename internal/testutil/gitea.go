package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// GiteaVersion is the Gitea that scripts/setup-gitea.sh builds and
// StartGitea runs. Keep the two in step.
const GiteaVersion = "v1.26.0"

// GiteaUser is the system user Gitea runs as when the tests run as root
// (Gitea refuses root); scripts/setup-gitea.sh creates it.
const GiteaUser = "agentbox-gitea"

// GiteaDir is where scripts/setup-gitea.sh caches the build: the binary
// "gitea", the "static" directory it reads templates and options from, and
// ".complete" once both are in place.
func GiteaDir() string {
	root := os.Getenv("AGENTBOX_CACHE")
	if root == "" {
		root = "/var/cache/agentbox"
	}
	return filepath.Join(root, "gitea", GiteaVersion)
}

// Gitea is a real Gitea server on loopback, with one admin user and a
// token, for the tests of pull requests. It is stopped and its files
// removed when the test ends.
type Gitea struct {
	// URL is the server's root, "http://127.0.0.1:PORT", without a slash.
	URL string
	// APIURL is URL + "/api/v1".
	APIURL string
	// User and Password are the admin's; Token is an API token of the admin
	// with the write:repository, write:issue and write:user scopes.
	User, Password, Token string
	// HTTPClient reaches the server.
	HTTPClient *http.Client

	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	log     *bytes.Buffer
	logMu   *sync.Mutex
	once    sync.Once
}

// giteaIdentity is the user and group Gitea runs as, and the name
// RUN_USER must hold (Gitea checks it against the process's user).
type giteaIdentity struct {
	uid, gid uint32
	name     string
	switchTo bool // run as uid/gid rather than as this process
}

func giteaRunAs() (giteaIdentity, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return giteaIdentity{}, err
		}
		return giteaIdentity{uint32(os.Geteuid()), uint32(os.Getegid()), u.Username, false}, nil
	}
	u, err := user.Lookup(GiteaUser)
	if err != nil {
		return giteaIdentity{}, fmt.Errorf("gitea refuses to run as root and there is no user %s (run scripts/setup-gitea.sh): %w", GiteaUser, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return giteaIdentity{uint32(uid), uint32(gid), u.Username, true}, nil
}

// StartGitea starts a fresh Gitea (SQLite, offline, no mailer, no SSH) on
// a loopback port and creates its admin user and token. The binary must
// have been built by scripts/setup-gitea.sh (scripts/setup.sh runs it):
// the build takes minutes and is kept out of any test's time. Without it,
// or without the user to run it as, the test skips (fails under CI).
func StartGitea(t testing.TB) *Gitea {
	t.Helper()
	bin := filepath.Join(GiteaDir(), "gitea")
	static := filepath.Join(GiteaDir(), "static")
	if _, err := os.Stat(filepath.Join(GiteaDir(), ".complete")); err != nil {
		backendtest.SkipOrFail(t, fmt.Sprintf("gitea %s is not built at %s: run scripts/setup-gitea.sh (scripts/setup.sh runs it)", GiteaVersion, bin))
	}
	if _, err := exec.LookPath("git"); err != nil {
		backendtest.SkipOrFail(t, "gitea needs git on PATH")
	}
	id, err := giteaRunAs()
	if err != nil {
		backendtest.SkipOrFail(t, err.Error())
	}

	// The work dir is outside t.TempDir, whose parents are root's 0700.
	dir, err := os.MkdirTemp("", "agentbox-gitea-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after Close (LIFO)
	for _, d := range []string{"custom/conf", "data", "repos", "log", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	// The listening socket is made here and handed over (LISTEN_FDS, as
	// systemd does and Gitea supports): no window in which another process
	// could take the port between choosing and binding it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	lnFile, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()

	g := &Gitea{
		URL:      "http://127.0.0.1:" + strconv.Itoa(port),
		User:     "agentbox",
		Password: randomHex(16),
		dir:      dir,
		exited:   make(chan struct{}),
		log:      &bytes.Buffer{},
		logMu:    &sync.Mutex{},
	}
	g.APIURL = g.URL + "/api/v1"
	g.HTTPClient = &http.Client{Timeout: 60 * time.Second}

	conf := filepath.Join(dir, "custom", "conf", "app.ini")
	if err := os.WriteFile(conf, []byte(giteaINI(dir, static, id.name, port)), 0o600); err != nil {
		t.Fatal(err)
	}
	if id.switchTo {
		err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(id.uid), int(id.gid))
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	command := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--config", conf, "--work-path", dir}, args...)...)
		cmd.Dir = dir
		// Nothing of this process's environment: only what Gitea needs.
		cmd.Env = []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=" + filepath.Join(dir, "home"),
			"USER=" + id.name,
			"GITEA_WORK_DIR=" + dir,
			"GITEA_CUSTOM=" + filepath.Join(dir, "custom"),
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if id.switchTo {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
		}
		return cmd
	}

	start := time.Now()
	// The database, then the admin and its token, before the server runs.
	// The token is printed once.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := command(ctx, "migrate").CombinedOutput(); err != nil {
		t.Fatalf("gitea migrate: %v\n%s", err, out)
	}
	out, err := command(ctx, "admin", "user", "create",
		"--username", g.User, "--password", g.Password, "--email", "agentbox@example.invalid",
		"--admin", "--must-change-password=false",
		"--access-token", "--access-token-name", "agentbox-test",
		"--access-token-scopes", "write:repository,write:issue,write:user").CombinedOutput()
	if err != nil {
		t.Fatalf("gitea admin user create: %v\n%s", err, out)
	}
	const tokenMark = "Access token was successfully created... "
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, tokenMark); i >= 0 {
			g.Token = strings.TrimSpace(line[i+len(tokenMark):])
		}
	}
	if g.Token == "" {
		t.Fatalf("gitea admin user create printed no token:\n%s", out)
	}
	created := time.Since(start)

	cmd := command(context.Background(), "web")
	cmd.Env = append(cmd.Env, "LISTEN_FDS=1")
	cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	w := &lockedWriter{mu: g.logMu, w: g.log}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting gitea: %v", err)
	}
	g.cmd = cmd
	go func() {
		g.waitErr = cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(g.Close)
	// The socket is Gitea's now; this process's copy would keep accepting
	// connections into the backlog if Gitea died, and hide it.
	lnFile.Close()

	if err := g.waitReady(90 * time.Second); err != nil {
		t.Fatalf("gitea did not come up: %v\n%s", err, g.Log())
	}
	t.Logf("gitea %s up at %s in %v (admin and token %v)", GiteaVersion, g.URL, time.Since(start).Round(time.Millisecond), created.Round(time.Millisecond))
	return g
}

// waitReady asks /api/healthz until it answers 200. The socket listens
// from before Gitea started, so a request waits in the backlog until Gitea
// serves it; the loop only covers answers given while Gitea is still
// starting (503), and a Gitea that exits ends the wait at once.
func (g *Gitea) waitReady(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	go func() {
		select {
		case <-g.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/api/healthz", nil)
		resp, err := g.HTTPClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("healthz: %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-g.exited:
			return fmt.Errorf("gitea exited: %v (last: %v)", g.waitErr, last)
		case <-ctx.Done():
			return fmt.Errorf("after %v: %v", limit, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Log is what Gitea printed so far.
func (g *Gitea) Log() string {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	return g.log.String()
}

// Close stops Gitea: SIGTERM, then SIGKILL after ten seconds. StartGitea
// registers it with t.Cleanup; calling it again does nothing.
func (g *Gitea) Close() {
	g.once.Do(func() {
		if g.cmd == nil || g.cmd.Process == nil {
			return
		}
		syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			<-g.exited
		}
	})
}

// API calls the Gitea API as the admin (token auth) and decodes a 2xx JSON
// reply into out (if not nil). Another status fails the test.
func (g *Gitea) API(t testing.TB, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, g.APIURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+g.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.HTTPClient.Do(req)
	if err != nil {
		t.Fatalf("gitea %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		t.Fatalf("gitea %s %s: %s: %s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("gitea %s %s: decoding %q: %v", method, path, data, err)
		}
	}
}

// CreateRepo creates a public repository of the admin through the API and
// pushes one commit of files (path -> content) to its branch main, the
// repository's default; it returns the clone URL (no credentials in it).
func (g *Gitea) CreateRepo(t testing.TB, name string, files map[string]string) (cloneURL string) {
	t.Helper()
	var repo struct {
		CloneURL string `json:"clone_url"`
	}
	g.API(t, http.MethodPost, "/user/repos", map[string]any{
		"name": name, "private": false, "auto_init": false, "default_branch": "main",
	}, &repo)
	if repo.CloneURL == "" {
		t.Fatalf("gitea: repository %s has no clone URL", name)
	}
	src := NewRepo(t, files)
	g.Push(t, src.Dir, repo.CloneURL, "refs/heads/main:refs/heads/main")
	return repo.CloneURL
}

// Push pushes refspecs from the repository in dir to url (a repository of
// this Gitea) as the admin. The token goes in a header, not in the URL.
func (g *Gitea) Push(t testing.TB, dir, url string, refspecs ...string) {
	t.Helper()
	Git(t, dir, append([]string{"-c", "http.extraHeader=" + g.GitAuthHeader(), "push", "-q", url}, refspecs...)...)
}

// GitAuthHeader is an HTTP Authorization header for git as the admin, by
// token: git -c http.extraHeader=<this>.
func (g *Gitea) GitAuthHeader() string {
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(g.User+":"+g.Token))
}

// giteaINI is the configuration of a test Gitea in dir: SQLite, HTTP on
// 127.0.0.1:port only, no SSH, no mail, no outside requests, no background
// jobs, and queues that run at once so that what an API call starts is
// done when the next one looks.
func giteaINI(dir, static, runUser string, port int) string {
	return fmt.Sprintf(`APP_NAME = agentbox test
RUN_USER = %[3]s
RUN_MODE = prod
WORK_PATH = %[1]s

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[4]d
ROOT_URL = http://127.0.0.1:%[4]d/
DOMAIN = 127.0.0.1
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
APP_DATA_PATH = %[1]s/data
STATIC_ROOT_PATH = %[2]s

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[1]s/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[5]s
INTERNAL_TOKEN = %[6]s

[oauth2]
ENABLED = false

[mailer]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[queue]
TYPE = immediate

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[log]
MODE = console
LEVEL = warn
ROOT_PATH = %[1]s/log
`, dir, static, runUser, port, randomHex(32), randomHex(32))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// lockedWriter lets Gitea's stdout and stderr share one buffer.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
