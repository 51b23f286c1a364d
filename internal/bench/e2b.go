package bench

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/flock"
)

// E2B cases: the same work through the official E2B JS SDK against the
// daemon's E2B endpoint, and through /v1 with the Go client.
const (
	CaseE2BCreate      = "Sandbox.create → commands.run('true') (E2B SDK)"
	CaseE2BCreateV1    = "scratch workspace + sandbox → exec true (/v1, Go client)"
	CaseE2BRun         = "commands.run('true') (E2B SDK)"
	CaseE2BRunV1       = "exec true (/v1 streamed, Go client)"
	CaseE2BRunV1Buffed = "exec true (/v1 buffered, Go client)"
	CaseE2BRunV1Bash   = "exec bash -l -c true (/v1 streamed, Go client)"
	CaseE2BList        = "commands.list() (E2B SDK: one unary call, no command)"
)

// E2B defaults.
const (
	DefaultE2BRuns = 30
	// E2BSDKVersion is the SDK the benchmark drives (npm e2b).
	E2BSDKVersion = "2.51.0"
	// DefaultE2BImage has the bash the SDK runs every command with.
	DefaultE2BImage = "agentbox/debian:bookworm"
)

//go:embed e2b_driver.mjs
var e2bDriver []byte

// E2B measures the E2B endpoint with the official JS SDK, side by side
// with the same work through /v1, per backend: Sandbox.create → first
// commands.run('true'), and a commands.run('true') round trip in a
// running sandbox. The SDK's times are taken in Node around its calls.
// opts.E2BSDK is a directory with node_modules/e2b, installed there with
// npm when missing.
func E2B(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	if opts.Image == "" || opts.Image == DefaultImage {
		opts.Image = DefaultE2BImage
	}
	opts = opts.withDefaults(DefaultE2BRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	if _, err := exec.LookPath("node"); err != nil {
		return res, fmt.Errorf("bench e2b: node is needed to run the E2B SDK: %w", err)
	}
	if err := ensureE2BSDK(ctx, opts.E2BSDK, log); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.e2bBench(ctx)
}

// DefaultE2BSDKDir is where the benchmark installs the SDK by default.
func DefaultE2BSDKDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "agentbox", "npm", "e2b-"+E2BSDKVersion)
}

// ensureE2BSDK installs e2b@E2BSDKVersion into dir unless it is there.
func ensureE2BSDK(ctx context.Context, dir string, log io.Writer) error {
	if dir == "" {
		return errors.New("bench e2b: no SDK directory")
	}
	pkg := filepath.Join(dir, "node_modules", "e2b", "package.json")
	installed := func() bool {
		b, err := os.ReadFile(pkg)
		var p struct{ Version string }
		return err == nil && json.Unmarshal(b, &p) == nil && p.Version == E2BSDKVersion
	}
	if installed() {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := flock.Acquire(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if installed() {
		return nil
	}
	fmt.Fprintf(log, "bench: installing e2b@%s with npm into %s\n", E2BSDKVersion, dir)
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private": true, "type": "module"}`+"\n"), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--save-exact", "e2b@"+E2BSDKVersion)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench e2b: npm install e2b@%s in %s: %v\n%s", E2BSDKVersion, dir, err, out)
	}
	if !installed() {
		return fmt.Errorf("bench e2b: npm did not install e2b@%s in %s", E2BSDKVersion, dir)
	}
	return nil
}

// e2bDriverProc is the Node process that drives the SDK.
type e2bDriverProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

type e2bReply struct {
	NS    int64  `json:"ns"`
	ID    string `json:"id"`
	Error string `json:"error"`
}

func (d *e2bDriverProc) call(req string) (e2bReply, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := io.WriteString(d.in, req+"\n"); err != nil {
		return e2bReply{}, fmt.Errorf("e2b driver: %w", err)
	}
	if !d.out.Scan() {
		return e2bReply{}, fmt.Errorf("e2b driver ended: %v", d.out.Err())
	}
	var r e2bReply
	if err := json.Unmarshal(d.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("e2b driver: %q: %w", d.out.Text(), err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("e2b driver: %s: %s", req, r.Error)
	}
	return r, nil
}

func (d *e2bDriverProc) timed(req string) (time.Duration, error) {
	r, err := d.call(req)
	return time.Duration(r.NS), err
}

// serveE2B serves the E2B endpoint over the benchmark's manager on a
// loopback port, with a template per backend, and starts the SDK driver
// pointed at it.
func (e *env) serveE2B(ctx context.Context) (*e2bDriverProc, error) {
	const token = "bench-e2b-token-0123456789abcdef"
	tpls := map[string]e2b.Template{}
	for _, b := range e.backends {
		tpls[b] = e2b.Template{Image: e.opts.Image, Backend: b}
	}
	srv, err := e2b.New(e.m, e2b.Options{Token: token, DataDir: filepath.Join(e.root, "data"), Templates: tpls})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	e.closers = append(e.closers, func() error {
		srv.Close()
		return hs.Close()
	})
	dir := filepath.Join(e.root, "e2b")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "driver.mjs"), e2bDriver, 0o644); err != nil {
		return nil, err
	}
	if err := os.Symlink(filepath.Join(e.opts.E2BSDK, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		return nil, err
	}
	url := "http://" + ln.Addr().String()
	cmd := exec.Command("node", filepath.Join(dir, "driver.mjs"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + token}
	cmd.Stderr = e.log
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench e2b: starting node: %w", err)
	}
	d := &e2bDriverProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	e.closers = append(e.closers, func() error {
		in.Close()
		return cmd.Wait()
	})
	return d, nil
}

