package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestForkBomb: a fork bomb stops at the pids limit, the host and a
// neighbouring sandbox stay responsive, and the budget recovers (F.36, 41).
func TestForkBomb(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const pids = 64
	x := startBox(t, b, sandbox.Spec{Limits: sandbox.Limits{Pids: pids, CPUs: 0.5}})
	neighbour := startBox(t, b, sandbox.Spec{})
	// The guest's own tasks (Go threads of the guest and its idle reapers)
	// count against the limit too.
	idle, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	idleProcs, err := b.cg.procs(x.id)
	if err != nil {
		t.Fatal(err)
	}

	// Sample the kernel's count while the bomb runs.
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if u, err := b.Usage(context.Background(), x.id); err == nil && u.Pids > peak.Load() {
				peak.Store(u.Pids)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	bomb := make(chan guest.ExecResult, 1)
	go func() {
		// The bomb runs in a subshell: busybox sh exits when one of its
		// own forks fails, so the top-level shell must need no fork once
		// the limit is reached (exec replaces it with sleep).
		res, _, _ := x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", "(f() { f | f & }; f); exec sleep 10"}, Timeout: 3 * time.Second})
		bomb <- res
	}()
	// While it runs: the host forks fine and the neighbour answers.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot fork during the bomb: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the host took %s to run true during the bomb", d)
	}
	start = time.Now()
	if out := neighbour.mustSh(t, "echo ok"); out != "ok\n" {
		t.Errorf("neighbour: %q", out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the neighbour took %s to answer during the bomb", d)
	}
	res := <-bomb
	close(stop)
	<-sampled
	if !res.TimedOut {
		t.Errorf("bomb: %+v, want timed out", res)
	}
	u, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork bomb: peak %d tasks (%d when idle), %d forks refused", peak.Load(), idle.Pids, u.PidsLimitHits)
	if peak.Load() > pids {
		t.Errorf("peak %d tasks over the limit %d", peak.Load(), pids)
	}
	if u.PidsLimitHits == 0 {
		t.Errorf("the pids limit never refused a fork: the bomb did not reach it (peak %d)", peak.Load())
	}
	// The budget recovers once the tree is killed.
	// Processes, not tasks: the guest may keep another idle reaper and more
	// runtime threads after the storm.
	waitFor(t, 5*time.Second, "the bomb's processes to go", func() bool {
		procs, err := b.cg.procs(x.id)
		return err == nil && len(procs) <= len(idleProcs)+1
	})
	if out := x.mustSh(t, "echo recovered"); out != "recovered\n" {
		t.Errorf("after the bomb: %q", out)
	}
}

// TestMemoryLimit: a process over the memory limit is killed inside its
// own cgroup and the kernel counts the OOM kill; the sandbox lives on
// (F.37).
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const limit = 96 << 20
	const tmp = 16 << 20
	x := startBox(t, b, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: limit, TmpBytes: tmp}})
	before, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	// awk doubles a string until the kernel kills it.
	res, out, errOut := x.run(t, guest.ExecRequest{
		Argv:    []string{"awk", "BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }"},
		Timeout: 30 * time.Second,
	})
	if res.Signal != int(syscall.SIGKILL) || res.TimedOut {
		t.Errorf("memory hog: %+v %q %q, want killed by SIGKILL", res, out, errOut)
	}
	u, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory: peak %d MiB of %d MiB, %d OOM kills", u.MemoryPeakBytes>>20, limit>>20, u.OOMKills)
	if u.OOMKills <= before.OOMKills {
		t.Errorf("the kernel counted no OOM kill (%d before, %d after)", before.OOMKills, u.OOMKills)
	}
	if u.MemoryPeakBytes > limit {
		t.Errorf("peak %d bytes over the limit %d", u.MemoryPeakBytes, limit)
	}
	// /tmp and /dev/shm are memory too: filling them stops at their size.
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		res, out := x.sh(t, "dd if=/dev/zero of="+dir+"/fill bs=1M count=200")
		if res.ExitCode == 0 || !strings.Contains(out, "No space left") {
			t.Errorf("filling %s: %+v %q", dir, res, out)
		}
		x.mustSh(t, "rm "+dir+"/fill")
	}
	if out := x.mustSh(t, "echo alive"); out != "alive\n" {
		t.Errorf("after the OOM kill: %q", out)
	}
}

// TestCPULimit: a busy loop gets about its quota (F.39).
func TestCPULimit(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{Limits: sandbox.Limits{CPUs: 0.2}})
	before, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, _, _ := x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", "while :; do :; done"}, Timeout: time.Second})
	wall := time.Since(start)
	if !res.TimedOut {
		t.Fatalf("busy loop: %+v", res)
	}
	u, err := b.Usage(t.Context(), x.id)
	if err != nil {
		t.Fatal(err)
	}
	used := u.CPU - before.CPU
	t.Logf("cpu: %s used in %s wall at 0.2 CPUs, throttled %d periods", used.Round(time.Millisecond), wall.Round(time.Millisecond), u.Throttled)
	if u.Throttled == before.Throttled {
		t.Error("never throttled")
	}
	if used > wall*35/100 {
		t.Errorf("used %s of CPU in %s at a 0.2 CPU quota", used, wall)
	}
}

