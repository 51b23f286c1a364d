package local

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// harness plugs the local backend into the conformance suite. Its oracles
// are the host's: the jail's init killed by pid, and leftovers found in the
// cgroup file system, the state and stage directories and the mount table.
func harness() backendtest.Harness {
	var b *Backend
	return backendtest.Harness{
		New: func(t *testing.T) sandbox.Backend {
			if setupErr != nil {
				backendtest.SkipOrFail(t, setupErr.Error())
			}
			b = newBackend(t)
			return b
		},
		Image: "agentbox/busybox:latest",
		Guest: guestBin,
		Kill: func(ctx context.Context, ref string) error {
			// As an operator or the OOM killer would: no word to the
			// backend. The record only tells which pid.
			r, err := readRecord(filepath.Join(b.opts.StateDir, ref))
			if err != nil {
				return err
			}
			return syscall.Kill(r.Pid, syscall.SIGKILL)
		},
		Leftovers: func(ctx context.Context, id string) ([]string, error) {
			left := leftovers(b, id)
			mps, err := mountinfo.Under(filepath.Join(b.stageDir, id))
			if err != nil {
				return nil, err
			}
			for _, mp := range mps {
				left = append(left, "mount "+mp)
			}
			return left, nil
		},
		// Every process of the sandbox, bubblewrap's monitor included, is
		// in a cgroup named after it; the monitor's command line names it.
		Markers: func(info sandbox.Info) []string { return []string{"/" + info.ID} },
		Logs: func(ctx context.Context, ref string) string {
			return b.GuestLog(ref)
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness())
}

// TestCreateToFirstExec times create -> first exec the way every backend
// is timed (the local target is 15 ms). It logs and asserts nothing about
// time, and runs alone (not parallel).
func TestCreateToFirstExec(t *testing.T) {
	bench := backendtest.NewBench(t, harness())
	const n = 15
	var d []time.Duration
	for range n {
		d = append(d, bench.CreateToFirstExec(t))
	}
	t.Logf("local: create -> first exec median %s (min %s, max %s) over %d; phases: %s",
		backendtest.Median(d).Round(100*time.Microsecond), slices.Min(d).Round(100*time.Microsecond),
		slices.Max(d).Round(100*time.Microsecond), n, bench.Phases())
}
