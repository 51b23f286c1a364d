package image

import (
	"fmt"
	"strings"
)

func orNone(s string) string {
	if s == "" {
		return "no engine"
	}
	if len(s) > 19 {
		return s[:19]
	}
	return s
}

func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// tail keeps the last lines written to it, for error messages.
type tail struct {
	max   int
	lines []string
	part  string
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	if len(t.part) > 4096 {
		t.part = t.part[len(t.part)-4096:]
	}
	for _, l := range parts[:len(parts)-1] {
		if l = strings.TrimRight(l, "\r"); l != "" {
			t.lines = append(t.lines, l)
		}
	}
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	lines := t.lines
	if t.part != "" {
		lines = append(lines[:len(lines):len(lines)], t.part)
	}
	if len(lines) > t.max {
		lines = lines[len(lines)-t.max:]
	}
	return strings.Join(lines, "\n")
}
