package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// calcRepo is the repository the MCP tests work on: a module and its
// tests, run with pytest in the Debian image.
var calcRepo = map[string]string{
	"calc.py":             "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
	"tests/__init__.py":   "",
	"tests/test_calc.py":  "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
	"README.md":           "# calc\n",
	"tests/conftest.py":   "import sys, os\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n",
	"docs/usage/intro.md": "Use add and mul.\n",
}

// requireDebianEngine skips (or, under AGENTBOX_REQUIRE_SETUP=1, fails)
// unless the engine has the Debian image the daemon's sandboxes run.
func requireDebianEngine(t *testing.T) {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", debianImage).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		backendtest.SkipOrFail(t, debianImage+" is not in the engine: run agentbox image build --kind debian")
	}
}

// mcpSession is a client session of the Go SDK with the progress
// notifications it received.
type mcpSession struct {
	t    *testing.T
	name string
	cs   *mcp.ClientSession

	mu       sync.Mutex
	progress map[string][]progressNote
}

type progressNote struct {
	at  time.Time
	msg string
}

func newMCPClient(s *mcpSession) *mcp.Client {
	s.progress = map[string][]progressNote{}
	return mcp.NewClient(&mcp.Implementation{Name: "agentbox-e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			defer s.mu.Unlock()
			tok := fmt.Sprint(req.Params.ProgressToken)
			s.progress[tok] = append(s.progress[tok], progressNote{time.Now(), req.Params.Message})
		},
	})
}

// mcpStdio starts `agentbox mcp` against the daemon on data, as an MCP
// client starts it.
func mcpStdio(t *testing.T, data string, env ...string) *mcpSession {
	s := &mcpSession{t: t, name: "stdio"}
	cmd := exec.Command(binary, "mcp")
	cmd.Env = append(append(os.Environ(), "AGENTBOX_DATA="+data), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs, err := newMCPClient(s).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to agentbox mcp: %v\n%s", err, stderr.String())
	}
	s.cs = cs
	t.Cleanup(func() {
		cs.Close()
		if strings.Contains(stderr.String(), "panic") {
			t.Errorf("agentbox mcp panicked:\n%s", stderr.String())
		}
	})
	return s
}

// mcpHTTP connects to the daemon's /mcp on its unix socket.
func mcpHTTP(t *testing.T, data string) *mcpSession {
	s := &mcpSession{t: t, name: "http"}
	sock := filepath.Join(data, "agentbox.sock")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	cs, err := newMCPClient(s).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://agentbox/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	s.cs = cs
	t.Cleanup(func() { cs.Close() })
	return s
}

// call calls a tool; progress, if set, is the call's progress token.
func (s *mcpSession) call(ctx context.Context, tool string, args map[string]any, progress string) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if progress != "" {
		p.Meta = mcp.Meta{"progressToken": progress}
	}
	return s.cs.CallTool(ctx, p)
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// ok calls a tool that must succeed and returns its structured output
// and text.
func (s *mcpSession) ok(tool string, args map[string]any) (map[string]any, string) {
	s.t.Helper()
	return s.okProgress(tool, args, "")
}

func (s *mcpSession) okProgress(tool string, args map[string]any, progress string) (map[string]any, string) {
	s.t.Helper()
	res, err := s.call(s.t.Context(), tool, args, progress)
	if err != nil {
		s.t.Fatalf("%s %s: %v", s.name, tool, err)
	}
	if res.IsError {
		s.t.Fatalf("%s %s %v: tool error: %s", s.name, tool, args, resultText(res))
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out == nil {
		s.t.Fatalf("%s %s: structured content %s: %v", s.name, tool, b, err)
	}
	return out, resultText(res)
}

// fail calls a tool that must fail as a tool error (never a protocol
// error) and returns the agentbox code and message.
func (s *mcpSession) fail(tool string, args map[string]any) (code, msg string) {
	s.t.Helper()
	res, err := s.call(s.t.Context(), tool, args, "")
	if err != nil {
		s.t.Fatalf("%s %s: a protocol error, not a tool error: %v", s.name, tool, err)
	}
	if !res.IsError {
		s.t.Fatalf("%s %s %.200v: succeeded: %s", s.name, tool, args, resultText(res))
	}
	var e struct{ Code, Message string }
	b, _ := json.Marshal(res.Meta[mcpserver.ErrorKey])
	if err := json.Unmarshal(b, &e); err != nil || e.Code == "" {
		s.t.Fatalf("%s %s: no %s in the result's _meta: %v", s.name, tool, mcpserver.ErrorKey, res.Meta)
	}
	if want := e.Code + ": " + e.Message; resultText(res) != want {
		s.t.Errorf("%s %s: text %q, want %q", s.name, tool, resultText(res), want)
	}
	return e.Code, e.Message
}

func (s *mcpSession) progressOf(token string) []progressNote {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.progress[token])
}

