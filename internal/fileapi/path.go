package fileapi

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Limits on client paths, matching Linux NAME_MAX and PATH_MAX.
const (
	maxComponent = 255
	maxPath      = 4096
)

// CleanPath validates a client path and returns it in canonical form:
// relative to the workspace root, without "." components or duplicate
// slashes, "." for the root itself.
//
// It refuses, with ErrInvalid and the reason, the empty string, NUL and
// other control bytes, backslashes, absolute paths, any ".." component, a
// component over 255 bytes and a path over 4096 bytes. URL escapes such as
// "%2e%2e" are not decoded: they name a literal file inside the workspace.
func CleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", invalidPath(p, "empty path")
	case len(p) > maxPath:
		return "", invalidPath(p, fmt.Sprintf("longer than %d bytes", maxPath))
	case p[0] == '/':
		return "", invalidPath(p, "absolute path")
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == 0:
			return "", invalidPath(p, "contains a NUL byte")
		case c < 0x20 || c == 0x7f:
			return "", invalidPath(p, "contains a control character")
		case c == '\\':
			return "", invalidPath(p, "contains a backslash")
		}
	}
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for part := range strings.SplitSeq(p, "/") {
		switch {
		case part == "" || part == ".":
			continue
		case part == "..":
			return "", invalidPath(p, `contains a ".." component`)
		case len(part) > maxComponent:
			return "", invalidPath(p, fmt.Sprintf("has a component longer than %d bytes", maxComponent))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// invalidPath names a refused path without echoing kilobytes of it back.
func invalidPath(p, reason string) error {
	const show = 64
	q := fmt.Sprintf("%q", p)
	if len(p) > show {
		q = fmt.Sprintf("%q... (%d bytes)", p[:show], len(p))
	}
	return fmt.Errorf("invalid path %s: %s: %w", q, reason, errdefs.ErrInvalid)
}

// cleanFor runs CleanPath and adds the verb to its error.
func cleanFor(op, p string) (string, error) {
	c, err := CleanPath(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return c, nil
}
