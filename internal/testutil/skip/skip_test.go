package skip

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// fakeTB records what OrFail asks of a test, and ends the goroutine as
// testing.T does on Skip and Fatalf.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestOrFail(t *testing.T) {
	for _, tc := range []struct {
		env           string
		skipped, fail string
	}{
		{env: "", skipped: "no engine"},
		{env: "0", skipped: "no engine"},
		{env: "1", fail: "AGENTBOX_REQUIRE_SETUP=1 but no engine"},
	} {
		t.Setenv(RequireSetupEnv, tc.env)
		f := &fakeTB{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			OrFail(f, "no engine")
			f.failed = "OrFail returned"
		}()
		<-done
		if f.skipped != tc.skipped || f.failed != tc.fail {
			t.Errorf("%s=%q: skipped %q, failed %q; want skipped %q, failed %q", RequireSetupEnv, tc.env, f.skipped, f.failed, tc.skipped, tc.fail)
		}
	}
}

// TestOnlyThroughOrFail keeps the rule true: no test in the module skips
// but through OrFail, and no other code reads AGENTBOX_REQUIRE_SETUP. It
// reads every Go test file, and every other Go file that imports
// "testing" (test helpers), for a use of a Skip, Skipf or SkipNow method
// and for the variable's name as a string literal. Build constraints do
// not hide a file from it.
func TestOnlyThroughOrFail(t *testing.T) {
	root := moduleRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var files int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			if path == self {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		for _, p := range violations(t, path) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s:%s", rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s: not the module", files, root)
	}
}

// violations lists, as "line: what", the direct skips and the reads of
// the variable in one Go file.
func violations(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	if !strings.HasSuffix(path, "_test.go") && !imports(f, "testing") {
		return nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			switch n.Sel.Name {
			case "Skip", "Skipf", "SkipNow":
				out = append(out, fmt.Sprintf("%d: %s skips directly; use skip.OrFail (internal/testutil/skip)", fset.Position(n.Pos()).Line, n.Sel.Name))
			}
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && s == RequireSetupEnv {
				out = append(out, fmt.Sprintf("%d: reads %s itself; use skip.OrFail or skip.Required", fset.Position(n.Pos()).Line, RequireSetupEnv))
			}
		}
		return true
	})
	return out
}

func imports(f *ast.File, path string) bool {
	for _, s := range f.Imports {
		if p, err := strconv.Unquote(s.Path.Value); err == nil && p == path {
			return true
		}
	}
	return false
}

// moduleRoot is the directory of the go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
