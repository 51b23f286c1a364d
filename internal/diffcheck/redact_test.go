package diffcheck

import (
	"strings"
	"testing"
)

func TestRedactText(t *testing.T) {
	tok := "ghp_" + strings.Repeat("a1B2", 9)
	known := "ghp_" + strings.Repeat("a1B2", 9) // a stored value that is also a token
	in := "one " + tok + " two\nkey=s3cr3t-value-here and s3cr3t-value-here\nAKIAABCDEFGHIJKLMNOP\nclean line\n"
	got, n := RedactText(in, []string{known, "s3cr3t-value-here", "short"})
	want := "one [redacted github-token] two\nkey=[redacted known-secret] and [redacted known-secret]\n[redacted aws-access-key-id]\nclean line\n"
	if got != want || n != 4 {
		t.Errorf("RedactText = %q (%d)\nwant %q (4)", got, n, want)
	}
	if got, n := RedactText("nothing here", nil); got != "nothing here" || n != 0 {
		t.Errorf("clean text: %q %d", got, n)
	}
}
