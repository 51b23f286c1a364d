// Package diffcheck checks a workspace's result before it leaves as a diff,
// a commit, a branch or a pull request: which changed paths lie outside the
// policy's writable paths, and which added lines look like secrets.
//
// It is pure: it reads only the change list and the unified diff it is
// given, so the manager can run it on what git produced and tests can run
// it on literal text. A secret is never copied whole into a Report, a log
// line or an error: findings carry a redacted excerpt (see Redact), because
// the report itself is shown to the agent and to whoever reviews it.
package diffcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/workspace"
)

// MaxFindings caps each list of a Report. A diff of generated files can
// hold a key on every line; past this many the report says Truncated
// rather than growing with the diff.
const MaxFindings = 1000

// MinKnownSecret is the shortest known secret value that is looked for.
// Shorter values ("test", "1234") occur by chance in ordinary code too
// often for a match to mean anything.
const MinKnownSecret = 8

// Change is one changed path, as the workspace's status lists it. It is
// the workspace's own type so that a status can be passed unconverted.
type Change = workspace.Change

// Options says what to check a diff against.
type Options struct {
	// Writable reports whether the sandbox may change rel, a
	// slash-separated path relative to the workspace (policy.PathWritable
	// fits). Nil means everything is writable.
	Writable func(rel string) bool
	// KnownSecrets are exact values to look for in added lines, such as
	// the daemon's stored secrets. Values shorter than MinKnownSecret
	// bytes are skipped as too likely to match by chance. A value of
	// several lines is looked for line by line (the diff holds it as
	// separate added lines), each of its lines under the same length rule.
	KnownSecrets []string
}

// Report is the outcome of a check, the API's apitypes.DiffReport: Check
// leaves its ID, the workspace's, to the caller.
type Report = apitypes.DiffReport

// PathFinding is one changed path outside the writable paths.
type PathFinding = apitypes.PathFinding

// Kinds of secret findings.
const (
	KindAWSAccessKeyID     = "aws-access-key-id"
	KindAWSSecretAccessKey = "aws-secret-access-key"
	KindGitHubToken        = "github-token"
	KindSlackToken         = "slack-token"
	KindGoogleAPIKey       = "google-api-key"
	KindStripeLiveKey      = "stripe-live-key"
	KindPrivateKey         = "private-key"
	KindJWT                = "jwt"
	KindKnownSecret        = "known-secret"
)

// SecretFinding is one added line that looks like it holds a secret;
// its Kind is one of the Kind constants, its Excerpt redacted by Redact.
type SecretFinding = apitypes.SecretFinding

// Check judges changes and the unified diff from the same workspace. Paths
// come from both: the change list names every changed path, and the diff
// adds the two sides of a rename (a change list made without rename
// detection shows them as a delete and an add, which are judged alike).
// Only added lines are scanned for secrets: a removed secret is not
// leaving. Binary patches are skipped. Check never fails: a line it cannot
// parse is ignored.
func Check(changes []Change, diff []byte, opt Options) Report {
	files := parseDiff(diff)
	r := Report{
		OutsideWritable: outsideWritable(changes, files, opt.Writable),
		Secrets:         scanSecrets(files, knownSecrets(opt.KnownSecrets)),
	}
	r.OutsideWritable, r.Truncated = capped(r.OutsideWritable, r.Truncated)
	r.Secrets, r.Truncated = capped(r.Secrets, r.Truncated)
	r.OK = len(r.OutsideWritable) == 0 && len(r.Secrets) == 0
	return r
}

func capped[T any](s []T, truncated bool) ([]T, bool) {
	if len(s) > MaxFindings {
		return s[:MaxFindings:MaxFindings], true
	}
	return s, truncated
}

// outsideWritable lists the paths of changes and of the diff's files that
// writable refuses, one finding per path.
func outsideWritable(changes []Change, files []fileDiff, writable func(string) bool) []PathFinding {
	out := []PathFinding{}
	if writable == nil {
		return out
	}
	byPath := map[string]*PathFinding{}
	add := func(f PathFinding) {
		if f.Path == "" {
			return
		}
		if have, ok := byPath[f.Path]; ok {
			// The change list's status stands; the diff adds what it
			// knows of renames.
			have.RenamedFrom = cmp.Or(have.RenamedFrom, f.RenamedFrom)
			have.RenamedTo = cmp.Or(have.RenamedTo, f.RenamedTo)
			return
		}
		byPath[f.Path] = &f
	}
	for _, c := range changes {
		add(PathFinding{Path: c.Path, Status: c.Status})
	}
	for _, f := range files {
		switch {
		case f.renameFrom != "" || f.renameTo != "":
			add(PathFinding{Path: f.renameFrom, Status: "R", RenamedTo: f.renameTo})
			add(PathFinding{Path: f.renameTo, Status: "R", RenamedFrom: f.renameFrom})
		case f.deleted:
			add(PathFinding{Path: f.oldPath, Status: "D"})
		case f.created:
			add(PathFinding{Path: f.newPath, Status: "A"})
		default:
			add(PathFinding{Path: cmp.Or(f.newPath, f.oldPath), Status: "M"})
			if f.oldPath != f.newPath {
				add(PathFinding{Path: f.oldPath, Status: "M"})
			}
		}
	}
	for _, f := range byPath {
		if !writable(f.Path) {
			out = append(out, *f)
		}
	}
	slices.SortFunc(out, func(a, b PathFinding) int { return cmp.Compare(a.Path, b.Path) })
	return out
}

// scanSecrets runs every detector over every added line of files.
func scanSecrets(files []fileDiff, known []string) []SecretFinding {
	out := []SecretFinding{}
	for _, f := range files {
		path := f.secretPath()
		for _, l := range f.added {
			for _, m := range findSecrets(l.text, known) {
				out = append(out, SecretFinding{Path: path, Line: l.num, Column: m.start + 1, Kind: m.kind, Excerpt: Redact(l.text[m.start:m.end])})
			}
		}
	}
	slices.SortFunc(out, compareSecrets)
	// A file listed twice in a diff would report its lines twice.
	return slices.CompactFunc(out, func(a, b SecretFinding) bool { return compareSecrets(a, b) == 0 })
}

func compareSecrets(a, b SecretFinding) int {
	return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
		cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Excerpt, b.Excerpt))
}

// Summary names the findings of r on one line, at most max of them, each
// secret by its redacted excerpt only: fit for an error or a log.
func Summary(r Report, max int) string {
	var parts []string
	for _, f := range r.OutsideWritable {
		parts = append(parts, fmt.Sprintf("%s (%s) outside the writable paths", f.Path, f.Status))
	}
	for _, s := range r.Secrets {
		parts = append(parts, fmt.Sprintf("%s:%d:%d: %s %s", s.Path, s.Line, s.Column, s.Kind, s.Excerpt))
	}
	more := len(parts) - max
	if more > 0 {
		parts = parts[:max]
	}
	out := strings.Join(parts, "; ")
	if more > 0 || r.Truncated {
		out += "; and more"
	}
	return out
}