// TestMCP drives the MCP tools through both transports against a real
// daemon, with the Go SDK's client: `agentbox mcp` over stdio (through the
// Go client and the unix socket) and the daemon's /mcp over streamable
// HTTP (over the manager). Each lists and checks the tools, then works as
// an agent would: a workspace of a repo, files written, edited, read by
// lines and searched, the repo's tests run with their output as progress,
// a diff checked and committed, two forks run at once, a command
// cancelled; then the hostile table.
func TestMCP(t *testing.T) {
	requireDebianEngine(t)
	data := t.TempDir()
	d := startDaemon(t, data)
	cleanupAll(t, data)
	t.Cleanup(func() { d.stop(t) })
	src := testutil.NewRepo(t, calcRepo)
	v1 := d.client(t)
	for _, name := range []string{"stdio", "http"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var s *mcpSession
			if name == "stdio" {
				s = mcpStdio(t, data)
			} else {
				s = mcpHTTP(t, data)
			}
			checkTools(t, s)
			testMCPFlow(t, s, src.Dir)
			testMCPHostile(t, s, v1)
		})
	}
}

// checkTools lists the tools and checks each one's description and
// schemas: valid JSON Schemas of objects that take no unknown property,
// every property described.
func checkTools(t *testing.T, s *mcpSession) {
	res, err := s.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 100 || tool.Title == "" || tool.Annotations == nil {
			t.Errorf("%s: description %q, title %q, annotations %v: a model needs them", tool.Name, tool.Description, tool.Title, tool.Annotations)
		}
		for kind, raw := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			b, _ := json.Marshal(raw)
			var sch jsonschema.Schema
			if err := json.Unmarshal(b, &sch); err != nil {
				t.Errorf("%s: %s schema: %v", tool.Name, kind, err)
				continue
			}
			if _, err := sch.Resolve(nil); err != nil {
				t.Errorf("%s: %s schema does not resolve: %v\n%s", tool.Name, kind, err, b)
			}
			if sch.Type != "object" {
				t.Errorf("%s: %s schema of type %q, want object", tool.Name, kind, sch.Type)
			}
			if kind == "output" {
				continue
			}
			if sch.AdditionalProperties == nil || sch.AdditionalProperties.Not == nil {
				t.Errorf("%s: input schema takes unknown properties: %s", tool.Name, b)
			}
			for name, p := range sch.Properties {
				if p.Description == "" {
					t.Errorf("%s: input property %s has no description", tool.Name, name)
				}
			}
			for _, r := range sch.Required {
				if sch.Properties[r] == nil {
					t.Errorf("%s: required property %s is not a property", tool.Name, r)
				}
			}
		}
		if tool.Name == "create_workspace" {
			b, _ := json.Marshal(tool.InputSchema)
			if has := strings.Contains(string(b), `"from_dir"`); has != (s.name == "stdio") {
				t.Errorf("%s: create_workspace offers from_dir: %v (only agentbox mcp, on the caller's machine, may)", s.name, has)
			}
		}
	}
	want := mcpserver.Tools()
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func testMCPFlow(t *testing.T, s *mcpSession, repo string) {
	task := "mcp-" + s.name
	// Nothing is bound yet: a call without a workspace says what to do.
	if code, msg := s.fail("read_file", map[string]any{"path": "calc.py"}); code != "invalid" || !strings.Contains(msg, "use_workspace") {
		t.Errorf("read_file with no workspace: %s %s", code, msg)
	}
	ws, text := s.ok("create_workspace", map[string]any{"repo": repo, "task": task})
	id, _ := ws["id"].(string)
	if ws["session_default"] != true || !strings.Contains(text, id) || ws["base_commit"] == "" {
		t.Fatalf("create_workspace = %v %q", ws, text)
	}

	// An uploaded directory: a directory of the caller's machine through
	// agentbox mcp, which runs there; never through the daemon's /mcp.
	dir := t.TempDir()
	for name, content := range map[string]string{"hello.txt": "hello from the caller\n", "sub/run.sh": "echo run\n", ".git/HEAD": "not sent\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	if s.name == "stdio" {
		up, _ := s.ok("create_workspace", map[string]any{"from_dir": dir, "task": task + "-upload"})
		if up["session_default"] != false {
			t.Errorf("a second workspace became the session's default: %v", up)
		}
		if r, _ := s.ok("run_command", map[string]any{"workspace": up["id"], "command": "cat hello.txt; ls -A; git log --oneline | wc -l"}); r["stdout"] != "hello from the caller\n.git\nhello.txt\nsub\n1\n" {
			t.Errorf("the uploaded directory's workspace: %v", r)
		}
		if code, msg := s.fail("create_workspace", map[string]any{"from_dir": filepath.Join(dir, "nonexistent")}); code != "invalid" || !strings.Contains(msg, "no such file or directory") {
			t.Errorf("from_dir of a missing directory: %s %s", code, msg)
		}
	} else if code, msg := s.fail("create_workspace", map[string]any{"from_dir": dir}); code != "invalid" || !strings.Contains(msg, "from_dir") {
		t.Errorf("from_dir through /mcp: %s %s", code, msg)
	}

	// Files: a new file in new directories, an edit, a ranged read.
	s.ok("write_file", map[string]any{"path": "tests/unit/test_sub.py", "content": "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"})
	s.ok("write_file", map[string]any{"path": "tests/unit/__init__.py", "content": ""})
	edit, _ := s.ok("edit_file", map[string]any{"path": "calc.py", "old": "def mul(a, b):", "new": "def sub(a, b):\n    return a - b\n\n\ndef mul(a, b):"})
	if edit["replacements"] != float64(1) {
		t.Errorf("edit_file = %v", edit)
	}
	// A near miss: nothing changes, the error quotes the closest line.
	if code, msg := s.fail("edit_file", map[string]any{"path": "calc.py", "old": "def  add(a,b):", "new": "x"}); code != "conflict" || !strings.Contains(msg, `"def add(a, b):"`) {
		t.Errorf("edit_file near miss: %s %s", code, msg)
	}
	read, text := s.ok("read_file", map[string]any{"path": "calc.py", "start_line": 5, "end_line": 6})
	if read["first_line"] != float64(5) || read["last_line"] != float64(6) || read["content"] != "def sub(a, b):\n    return a - b\n" ||
		text != "     5\tdef sub(a, b):\n     6\t    return a - b\n(more lines follow: read on with start_line 7)\n" {
		t.Errorf("read_file lines 5-6 = %v\n%s", read, text)
	}
	grep, text := s.ok("grep", map[string]any{"pattern": `def (add|sub)\(`})
	if m, _ := grep["matches"].([]any); len(m) != 2 || !strings.Contains(text, "calc.py:1: def add(a, b):") {
		t.Errorf("grep = %v\n%s", grep, text)
	}
	find, _ := s.ok("find_files", map[string]any{"pattern": "test_*.py"})
	if m, _ := find["matches"].([]any); len(m) != 2 {
		t.Errorf("find_files test_*.py = %v", find)
	}
	tree, text := s.ok("list_files", map[string]any{"path": "docs", "depth": 2})
	if !strings.Contains(text, "docs/usage/\ndocs/usage/intro.md  (17 bytes)") || tree["depth"] != float64(2) {
		t.Errorf("list_files docs depth 2 = %v\n%s", tree, text)
	}

	// The repo's tests, their output arriving as progress.
	token := "pytest-" + s.name
	run, text := s.okProgress("run_command", map[string]any{"command": "python3 -m pytest -q -p no:cacheprovider", "env": map[string]any{"PYTHONDONTWRITEBYTECODE": "1"}}, token)
	if run["exit_code"] != float64(0) || !strings.Contains(run["stdout"].(string), "3 passed") || !strings.HasPrefix(text, "exit code 0 after ") {
		t.Fatalf("pytest: %v\n%s", run, text)
	}
	// A notification sent before the result may be handled after it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		var streamed strings.Builder
		for _, p := range s.progressOf(token) {
			streamed.WriteString(p.msg)
		}
		if strings.Contains(streamed.String(), "3 passed") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("pytest's output did not come as progress: %q", streamed.String())
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a notification's arrival, bounded
	}

	// The result: diff, check, commit.
	diff, text := s.ok("diff", nil)
	if !strings.Contains(text, "+def sub(a, b):") || !strings.Contains(text, "tests/unit/test_sub.py") || diff["truncated"] != false {
		t.Errorf("diff = %v", text)
	}
	if check, text := s.ok("check_diff", nil); check["ok"] != true {
		t.Errorf("check_diff = %v %s", check, text)
	}
	commit, _ := s.ok("commit", map[string]any{"message": "calc: sub"})
	if sha, _ := commit["commit"].(string); !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(sha) || commit["id"] != id {
		t.Errorf("commit = %v", commit)
	}
	show, text := s.ok("show_workspace", nil)
	if st, _ := show["status"].(map[string]any); st == nil || !strings.Contains(text, "calc.py") {
		t.Errorf("show_workspace = %v\n%s", show, text)
	}

	// Two attempts side by side, run at once.
	forks, _ := s.ok("fork_workspace", map[string]any{"count": 2, "branch": "attempt-" + s.name})
	list, _ := forks["forks"].([]any)
	if len(list) != 2 {
		t.Fatalf("fork_workspace count 2 = %v", forks)
	}
	var wg sync.WaitGroup
	results := make([]map[string]any, 2)
	for i, f := range list {
		fork := f.(map[string]any)
		if fork["branch"] != fmt.Sprintf("attempt-%s-%d", s.name, i+1) || fork["parent_id"] != id {
			t.Errorf("fork %d = %v", i, fork)
		}
		wg.Go(func() {
			res, err := s.call(t.Context(), "run_command", map[string]any{"workspace": fork["id"], "argv": []string{"python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"}, "env": map[string]any{"PYTHONDONTWRITEBYTECODE": "1"}}, "")
			if err != nil || res.IsError {
				t.Errorf("pytest in fork %d: %v %v", i, err, res)
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &results[i])
		})
	}
	wg.Wait()
	for i, r := range results {
		if r["exit_code"] != float64(0) || r["sandbox_id"] == run["sandbox_id"] {
			t.Errorf("fork %d: %v", i, r)
		}
	}
	if results[0]["sandbox_id"] == results[1]["sandbox_id"] {
		t.Errorf("both forks ran in sandbox %v", results[0]["sandbox_id"])
	}
	// The default workspace stayed; another one can be bound.
	if l, _ := s.ok("list_workspaces", map[string]any{"task": task}); l["default_workspace"] != id || len(l["workspaces"].([]any)) != 3 {
		t.Errorf("list_workspaces = %v", l)
	}
	fork1 := list[0].(map[string]any)["id"].(string)
	s.ok("use_workspace", map[string]any{"workspace": fork1})
	if r, _ := s.ok("run_command", map[string]any{"command": "git rev-parse --abbrev-ref HEAD"}); r["stdout"] != "attempt-"+s.name+"-1\n" {
		t.Errorf("after use_workspace: %v", r)
	}
	s.ok("remove_workspace", map[string]any{"workspace": fork1})
	if code, _ := s.fail("run_command", map[string]any{"command": "true"}); code != "invalid" {
		t.Errorf("after removing the default workspace, a call without one: %s", code)
	}
	s.ok("use_workspace", map[string]any{"workspace": id})

	// A background server, reached through the port relay, its logs
	// read, then stopped.
	proc, text := s.ok("start_process", map[string]any{"command": "exec python3 -u -m http.server 8000 --bind 127.0.0.1"})
	pid, _ := proc["id"].(string)
	if proc["state"] != "running" || !strings.Contains(text, pid) {
		t.Fatalf("start_process = %v\n%s", proc, text)
	}
	port, _ := s.ok("expose_port", map[string]any{"port": 8000})
	url, _ := port["url"].(string)
	var body string
	hc := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := hc.Get(url + "calc.py"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				body = string(b)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server at %s did not answer", url)
		}
		time.Sleep(100 * time.Millisecond) // polling the server's start, bounded
	}
	if !strings.Contains(body, "def sub(a, b):") {
		t.Errorf("GET %scalc.py = %q", url, body)
	}
	// The server logs the request as it answers: the line may reach the
	// daemon a moment after the reply reached us.
	for deadline := time.Now().Add(5 * time.Second); ; {
		logs, text := s.ok("read_logs", map[string]any{"process": pid, "stream": "stderr"})
		if strings.Contains(logs["data"].(string), `"GET /calc.py HTTP/1.1" 200`) && strings.Contains(text, "process running") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("read_logs stderr = %v\n%s", logs, text)
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the log line's arrival, bounded
	}
	if l, _ := s.ok("list_processes", nil); !strings.Contains(fmt.Sprint(l["processes"]), pid) {
		t.Errorf("list_processes = %v", l)
	}
	s.ok("signal_process", map[string]any{"process": pid})
	if logs, text := s.ok("read_logs", map[string]any{"process": pid, "offset": -100, "wait": "20s"}); logs["process"].(map[string]any)["state"] != "killed" {
		t.Errorf("after signal_process TERM: %v\n%s", logs, text)
	}

	// How commands end, stated.
	for _, c := range []struct {
		args  map[string]any
		check func(r map[string]any, text string) bool
	}{
		{map[string]any{"command": "echo out; echo err >&2; exit 3"}, func(r map[string]any, text string) bool {
			return r["exit_code"] == float64(3) && r["stdout"] == "out\n" && r["stderr"] == "err\n" && strings.HasPrefix(text, "exit code 3")
		}},
		{map[string]any{"command": "kill -9 $$"}, func(r map[string]any, text string) bool {
			return r["signal"] == float64(9) && strings.HasPrefix(text, "killed by signal 9")
		}},
		{map[string]any{"argv": []string{"sleep", "30"}, "timeout": "1s"}, func(r map[string]any, text string) bool {
			return r["timed_out"] == true && strings.HasPrefix(text, "timed out")
		}},
		{map[string]any{"command": "seq 1 100000", "max_output_bytes": 2048}, func(r map[string]any, text string) bool {
			out, _ := r["stdout"].(string)
			return r["truncated"] == true && strings.HasPrefix(out, "1\n2\n3\n") && strings.HasSuffix(out, "99999\n100000\n") &&
				strings.Contains(out, "bytes of stdout left out") && len(out) < 2200 && r["stdout_bytes"] == float64(588895)
		}},
		{map[string]any{"command": "cat; pwd; echo $GREETING", "stdin": "in\n", "workdir": "/workspace/docs", "env": map[string]any{"GREETING": "héllo"}}, func(r map[string]any, text string) bool {
			return r["stdout"] == "in\n/workspace/docs\nhéllo\n"
		}},
	} {
		if r, text := s.ok("run_command", c.args); !c.check(r, text) {
			t.Errorf("run_command %v = %v\n%s", c.args, r, text)
		}
	}

	// A long command: its output arrives while it runs.
	token = "ticks-" + s.name
	start := time.Now()
	s.okProgress("run_command", map[string]any{"command": "for i in 1 2 3 4; do echo tick $i; sleep 0.5; done"}, token)
	end := time.Now()
	notes := s.progressOf(token)
	if len(notes) < 2 || !strings.Contains(notes[0].msg, "tick 1") || end.Sub(notes[0].at) < 800*time.Millisecond {
		t.Errorf("progress of a 2 s command (ran %s): %v", end.Sub(start), notes)
	}

	// Cancelling the call kills the command.
	ctx, cancel := context.WithCancel(t.Context())
	token = "cancel-" + s.name
	done := make(chan error, 1)
	go func() {
		_, err := s.call(ctx, "run_command", map[string]any{"command": "echo started; exec sleep 300"}, token)
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); len(s.progressOf(token)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no progress from a running command")
		}
		time.Sleep(20 * time.Millisecond) // polling a notification's arrival, bounded
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("a cancelled call returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		r, _ := s.ok("run_command", map[string]any{"command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 300' || true"})
		if strings.TrimSpace(r["stdout"].(string)) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the cancelled command still runs: %v", r)
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the kill's completion, bounded
	}
}

