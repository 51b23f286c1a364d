package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/agentbox/agentbox/internal/store"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// crashKills is how many times the crash test kills the daemon;
// AGENTBOX_CRASH_KILLS sets another number for a longer soak.
func crashKills() int {
	if n, err := strconv.Atoi(os.Getenv("AGENTBOX_CRASH_KILLS")); err == nil && n > 0 {
		return n
	}
	return 22
}

// crashModel is what the API acknowledged: the workspaces it created and,
// per workspace, every file it wrote (each path written once).
type crashModel struct {
	mu  sync.Mutex
	ws  map[string]*crashWS
	seq atomic.Int64
	// acked counts acknowledged operations.
	acked atomic.Int64
	// killed is set just before the daemon is killed: an operation that
	// fails before that failed for a reason of the daemon's own.
	killed     atomic.Bool
	unexpected []string
}

// failed records an operation's failure unless the kill explains it.
func (m *crashModel) failed(op string, err error, res *client.ExecResult) {
	if m.killed.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if res != nil {
		m.unexpected = append(m.unexpected, fmt.Sprintf("%s: %+v, %v", op, *res, err))
	} else {
		m.unexpected = append(m.unexpected, fmt.Sprintf("%s: %v", op, err))
	}
}

type crashWS struct {
	files map[string]string
	// busy: a removal was sent; uncertain: it may have happened.
	busy, uncertain bool
	// users counts the operations under way on it.
	users int
}

// pick returns a random workspace that no removal touches, or "", and
// holds it off removals until release is called: an operation on a
// workspace that an acknowledged removal took away fails rightly.
func (m *crashModel) pick() (id string, release func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, w := range m.ws {
		if !w.busy {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", func() {}
	}
	slices.Sort(ids)
	id = ids[rand.IntN(len(ids))]
	w := m.ws[id]
	w.users++
	var once sync.Once
	return id, func() {
		once.Do(func() {
			m.mu.Lock()
			w.users--
			m.mu.Unlock()
		})
	}
}

// pickIdle returns a random workspace no operation uses and marks it
// busy, or "" (keeping at least two workspaces).
func (m *crashModel) pickIdle() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, w := range m.ws {
		if !w.busy && w.users == 0 {
			ids = append(ids, id)
		}
	}
	if len(m.ws) <= 2 || len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	id := ids[rand.IntN(len(ids))]
	m.ws[id].busy = true
	return id
}

func (m *crashModel) wrote(id, path, content string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.ws[id]; ok {
		w.files[path] = content
	}
	m.acked.Add(1)
}

