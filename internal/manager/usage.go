package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// KeyExec is the log key of exec IDs.
const KeyExec = logx.KeyExec

// Metering (DESIGN.md §2). What is counted, and where it comes from:
//
//   - Per exec (the exec row): the CPU time (user and system) of the
//     command's whole process tree and the peak resident set of its
//     largest process, both from wait4 in the guest's reaper (see
//     guest.ExecResult); its wall time as the guest measured it; its
//     output bytes (stdout and stderr, dropped bytes included). A command
//     lost with its sandbox has no usage (zero).
//   - Per sandbox (the sandbox row): the environment's cgroup CPU time and
//     memory high-water mark, read when the sandbox stops, is evicted or
//     is found lost while its environment still exists (zero when the
//     backend cannot read them, or the environment was already gone); and
//     the bytes its egress connections moved each way. SandboxUsage adds
//     the sums of its execs.
//   - Per task label: UsageByTask sums the execs and the egress of every
//     workspace that had the label, removed ones included (the label is
//     copied onto the rows).
//
// Egress is counted per sandbox, not per exec: commands of one sandbox may
// run at the same time and share its proxy.

// Usage sums usage per task label, or per task and workspace with
// f.ByWorkspace, with what the agent loop's model calls spent (tokens and
// cost) from the solve runs: an attempt's spending counts for its fork's
// workspace and that workspace's task. With f.Since, a run counts if it
// was last updated in the window (its attempts' spending is not dated
// finer than that).
func (m *Manager) Usage(ctx context.Context, f store.UsageFilter) ([]store.TaskUsage, error) {
	if err := validTask(f.Task); err != nil {
		return nil, err
	}
	us, err := m.st.UsageByTask(ctx, f)
	if err != nil {
		return nil, err
	}
	runs, err := m.st.ListSolveRuns(ctx, "")
	if err != nil {
		return nil, err
	}
	type key struct{ task, ws string }
	idx := map[key]int{}
	for i, u := range us {
		idx[key{u.Task, u.WorkspaceID}] = i
	}
	for _, run := range runs {
		if !f.Since.IsZero() && run.UpdatedAt.Before(f.Since) {
			continue
		}
		for _, a := range run.Attempts {
			if a.Usage.InputTokens == 0 && a.Usage.OutputTokens == 0 && a.Usage.CostUSD == 0 {
				continue
			}
			task := m.workspaceTask(ctx, a.Workspace, run.Request.Task)
			if f.Task != "" && task != f.Task {
				continue
			}
			k := key{task, ""}
			if f.ByWorkspace {
				k.ws = a.Workspace
			}
			i, ok := idx[k]
			if !ok {
				i = len(us)
				idx[k] = i
				us = append(us, store.TaskUsage{Task: k.task, WorkspaceID: k.ws})
			}
			u := &us[i]
			u.InputTokens += int64(a.Usage.InputTokens)
			u.OutputTokens += int64(a.Usage.OutputTokens)
			u.CostUSD += a.Usage.CostUSD
			if f.ByWorkspace {
				u.SolveRun = run.ID
			}
		}
	}
	slices.SortFunc(us, func(a, b store.TaskUsage) int {
		return cmp.Or(strings.Compare(a.Task, b.Task), strings.Compare(a.WorkspaceID, b.WorkspaceID))
	})
	return us, nil
}

// workspaceTask is the task label of workspace id; for one removed
// without a trace, the label the agent loop gives its workspaces: the
// first line of the problem statement, at most 200 bytes.
func (m *Manager) workspaceTask(ctx context.Context, id, statement string) string {
	if w, err := m.st.GetWorkspace(ctx, id); err == nil {
		return w.Task
	}
	line, _, _ := strings.Cut(strings.TrimSpace(statement), "\n")
	line = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, line)
	if len(line) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut]
	}
	return line
}

// SandboxUsage is what sandbox id used so far.
func (m *Manager) SandboxUsage(ctx context.Context, id string) (store.SandboxUsage, error) {
	if id == "" {
		return store.SandboxUsage{}, errdefs.Invalid("sandbox ID is empty")
	}
	return m.st.SandboxUsage(ctx, id)
}

// recordCgroupUsage reads and records what sb's environment's cgroup
// counted, before the environment goes. Best effort: a backend that
// cannot read it, or an environment already gone, leaves the figures
// zero.
func (m *Manager) recordCgroupUsage(ctx context.Context, sb store.Sandbox) {
	if sb.BackendRef == "" {
		return
	}
	be, err := m.backend(sb.Backend)
	if err != nil {
		return
	}
	r, ok := be.(sandbox.UsageReader)
	if !ok {
		return
	}
	u, err := r.ReadUsage(ctx, sb.BackendRef)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			m.log.DebugContext(ctx, "reading a sandbox's cgroup usage", KeySandbox, sb.ID, "err", err)
		}
		return
	}
	if err := m.st.SetSandboxCgroupUsage(ctx, sb.ID, int64(u.CPU), u.MemoryPeakBytes); err != nil {
		m.log.WarnContext(ctx, "recording a sandbox's cgroup usage", KeySandbox, sb.ID, "err", err)
	}
}

// execEvent is the exec.finished event of rec, with its usage. err is
// what running it returned.
func execEvent(ctx context.Context, rec store.Exec, err error) store.Event {
	detail := map[string]any{"exec_id": rec.ID, "state": rec.State, "exit_code": rec.ExitCode,
		"cpu_ns": rec.CPUNanos, "peak_mem_bytes": rec.PeakMemBytes, "wall_ms": time.Duration(rec.WallNanos).Milliseconds(),
		"output_bytes": rec.StdoutBytes + rec.StderrBytes}
	if rec.Signal != 0 {
		detail["signal"] = rec.Signal
	}
	if rec.OOM {
		detail["oom"] = true
	}
	if err != nil {
		detail["error"] = err.Error()
	}
	if argv := eventArgv(rec.Argv); len(argv) > 0 {
		detail["argv"] = argv
	}
	return eventRecord(ctx, store.Event{Type: "exec.finished", WorkspaceID: rec.WorkspaceID, SandboxID: rec.SandboxID}, detail)
}

// eventArgv is the command of an exec record (JSON) as an event shows it:
// at most 32 arguments of at most 256 bytes each, a cut one ending in "…",
// so that a huge command line cannot swell the event log.
func eventArgv(raw string) []string {
	var argv []string
	if json.Unmarshal([]byte(raw), &argv) != nil {
		return nil
	}
	return shortArgv(argv)
}

// shortArgv cuts argv (in place) as eventArgv does.
func shortArgv(argv []string) []string {
	if len(argv) > 32 {
		argv = append(argv[:31:31], fmt.Sprintf("… (%d more)", len(argv)-31))
	}
	for i, a := range argv {
		if len(a) > 256 {
			cut := 256
			for cut > 0 && !utf8.RuneStart(a[cut]) {
				cut--
			}
			argv[i] = a[:cut] + "…"
		}
	}
	return argv
}
