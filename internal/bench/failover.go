package bench

// Failover runs clients against several daemons sharing one store, kills
// one with SIGKILL mid-load and checks what the cluster promises: every
// write a node acknowledged is still there, the dead node's sandboxes are
// marked lost by a survivor, its workspaces are adopted (shared storage)
// or reported unavailable naming it, and the survivors keep serving with
// no error.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// FailoverOptions configure Failover. Zero fields take their defaults.
type FailoverOptions struct {
	// DaemonOptions are every node's; Store is required. NodeHeartbeat
	// defaults to 1s (a node is lost 3s after its last beat).
	DaemonOptions
	// Nodes is the number of daemons (default 3); the last one is killed.
	Nodes int
	// Clients is the number of concurrent clients (default 32).
	Clients int
	// Before is how long the clients write before the kill (default 10s);
	// After how long the load runs on the survivors once the dead node's
	// sandboxes are lost (default 10s).
	Before, After time.Duration
}

// FailoverResult is what Failover saw.
type FailoverResult struct {
	Nodes   int `json:"nodes"`
	Clients int `json:"clients"`
	// Killed is the node killed with SIGKILL.
	Killed string `json:"killed"`
	// Acked is the number of writes a node acknowledged (file writes
	// through the API, files written by commands through a sandbox),
	// AckedOnKilled those in workspaces the killed node owned; Verified
	// those read back afterwards through a survivor with the content
	// written; Missing the ones that were not.
	Acked         int      `json:"acked"`
	AckedOnKilled int      `json:"acked_on_killed"`
	Verified      int      `json:"verified"`
	Missing       []string `json:"missing,omitempty"`
	// ErrorsBefore are the errors before the kill; ErrorsAfter those of
	// the load on the survivors once the kill was handled. Both must be
	// 0. ErrorsBetween are the survivors' clients' errors between the
	// kill and its handling (requests about the dead node's objects).
	ErrorsBefore  int      `json:"errors_before"`
	ErrorsBetween int      `json:"errors_between"`
	ErrorsAfter   int      `json:"errors_after"`
	Errors        []string `json:"errors,omitempty"`
	// LostAfter is the time from the kill to every sandbox of the killed
	// node marked lost; LostSandboxes how many were.
	LostAfter     time.Duration `json:"lost_after_ns"`
	LostSandboxes int           `json:"lost_sandboxes"`
	// KilledWorkspaces is how many workspaces the killed node owned, and
	// Adopted how many of them a survivor adopted.
	KilledWorkspaces int `json:"killed_workspaces"`
	Adopted          int `json:"adopted"`
	// Unavailable counts the reads of writes in workspaces the dead node
	// kept (no shared storage) that failed as they must while it was
	// down: unavailable, naming it. They are read back once it is up.
	Unavailable int `json:"unavailable"`
	// Rejoined says the killed node was started again at the end.
	Rejoined bool `json:"rejoined"`
	// AfterCycles is the number of load cycles the survivors served.
	AfterCycles int         `json:"after_cycles"`
	Leftovers   []string    `json:"leftovers,omitempty"`
	Checks      []LoadCheck `json:"checks"`
}

// OK says whether every check held.
func (r FailoverResult) OK() bool {
	return len(r.Checks) > 0 && !slices.ContainsFunc(r.Checks, func(c LoadCheck) bool { return !c.Met })
}

// Print writes the result as a short report.
func (r FailoverResult) Print(w io.Writer) {
	fmt.Fprintf(w, "%d nodes, %d clients; killed %s\n", r.Nodes, r.Clients, r.Killed)
	fmt.Fprintf(w, "acknowledged writes %d (%d on the killed node's workspaces), read back %d, missing %d\n", r.Acked, r.AckedOnKilled, r.Verified, len(r.Missing))
	fmt.Fprintf(w, "reads of its unadopted workspaces' writes while it was down: %d unavailable, naming it\n", r.Unavailable)
	fmt.Fprintf(w, "killed node's sandboxes lost after %s (%d); its workspaces %d, adopted %d\n", r.LostAfter.Round(time.Millisecond), r.LostSandboxes, r.KilledWorkspaces, r.Adopted)
	fmt.Fprintf(w, "errors: before the kill %d, between %d, after %d (%d load cycles on the survivors)\n", r.ErrorsBefore, r.ErrorsBetween, r.ErrorsAfter, r.AfterCycles)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  %s\n", e)
	}
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.Met {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s %-28s %s (target %s)\n", mark, c.Name, c.Value, c.Target)
	}
}

