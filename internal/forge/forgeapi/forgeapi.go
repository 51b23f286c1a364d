// Package forgeapi is the half of package forge that needs no HTTP: the
// types, the Forge interface, ParseRemote and the API error. The manager
// uses it (it must not depend on net/http: see its imports test) and is
// given a NewFunc; cmd/agentbox passes forge.Open, which speaks HTTP.
package forgeapi

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

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
		return Remote{}, fmt.Errorf("forge remote %q: %s: %w", RedactURL(rawURL), why, errdefs.ErrInvalid)
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
	if u.Scheme == "http" && !Loopback(u.Hostname()) {
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

// Loopback says whether host is this machine's loopback: the one place a
// token may travel over plain http (a test forge, a local tunnel).
func Loopback(host string) bool {
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

// RedactURL drops userinfo so that a refused URL can be named in an error.
func RedactURL(raw string) string {
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

// The kinds of forge.
const (
	KindGitHub = "github"
	KindGitLab = "gitlab"
	KindGitea  = "gitea"
)

// NewFunc returns the Forge of a kind ("github", "gitlab", "gitea"), with
// its API base URL ("" for the default of the remote's host) and token.
// forge.Open is one.
type NewFunc func(kind, apiURL, token string) (Forge, error)

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
	s := fmt.Sprintf("%s %s: %s %s: %d %s", e.Forge, e.Repo, e.Method, e.Path, e.Status, statusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap gives the errdefs class of the status, so callers test
// errors.Is(err, errdefs.ErrNotFound) and the API maps it once.
func (e *APIError) Unwrap() error {
	switch {
	case e.Status == 404:
		return errdefs.ErrNotFound
	case e.Status == 401 || e.Status == 403:
		return errdefs.ErrUnauthorized
	case e.Status == 409:
		return errdefs.ErrConflict
	case e.Status == 422 || e.Status == 400:
		return errdefs.ErrInvalid
	case e.Status == 429 || e.Status >= 500:
		return errdefs.ErrUnavailable
	}
	return nil
}

// ValidRemote checks a Remote however it was made (ParseRemote, or by
// hand from a database row): its names become API paths, so nothing in
// them may change a path. Only GitLab has nested groups.
func ValidRemote(kind string, r Remote) error {
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

// statusText names the statuses forges answer with (net/http's table would
// bring net/http in).
func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 409:
		return "Conflict"
	case 410:
		return "Gone"
	case 413:
		return "Payload Too Large"
	case 422:
		return "Unprocessable Entity"
	case 429:
		return "Too Many Requests"
	case 500:
		return "Internal Server Error"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	}
	if code >= 300 && code < 400 {
		return "Redirect"
	}
	return "status " + strconv.Itoa(code)
}
