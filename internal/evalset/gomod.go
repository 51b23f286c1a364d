// Package evalset builds the tasks of `agentbox eval` that are recipes
// rather than repositories: a bug fixed by a patch release of a public Go
// module is rebuilt from the module proxy's zips of the release before and
// of the release with the fix. No other project's code is kept in
// agentbox's tree: a task names the module, the two versions and their
// pinned hashes, and the zips are fetched (and cached) when the task set
// is evaluated.
//
// The base release's tree becomes the base commit of a fresh repository;
// the diff from it to the fix release splits, SWE-bench style, into the
// test patch (files named *_test.go and everything under a testdata
// directory: the regression tests, applied before the tests run) and the
// reference patch (everything else: the fix).
package evalset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// GoModule is a task's recipe: the module, the release with the bug and
// the patch release that fixed it, each with its go.sum hash ("h1:…"),
// which a fetched zip must match.
type GoModule struct {
	Path     string `json:"path"`
	Base     string `json:"base"`
	BaseHash string `json:"base_hash"`
	Fix      string `json:"fix"`
	FixHash  string `json:"fix_hash"`
}

// Check validates the recipe's names before anything is fetched.
func (g GoModule) Check() error {
	for _, v := range []struct{ version, hash string }{{g.Base, g.BaseHash}, {g.Fix, g.FixHash}} {
		if err := module.Check(g.Path, v.version); err != nil {
			return fmt.Errorf("go module %s@%s: %w", g.Path, v.version, err)
		}
		if !strings.HasPrefix(v.hash, "h1:") {
			return fmt.Errorf("go module %s@%s: the hash %q is not an h1: hash", g.Path, v.version, v.hash)
		}
	}
	if g.Base == g.Fix {
		return fmt.Errorf("go module %s: base and fix are both %s", g.Path, g.Base)
	}
	return nil
}

// maxZip bounds a module zip, as the go command does.
const maxZip = 500 << 20

// Fetcher downloads module zips from a module proxy into a cache.
type Fetcher struct {
	// Proxy is the proxy's base URL (https://proxy.golang.org).
	Proxy string
	// Cache is the directory zips are kept in, outside any clone, so
	// that a second evaluation fetches nothing.
	Cache  string
	Client *http.Client
}

// DefaultCache is where the eval's downloads are kept: $AGENTBOX_CACHE/eval,
// /var/cache/agentbox/eval for root, else the user's cache directory.
func DefaultCache() (string, error) {
	if d := os.Getenv("AGENTBOX_CACHE"); d != "" {
		return filepath.Join(d, "eval"), nil
	}
	if os.Geteuid() == 0 {
		return "/var/cache/agentbox/eval", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the eval's cache: %w", err)
	}
	return filepath.Join(d, "agentbox", "eval"), nil
}

// ProxyFromEnv is the first proxy of GOPROXY that is a URL
// (https://proxy.golang.org when GOPROXY is unset).
func ProxyFromEnv() (string, error) {
	v := os.Getenv("GOPROXY")
	if v == "" {
		return "https://proxy.golang.org", nil
	}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '|' }) {
		switch p {
		case "direct", "off":
			continue
		}
		u, err := url.Parse(p)
		if err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
			return strings.TrimSuffix(p, "/"), nil
		}
	}
	return "", fmt.Errorf("GOPROXY=%q names no module proxy to fetch the eval's modules from", v)
}

// Zip returns the path of the zip of path@version in the cache, fetched
// first if it is not there, and checked against hash either way: a
// cached zip that does not match is fetched again, a fetched one that does
// not match is refused.
func (f *Fetcher) Zip(ctx context.Context, path, version, hash string) (string, error) {
	if err := module.Check(path, version); err != nil {
		return "", err
	}
	ep, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(f.Cache, "gomod", filepath.FromSlash(ep), "@v")
	dst := filepath.Join(dir, ev+".zip")
	if got, err := dirhash.HashZip(dst, dirhash.Hash1); err == nil && got == hash {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("the eval's cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ev+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("the eval's cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = f.download(ctx, f.Proxy+"/"+ep+"/@v/"+ev+".zip", tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("fetching %s@%s: %w", path, version, err)
	}
	got, err := dirhash.HashZip(tmp.Name(), dirhash.Hash1)
	if err != nil {
		return "", fmt.Errorf("fetching %s@%s: the zip: %w", path, version, err)
	}
	if got != hash {
		return "", fmt.Errorf("fetching %s@%s: the zip's hash is %s, the task pins %s", path, version, got, hash)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("the eval's cache: %w", err)
	}
	return dst, nil
}

func (f *Fetcher) download(ctx context.Context, u string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	cl := f.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, maxZip+1))
	if err != nil {
		return err
	}
	if n > maxZip {
		return fmt.Errorf("GET %s: the zip is larger than %d bytes", u, maxZip)
	}
	return nil
}

