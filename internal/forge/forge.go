// Package forge opens and updates pull requests on the forges a workspace's
// result can leave to: GitHub, GitLab and Gitea (Forgejo speaks Gitea's API).
//
// It runs on the host side with the host's token; nothing here ever runs
// in, or is reachable from, a sandbox. Every implementation speaks the
// forge's documented REST API over plain net/http: the three APIs are small
// enough that a client library per forge would cost more than it saves.
//
// Errors name the forge, the repository, the request and the HTTP status,
// carry an errdefs class (not found, unauthorized, conflict, invalid,
// unavailable), and never contain the token, even when a server echoes it.
package forge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Remote is a parsed git remote URL of a forge repository.
type Remote struct {
	// Host is the forge's host, with a port when the URL had one.
	Host string
	// Owner is the user or organisation; on GitLab it may be a group path
	// "a/b".
	Owner string
	// Repo is the repository's name, without ".git".
	Repo string
}

// String is the repository's full name, "owner/repo".
func (r Remote) String() string { return r.Owner + "/" + r.Repo }

// ParseRemote parses an https remote URL (http only for a forge on
// loopback) of the form scheme://host[:port]/owner/repo[.git]. It refuses credentials in
// the URL (a token there would end up in the database and in logs), other
// schemes (ssh, file, ext: the push runs with an HTTP token only), a query
// or fragment, and path segments that are empty, "." or "..", or hold
// characters no forge allows in a name.
func ParseRemote(rawURL string) (Remote, error) {
	bad := func(why string) (Remote, error) {
		return Remote{}, fmt.Errorf("forge remote %q: %s: %w", redactURL(rawURL), why, errdefs.ErrInvalid)
	}
	if strings.ContainsAny(rawURL, " \t\r\n\x00\\") {
		return bad("holds whitespace, a control character or a backslash")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return bad("scheme must be https")
	}
	if u.User != nil {
		return bad("credentials in the URL are refused: give the token through the secret store")
	}
	if u.Host == "" || u.Hostname() == "" {
		return bad("no host")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return bad("plain http would send the token in clear: https is needed for a host other than loopback")
	}
	if u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(rawURL, "#") {
		return bad("a query or fragment is refused")
	}
	if u.RawPath != "" {
		return bad("percent-encoded path")
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(segs) < 2 {
		return bad("path must be /owner/repo")
	}
	for _, s := range segs {
		if !validSegment(s) {
			return bad(fmt.Sprintf("path segment %q is not a valid owner or repository name", s))
		}
	}
	return Remote{
		Host:  strings.ToLower(u.Host),
		Owner: strings.Join(segs[:len(segs)-1], "/"),
		Repo:  segs[len(segs)-1],
	}, nil
}

// loopback says whether host is this machine's loopback: the one place a
// token may travel over plain http (a test forge, a local tunnel).
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validSegment accepts the characters GitHub, GitLab and Gitea allow in
// user, group and repository names, and nothing that could change a path.
func validSegment(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 255 {
		return false
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// redactURL drops userinfo so that a refused URL can be named in an error.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.Index(raw, "@"); i >= 0 {
			if j := strings.Index(raw, "://"); j >= 0 && j < i {
				return raw[:j+3] + "REDACTED@" + raw[i+1:]
			}
		}
		return raw
	}
	u.User = url.User("REDACTED")
	return u.String()
}

// PRRequest is a pull request to open or update.
type PRRequest struct {
	// Head is the branch holding the change, in the same repository.
	Head string
	// Base is the branch the change is proposed for.
	Base string
	// Title and Body are the pull request's text (Markdown body).
	Title, Body string
	// Labels are added by name. Labels are only ever added, never removed,
	// so that a label a reviewer set survives an update.
	Labels []string
}

// PR is a pull request (a merge request on GitLab) as the forge reports it.
type PR struct {
	// Number is the forge's number for it in the repository (GitLab's iid).
	Number int
	// URL is its web page.
	URL string
	// State is the forge's word: "open" (GitHub, Gitea) or "opened" (GitLab).
	State string
	// Updated: an open PR of the same head was updated instead of a new one made.
	Updated bool
	// Notes say what was done differently from the request without failing
	// it, e.g. a label that could not be set. The PR exists either way.
	Notes []string
}