// testMCPHostile sends the tools what a confused or hostile agent would
// (paths out of the workspace, sizes past the limits, bad globs and
// patterns, unknown IDs, odd unicode): each is a tool error with the code
// and message /v1 gives the same request (or, for a limit of the MCP
// tools' own, the code and the limit), nothing changes, and the session
// goes on.
func testMCPHostile(t *testing.T, s *mcpSession, v1 *client.Client) {
	ctx := t.Context()
	ws, _ := s.ok("create_workspace", map[string]any{"files": map[string]any{"a.txt": "alpha\nbeta\nalpha\n", "dir/b.txt": "b\n"}, "task": "hostile-" + s.name})
	id := ws["id"].(string)
	s.ok("use_workspace", map[string]any{"workspace": id})
	// A link out of the workspace, and a 1 GiB file of one line.
	s.ok("run_command", map[string]any{"command": "ln -s /etc link && truncate -s 1G big.bin"})
	snapshot := func() string {
		st, err := v1.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var a bytes.Buffer
		if _, err := v1.ReadFile(ctx, id, "a.txt", &a); err != nil {
			t.Fatal(err)
		}
		wss, _ := v1.ListWorkspaces(ctx, "", "")
		repos, _ := v1.ListRepos(ctx)
		b, _ := json.Marshal(st.Changes)
		return fmt.Sprintf("changes %s\na.txt %q\n%d workspaces, %d repos", b, a.String(), len(wss), len(repos))
	}
	before := snapshot()
	lines := client.Range{FirstLine: 1, LastLine: mcpserver.DefaultReadLines}
	upload := func(name string) func() error {
		return func() error {
			tarball, err := tarOf(map[string]string{name: "y"})
			if err != nil {
				return err
			}
			_, err = v1.UploadWorkspace(ctx, client.CreateWorkspace{}, bytes.NewReader(tarball), false)
			return err
		}
	}
	exec := func(req client.Exec) func() error {
		return func() error {
			if req.Timeout == "" {
				req.Timeout = mcpserver.DefaultRunTimeout.String()
			}
			_, err := v1.Exec(ctx, id, req, nil, nil)
			return err
		}
	}
	odd := "ws_\u202eelif\u0000"
	cases := []struct {
		name, tool string
		args       map[string]any
		// v1 is the same request through /v1, whose error the tool's must
		// equal; nil for a limit of the tools' own, then code and has.
		v1        func() error
		code, has string
	}{
		{"read ..", "read_file", map[string]any{"path": "../../etc/passwd"}, func() error {
			_, err := v1.ReadFileContent(ctx, id, "../../etc/passwd", lines)
			return err
		}, "", ""},
		{"read absolute", "read_file", map[string]any{"path": "/etc/passwd"}, func() error {
			_, err := v1.ReadFileContent(ctx, id, "/etc/passwd", lines)
			return err
		}, "", ""},
		{"read through a link out", "read_file", map[string]any{"path": "link/passwd"}, func() error {
			_, err := v1.ReadFileContent(ctx, id, "link/passwd", lines)
			return err
		}, "", ""},
		{"read a 1 GiB line", "read_file", map[string]any{"path": "big.bin"}, func() error {
			_, err := v1.ReadFileContent(ctx, id, "big.bin", lines)
			return err
		}, "", ""},
		{"read a directory", "read_file", map[string]any{"path": "dir"}, func() error {
			_, err := v1.ReadFileContent(ctx, id, "dir", lines)
			return err
		}, "", ""},
		{"write ..", "write_file", map[string]any{"path": "../evil.txt", "content": "x"}, func() error {
			_, err := v1.WriteFile(ctx, id, "../evil.txt", strings.NewReader("x"), 0, true)
			return err
		}, "", ""},
		{"write through a link out", "write_file", map[string]any{"path": "link/evil", "content": "x"}, func() error {
			_, err := v1.WriteFile(ctx, id, "link/evil", strings.NewReader("x"), 0, true)
			return err
		}, "", ""},
		{"write a NUL name", "write_file", map[string]any{"path": "a\x00b", "content": "x"}, func() error {
			_, err := v1.WriteFile(ctx, id, "a\x00b", strings.NewReader("x"), 0, true)
			return err
		}, "", ""},
		{"write over a directory", "write_file", map[string]any{"path": "dir", "content": "x"}, func() error {
			_, err := v1.WriteFile(ctx, id, "dir", strings.NewReader("x"), 0, true)
			return err
		}, "", ""},
		{"write 9 MiB", "write_file", map[string]any{"path": "a.txt", "content": strings.Repeat("x", 9<<20)}, nil, "too_large", "over the 8388608 bytes a write carries"},
		{"edit: no match", "edit_file", map[string]any{"path": "a.txt", "old": "Alpha\n", "new": "x"}, func() error {
			_, err := v1.EditFile(ctx, id, client.EditRequest{Path: "a.txt", Old: "Alpha\n", New: "x"})
			return err
		}, "", ""},
		{"edit: two matches", "edit_file", map[string]any{"path": "a.txt", "old": "alpha", "new": "x"}, func() error {
			_, err := v1.EditFile(ctx, id, client.EditRequest{Path: "a.txt", Old: "alpha", New: "x"})
			return err
		}, "", ""},
		{"edit: empty old", "edit_file", map[string]any{"path": "a.txt", "old": "", "new": "x"}, func() error {
			_, err := v1.EditFile(ctx, id, client.EditRequest{Path: "a.txt", New: "x"})
			return err
		}, "", ""},
		{"edit through a link out", "edit_file", map[string]any{"path": "link/hostname", "old": "a", "new": "b"}, func() error {
			_, err := v1.EditFile(ctx, id, client.EditRequest{Path: "link/hostname", Old: "a", New: "b"})
			return err
		}, "", ""},
		{"bad glob", "find_files", map[string]any{"pattern": "[unclosed"}, func() error {
			_, err := v1.FindFiles(ctx, id, client.FindRequest{Pattern: "[unclosed"})
			return err
		}, "", ""},
		{"find out of the workspace", "find_files", map[string]any{"pattern": "*", "path": "../.."}, func() error {
			_, err := v1.FindFiles(ctx, id, client.FindRequest{Pattern: "*", Path: "../.."})
			return err
		}, "", ""},
		{"bad regexp", "grep", map[string]any{"pattern": "(unclosed"}, func() error {
			_, err := v1.Grep(ctx, id, client.GrepRequest{Pattern: "(unclosed", MaxMatches: 200})
			return err
		}, "", ""},
		{"grep out of the workspace", "grep", map[string]any{"pattern": "root", "path": "../../etc"}, func() error {
			_, err := v1.Grep(ctx, id, client.GrepRequest{Pattern: "root", Path: "../../etc", MaxMatches: 200})
			return err
		}, "", ""},
		{"list a file", "list_files", map[string]any{"path": "a.txt"}, func() error {
			_, err := v1.ListTree(ctx, id, "a.txt", 1)
			return err
		}, "", ""},
		{"list too deep", "list_files", map[string]any{"depth": 1000}, nil, "invalid", "depth"},
		{"unknown workspace", "read_file", map[string]any{"workspace": "ws_aaaaaaaaaaaa", "path": "a.txt"}, func() error {
			_, err := v1.ReadFileContent(ctx, "ws_aaaaaaaaaaaa", "a.txt", lines)
			return err
		}, "", ""},
		{"odd unicode workspace", "show_workspace", map[string]any{"workspace": odd}, func() error {
			_, err := v1.GetWorkspace(ctx, odd)
			return err
		}, "", ""},
		{"run in an unknown workspace", "run_command", map[string]any{"workspace": "ws_zzzzzzzzzzzz", "command": "true"}, func() error {
			_, err := v1.Exec(ctx, "ws_zzzzzzzzzzzz", client.Exec{Sh: "true", Timeout: mcpserver.DefaultRunTimeout.String()}, nil, nil)
			return err
		}, "", ""},
		{"run: bad timeout", "run_command", map[string]any{"command": "true", "timeout": "forever"}, exec(client.Exec{Sh: "true", Timeout: "forever"}), "", ""},
		{"run: bad env", "run_command", map[string]any{"command": "true", "env": map[string]any{"": "x"}}, exec(client.Exec{Sh: "true", Env: []string{"=x"}}), "", ""},
		{"run: argv and command", "run_command", map[string]any{"command": "true", "argv": []string{"true"}}, exec(client.Exec{Sh: "true", Argv: []string{"true"}}), "", ""},
		{"run: nothing", "run_command", map[string]any{}, exec(client.Exec{}), "", ""},
		{"run: no such program", "run_command", map[string]any{"argv": []string{"/nonexistent/prog"}}, exec(client.Exec{Argv: []string{"/nonexistent/prog"}}), "", ""},
		{"run: huge output cap", "run_command", map[string]any{"command": "true", "max_output_bytes": 1 << 30}, nil, "invalid", "max_output_bytes"},
		{"fork 17", "fork_workspace", map[string]any{"count": 17}, nil, "invalid", "count"},
		{"fork an unknown workspace", "fork_workspace", map[string]any{"workspace": "ws_bbbbbbbbbbbb"}, func() error {
			_, err := v1.Fork(ctx, "ws_bbbbbbbbbbbb", client.Fork{})
			return err
		}, "", ""},
		{"upload ..", "create_workspace", map[string]any{"files": map[string]any{"../x": "y"}}, upload("../x"), "", ""},
		{"upload .git", "create_workspace", map[string]any{"files": map[string]any{".git/config": "y"}}, upload(".git/config"), "", ""},
		{"upload absolute", "create_workspace", map[string]any{"files": map[string]any{"/etc/x": "y"}}, upload("/etc/x"), "", ""},
		{"upload 9 MiB", "create_workspace", map[string]any{"files": map[string]any{"a": strings.Repeat("x", 9<<20)}}, nil, "too_large", "over the 8388608 a call carries"},
		{"two sources", "create_workspace", map[string]any{"empty": true, "repo": "/nonexistent"}, nil, "invalid", "exactly one of"},
		{"bad repo URL", "create_workspace", map[string]any{"repo": "ftp://x.invalid/r"}, func() error {
			_, err := v1.CreateWorkspace(ctx, client.CreateWorkspace{Repo: "ftp://x.invalid/r"})
			return err
		}, "", ""},
		{"commit without a message", "commit", map[string]any{"message": ""}, func() error {
			_, err := v1.Commit(ctx, id, "", nil)
			return err
		}, "", ""},
		{"remove an unknown workspace", "remove_workspace", map[string]any{"workspace": "ws_cccccccccccc"}, func() error {
			return v1.RemoveWorkspace(ctx, "ws_cccccccccccc")
		}, "", ""},
		{"logs of an unknown process", "read_logs", map[string]any{"process": "ex_aaaaaaaaaaaa"}, func() error {
			_, err := v1.ProcessLogs(ctx, id, "ex_aaaaaaaaaaaa", client.LogOptions{Limit: mcpserver.DefaultLogBytes})
			return err
		}, "", ""},
		{"signal an unknown process", "signal_process", map[string]any{"process": "ex_aaaaaaaaaaaa", "signal": "KILL"}, func() error {
			_, err := v1.SignalProcess(ctx, id, "ex_aaaaaaaaaaaa", "KILL")
			return err
		}, "", ""},
		{"start a process in an unknown workspace", "start_process", map[string]any{"workspace": "ws_dddddddddddd", "command": "sleep 1"}, func() error {
			_, err := v1.StartProcess(ctx, "ws_dddddddddddd", client.Exec{Sh: "sleep 1"})
			return err
		}, "", ""},
		{"start a process: bad timeout", "start_process", map[string]any{"command": "sleep 1", "timeout": "-1s"}, func() error {
			_, err := v1.StartProcess(ctx, id, client.Exec{Sh: "sleep 1", Timeout: "-1s"})
			return err
		}, "", ""},
		{"a dependency that is not pinned", "add_dependency", map[string]any{"spec": "npm:left-pad@^1.3.0"}, func() error {
			_, err := v1.AddDependency(ctx, id, "npm:left-pad@^1.3.0")
			return err
		}, "", ""},
		{"a dependency the manifest does not approve", "add_dependency", map[string]any{"spec": "npm:left-pad@1.3.0"}, nil, "policy_denied", "dependency npm:left-pad@1.3.0 denied: npm package left-pad is not in the approved manifest"},
		{"expose port 0", "expose_port", map[string]any{"port": 0}, nil, "invalid", "port"},
		{"expose a port of an unknown workspace", "expose_port", map[string]any{"workspace": "ws_eeeeeeeeeeee", "port": 8000}, func() error {
			_, err := v1.PublishPort(ctx, "ws_eeeeeeeeeeee", 8000)
			return err
		}, "", ""},
		{"logs: bad wait", "read_logs", map[string]any{"process": "ex_aaaaaaaaaaaa", "wait": "forever"}, nil, "invalid", "wait"},
		{"unknown argument", "read_file", map[string]any{"path": "a.txt", "bogus": 1}, nil, "invalid", "bogus"},
		{"wrong type", "read_file", map[string]any{"path": 7}, nil, "invalid", "path"},
		{"missing argument", "write_file", map[string]any{"content": "x"}, nil, "invalid", "path"},
	}
	for _, c := range cases {
		code, msg := s.fail(c.tool, c.args)
		if c.v1 == nil {
			if code != c.code || !strings.Contains(msg, c.has) {
				t.Errorf("%s: %s: %s %q, want %s with %q", s.name, c.name, code, msg, c.code, c.has)
			}
			continue
		}
		err := c.v1()
		var ce *client.Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: the same request through /v1 did not fail with an API error: %v", c.name, err)
			continue
		}
		if code != ce.Code || msg != ce.Message {
			t.Errorf("%s: %s:\n mcp: %s %q\n  v1: %s %q", s.name, c.name, code, msg, ce.Code, ce.Message)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("%s: the hostile calls changed something:\nbefore %s\nafter  %s", s.name, before, after)
	}
	// A link out is not followed: nothing is found through it.
	if r, _ := s.ok("grep", map[string]any{"pattern": "root", "path": "link"}); len(r["matches"].([]any)) != 0 {
		t.Errorf("%s: grep through a link out: %v", s.name, r)
	}
	// The session goes on.
	if r, _ := s.ok("run_command", map[string]any{"command": "cat a.txt"}); r["stdout"] != "alpha\nbeta\nalpha\n" {
		t.Errorf("%s: after the hostile table: %v", s.name, r)
	}
}

