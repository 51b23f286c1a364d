package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// browser is a headless Chromium tab, with what it saw that a test must
// not see: dialogs (an injected alert) and console errors about the
// page's policy (an inline script or an HTML sink it refused).
type browser struct {
	ctx       context.Context
	artifacts string

	mu       sync.Mutex
	dialogs  []string
	policies []string
}

func (b *browser) seen() (dialogs, policies []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...), append([]string(nil), b.policies...)
}

// newBrowser starts Debian's chromium, headless, at 1280x800.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		skip.OrFail(t, "no chromium on PATH (scripts/setup.sh installs Debian's chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 800), chromedp.Flag("lang", "en-US"))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		skip.OrFail(t, "chromium cannot start: "+err.Error())
	}
	dir := os.Getenv("AGENTBOX_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &browser{ctx: ctx, artifacts: dir}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, ev.Message)
			b.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Trusted") {
				b.mu.Lock()
				b.policies = append(b.policies, string(m.Type)+": "+m.Text)
				b.mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	return b
}

// do runs actions, failing the test with what for context.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot(t, "failed-"+strings.ReplaceAll(what, " ", "-"))
		dialogs, policies := b.seen()
		t.Fatalf("%s: %v (dialogs %q, exceptions and policy violations %q)", what, err, dialogs, policies)
	}
}

// waitFor polls a JavaScript predicate until it is true.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	b.do(t, what, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second))(ctx, tg)
		return err
	}))
}

// eval evaluates a JavaScript expression into T.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// shot writes a PNG of the viewport to the artifacts directory.
func (b *browser) shot(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.artifacts, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Errorf("writing %s: %v", p, err)
	}
	return p
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// goTo opens a page of the dashboard by its hash and waits for it to
// have loaded.
func (b *browser) goTo(t *testing.T, hash, page string) {
	t.Helper()
	b.do(t, "open "+hash, chromedp.Evaluate[chromedp.Void](`location.hash = `+js(hash)))
	b.waitFor(t, "page "+page+" ready", fmt.Sprintf(`document.querySelector('[data-page=%s][data-ready]') !== null`, page))
}

// noInjection checks that no agent-controlled string became markup: no
// dialog, no policy violation, no element an injection would add, and
// each string present as text where the page shows it.
func (b *browser) noInjection(t *testing.T, where string, texts ...string) {
	t.Helper()
	n := eval[int](t, b, `document.querySelectorAll('script:not([src]), [onerror], img[src="x"], img[src^="x/"], main b').length`)
	if n != 0 {
		t.Errorf("%s: %d injected elements in the page", where, n)
	}
	for _, s := range texts {
		if !eval[bool](t, b, `document.querySelector('main').textContent.includes(`+js(s)+`)`) {
			t.Errorf("%s: the text %q is not shown", where, s)
		}
	}
	dialogs, policies := b.seen()
	if len(dialogs) != 0 {
		t.Errorf("%s: dialogs opened: %q", where, dialogs)
	}
	if len(policies) != 0 {
		t.Errorf("%s: exceptions or policy violations: %q", where, policies)
	}
}

