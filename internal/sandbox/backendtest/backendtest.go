// Package backendtest is the conformance suite that every sandbox.Backend
// runs (docker, gvisor, local, ...): lifecycle, exec through the guest,
// the file system and network a sandbox sees, limits, workspace persistence
// across replacement, death from outside, failed creates, and cleanup.
//
// The suite runs real sandboxes with the real guest and judges them from
// the host where it can: it plays the daemon (guest.Listen in the run
// directory), reads what the sandbox wrote in the workspace on the host,
// and takes a census of host processes and of what the engine still holds
// after Remove. A backend that cannot run on this host skips with the
// reason, unless AGENTBOX_REQUIRE_SETUP=1 (CI), where that is a failure.
package backendtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// RequireSetupEnv, when "1", turns skips for a missing engine, runtime or
// privilege into failures: CI sets it so that a broken environment cannot
// pass as a green run.
const RequireSetupEnv = skip.RequireSetupEnv

// SkipOrFail skips t with reason, or fails it under AGENTBOX_REQUIRE_SETUP=1:
// skip.OrFail, kept here for the backends' harnesses.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	skip.OrFail(t, reason)
}

// Harness is what a backend gives the suite.
type Harness struct {
	// New returns the backend under test. It is called once per Run; the
	// backend must be safe for concurrent use. It skips (SkipOrFail) when
	// the backend cannot run here.
	New func(t *testing.T) sandbox.Backend
	// Image is the image every sandbox runs. It must hold busybox (or the
	// same applets): sh, id, cat, env, find, touch, stat, dd, sleep, ps.
	Image string
	// Guest is the static agentbox-guest binary (see BuildGuest).
	Guest string
	// UID and GID are the sandbox user; 0 means 1000.
	UID, GID int
	// GuestUID and GuestGID are the guest's own user, as the daemon gives
	// it one (CreateRequest.GuestUID); 0 means 65533, -1 none.
	GuestUID, GuestGID int
	// Kill ends an environment from outside, as a crash or an operator
	// would (docker kill), without telling the backend.
	Kill func(ctx context.Context, ref string) error
	// Leftovers lists what the engine still holds for a sandbox
	// (containers, volumes, host mounts), found independently of the
	// backend. Optional.
	Leftovers func(ctx context.Context, sandboxID string) ([]string, error)
	// Markers are strings whose presence in a host process's command
	// line, environment or cgroup makes it part of the sandbox (the
	// container id for docker); the guest's token is always one. Optional.
	Markers func(info sandbox.Info) []string
	// Logs returns the environment's own log (the guest's stderr, the
	// engine's state) for failure reports. Optional.
	Logs func(ctx context.Context, ref string) string
	// Quirks are the documented ways the backend's runtime differs.
	Quirks Quirks
}

// Quirks relax what the suite can observe on a runtime, never what it
// requires of the isolation: each one names what is checked instead.
type Quirks struct {
	// HiddenMountFlags: the sandbox's mount table does not show nosuid and
	// nodev (gVisor shows only the flags of its own file systems). The
	// workspace's nodev is then checked by behaviour only.
	HiddenMountFlags bool
	// OOMEndsSandbox: a command that exceeds the memory limit takes the
	// whole environment down (gVisor: the host kills the sandbox), so the
	// exec is lost instead of ending with SIGKILL.
	OOMEndsSandbox bool
	// PidsCountHostTasks: the pids limit counts the runtime's host
	// processes and threads, several per sandbox process (gVisor with the
	// ptrace platform), so a fork bomb is capped well below Pids.
	PidsCountHostTasks bool
	// PidsLimitEndsSandbox: reaching the pids limit takes the whole
	// environment down (gVisor: the sentry cannot make a host thread), so
	// the fork bomb's exec is lost and the sandbox does not recover. The
	// host must still be unharmed.
	PidsLimitEndsSandbox bool
	// NoNewPrivsHidden: /proc/self/status has no NoNewPrivs line (gVisor),
	// though the flag is set on the container's process.
	NoNewPrivsHidden bool
	// NoSeccompFilter: the engine's seccomp profile is not applied inside
	// (runsc without --oci-seccomp): the runtime's own syscall surface
	// stands in for it.
	NoSeccompFilter bool
	// EmulatedDeviceNodes: a device node on a bind mount opens the
	// runtime's own emulation of that device, never the host's (gVisor's
	// --character-device-policy=emulated-only, which ignores nodev), and a
	// node of a device the runtime does not emulate fails. nodev is then
	// checked with such a device (/dev/kmsg, 1:11) instead of /dev/null.
	EmulatedDeviceNodes bool
}

