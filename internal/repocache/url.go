package repocache

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Remote is a parsed repository location.
type Remote struct {
	// Clean is the location with credentials removed: the cache key and the
	// only form that is stored, logged or shown.
	Clean string
	// User and Password are credentials found in the URL, used for the
	// clone and then forgotten.
	User, Password string
}

// scpLike matches git's "user@host:path" shorthand for ssh.
var scpLike = regexp.MustCompile(`^([A-Za-z0-9._~-]+@)?([A-Za-z0-9.-]+):([^/].*)$`)

// ParseRemote validates a repository location given by a caller. Accepted:
// https, http, ssh and git URLs, file:// URLs, scp-like ssh shorthand and
// existing local paths. Anything that could make git run a program
// (ext::, fd::, a leading dash) is refused.
func ParseRemote(raw string) (Remote, error) {
	bad := func(reason string) (Remote, error) {
		return Remote{}, fmt.Errorf("repository URL %q: %s: %w", redactRaw(raw), reason, errdefs.ErrInvalid)
	}
	if strings.TrimSpace(raw) == "" {
		return bad("empty")
	}
	if len(raw) > 2048 {
		return bad("longer than 2048 bytes")
	}
	for _, r := range raw {
		if r < 0x20 || r == 0x7f || r == ' ' {
			return bad("contains whitespace or control characters")
		}
	}
	if strings.HasPrefix(raw, "-") {
		return bad("starts with '-'")
	}
	if strings.Contains(raw, "::") {
		return bad("git remote helpers (transport::address) are not allowed")
	}
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return bad("not a valid URL")
		}
		switch u.Scheme {
		case "https", "http", "ssh", "git":
			if u.Host == "" {
				return bad("no host")
			}
		case "file":
			if u.Host != "" && u.Host != "localhost" {
				return bad("file:// URLs must not name a host")
			}
			p := filepath.Clean(u.Path)
			if !filepath.IsAbs(p) {
				return bad("file:// path must be absolute")
			}
			return Remote{Clean: "file://" + p}, nil
		default:
			return bad(fmt.Sprintf("scheme %q is not supported (use https, http, ssh, git, file or a local path)", u.Scheme))
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return bad("query strings and fragments are not allowed")
		}
		var rem Remote
		if u.User != nil {
			rem.User = u.User.Username()
			rem.Password, _ = u.User.Password()
			u.User = nil
			// A bare ssh user name ("git@") is not a credential; keep it.
			if u.Scheme == "ssh" && rem.Password == "" {
				u.User = url.User(rem.User)
				rem.User = ""
			}
		}
		u.Host = strings.ToLower(u.Host)
		u.Path = strings.TrimSuffix(u.Path, "/")
		if u.Path == "" {
			return bad("no repository path")
		}
		rem.Clean = u.String()
		return rem, nil
	}
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.HasPrefix(raw, "/") && !strings.HasPrefix(raw, ".") {
		if strings.Contains(m[1], ":") {
			return bad("passwords in scp-like addresses are not allowed")
		}
		return Remote{Clean: m[1] + strings.ToLower(m[2]) + ":" + strings.TrimSuffix(m[3], "/")}, nil
	}
	// A local path: must exist now.
	abs, err := filepath.Abs(raw)
	if err != nil {
		return bad("not a usable path")
	}
	st, err := os.Stat(abs)
	if err != nil {
		return bad("no such local repository")
	}
	if !st.IsDir() {
		return bad("local path is not a directory")
	}
	return Remote{Clean: abs}, nil
}

// redactRaw removes the userinfo of a URL-looking string for messages.
func redactRaw(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		slash := strings.IndexAny(rest, "/?#")
		host := rest
		if slash >= 0 {
			host = rest[:slash]
		}
		if at := strings.LastIndex(host, "@"); at >= 0 {
			return raw[:i+3] + "***@" + rest[at+1:]
		}
	}
	if len(raw) > 200 {
		return raw[:200] + "..."
	}
	return raw
}
