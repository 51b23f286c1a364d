package manager

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEventArgv(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes
	many := make([]string, 40)
	for i := range many {
		many[i] = "a"
	}
	for _, tc := range []struct {
		argv []string
		want func([]string) bool
	}{
		{[]string{"sh", "-c", "true"}, func(g []string) bool { return strings.Join(g, " ") == "sh -c true" }},
		{[]string{long}, func(g []string) bool {
			return len(g[0]) <= 256+len("…") && strings.HasSuffix(g[0], "…") && !strings.ContainsRune(g[0], '\uFFFD')
		}},
		{many, func(g []string) bool { return len(g) == 32 && g[31] == "… (9 more)" }},
	} {
		raw, _ := json.Marshal(tc.argv)
		if got := eventArgv(string(raw)); !tc.want(got) {
			t.Errorf("eventArgv(%d args) = %q", len(tc.argv), got)
		}
	}
	if got := eventArgv("not json"); got != nil {
		t.Errorf("eventArgv of a bad record = %q", got)
	}
}
