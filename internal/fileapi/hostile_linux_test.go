package fileapi

// Hostile-workspace tests: SECURITY.md section C, items 15 to 18 and 20.
// Every case ends with env.checkOutside, which fails if anything beside the
// workspace (the canaries, the ws-evil sibling, new files) changed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// safety bounds a call that must not block; the per-call deadline is
// shorter so a context-aware loop gets the chance to stop on its own.
const (
	safety   = 10 * time.Second
	deadline = 5 * time.Second
)

// verb runs one API call on p and returns its error. It may fail the test
// itself when the call returned something it must never return.
type verb struct {
	name string
	do   func(t *testing.T, ctx context.Context, e *env, p string) error
}

func allVerbs() []verb {
	return []verb{
		{"read", func(t *testing.T, ctx context.Context, e *env, p string) error {
			var buf bytes.Buffer
			_, err := e.fs.Read(ctx, p, &buf)
			if strings.Contains(buf.String(), e.secret) || strings.Contains(buf.String(), "root:") {
				t.Errorf("Read(%q) returned data from outside the workspace: %q", p, buf.String())
			}
			return err
		}},
		{"write", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Write(ctx, p, strings.NewReader("pwned"), 0o644, false)
			return err
		}},
		{"write parents", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Write(ctx, p, strings.NewReader("pwned"), 0o644, true)
			return err
		}},
		{"stat", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Stat(ctx, p)
			return err
		}},
		{"list", func(t *testing.T, ctx context.Context, e *env, p string) error {
			infos, err := e.fs.List(ctx, p)
			for _, in := range infos {
				if in.Name == "canary" {
					t.Errorf("List(%q) listed a directory outside the workspace: %+v", p, infos)
				}
			}
			return err
		}},
		{"mkdir", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Mkdir(ctx, p, false)
			return err
		}},
		{"mkdir parents", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Mkdir(ctx, p, true)
			return err
		}},
		{"remove", func(t *testing.T, ctx context.Context, e *env, p string) error {
			return e.fs.Remove(ctx, p, false)
		}},
		{"remove recursive", func(t *testing.T, ctx context.Context, e *env, p string) error {
			return e.fs.Remove(ctx, p, true)
		}},
		{"rename from", func(t *testing.T, ctx context.Context, e *env, p string) error {
			return e.fs.Rename(ctx, p, "renamed")
		}},
		{"rename to", func(t *testing.T, ctx context.Context, e *env, p string) error {
			e.writeFile(t, "src", "src")
			return e.fs.Rename(ctx, "src", p)
		}},
		{"grep path", func(t *testing.T, ctx context.Context, e *env, p string) error {
			res, err := e.fs.Grep(ctx, GrepRequest{Pattern: e.secret + "|^root:", Path: p})
			if len(res.Matches) > 0 {
				t.Errorf("Grep(%q) matched outside the workspace: %+v", p, res.Matches)
			}
			return err
		}},
		{"read lines", func(t *testing.T, ctx context.Context, e *env, p string) error {
			var buf bytes.Buffer
			_, err := e.fs.ReadRange(ctx, p, Range{FirstLine: 1, LastLine: 5}, &buf)
			if strings.Contains(buf.String(), e.secret) || strings.Contains(buf.String(), "root:") {
				t.Errorf("ReadRange(%q) returned data from outside the workspace: %q", p, buf.String())
			}
			return err
		}},
		{"read bytes", func(t *testing.T, ctx context.Context, e *env, p string) error {
			var buf bytes.Buffer
			_, err := e.fs.ReadRange(ctx, p, Range{Offset: 0, Length: 100}, &buf)
			if strings.Contains(buf.String(), e.secret) || strings.Contains(buf.String(), "root:") {
				t.Errorf("ReadRange(%q) returned data from outside the workspace: %q", p, buf.String())
			}
			return err
		}},
		{"edit", func(t *testing.T, ctx context.Context, e *env, p string) error {
			_, err := e.fs.Edit(ctx, apitypes.EditRequest{Path: p, Old: "canary", New: "pwned", All: true})
			return err
		}},
		{"find path", func(t *testing.T, ctx context.Context, e *env, p string) error {
			res, err := e.fs.Find(ctx, apitypes.FindRequest{Pattern: "*", Path: p})
			for _, m := range res.Matches {
				if m.Name == "canary" {
					t.Errorf("Find(%q) found an entry outside the workspace: %+v", p, res.Matches)
				}
			}
			return err
		}},
		{"tree", func(t *testing.T, ctx context.Context, e *env, p string) error {
			list, err := e.fs.Tree(ctx, p, 8)
			for _, in := range list.Entries {
				if in.Name == "canary" {
					t.Errorf("Tree(%q) listed an entry outside the workspace: %+v", p, list.Entries)
				}
			}
			return err
		}},
	}
}

