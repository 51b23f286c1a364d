package mcpserver

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// tools is the tool table: one entry per tool (clients list them by
// name). A new tool is one entry here, a handler, and, if it needs one, a
// Backend method.
var tools = []tool{
	newTool(spec{name: "create_workspace", title: "Create a workspace", schema: createSchema, description: `Create a durable workspace to work in: a git checkout of a repository (repo: a URL or the ID of a cached repo, optionally at ref), an empty scratch repository (empty: true), or one whose first commit is the files you give (files: {"path": "content"}). ` +
		`Commands run with the workspace at /workspace in a sandbox (without network unless its policy allows hosts). The workspace gets its own branch; diff and commit compare with its base commit. ` +
		`If this session has no default workspace yet, the new one becomes it, so later calls may omit "workspace". Returns the workspace's id, branch and base commit.`},
		(*call).createWorkspace),
	newTool(spec{name: "list_workspaces", title: "List workspaces", readOnly: true, idempotent: true, description: `List the existing workspaces, optionally only those of one repo (URL or ID) or task label, and say which one this session uses by default. ` +
		`Use it to pick up earlier work or to find the forks of an attempt.`},
		(*call).listWorkspaces),
	newTool(spec{name: "show_workspace", title: "Show a workspace", readOnly: true, idempotent: true, description: `Show one workspace (default: the session's) and what changed in it since its base commit: the changed paths with their git status letters (A added, M modified, D deleted, ?? untracked), whether it is dirty, and its disk use against its quota.`},
		(*call).showWorkspace),
	newTool(spec{name: "use_workspace", title: "Use a workspace by default", idempotent: true, description: `Bind a workspace to this session: every later call that omits "workspace" then works in it. Use it after list_workspaces or fork_workspace to switch between workspaces.`},
		(*call).useWorkspace),
	newTool(spec{name: "fork_workspace", title: "Fork a workspace", schema: bounds("count", 1, MaxForks), description: `Copy a workspace (default: the session's), its uncommitted changes included, into count new workspaces (1 to 16, made at once), each on its own branch, so that several attempts can run side by side without touching each other. ` +
		`The copies are cheap (only the changes are copied). With branch and count over 1, the branches are BRANCH-1, BRANCH-2, ... All or none are made. The session's default workspace does not change: pass each fork's id, or use_workspace.`},
		(*call).forkWorkspace),
	newTool(spec{name: "remove_workspace", title: "Remove a workspace", destructive: true, idempotent: true, description: `Delete a workspace and its files for good, with its sandbox (for example a fork whose attempt failed). Its commits on its branch go with it. The workspace must be named explicitly.`},
		(*call).removeWorkspace),
	newTool(spec{name: "run_command", title: "Run a command", schema: bounds("max_output_bytes", 1024, MaxRunOutput), description: `Run a command in the workspace's sandbox (default: the session's workspace), in /workspace unless workdir says otherwise, and wait for it to end. ` +
		`Give a shell command line in command (run as sh -c, so pipes, && and redirections work) or an argv array. The sandbox runs as a normal user, with no network unless its policy allows hosts; env adds variables; stdin is fed to the command. ` +
		`The command is killed after timeout (a duration like "90s" or "10m", default 10m). Returns the exit code, the signal that killed it if any, whether it timed out or ran out of memory, and its stdout and stderr: each keeps its first and last max_output_bytes/2 bytes (default 32 KiB in all) and says how many bytes in the middle were left out. ` +
		`While it runs, its output is sent as progress notifications when the client asks for progress; cancelling the call kills the command.`},
		(*call).runCommand),
	newTool(spec{name: "read_file", title: "Read a file", readOnly: true, idempotent: true, description: `Read a text file of the workspace, by lines: start_line to end_line (1-based, inclusive), by default its first 2000 lines. ` +
		`Each line comes with its line number ("   12\tcode"), which edit_file does not want: pass edit_file the text alone. The answer says when more lines follow; read on with start_line. At most 256 KiB of text come back per call. Paths are relative to the workspace root (/workspace in commands).`},
		(*call).readFile),
	newTool(spec{name: "write_file", title: "Write a file", idempotent: true, description: `Create or replace a file of the workspace with content (UTF-8 text, at most 8 MiB), making missing parent directories. ` +
		`The write is atomic and durable: the file holds all of the old or all of the new content. An existing file keeps its mode; a new one is 0644. Prefer edit_file to change part of an existing file.`},
		(*call).writeFile),
	newTool(spec{name: "edit_file", title: "Edit a file", description: `Replace exact text in a file of the workspace: old must occur exactly once (whitespace, indentation and line ends included) unless all is true, and is replaced by new (empty deletes it). ` +
		`If old is not found, or found more than once, nothing changes and the error quotes the closest lines, or names the lines where it occurs: include more surrounding lines in old to make it unique. Give the file's text without read_file's line numbers.`},
		(*call).editFile),
	newTool(spec{name: "list_files", title: "List a directory", readOnly: true, idempotent: true, schema: bounds("depth", 1, 64), description: `List a directory of the workspace (default its root) and, down to depth levels (default 1, at most 64), what is inside its subdirectories: type, size and path of each entry, directories first listed then entered, .git included. Stops at 10,000 entries and says so.`},
		(*call).listFiles),
	newTool(spec{name: "find_files", title: "Find files by name", readOnly: true, idempotent: true, schema: both(enum("type", "file", "dir", "symlink", "other"), bounds("max_results", 1, 10000)), description: `Find paths of the workspace by glob: "*", "?" and "[...]" match within one path component and "**" any number of them. ` +
		`A pattern without "/" matches names at any depth ("*_test.go"); one with "/" matches whole paths relative to path ("src/**/*.py"). Skips .git, never follows symlinks, returns at most max_results (default 1000) paths.`},
		(*call).findFiles),
	newTool(spec{name: "grep", title: "Search file contents", readOnly: true, idempotent: true, schema: bounds("max_matches", 1, 10000), description: `Search the text files of the workspace (or of path, a directory or one file) for lines matching pattern, a regular expression in RE2 syntax (no backreferences or lookarounds; escape regex characters to search literal text). ` +
		`Returns path:line: text for each match (lines cut at 512 bytes), at most max_matches (default 200). Skips .git, binary files, files over 4 MiB and symlinks.`},
		(*call).grep),
	newTool(spec{name: "diff", title: "Show the diff", readOnly: true, idempotent: true, description: `Show what changed in the workspace since its base commit as a unified diff (git diff of the working tree, new files included), optionally only for some paths. ` +
		`At most 256 KiB of it come back; the answer says when it was cut: then ask for fewer paths.`},
		(*call).diff),
	newTool(spec{name: "commit", title: "Commit the changes", description: `Record every change of the workspace as one commit on its branch, with message as the commit message, and return the commit's id and the branch. ` +
		`Run check_diff first when the result will leave the workspace. A workspace without changes cannot commit.`},
		(*call).commit),
	newTool(spec{name: "check_diff", title: "Check the diff", readOnly: true, idempotent: true, description: `Check the workspace's changes before they leave it: the changed paths that its sandbox's policy does not allow to change (writable_paths), and added lines that look like secrets (API keys, tokens, private keys; shown redacted). ` +
		`ok is true when nothing was found. It changes nothing.`},
		(*call).checkDiff),

	// Background processes and ports (processes.go).
	newTool(spec{name: "start_process", title: "Start a background process", description: `Start a command in the workspace's sandbox (default: the session's workspace) that keeps running after this call returns: a dev server, a watcher, a long test run. ` +
		`Give a shell command line in command (sh -c) or an argv array, with workdir, env and stdin as for run_command, and optionally a timeout after which it is killed (default: none, it runs until it exits, is signalled or its sandbox stops). ` +
		`Returns the process's id (ex_...), which read_logs, signal_process and list_processes take. The daemon keeps the last 1 MiB of each of its stdout and stderr. A server must listen on the sandbox's loopback or all addresses; expose_port makes it reachable from the host.`},
		(*call).startProcess),
	newTool(spec{name: "read_logs", title: "Read a process's output", readOnly: true, idempotent: true, schema: both(enum("stream", "stdout", "stderr"), bounds("max_bytes", 1, MaxLogBytes)), description: `Read the output of a background process: one stream (stdout by default, or stderr) from a byte offset (0: the start; the next_offset of the previous read to go on; negative: the last bytes, e.g. -4000), at most max_bytes (default 32 KiB). ` +
		`With wait (e.g. "30s", at most 10m), first wait that long for the process to end. Returns the text, the offset to read on from, how many bytes had already fallen out of the 1 MiB the daemon keeps, and the process's state (running, exited with its exit code, killed, timed_out or lost, with the reason).`},
		(*call).readLogs),
	newTool(spec{name: "list_processes", title: "List background processes", readOnly: true, idempotent: true, description: `List the background processes of the workspace (default: the session's): the running ones and the last ones that ended, newest first, each with its id, command, state, exit code and how much output it wrote.`},
		(*call).listProcesses),
	newTool(spec{name: "signal_process", title: "Signal a background process", destructive: true, description: `Send a signal to a background process and every process it started: TERM by default (ask it to stop), or INT, HUP, KILL (end it for good), or a number. ` +
		`Returns the process as it is right after; a process that handles the signal may take a moment to end (read_logs with wait tells when).`},
		(*call).signalProcess),
	newTool(spec{name: "expose_port", title: "Expose a port", idempotent: true, schema: bounds("port", 1, 65535), description: `Make a TCP port of the workspace's sandbox reachable from the machine running the agentbox daemon, without giving the sandbox any network: the daemon listens on its host's loopback and relays each connection into the sandbox. ` +
		`Returns the URL (http://127.0.0.1:PORT/ on the daemon's host, for a browser or test client there) and the path of the same port through the agentbox API. The sandbox must be running (start the server with start_process first). Commands inside the sandbox reach the server at 127.0.0.1 without this.`},
		(*call).exposePort),
}

