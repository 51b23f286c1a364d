package diffcheck

import (
	"slices"
	"strings"
)

// RedactText replaces every secret the detectors find in text, and every
// occurrence of a known value, with "[redacted KIND]", line by line, and
// says how many it replaced. It is how sandbox output is cleaned before it
// goes anywhere else (a model, a log).
func RedactText(text string, known []string) (string, int) {
	known = knownSecrets(known)
	var b strings.Builder
	n := 0
	for line := range strings.SplitAfterSeq(text, "\n") {
		ms := findSecrets([]byte(line), known)
		if len(ms) == 0 {
			b.WriteString(line)
			continue
		}
		// Overlapping matches (a known value that is also a token)
		// merge into one redaction.
		slices.SortStableFunc(ms, func(a, b match) int { return a.start - b.start }) // a detector's kind before a known value's
		at := 0
		for _, m := range ms {
			if m.end <= at {
				continue
			}
			if m.start < at {
				at = m.end // extends the redaction already written
				continue
			}
			b.WriteString(line[at:m.start])
			b.WriteString("[redacted " + m.kind + "]")
			at = m.end
			n++
		}
		b.WriteString(line[at:])
	}
	return b.String(), n
}
