package policy

import (
	"strings"
	"testing"
)

func TestCheckWritablePath(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{in: "src/**"},
		{in: "**"},
		{in: "*.log"},
		{in: "build/*/out"},
		{in: "**/*.pyc"},
		{in: "docs/[a-c]*.md"},
		{in: ".cache/**"},

		{in: "", wantErr: "empty pattern"},
		{in: "/etc/**", wantErr: "absolute"},
		{in: "../x", wantErr: `".." would leave the workspace`},
		{in: "a/../../x", wantErr: `".." would leave the workspace`},
		{in: "a/..", wantErr: `".." would leave the workspace`},
		{in: "./a", wantErr: `"." components`},
		{in: "a//b", wantErr: "empty path component"},
		{in: "src/", wantErr: "empty path component"},
		{in: `a\b`, wantErr: "backslashes"},
		{in: `\*`, wantErr: "backslashes"},
		{in: "a\x00b", wantErr: "NUL"},
		{in: "src/**.go", wantErr: `"**" must be a whole path component`},
		{in: "a[", wantErr: "not a valid pattern"},
		{in: "*[", wantErr: "not a valid pattern"},
		{in: "[]a]", wantErr: "not a valid pattern"},
		{in: "x/[a-", wantErr: "not a valid pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := checkWritablePath(tt.in)
			if tt.wantErr == "" && got != "" || !strings.Contains(got, tt.wantErr) {
				t.Errorf("checkWritablePath(%q) = %q, want %q", tt.in, got, tt.wantErr)
			}
		})
	}
}

func TestPathWritable(t *testing.T) {
	tests := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{nil, "anything/at/all.go", true},
		{nil, "../escape", false},
		{nil, "/etc/passwd", false},
		{[]string{"src/**"}, "src", true},
		{[]string{"src/**"}, "src/a.go", true},
		{[]string{"src/**"}, "src/a/b/c.go", true},
		{[]string{"src/**"}, "srcx/a.go", false},
		{[]string{"src/**"}, "lib/a.go", false},
		{[]string{"src/**"}, "src/../lib/a.go", false},
		{[]string{"src/**"}, "./src/a.go", true},
		{[]string{"src/**"}, "src/../../x", false},
		{[]string{"*.log"}, "out.log", true},
		{[]string{"*.log"}, "dir/out.log", false},
		{[]string{"**/*.log"}, "out.log", true},
		{[]string{"**/*.log"}, "a/b/out.log", true},
		{[]string{"**/*.log"}, "a/b/out.txt", false},
		{[]string{"a/**/b"}, "a/b", true},
		{[]string{"a/**/b"}, "a/x/y/b", true},
		{[]string{"a/**/b"}, "a/x/y/c", false},
		{[]string{"build/*/out"}, "build/x/out", true},
		{[]string{"build/*/out"}, "build/x/y/out", false},
		{[]string{"**"}, "", true},
		{[]string{"**"}, ".", true},
		{[]string{"src/**"}, ".", false},
		{[]string{"docs/**", "*.md"}, "README.md", true},
		{[]string{"docs/**", "*.md"}, "lib/x.go", false},
		// A policy built in Go, never checked: a bad pattern matches nothing.
		{[]string{"../**"}, "../x", false},
		{[]string{"/**"}, "etc", false},
		// Linear, not exponential, in the number of "**".
		{[]string{strings.Repeat("**/", 40) + "x"}, strings.Repeat("a/", 200) + "y", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.patterns, ",")+"/"+tt.name, func(t *testing.T) {
			p := Policy{WritablePaths: tt.patterns}
			if got := p.PathWritable(tt.name); got != tt.want {
				t.Errorf("PathWritable(%q) with %q = %v, want %v", tt.name, tt.patterns, got, tt.want)
			}
		})
	}
}