// Forge is one forge's pull request API. Implementations hold no state
// between calls and are safe for concurrent use.
type Forge interface {
	// Kind is "github", "gitlab" or "gitea".
	Kind() string
	// DefaultBranch is the repository's default branch.
	DefaultBranch(ctx context.Context, r Remote) (string, error)
	// OpenOrUpdatePR opens a PR from Head to Base, or, when an open PR of the
	// same head branch exists, updates its title, body and base and adds the
	// labels. A label failure is a note on the PR, not an error: the PR is
	// there, and its number must reach the caller.
	OpenOrUpdatePR(ctx context.Context, r Remote, req PRRequest) (PR, error)
}

// The kinds New accepts.
const (
	KindGitHub = "github"
	KindGitLab = "gitlab"
	KindGitea  = "gitea"
)

// Config selects and configures a forge.
type Config struct {
	// Kind is github, gitlab or gitea (also for Forgejo).
	Kind string
	// APIURL is the API's base URL. Empty means the default for the kind
	// and the remote's host: https://api.github.com for github.com and
	// https://HOST/api/v3 for GitHub Enterprise; https://HOST/api/v4 for
	// GitLab; https://HOST/api/v1 for Gitea.
	APIURL string
	// Token authenticates every request. It is sent only in a header and
	// only to APIURL (or the default for the remote's host).
	Token string
	// HTTPClient makes the requests (a copy is used); nil means one with a
	// 30 s timeout. Either way no redirect is followed, unless the client
	// given sets its own CheckRedirect: a redirect would carry the token
	// elsewhere or turn a POST into a GET.
	HTTPClient *http.Client
}

// New returns the forge Config names.
func New(c Config) (Forge, error) {
	if c.Token == "" {
		return nil, fmt.Errorf("forge %s: no token: %w", c.Kind, errdefs.ErrInvalid)
	}
	if strings.ContainsAny(c.Token, "\r\n\x00") {
		return nil, fmt.Errorf("forge %s: the token holds a line break or NUL: %w", c.Kind, errdefs.ErrInvalid)
	}
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("forge %s: API URL %q must be https://host[/path] without credentials, query or fragment: %w", c.Kind, redactURL(c.APIURL), errdefs.ErrInvalid)
		}
		if u.Scheme == "http" && !loopback(u.Hostname()) {
			return nil, fmt.Errorf("forge %s: API URL %q: plain http would send the token in clear: https is needed for a host other than loopback: %w", c.Kind, c.APIURL, errdefs.ErrInvalid)
		}
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if c.HTTPClient != nil {
		copied := *c.HTTPClient
		hc = &copied
	}
	if hc.CheckRedirect == nil {
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	cl := &client{token: c.Token, apiURL: strings.TrimSuffix(c.APIURL, "/"), http: hc}
	switch c.Kind {
	case KindGitHub:
		cl.kind = KindGitHub
		return &github{cl}, nil
	case KindGitLab:
		cl.kind = KindGitLab
		return &gitlab{cl}, nil
	case KindGitea, "forgejo":
		cl.kind = KindGitea
		return &gitea{cl}, nil
	}
	return nil, fmt.Errorf("forge kind %q: want github, gitlab or gitea: %w", c.Kind, errdefs.ErrInvalid)
}