// Limits of the tools, below the transport's (MaxMessageBytes).
const (
	// MaxForks is how many copies one fork_workspace makes at most.
	MaxForks = apitypes.MaxForks
	// MaxWriteContent is the most a write_file carries.
	MaxWriteContent = 8 << 20
	// MaxInlineFiles and MaxInlineBytes bound create_workspace's files.
	MaxInlineFiles = 10_000
	MaxInlineBytes = 8 << 20
	// DefaultReadLines is how many lines a read_file without a range reads.
	DefaultReadLines = 2000
	// MaxReadText is the most text a read_file returns.
	MaxReadText = 256 << 10
	// MaxDiffText is the most of a diff the diff tool returns.
	MaxDiffText = 256 << 10
	// DefaultRunOutput and MaxRunOutput bound what run_command keeps of
	// each of stdout and stderr.
	DefaultRunOutput = 32 << 10
	MaxRunOutput     = 1 << 20
	// DefaultRunTimeout ends a command that names no timeout.
	DefaultRunTimeout = 10 * time.Minute
	// defaultGrepMatches is grep's max_matches when none is given: fewer
	// than the API's default, for a model's context.
	defaultGrepMatches = 200
)

// --- workspaces

// Workspace is a workspace as the tools show it: the API's record without
// the daemon's host paths.
type Workspace struct {
	ID         string    `json:"id"`
	RepoID     string    `json:"repo_id"`
	ParentID   string    `json:"parent_id,omitempty" jsonschema:"the workspace this one was forked from"`
	Ref        string    `json:"ref"`
	BaseCommit string    `json:"base_commit" jsonschema:"the commit diff and commit compare with"`
	Branch     string    `json:"branch"`
	Task       string    `json:"task,omitempty"`
	State      string    `json:"state"`
	Dirty      bool      `json:"dirty" jsonschema:"whether it has changes since its base commit, as last seen"`
	DiskQuota  int64     `json:"disk_quota,omitempty" jsonschema:"bytes the workspace may add to its base"`
	CreatedAt  time.Time `json:"created_at"`
}

