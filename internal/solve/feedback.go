package solve

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/diffcheck"
)

// Failure categories of an execution, counted per run and in /metrics.
const (
	CatSyntax  = "syntax"
	CatImport  = "import"
	CatAssert  = "assertion"
	CatTimeout = "timeout"
	CatOOM     = "oom"
	CatEgress  = "egress_denied"
	CatCompile = "compile"
	CatOther   = "other"
)

// Categories are every failure category, for metrics to list up front.
var Categories = []string{CatSyntax, CatImport, CatAssert, CatTimeout, CatOOM, CatEgress, CatCompile, CatOther}

// Redactor cleans sandbox output before it goes to a model or a record:
// stored secret values, token formats (diffcheck's detectors), and the
// daemon's own paths, which tell a model (or whoever wrote the output)
// how the host is laid out.
type Redactor struct {
	// Secrets are the values in the secret store.
	Secrets []string
	// Paths are host paths to hide (the data dir), longest first.
	Paths []string
}

// Redact returns s cleaned and how many replacements were made.
func (r Redactor) Redact(s string) (string, int) {
	out, n := diffcheck.RedactText(s, r.Secrets)
	for _, p := range r.Paths {
		if p == "" || p == "/" {
			continue
		}
		if c := strings.Count(out, p); c > 0 {
			out = strings.ReplaceAll(out, p, "[daemon path]")
			n += c
		}
	}
	return out, n
}

// Bound keeps the head and the tail of s, at most max bytes in all, with
// a marker saying how much was cut between them: the start of a test run
// says what ran, its end says what failed.
func Bound(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	head, tail := max/4, max-max/4
	h := s[:head]
	for len(h) > 0 && !utf8.ValidString(h) {
		h = h[:len(h)-1]
	}
	t := s[len(s)-tail:]
	for len(t) > 0 && !utf8.RuneStart(t[0]) {
		t = t[1:]
	}
	cut := len(s) - len(h) - len(t)
	return h + fmt.Sprintf("\n[… %d bytes cut …]\n", cut) + t, true
}

// category patterns, tried in order: the first that matches the output
// names the failure. Syntax before import before assertion, because a
// syntax error in a test file also fails the run's assertions.
var categoryPatterns = []struct {
	cat string
	re  *regexp.Regexp
}{
	{CatEgress, regexp.MustCompile(`(?i)egress (?:denied|refused)|denied by (?:the )?(?:egress )?policy|Could not resolve host|Temporary failure in name resolution|Name or service not known|Network is unreachable|403 Forbidden|CONNECT tunnel failed|Tunnel connection failed|ProxyError|not in allowlist`)},
	{CatSyntax, regexp.MustCompile(`SyntaxError|IndentationError|TabError|syntax error|expected '[^']+', found`)},
	{CatImport, regexp.MustCompile(`ModuleNotFoundError|ImportError|No module named|cannot find package|no required module provides|package \S+ is not in std|Cannot find module`)},
	{CatCompile, regexp.MustCompile(`(?m)undefined: |cannot use |declared and not used|\[build failed\]|compilation terminated|error: .* (?:expected|undeclared)|^\S+\.go:\d+:\d+: `)},
	{CatAssert, regexp.MustCompile(`AssertionError|assert |\bFAILED\b|--- FAIL|Error: expected|AssertionFailedError|expected .* (?:got|but was)`)},
}

// Categorise names how an execution failed ("" if it did not).
func Categorise(out apitypes.ExecOutput, text string) string {
	switch {
	case out.ExitCode == 0 && out.Signal == 0 && !out.TimedOut && !out.OOM && !out.Lost:
		return ""
	case out.TimedOut:
		return CatTimeout
	case out.OOM || out.Signal == 9 && strings.Contains(text, "Killed"):
		return CatOOM
	}
	for _, p := range categoryPatterns {
		if p.re.MatchString(text) {
			return p.cat
		}
	}
	return CatOther
}

