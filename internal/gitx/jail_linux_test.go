package gitx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// TestJail: a confined git reads what its jail lists and nothing else of
// the host, whatever path it is given: absolute, through "..", through a
// symlink planted in a listed tree, or through /proc/self/root.
func TestJail(t *testing.T) {
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "the jail's mount namespace needs root")
	}
	secretDir := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	canary := "canary-jail-" + filepath.Base(t.TempDir())
	secret := filepath.Join(secretDir, "key")
	if err := os.WriteFile(secret, []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "own"), []byte("own file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secretDir, filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(tree, secret)
	if err != nil {
		t.Fatal(err)
	}
	// git hash-object reads any file it is given: its answer is the
	// file's blob name, which says whether it read the secret.
	hash := func(j *Jail, path string) (string, error) {
		out, err := Run(t.Context(), Cmd{Hardened: true, Jail: j, Dir: tree, Args: []string{"hash-object", "--no-filters", "--", path}})
		return strings.TrimSpace(string(out)), err
	}
	want, err := hash(nil, secret)
	if err != nil || want == "" {
		t.Fatalf("hashing the secret on the host: %q, %v", want, err)
	}
	jail := &Jail{ReadOnly: []string{tree}}
	// Control: unconfined, every path reaches the secret.
	for _, p := range []string{rel, "link/key", "/proc/self/root" + secret} {
		if got, err := hash(nil, p); got != want {
			t.Fatalf("control: unconfined git did not read the secret through %s: %q, %v", p, got, err)
		}
	}
	if got, err := hash(jail, "own"); err != nil || got == "" {
		t.Errorf("confined git cannot read its own tree: %q, %v", got, err)
	}
	for _, p := range []string{secret, rel, "link/key", "/proc/self/root" + secret, "/etc/shadow", "/proc/1/environ"} {
		if got, err := hash(jail, p); err == nil || got == want {
			t.Errorf("confined git read %s: %q, %v", p, got, err)
		}
	}
	// Writes land only where the jail lets them.
	if _, err := Run(t.Context(), Cmd{Hardened: true, Jail: jail, Args: []string{"init", "-q", "--bare", filepath.Join(tree, "new.git")}}); err == nil {
		t.Errorf("confined git wrote into a read-only tree")
	}
	gitDir := filepath.Join(t.TempDir(), "g.git")
	if err := os.Mkdir(gitDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(t.Context(), Cmd{Hardened: true, Jail: &Jail{Writable: []string{gitDir}}, Args: []string{"init", "-q", "--bare", gitDir}}); err != nil {
		t.Errorf("confined git could not write where it may: %v", err)
	}
}

func TestJailRefusesSystemPaths(t *testing.T) {
	for _, p := range []string{"/", "/usr", "/usr/lib", "/dev", "relative"} {
		if _, _, err := (&Jail{ReadOnly: []string{p}}).command("", []string{"version"}); err == nil {
			t.Errorf("a jail listing %q was accepted", p)
		}
	}
}