func view(w client.Workspace) Workspace {
	return Workspace{ID: w.ID, RepoID: w.RepoID, ParentID: w.ParentID, Ref: w.Ref, BaseCommit: w.BaseCommit, Branch: w.Branch,
		Task: w.Task, State: w.State, Dirty: w.Dirty, DiskQuota: w.DiskQuota, CreatedAt: w.CreatedAt}
}

func (w Workspace) line() string {
	s := fmt.Sprintf("%s  branch %s  base %.12s", w.ID, w.Branch, w.BaseCommit)
	if w.ParentID != "" {
		s += "  forked from " + w.ParentID
	}
	if w.Task != "" {
		s += "  task " + w.Task
	}
	if w.Dirty {
		s += "  (changed)"
	}
	if w.State != "ready" {
		s += "  [" + w.State + "]"
	}
	return s
}

type createWorkspaceIn struct {
	Repo    string            `json:"repo,omitempty" jsonschema:"a git URL (https://..., or a path on the daemon's machine) or the ID of a repo agentbox has cached: the workspace is a checkout of it"`
	Ref     string            `json:"ref,omitempty" jsonschema:"with repo: the branch, tag or commit to check out (default: the repo's default branch)"`
	Empty   bool              `json:"empty,omitempty" jsonschema:"make a scratch workspace: an empty repository with one empty commit"`
	Files   map[string]string `json:"files,omitempty" jsonschema:"make the workspace from these files, relative path -> UTF-8 content (at most 10000 files, 8 MiB in all): they become its base commit"`
	FromDir string            `json:"from_dir,omitempty" jsonschema:"make the workspace from this directory on the machine running agentbox mcp (relative to its working directory): its files, without .git, become the base commit"`
	Branch  string            `json:"branch,omitempty" jsonschema:"the workspace's branch (default agentbox/ID)"`
	Task    string            `json:"task,omitempty" jsonschema:"a free-form label to find the workspace by later"`
}