func (e *env) e2bBench(ctx context.Context) (SandboxResult, error) {
	res := SandboxResult{Benchmark: "e2b", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs}
	d, err := e.serveE2B(ctx)
	if err != nil {
		return res, err
	}
	var cases []tcase
	for _, b := range e.backends {
		// The running sandboxes of the round trip cases: one through the
		// SDK, one on a scratch workspace through /v1.
		if _, err := d.call("open " + b); err != nil {
			return res, err
		}
		w, err := e.c.CreateWorkspace(ctx, client.CreateWorkspace{Empty: true, Task: "bench e2b"})
		if err != nil {
			return res, err
		}
		if _, err := e.c.CreateSandbox(ctx, client.CreateSandbox{Workspace: w.ID, Backend: b}); err != nil {
			return res, fmt.Errorf("bench: %s sandbox: %w", b, err)
		}
		ws := w.ID
		cases = append(cases,
			tcase{backend: b, name: CaseE2BCreate, timed: func(ctx context.Context) (time.Duration, error) { return d.timed("create " + b) }},
			tcase{backend: b, name: CaseE2BCreateV1, baseline: true, run: func(ctx context.Context) (func() error, error) {
				w, err := e.c.CreateWorkspace(ctx, client.CreateWorkspace{Empty: true, Task: "bench e2b"})
				if err != nil {
					return nil, err
				}
				undo := func() error { return e.c.RemoveWorkspace(context.WithoutCancel(ctx), w.ID) }
				if _, err := e.c.CreateSandbox(ctx, client.CreateSandbox{Workspace: w.ID, Backend: b}); err != nil {
					return undo, err
				}
				out, err := e.c.ExecBuffered(ctx, w.ID, client.Exec{Argv: []string{"true"}}, nil)
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", out.ExitCode)
				}
				return undo, err
			}},
			tcase{backend: b, name: CaseE2BRun, timed: func(ctx context.Context) (time.Duration, error) { return d.timed("run " + b) }},
			tcase{backend: b, name: CaseE2BList, timed: func(ctx context.Context) (time.Duration, error) { return d.timed("list " + b) }},
			tcase{backend: b, name: CaseE2BRunV1, baseline: true, run: func(ctx context.Context) (func() error, error) {
				r, err := e.c.Exec(ctx, ws, client.Exec{Argv: []string{"true"}}, nil, nil)
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", r.ExitCode)
				}
				return nil, err
			}},
			tcase{backend: b, name: CaseE2BRunV1Bash, baseline: true, run: func(ctx context.Context) (func() error, error) {
				r, err := e.c.Exec(ctx, ws, client.Exec{Argv: []string{"/bin/bash", "-l", "-c", "true"}}, nil, nil)
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("bash -l -c true exited %d", r.ExitCode)
				}
				return nil, err
			}},
			tcase{backend: b, name: CaseE2BRunV1Buffed, baseline: true, run: func(ctx context.Context) (func() error, error) {
				out, err := e.c.ExecBuffered(ctx, ws, client.Exec{Argv: []string{"true"}}, nil)
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", out.ExitCode)
				}
				return nil, err
			}})
	}
	e.logf("e2b: warm-up, then %d interleaved runs of %d cases", e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 2, e.opts.Runs, nil)
	if err != nil {
		return res, err
	}
	if _, err := d.call("close"); err != nil {
		return res, err
	}
	res.Rows = rows
	for _, b := range e.backends {
		c, _ := row(rows, b, CaseE2BCreate)
		cv, _ := row(rows, b, CaseE2BCreateV1)
		r, _ := row(rows, b, CaseE2BRun)
		rv, _ := row(rows, b, CaseE2BRunV1)
		rb, _ := row(rows, b, CaseE2BRunV1Bash)
		res.Checks = append(res.Checks,
			ratioCheck(b+": create → first run, E2B SDK / /v1", c, cv, 0, 0),
			ratioCheck(b+": run('true') round trip, E2B SDK / /v1 streamed", r, rv, 0, 0),
			ratioCheck(b+": run('true') round trip, E2B SDK / /v1 streamed of the same bash -l -c true", r, rb, 0, 0),
			Check{Name: b + ": run('true'), what the E2B path adds to /v1's bash -l -c true (median - median)", Value: r.Median - rb.Median})
	}
	res.Notes = append(res.Notes,
		"E2B SDK: e2b@"+E2BSDKVersion+" in Node against the E2B endpoint on loopback TCP, timed in Node around its calls; its commands run as /bin/bash -l -c CMD (the SDK's way), /v1's as argv true",
		"create: Sandbox.create makes a scratch workspace and a sandbox, then commands.run('true') streams through envd's process service; /v1 does the same three steps with the Go client on the unix socket; both tear down after the clock stops",
		"run: a running sandbox of each kind; the SDK's run is a Connect server stream (start, output, end events) of a background process the daemon holds")
	return res, nil
}
