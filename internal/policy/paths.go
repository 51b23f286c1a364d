package policy

import (
	"path"
	"strings"
)

// checkWritablePath returns why a writable_paths pattern is refused, or "".
// Patterns are matched component by component, so every component must
// be a path.Match pattern or "**", and nothing may point outside the
// workspace.
func checkWritablePath(p string) string {
	switch {
	case p == "":
		return "empty pattern"
	case strings.IndexByte(p, 0) >= 0:
		return "contains a NUL byte"
	case strings.Contains(p, `\`):
		return `backslashes are not allowed: separate with '/' (escapes are not supported)`
	case strings.HasPrefix(p, "/"):
		return "absolute: patterns are relative to the workspace"
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "":
			return `empty path component ("//" or a trailing '/'); write "dir/**" for everything under a directory`
		case c == ".":
			return `"." components are not allowed`
		case c == "..":
			return `".." would leave the workspace`
		case c != "**" && strings.Contains(c, "**"):
			return `"**" must be a whole path component, as in "src/**/*.go"`
		}
		if _, err := path.Match(c, ""); err != nil {
			return "not a valid pattern (path.Match syntax)"
		}
	}
	return ""
}

// matchPath reports whether the relative, slash-separated name matches
// pattern, where "**" stands for any number of components, none included.
func matchPath(pattern, name string) bool {
	pat := strings.Split(pattern, "/")
	var parts []string
	if name != "" {
		parts = strings.Split(name, "/")
	}
	// matched[j]: the pattern components seen so far match parts[:j].
	// Dynamic programming keeps "**/**/**" linear instead of exponential.
	matched := make([]bool, len(parts)+1)
	matched[0] = true
	next := make([]bool, len(parts)+1)
	for _, pc := range pat {
		if pc == "**" {
			seen := false
			for j := range matched {
				seen = seen || matched[j]
				next[j] = seen
			}
		} else {
			next[0] = false
			for j := 1; j <= len(parts); j++ {
				ok, _ := path.Match(pc, parts[j-1])
				next[j] = matched[j-1] && ok
			}
		}
		matched, next = next, matched
	}
	return matched[len(parts)]
}

// cleanRelative cleans a workspace-relative name; ok is false for names
// that are absolute or leave the workspace. The workspace itself is "".
func cleanRelative(name string) (string, bool) {
	if strings.IndexByte(name, 0) >= 0 || strings.HasPrefix(name, "/") {
		return "", false
	}
	name = path.Clean(name)
	switch {
	case name == ".":
		return "", true
	case name == ".." || strings.HasPrefix(name, "../"):
		return "", false
	}
	return name, true
}
