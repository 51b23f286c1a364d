package evalset

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// dataFile is a file of a module zip made in the test.
type dataFile struct {
	name string
	data string
}

func (f dataFile) Path() string                 { return f.name }
func (f dataFile) Lstat() (os.FileInfo, error)  { return fileInfo{f}, nil }
func (f dataFile) Open() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(f.data)), nil }

type fileInfo struct{ f dataFile }

func (i fileInfo) Name() string       { return path.Base(i.f.name) }
func (i fileInfo) Size() int64        { return int64(len(i.f.data)) }
func (i fileInfo) Mode() os.FileMode  { return 0o644 }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }

// proxy is a module proxy on loopback serving zips made in the test, and
// counting what it serves.
type proxy struct {
	zips map[string][]byte
	hits atomic.Int64
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	z, ok := p.zips[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	p.hits.Add(1)
	w.Write(z)
}

// add makes the zip of path@version from files and returns its h1 hash.
func (p *proxy) add(t *testing.T, path, version string, files map[string]string) string {
	t.Helper()
	var fs []modzip.File
	for n, d := range files {
		fs = append(fs, dataFile{n, d})
	}
	var b bytes.Buffer
	if err := modzip.Create(&b, module.Version{Path: path, Version: version}, fs); err != nil {
		t.Fatal(err)
	}
	zf := filepath.Join(t.TempDir(), "m.zip")
	if err := os.WriteFile(zf, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := dirhash.HashZip(zf, dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := module.EscapePath(path)
	p.zips["/"+ep+"/@v/"+version+".zip"] = b.Bytes()
	return h
}

// TestBuild: a recipe becomes a repository at the base release, whose
// history holds nothing of the fix, and the diff to the fix release splits
// into the reference patch (no test file) and the test patch (only test
// files); zips are checked against their pins and fetched once.
func TestBuild(t *testing.T) {
	p := &proxy{zips: map[string][]byte{}}
	const mod = "example.com/Calc"
	base := p.add(t, mod, "v1.0.0", map[string]string{
		"go.mod":             "module example.com/Calc\n",
		"calc.go":            "package calc\n\nfunc Add(a, b int) int { return a - b }\n",
		"calc_test.go":       "package calc\n",
		".gitignore":         "calc.go\n",
		".gitattributes":     "* text=auto eol=lf\n",
		"crlf.txt":           "one\r\ntwo\r\n",
		"testdata/cases.txt": "1 2 3\n",
	})
	fix := p.add(t, mod, "v1.0.1", map[string]string{
		"go.mod":             "module example.com/Calc\n",
		"calc.go":            "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
		"calc_test.go":       "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\n",
		".gitignore":         "calc.go\n",
		".gitattributes":     "* text=auto eol=lf\n",
		"crlf.txt":           "one\r\ntwo\r\n",
		"testdata/cases.txt": "1 2 3\n2 3 5\n",
		"sub/x_test.go":      "package sub\n",
	})
	srv := httptest.NewServer(p)
	defer srv.Close()
	f := &Fetcher{Proxy: srv.URL, Cache: t.TempDir()}
	g := GoModule{Path: mod, Base: "v1.0.0", BaseHash: base, Fix: "v1.0.1", FixHash: fix}
	r, err := f.Build(t.Context(), g, filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Patch, "+func Add(a, b int) int { return a + b }") || strings.Contains(r.Patch, "_test.go") || strings.Contains(r.Patch, "testdata") {
		t.Errorf("reference patch:\n%s", r.Patch)
	}
	for _, want := range []string{"b/calc_test.go", "b/sub/x_test.go", "+2 3 5", "+func TestAdd"} {
		if !strings.Contains(r.TestPatch, want) {
			t.Errorf("test patch lacks %q:\n%s", want, r.TestPatch)
		}
	}
	if strings.Contains(r.TestPatch, "calc.go\n") && strings.Contains(r.TestPatch, "a + b") {
		t.Errorf("test patch holds the fix:\n%s", r.TestPatch)
	}
	// The repository: the base release's tree (an ignored file too),
	// and none of the fix's objects.
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"--git-dir", r.Dir}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := git("show", r.Ref+":calc.go"); err != nil || !strings.Contains(out, "a - b") {
		t.Errorf("base calc.go: %v %s", err, out)
	}
	if out, err := git("show", r.Ref+":crlf.txt"); err != nil || out != "one\r\ntwo\r\n" {
		t.Errorf("the module's .gitattributes changed a file: %v %q", err, out)
	}
	if out, err := git("rev-parse", r.Ref); err != nil || strings.TrimSpace(out) != r.Base {
		t.Errorf("ref %s is %s, want the base %s (%v)", r.Ref, out, r.Base, err)
	}
	if _, err := git("cat-file", "-e", r.Fix); err == nil {
		t.Errorf("the fix commit %s is in the task's repository", r.Fix)
	}
	// The patches apply to the base, in order, and give the fix's tree.
	work := t.TempDir()
	if out, err := exec.Command("git", "clone", "-q", r.Dir, work).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	for _, patch := range []string{r.TestPatch, r.Patch} {
		cmd := exec.Command("git", "-C", work, "apply", "-")
		cmd.Stdin = strings.NewReader(patch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git apply: %v %s", err, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(work, "calc.go")); !strings.Contains(string(b), "a + b") {
		t.Errorf("calc.go after both patches: %s", b)
	}
	// A second build fetches nothing: the cache has both zips.
	if p.hits.Load() != 2 {
		t.Errorf("%d fetches, want 2", p.hits.Load())
	}
	r2, err := f.Build(t.Context(), g, filepath.Join(t.TempDir(), "w"))
	if err != nil || p.hits.Load() != 2 || r2.Base != r.Base || r2.Patch != r.Patch {
		t.Errorf("second build: %v, %d fetches, base %s vs %s", err, p.hits.Load(), r2.Base, r.Base)
	}
	// A cached zip that no longer matches its pin is fetched again.
	ep, _ := module.EscapePath(mod)
	cached := filepath.Join(f.Cache, "gomod", ep, "@v", "v1.0.0.zip")
	if err := os.WriteFile(cached, []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Zip(t.Context(), mod, "v1.0.0", base); err != nil || p.hits.Load() != 3 {
		t.Errorf("refetch of a spoiled cache: %v, %d fetches", err, p.hits.Load())
	}
	// A zip that does not match its pin is refused, and not cached.
	bad := g
	bad.FixHash = base
	if _, err := f.Build(t.Context(), bad, filepath.Join(t.TempDir(), "w")); err == nil || !strings.Contains(err.Error(), "the task pins "+base) {
		t.Errorf("a zip against its pin: %v", err)
	}
	// A module version the proxy does not have.
	if _, err := f.Zip(t.Context(), mod, "v1.9.9", base); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a missing version: %v", err)
	}
}

func TestGoTest(t *testing.T) {
	cmd, err := GoTest([]string{"TestA", "TestB_c"}, []string{".", "./sub/..."})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-run '^(TestA|TestB_c)$' . ./sub/...", "GOPROXY=off", "for t in TestA TestB_c;"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command lacks %q: %s", want, cmd)
		}
	}
	for _, bad := range []struct{ tests, pkgs []string }{
		{nil, nil},
		{[]string{"TestA; rm -rf /"}, nil},
		{[]string{"TestA|TestB"}, nil},
		{[]string{"helper"}, nil},
		{[]string{"TestA"}, []string{"/etc"}},
		{[]string{"TestA"}, []string{"./../x"}},
		{[]string{"TestA"}, []string{"./a/../.."}},
		{[]string{"TestA"}, []string{"./a b"}},
		{[]string{"TestA"}, []string{"$(id)"}},
	} {
		if _, err := GoTest(bad.tests, bad.pkgs); err == nil {
			t.Errorf("GoTest(%q, %q) accepted", bad.tests, bad.pkgs)
		}
	}
}

// TestGoTestNeedsEachTest runs the command GoTest writes over a fake go
// command: a test that did not run fails it, even when go test passes.
func TestGoTestNeedsEachTest(t *testing.T) {
	bin := t.TempDir()
	fake := "#!/bin/sh\necho '=== RUN   TestA'\necho '--- PASS: TestA (0.00s)'\necho PASS\nexit 0\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tests []string
		ok    bool
	}{{[]string{"TestA"}, true}, {[]string{"TestA", "TestMissing"}, false}} {
		cmd, err := GoTest(tc.tests, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := exec.Command("sh", "-c", cmd)
		c.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin")
		out, err := c.CombinedOutput()
		if (err == nil) != tc.ok {
			t.Errorf("%v: %v\n%s", tc.tests, err, out)
		}
		if !tc.ok && !strings.Contains(string(out), "agentbox eval: TestMissing did not run") {
			t.Errorf("output: %s", out)
		}
	}
}