// tarOf packs files as an upload's tar stream.
func tarOf(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			return nil, err
		}
		tw.Write([]byte(content))
	}
	return buf.Bytes(), tw.Close()
}

// TestMCPShutdown: a daemon stopping gracefully does not wait its whole
// grace period for MCP sessions that have nothing in progress (an HTTP
// session keeps a GET stream open for its whole life), lets a tool call
// in progress answer, and ends one still running when the grace is over.
func TestMCPShutdown(t *testing.T) {
	started := func(t *testing.T, s *mcpSession, ws, command string) <-chan *mcp.CallToolResult {
		token := "shutdown-" + command
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := s.call(context.Background(), "run_command", map[string]any{"workspace": ws, "command": "echo started; " + command}, token)
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
			}
			done <- res
		}()
		for deadline := time.Now().Add(30 * time.Second); len(s.progressOf(token)) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the command did not start")
			}
			time.Sleep(20 * time.Millisecond) // polling a notification's arrival, bounded
		}
		return done
	}
	t.Run("within the grace", func(t *testing.T) {
		d, _, ws, _ := shutdownDaemon(t, 20*time.Second)
		idle := mcpHTTP(t, d.data)
		idle.ok("list_workspaces", nil)
		busy := mcpHTTP(t, d.data)
		done := started(t, busy, ws.ID, "sleep 2; echo finished")
		start := time.Now()
		d.stop(t)
		if took := time.Since(start); took > 12*time.Second {
			t.Errorf("the daemon took %s to stop with an idle MCP session and a 2 s call (grace 20s)", took)
		}
		res := <-done
		if res.IsError || !strings.Contains(resultText(res), "finished") {
			t.Errorf("a call in progress at SIGTERM, within the grace: %s", resultText(res))
		}
	})
	t.Run("beyond the grace", func(t *testing.T) {
		d, _, ws, _ := shutdownDaemon(t, 2*time.Second)
		s := mcpHTTP(t, d.data)
		done := started(t, s, ws.ID, "sleep 300")
		start := time.Now()
		d.stop(t)
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the daemon took %s to stop with a call running past its grace of 2s", took)
		}
		select {
		case res := <-done:
			if !res.IsError && !strings.Contains(resultText(res), "canceled") && !strings.Contains(resultText(res), "killed") {
				t.Errorf("a call running past the grace ended as: %s", resultText(res))
			}
		case <-time.After(10 * time.Second):
			t.Error("a call running past the grace did not end with the daemon")
		}
	})
}

// TestMCPWithoutDaemon: agentbox mcp starts and serves its tools while no
// daemon runs; each call is a tool error "unavailable" saying so, and the
// session goes on.
func TestMCPWithoutDaemon(t *testing.T) {
	s := mcpStdio(t, t.TempDir())
	checkTools(t, s)
	for range 2 {
		if code, msg := s.fail("list_workspaces", nil); code != "unavailable" || !strings.Contains(msg, "is `agentbox serve` running?") {
			t.Errorf("list_workspaces with no daemon: %s %s", code, msg)
		}
	}
}
