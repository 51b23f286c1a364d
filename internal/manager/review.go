package manager

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/forge/forgeapi"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// Candidate is a result up for review.
type Candidate = apitypes.Candidate

const (
	// defaultReviewTimeout bounds each evidence command.
	defaultReviewTimeout = 10 * time.Minute
	// evidenceOutput is how much of a command's output a candidate keeps
	// (its end, where test runners put their summary).
	evidenceOutput = 8 << 10
	// maxReason bounds a decision's reason.
	maxReason = 2000
)

// Review makes a candidate of workspace wsID: its files as a commit (made
// on its branch when they are not committed yet), judged by evidence that
// agentbox gathers itself: the test and regression commands, each run in a
// fresh sandbox on a fork holding exactly that commit's files, the diff
// check, and the diff's stats. The disposition follows from the evidence
// alone: blocked, naming each failed check, or ready (approved at once when
// the daemon's policy says so). Nothing the agent reports counts.
func (m *Manager) Review(ctx context.Context, wsID string, req apitypes.ReviewRequest) (Candidate, error) {
	if err := checkReviewRequest(req, "review"); err != nil {
		return Candidate{}, err
	}
	w, drv, err := m.ready(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	from := "request"
	if req.Test == "" && req.Regress == "" {
		rc, found, err := m.repoReviewConfig(ctx, w, drv)
		if err != nil {
			return Candidate{}, err
		}
		if found {
			from = RepoConfigFile + " at " + w.BaseCommit
			req.Test, req.Regress = rc.Test, rc.Regress
			if req.Timeout == "" {
				req.Timeout = rc.Timeout
			}
		}
	}
	if err := checkReviewRequest(req, from); err != nil {
		return Candidate{}, err
	}
	timeout := defaultReviewTimeout
	if req.Timeout != "" {
		timeout, _ = time.ParseDuration(req.Timeout)
	}
	msg := req.Message
	if strings.TrimSpace(msg) == "" {
		msg = "Candidate for review"
		if w.Task != "" {
			msg = w.Task
		}
	}
	pol, err := m.lastSandboxPolicy(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	known, err := m.knownSecrets(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	opt := diffcheck.Options{KnownSecrets: known}
	if pol != nil {
		opt.Writable = pol.PathWritable
	}

	// The commit, and what the host can say of it, under the lock.
	l := m.lock(wsID)
	l.Lock()
	g := m.git(w, drv)
	// A review commits whatever the files hold: the check of the tree it
	// commits is its evidence (kept, not run again), and a flagged commit
	// is recorded as forced.
	var (
		check    diffcheck.Report
		checkErr error
		checked  bool
	)
	record := func(ctx context.Context, tree string) error {
		check, checkErr = m.checkTree(ctx, g, w.BaseCommit, tree, opt)
		checked = true
		return nil
	}
	e, err := g.Candidate(ctx, w.BaseCommit, msg, m.cfg.Author, m.cfg.UID, m.cfg.GID, record)
	var (
		files, ins, dels   int
		tipTree, statsNote string
	)
	committed := checked && err == nil && e.Tip == e.Head // Candidate committed the vetted tree
	if err == nil && !committed {
		check, checkErr = m.checkTree(ctx, g, w.BaseCommit, e.Tip, opt)
	}
	forced := committed && checkErr == nil && !check.OK
	if err == nil {
		files, ins, dels, err = g.Stats(ctx, w.BaseCommit, e.Tip)
	}
	if err == nil {
		tipTree, err = g.CommitTree(ctx, e.Tip)
	}
	l.Unlock()
	if err != nil {
		return Candidate{}, named(wsID, err)
	}
	if forced {
		m.event(ctx, store.Event{Type: "workspace.committed", RepoID: w.RepoID, WorkspaceID: wsID},
			map[string]any{"commit": e.Tip, "by": "review", "forced": true, "findings": diffcheck.Summary(check, 20)})
	}
	switch {
	case e.Foreign:
		statsNote = "HEAD is a commit made inside the sandbox, which the host does not read: the candidate is one commit of the files on the last commit agentbox made, kept by agentbox (the workspace's branch is unchanged)"
	case e.Unborn && e.Tip != w.BaseCommit:
		statsNote = "HEAD's branch has no commit yet: the candidate is one commit of the files on the base, kept by agentbox (the workspace's branch is unchanged)"
	}

	now := time.Now().UTC()
	c := Candidate{ID: ids.New("cand"), WorkspaceID: wsID, RepoID: w.RepoID, Task: w.Task, Commit: e.Tip, BaseCommit: w.BaseCommit,
		Branch: e.Branch, Findings: []string{}, CreatedAt: now, UpdatedAt: now,
		Evidence: apitypes.Evidence{CommandsFrom: from, Check: check, Stats: apitypes.DiffStats{Files: files, Insertions: ins, Deletions: dels}, Note: statsNote}}
	if checkErr != nil {
		c.Findings = append(c.Findings, "check: the diff could not be checked: "+checkErr.Error())
	}
	for _, f := range check.OutsideWritable {
		c.Findings = append(c.Findings, fmt.Sprintf("check: %s (%s) is outside the writable paths", f.Path, f.Status))
	}
	for _, s := range check.Secrets {
		c.Findings = append(c.Findings, fmt.Sprintf("check: %s at %s:%d:%d: %s", s.Kind, s.Path, s.Line, s.Column, s.Excerpt))
	}
	if check.Truncated {
		c.Findings = append(c.Findings, "check: more findings than shown")
	}
	if e.Tip == w.BaseCommit {
		c.Findings = append(c.Findings, "change: none: the candidate is the base commit")
	}

	// The commands, each in a fresh sandbox on a fork of exactly tipTree.
	if req.Test == "" {
		c.Findings = append(c.Findings, "tests: no test command given: nothing shows the change works")
	} else {
		ev, err := m.evidence(ctx, wsID, req.Test, tipTree, timeout)
		if err != nil {
			return Candidate{}, err
		}
		c.Evidence.Tests = ev
		if !ev.Passed {
			c.Findings = append(c.Findings, "tests: "+failure(ev))
		}
	}
	if req.Regress != "" {
		ev, err := m.evidence(ctx, wsID, req.Regress, tipTree, timeout)
		if err != nil {
			return Candidate{}, err
		}
		c.Evidence.Regress = ev
		if !ev.Passed {
			c.Findings = append(c.Findings, "regression: "+failure(ev))
		}
	}

	c.Disposition = apitypes.DispositionReady
	if len(c.Findings) > 0 {
		c.Disposition = apitypes.DispositionBlocked
	} else if m.cfg.AutoApprove {
		c.Disposition = apitypes.DispositionApproved
		c.Decision = &apitypes.Decision{Disposition: apitypes.DispositionApproved, Actor: "policy", Reason: "every check passed (auto_approve)", At: now}
	}
	if err := m.st.CreateCandidate(ctx, c); err != nil {
		return Candidate{}, err
	}
	m.event(ctx, store.Event{Type: "candidate.created", RepoID: w.RepoID, WorkspaceID: wsID},
		map[string]any{"candidate": c.ID, "commit": c.Commit, "disposition": c.Disposition, "findings": c.Findings})
	if c.Decision != nil {
		m.event(ctx, store.Event{Type: "candidate.approved", Actor: "policy", RepoID: w.RepoID, WorkspaceID: wsID},
			map[string]any{"candidate": c.ID, "reason": c.Decision.Reason})
	}
	return c, nil
}

// RepoConfigFile is the repository file a review reads its commands from
// when the request names none, as of the workspace's base commit.
const RepoConfigFile = ".agentbox.yaml"

// repoReviewConfig is the review section of the repository's
// RepoConfigFile at the workspace's base commit.
func (m *Manager) repoReviewConfig(ctx context.Context, w store.Workspace, drv workspace.Driver) (apitypes.ReviewRequest, bool, error) {
	l := m.lock(w.ID)
	l.Lock()
	b, ok, err := m.git(w, drv).FileAt(ctx, w.BaseCommit, RepoConfigFile, 64<<10)
	l.Unlock()
	if err != nil {
		return apitypes.ReviewRequest{}, false, named(w.ID, err)
	}
	if !ok {
		return apitypes.ReviewRequest{}, false, nil
	}
	var doc struct {
		Review struct {
			Test    string `json:"test"`
			Regress string `json:"regress"`
			Timeout string `json:"timeout"`
		} `json:"review"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return apitypes.ReviewRequest{}, false, errdefs.Invalid("%s at %s: %v", RepoConfigFile, w.BaseCommit, err)
	}
	r := doc.Review
	return apitypes.ReviewRequest{Test: r.Test, Regress: r.Regress, Timeout: r.Timeout}, r.Test != "" || r.Regress != "", nil
}

// checkReviewRequest checks the commands and timeout of a review, from
// the request or the repository's file (from names which).
func checkReviewRequest(req apitypes.ReviewRequest, from string) error {
	if req.Timeout != "" {
		if d, err := time.ParseDuration(req.Timeout); err != nil || d <= 0 {
			return errdefs.Invalid("review timeout %q (%s) is not a positive duration", req.Timeout, from)
		}
	}
	for what, cmd := range map[string]string{"test": req.Test, "regression": req.Regress} {
		if len(cmd) > 4096 || strings.ContainsRune(cmd, 0) || !utf8.ValidString(cmd) {
			return errdefs.Invalid("the %s command (%s) is not a valid command line (at most 4096 bytes of text)", what, from)
		}
	}
	return nil
}

// checkTree runs the diff check on a tree or commit of hostgit against
// base.
func (m *Manager) checkTree(ctx context.Context, g workspace.Git, base, tree string, opt diffcheck.Options) (diffcheck.Report, error) {
	changes, err := g.TreeChanges(ctx, base, tree)
	if err != nil {
		return diffcheck.Report{}, err
	}
	d, err := g.TreeDiff(ctx, base, tree)
	if err != nil {
		return diffcheck.Report{}, err
	}
	return diffcheck.Check(changes, d, opt), nil
}

// evidence runs cmd in a fresh sandbox on a fork of workspace wsID whose
// files are exactly tree, and removes the fork after.
func (m *Manager) evidence(ctx context.Context, wsID, cmd, tree string, timeout time.Duration) (*apitypes.CommandEvidence, error) {
	fork, err := m.ForkWorkspace(ctx, wsID, ForkRequest{})
	if err != nil {
		return nil, fmt.Errorf("review of %s: forking for the evidence: %w", wsID, err)
	}
	defer func() {
		if err := m.RemoveWorkspace(context.WithoutCancel(ctx), fork.ID); err != nil {
			m.log.WarnContext(ctx, "removing a review's fork", "workspace_id", fork.ID, "err", err)
		}
	}()
	fw, fdrv, err := m.ready(ctx, fork.ID)
	if err != nil {
		return nil, err
	}
	got, err := m.git(fw, fdrv).Tree(ctx)
	if err != nil {
		return nil, named(fork.ID, err)
	}
	if got != tree {
		return nil, fmt.Errorf("workspace %s changed while its candidate was made (a command still running there?): review it again once it is quiet: %w", wsID, errdefs.ErrConflict)
	}
	out, err := m.ExecBuffered(ctx, fork.ID, apitypes.ExecRequest{Sh: cmd, Timeout: timeout.String(), MaxOutputBytes: 256 << 10}, nil)
	if err != nil {
		return nil, fmt.Errorf("review of %s: running %q: %w", wsID, cmd, err)
	}
	ev := &apitypes.CommandEvidence{Command: cmd, ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut, OOM: out.OOM,
		DurationMS: out.DurationMS, CPUMS: out.CPUNanos / 1e6, Sandbox: out.SandboxID, Output: tailText(out.Stdout+out.Stderr, evidenceOutput)}
	ev.Passed = out.ExitCode == 0 && out.Signal == 0 && !out.TimedOut && !out.OOM && !out.Lost
	return ev, nil
}

// failure says how a command failed.
func failure(ev *apitypes.CommandEvidence) string {
	switch {
	case ev.TimedOut:
		return fmt.Sprintf("%q timed out", ev.Command)
	case ev.OOM:
		return fmt.Sprintf("%q ran out of memory", ev.Command)
	case ev.Signal != 0:
		return fmt.Sprintf("%q was killed by signal %d", ev.Command, ev.Signal)
	}
	return fmt.Sprintf("%q exited %d", ev.Command, ev.ExitCode)
}

// tailText is the end of s, at most max bytes, cut at a rune.
func tailText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "[…]" + s
}

// GetCandidate returns a candidate.
func (m *Manager) GetCandidate(ctx context.Context, id string) (Candidate, error) {
	return m.st.GetCandidate(ctx, id)
}

// ListCandidates returns a workspace's candidates, newest first.
func (m *Manager) ListCandidates(ctx context.Context, wsID string) ([]Candidate, error) {
	if _, err := m.GetWorkspace(ctx, wsID); err != nil {
		return nil, err
	}
	return m.st.ListCandidates(ctx, wsID)
}

// Decide approves or rejects candidate id for actor, with a reason. Only a
// ready candidate can be approved: a blocked one is refused with its
// findings. A blocked or ready one can be rejected. A decision is final.
func (m *Manager) Decide(ctx context.Context, id, disposition, actor, reason string) (Candidate, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case disposition != apitypes.DispositionApproved && disposition != apitypes.DispositionRejected:
		return Candidate{}, errdefs.Invalid("decision %q is not approved or rejected", disposition)
	case reason == "":
		return Candidate{}, errdefs.Invalid("a decision needs a reason")
	case len(reason) > maxReason || !utf8.ValidString(reason):
		return Candidate{}, errdefs.Invalid("the reason is not text of at most %d bytes", maxReason)
	}
	if actor = strings.TrimSpace(actor); actor == "" {
		actor = "api"
	}
	c, err := m.st.GetCandidate(ctx, id)
	if err != nil {
		return Candidate{}, err
	}
	from := c.Disposition
	switch {
	case from == apitypes.DispositionBlocked && disposition == apitypes.DispositionApproved:
		return Candidate{}, fmt.Errorf("candidate %s is blocked and cannot be approved: %s: %w", id, strings.Join(c.Findings, "; "), errdefs.ErrConflict)
	case from == apitypes.DispositionApproved || from == apitypes.DispositionRejected:
		by := ""
		if c.Decision != nil {
			by = fmt.Sprintf(" (by %s: %s)", c.Decision.Actor, c.Decision.Reason)
		}
		return Candidate{}, fmt.Errorf("candidate %s is already %s%s: %w", id, from, by, errdefs.ErrConflict)
	}
	now := time.Now().UTC()
	c.Disposition, c.UpdatedAt = disposition, now
	c.Decision = &apitypes.Decision{Disposition: disposition, Actor: actor, Reason: reason, At: now}
	if err := m.st.UpdateCandidate(ctx, c, from); err != nil {
		return Candidate{}, err
	}
	m.event(ctx, store.Event{Type: "candidate." + disposition, Actor: actor, RepoID: c.RepoID, WorkspaceID: c.WorkspaceID},
		map[string]any{"candidate": c.ID, "commit": c.Commit, "reason": reason})
	return c, nil
}

// latestApproved is the newest approved candidate of a workspace.
func (m *Manager) latestApproved(ctx context.Context, wsID string) (Candidate, error) {
	cs, err := m.ListCandidates(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	for _, c := range cs {
		if c.Disposition == apitypes.DispositionApproved {
			return c, nil
		}
	}
	if len(cs) == 0 {
		return Candidate{}, fmt.Errorf("workspace %s has no candidate: review it first (agentbox review %s --test CMD): %w", wsID, wsID, errdefs.ErrConflict)
	}
	return Candidate{}, fmt.Errorf("workspace %s has no approved candidate (the newest, %s, is %s): %w", wsID, cs[0].ID, cs[0].Disposition, errdefs.ErrConflict)
}

// DefaultPushBranch is the branch template of a push: {task} is the task
// made a safe branch word, {ws} the workspace, {repo} the repo.
const DefaultPushBranch = "agentbox/{task}/{ws}"

// pushBranch is the branch workspace w's candidates are pushed to: the
// daemon's template (push_branch), with an empty {task} and its slash
// dropped when the workspace has none.
func (m *Manager) pushBranch(ctx context.Context, w store.Workspace) (string, error) {
	tmpl := m.cfg.PushBranch
	if tmpl == "" {
		tmpl = DefaultPushBranch
	}
	task := taskWord(w.Task)
	b := strings.NewReplacer("{task}", task, "{ws}", w.ID, "{repo}", w.RepoID).Replace(tmpl)
	for strings.Contains(b, "//") {
		b = strings.ReplaceAll(b, "//", "/")
	}
	b = strings.Trim(b, "/")
	if err := workspace.ValidBranch(ctx, b); err != nil {
		return "", fmt.Errorf("push_branch %q gives %q for workspace %s: %w", tmpl, b, w.ID, err)
	}
	return b, nil
}

// taskWord is a task label as a branch word: lower case letters and
// digits, other runs as one dash, at most 40 bytes.
func taskWord(task string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(task) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// Push sends the newest approved candidate of workspace wsID to its repo's
// remote, on PushBranch, from the host (never the sandbox), with the token
// of the forge bound to the remote's host, if any. It never forces and
// never pushes to the remote's default branch or to a branch the binding
// protects. Pushing the same commit again does nothing.
func (m *Manager) Push(ctx context.Context, wsID string) (Candidate, error) {
	c, err := m.latestApproved(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	if c.Push != nil && c.Push.Commit == c.Commit {
		return c, nil
	}
	w, drv, err := m.ready(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	repo, err := m.st.GetRepo(ctx, w.RepoID)
	if err != nil {
		return Candidate{}, err
	}
	remote := repo.URL
	if strings.HasPrefix(remote, "agentbox://") {
		return Candidate{}, fmt.Errorf("workspace %s has no remote to push to (it was made from %s): export it with ws export --bundle or ws diff --format patch: %w", wsID, remote, errdefs.ErrConflict)
	}
	branch, err := m.pushBranch(ctx, w)
	if err != nil {
		return Candidate{}, err
	}
	binding, auth, err := m.forgeAuth(ctx, remote)
	if err != nil {
		return Candidate{}, err
	}
	protected := append([]string{repo.DefaultBranch}, binding.Protected...)
	for _, p := range protected {
		if ok, _ := path.Match(p, branch); p != "" && ok {
			return Candidate{}, fmt.Errorf("workspace %s: branch %s is protected (%s): agentbox does not push to it: %w", wsID, branch, p, errdefs.ErrConflict)
		}
	}
	l := m.lock(wsID)
	l.Lock()
	err = m.git(w, drv).Push(ctx, remote, c.Commit, branch, auth)
	l.Unlock()
	if err != nil {
		m.event(ctx, store.Event{Type: "candidate.push_failed", RepoID: c.RepoID, WorkspaceID: wsID},
			map[string]any{"candidate": c.ID, "remote": remote, "branch": branch, "error": err.Error()})
		return Candidate{}, named(wsID, err)
	}
	now := time.Now().UTC()
	c.Push = &apitypes.PushRecord{Remote: remote, Branch: branch, Commit: c.Commit, At: now}
	c.UpdatedAt = now
	if err := m.st.UpdateCandidate(ctx, c, apitypes.DispositionApproved); err != nil {
		return Candidate{}, err
	}
	m.event(ctx, store.Event{Type: "candidate.pushed", RepoID: c.RepoID, WorkspaceID: wsID},
		map[string]any{"candidate": c.ID, "remote": remote, "branch": branch, "commit": c.Commit})
	return c, nil
}

// forgeAuth is the forge binding of remote's host and the credential it
// names; a remote without a binding (or a local path) pushes without one.
func (m *Manager) forgeAuth(ctx context.Context, remote string) (store.ForgeBinding, *workspace.PushAuth, error) {
	u, err := url.Parse(remote)
	if err != nil || u.Host == "" {
		return store.ForgeBinding{}, nil, nil
	}
	b, err := m.st.GetForge(ctx, u.Host)
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.ForgeBinding{}, nil, nil
	}
	if err != nil {
		return b, nil, err
	}
	if m.cfg.Secrets == nil {
		return b, nil, fmt.Errorf("forge %s names secret %s, but the daemon has no secret store: %w", b.Host, b.Secret, errdefs.ErrUnavailable)
	}
	tok, err := m.cfg.Secrets.Reveal(ctx, b.Secret)
	if err != nil {
		return b, nil, fmt.Errorf("forge %s: its secret %s: %w", b.Host, b.Secret, err)
	}
	return b, &workspace.PushAuth{User: b.User, Token: string(tok)}, nil
}

// forgeKinds are the forge APIs agentbox speaks.
var forgeKinds = map[string]bool{"github": true, "gitlab": true, "gitea": true}

// SetForge binds a forge host: its API kind and the stored secret with
// the token for push and pull requests.
func (m *Manager) SetForge(ctx context.Context, f store.ForgeBinding) (store.ForgeBinding, error) {
	switch {
	case f.Host == "" || strings.ContainsAny(f.Host, "/@?# \t\n") || len(f.Host) > 255:
		return f, errdefs.Invalid("forge host %q is not a host[:port]", f.Host)
	case !forgeKinds[f.Kind]:
		return f, errdefs.Invalid("forge %s: kind %q is not github, gitlab or gitea", f.Host, f.Kind)
	case f.Secret == "":
		return f, errdefs.Invalid("forge %s: no secret named for its token", f.Host)
	case strings.ContainsAny(f.User, ":\n\r"):
		return f, errdefs.Invalid("forge %s: user %q", f.Host, f.User)
	}
	if f.APIURL != "" {
		u, err := url.Parse(f.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return f, errdefs.Invalid("forge %s: API URL %q is not an http(s) URL without credentials", f.Host, f.APIURL)
		}
		// The token crosses the network in clear over http: only to a
		// forge on this machine.
		if u.Scheme == "http" && !forgeapi.Loopback(u.Hostname()) {
			return f, errdefs.Invalid("forge %s: API URL %q: plain http only to a loopback host; use https", f.Host, f.APIURL)
		}
	}
	for _, p := range f.Protected {
		if _, err := path.Match(p, ""); err != nil {
			return f, errdefs.Invalid("forge %s: protected pattern %q: %v", f.Host, p, err)
		}
	}
	if m.cfg.Secrets == nil {
		return f, fmt.Errorf("forge %s: the daemon has no secret store: %w", f.Host, errdefs.ErrUnavailable)
	}
	secs, err := m.cfg.Secrets.List(ctx)
	if err != nil {
		return f, err
	}
	if !slices.ContainsFunc(secs, func(s store.SealedSecret) bool { return s.Name == f.Secret }) {
		return f, fmt.Errorf("forge %s: secret %s: %w (store it first: agentbox secret set %s)", f.Host, f.Secret, errdefs.ErrNotFound, f.Secret)
	}
	now := time.Now().UTC()
	f.CreatedAt, f.UpdatedAt = now, now
	if err := m.st.PutForge(ctx, f); err != nil {
		return f, err
	}
	m.event(ctx, store.Event{Type: "forge.set"}, map[string]any{"host": f.Host, "kind": f.Kind, "secret": f.Secret})
	return m.st.GetForge(ctx, f.Host)
}

// ListForges lists the forge bindings by host.
func (m *Manager) ListForges(ctx context.Context) ([]store.ForgeBinding, error) {
	return m.st.ListForges(ctx)
}

// RemoveForge drops a host's binding (the secret stays).
func (m *Manager) RemoveForge(ctx context.Context, host string) error {
	if err := m.st.DeleteForge(ctx, host); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "forge.removed"}, map[string]any{"host": host})
	return nil
}

// PullRequest pushes the newest approved candidate of workspace wsID (see
// Push) and opens a pull request for it on the forge bound to the remote's
// host, or updates the open one of the same branch: title from the task,
// body from the candidate's evidence, labeled agentbox. Its number and URL
// are recorded on the candidate.
func (m *Manager) PullRequest(ctx context.Context, wsID string) (Candidate, error) {
	c, err := m.Push(ctx, wsID)
	if err != nil {
		return Candidate{}, err
	}
	remote, err := forgeapi.ParseRemote(c.Push.Remote)
	if err != nil {
		return Candidate{}, fmt.Errorf("workspace %s: a pull request needs a forge remote: %w", wsID, err)
	}
	binding, auth, err := m.forgeAuth(ctx, c.Push.Remote)
	if err != nil {
		return Candidate{}, err
	}
	if auth == nil {
		return Candidate{}, fmt.Errorf("workspace %s: no forge is bound to %s (agentbox forge set %s --kind ... --secret ...): %w", wsID, remote.Host, remote.Host, errdefs.ErrConflict)
	}
	if m.cfg.Forges == nil {
		return Candidate{}, fmt.Errorf("workspace %s: this daemon has no forge client (manager.Config.Forges): %w", wsID, errdefs.ErrUnavailable)
	}
	f, err := m.cfg.Forges(binding.Kind, binding.APIURL, auth.Token)
	if err != nil {
		return Candidate{}, err
	}
	base, err := f.DefaultBranch(ctx, remote)
	if err != nil {
		return Candidate{}, err
	}
	title := c.Task
	if title == "" {
		title = "agentbox: changes of " + wsID
	}
	pr, err := f.OpenOrUpdatePR(ctx, remote, forgeapi.PRRequest{Head: c.Push.Branch, Base: base, Title: title, Body: prBody(c), Labels: []string{"agentbox"}})
	if err != nil {
		m.event(ctx, store.Event{Type: "candidate.pr_failed", RepoID: c.RepoID, WorkspaceID: wsID},
			map[string]any{"candidate": c.ID, "forge": binding.Host, "error": err.Error()})
		return Candidate{}, err
	}
	now := time.Now().UTC()
	c.PR = &apitypes.PRRecord{Forge: binding.Host, Number: pr.Number, URL: pr.URL, Updated: pr.Updated, At: now}
	c.UpdatedAt = now
	if err := m.st.UpdateCandidate(ctx, c, apitypes.DispositionApproved); err != nil {
		return Candidate{}, err
	}
	m.event(ctx, store.Event{Type: "candidate.pr", RepoID: c.RepoID, WorkspaceID: wsID},
		map[string]any{"candidate": c.ID, "number": pr.Number, "url": pr.URL, "updated": pr.Updated, "notes": pr.Notes})
	return c, nil
}

// prBody is a pull request's description: the candidate's evidence, which
// agentbox gathered, and where to find the candidate.
func prBody(c Candidate) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Candidate `%s` of workspace `%s`, commit `%s` on base `%s`, approved by %s: %s\n\n",
		c.ID, c.WorkspaceID, c.Commit, c.BaseCommit, c.Decision.Actor, c.Decision.Reason)
	b.WriteString("### Evidence gathered by agentbox\n\n")
	for _, ev := range []struct {
		name string
		e    *apitypes.CommandEvidence
	}{{"Tests", c.Evidence.Tests}, {"Regression", c.Evidence.Regress}} {
		if ev.e == nil {
			continue
		}
		res := "passed"
		if !ev.e.Passed {
			res = failure(ev.e)
		}
		fmt.Fprintf(&b, "- **%s**: `%s`: %s in %.1f s, in a fresh sandbox on exactly this commit\n", ev.name, ev.e.Command, res, float64(ev.e.DurationMS)/1000)
	}
	if c.Evidence.Check.OK {
		b.WriteString("- **Diff check**: no changed path outside the writable paths, no secret in the added lines\n")
	}
	s := c.Evidence.Stats
	fmt.Fprintf(&b, "- **Change**: %d file(s), +%d −%d\n", s.Files, s.Insertions, s.Deletions)
	if c.Evidence.Tests != nil && c.Evidence.Tests.Output != "" {
		fmt.Fprintf(&b, "\n<details><summary>Test output (end)</summary>\n\n```\n%s\n```\n</details>\n", tailText(strings.ReplaceAll(c.Evidence.Tests.Output, "```", "'''"), 2000))
	}
	fmt.Fprintf(&b, "\nSee it with `agentbox review %s`.\n", c.WorkspaceID)
	return b.String()
}
