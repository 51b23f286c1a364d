package api

// Routes lists "METHOD /path" for every route served.
func Routes() []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.method+" "+r.path)
	}
	return out
}
