package diffcheck

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// detector finds one kind of secret by its shape.
type detector struct {
	kind string
	// hints are literals one of which every match contains; a line with
	// none is not given to re, which keeps a large diff cheap.
	hints []string
	// fold compares hints without regard to ASCII case.
	fold bool
	re   *regexp.Regexp
	// group is the submatch that is the secret (0: the whole match).
	group int
	// cont, when set, are the bytes that would continue the token: a
	// match with one right before or after it is part of some longer
	// string ("XAKIA…", a key id followed by more letters) and does not
	// count. It is checked here rather than in re because RE2 has no
	// lookaround, and a boundary that re consumed would hide a second
	// token one byte later.
	cont func(c byte) bool
}

func alnum(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' }

func base64url(c byte) bool { return alnum(c) || c == '_' || c == '-' }

func base64std(c byte) bool { return alnum(c) || c == '/' || c == '+' }

var detectors = []detector{
	{kind: KindAWSAccessKeyID, hints: []string{"AKIA", "ASIA"}, cont: alnum,
		re: regexp.MustCompile(`(?:AKIA|ASIA)[0-9A-Z]{16}`)},
	// A secret access key is 40 characters of base64 with nothing to
	// tell it from any other such string, so only one assigned to a name
	// that says what it is counts.
	{kind: KindAWSSecretAccessKey, hints: []string{"aws_secret_access_key"}, fold: true, cont: base64std,
		re: regexp.MustCompile(`(?i:aws_secret_access_key)["']?\s*(?::=|=>|=|:)\s*["']?([A-Za-z0-9/+]{40})`), group: 1},
	{kind: KindGitHubToken, hints: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, cont: alnum,
		re: regexp.MustCompile(`gh[pousr]_[0-9A-Za-z]{36}`)},
	{kind: KindGitHubToken, hints: []string{"github_pat_"}, cont: alnum,
		re: regexp.MustCompile(`github_pat_[0-9A-Za-z]{22}_[0-9A-Za-z]{59}`)},
	{kind: KindSlackToken, hints: []string{"xox"}, cont: alnum,
		re: regexp.MustCompile(`xox[abprs]-[0-9A-Za-z\-]{10,}`)},
	{kind: KindGoogleAPIKey, hints: []string{"AIza"}, cont: base64url,
		re: regexp.MustCompile(`AIza[0-9A-Za-z_\-]{35}`)},
	// Restricted keys (rk_live_) reach live data as well as secret ones.
	{kind: KindStripeLiveKey, hints: []string{"_live_"}, cont: alnum,
		re: regexp.MustCompile(`(?:sk|rk)_live_[0-9A-Za-z]{20,}`)},
	{kind: KindPrivateKey, hints: []string{"PRIVATE KEY"},
		re: regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`)},
	// An unsigned token (alg none, empty signature) grants nothing.
	{kind: KindJWT, hints: []string{"eyJ"}, cont: base64url,
		re: regexp.MustCompile(`eyJ[0-9A-Za-z_\-]{4,}\.eyJ[0-9A-Za-z_\-]{4,}\.[0-9A-Za-z_\-]{8,}`)},
}

// match is a secret's byte range in a line.
type match struct {
	kind       string
	start, end int
}

// findSecrets returns every secret in line: detector matches and
// occurrences of known values.
func findSecrets(line []byte, known []string) []match {
	var out []match
	for _, d := range detectors {
		if !d.mayMatch(line) {
			continue
		}
		for _, loc := range d.re.FindAllSubmatchIndex(line, -1) {
			m := match{kind: d.kind, start: loc[2*d.group], end: loc[2*d.group+1]}
			if d.cont != nil && (m.start > 0 && d.cont(line[m.start-1]) || m.end < len(line) && d.cont(line[m.end])) {
				continue
			}
			out = append(out, m)
		}
	}
	for _, k := range known {
		for off := 0; off < len(line); {
			i := bytes.Index(line[off:], []byte(k))
			if i < 0 {
				break
			}
			out = append(out, match{kind: KindKnownSecret, start: off + i, end: off + i + len(k)})
			off += i + 1
		}
	}
	return out
}

func (d detector) mayMatch(line []byte) bool {
	for _, h := range d.hints {
		if d.fold && containsFold(line, h) || !d.fold && bytes.Contains(line, []byte(h)) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains the lower-case ASCII literal
// lower in any case, without allocating.
func containsFold(s []byte, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		j := 0
		for ; j < len(lower); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lower[j] {
				break
			}
		}
		if j == len(lower) {
			return true
		}
	}
	return false
}

// knownSecrets turns the caller's values into the strings looked for in
// single lines: each line of each value, long enough to mean something,
// once.
func knownSecrets(values []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		for l := range strings.SplitSeq(v, "\n") {
			l = strings.TrimSuffix(l, "\r")
			if len(l) < MinKnownSecret || seen[l] {
				continue
			}
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// Redact shows enough of a secret to find it again and never the whole:
// up to its first 4 bytes but no more than a quarter of it (whole UTF-8
// characters only), then "…" and its length ("AKIA…(20 bytes)").
func Redact(secret []byte) string {
	keep := min(4, len(secret)/4)
	n := 0
	for n < keep {
		_, size := utf8.DecodeRune(secret[n:])
		if n+size > keep {
			break
		}
		n += size
	}
	return fmt.Sprintf("%s…(%d bytes)", secret[:n], len(secret))
}