// createSchema offers from_dir only where the server runs on the
// caller's machine.
func createSchema(s *Server, in *jsonschema.Schema) {
	if s.dirs == nil {
		delete(in.Properties, "from_dir")
		in.PropertyOrder = deleteString(in.PropertyOrder, "from_dir")
	}
}

func deleteString(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

type workspaceOut struct {
	Workspace
	SessionDefault bool `json:"session_default" jsonschema:"whether calls that omit workspace now use this one"`
}

func (c *call) createWorkspace(in createWorkspaceIn) (workspaceOut, string, error) {
	req := client.CreateWorkspace{Repo: in.Repo, Ref: in.Ref, Empty: in.Empty, Branch: in.Branch, Task: in.Task}
	sources := 0
	for _, set := range []bool{in.Repo != "", in.Empty, in.Files != nil, in.FromDir != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return workspaceOut{}, "", errdefs.Invalid("create_workspace: give exactly one of repo, empty, files and from_dir")
	}
	if in.Ref != "" && in.Repo == "" {
		return workspaceOut{}, "", errdefs.Invalid("create_workspace: ref goes with repo")
	}
	var w client.Workspace
	var err error
	switch {
	case in.Files != nil:
		var tarball []byte
		if tarball, err = tarFiles(in.Files); err != nil {
			return workspaceOut{}, "", err
		}
		w, err = c.s.b.UploadWorkspace(c.ctx, req, bytes.NewReader(tarball))
	case in.FromDir != "":
		if c.s.dirs == nil {
			return workspaceOut{}, "", errdefs.Invalid("create_workspace: from_dir is not offered here (a remote server cannot read your directories): give files instead")
		}
		w, err = c.s.dirs.UploadDir(c.ctx, req, in.FromDir)
	default:
		w, err = c.s.b.CreateWorkspace(c.ctx, req)
	}
	if err != nil {
		return workspaceOut{}, "", err
	}
	out := workspaceOut{Workspace: view(w)}
	if c.s.bound(c.session) == "" {
		c.s.bind(c.session, w.ID)
		out.SessionDefault = true
	}
	text := "Created workspace " + out.line()
	if out.SessionDefault {
		text += "\nIt is now this session's default workspace."
	}
	return out, text, nil
}

type listWorkspacesIn struct {
	Repo string `json:"repo,omitempty" jsonschema:"only the workspaces of this repo (URL or ID)"`
	Task string `json:"task,omitempty" jsonschema:"only the workspaces with this task label"`
}

type listWorkspacesOut struct {
	Workspaces []Workspace `json:"workspaces"`
	// Default is the session's default workspace.
	Default string `json:"default_workspace,omitempty" jsonschema:"the workspace calls use when they omit it"`
}

func (c *call) listWorkspaces(in listWorkspacesIn) (listWorkspacesOut, string, error) {
	wss, err := c.s.b.ListWorkspaces(c.ctx, in.Repo, in.Task)
	if err != nil {
		return listWorkspacesOut{}, "", err
	}
	out := listWorkspacesOut{Workspaces: []Workspace{}, Default: c.s.bound(c.session)}
	var b strings.Builder
	for _, w := range wss {
		v := view(w)
		out.Workspaces = append(out.Workspaces, v)
		mark := "  "
		if v.ID == out.Default {
			mark = "* "
		}
		b.WriteString(mark + v.line() + "\n")
	}
	switch {
	case len(wss) == 0:
		b.WriteString("No workspaces.\n")
	case out.Default != "":
		b.WriteString("(* is this session's default)\n")
	}
	return out, b.String(), nil
}

type workspaceIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
}

