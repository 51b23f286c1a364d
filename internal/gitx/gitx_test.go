package gitx

import (
	"errors"
	"testing"
)

// TestOutputCap: the cap holds even though os/exec copies with io.Copy
// (which would use a promoted ReadFrom and bypass Write).
func TestOutputCap(t *testing.T) {
	_, err := Run(t.Context(), Cmd{Hardened: true, MaxOutput: 1000, Args: []string{"version", "--build-options"}})
	if err != nil {
		t.Fatalf("small cap on short output: %v", err)
	}
	// `git help -a` prints well over 1000 bytes.
	_, err = Run(t.Context(), Cmd{Hardened: true, MaxOutput: 1000, Args: []string{"help", "-a"}})
	if !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
	out, err := Run(t.Context(), Cmd{Hardened: true, Args: []string{"help", "-a"}})
	if err != nil || len(out) <= 1000 {
		t.Fatalf("uncapped output = %d bytes, %v", len(out), err)
	}
}

func TestHardenedIgnoresEnvironment(t *testing.T) {
	t.Setenv("GIT_DIR", "/nonexistent-canary")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "canary")
	// A hardened git must not see the daemon's GIT_DIR (or anything else).
	out, err := Run(t.Context(), Cmd{Hardened: true, Dir: t.TempDir(), Args: []string{"var", "GIT_EDITOR"}})
	if err != nil || string(out) != "false\n" {
		t.Fatalf("git var GIT_EDITOR = %q, %v (want the hardened editor 'false')", out, err)
	}
}
