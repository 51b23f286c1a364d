package image

import (
	"bufio"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// aptDir is where DetectMirror reads the host's sources; tests point it at
// testdata.
var aptDir = "/etc/apt"

// DetectMirror returns the Debian mirror this host's apt already uses, so
// that a build goes where the host's packages come from (a local mirror, a
// proxy, a snapshot), or DefaultMirror when none is found. It reads
// sources.list and sources.list.d/*.list (one-line format) and
// sources.list.d/*.sources (deb822) and prefers a "deb" entry for the
// suite the image is built from, then one for any other Debian suite; the
// security archive and entries of other distributions never qualify.
func DetectMirror() string {
	if m := detectMirror(aptDir, debianSuite); m != "" {
		return m
	}
	return DefaultMirror
}

// aptSource is one "deb" entry.
type aptSource struct {
	uri    string
	suites []string
}

func detectMirror(dir, suite string) string {
	var sources []aptSource
	sources = append(sources, parseOneLine(filepath.Join(dir, "sources.list"))...)
	entries, _ := os.ReadDir(filepath.Join(dir, "sources.list.d"))
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names) // apt reads them in this order too
	for _, n := range names {
		p := filepath.Join(dir, "sources.list.d", n)
		switch {
		case strings.HasSuffix(n, ".list"):
			sources = append(sources, parseOneLine(p)...)
		case strings.HasSuffix(n, ".sources"):
			sources = append(sources, parseDeb822(p)...)
		}
	}
	var fallback string
	for _, s := range sources {
		if checkMirror(s.uri) != nil {
			continue
		}
		for _, su := range s.suites {
			if su == suite {
				return strings.TrimRight(s.uri, "/")
			}
			if fallback == "" && isDebianSuite(su) {
				fallback = strings.TrimRight(s.uri, "/")
			}
		}
	}
	return fallback
}

// isDebianSuite tells a suite of the main Debian archive (any release, its
// -updates and -backports) from the security archive and from other
// distributions (an Ubuntu mirror has no bookworm).
func isDebianSuite(s string) bool {
	base, suffix, _ := strings.Cut(s, "-")
	switch suffix {
	case "", "updates", "backports", "proposed-updates":
	default:
		return false
	}
	switch base {
	case "stable", "oldstable", "testing", "unstable", "sid", "experimental",
		"buster", "bullseye", "bookworm", "trixie", "forky", "duke":
		return true
	}
	return false
}

// checkMirror accepts the URI schemes debootstrap can fetch from.
func checkMirror(m string) error {
	u, err := url.Parse(m)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "http", "https", "file":
	default:
		return errors.New("want an http, https or file URL")
	}
	if u.Scheme != "file" && u.Host == "" {
		return errors.New("no host")
	}
	return nil
}

// parseOneLine reads "deb [options] uri suite [component...]" lines.
func parseOneLine(path string) []aptSource {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []aptSource
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			// Options may contain spaces: skip to the field closing them.
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) < 2 {
			continue
		}
		out = append(out, aptSource{uri: fields[0], suites: fields[1:2]})
	}
	return out
}

// parseDeb822 reads the stanzas of a .sources file.
func parseDeb822(path string) []aptSource {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []aptSource
	stanza := map[string]string{}
	var last string
	flush := func() {
		defer func() { stanza = map[string]string{}; last = "" }()
		if strings.EqualFold(stanza["enabled"], "no") {
			return
		}
		if !containsField(stanza["types"], "deb") {
			return
		}
		uris := strings.Fields(stanza["uris"])
		suites := strings.Fields(stanza["suites"])
		if len(uris) == 0 || len(suites) == 0 {
			return
		}
		for _, u := range uris {
			out = append(out, aptSource{uri: u, suites: suites})
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last != "" { // continuation of a multi-line field
				stanza[last] += " " + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = strings.ToLower(strings.TrimSpace(k))
		stanza[last] = strings.TrimSpace(v)
	}
	flush()
	return out
}

func containsField(s, want string) bool {
	for _, f := range strings.Fields(s) {
		if f == want {
			return true
		}
	}
	return false
}