// run calls v under a deadline and the safety timeout.
func (v verb) run(t *testing.T, e *env, p string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	var err error
	within(t, safety, v.name, func() { err = v.do(t, ctx, e, p) })
	return err
}

// Item 15: traversal strings through every verb.
func TestTraversalEveryVerb(t *testing.T) {
	e := newEnv(t, noOwner)
	refused := []string{
		"",
		"/",
		"..",
		"../x",
		"./../x",
		"a/../../x",
		"a/b/../../../x",
		"../outside/canary",
		"../ws-evil/canary",
		"/etc/passwd",
		filepath.Join(e.outside, "canary"),
		"..\\x",
		"..\\..\\outside\\canary",
		"a\x00b",
		"../x\x00",
		"a\nb",
		strings.Repeat("a", 300),
		"ok/" + strings.Repeat("b", 300) + "/c",
		strings.Repeat("a/", 2500),
	}
	// Encoded dots and look-alikes are literal names: allowed, but inside.
	literal := []string{
		"%2e%2e/x",
		"%2e%2e%2fx",
		"%252e%252e",
		"%252e%252e/%252e%252e/x",
		"..../x",
		"\u2024\u2024/x", // one dot leader
		"．．/x",           // fullwidth full stop
	}
	for _, v := range allVerbs() {
		for _, p := range refused {
			t.Run(v.name+"/"+shortName(p), func(t *testing.T) {
				err := v.run(t, e, p)
				if (v.name == "grep path" || v.name == "find path") && p == "" {
					// An empty search path is the documented default, ".".
					if err != nil {
						t.Errorf("%s with no path = %v", v.name, err)
					}
					return
				}
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("%s(%q) = %v, want ErrInvalid", v.name, p, err)
				}
				if err != nil && !strings.Contains(err.Error(), "invalid path") {
					t.Errorf("%s(%q) error %q does not explain the refusal", v.name, p, err)
				}
				e.checkOutside(t)
			})
		}
		for _, p := range literal {
			t.Run(v.name+"/"+shortName(p), func(t *testing.T) {
				v.run(t, e, p) // success or a not-found are both fine
				e.checkOutside(t)
			})
		}
	}
	// The literal names that were created live inside the workspace.
	if _, err := os.Stat(e.path("%252e%252e")); err != nil {
		t.Errorf("writing %q did not create it inside the workspace: %v", "%252e%252e", err)
	}
}

func shortName(p string) string {
	if p == "" {
		return "empty"
	}
	if len(p) > 30 {
		return fmt.Sprintf("%q...%d", p[:20], len(p))
	}
	return fmt.Sprintf("%q", p)
}

// Item 16: a sibling whose name extends the workspace's is unreachable,
// by "..", by absolute path and through symlinks.
func TestSiblingPrefixUnreachable(t *testing.T) {
	e := newEnv(t, noOwner)
	links := map[string]string{
		"ev":   "../ws-evil",
		"ev2":  e.evil,
		"evc":  "../ws-evil/canary",
		"evc2": e.evil + "/canary",
	}
	// Verbs that act on a link itself (remove, rename, write) consume it;
	// every case starts from the same planted links.
	replant := func(t *testing.T) {
		for name, target := range links {
			if err := os.RemoveAll(e.path(name)); err != nil {
				t.Fatal(err)
			}
			e.symlink(t, target, name)
		}
	}
	through := []string{
		"../ws-evil/canary",
		"../ws-evil/new",
		e.evil + "/canary",
		"ev/canary",
		"ev/new",
		"ev/new/deeper",
		"ev2/canary",
		"ev2/new/deeper",
	}
	for _, v := range allVerbs() {
		for _, p := range through {
			t.Run(v.name+"/"+shortName(p), func(t *testing.T) {
				replant(t)
				if err := v.run(t, e, p); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("%s(%q) = %v, want ErrInvalid", v.name, p, err)
				}
				e.checkOutside(t)
			})
		}
		// On the links themselves verbs may act on the link, never the
		// sibling; Read must refuse.
		for _, p := range []string{"evc", "evc2", "ev", "ev2"} {
			t.Run(v.name+"/link "+p, func(t *testing.T) {
				replant(t)
				err := v.run(t, e, p)
				if v.name == "read" && !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Read(%q) = %v, want ErrInvalid", p, err)
				}
				e.checkOutside(t)
			})
		}
	}
}