type showWorkspaceOut struct {
	Workspace Workspace     `json:"workspace"`
	Status    client.Status `json:"status"`
}

func (c *call) showWorkspace(in workspaceIn) (showWorkspaceOut, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return showWorkspaceOut{}, "", err
	}
	w, err := c.s.b.GetWorkspace(c.ctx, id)
	if err != nil {
		return showWorkspaceOut{}, "", err
	}
	st, err := c.s.b.Status(c.ctx, id)
	if err != nil {
		return showWorkspaceOut{}, "", err
	}
	if st.Changes == nil {
		st.Changes = []client.Change{}
	}
	out := showWorkspaceOut{Workspace: view(w), Status: st}
	var b strings.Builder
	fmt.Fprintf(&b, "Workspace %s\nhead %.12s", out.Workspace.line(), st.Head)
	if st.Disk != nil {
		fmt.Fprintf(&b, ", disk %s used of %s", size(st.Disk.Used), size(st.Disk.Quota))
	}
	b.WriteString("\n")
	if len(st.Changes) == 0 {
		b.WriteString("No changes since the base commit.\n")
	} else {
		fmt.Fprintf(&b, "%d changed paths:\n", len(st.Changes))
		for _, ch := range st.Changes {
			fmt.Fprintf(&b, "%2s %s\n", ch.Status, ch.Path)
		}
	}
	return out, b.String(), nil
}

type useWorkspaceIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace ID to use by default"`
}

func (c *call) useWorkspace(in useWorkspaceIn) (workspaceOut, string, error) {
	if in.Workspace == "" {
		return workspaceOut{}, "", errdefs.Invalid("use_workspace: workspace is empty")
	}
	w, err := c.s.b.GetWorkspace(c.ctx, in.Workspace)
	if err != nil {
		return workspaceOut{}, "", err
	}
	c.s.bind(c.session, w.ID)
	out := workspaceOut{Workspace: view(w), SessionDefault: true}
	return out, "This session now uses workspace " + out.line(), nil
}

type forkIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace to copy (default: the session's)"`
	Count     int    `json:"count,omitempty" jsonschema:"how many copies to make at once (default 1)"`
	Branch    string `json:"branch,omitempty" jsonschema:"the copy's branch, or with count over 1 the prefix of BRANCH-1, BRANCH-2, ... (default agentbox/ID)"`
	Task      string `json:"task,omitempty" jsonschema:"the copies' task label (default: the parent's)"`
}

type forkOut struct {
	Parent string      `json:"parent"`
	Forks  []Workspace `json:"forks"`
}

func (c *call) forkWorkspace(in forkIn) (forkOut, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return forkOut{}, "", err
	}
	n := in.Count
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxForks {
		return forkOut{}, "", errdefs.Invalid("fork_workspace: count %d is not between 1 and %d", in.Count, MaxForks)
	}
	l, err := c.s.b.ForkN(c.ctx, id, client.Forks{ForkRequest: client.Fork{Branch: in.Branch, Task: in.Task}, Count: n})
	if err != nil {
		return forkOut{}, "", err
	}
	forks := l.Forks
	out := forkOut{Parent: id}
	var b strings.Builder
	fmt.Fprintf(&b, "Forked %s into %d workspaces:\n", id, n)
	for _, w := range forks {
		v := view(w)
		out.Forks = append(out.Forks, v)
		b.WriteString("  " + v.line() + "\n")
	}
	return out, b.String(), nil
}

type removeIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace ID to delete"`
}

type removeOut struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

func (c *call) removeWorkspace(in removeIn) (removeOut, string, error) {
	if in.Workspace == "" {
		return removeOut{}, "", errdefs.Invalid("remove_workspace: workspace is empty (name it explicitly)")
	}
	if err := c.s.b.RemoveWorkspace(c.ctx, in.Workspace); err != nil {
		return removeOut{}, "", err
	}
	c.s.unbindEverywhere(in.Workspace)
	return removeOut{ID: in.Workspace, Removed: true}, "Removed workspace " + in.Workspace + ".", nil
}

// --- files

type readFileIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Path      string `json:"path" jsonschema:"the file's path relative to the workspace root"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"the first line to read, from 1 (default 1)"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"the last line to read, inclusive (default: start_line + 1999)"`
}

// readFileOut is the API's FileContent without its numbered lines (the
// text has them), with what the tool left out.
type readFileOut struct {
	apitypes.FileContent
	// More says lines follow the last one returned.
	More bool `json:"more" jsonschema:"whether the file has lines after last_line"`
}

func (c *call) readFile(in readFileIn) (readFileOut, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return readFileOut{}, "", err
	}
	first, last := in.StartLine, in.EndLine
	switch {
	case first < 0 || last < 0:
		return readFileOut{}, "", errdefs.Invalid("read_file: line numbers start at 1")
	case first == 0:
		first = 1
	}
	if last == 0 {
		last = first + DefaultReadLines - 1
	}
	if last < first {
		return readFileOut{}, "", errdefs.Invalid("read_file: end_line %d is before start_line %d", last, first)
	}
	fc, err := c.s.b.ReadFileContent(c.ctx, id, in.Path, client.Range{FirstLine: first, LastLine: last})
	if err != nil {
		return readFileOut{}, "", err
	}
	out := readFileOut{FileContent: fc}
	out.Lines = nil
	if fc.Encoding != "utf-8" {
		out.Content = ""
		return out, fmt.Sprintf("%s is a binary file (%s, not UTF-8 text): not shown. Inspect it with run_command (e.g. od -c or file).", fc.Path, size(fc.Size)), nil
	}
	var b strings.Builder
	shown := 0
	for _, l := range fc.Lines {
		line := fmt.Sprintf("%6d\t%s\n", l.N, l.Text)
		if b.Len()+len(line) > MaxReadText && shown > 0 {
			break
		}
		b.WriteString(line)
		shown++
	}
	switch {
	case len(fc.Lines) == 0 && fc.Size == 0:
		return out, fmt.Sprintf("%s is empty.", fc.Path), nil
	case len(fc.Lines) == 0:
		return out, fmt.Sprintf("%s has fewer than %d lines: nothing to show from line %d.", fc.Path, first, first), nil
	}
	lastShown := fc.Lines[shown-1].N
	if shown < len(fc.Lines) {
		// Cut to the text budget: the structured content too.
		out.LastLine = lastShown
		out.Content = ""
		out.EOF = false
		for _, l := range fc.Lines[:shown] {
			out.Content += l.Text + "\n"
		}
		out.Length = int64(len(out.Content))
	}
	out.More = !out.EOF
	if out.More {
		fmt.Fprintf(&b, "(more lines follow: read on with start_line %d)\n", lastShown+1)
	}
	return out, b.String(), nil
}

type writeFileIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Path      string `json:"path" jsonschema:"the file's path relative to the workspace root; missing directories are made"`
	Content   string `json:"content" jsonschema:"the file's whole new content"`
}

func (c *call) writeFile(in writeFileIn) (apitypes.FileInfo, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.FileInfo{}, "", err
	}
	if len(in.Content) > MaxWriteContent {
		return apitypes.FileInfo{}, "", fmt.Errorf("write_file %s: content of %d bytes is over the %d bytes a write carries (write it in a command instead): %w", in.Path, len(in.Content), MaxWriteContent, errdefs.ErrTooLarge)
	}
	fi, err := c.s.b.WriteFile(c.ctx, id, in.Path, strings.NewReader(in.Content))
	if err != nil {
		return fi, "", err
	}
	return fi, fmt.Sprintf("Wrote %s (%s, mode %s).", fi.Path, size(fi.Size), fi.Mode), nil
}

type editFileIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Path      string `json:"path" jsonschema:"the file's path relative to the workspace root"`
	Old       string `json:"old" jsonschema:"the exact text to replace, whitespace and line ends included; it must occur exactly once unless all is true"`
	New       string `json:"new" jsonschema:"the text that replaces it (empty deletes it)"`
	All       bool   `json:"all,omitempty" jsonschema:"replace every occurrence"`
}

func (c *call) editFile(in editFileIn) (apitypes.EditResult, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.EditResult{}, "", err
	}
	res, err := c.s.b.EditFile(c.ctx, id, apitypes.EditRequest{Path: in.Path, Old: in.Old, New: in.New, All: in.All})
	if err != nil {
		return res, "", err
	}
	lines := make([]string, len(res.Lines))
	for i, n := range res.Lines {
		lines[i] = fmt.Sprint(n)
	}
	word := "occurrence"
	if res.Replacements != 1 {
		word += "s"
	}
	return res, fmt.Sprintf("Replaced %d %s in %s (at line %s); it is now %s.", res.Replacements, word, res.Path, strings.Join(lines, ", "), size(res.Size)), nil
}

type listFilesIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Path      string `json:"path,omitempty" jsonschema:"the directory to list, relative to the workspace root (default the root)"`
	Depth     int    `json:"depth,omitempty" jsonschema:"how many levels to list (default 1: the directory's own entries)"`
}

func (c *call) listFiles(in listFilesIn) (apitypes.FileList, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.FileList{}, "", err
	}
	depth := in.Depth
	if depth == 0 {
		depth = 1
	}
	list, err := c.s.b.ListTree(c.ctx, id, in.Path, depth)
	if err != nil {
		return list, "", err
	}
	if list.Entries == nil {
		list.Entries = []apitypes.FileInfo{}
	}
	var b strings.Builder
	for _, e := range list.Entries {
		b.WriteString(entryLine(e) + "\n")
	}
	if len(list.Entries) == 0 {
		b.WriteString("(empty directory)\n")
	}
	if list.Truncated {
		fmt.Fprintf(&b, "(listing stopped at %d entries: list a subdirectory or less depth)\n", len(list.Entries))
	}
	return list, b.String(), nil
}

func entryLine(e apitypes.FileInfo) string {
	switch e.Type {
	case "dir":
		return e.Path + "/"
	case "symlink":
		return e.Path + " -> " + e.LinkTarget
	case "file":
		return fmt.Sprintf("%s  (%s)", e.Path, size(e.Size))
	}
	return e.Path + "  (" + e.Type + ")"
}

type findFilesIn struct {
	Workspace  string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Pattern    string `json:"pattern" jsonschema:"the glob, e.g. *.go, **/test_*.py or src/**/*.ts"`
	Path       string `json:"path,omitempty" jsonschema:"the directory to search, relative to the workspace root (default the root)"`
	Type       string `json:"type,omitempty" jsonschema:"only entries of this type"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"stop after this many matches (default 1000)"`
}

func (c *call) findFiles(in findFilesIn) (apitypes.FindResult, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.FindResult{}, "", err
	}
	res, err := c.s.b.FindFiles(c.ctx, id, apitypes.FindRequest{Pattern: in.Pattern, Path: in.Path, Type: in.Type, MaxResults: in.MaxResults})
	if err != nil {
		return res, "", err
	}
	if res.Matches == nil {
		res.Matches = []apitypes.FileInfo{}
	}
	var b strings.Builder
	for _, e := range res.Matches {
		b.WriteString(entryLine(e) + "\n")
	}
	if len(res.Matches) == 0 {
		b.WriteString("No paths match.\n")
	}
	if res.Truncated {
		b.WriteString("(the search stopped early: narrow the pattern or the path)\n")
	}
	return res, b.String(), nil
}