// TestDashboardBrowser drives the dashboard in Chromium against a real
// daemon with Docker sandboxes: log in, watch a process's output arrive,
// read a workspace's files and diff, approve a candidate, filter events,
// and read usage; every page is shot at 1280x800 and searched for
// injected markup from the workspace's hostile names and output.
func TestDashboardBrowser(t *testing.T) {
	d := startDaemon(t)
	ws := seedHostile(t, d)
	b := newBrowser(t)
	ctx := t.Context()

	// A run of the agent loop with a scripted model that reports what
	// its calls cost; it runs while the test goes on, and the usage page
	// shows its tokens and cost.
	run, err := d.CL.Solve(ctx, client.SolveRequest{Repo: ws.RepoID, Task: hostileSolveTask, Test: "true", Model: "scripted", Script: solveScript})
	if err != nil {
		t.Fatalf("solve: %v", err)
	}

	// A background process whose command and output hold HTML, and which
	// waits for a file before it says its second line.
	proc, err := d.CL.StartProcess(ctx, ws.ID, client.Exec{Argv: []string{"sh", "-c",
		`echo '` + hostileOutput + `'; echo first-line; while [ ! -e /tmp/go-on ]; do sleep 0.1; done; echo second-line-live`, hostileArg}})
	if err != nil {
		t.Fatalf("starting a process: %v", err)
	}

	// Log in.
	b.do(t, "open the dashboard", chromedp.Navigate(d.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.shot(t, "login")
	b.do(t, "log in", chromedp.SendKeys(chromedp.CSS("#token"), d.Token), chromedp.Click(chromedp.CSS("#login-button")))
	b.waitFor(t, "overview", `document.querySelector('[data-page=overview][data-ready]') !== null`)
	b.waitFor(t, "live stream", `document.getElementById('live').textContent === 'live'`)
	if eval[bool](t, b, `document.cookie.includes('agentbox_session')`) {
		t.Error("the session cookie is readable by script (want HttpOnly)")
	}
	b.waitFor(t, "sandboxes counted", `/running [1-9]/.test(document.getElementById('card-sandboxes').textContent)`)
	b.waitFor(t, "disk budget", `/of 20\.0 GiB/.test(document.getElementById('card-disk').textContent)`)
	b.shot(t, "overview")
	b.noInjection(t, "overview")

	// Tasks: the tree shows the hostile task and branch as text; the
	// process's output arrives live.
	b.goTo(t, "#/tasks", "tasks")
	b.waitFor(t, "workspace in the tree", `document.querySelector('button[data-ws=`+js(ws.ID)+`]') !== null`)
	b.do(t, "choose the workspace", chromedp.Click(chromedp.CSS(`button[data-ws="`+ws.ID+`"]`)))
	b.waitFor(t, "first output line", `(document.getElementById('live-output')||{}).textContent?.includes('first-line')`)
	if eval[bool](t, b, `document.getElementById('live-output').textContent.includes('second-line-live')`) {
		t.Fatal("the second line is shown before the process could print it")
	}
	if _, err := d.CL.ExecBuffered(ctx, ws.ID, client.Exec{Argv: []string{"touch", "/tmp/go-on"}}, nil); err != nil {
		t.Fatalf("touch: %v", err)
	}
	b.waitFor(t, "second output line, live", `document.getElementById('live-output').textContent.includes('second-line-live')`)
	b.waitFor(t, "process shown ended", `/exited/.test(document.querySelector('.processes').textContent)`)
	// The exec that touched the file is listed among the last commands
	// once its event arrives and the page refreshes the panel.
	b.shot(t, "tasks")
	b.noInjection(t, "tasks", hostileTask, hostileBranch, hostileOutput, hostileArg)
	if p, err := d.CL.GetProcess(ctx, ws.ID, proc.ID); err != nil || p.State != "exited" {
		t.Errorf("process %s: %v %v", proc.ID, p.State, err)
	}

	// An ordinary exec, not detached, run by the Go client: its output
	// reaches the page live through the daemon's ring (the page is not
	// the client that runs it), and another client follows it by ID.
	var execOut syncBuffer
	execDone := make(chan error, 1)
	go func() {
		_, err := d.CL.Exec(ctx, ws.ID, client.Exec{Argv: []string{"sh", "-c",
			`echo '` + hostileExecOutput + `'; echo exec-first-line; while [ ! -e /tmp/exec-go-on ]; do sleep 0.1; done; echo exec-second-line-live`, hostileArg}}, &execOut, &execOut)
		execDone <- err
	}()
	b.waitFor(t, "the exec's first line", `(document.getElementById('live-output')||{}).textContent?.includes('exec-first-line')`)
	if eval[bool](t, b, `document.getElementById('live-output').textContent.includes('exec-second-line-live')`) {
		t.Fatal("the exec's second line is shown before it could print it")
	}
	if !eval[bool](t, b, `/^exec/.test(document.getElementById('live-head').textContent) && /running/.test(document.getElementById('live-head').textContent)`) {
		t.Errorf("the live output's head is %q, want the running exec", eval[string](t, b, `document.getElementById('live-head').textContent`))
	}
	var running client.LiveExec
	if les, err := d.CL.LiveExecs(ctx, ws.ID); err != nil {
		t.Fatalf("live execs: %v", err)
	} else {
		for _, e := range les {
			if e.State == "running" && strings.Contains(strings.Join(e.Argv, " "), "exec-first-line") {
				running = e
			}
		}
	}
	if running.ID == "" {
		t.Fatal("the running exec is not among the workspace's live execs")
	}
	followed := make(chan string, 1)
	go func() {
		var got strings.Builder
		end, err := d.CL.FollowLiveExecOutput(ctx, running.ID, client.LogOptions{}, func(l client.ProcessLogs) error {
			got.WriteString(l.Data)
			return nil
		})
		followed <- fmt.Sprintf("%s|state=%s exit=%d err=%v", got.String(), end.State, end.ExitCode, err)
	}()
	b.shot(t, "tasks-exec-live")
	if _, err := d.CL.ExecBuffered(ctx, ws.ID, client.Exec{Argv: []string{"touch", "/tmp/exec-go-on"}}, nil); err != nil {
		t.Fatalf("touch: %v", err)
	}
	b.waitFor(t, "the exec's second line, live", `document.getElementById('live-output').textContent.includes('exec-second-line-live')`)
	b.waitFor(t, "the exec shown ended", `/exited exit 0/.test(document.getElementById('live-head').textContent)`)
	// The last commands follow the exec.finished events as they come.
	b.waitFor(t, "the exec among the last commands, live", `document.querySelector('table.commands')?.textContent.includes('exec-go-on')`)
	if err := <-execDone; err != nil {
		t.Fatalf("the exec: %v", err)
	}
	if !strings.Contains(execOut.String(), "exec-second-line-live") {
		t.Errorf("the client running the exec got %q", execOut.String())
	}
	if got := <-followed; !strings.Contains(got, "exec-first-line\nexec-second-line-live\n|state=exited exit=0 err=<nil>") {
		t.Errorf("another client following the exec by ID got %q", got)
	}
	b.noInjection(t, "tasks, exec", hostileExecOutput, hostileArg)

	// A workspace: files (a hostile name), the viewer, the diff.
	b.goTo(t, "#/ws/"+ws.ID, "ws")
	b.waitFor(t, "diff", `document.getElementById('diff')?.textContent.includes('dashboard-diff-marker')`)
	if !eval[bool](t, b, `[...document.querySelectorAll('#diff .add')].some(e => e.textContent.includes('dashboard-diff-marker') && e.querySelector('.tok-str'))`) {
		t.Error("the added line is not marked as added with its string highlighted")
	}
	b.do(t, "open the hostile file", chromedp.Evaluate[chromedp.Void](`document.querySelector('button[data-path='+CSS.escape(`+js(hostileFile)+`)+']').click()`))
	b.waitFor(t, "viewer", `document.getElementById('viewer')?.textContent.includes('file-body-marker')`)
	b.waitFor(t, "diff check", `document.querySelector('.findings-box') !== null`)
	b.shot(t, "workspace")
	b.noInjection(t, "workspace", hostileFile, hostileBranch, "dir<b>bold</b>/", "dir<b>bold</", hostileOutput)
	if eval[bool](t, b, `document.getElementById('files').textContent.includes('null')`) {
		t.Error("the file tree shows a stray null")
	}

	// Review: a ready candidate, approved with a reason.
	cand, err := d.CL.Review(ctx, ws.ID, client.ReviewRequest{Test: "true"})
	if err != nil {
		t.Fatalf("review: %v", err)
	}
	if cand.Disposition != "ready" {
		t.Fatalf("candidate %s is %s, want ready (findings %v)", cand.ID, cand.Disposition, cand.Findings)
	}
	b.goTo(t, "#/review", "review")
	sel := `[data-candidate="` + cand.ID + `"]`
	b.waitFor(t, "candidate", `document.querySelector('`+sel+` textarea') !== null`)
	b.shot(t, "review")
	b.noInjection(t, "review", hostileTask, hostileBranch)
	reason := `fine <b>by me</b>`
	b.do(t, "approve", chromedp.SendKeys(chromedp.CSS(sel+" textarea"), reason), chromedp.Click(chromedp.CSS(sel+" button.approve")))
	b.waitFor(t, "approved", `document.querySelector('`+sel+` .badge.approved') !== null`)
	got, err := d.CL.GetCandidate(ctx, cand.ID)
	if err != nil || got.Disposition != "approved" || got.Decision == nil || got.Decision.Reason != reason {
		t.Fatalf("after approving in the browser the candidate is %+v (%v)", got, err)
	}
	b.shot(t, "review-approved")
	b.noInjection(t, "review approved", reason)

	// Events: filter by type, then by object, then see a new one live.
	b.goTo(t, "#/events", "events")
	b.waitFor(t, "events listed", `document.querySelectorAll('#event-rows tr').length > 3`)
	b.do(t, "filter by type", chromedp.SendKeys(chromedp.CSS("#f-type"), "candidate."))
	b.waitFor(t, "type filter", `(() => { const r = [...document.querySelectorAll('#event-rows tr')]; return r.length >= 2 && r.every(e => e.dataset.type.startsWith('candidate.')); })()`)
	b.do(t, "filter by object", chromedp.Evaluate[chromedp.Void](`(() => { const t = document.getElementById('f-type'); t.value = ''; t.dispatchEvent(new Event('input')); })()`),
		chromedp.SendKeys(chromedp.CSS("#f-object"), ws.ID), chromedp.SendKeys(chromedp.CSS("#f-actor"), "api"))
	b.waitFor(t, "object filter", `(() => { const r = [...document.querySelectorAll('#event-rows tr')]; return r.length > 0 && r.every(e => e.textContent.includes(`+js(ws.ID)+`)); })()`)
	before := eval[int](t, b, `document.querySelectorAll('#event-rows tr[data-type="exec.finished"]').length`)
	if _, err := d.CL.ExecBuffered(ctx, ws.ID, client.Exec{Argv: []string{"true"}}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "a new event, live", fmt.Sprintf(`document.querySelectorAll('#event-rows tr[data-type="exec.finished"]').length > %d`, before))
	b.shot(t, "events")
	// Only the ones of the actor typed: the daemon's own are hidden.
	if n := eval[int](t, b, `[...document.querySelectorAll('#event-rows tr')].filter(r => r.children[3].textContent !== 'api').length`); n != 0 {
		t.Errorf("%d rows of another actor under the actor filter", n)
	}
	b.noInjection(t, "events", hostileArg)

	// A page left open stays bounded: 1,100 more events, and the table
	// holds its last 500 rows (the page keeps the last 1,000 events).
	b.do(t, "clear filters", chromedp.Evaluate[chromedp.Void](`for (const id of ['f-type','f-object','f-actor']) { const e = document.getElementById(id); e.value = ''; e.dispatchEvent(new Event('input')); }`))
	for i := range 1100 {
		if _, err := d.CL.WriteFile(ctx, ws.ID, "bulk.txt", strings.NewReader(fmt.Sprint(i)), 0o644, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.CL.WriteFile(ctx, ws.ID, "bulk-end.txt", strings.NewReader("end"), 0o644, false); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the last bulk event", `document.querySelector('#event-rows tr')?.textContent.includes('bulk-end.txt')`)
	if n := eval[int](t, b, `document.querySelectorAll('#event-rows tr').length`); n != 500 {
		t.Errorf("the events table holds %d rows after 1,100 more events, want 500", n)
	}
	// The filters ask the server, not the events in memory: the
	// approval is older than the last 1,000 events and still found.
	approved, err := d.CL.Events(ctx, client.EventFilter{TypePrefix: "candidate.approved", Newest: true, Limit: 1})
	if err != nil || len(approved) != 1 {
		t.Fatalf("the approval's event: %v %v", approved, err)
	}
	if last, err := d.CL.Events(ctx, client.EventFilter{Newest: true, Limit: 1000}); err != nil || len(last) != 1000 || last[999].ID <= approved[0].ID {
		t.Fatalf("the approval (event %d) is not older than the last 1,000 events (%d listed, %v)", approved[0].ID, len(last), err)
	}
	b.do(t, "filter by type, again", chromedp.SendKeys(chromedp.CSS("#f-type"), "candidate.appr"))
	b.waitFor(t, "an event older than the page's memory", fmt.Sprintf(`(() => { const r = [...document.querySelectorAll('#event-rows tr')]; return r.length >= 1 && r.every(e => e.dataset.type.startsWith('candidate.appr')) && r.some(e => e.children[0].textContent === '%d'); })()`, approved[0].ID))
	b.shot(t, "events-filtered")

	// Usage: the tasks' rows and charts, with the solve run's tokens and
	// cost on its attempt's workspace and task.
	deadline := time.Now().Add(5 * time.Minute)
	for run.State == "running" && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if run, err = d.CL.GetSolve(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
	}
	if run.State != "done" || len(run.Attempts) != 1 {
		t.Fatalf("solve run %s: %+v", run.ID, run)
	}
	att := run.Attempts[0]
	if att.Usage.InputTokens != 2000 || att.Usage.OutputTokens != 400 {
		t.Fatalf("the attempt's usage is %+v, want the script's 2000 in, 400 out", att.Usage)
	}
	u, err := d.CL.Usage(ctx, client.UsageFilter{ByWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	var wsRow client.TaskUsage
	for _, x := range u.Workspaces {
		if x.WorkspaceID == att.Workspace {
			wsRow = x
		}
	}
	if wsRow.InputTokens != 2000 || wsRow.OutputTokens != 400 || fmt.Sprintf("%.4f", wsRow.CostUSD) != "0.0144" || wsRow.SolveRun != run.ID || wsRow.Execs == 0 || wsRow.Task != hostileSolveTask {
		t.Errorf("usage of the attempt's workspace %s: %+v", att.Workspace, wsRow)
	}
	b.goTo(t, "#/usage", "usage")
	b.waitFor(t, "usage table", `document.getElementById('usage-table')?.textContent.includes(`+js(hostileTask)+`)`)
	row := `document.querySelector('#usage-ws-table tr[data-ws=` + js(att.Workspace) + `]')`
	b.waitFor(t, "the attempt's workspace row", row+` !== null`)
	for _, want := range []string{run.ID, "2000", "400", "$0.0144", hostileSolveTask} {
		if !eval[bool](t, b, row+`.textContent.includes(`+js(want)+`)`) {
			t.Errorf("the usage row of workspace %s does not show %q: %q", att.Workspace, want, eval[string](t, b, row+`.textContent`))
		}
	}
	taskRow := `[...document.querySelectorAll('#usage-table tr')].find(r => r.dataset.task === ` + js(hostileSolveTask) + `)`
	if got := eval[string](t, b, `(`+taskRow+`||{}).textContent || ''`); !strings.Contains(got, "2000") || !strings.Contains(got, "$0.0144") {
		t.Errorf("the usage row of the solve task shows %q, want its tokens and cost", got)
	}
	for _, c := range []string{"tokens", "cost", "wsTokens"} {
		if n := eval[int](t, b, `document.querySelectorAll('#chart-`+c+` rect.bar').length`); n == 0 {
			t.Errorf("the %s chart has no bars", c)
		}
	}
	b.shot(t, "usage")
	b.noInjection(t, "usage", hostileTask, hostileSolveTask)

	// The tasks page again, now with the commands that ran.
	b.goTo(t, "#/tasks", "tasks")
	b.do(t, "choose the workspace", chromedp.Click(chromedp.CSS(`button[data-ws="`+ws.ID+`"]`)))
	b.waitFor(t, "last commands", `document.querySelectorAll('table.commands tr').length > 2`)
	// An ordinary exec's command line, from its exec.finished event.
	b.waitFor(t, "an exec's command line", `document.querySelector('table.commands').textContent.includes('touch /tmp/go-on')`)
	b.noInjection(t, "tasks again", hostileTask, hostileArg)

	// Keyboard: Tab from the top reaches the skip link, then the pages.
	b.do(t, "reload", chromedp.Navigate(d.URL+"/#/overview"))
	b.waitFor(t, "overview", `document.querySelector('[data-page=overview][data-ready]') !== null`)
	b.do(t, "keyboard", chromedp.KeyEvent("\t"))
	if got := eval[string](t, b, `document.activeElement.className`); got != "skip" {
		t.Errorf("the first Tab focuses %q, want the skip link", got)
	}
	b.do(t, "keyboard", chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"), chromedp.KeyEvent("\r"))
	b.waitFor(t, "tasks by keyboard", `location.hash === '#/tasks' && document.querySelector('[data-page=tasks][data-ready]') !== null`)
	if got := eval[string](t, b, `document.activeElement.id`); got != "main" {
		t.Errorf("after a page change by keyboard the focus is on %q, want the page (main)", got)
	}

	// The overview again, after all that.
	b.goTo(t, "#/overview", "overview")
	b.waitFor(t, "execs counted", `!/^0\.0/.test(document.querySelector('#card-execs .stat')?.textContent || '0.0')`)
	b.shot(t, "overview-after")
	b.noInjection(t, "overview after")

	// A narrow window: nothing wider than the screen.
	b.do(t, "narrow", chromedp.EmulateViewport(420, 800))
	for _, p := range []struct{ hash, page string }{{"#/overview", "overview"}, {"#/ws/" + ws.ID, "ws"}, {"#/review", "review"}} {
		b.goTo(t, p.hash, p.page)
		if w := eval[int](t, b, `document.documentElement.scrollWidth`); w > 430 {
			t.Errorf("%s at 420px wide is %dpx wide", p.hash, w)
		}
		b.shot(t, "narrow-"+p.page)
	}
	t.Logf("screenshots in %s", b.artifacts)
}
