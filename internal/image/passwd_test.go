package image

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestResolveUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n# comment\nagent:x:1000:1000::/home/agent:/bin/sh\napp:x:1001:1001::/workspace/home:/bin/sh\nbroken\n")
	group := []byte("root:x:0:\nagent:x:1000:\nstaff:x:50:app\n")
	for _, tc := range []struct {
		user string
		want *Account
		err  string
	}{
		{user: ""},
		{user: "root"},
		{user: "0"},
		{user: "0:0"},
		{user: "root:staff"},
		{user: "agent", want: &Account{Name: "agent", UID: 1000, GID: 1000, Home: "/home/agent"}},
		{user: "1000", want: &Account{Name: "agent", UID: 1000, GID: 1000, Home: "/home/agent"}},
		{user: "app:staff", want: &Account{Name: "app", UID: 1001, GID: 50, Home: "/workspace/home"}},
		{user: "1001:7", want: &Account{Name: "app", UID: 1001, GID: 7, Home: "/workspace/home"}},
		{user: "4242", want: &Account{UID: 4242, GID: -1}},
		{user: "nobody-here", err: `no user "nobody-here"`},
		{user: "app:nogroup", err: `no group "nogroup"`},
		{user: "broken", err: `no user "broken"`},
	} {
		got, err := ResolveUser(tc.user, passwd, group)
		if tc.err != "" {
			if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.user, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.user, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.user, diff)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
