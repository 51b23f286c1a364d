package docker

import (
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
)

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Name: "podman", Runtime: RuntimeRunc},
		{Name: NameDocker, Runtime: "crun"},
		{Name: NameDocker, Runtime: RuntimeRunc, StopTimeout: -time.Second},
		{Name: NameDocker, Runtime: RuntimeRunc, Host: "ftp://nowhere"},
	} {
		if _, err := New(o); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

// TestGuestEnvIsChecked: the guest gets its token and nothing else.
func TestGuestEnvIsChecked(t *testing.T) {
	for _, env := range [][]string{nil, {"HOME=/root"}, {"AGENTBOX_GUEST_TOKEN"}, {"AGENTBOX_GUEST_X=a\x00b"}, {guest.TokenEnv + "=t", "PATH=/bin"}} {
		if err := checkGuestEnv(env); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("guest environment %q: %v, want ErrInvalid", env, err)
		}
	}
	if err := checkGuestEnv([]string{guest.TokenEnv + "=t", guest.SocketEnv + "=/run/agentbox/x.sock"}); err != nil {
		t.Errorf("a token and a socket: %v", err)
	}
}