type grepIn struct {
	Workspace  string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Pattern    string `json:"pattern" jsonschema:"a regular expression (RE2 syntax)"`
	Path       string `json:"path,omitempty" jsonschema:"a directory or file to search, relative to the workspace root (default the root)"`
	IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema:"match without regard to case"`
	MaxMatches int    `json:"max_matches,omitempty" jsonschema:"stop after this many matching lines (default 200)"`
}

func (c *call) grep(in grepIn) (client.GrepResult, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return client.GrepResult{}, "", err
	}
	max := in.MaxMatches
	if max == 0 {
		max = defaultGrepMatches
	}
	res, err := c.s.b.Grep(c.ctx, id, client.GrepRequest{Pattern: in.Pattern, Path: in.Path, IgnoreCase: in.IgnoreCase, MaxMatches: max})
	if err != nil {
		return res, "", err
	}
	if res.Matches == nil {
		res.Matches = []client.GrepMatch{}
	}
	var b strings.Builder
	for _, m := range res.Matches {
		fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
	}
	if len(res.Matches) == 0 {
		fmt.Fprintf(&b, "No matches (%d files searched).\n", res.FilesScanned)
	}
	if res.Truncated {
		b.WriteString("(more matches may exist: the search stopped early; narrow the pattern or the path)\n")
	}
	return res, b.String(), nil
}

// --- results

type diffIn struct {
	Workspace string   `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Paths     []string `json:"paths,omitempty" jsonschema:"only these paths (files or directories) relative to the workspace root"`
}

type diffOut struct {
	ID         string `json:"id"`
	BaseCommit string `json:"base_commit"`
	Diff       string `json:"diff"`
	// Bytes is the whole diff's size; Truncated says Diff is its start.
	Bytes     int  `json:"bytes"`
	Truncated bool `json:"truncated"`
}

func (c *call) diff(in diffIn) (diffOut, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return diffOut{}, "", err
	}
	d, err := c.s.b.Diff(c.ctx, id, in.Paths...)
	if err != nil {
		return diffOut{}, "", err
	}
	out := diffOut{ID: d.ID, BaseCommit: d.BaseCommit, Diff: d.Diff, Bytes: len(d.Diff)}
	if len(out.Diff) > MaxDiffText {
		cut := strings.LastIndexByte(out.Diff[:MaxDiffText], '\n') + 1
		out.Diff, out.Truncated = out.Diff[:cut], true
	}
	text := out.Diff
	switch {
	case out.Bytes == 0:
		text = "No changes since the base commit.\n"
	case out.Truncated:
		text += fmt.Sprintf("[diff cut at %s of %s: ask for fewer paths]\n", size(int64(len(out.Diff))), size(int64(out.Bytes)))
	}
	return out, text, nil
}

type commitIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Message   string `json:"message" jsonschema:"the commit message"`
}

func (c *call) commit(in commitIn) (client.CommitResult, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return client.CommitResult{}, "", err
	}
	res, err := c.s.b.Commit(c.ctx, id, in.Message)
	if err != nil {
		return res, "", err
	}
	return res, fmt.Sprintf("Committed %.12s on branch %s of workspace %s.", res.Commit, res.Branch, res.ID), nil
}

func (c *call) checkDiff(in workspaceIn) (client.DiffReport, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return client.DiffReport{}, "", err
	}
	rep, err := c.s.b.CheckDiff(c.ctx, id)
	if err != nil {
		return rep, "", err
	}
	if rep.OutsideWritable == nil {
		rep.OutsideWritable = []client.DiffPathFinding{}
	}
	if rep.Secrets == nil {
		rep.Secrets = []client.DiffSecretFinding{}
	}
	if rep.OK {
		return rep, "OK: no change outside the writable paths, no added line that looks like a secret.", nil
	}
	var b strings.Builder
	for _, f := range rep.OutsideWritable {
		fmt.Fprintf(&b, "outside the writable paths: %s %s\n", f.Status, f.Path)
	}
	for _, f := range rep.Secrets {
		fmt.Fprintf(&b, "possible secret (%s) at %s:%d:%d: %s\n", f.Kind, f.Path, f.Line, f.Column, f.Excerpt)
	}
	if rep.Truncated {
		b.WriteString("(more findings were cut)\n")
	}
	return rep, b.String(), nil
}

// size is n bytes for people.
func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// sortedEnv turns an env object into KEY=VALUE entries, in key order.
func sortedEnv(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + env[k]
	}
	return out
}