// plantLinks creates the symlinks a hostile sandbox would leave and returns
// name -> target.
func plantLinks(t *testing.T, e *env) map[string]string {
	t.Helper()
	e.writeFile(t, "target.txt", "inside\n")
	e.writeFile(t, "realdir/f", "in realdir\n")
	links := map[string]string{
		"abs":         filepath.Join(e.outside, "canary"),
		"rel":         "../outside/canary",
		"rel2":        "../../canary",
		"proc":        "/proc/self/root/etc/passwd",
		"procrel":     strings.Repeat("../", 12) + "proc/self/root/etc/passwd",
		"loopa":       "loopb",
		"loopb":       "loopa",
		"selfloop":    "selfloop",
		"dangling":    "nonexistent",
		"danglingout": "../outside/nonexistent",
		"outdir":      e.outside,
		"outdirrel":   "../outside",
		"in":          "target.txt",
		"chain":       "in",
		"indir":       "realdir",
	}
	for name, target := range links {
		e.symlink(t, target, name)
	}
	e.before = e.snapshot(t)
	return links
}

// Item 17: planted symlinks are never followed out of the workspace.
func TestPlantedSymlinks(t *testing.T) {
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		after, err := os.ReadFile("/etc/passwd")
		if err != nil || !bytes.Equal(passwd, after) {
			t.Errorf("/etc/passwd changed: %v", err)
		}
	})

	t.Run("read", func(t *testing.T) {
		e := newEnv(t, noOwner)
		plantLinks(t, e)
		tests := []struct {
			path    string
			want    string
			wantErr error
		}{
			{"abs", "", errdefs.ErrInvalid},
			{"rel", "", errdefs.ErrInvalid},
			{"rel2", "", errdefs.ErrInvalid},
			{"proc", "", errdefs.ErrInvalid},
			{"procrel", "", errdefs.ErrInvalid},
			{"loopa", "", errdefs.ErrInvalid},
			{"selfloop", "", errdefs.ErrInvalid},
			{"dangling", "", errdefs.ErrNotFound},
			{"danglingout", "", errdefs.ErrInvalid},
			{"outdir/canary", "", errdefs.ErrInvalid},
			{"outdirrel/canary", "", errdefs.ErrInvalid},
			{"in", "inside\n", nil},
			{"chain", "inside\n", nil},
			{"indir/f", "in realdir\n", nil},
		}
		for _, tt := range tests {
			t.Run(tt.path, func(t *testing.T) {
				var buf bytes.Buffer
				var err error
				within(t, safety, "Read", func() { _, err = e.fs.Read(t.Context(), tt.path, &buf) })
				if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
					t.Fatalf("Read(%q) = %v, want %v", tt.path, err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
					t.Errorf("Read(%q) (-want +got):\n%s", tt.path, diff)
				}
				e.checkOutside(t)
			})
		}
	})

	t.Run("stat and list show links without following", func(t *testing.T) {
		e := newEnv(t, noOwner)
		links := plantLinks(t, e)
		for name, target := range links {
			got, err := e.fs.Stat(t.Context(), name)
			if err != nil {
				t.Errorf("Stat(%q) = %v", name, err)
				continue
			}
			if got.Type != TypeSymlink || got.LinkTarget != target {
				t.Errorf("Stat(%q) = %+v, want a symlink to %q", name, got, target)
			}
		}
		infos, err := e.fs.List(t.Context(), ".")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, in := range infos {
			if in.Type == TypeSymlink {
				got[in.Name] = in.LinkTarget
			}
		}
		if diff := cmp.Diff(links, got); diff != "" {
			t.Errorf("List symlinks (-want +got):\n%s", diff)
		}
		for _, p := range []string{"outdir", "outdirrel", "outdir/canary", "abs/x", "loopa"} {
			if _, err := e.fs.List(t.Context(), p); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("List(%q) = %v, want ErrInvalid", p, err)
			}
			if _, err := e.fs.Stat(t.Context(), p+"/canary"); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Stat(%q) = %v, want ErrInvalid", p+"/canary", err)
			}
		}
		if got, err := e.fs.List(t.Context(), "indir"); err != nil || len(got) != 1 {
			t.Errorf("List through an inside link = %v, %v", got, err)
		}
		e.checkOutside(t)
	})

	t.Run("grep does not follow", func(t *testing.T) {
		e := newEnv(t, noOwner)
		plantLinks(t, e)
		got, err := e.fs.Grep(t.Context(), GrepRequest{Pattern: e.secret + "|^root:|inside|realdir"})
		if err != nil {
			t.Fatal(err)
		}
		want := []GrepMatch{
			{Path: "realdir/f", Line: 1, Text: "in realdir"},
			{Path: "target.txt", Line: 1, Text: "inside"},
		}
		if diff := cmp.Diff(want, got.Matches); diff != "" {
			t.Errorf("Grep matches (-want +got):\n%s", diff)
		}
		for _, p := range []string{"outdir", "outdirrel", "indir", "abs", "proc"} {
			got, err := e.fs.Grep(t.Context(), GrepRequest{Pattern: ".", Path: p})
			if err != nil || len(got.Matches) != 0 || got.FilesScanned != 0 {
				t.Errorf("Grep(path %q) = %+v, %v; want nothing searched", p, got, err)
			}
		}
		if _, err := e.fs.Grep(t.Context(), GrepRequest{Pattern: ".", Path: "outdir/canary"}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Grep through outdir = %v, want ErrInvalid", err)
		}
		e.checkOutside(t)
	})

	t.Run("write replaces the link", func(t *testing.T) {
		e := newEnv(t, noOwner)
		links := plantLinks(t, e)
		for name := range links {
			if name == "outdir" || name == "outdirrel" || name == "indir" {
				continue // directories are refused; covered below
			}
			t.Run(name, func(t *testing.T) {
				body := "replaced " + name
				if _, err := e.fs.Write(t.Context(), name, strings.NewReader(body), 0o644, false); err != nil {
					t.Fatalf("Write(%q) = %v", name, err)
				}
				assertFile(t, e.path(name), body, 0o644)
				e.checkOutside(t)
			})
		}
		assertFile(t, e.path("target.txt"), "inside\n", 0o644)
		// A link to a directory names a directory: refused, both sides kept.
		for _, name := range []string{"outdir", "indir"} {
			_, err := e.fs.Write(t.Context(), name, strings.NewReader("x"), 0, false)
			if err == nil {
				if fi, _ := os.Lstat(e.path(name)); !fi.Mode().IsRegular() {
					t.Errorf("Write(%q) succeeded without replacing the link", name)
				}
			}
			e.checkOutside(t)
		}
		assertNoTemp(t, e)
	})

	t.Run("through an outside directory link", func(t *testing.T) {
		e := newEnv(t, noOwner)
		plantLinks(t, e)
		ctx := t.Context()
		calls := map[string]func() error{
			"write":                  func() error { _, err := e.fs.Write(ctx, "outdir/f", strings.NewReader("x"), 0, false); return err },
			"write rel":              func() error { _, err := e.fs.Write(ctx, "outdirrel/f", strings.NewReader("x"), 0, false); return err },
			"write over canary":      func() error { _, err := e.fs.Write(ctx, "outdir/canary", strings.NewReader("x"), 0, false); return err },
			"write parents":          func() error { _, err := e.fs.Write(ctx, "outdir/sub/f", strings.NewReader("x"), 0, true); return err },
			"write parents via loop": func() error { _, err := e.fs.Write(ctx, "loopa/sub/f", strings.NewReader("x"), 0, true); return err },
			"write parents via file": func() error { _, err := e.fs.Write(ctx, "abs/sub/f", strings.NewReader("x"), 0, true); return err },
			"mkdir":                  func() error { _, err := e.fs.Mkdir(ctx, "outdir/x", false); return err },
			"mkdir parents":          func() error { _, err := e.fs.Mkdir(ctx, "outdirrel/x/y", true); return err },
			"rename into":            func() error { return e.fs.Rename(ctx, "target.txt", "outdir/stolen") },
			"rename out of":          func() error { return e.fs.Rename(ctx, "outdir/canary", "stolen") },
			"remove":                 func() error { return e.fs.Remove(ctx, "outdir/canary", false) },
			"remove recursive":       func() error { return e.fs.Remove(ctx, "outdirrel/canary", true) },
		}
		for name, call := range calls {
			t.Run(name, func(t *testing.T) {
				var err error
				within(t, safety, name, func() { err = call() })
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("%s = %v, want ErrInvalid", name, err)
				}
				e.checkOutside(t)
			})
		}
		// Removing the link itself (recursively, even) leaves its target.
		for _, p := range []string{"outdir", "outdirrel"} {
			if err := e.fs.Remove(ctx, p, true); err != nil {
				t.Errorf("Remove(%q) = %v", p, err)
			}
			e.checkOutside(t)
		}
	})
}