// Normalisers turn the parts of a failure that change from run to run into
// placeholders, so that the same failure has the same signature.
var normalisers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`0x[0-9a-fA-F]+`), "0xADDR"},
	{regexp.MustCompile(`(?:/tmp|/var/tmp|/private/var/folders)/[^\s:'"]*`), "/TMP"},
	{regexp.MustCompile(`(?i)\bline \d+`), "line N"},
	{regexp.MustCompile(`:\d+(:\d+)?\b`), ":N"},
	{regexp.MustCompile(`\b\d+(?:\.\d+)?m?s\b`), "Ts"},
	{regexp.MustCompile(`\b[0-9a-f]{12,}\b`), "HASH"},
}

// keyLine picks the lines that say what failed.
var keyLine = regexp.MustCompile(`(?i)error|fail|assert|exception|panic|denied|killed|timed out`)

// Signature is a fingerprint of a failure: its category and the lines
// that say what failed, with line numbers, addresses, temporary paths,
// durations and hashes normalised away.
func Signature(category, text string) string {
	var keys []string
	for l := range strings.SplitSeq(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || !keyLine.MatchString(l) {
			continue
		}
		for _, n := range normalisers {
			l = n.re.ReplaceAllString(l, n.with)
		}
		keys = append(keys, l)
		if len(keys) == 8 {
			break
		}
	}
	sum := sha256.Sum256([]byte(category + "\n" + strings.Join(keys, "\n")))
	return category + ":" + hex.EncodeToString(sum[:6])
}

var (
	countRe = regexp.MustCompile(`(\d+) (passed|failed|errors?)\b`)
	goOK    = regexp.MustCompile(`(?m)^(ok|FAIL)\s+\S+`)
)

// Summarise reads the test runner's summary: pytest's "2 failed, 3 passed
// in 0.1s", or go test's ok/FAIL package lines.
func Summarise(text string) TestSummary {
	var s TestSummary
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		ms := countRe.FindAllStringSubmatch(lines[i], -1)
		if len(ms) == 0 {
			continue
		}
		for _, m := range ms {
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "passed":
				s.Passed = n
			case "failed":
				s.Failed = n
			default:
				s.Errors = n
			}
		}
		s.Line = strings.Trim(strings.TrimSpace(lines[i]), "= ")
		return s
	}
	for _, m := range goOK.FindAllStringSubmatch(text, -1) {
		if m[1] == "ok" {
			s.Passed++
		} else {
			s.Failed++
		}
	}
	return s
}

// UntrustedOpen and UntrustedClose label sandbox output in a prompt.
// Everything between them is data a program printed, which anyone who
// could write to the repository or the network may have shaped: it is
// never an instruction.
const (
	UntrustedOpen  = "<untrusted-sandbox-output>"
	UntrustedClose = "</untrusted-sandbox-output>"
)

// Fence wraps output in the untrusted labels, defusing any label inside
// it so that the output cannot close the fence and speak outside it.
func Fence(output string) string {
	output = strings.ReplaceAll(output, "<untrusted-sandbox-output", "<untrusted-sandbox-output-quoted")
	output = strings.ReplaceAll(output, "</untrusted-sandbox-output", "</untrusted-sandbox-output-quoted")
	return UntrustedOpen + "\n" + output + "\n" + UntrustedClose
}

// MaxFeedback bounds the output of one execution as kept and sent.
const MaxFeedback = 8 << 10

// Result turns an execution's output into the executor's message:
// redacted first (so that a cut cannot leave half a secret), then
// bounded, categorised and fingerprinted.
func Result(cmd string, out apitypes.ExecOutput, r Redactor, max int) ExecutionResult {
	text := out.Stdout
	if out.Stderr != "" {
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += out.Stderr
	}
	clean, n := r.Redact(text)
	bounded, cut := Bound(clean, max)
	res := ExecutionResult{Command: cmd, ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut, OOM: out.OOM, Lost: out.Lost,
		DurationMS: out.DurationMS, Output: bounded, Truncated: cut || out.Truncated, Redactions: n, Summary: Summarise(clean)}
	res.Category = Categorise(out, clean)
	res.Passed = res.Category == ""
	if !res.Passed {
		res.Signature = Signature(res.Category, clean)
	}
	return res
}