// APIError is a forge's refusal of one request.
type APIError struct {
	// Forge is the kind, Repo the repository's full name.
	Forge, Repo string
	// Method and Path are the request (the path without query or host).
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Message is the forge's own message, bounded, with the token removed.
	Message string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s %s: %s %s: %d %s", e.Forge, e.Repo, e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap gives the errdefs class of the status, so callers test
// errors.Is(err, errdefs.ErrNotFound) and the API maps it once.
func (e *APIError) Unwrap() error {
	switch {
	case e.Status == http.StatusNotFound:
		return errdefs.ErrNotFound
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return errdefs.ErrUnauthorized
	case e.Status == http.StatusConflict:
		return errdefs.ErrConflict
	case e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusBadRequest:
		return errdefs.ErrInvalid
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return errdefs.ErrUnavailable
	}
	return nil
}

// validRemote checks a Remote however it was made (ParseRemote, or by
// hand from a database row): its names become API paths, so nothing in
// them may change a path. Only GitLab has nested groups.
func validRemote(kind string, r Remote) error {
	bad := func(why string) error {
		return fmt.Errorf("%s repository %q: %s: %w", kind, r.String(), why, errdefs.ErrInvalid)
	}
	if !validSegment(r.Repo) {
		return bad("not a valid repository name")
	}
	owner := strings.Split(r.Owner, "/")
	if len(owner) > 1 && kind != KindGitLab {
		return bad(kind + " has no nested owners")
	}
	for _, s := range owner {
		if !validSegment(s) {
			return bad("not a valid owner")
		}
	}
	return nil
}

// validRequest checks what every forge needs of a PRRequest.
func validRequest(kind string, r Remote, req PRRequest) error {
	bad := func(why string) error {
		return fmt.Errorf("%s %s: pull request: %s: %w", kind, r, why, errdefs.ErrInvalid)
	}
	if err := validRemote(kind, r); err != nil {
		return err
	}
	if req.Head == "" || req.Base == "" {
		return bad("head and base branches are needed")
	}
	if req.Head == req.Base {
		return bad(fmt.Sprintf("head and base are the same branch %q", req.Head))
	}
	for _, b := range []string{req.Head, req.Base} {
		if strings.ContainsAny(b, " \t\r\n\x00~^:?*[\\") || strings.HasPrefix(b, "-") || strings.Contains(b, "..") {
			return bad(fmt.Sprintf("branch %q is not a valid branch name", b))
		}
	}
	if strings.TrimSpace(req.Title) == "" {
		return bad("no title")
	}
	for _, l := range req.Labels {
		if strings.TrimSpace(l) == "" || strings.ContainsAny(l, "\r\n\x00") {
			return bad(fmt.Sprintf("label %q is empty or holds a line break", l))
		}
	}
	return nil
}

// Body limits: GitHub refuses a body over 65536 characters; GitLab's
// description holds 1,000,000; Gitea documents none, so GitLab's is used.
const (
	githubMaxBody = 65536
	otherMaxBody  = 1_000_000
)

// fitBody cuts a body that the forge would refuse (max is in characters),
// keeping its start and saying where it was cut, and returns a note when it
// did.
func fitBody(body string, max int) (string, []string) {
	if utf8.RuneCountInString(body) <= max {
		return body, nil
	}
	const marker = "\n\n[... cut by agentbox: the forge takes at most %d characters]"
	keep := max - len(fmt.Sprintf(marker, max))
	n := 0
	for i := range body {
		if n == keep {
			return body[:i] + fmt.Sprintf(marker, max), []string{fmt.Sprintf("the body was cut to %d characters", max)}
		}
		n++
	}
	return body, nil
}

// uniqueLabels drops repeated labels, keeping the first spelling.
func uniqueLabels(ls []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range ls {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// prSteps are one forge's steps of OpenOrUpdatePR; openOrUpdate runs them.
type prSteps struct {
	// head and base name the request in errors.
	head, base string
	// notes are added to the PR returned (e.g. the body was cut).
	notes []string
	// find returns the open PR of the head branch, or nil.
	find   func(ctx context.Context) (*PR, error)
	create func(ctx context.Context) (PR, error)
	update func(ctx context.Context, number int) (PR, error)
	// addLabels, if set, adds the labels to a PR made or updated without
	// them and returns a note per failure.
	addLabels func(ctx context.Context, number int) []string
}

// openOrUpdate finds an open PR of the head branch and updates it, or opens
// one. A create that loses a race with another opener (the forge says the
// PR exists: 409 or 422) falls back to updating the one that won.
func openOrUpdate(ctx context.Context, s prSteps) (PR, error) {
	existing, err := s.find(ctx)
	if err != nil {
		return PR{}, err
	}
	if existing == nil {
		pr, err := s.create(ctx)
		if err == nil {
			pr.Notes = append(pr.Notes, s.notes...)
			if s.addLabels != nil {
				pr.Notes = append(pr.Notes, s.addLabels(ctx, pr.Number)...)
			}
			return pr, nil
		}
		err = fmt.Errorf("opening a pull request from %s into %s (are both branches pushed?): %w", s.head, s.base, err)
		var ae *APIError
		if !errors.As(err, &ae) || (ae.Status != http.StatusConflict && ae.Status != http.StatusUnprocessableEntity) {
			return PR{}, err
		}
		again, ferr := s.find(ctx)
		if ferr != nil || again == nil {
			return PR{}, err
		}
		existing = again
	}
	pr, err := s.update(ctx, existing.Number)
	if err != nil {
		return PR{}, fmt.Errorf("updating pull request %d from %s into %s: %w", existing.Number, s.head, s.base, err)
	}
	pr.Updated = true
	pr.Notes = append(pr.Notes, s.notes...)
	if s.addLabels != nil {
		pr.Notes = append(pr.Notes, s.addLabels(ctx, pr.Number)...)
	}
	return pr, nil
}
