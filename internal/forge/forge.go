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
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/forge/forgeapi"
)

// Aliases of forgeapi's names, so that callers that may speak HTTP need
// only this package.
type (
	Remote    = forgeapi.Remote
	PRRequest = forgeapi.PRRequest
	PR        = forgeapi.PR
	Forge     = forgeapi.Forge
	APIError  = forgeapi.APIError
)

// The kinds New accepts.
const (
	KindGitHub = forgeapi.KindGitHub
	KindGitLab = forgeapi.KindGitLab
	KindGitea  = forgeapi.KindGitea
)

// ParseRemote is forgeapi.ParseRemote.
func ParseRemote(rawURL string) (Remote, error) { return forgeapi.ParseRemote(rawURL) }

// Open is New with the default HTTP client: a forgeapi.NewFunc.
func Open(kind, apiURL, token string) (Forge, error) {
	return New(Config{Kind: kind, APIURL: apiURL, Token: token})
}

var _ forgeapi.NewFunc = Open

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
			return nil, fmt.Errorf("forge %s: API URL %q must be https://host[/path] without credentials, query or fragment: %w", c.Kind, forgeapi.RedactURL(c.APIURL), errdefs.ErrInvalid)
		}
		if u.Scheme == "http" && !forgeapi.Loopback(u.Hostname()) {
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

// validRequest checks what every forge needs of a PRRequest.
func validRequest(kind string, r Remote, req PRRequest) error {
	bad := func(why string) error {
		return fmt.Errorf("%s %s: pull request: %s: %w", kind, r, why, errdefs.ErrInvalid)
	}
	if err := forgeapi.ValidRemote(kind, r); err != nil {
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