func (h *Harness) defaults() {
	if h.UID == 0 {
		h.UID = 1000
	}
	if h.GID == 0 {
		h.GID = 1000
	}
	if h.GuestUID == 0 && h.GuestGID == 0 {
		h.GuestUID, h.GuestGID = 65533, 65533
	}
	if h.GuestUID < 0 {
		h.GuestUID, h.GuestGID = 0, 0
	}
}

// BuildGuest builds cmd/agentbox-guest, static and without cgo, into dir
// and returns its path. It must run inside the agentbox module.
func BuildGuest(dir string) (string, error) {
	bin := filepath.Join(dir, "agentbox-guest")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/agentbox/agentbox/cmd/agentbox-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building agentbox-guest: %v\n%s", err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return "", err
	}
	return bin, nil
}

// MainWithGuest is a backend package's TestMain: it builds the guest
// (BuildGuest) into a temporary directory, sets *guest to its path, runs
// the tests and exits with their code.
func MainWithGuest(m *testing.M, guest *string) {
	dir, err := os.MkdirTemp("", "abguest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*guest, err = BuildGuest(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Run runs the whole suite against the harness's backend.
func Run(t *testing.T, h Harness) {
	s := newSuite(t, h)
	tests := []struct {
		name string
		fn   func(*testing.T, *suite)
	}{
		{"Lifecycle", testLifecycle},
		{"Sandbox", testSandbox},
		{"Limits", testLimits},
		{"Replacement", testReplacement},
		{"KilledFromOutside", testKilledFromOutside},
		{"CreateFailures", testCreateFailures},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, s)
		})
	}
}

// Bench times sandboxes of a harness's backend one at a time.
type Bench struct {
	s *suite
	// create, connect and exec are the phases of each CreateToFirstExec.
	create, connect, exec []time.Duration
}

// NewBench makes the backend of h for timing; it skips like Run.
func NewBench(t *testing.T, h Harness) *Bench {
	return &Bench{s: newSuite(t, h)}
}

// CreateToFirstExec creates a sandbox, waits for its guest, and runs true
// in it; it returns the time from Create to the end of that exec. The
// sandbox is removed before it returns (not timed).
func (b *Bench) CreateToFirstExec(t *testing.T) time.Duration {
	t.Helper()
	s := b.s
	req, ln, _, _ := s.request(t, boxOpts{})
	start := time.Now()
	info, err := s.b.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	created := time.Since(start)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		if err := s.b.Remove(ctx, info.Ref); err != nil {
			t.Errorf("Remove: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), connectTimeout)
	defer cancel()
	conn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest did not connect: %v", err)
	}
	defer conn.Close()
	connected := time.Since(start)
	res, err := conn.Exec(ctx, guest.ExecRequest{Argv: []string{"true"}, Dir: "/"}, nil, nil, nil)
	took := time.Since(start)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("true: %v %+v", err, res)
	}
	b.create = append(b.create, created)
	b.connect = append(b.connect, connected-created)
	b.exec = append(b.exec, took-connected)
	return took
}

// Phases reports the median of each phase of the CreateToFirstExec runs:
// Create returning, the guest connecting after that, the first exec.
func (b *Bench) Phases() string {
	if len(b.create) == 0 {
		return "no runs"
	}
	r := func(d []time.Duration) time.Duration { return median(d).Round(100 * time.Microsecond) }
	return fmt.Sprintf("Create %s, then the guest's connection %s, then the first exec %s", r(b.create), r(b.connect), r(b.exec))
}

// Median is the median of d.
func Median(d []time.Duration) time.Duration { return median(d) }
