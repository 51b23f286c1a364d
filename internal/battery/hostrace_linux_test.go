package battery

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/workspace"
)

// raceSecondsEnv sets how long each backend's attacker swaps (default 12):
// raise it for a soak.
const raceSecondsEnv = "AGENTBOX_H43_SECONDS"

// TestH43HostWalkRace is SECURITY.md H43 on every backend: while a command in
// the sandbox exchanges directories with symlinks to host directories
// (absolute and relative, renameat2(RENAME_EXCHANGE) in a tight loop), the
// host runs every operation that walks the workspace's tree: diff,
// status, diff check, commit, fork, cp from the workspace (stat, list,
// read), cp into it, the agent file tools (find, deep listing, ranged
// read, edit), and gc's measuring (a dry run that sizes everything
// and asks git which workspaces are dirty). The targets are a root-only
// directory holding a canary and the data dir's own CA directory (whose
// ca.key the original exploit took). No byte or name of either may reach
// a reply, a commit, the host-private git objects or a fork, and nothing
// in either may change.
func TestH43HostWalkRace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		seconds := 12
		if s, err := strconv.Atoi(os.Getenv(raceSecondsEnv)); err == nil && s > 0 {
			seconds = s
		}
		x := e.newBox(t, sandbox.Limits{})
		files := x.files()

		secretDir := filepath.Join(t.TempDir(), "root-only")
		if err := os.Mkdir(secretDir, 0o700); err != nil {
			t.Fatal(err)
		}
		canary := "canary-h43-" + randHex(16)
		secretName := "secret-" + randHex(6)
		if err := os.WriteFile(filepath.Join(secretDir, secretName), []byte(canary+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		caDir := filepath.Join(e.data, "ca")
		caKey, err := os.ReadFile(filepath.Join(caDir, "ca.key"))
		if err != nil {
			t.Fatal(err)
		}
		// A line of the key's base64 body: unique to this key.
		keyLines := strings.Split(strings.TrimSpace(string(caKey)), "\n")
		if len(keyLines) < 3 {
			t.Fatalf("unexpected ca.key: %d lines", len(keyLines))
		}
		keyLine := keyLines[1]
		// leaks says what of the host's files b carries, if anything.
		leaks := func(b []byte) string {
			for _, s := range []string{canary, secretName, keyLine, "ca.key", "ca.crt"} {
				if bytes.Contains(b, []byte(s)) {
					return s
				}
			}
			return ""
		}
		beforeSecret, beforeCA := listDir(t, secretDir), listDir(t, caDir)

		// The tree: race/dN are directories with a file each; race/lN are
		// links to the targets, absolute and relative to the host's own
		// path of the race directory (what a walk by path resolves).
		raceHost := filepath.Join(files, "race")
		targets := []string{secretDir, caDir}
		var pairs []string
		var setup strings.Builder
		setup.WriteString("set -e; mkdir -p /workspace/race; cd /workspace/race\n")
		for i, target := range targets {
			rel, err := filepath.Rel(raceHost, target)
			if err != nil {
				t.Fatal(err)
			}
			for j, link := range []string{target, rel} {
				d, l := fmt.Sprintf("d%d%d", i, j), fmt.Sprintf("l%d%d", i, j)
				fmt.Fprintf(&setup, "mkdir %s; echo workspace-file > %s/x; ln -s %q %s\n", d, d, link, l)
				pairs = append(pairs, d, l)
			}
		}
		if res, out, errOut := x.sh(t, setup.String()); res.ExitCode != 0 {
			t.Fatalf("setting up the tree: %+v\n%s%s", res.ExecResult, out, errOut)
		}
		// Control: as root on the host, a plain read through each link
		// reaches its target, so a walk by path would.
		for i := 0; i < len(pairs); i += 2 {
			l := filepath.Join(raceHost, pairs[i+1])
			ents, err := os.ReadDir(l)
			if err != nil || len(ents) == 0 {
				t.Fatalf("control: reading the host directory through %s: %v (%d entries)", l, err, len(ents))
			}
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(seconds)*time.Second+2*time.Minute)
		defer cancel()
		swapped := make(chan string, 1)
		go func() {
			var out, errOut syncBuffer
			argv := append([]string{probePath, "swap", strconv.Itoa(seconds), "/workspace/race"}, pairs...)
			res, err := e.m.Exec(ctx, x.ws.ID, guest.ExecRequest{Argv: argv, Env: defaultEnv, Timeout: time.Duration(seconds+60) * time.Second}, nil, &out, &errOut)
			swapped <- fmt.Sprintf("%s%s%+v %v", out.String(), errOut.String(), res.ExecResult, err)
		}()

		// The host: every walk, round robin, until the attacker stops.
		type tally struct{ ok, failed int }
		counts := map[string]*tally{}
		var failures []string
		note := func(op string, err error) {
			c := counts[op]
			if c == nil {
				c = &tally{}
				counts[op] = c
			}
			if err == nil || errors.Is(err, errdefs.ErrConflict) {
				c.ok++
				return
			}
			c.failed++
			if len(failures) < 10 {
				failures = append(failures, op+": "+err.Error())
			}
		}
		check := func(op string, b []byte) {
			if s := leaks(b); s != "" {
				t.Errorf("H43: %s on %s carried %q from a host directory:\n%s", op, e.name, s, tail(string(b), 600))
			}
		}
		var forks []string
		// Every walk, by name; i numbers the call.
		ops := []struct {
			name string
			run  func(i int) error
		}{
			{"diff", func(int) error {
				d, err := e.m.Diff(ctx, x.ws.ID, nil)
				check("diff", d)
				return err
			}},
			{"status", func(int) error {
				s, err := e.m.Status(ctx, x.ws.ID)
				b, _ := json.Marshal(s)
				check("status", b)
				return err
			}},
			{"diff check", func(int) error {
				rep, err := e.m.CheckDiff(ctx, x.ws.ID, nil)
				b, _ := json.Marshal(rep)
				check("diff check", b)
				return err
			}},
			{"commit", func(i int) error {
				res, err := e.m.Commit(ctx, x.ws.ID, "h43 "+strconv.Itoa(i), nil)
				b, _ := json.Marshal(res)
				check("commit", b)
				return err
			}},
			{"fork", func(int) error {
				f, err := e.m.ForkWorkspace(ctx, x.ws.ID, manager.ForkRequest{})
				if err == nil {
					forks = append(forks, f.ID)
					scanTree(t, "fork "+f.ID, e.m.FilesPath(f), check)
				}
				return err
			}},
			// cp WS:race/dN host: what the CLI's download asks for.
			{"cp from the workspace", func(int) error { return readThroughFileAPI(ctx, e, x, pairs, check) }},
			// What an agent's file tools do.
			{"find, tree, ranged read, edit", func(int) error { return agentToolsThroughFileAPI(ctx, e, x, pairs, check) }},
			{"cp into the workspace", func(i int) error { return writeThroughFileAPI(ctx, e, x, pairs, i) }},
			{"gc", func(int) error {
				rep, err := e.m.GC(ctx, manager.GCRequest{DryRun: true, Budget: 1}, time.Now())
				b, _ := json.Marshal(rep)
				check("gc", b)
				return err
			}},
		}
		deadline := time.Now().Add(time.Duration(seconds-1) * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			op := ops[i%len(ops)]
			note(op.name, op.run(i))
		}
		t.Logf("%s: attacker: %s", e.name, strings.TrimSpace(<-swapped))
		summary := make([]string, 0, len(counts))
		for op, c := range counts {
			summary = append(summary, fmt.Sprintf("%s %d ok/%d failed", op, c.ok, c.failed))
		}
		slices.Sort(summary)
		t.Logf("%s: host operations during the race: %s; first failures: %q", e.name, strings.Join(summary, ", "), failures)
		// Each walk works on this tree once it holds still, so that the
		// race above, in which a changing tree may make git refuse to
		// stage (a file vanished under it), did attack working walks.
		for i, op := range ops {
			if err := op.run(1000 + i); err != nil && !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("H43: %s fails on %s once the tree holds still, so the race did not test it: %v", op.name, e.name, err)
			}
			if c := counts[op.name]; c == nil || c.ok+c.failed == 0 {
				t.Errorf("H43: %s never ran on %s during the race", op.name, e.name)
			}
		}

		// The host-private git objects (every blob git hashed), the
		// workspace's own .git (where commits are copied) and every fork.
		scanObjects(t, "host-private git objects", filepath.Join(workspace.HostGitDir(x.ws.Dir), "objects"), check)
		scanObjects(t, "the workspace's .git objects", filepath.Join(files, ".git", "objects"), check)
		for _, id := range forks {
			if w, err := e.m.GetWorkspace(ctx, id); err == nil {
				scanObjects(t, "fork "+id+" host-private git objects", filepath.Join(workspace.HostGitDir(w.Dir), "objects"), check)
			}
			if err := e.m.RemoveWorkspace(ctx, id); err != nil {
				t.Errorf("removing fork %s: %v", id, err)
			}
		}
		if got := listDir(t, secretDir); !slices.Equal(got, beforeSecret) {
			t.Errorf("H43: the root-only directory changed on %s: %v, was %v", e.name, got, beforeSecret)
		}
		if got := listDir(t, caDir); !slices.Equal(got, beforeCA) {
			t.Errorf("H43: the data dir's ca directory changed on %s: %v, was %v", e.name, got, beforeCA)
		}
	})
}

