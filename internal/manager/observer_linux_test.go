package manager

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	creates  []observed
	outcomes []observed
}

type observed struct {
	backend, outcome string
	d                time.Duration
	err              error
}

func (r *recorder) ObserveCreate(backend string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.creates = append(r.creates, observed{backend: backend, d: d, err: err})
}

func (r *recorder) ObserveExec(backend string, d time.Duration, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, observed{backend: backend, outcome: outcome, d: d})
}

func TestObserverSeesCreatesAndExecs(t *testing.T) {
	h, be := sandboxHarness(t)
	rec := &recorder{}
	base := h.configure
	h.configure = func(c *Config) {
		base(c)
		c.Observer = rec
	}
	h.reopen()
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})

	sb, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	// Refused before anything starts: not a start, not observed.
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second CreateSandbox = %v, want conflict", err)
	}
	// A replacement started by an exec is a start like any other.
	if err := be.Remove(ctx, sb.BackendRef); err != nil {
		t.Fatal(err)
	}
	h.exec(w.ID, "true")
	if res, _, _ := h.exec(w.ID, "sh", "-c", "exit 3"); res.ExitCode != 3 {
		t.Fatalf("exit 3: %+v", res)
	}
	var out bytes.Buffer
	res, err := h.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"sleep", "100"}, Env: []string{"PATH=/bin:/usr/bin"}, Timeout: time.Second}, nil, &out, &out)
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout exec = %+v, %v", res, err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.creates) != 2 {
		t.Errorf("creates = %+v, want the first start and the replacement", rec.creates)
	}
	for _, c := range rec.creates {
		if c.err != nil || c.backend != "docker" || c.d <= 0 {
			t.Errorf("create observed as %+v", c)
		}
	}
	var got []string
	for _, o := range rec.outcomes {
		if o.backend != "docker" || o.d <= 0 {
			t.Errorf("exec observed as %+v", o)
		}
		got = append(got, o.outcome)
	}
	if d := cmp.Diff([]string{OutcomeOK, OutcomeNonZero, OutcomeTimeout}, got); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
	if to := rec.outcomes[len(rec.outcomes)-1]; to.d < time.Second {
		t.Errorf("timed-out exec observed as %v, want at least its 1s timeout", to.d)
	}
}

func TestObserverOutcomeClasses(t *testing.T) {
	tests := []struct {
		name string
		res  guest.ExecResult
		oom  bool
		err  error
		want string
	}{
		{"exit 0", guest.ExecResult{}, false, nil, OutcomeOK},
		{"exit 3", guest.ExecResult{ExitCode: 3}, false, nil, OutcomeNonZero},
		{"timeout", guest.ExecResult{ExitCode: 137, Signal: 9, TimedOut: true}, false, nil, OutcomeTimeout},
		{"oom", guest.ExecResult{ExitCode: 137, Signal: 9}, true, nil, OutcomeOOM},
		{"signal", guest.ExecResult{ExitCode: 143, Signal: 15}, false, nil, OutcomeKilled},
		{"canceled", guest.ExecResult{ExitCode: 137, Signal: 9, Canceled: true}, false, nil, OutcomeKilled},
		{"connection error", guest.ExecResult{ExitCode: -1}, false, guest.ErrClosed, OutcomeKilled},
		{"lost", guest.ExecResult{ExitCode: -1, Lost: true}, false, nil, OutcomeLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomeOf(tt.res, tt.oom, tt.err); got != tt.want {
				t.Errorf("outcomeOf(%+v, %v, %v) = %q, want %q", tt.res, tt.oom, tt.err, got, tt.want)
			}
		})
	}
}
