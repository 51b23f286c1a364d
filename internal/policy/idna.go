package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// labelToASCII lowers and checks one label of a host name with IDNA's
// lookup profile (UTS #46, non-transitional, STD3 rules, bidi and joiner
// checks: what browsers apply before they resolve a name) and returns its
// ASCII form, or the reason it is refused. An "xn--" label is decoded and
// checked the same way. The caller splits the name on '.' first, so a
// label that mapping turns into more than one (U+3002 becomes '.') is
// refused rather than re-split.
func labelToASCII(label string) (string, string) {
	if label == "" {
		return "", "empty label"
	}
	if reason := asciiProblem(label); reason != "" {
		return "", reason
	}
	a, err := idna.Lookup.ToASCII(label)
	ace := strings.HasPrefix(strings.ToLower(label), acePrefix)
	switch {
	case ace && err == nil && len(a) <= len(acePrefix):
		return "", "not a valid international (xn--) label (nothing after xn--)"
	case ace && err != nil:
		return "", fmt.Sprintf("not a valid international (xn--) label (%s)", idnaReason(err))
	case err != nil:
		return "", fmt.Sprintf("not a valid host name label (%s)", idnaReason(err))
	case a == "" || strings.ContainsRune(a, '.'):
		return "", "not a single host name label after IDNA mapping"
	case len(a) > maxLabelBytes:
		return "", fmt.Sprintf("longer than %d bytes", maxLabelBytes)
	}
	// The canonical form must itself be canonical: IDNA checks some rules
	// (bidi) on what it is given, not on what mapping made of it, so
	// "ℵA" maps to "xn--a-zhc", which decodes to a label it refuses.
	if a != label {
		if again, err := idna.Lookup.ToASCII(a); err != nil || again != a {
			reason := "it changes again"
			if err != nil {
				reason = idnaReason(err)
			}
			return "", fmt.Sprintf("not a valid host name label (its IDNA form %s is not valid: %s)", a, reason)
		}
	}
	return a, ""
}

// idnaReason trims the package's prefix off its error.
func idnaReason(err error) string {
	return strings.TrimPrefix(err.Error(), "idna: ")
}

// acePrefix starts the ASCII form of an international label.
const acePrefix = "xn--"

// asciiProblem names what is wrong with an all-ASCII label in the words a
// user needs, or returns "" (also for any label with non-ASCII runes,
// which IDNA judges).
func asciiProblem(label string) string {
	for i := 0; i < len(label); i++ {
		c := label[i]
		switch {
		case c >= utf8.RuneSelf:
			return ""
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
		default:
			return fmt.Sprintf("character '%c' (U+%04X) is not allowed in a host name (letters, digits and '-')", c, c)
		}
	}
	switch {
	case strings.HasPrefix(strings.ToLower(label), acePrefix):
		return "" // IDNA decodes and judges it
	case label[0] == '-' || label[len(label)-1] == '-':
		return "starts or ends with '-'"
	case len(label) >= 4 && label[2:4] == "--" && !strings.HasPrefix(strings.ToLower(label), acePrefix):
		return `has "--" in the third and fourth places, which only international (xn--) labels may`
	}
	return ""
}