// TestStopKillsEverything: Stop ends every process of the sandbox, also
// ones that detached from their exec, and a running exec ends Lost (F.40).
func TestStopKillsEverything(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{})
	marker := "abmark" + randHex(6)
	// A session of its own, an orphaned double fork, and the exec itself.
	script := "setsid sh -c 'sleep 300; : " + marker + "' & sh -c '(sleep 300; : " + marker + ") & exit'; sleep 300; : " + marker
	p, err := x.conn.Start(t.Context(), guest.ExecRequest{Argv: []string{"sh", "-c", script}, Env: shEnv}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the marked processes", func() bool { return len(withCmdline(marker)) >= 3 })
	ns := pidNS(t, x.rec.Pid)
	if err := b.Stop(t.Context(), x.id); err != nil {
		t.Fatal(err)
	}
	if left := withCmdline(marker); len(left) != 0 {
		t.Errorf("marked processes left after Stop: %v", left)
	}
	if left := inNS(ns); len(left) != 0 {
		t.Errorf("processes left in the jail's namespace: %v", left)
	}
	if pids, err := b.cg.procs(x.id); err != nil || len(pids) != 0 {
		t.Errorf("cgroup after Stop: %v %v", pids, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, _ := p.Wait(ctx)
	if !res.Lost {
		t.Errorf("the exec running at Stop ended %+v, want lost", res)
	}
}

// TestKilledFromOutside: a jail killed from outside mid-exec yields a lost
// result at once, not a hang, and is then stopped.
func TestKilledFromOutside(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{})
	done := make(chan guest.ExecResult, 1)
	go func() {
		// The result says Lost whether the guest died before or after it
		// reported the start; err is set in the first case.
		res, _ := x.conn.Exec(context.Background(), guest.ExecRequest{Argv: []string{"sleep", "60"}, Env: shEnv}, nil, nil, nil)
		done <- res
	}()
	waitFor(t, 5*time.Second, "the sleep to start", func() bool {
		for _, pid := range inNS(pidNS(t, x.rec.Pid)) {
			if c, _ := procComm(pid); c == "sleep" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if err := syscall.Kill(x.rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		t.Logf("lost after %s", time.Since(start).Round(time.Millisecond))
		if !res.Lost {
			t.Errorf("exec after the jail was killed: %+v, want lost", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exec did not end within 5s of the jail's death")
	}
	waitFor(t, 5*time.Second, "Inspect to say stopped", func() bool {
		i, err := b.Inspect(context.Background(), x.id)
		return err == nil && i.State == sandbox.StateStopped
	})
}

// TestPause: a paused sandbox runs nothing; resumed, it carries on.
func TestPause(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{})
	if err := b.Pause(t.Context(), x.id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	res, err := x.conn.Exec(ctx, guest.ExecRequest{Argv: []string{"true"}, Env: shEnv}, nil, nil, nil)
	cancel()
	if err == nil && !res.Canceled {
		t.Errorf("a paused sandbox ran a command: %+v", res)
	}
	if err := b.Resume(t.Context(), x.id); err != nil {
		t.Fatal(err)
	}
	if out := x.mustSh(t, "echo resumed"); out != "resumed\n" {
		t.Errorf("after resume: %q", out)
	}
	// Stop works on a paused sandbox.
	if err := b.Pause(t.Context(), x.id); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(t.Context(), x.id); err != nil {
		t.Fatal(err)
	}
}

// TestLifetime: a sandbox with a lifetime stops by itself.
func TestLifetime(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{Lifetime: 300 * time.Millisecond})
	waitFor(t, 5*time.Second, "the sandbox to stop at the end of its lifetime", func() bool {
		i, err := b.Inspect(context.Background(), x.id)
		return err == nil && i.State == sandbox.StateStopped
	})
}

// TestClose: closing the backend kills its sandboxes; their records stay
// for a later backend (a restarted daemon) to list and remove.
func TestClose(t *testing.T) {
	t.Parallel()
	requireJails(t)
	state := filepath.Join(t.TempDir(), "state")
	parent := "agentbox-test-" + randHex(4)
	opts := Options{StateDir: state, ImagesDir: imagesDir, CgroupParent: parent}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	req, ln := boxRequest(t, sandbox.Spec{})
	if _, err := b.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec, err := b.lookup(req.ID)
	if err != nil {
		t.Fatal(err)
	}
	ns := pidNS(t, rec.Pid)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := inNS(ns); len(left) != 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	if _, err := b.Create(t.Context(), req); err == nil {
		t.Error("Create on a closed backend worked")
	}
	// The next daemon.
	b2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		b2.Close()
		for _, h := range b2.cg.hiers {
			os.Remove(filepath.Join(h, parent))
		}
	}()
	list, err := b2.List(t.Context(), map[string]string{sandbox.LabelSandbox: req.ID})
	if err != nil || len(list) != 1 || list[0].State != sandbox.StateStopped {
		t.Fatalf("List after restart: %+v %v", list, err)
	}
	if err := b2.Remove(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(b2, req.ID); len(left) != 0 {
		t.Errorf("left after Remove: %v", left)
	}
}