// readThroughFileAPI lists and reads race/* as `agentbox cp WS:race/...
// DIR` does, and checks every reply. It fails only when no name could be
// listed: those that are links at the moment are refused, as they must be.
func readThroughFileAPI(ctx context.Context, e *env, x *box, pairs []string, check func(string, []byte)) error {
	f, release, err := e.m.Files(ctx, x.ws.ID, false)
	if err != nil {
		return err
	}
	defer release()
	var lastErr error
	listed := 0
	for _, name := range pairs {
		infos, err := f.List(ctx, "race/"+name)
		if err != nil {
			lastErr = err
			continue
		}
		listed++
		b, _ := json.Marshal(infos)
		check("cp (list "+name+")", b)
		for _, in := range infos {
			var buf bytes.Buffer
			if _, err := f.Read(ctx, "race/"+name+"/"+in.Name, &buf); err == nil {
				check("cp (read "+name+"/"+in.Name+")", buf.Bytes())
			}
		}
	}
	if listed == 0 {
		return lastErr
	}
	return nil
}

// agentToolsThroughFileAPI runs the file tools shaped for agents over the
// race: find and a deep listing walk it, a ranged read and an edit resolve
// race/*/x. It fails when a walk fails or no read and no edit worked.
func agentToolsThroughFileAPI(ctx context.Context, e *env, x *box, pairs []string, check func(string, []byte)) error {
	f, release, err := e.m.Files(ctx, x.ws.ID, true)
	if err != nil {
		return err
	}
	defer release()
	found, err := f.Find(ctx, apitypes.FindRequest{Pattern: "**", Path: "race", IncludeGit: true})
	if err != nil {
		return err
	}
	b, _ := json.Marshal(found)
	check("find", b)
	list, err := f.Tree(ctx, "race", 8)
	if err != nil {
		return err
	}
	b, _ = json.Marshal(list)
	check("tree", b)
	var lastErr error
	for _, name := range pairs {
		var buf bytes.Buffer
		if _, err := f.ReadRange(ctx, "race/"+name+"/x", fileapi.Range{FirstLine: 1, LastLine: 5}, &buf); err != nil {
			lastErr = err
			continue
		}
		check("ranged read "+name, buf.Bytes())
		res, err := f.Edit(ctx, apitypes.EditRequest{Path: "race/" + name + "/x", Old: "workspace-file", New: "workspace-file.", All: true})
		if err != nil {
			lastErr = err
			continue
		}
		b, _ := json.Marshal(res)
		check("edit "+name, b)
		return nil
	}
	return lastErr
}