// Repo is a task's repository as built from its recipe.
type Repo struct {
	// Dir is a bare repository whose only branch, Ref, is the base
	// commit: the fix is not in the history an agent can read.
	Dir string
	Ref string
	// Base and Fix are the commits of the two releases' trees.
	Base, Fix string
	// Patch is the reference patch (the fix, tests left out) and
	// TestPatch the tests it came with, each a git diff.
	Patch, TestPatch string
}

// testPaths are the pathspecs of test files: Go test files and testdata
// directories, at any depth.
var testPaths = []string{":(glob)**/*_test.go", ":(glob)**/testdata/**"}

// Build fetches g's zips and builds its repository in work (a directory
// that must not exist yet).
func (f *Fetcher) Build(ctx context.Context, g GoModule, work string) (Repo, error) {
	if err := g.Check(); err != nil {
		return Repo{}, err
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		return Repo{}, err
	}
	gitDir := filepath.Join(work, "build.git")
	r := Repo{Dir: filepath.Join(work, "repo.git"), Ref: "main"}
	if err := runGit(ctx, "", nil, "init", "-q", "--bare", gitDir); err != nil {
		return Repo{}, err
	}
	// The module's own .gitattributes must not change what is committed
	// (line endings, filters): the repository's info/attributes, read
	// first, turns every conversion off.
	if err := os.MkdirAll(filepath.Join(gitDir, "info"), 0o755); err != nil {
		return Repo{}, err
	}
	if err := os.WriteFile(filepath.Join(gitDir, "info", "attributes"), []byte("* -text !eol -filter -ident !working-tree-encoding\n"), 0o644); err != nil {
		return Repo{}, err
	}
	parent := ""
	for _, v := range []struct {
		version, hash string
		commit        *string
	}{{g.Base, g.BaseHash, &r.Base}, {g.Fix, g.FixHash, &r.Fix}} {
		zip, err := f.Zip(ctx, g.Path, v.version, v.hash)
		if err != nil {
			return Repo{}, err
		}
		// Unzip checks every name (no absolute path, no "..", no
		// collision), the sizes, and that the files are regular.
		tree := filepath.Join(work, "tree-"+v.version)
		if err := modzip.Unzip(tree, module.Version{Path: g.Path, Version: v.version}, zip); err != nil {
			return Repo{}, fmt.Errorf("unpacking %s@%s: %w", g.Path, v.version, err)
		}
		if *v.commit, err = commitTree(ctx, gitDir, tree, parent, g.Path+" "+v.version); err != nil {
			return Repo{}, fmt.Errorf("committing %s@%s: %w", g.Path, v.version, err)
		}
		parent = *v.commit
	}
	if err := runGit(ctx, gitDir, nil, "update-ref", "refs/heads/main", r.Base); err != nil {
		return Repo{}, err
	}
	var err error
	if r.TestPatch, err = diff(ctx, gitDir, r.Base, r.Fix, testPaths...); err != nil {
		return Repo{}, err
	}
	excl := []string{"."}
	for _, p := range testPaths {
		excl = append(excl, ":(exclude,"+strings.TrimPrefix(p, ":("))
	}
	if r.Patch, err = diff(ctx, gitDir, r.Base, r.Fix, excl...); err != nil {
		return Repo{}, err
	}
	switch {
	case r.Patch == "":
		return Repo{}, fmt.Errorf("go module %s: %s and %s differ in no file but tests: no fix to make", g.Path, g.Base, g.Fix)
	case r.TestPatch == "":
		return Repo{}, fmt.Errorf("go module %s: %s and %s differ in no test: nothing would show the fix", g.Path, g.Base, g.Fix)
	}
	// Over the pack protocol (--no-local), so that only the base's
	// objects are copied: the fix's are not reachable from it.
	if err := runGit(ctx, "", nil, "clone", "-q", "--bare", "--no-local", "--single-branch", "--branch", "main", gitDir, r.Dir); err != nil {
		return Repo{}, err
	}
	return r, nil
}