// exchange atomically swaps two directory entries, or, where the
// filesystem lacks RENAME_EXCHANGE, swaps them with three renames.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if err != unix.EINVAL && err != unix.ENOSYS {
		return err
	}
	tmp := a + ".swap"
	if err := os.Rename(a, tmp); err != nil {
		return err
	}
	if err := os.Rename(b, a); err != nil {
		return err
	}
	return os.Rename(tmp, b)
}

// Item 18: a sandbox swapping a directory with a symlink out of the
// workspace in a tight loop never gets a host-side write (or read) outside.
func TestSymlinkSwapRace(t *testing.T) {
	e := newEnv(t, noOwner)
	const (
		swapIterations = 2000
		hostRounds     = 300
	)
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeFile(t, "d/sub/keep", "keep")
	e.symlink(t, e.outside, "dswap")
	e.writeFile(t, "r", "inside")
	e.symlink(t, filepath.Join(e.outside, "canary"), "rswap")
	e.before = e.snapshot(t)

	// Both sides are bounded by counts: the swapper runs at least
	// swapIterations swaps and the host at least hostRounds rounds, each
	// continuing until the other has done its share.
	var swaps atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := exchange(e.path("d"), e.path("dswap")); err != nil {
				done <- err
				return
			}
			if err := exchange(e.path("r"), e.path("rswap")); err != nil {
				done <- err
				return
			}
			swaps.Add(1)
		}
	}()

	ctx := t.Context()
	outcomes := map[string]int{}
	record := func(op string, err error) {
		switch {
		case err == nil:
			outcomes[op+" ok"]++
		case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrConflict):
			outcomes[op+" "+errdefs.Code(err)]++
		default:
			t.Errorf("%s: unexpected error class: %v", op, err)
		}
	}
	rounds := 0
	for ; rounds < hostRounds || swaps.Load() < swapIterations; rounds++ {
		select {
		case err := <-done:
			t.Fatalf("swapper stopped early: %v", err)
		default:
		}
		_, err := e.fs.Write(ctx, "d/f", strings.NewReader("pwned"), 0o644, false)
		record("write", err)
		_, err = e.fs.Write(ctx, "d/sub/deep/f", strings.NewReader("pwned"), 0o644, true)
		record("write parents", err)
		_, err = e.fs.Mkdir(ctx, "d/m", true)
		record("mkdir", err)
		record("rename", e.fs.Rename(ctx, "d/f", "d/g"))
		record("remove", e.fs.Remove(ctx, "d/g", false))
		var buf bytes.Buffer
		_, err = e.fs.Read(ctx, "r", &buf)
		record("read", err)
		if strings.Contains(buf.String(), e.secret) {
			t.Fatalf("Read returned the canary during a swap")
		}
		res, err := e.fs.Grep(ctx, GrepRequest{Pattern: e.secret})
		record("grep", err)
		if len(res.Matches) > 0 {
			t.Fatalf("Grep found the canary during a swap: %+v", res.Matches)
		}
		infos, err := e.fs.List(ctx, "d")
		if !errors.Is(err, errdefs.ErrInvalid) {
			record("list", err)
		}
		for _, in := range infos {
			if in.Name == "canary" {
				t.Fatalf("List listed the outside directory during a swap")
			}
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("swapping: %v", err)
	}
	t.Logf("outcomes over %d rounds and %d swaps: %v", rounds, swaps.Load(), outcomes)
	if outcomes["write ok"] == 0 {
		t.Errorf("no write ever succeeded; the race was not exercised")
	}
	e.checkOutside(t)
	assertNoTemp(t, e)
}