// ack is one acknowledged write.
type ack struct {
	ws, path, content string
}

// Failover runs the scenario (see the package comment of this file).
func Failover(ctx context.Context, opts FailoverOptions, log io.Writer) (res FailoverResult, err error) {
	if opts.Store == "" {
		return res, errors.New("bench: failover needs a shared store (postgres://...)")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Clients == 0 {
		opts.Clients = DefaultLoadClients
	}
	if opts.Before == 0 {
		opts.Before = 10 * time.Second
	}
	if opts.After == 0 {
		opts.After = 10 * time.Second
	}
	if opts.NodeHeartbeat == 0 {
		opts.NodeHeartbeat = time.Second
	}
	if opts.Nodes < 2 {
		return res, fmt.Errorf("bench: failover needs at least 2 nodes, not %d", opts.Nodes)
	}
	if log == nil {
		log = io.Discard
	}
	res = FailoverResult{Nodes: opts.Nodes, Clients: opts.Clients}
	d, err := startDaemon(ctx, opts.DaemonOptions, 50, log)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	nodes, err := startNodes(ctx, d, opts.Nodes, log)
	defer func() {
		for _, n := range nodes[1:] {
			err = errors.Join(err, n.close())
		}
	}()
	if err != nil {
		return res, err
	}
	victim := nodes[len(nodes)-1]
	ns, err := d.c.ListNodes(ctx)
	if err != nil {
		return res, err
	}
	for _, n := range ns {
		if n.DataDir == victim.data {
			res.Killed = n.ID
		}
	}
	if res.Killed == "" {
		return res, fmt.Errorf("bench: the node on %s is not registered: %v", victim.data, ns)
	}

	var mu sync.Mutex
	var acks []ack
	var errsBefore, errsBetween []string
	killed := make(chan struct{})
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-killed:
			errsBetween = append(errsBetween, err.Error())
		default:
			errsBefore = append(errsBefore, err.Error())
		}
	}
	// Each client makes one workspace (placed by the cluster) with one
	// sandbox, then writes through the API and through commands until
	// stopped. A client of the killed node stops at the kill.
	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	for i := range opts.Clients {
		node := nodes[i%len(nodes)]
		c, err := newClient(node)
		if err != nil {
			return res, err
		}
		wg.Go(func() {
			onVictim := node == victim
			ws, err := c.CreateWorkspace(wctx, client.CreateWorkspace{Repo: d.repo, Task: "failover"})
			if err != nil {
				record(fmt.Errorf("client %d: creating its workspace: %w", i, err))
				return
			}
			sb, err := c.CreateSandbox(wctx, client.CreateSandbox{Workspace: ws.ID, Backend: "docker", Image: d.opts.Image})
			d.saw(sb.ID)
			if err != nil {
				record(fmt.Errorf("client %d: creating the sandbox of %s: %w", i, ws.ID, err))
				return
			}
			for k := 0; wctx.Err() == nil; k++ {
				select {
				case <-killed:
					if onVictim {
						return // its node is gone
					}
				default:
				}
				p := fmt.Sprintf("acks/c%d-%d.txt", i, k)
				content := fmt.Sprintf("client %d write %d\n", i, k)
				if _, err := c.WriteFile(wctx, ws.ID, p, strings.NewReader(content), 0, true); err != nil {
					if wctx.Err() == nil {
						record(fmt.Errorf("client %d: writing %s in %s: %w", i, p, ws.ID, err))
					}
					waitOrStop(wctx, 200*time.Millisecond)
					continue
				}
				mu.Lock()
				acks = append(acks, ack{ws.ID, p, content})
				mu.Unlock()
				ep := fmt.Sprintf("acks/c%d-%d.exec", i, k)
				var out, errb bytes.Buffer
				r, err := c.Exec(wctx, ws.ID, client.Exec{Argv: []string{"sh", "-c", "printf '%s' \"$1\" > \"$2\"", "sh", content, ep}, Timeout: "60s"}, &out, &errb)
				d.saw(r.SandboxID)
				switch {
				case err != nil:
					if wctx.Err() == nil {
						record(fmt.Errorf("client %d: exec in %s: %w", i, ws.ID, err))
					}
					waitOrStop(wctx, 200*time.Millisecond)
					continue
				case r.ExitCode != 0:
					record(fmt.Errorf("client %d: exec in %s: exit %d: %s", i, ws.ID, r.ExitCode, errb.String()))
					continue
				}
				mu.Lock()
				acks = append(acks, ack{ws.ID, ep, content})
				mu.Unlock()
			}
		})
	}
	waitOrStop(ctx, opts.Before)
	// The kill: no shutdown, no heartbeat, nothing recorded.
	mu.Lock()
	close(killed)
	mu.Unlock()
	kill := time.Now()
	victim.cmd.Process.Kill()
	<-victim.exited
	fmt.Fprintf(log, "killed node %s (pid %d) after %s\n", res.Killed, victim.cmd.Process.Pid, opts.Before)

	// A survivor marks the dead node's sandboxes lost once its lease
	// lapses (3 heartbeats), within a few more beats.
	deadline := kill.Add(3*opts.NodeHeartbeat + 30*time.Second)
	for {
		sbs, err := d.c.ListSandboxes(ctx, "")
		if err != nil {
			return res, err
		}
		live, lost := 0, 0
		for _, sb := range sbs {
			if sb.Node != res.Killed {
				continue
			}
			switch sb.State {
			case "running", "creating":
				live++
			case "lost":
				lost++
			}
		}
		if live == 0 {
			res.LostAfter, res.LostSandboxes = time.Since(kill), lost
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("bench: %d sandboxes of the killed node %s still running %s after the kill", live, res.Killed, time.Since(kill))
		}
		waitOrStop(ctx, 50*time.Millisecond)
	}
	fmt.Fprintf(log, "the killed node's %d sandboxes were lost %s after the kill\n", res.LostSandboxes, res.LostAfter.Round(time.Millisecond))
	// Adoption follows the marking in the same pass.
	waitOrStop(ctx, 2*opts.NodeHeartbeat)
	stopWriters()
	wg.Wait()

	// The load cycles, on the survivors only.
	survivors := nodes[:len(nodes)-1]
	rec := &loadRecorder{lat: map[string][]time.Duration{}, errs: map[string]int{}}
	end := time.Now().Add(opts.After)
	var lw sync.WaitGroup
	for i := range opts.Clients {
		c, err := newClient(survivors[i%len(survivors)])
		if err != nil {
			return res, err
		}
		lc := &loadClient{d: d, c: c, n: i, rec: rec}
		lw.Go(func() {
			for k := 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
				lc.cycle(ctx, k)
			}
		})
	}
	lw.Wait()
	res.AfterCycles, res.ErrorsAfter = rec.cycles, rec.nerrs

	// Every acknowledged write, read back through the first survivor.
	owners := map[string]string{}
	wss, err := d.c.ListWorkspaces(ctx, "", "failover")
	if err != nil {
		return res, err
	}
	for _, w := range wss {
		owners[w.ID] = w.Node
	}
	evs, err := d.c.Events(ctx, client.EventFilter{Type: "workspace.adopted"})
	if err != nil {
		return res, err
	}
	for _, e := range evs {
		if strings.Contains(e.Detail, res.Killed) {
			res.Adopted++
		}
	}
	res.KilledWorkspaces = res.Adopted
	for _, w := range wss {
		if w.Node == res.Killed {
			res.KilledWorkspaces++
		}
	}
	adoptedWS := map[string]bool{}
	for _, e := range evs {
		if strings.Contains(e.Detail, res.Killed) {
			adoptedWS[e.WorkspaceID] = true
		}
	}
	res.Acked = len(acks)
	verify := func(a ack) {
		var b bytes.Buffer
		_, err := d.c.ReadFile(ctx, a.ws, a.path, &b)
		switch {
		case err != nil:
			res.Missing = append(res.Missing, fmt.Sprintf("%s:%s: %v", a.ws, a.path, err))
		case b.String() != a.content:
			res.Missing = append(res.Missing, fmt.Sprintf("%s:%s: read %q, want %q", a.ws, a.path, b.String(), a.content))
		default:
			res.Verified++
		}
	}
	// The writes in workspaces the dead node still owns (not on shared
	// storage) are unavailable, the error naming it, until it is back.
	var later []ack
	for _, a := range acks {
		if adoptedWS[a.ws] || owners[a.ws] == res.Killed {
			res.AckedOnKilled++
		}
		if owners[a.ws] != res.Killed {
			verify(a)
			continue
		}
		later = append(later, a)
		var b bytes.Buffer
		_, err := d.c.ReadFile(ctx, a.ws, a.path, &b)
		if err != nil && errors.Is(err, client.ErrUnavailable) && strings.Contains(err.Error(), res.Killed) && strings.Contains(err.Error(), "lost") {
			res.Unavailable++
		} else if len(res.Errors) < 20 {
			res.Errors = append(res.Errors, fmt.Sprintf("%s:%s on the lost node: %v, want unavailable naming it", a.ws, a.path, err))
		}
	}
	res.ErrorsBefore, res.ErrorsBetween = len(errsBefore), len(errsBetween)
	res.Errors = append(res.Errors, firstN(errsBefore, 10)...)
	res.Errors = append(res.Errors, firstN(rec.firstErrs, 10)...)
	if len(errsBetween) > 0 {
		res.Errors = append(res.Errors, "between (tolerated): "+errsBetween[0])
	}
	if len(res.Missing) > 20 {
		res.Missing = res.Missing[:20]
	}

	// The killed node comes back on its data dir, as the same node: what
	// it still owns is served again, and its reconciler removes what the
	// crash left of its lost sandboxes.
	if err := victim.start(ctx, filepath.Join(victim.root, "config.yaml")); err != nil {
		return res, fmt.Errorf("bench: restarting the killed node: %w", err)
	}
	res.Rejoined = true
	for _, a := range later {
		verify(a)
	}
	// Everything goes, through a survivor: the adopted workspaces with
	// the rest.
	if err := d.removeAll(ctx, teardownParallel); err != nil {
		return res, err
	}
	if res.Leftovers, err = d.leftovers(ctx); err != nil {
		return res, err
	}
	for _, n := range nodes[1:] {
		left, err := n.localLeftovers()
		if err != nil {
			return res, err
		}
		res.Leftovers = append(res.Leftovers, left...)
	}
	mustBeAll := res.Verified == res.Acked && res.Acked > 0
	res.Checks = []LoadCheck{
		{Name: "acknowledged writes kept", Value: fmt.Sprintf("%d of %d", res.Verified, res.Acked), Target: "all", Met: mustBeAll},
		{Name: "writes on the killed node", Value: fmt.Sprint(res.AckedOnKilled), Target: "> 0", Met: res.AckedOnKilled > 0},
		{Name: "errors before the kill", Value: fmt.Sprint(res.ErrorsBefore), Target: "0", Met: res.ErrorsBefore == 0},
		{Name: "errors after its handling", Value: fmt.Sprint(res.ErrorsAfter), Target: "0", Met: res.ErrorsAfter == 0 && res.AfterCycles > 0},
		{Name: "killed node's sandboxes lost", Value: fmt.Sprint(res.LostSandboxes), Target: "> 0, none running", Met: res.LostSandboxes > 0},
		{Name: "killed node's workspaces adopted", Value: fmt.Sprintf("%d of %d", res.Adopted, res.KilledWorkspaces), Target: "all (shared storage)", Met: !opts.NodeShared || res.Adopted == res.KilledWorkspaces && res.Adopted > 0},
		{Name: "unadopted writes unavailable", Value: fmt.Sprintf("%d of %d", res.Unavailable, len(later)), Target: "all, naming the node", Met: res.Unavailable == len(later) && (opts.NodeShared || len(later) > 0)},
		{Name: "leftovers", Value: fmt.Sprint(len(res.Leftovers)), Target: "0", Met: len(res.Leftovers) == 0},
	}
	return res, nil
}

// newClient is a client of node d.
func newClient(d *daemonProc) (*client.Client, error) {
	return client.New("unix://"+d.data+"/agentbox.sock", "")
}

// waitOrStop waits for d or until ctx ends.
func waitOrStop(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func firstN(xs []string, n int) []string {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}
