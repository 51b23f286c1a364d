package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Usage sums usage per task label.
func (m *Manager) Usage(ctx context.Context, f store.UsageFilter) ([]store.TaskUsage, error) {
	if err := validTask(f.Task); err != nil {
		return nil, err
	}
	return m.st.UsageByTask(ctx, f)
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
