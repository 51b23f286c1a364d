package fileapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestCleanPath(t *testing.T) {
	long := strings.Repeat("a", 255)
	tests := []struct {
		in     string
		want   string
		reason string // non-empty: refused with ErrInvalid and this text
	}{
		{in: ".", want: "."},
		{in: "./", want: "."},
		{in: "././/.", want: "."},
		{in: "a", want: "a"},
		{in: "a/b/c", want: "a/b/c"},
		{in: "./a//b/./c/", want: "a/b/c"},
		{in: "a/.", want: "a"},
		{in: "%2e%2e/x", want: "%2e%2e/x"},
		{in: "%252e%252e", want: "%252e%252e"},
		{in: "...", want: "..."},
		{in: "..a/b..", want: "..a/b.."},
		{in: "ünïcode/文件", want: "ünïcode/文件"},
		{in: long, want: long},
		{in: "", reason: "empty path"},
		{in: "/", reason: "absolute path"},
		{in: "/etc/passwd", reason: "absolute path"},
		{in: "..", reason: `".." component`},
		{in: "../x", reason: `".." component`},
		{in: "a/../../x", reason: `".." component`},
		{in: "a/..", reason: `".." component`},
		{in: "a/b/../c", reason: `".." component`},
		{in: "..\\x", reason: "backslash"},
		{in: "a\\b", reason: "backslash"},
		{in: "a\x00b", reason: "NUL"},
		{in: "a\nb", reason: "control character"},
		{in: "a\x1bb", reason: "control character"},
		{in: "a\x7fb", reason: "control character"},
		{in: long + "a", reason: "component longer than 255"},
		{in: "x/" + strings.Repeat("b", 300), reason: "component longer than 255"},
		{in: strings.Repeat("a/", 2500), reason: "longer than 4096"},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			got, err := CleanPath(tt.in)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CleanPath(%q) = %v", tt.in, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("CleanPath(%q) (-want +got):\n%s", tt.in, diff)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("CleanPath(%q) = %q, %v; want ErrInvalid", tt.in, got, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("CleanPath(%q) error %q does not give the reason %q", tt.in, err, tt.reason)
			}
			if len(err.Error()) > 300 {
				t.Errorf("CleanPath error is %d bytes long; the path should be abbreviated", len(err.Error()))
			}
		})
	}
}