// Item 20: FIFOs and sockets are never opened (and so never block).
func TestSpecialFilesNeverBlock(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "regular.txt", "needle\n")
	if err := os.Mkdir(e.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"fifo", "sub/fifo2"} {
		if err := syscall.Mkfifo(e.path(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", e.path("sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e.symlink(t, "fifo", "fifolink")
	e.symlink(t, "sock", "socklink")

	ctx := t.Context()
	for _, p := range []string{"fifo", "sub/fifo2", "sock", "fifolink", "socklink"} {
		t.Run("read "+p, func(t *testing.T) {
			if err := allVerbs()[0].run(t, e, p); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Read(%q) = %v, want ErrInvalid", p, err)
			}
		})
		// Special files where a directory is expected are refused by the
		// kernel (O_DIRECTORY) rather than opened.
		t.Run("list "+p, func(t *testing.T) {
			var err error
			within(t, safety, "List", func() { _, err = e.fs.List(ctx, p) })
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("List(%q) = %v, want ErrInvalid", p, err)
			}
		})
		t.Run("write under "+p, func(t *testing.T) {
			var err error
			within(t, safety, "Write", func() { _, err = e.fs.Write(ctx, p+"/x", strings.NewReader("x"), 0, true) })
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Write(%q) = %v, want ErrInvalid", p+"/x", err)
			}
		})
		t.Run("grep "+p, func(t *testing.T) {
			var res GrepResult
			within(t, safety, "Grep", func() { res, err = e.fs.Grep(ctx, GrepRequest{Pattern: ".", Path: p}) })
			if err != nil || res.FilesScanned != 0 {
				t.Errorf("Grep(path %q) = %+v, %v; want nothing searched", p, res, err)
			}
		})
	}
	t.Run("grep the tree", func(t *testing.T) {
		var res GrepResult
		within(t, safety, "Grep", func() { res, err = e.fs.Grep(ctx, GrepRequest{Pattern: "needle"}) })
		want := GrepResult{Matches: []GrepMatch{{Path: "regular.txt", Line: 1, Text: "needle"}}, FilesScanned: 1}
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("Grep (-want +got):\n%s", diff)
		}
	})
	t.Run("stat", func(t *testing.T) {
		for p, want := range map[string]string{"fifo": TypeOther, "sock": TypeOther, "fifolink": TypeSymlink} {
			got, err := e.fs.Stat(ctx, p)
			if err != nil || got.Type != want {
				t.Errorf("Stat(%q) = %+v, %v; want type %s", p, got, err, want)
			}
		}
	})
	e.checkOutside(t)
}

