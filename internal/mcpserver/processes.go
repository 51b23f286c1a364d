package mcpserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Background processes and ports: servers, watchers and long runs that
// outlive the call that starts them.

// Bounds of read_logs.
const (
	// DefaultLogBytes is how much read_logs returns without max_bytes;
	// MaxLogBytes the most (a stream's whole ring).
	DefaultLogBytes = 32 << 10
	MaxLogBytes     = 1 << 20
	// MaxLogWait bounds read_logs' wait for the process to end.
	MaxLogWait = 10 * time.Minute
)

type startProcessIn struct {
	Workspace string            `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Command   string            `json:"command,omitempty" jsonschema:"a shell command line, run as sh -c COMMAND (give this or argv)"`
	Argv      []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Workdir   string            `json:"workdir,omitempty" jsonschema:"the working directory (default /workspace)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables to add, NAME -> value"`
	Stdin     string            `json:"stdin,omitempty" jsonschema:"text fed to the command's standard input first"`
	Timeout   string            `json:"timeout,omitempty" jsonschema:"kill the process after this long, a duration like 30m (default: never)"`
}

func (c *call) startProcess(in startProcessIn) (apitypes.Process, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.Process{}, "", err
	}
	p, err := c.s.b.StartProcess(c.ctx, id, apitypes.ExecRequest{Argv: in.Argv, Sh: in.Command, Env: sortedEnv(in.Env), Workdir: in.Workdir, Timeout: in.Timeout, Stdin: in.Stdin})
	if err != nil {
		return p, "", err
	}
	text := fmt.Sprintf("Started process %s (pid %d in sandbox %s): %s\nRead its output with read_logs (process %s); stop it with signal_process.", p.ID, p.Pid, p.SandboxID, strings.Join(p.Argv, " "), p.ID)
	return p, text, nil
}

type readLogsIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Process   string `json:"process" jsonschema:"the process ID (ex_...) from start_process or list_processes"`
	Stream    string `json:"stream,omitempty" jsonschema:"the output stream to read (default stdout)"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"the byte offset to read from: 0 the start (default), the previous read's next_offset to go on, negative to read the last bytes"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes (default 32768)"`
	Wait      string `json:"wait,omitempty" jsonschema:"first wait up to this long for the process to end, a duration like 30s (at most 10m)"`
}

func (c *call) readLogs(in readLogsIn) (apitypes.ProcessLogs, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.ProcessLogs{}, "", err
	}
	if in.Process == "" {
		return apitypes.ProcessLogs{}, "", errdefs.Invalid("read_logs: process is empty")
	}
	if in.Wait != "" {
		d, err := time.ParseDuration(in.Wait)
		if err != nil || d <= 0 || d > MaxLogWait {
			return apitypes.ProcessLogs{}, "", errdefs.Invalid("read_logs: wait %q is not a duration between 0 and %s", in.Wait, MaxLogWait)
		}
		if _, err := c.s.b.WaitProcess(c.ctx, id, in.Process, d); err != nil {
			return apitypes.ProcessLogs{}, "", err
		}
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = DefaultLogBytes
	}
	l, err := c.s.b.ProcessLogs(c.ctx, id, in.Process, apitypes.LogQuery{Stream: in.Stream, Offset: in.Offset, Limit: limit})
	if err != nil {
		return l, "", err
	}
	var b strings.Builder
	if l.Dropped > 0 {
		fmt.Fprintf(&b, "[%d bytes before offset %d are no longer kept]\n", l.Dropped, l.Offset)
	}
	b.WriteString(l.Data)
	if l.Data != "" && !strings.HasSuffix(l.Data, "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "[%s bytes %d to %d", l.Stream, l.Offset, l.NextOffset)
	if p := l.Process; p != nil {
		written := p.StdoutBytes
		if l.Stream == "stderr" {
			written = p.StderrBytes
		}
		if more := written - l.NextOffset; more > 0 {
			fmt.Fprintf(&b, " of %d: read on from offset %d", written, l.NextOffset)
		}
		fmt.Fprintf(&b, "; process %s]\n", processState(*p))
		if other, n := "stderr", p.StderrBytes; l.Stream != "stderr" && n > 0 {
			fmt.Fprintf(&b, "(its %s has %d bytes: read it with stream %s)\n", other, n, other)
		}
	} else {
		b.WriteString("]\n")
	}
	return l, b.String(), nil
}

// processState says how a process stands, for a model.
func processState(p apitypes.Process) string {
	s := p.State
	switch p.State {
	case "exited":
		s = fmt.Sprintf("exited with code %d", p.ExitCode)
	case "killed":
		s = fmt.Sprintf("killed by signal %d", p.Signal)
	}
	if p.OOM {
		s += " (out of memory)"
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

type processesIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
}

func (c *call) listProcesses(in processesIn) (apitypes.ProcessList, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.ProcessList{}, "", err
	}
	ps, err := c.s.b.ListProcesses(c.ctx, id)
	if err != nil {
		return apitypes.ProcessList{}, "", err
	}
	out := apitypes.ProcessList{Processes: ps}
	if out.Processes == nil {
		out.Processes = []apitypes.Process{}
	}
	var b strings.Builder
	for _, p := range out.Processes {
		fmt.Fprintf(&b, "%s  %s  %s  (stdout %d bytes, stderr %d bytes)\n", p.ID, processState(p), strings.Join(p.Argv, " "), p.StdoutBytes, p.StderrBytes)
	}
	if len(out.Processes) == 0 {
		b.WriteString("No background processes.\n")
	}
	return out, b.String(), nil
}

type signalIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Process   string `json:"process" jsonschema:"the process ID (ex_...)"`
	Signal    string `json:"signal,omitempty" jsonschema:"the signal: TERM (default), INT, HUP, KILL, ... or a number"`
}

func (c *call) signalProcess(in signalIn) (apitypes.Process, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.Process{}, "", err
	}
	if in.Process == "" {
		return apitypes.Process{}, "", errdefs.Invalid("signal_process: process is empty")
	}
	p, err := c.s.b.SignalProcess(c.ctx, id, in.Process, in.Signal)
	if err != nil {
		return p, "", err
	}
	sig := in.Signal
	if sig == "" {
		sig = "TERM"
	}
	return p, fmt.Sprintf("Sent %s to process %s; it is %s.", sig, p.ID, processState(p)), nil
}

type exposePortIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Port      int    `json:"port" jsonschema:"the TCP port a server listens on inside the sandbox"`
}

func (c *call) exposePort(in exposePortIn) (apitypes.Port, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.Port{}, "", err
	}
	p, err := c.s.b.PublishPort(c.ctx, id, in.Port)
	if err != nil {
		return p, "", err
	}
	return p, fmt.Sprintf("Port %d of sandbox %s is at %s on the daemon's host, and at %s through the agentbox API.", p.Port, p.SandboxID, p.URL, p.ProxyPath), nil
}
