package api

import "strings"

// Routes lists "METHOD /path" for every route served.
func Routes() []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		// As OpenAPI writes a path: a trailing wildcard {path...} is {path}.
		out = append(out, r.method+" "+strings.ReplaceAll(r.path, "...}", "}"))
	}
	return out
}