// Item 20: a huge sparse file costs nothing to refuse.
func TestSparseFile(t *testing.T) {
	e := newEnv(t, noOwner)
	f, err := os.Create(e.path("sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.writeFile(t, "small.txt", "x\n")

	var n countingWriter
	start := time.Now()
	within(t, safety, "Read", func() { _, err = e.fs.Read(t.Context(), "sparse", &n) })
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Read(sparse) = %v, want ErrTooLarge", err)
	}
	if n > 0 {
		t.Errorf("Read(sparse) wrote %d bytes before refusing", n)
	}
	for _, maxFile := range []int64{0, 1 << 40} {
		var res GrepResult
		within(t, safety, "Grep", func() {
			res, err = e.fs.Grep(t.Context(), GrepRequest{Pattern: "x", MaxFileBytes: maxFile})
		})
		if err != nil || res.FilesScanned != 1 {
			t.Errorf("Grep(max_file_bytes=%d) = %+v, %v; want only small.txt scanned", maxFile, res, err)
		}
	}
	if d := time.Since(start); d > safety/2 {
		t.Errorf("refusing a sparse file took %v", d)
	}
	if in, err := e.fs.Stat(t.Context(), "sparse"); err != nil || in.Size != 10<<30 {
		t.Errorf("Stat(sparse) = %+v, %v", in, err)
	}
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// Item 20: a tree deeper than the walk limit ends the walk, truncated.
func TestDeepTree(t *testing.T) {
	e := newEnv(t, noOwner)
	const depth = 300
	p := e.ws
	rel := ""
	for i := range depth {
		p = filepath.Join(p, "d")
		rel = filepath.Join(rel, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if i == 5 || i == depth-1 {
			if err := os.WriteFile(filepath.Join(p, "needle"), []byte("needle\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var res GrepResult
	var err error
	within(t, safety, "Grep", func() { res, err = e.fs.Grep(t.Context(), GrepRequest{Pattern: "needle"}) })
	if err != nil {
		t.Fatal(err)
	}
	want := GrepResult{
		Matches:      []GrepMatch{{Path: strings.Repeat("d/", 6) + "needle", Line: 1, Text: "needle"}},
		FilesScanned: 1,
		Truncated:    true,
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Grep (-want +got):\n%s", diff)
	}
	// The deep file is still reachable by name, and the tree removable.
	var buf bytes.Buffer
	if _, err := e.fs.Read(t.Context(), rel+"/needle", &buf); err != nil || buf.String() != "needle\n" {
		t.Errorf("Read(deep) = %q, %v", buf.String(), err)
	}
	within(t, safety, "Remove", func() { err = e.fs.Remove(t.Context(), "d", true) })
	if err != nil {
		t.Errorf("Remove(deep) = %v", err)
	}
	e.checkOutside(t)
}

// Item 20: a directory with more entries than the cap is listed capped.
func TestHugeDirectory(t *testing.T) {
	e := newEnv(t, noOwner)
	const entries = 20000
	if err := os.Mkdir(e.path("big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		f, err := os.Create(e.path(fmt.Sprintf("big/%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var infos []Info
	var err error
	within(t, safety, "List", func() { infos, err = e.fs.List(t.Context(), "big") })
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("List = %v, want ErrTooLarge", err)
	}
	if len(infos) != DefaultMaxListEntries {
		t.Errorf("List returned %d entries, want the cap %d", len(infos), DefaultMaxListEntries)
	}
	e.fs.walkEntries = entries / 2
	var res GrepResult
	within(t, safety, "Grep", func() { res, err = e.fs.Grep(t.Context(), GrepRequest{Pattern: "x"}) })
	if err != nil || !res.Truncated {
		t.Errorf("Grep over the walk budget = truncated %v, %v; want truncated", res.Truncated, err)
	}
	// A deadline stops the walk too.
	e.fs.walkEntries = grepWalkEntries
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	within(t, safety, "Grep", func() { res, err = e.fs.Grep(ctx, GrepRequest{Pattern: "x"}) })
	if !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Errorf("Grep with a short deadline = %v", err)
	}
	e.checkOutside(t)
}

// A canceled context ends a Write that is still receiving an endless body,
// and leaves neither the target nor a temporary file. (A body that blocks
// without sending is the HTTP server's read timeout to end.)
func TestWriteStopsOnCancel(t *testing.T) {
	e := newEnv(t, noOwner)
	ctx, cancel := context.WithCancel(t.Context())
	r := &cancelAfter{cancel: cancel, n: 3}
	var err error
	within(t, safety, "Write", func() { _, err = e.fs.Write(ctx, "f", r, 0, false) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Write = %v, want context.Canceled", err)
	}
	if _, err := os.Lstat(e.path("f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("canceled Write left the target: %v", err)
	}
	assertNoTemp(t, e)
}

// cancelAfter is an endless body that cancels its context after n reads.
type cancelAfter struct {
	cancel func()
	n      int
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	c.n--
	if c.n == 0 {
		c.cancel()
	}
	return copy(p, "data"), nil
}

var _ io.Reader = (*cancelAfter)(nil)