// fixedDate makes the commits the same on every build.
const fixedDate = "2000-01-01T00:00:00Z"

// commitTree commits the files of tree (all of them, ignore files
// notwithstanding) to gitDir, on parent if not empty, and returns the
// commit.
func commitTree(ctx context.Context, gitDir, tree, parent, msg string) (string, error) {
	env := []string{"GIT_WORK_TREE=" + tree, "GIT_INDEX_FILE=" + filepath.Join(gitDir, "index-build")}
	os.Remove(filepath.Join(gitDir, "index-build"))
	if err := runGit(ctx, gitDir, env, "add", "-A", "--force", "."); err != nil {
		return "", err
	}
	id, err := outGit(ctx, gitDir, env, "write-tree")
	if err != nil {
		return "", err
	}
	args := []string{"commit-tree", id, "-m", msg}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return outGit(ctx, gitDir, env, args...)
}

func diff(ctx context.Context, gitDir, from, to string, paths ...string) (string, error) {
	args := append([]string{"diff", "--binary", "--no-renames", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/", from, to, "--"}, paths...)
	var out bytes.Buffer
	if err := gitCmd(ctx, gitDir, nil, &out, args...); err != nil {
		return "", err
	}
	return out.String(), nil
}

func runGit(ctx context.Context, gitDir string, env []string, args ...string) error {
	return gitCmd(ctx, gitDir, env, io.Discard, args...)
}

func outGit(ctx context.Context, gitDir string, env []string, args ...string) (string, error) {
	var out bytes.Buffer
	err := gitCmd(ctx, gitDir, env, &out, args...)
	return strings.TrimSpace(out.String()), err
}

// gitCmd runs git with the user's and the system's configuration left
// out, so that no hook, filter or diff setting changes what is built.
func gitCmd(ctx context.Context, gitDir string, env []string, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent",
		"GIT_AUTHOR_NAME=agentbox eval", "GIT_AUTHOR_EMAIL=eval@agentbox.invalid", "GIT_AUTHOR_DATE="+fixedDate,
		"GIT_COMMITTER_NAME=agentbox eval", "GIT_COMMITTER_EMAIL=eval@agentbox.invalid", "GIT_COMMITTER_DATE="+fixedDate)
	if gitDir != "" {
		cmd.Env = append(cmd.Env, "GIT_DIR="+gitDir)
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

var (
	testName = regexp.MustCompile(`^(Test|Example|Fuzz)[A-Za-z0-9_]*$`)
	pkgName  = regexp.MustCompile(`^\.(/[A-Za-z0-9_.-]+)*(/\.\.\.)?$`)
)

// GoTest is the shell command that runs the named tests of pkgs (./...
// if none) with the go command of the sandbox's image, offline, and fails
// unless each of them ran and passed: a test that does not exist passes
// nothing.
func GoTest(tests, pkgs []string) (string, error) {
	if len(tests) == 0 {
		return "", errors.New("go test: no tests named")
	}
	for _, t := range tests {
		if !testName.MatchString(t) {
			return "", fmt.Errorf("go test: %q is not the name of a Go test function", t)
		}
	}
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	for _, p := range pkgs {
		if !pkgName.MatchString(p) || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			return "", fmt.Errorf("go test: package %q is not a relative package pattern (./dir or ./...)", p)
		}
	}
	// Each name and package matches a pattern without quotes or shell
	// syntax, so they go in as they are. The go command's caches live in
	// /tmp (the root is read-only); GOPROXY=off, as the sandbox has no
	// network and the modules need nothing beyond the standard library.
	var b strings.Builder
	b.WriteString("export GOPROXY=off GOTOOLCHAIN=local GOCACHE=/tmp/agentbox-go/cache GOPATH=/tmp/agentbox-go/path; ")
	b.WriteString("o=$(mktemp); go test -count=1 -v -run '^(" + strings.Join(tests, "|") + ")$' " + strings.Join(pkgs, " ") + " >\"$o\" 2>&1; rc=$?; cat \"$o\"; ")
	b.WriteString("[ $rc -eq 0 ] || exit $rc; ")
	b.WriteString("for t in " + strings.Join(tests, " ") + "; do grep -q \"^--- PASS: $t (\" \"$o\" || { echo \"agentbox eval: $t did not run\"; exit 1; }; done")
	return b.String(), nil
}
