package doctor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Timeouts per check. Kernel probes are quick; the ones that start processes or talk
// to the engine get more room on a loaded machine.
const (
	kernelTimeout = 5 * time.Second
	toolTimeout   = 10 * time.Second
	dockerTimeout = 5 * time.Second
)

func runChecks(ctx context.Context, opts Options) []Check {
	return runAll(ctx, opts, []checker{
		{names: []string{"overlayfs"}, timeout: toolTimeout, run: one(checkOverlay)},
		{names: []string{"user-namespaces"}, timeout: toolTimeout, run: one(checkUserNS)},
		{names: []string{"cgroups"}, timeout: kernelTimeout, run: one(checkCgroups)},
		{names: []string{"landlock"}, timeout: kernelTimeout, run: one(checkLandlock)},
		{names: []string{"seccomp"}, timeout: kernelTimeout, run: one(checkSeccomp)},
		{names: []string{"git"}, timeout: toolTimeout, run: one(checkGit)},
		{names: []string{"bubblewrap"}, timeout: toolTimeout, run: one(checkBubblewrap)},
		{names: []string{"runsc"}, timeout: toolTimeout, run: one(checkRunsc)},
		{names: dockerCheckNames, timeout: dockerTimeout, run: checkDocker},
		{names: probeCheckNames, timeout: probeTimeout, run: checkProbes},
	})
}

// checker is one check, or a group of checks that share work (the docker ones share one
// conversation with the engine): the names it reports, in order, how long it may take,
// and the function that does it.
type checker struct {
	names   []string
	timeout time.Duration
	run     func(ctx context.Context, opts Options) []Check
}

func one(f func(ctx context.Context, opts Options) Check) func(context.Context, Options) []Check {
	return func(ctx context.Context, opts Options) []Check { return []Check{f(ctx, opts)} }
}

// runAll runs the checkers concurrently, each under its own timeout, and returns their
// checks in the checkers' order. A checker that does not return shortly after its
// timeout (a syscall stuck in the kernel, say) is reported as a warning rather than
// waited for: its goroutine is left behind, which beats a doctor that hangs.
func runAll(ctx context.Context, opts Options, checkers []checker) []Check {
	results := make([]chan []Check, len(checkers))
	for i, c := range checkers {
		results[i] = make(chan []Check, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			results[i] <- c.run(cctx, opts)
		}()
	}
	start := time.Now()
	var out []Check
	for i, c := range checkers {
		// The checker's own context ends at its timeout; give it a moment past that to
		// notice and report the cancellation in its own words.
		grace := time.NewTimer(time.Until(start.Add(c.timeout + time.Second)))
		select {
		case got := <-results[i]:
			out = append(out, got...)
		case <-grace.C:
			out = append(out, unfinished(c, "did not finish within "+c.timeout.String())...)
		case <-ctx.Done():
			select {
			case got := <-results[i]:
				out = append(out, got...)
			default:
				out = append(out, unfinished(c, "cancelled: "+ctx.Err().Error())...)
			}
		}
		grace.Stop()
	}
	return out
}

func unfinished(c checker, why string) []Check {
	out := make([]Check, len(c.names))
	for i, n := range c.names {
		out[i] = Check{Name: n, Status: StatusWarn, Detail: "check " + why}
	}
	return out
}

// command runs name with args under ctx and returns its combined output, trimmed. The
// process is killed when ctx ends, and Wait gives up on pipes held open by stray
// grandchildren a second later, so it cannot hang.
func command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.WaitDelay = time.Second
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	out := strings.TrimSpace(buf.String())
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return out, err
}

// commandError describes a failed command by its error and the first line it printed.
func commandError(err error, out string) string {
	if l := firstLine(out); l != "" {
		return err.Error() + ": " + l
	}
	return err.Error()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}

// readTrim reads a small file (a /proc or /sys knob) and trims it.
func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// ms renders a duration for a detail line: "2ms", "0.4ms", "1.2s".
func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}