// writeThroughFileAPI writes a file into the first race/* directory that
// takes it, as `agentbox cp FILE WS:race/dN/` does.
func writeThroughFileAPI(ctx context.Context, e *env, x *box, pairs []string, i int) error {
	f, release, err := e.m.Files(ctx, x.ws.ID, true)
	if err != nil {
		return err
	}
	defer release()
	for _, name := range pairs {
		if _, err = f.Write(ctx, "race/"+name+"/host-"+strconv.Itoa(i), strings.NewReader("host data"), 0o644, false); err == nil {
			return nil
		}
	}
	return err
}

// scanTree checks every name and regular file under dir, walking inside
// it only (os.Root: links are not followed out).
func scanTree(t *testing.T, what, dir string, check func(string, []byte)) {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	defer root.Close()
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		check(what+" (name)", []byte(p))
		if d.Type().IsRegular() {
			if b, err := fs.ReadFile(root.FS(), p); err == nil {
				check(what+" ("+p+")", b)
			}
		}
		return nil
	})
}

// scanObjects inflates every loose object under dir and checks it.
func scanObjects(t *testing.T, what, dir string, check func(string, []byte)) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	defer root.Close()
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || len(filepath.Dir(p)) != 2 {
			return nil
		}
		raw, err := fs.ReadFile(root.FS(), p)
		if err != nil {
			return nil
		}
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil
		}
		b, _ := io.ReadAll(io.LimitReader(zr, 64<<20))
		mu.Lock()
		n++
		mu.Unlock()
		check(what+" (object "+p+")", b)
		return nil
	})
	if n == 0 {
		t.Errorf("%s: no loose objects under %s: the scan saw nothing", what, dir)
	}
}