// startCrashDaemon starts `agentbox serve` with the crash test's
// configuration and waits until it answers.
func startCrashDaemon(t *testing.T, data, cfg string) *daemonProc {
	t.Helper()
	d := &daemonProc{data: data, logs: &bytes.Buffer{}}
	args := []string{"serve", "--data", data, "--log-level", "info"}
	if os.Getenv(testStoreEnv) == "postgres" {
		args = append(args, "--store", testStore(t, data))
	}
	d.cmd = exec.Command(binary, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	d.cmd.Env = append(os.Environ(), "AGENTBOX_DATA="+data, "AGENTBOX_CONFIG="+cfg)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cl := d.client(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := cl.Health(context.Background()); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			d.cmd.Wait()
			t.Fatalf("daemon did not come up:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, bounded
	}
}

// TestCrashRecovery runs a mixed workload (create, write, exec, fork,
// remove) against a real daemon and kills it with SIGKILL at random points
// over and over. After every restart each acknowledged write is there,
// nothing is orphaned (containers, mounts, directories) and the database
// invariants hold. Then it kills a sandbox's container and its guest
// from outside mid-exec: the exec ends lost and the next one heals.
func TestCrashRecovery(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the daemon mounts overlays and runs sandboxes as uid 1000: run as root")
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	data := t.TempDir()
	owner := manager.OwnerID(data)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`{"default_backend": "docker", "default_image": "agentbox/busybox:latest", "reconcile_interval": "250ms", "shutdown_grace": "5s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Last: whatever a failure left, no container of this data dir survives.
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelOwner+"="+owner).Output()
		for _, ref := range strings.Fields(string(out)) {
			t.Errorf("container %s of this test left at the end", ref)
			exec.Command("docker", "rm", "-f", ref).Run()
		}
	})
	src := testutil.NewRepo(t, map[string]string{"README.md": "crash test\n", "src/a.txt": "a\n"})
	d := startCrashDaemon(t, data, cfg)
	t.Cleanup(func() {
		// A fresh daemon removes every workspace, then stops cleanly.
		d := startCrashDaemon(t, data, cfg)
		cl := d.client(t)
		wss, _ := cl.ListWorkspaces(context.Background(), "", "")
		for _, w := range wss {
			if err := cl.RemoveWorkspace(context.Background(), w.ID); err != nil {
				t.Errorf("cleanup %s: %v", w.ID, err)
			}
		}
		d.stop(t)
		if n := mountsUnder(t, data); n != 0 {
			t.Errorf("%d mounts left under %s", n, data)
		}
	})
	// Runs before the cleanup above: a test stopped midway leaves its
	// daemon running, which would refuse the cleanup's.
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.kill9(t)
		}
	})
	cl := d.client(t)
	repo, err := cl.AddRepo(t.Context(), src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	model := &crashModel{ws: map[string]*crashWS{}}
	for range 2 {
		w, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: repo.ID})
		if err != nil {
			t.Fatal(err)
		}
		model.ws[w.ID] = &crashWS{files: map[string]string{}}
	}

	var orphanWaits int
	kills := crashKills()
	for cycle := range kills {
		cycleStart := time.Now()
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					crashOp(ctx, cl, repo.ID, model)
				}
			}()
		}
		// Kill at a random point: after a random number of acknowledged
		// operations (bounded in time), plus a random few milliseconds.
		target := model.acked.Load() + 1 + rand.Int64N(12)
		deadline := time.Now().Add(20 * time.Second)
		for model.acked.Load() < target && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		model.killed.Store(true)
		d.kill9(t)
		cancel()
		wg.Wait()
		model.killed.Store(false)
		if len(model.unexpected) > 0 {
			t.Fatalf("operations failed while the daemon ran (before kill %d):\n  %s\n%s", cycle+1, strings.Join(model.unexpected, "\n  "), tail(d.logs.String(), 40))
		}

		killedAt := time.Now()
		d = startCrashDaemon(t, data, cfg)
		cl = d.client(t)
		upAt := time.Now()
		if !crashVerify(t, cl, data, owner, model) {
			t.Fatalf("after kill %d:\n%s", cycle+1, tail(d.logs.String(), 40))
		}
		orphanWaits += crashOrphans(t, cl, data, owner)
		t.Logf("kill %d: workload %s, restart %s, checks %s", cycle+1, killedAt.Sub(cycleStart).Round(time.Millisecond),
			upAt.Sub(killedAt).Round(time.Millisecond), time.Since(upAt).Round(time.Millisecond))
		if t.Failed() {
			t.Fatalf("after kill %d:\n%s", cycle+1, tail(d.logs.String(), 40))
		}
	}

	// Kill the execution environment, then the guest, mid-exec.
	for _, how := range []string{"container", "guest"} {
		id, release := model.pick()
		crashMidExec(t, cl, id, how)
		release()
	}
	crashOrphans(t, cl, data, owner)

	repairs := map[string]int{}
	total := 0
	for _, k := range manager.RepairKinds {
		evs, err := cl.Events(t.Context(), client.EventFilter{Type: "reconcile." + k, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			repairs[k] = len(evs)
			total += len(evs)
		}
	}
	for _, typ := range []string{"sandbox.lost", "sandbox.rolled_back", "workspace.rolled_back", "workspace.remounted"} {
		evs, _ := cl.Events(t.Context(), client.EventFilter{Type: typ, Limit: 10000})
		repairs[typ] = len(evs)
	}
	d.stop(t)
	t.Logf("crash test: %d kills, %d operations acknowledged, %d workspaces at the end, reconciler repairs %d %v, %d orphan checks waited for a periodic pass, %s",
		kills, model.acked.Load(), len(model.ws), total, repairs, orphanWaits, time.Since(began).Round(time.Millisecond))
}

// crashOp runs one random operation and records it if acknowledged.
func crashOp(ctx context.Context, cl *client.Client, repoID string, m *crashModel) {
	id, release := m.pick()
	defer release()
	n := m.seq.Add(1)
	switch r := rand.IntN(100); {
	case id == "" || r < 8:
		w, err := cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: repoID})
		if err != nil {
			m.failed("create", err, nil)
			return
		}
		m.mu.Lock()
		m.ws[w.ID] = &crashWS{files: map[string]string{}}
		m.mu.Unlock()
		m.acked.Add(1)
	case r < 60:
		p := fmt.Sprintf("w/%d.txt", n)
		content := fmt.Sprintf("write %d %x\n", n, rand.Uint64())
		if _, err := cl.WriteFile(ctx, id, p, strings.NewReader(content), 0, true); err != nil {
			m.failed("write "+id+" "+p, err, nil)
			return
		}
		m.wrote(id, p, content)
	case r < 80:
		p := fmt.Sprintf("x/%d.txt", n)
		content := fmt.Sprintf("exec %d %x", n, rand.Uint64())
		var out bytes.Buffer
		res, err := cl.Exec(ctx, id, client.Exec{Argv: []string{"sh", "-c", "mkdir -p x && printf %s \"$1\" > \"$2\" && cat \"$2\"", "sh", content, p},
			Workdir: "/workspace", Timeout: "20s"}, &out, nil)
		if err != nil || res.ExitCode != 0 || res.Lost || out.String() != content {
			m.failed("exec in "+id, err, &res)
			return
		}
		m.wrote(id, p, content)
	case r < 90:
		m.mu.Lock()
		var parent map[string]string
		if w, ok := m.ws[id]; ok {
			parent = make(map[string]string, len(w.files))
			for k, v := range w.files {
				parent[k] = v
			}
		}
		m.mu.Unlock()
		w, err := cl.ForkWorkspace(ctx, id, "", "")
		if err != nil {
			m.failed("fork "+id, err, nil)
			return
		}
		m.mu.Lock()
		m.ws[w.ID] = &crashWS{files: parent}
		m.mu.Unlock()
		m.acked.Add(1)
	default:
		release()
		id := m.pickIdle()
		if id == "" {
			return
		}
		err := cl.RemoveWorkspace(ctx, id)
		m.mu.Lock()
		w := m.ws[id]
		if err == nil {
			delete(m.ws, id)
			m.acked.Add(1)
		} else {
			w.uncertain = true
		}
		m.mu.Unlock()
		if err != nil {
			m.failed("remove "+id, err, nil)
		}
	}
}

// crashVerify checks, after a restart, every acknowledged write and the
// database invariants, and brings the model in line with what an
// unacknowledged create or removal did.
func crashVerify(t *testing.T, cl *client.Client, data, owner string, m *crashModel) bool {
	t.Helper()
	ctx := t.Context()
	wss, err := cl.ListWorkspaces(ctx, "", "")
	if err != nil {
		t.Errorf("listing workspaces: %v", err)
		return false
	}
	repos, err := cl.ListRepos(ctx)
	if err != nil {
		t.Errorf("listing repos: %v", err)
		return false
	}
	repoIDs := map[string]bool{}
	for _, r := range repos {
		repoIDs[r.ID] = true
	}
	live := map[string]bool{}
	for _, w := range wss {
		live[w.ID] = true
		if w.State != "ready" {
			t.Errorf("workspace %s is %s after the restart", w.ID, w.State)
		}
		if !repoIDs[w.RepoID] {
			t.Errorf("workspace %s has no repo %s", w.ID, w.RepoID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, w := range m.ws {
		if !live[id] {
			if w.uncertain {
				delete(m.ws, id) // the interrupted removal was finished
				continue
			}
			t.Errorf("acknowledged workspace %s is gone", id)
			continue
		}
		w.busy, w.uncertain = false, false
		for p, want := range w.files {
			var got bytes.Buffer
			if _, err := cl.ReadFile(ctx, id, p, &got); err != nil || got.String() != want {
				t.Errorf("workspace %s: acknowledged write %s: %q, %v; want %q", id, p, got.String(), err, want)
			}
		}
	}
	for _, w := range wss {
		if _, ok := m.ws[w.ID]; !ok {
			// An unacknowledged create or fork that finished: it is whole.
			m.ws[w.ID] = &crashWS{files: map[string]string{}}
		}
	}
	sbs, err := cl.ListSandboxes(ctx, "")
	if err != nil {
		t.Errorf("listing sandboxes: %v", err)
		return false
	}
	for _, sb := range sbs {
		if !live[sb.WorkspaceID] {
			t.Errorf("sandbox %s of missing workspace %s", sb.ID, sb.WorkspaceID)
		}
		if sb.State == "creating" {
			t.Errorf("sandbox %s still creating after the restart", sb.ID)
		}
		if sb.State == "running" && !containerRunning(sb.BackendRef) {
			t.Errorf("sandbox %s is running but its container %s is not", sb.ID, sb.BackendRef)
		}
	}
	// No exec is running after a restart: a new daemon runs no command.
	st, err := openDataStoreErr(t, data)
	if err != nil {
		t.Errorf("opening the database: %v", err)
		return false
	}
	defer st.Close()
	for _, sb := range sbs {
		execs, err := st.ListExecs(ctx, store.ExecFilter{SandboxID: sb.ID})
		if err != nil {
			t.Errorf("listing the execs of %s: %v", sb.ID, err)
		}
		for _, x := range execs {
			if x.State == store.ExecRunning {
				t.Errorf("exec %s of sandbox %s (%s) still says running after the restart", x.ID, sb.ID, sb.State)
			}
		}
	}
	return !t.Failed()
}

// crashOrphans checks that nothing exists that the daemon's records do
// not account for: containers of this data dir, mounts under it,
// directories in it. A container whose create the engine finished after
// the kill may appear after the start pass: a periodic pass removes it,
// so the check is polled (bounded). It returns how many retries it took.
func crashOrphans(t *testing.T, cl *client.Client, data, owner string) int {
	t.Helper()
	var problems []string
	deadline := time.Now().Add(20 * time.Second)
	for tries := 0; ; tries++ {
		problems = orphans(t, cl, data, owner)
		if len(problems) == 0 {
			return tries
		}
		if tries == 0 {
			t.Logf("waiting for a periodic pass: %s", strings.Join(problems, "; "))
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("orphans after reconcile:\n  %s", strings.Join(problems, "\n  "))
	return 0
}

func orphans(t *testing.T, cl *client.Client, data, owner string) []string {
	ctx := t.Context()
	var problems []string
	// Containers are read first: anything made after that has its row.
	out, err := exec.Command("docker", "ps", "-a", "--no-trunc", "--format", `{{.ID}} {{.Label "agentbox.sandbox"}} {{.State}}`,
		"--filter", "label="+sandbox.LabelOwner+"="+owner).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	mounts, err := mountinfo.Under(data)
	if err != nil {
		t.Fatal(err)
	}
	dirs := func(sub string) []string {
		es, _ := os.ReadDir(filepath.Join(data, sub))
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	wsDirs, sbDirs, repoDirs, pcDirs, localDirs := dirs("workspaces"), dirs("sandboxes"), dirs("repos"), dirs("pristine"), dirs("local")

	wss, err1 := cl.ListWorkspaces(ctx, "", "")
	sbs, err2 := cl.ListSandboxes(ctx, "")
	repos, err3 := cl.ListRepos(ctx)
	if err := errors.Join(err1, err2, err3); err != nil {
		return []string{err.Error()}
	}
	running := map[string]string{} // sandbox -> container
	for _, sb := range sbs {
		if sb.State == "running" {
			running[sb.ID] = sb.BackendRef
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if ref, ok := running[f[1]]; !ok || ref != f[0] {
			problems = append(problems, "container "+line+" belongs to no running sandbox")
		}
	}
	// A workspace's mounts: its overlay, and with a disk quota first its
	// volume, which then holds the overlay.
	wsMounts := map[string][]string{}
	for _, w := range wss {
		if w.DiskQuota > 0 {
			wsMounts[w.ID] = []string{"vol", "vol/merged"}
		} else {
			wsMounts[w.ID] = []string{"merged"}
		}
	}
	for _, mp := range mounts {
		rel, _ := filepath.Rel(filepath.Join(data, "workspaces"), mp)
		id, rest, _ := strings.Cut(rel, "/")
		if !slices.Contains(wsMounts[id], rest) {
			problems = append(problems, "mount "+mp+" belongs to no workspace")
		}
	}
	for id, want := range wsMounts {
		for _, rest := range want {
			if !slices.Contains(mounts, filepath.Join(data, "workspaces", id, rest)) {
				problems = append(problems, "workspace "+id+" is not mounted ("+rest+")")
			}
		}
	}
	for _, n := range wsDirs {
		if wsMounts[n] == nil {
			problems = append(problems, "directory workspaces/"+n+" belongs to no workspace")
		}
	}
	for _, n := range sbDirs {
		if _, ok := running[n]; !ok {
			problems = append(problems, "directory sandboxes/"+n+" belongs to no running sandbox")
		}
	}
	repoPaths := map[string]bool{}
	for _, r := range repos {
		repoPaths[filepath.Base(r.Path)] = true
	}
	for _, n := range repoDirs {
		if !repoPaths[n] {
			problems = append(problems, "directory repos/"+n+" belongs to no repo")
		}
	}
	if len(localDirs) > 0 {
		problems = append(problems, fmt.Sprintf("local jails left: %v", localDirs))
	}
	// Pristine checkouts are not in the API: the database says which exist.
	st, err := openDataStoreErr(t, data)
	if err != nil {
		return append(problems, err.Error())
	}
	defer st.Close()
	pcs, err := st.ListPristines(ctx, "")
	if err != nil {
		return append(problems, err.Error())
	}
	pcPaths := map[string]bool{}
	for _, pc := range pcs {
		pcPaths[filepath.Base(pc.Path)] = true
		if _, err := os.Stat(pc.Path); err != nil {
			problems = append(problems, "pristine "+pc.ID+": "+err.Error())
		}
	}
	for _, n := range pcDirs {
		if !pcPaths[n] {
			problems = append(problems, "directory pristine/"+n+" belongs to no pristine checkout")
		}
	}
	return problems
}

func containerRunning(ref string) bool {
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", ref).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// signalWriter closes started at the first write.
type signalWriter struct {
	once    sync.Once
	started chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	return len(p), nil
}

// crashMidExec kills the sandbox of workspace id from outside while a
// command runs in it, by removing its container or killing its guest
// (the container's init) from the host. The command ends lost, and the
// next one runs in a replacement that says so.
func crashMidExec(t *testing.T, cl *client.Client, id, how string) {
	t.Helper()
	ctx := t.Context()
	if id == "" {
		t.Fatal("no workspace left for the mid-exec kill")
	}
	if _, err := cl.Exec(ctx, id, client.Exec{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatalf("warm-up exec: %v", err)
	}
	sbs, err := cl.ListSandboxes(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var sb client.Sandbox
	for _, s := range sbs {
		if s.State == "running" {
			sb = s
		}
	}
	if sb.ID == "" {
		t.Fatalf("workspace %s has no running sandbox: %+v", id, sbs)
	}
	w := &signalWriter{started: make(chan struct{})}
	type result struct {
		res client.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cl.Exec(ctx, id, client.Exec{Argv: []string{"sh", "-c", "echo started; sleep 60"}}, w, nil)
		done <- result{res, err}
	}()
	select {
	case <-w.started:
	case r := <-done:
		t.Fatalf("long exec ended early: %+v %v", r.res, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("long exec did not start")
	}
	switch how {
	case "container":
		if out, err := exec.Command("docker", "kill", sb.BackendRef).CombinedOutput(); err != nil {
			t.Fatalf("docker kill: %v %s", err, out)
		}
	case "guest":
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", sb.BackendRef).Output()
		pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil || pid <= 0 {
			t.Fatalf("guest pid of %s: %q %v %v", sb.BackendRef, out, err, perr)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing guest %d: %v", pid, err)
		}
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("exec did not end after its %s was killed", how)
	}
	if r.err != nil || !r.res.Lost {
		t.Errorf("exec whose %s was killed: %+v, %v; want lost", how, r.res, r.err)
	}
	var out bytes.Buffer
	res, err := cl.Exec(ctx, id, client.Exec{Argv: []string{"cat", "/workspace/README.md"}}, &out, nil)
	if err != nil || res.ExitCode != 0 || !res.Replaced || res.SandboxID == sb.ID || out.String() != "crash test\n" {
		t.Errorf("exec after the %s was killed: %+v %q %v; want a replacement", how, res, out.String(), err)
	}
	got, err := cl.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "lost" {
		t.Errorf("sandbox whose %s was killed: %s, %v; want lost", how, got.State, err)
	}
}

// tail keeps the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
