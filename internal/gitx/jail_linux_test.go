package gitx

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestJailOutlivesThreads: a confined git is not killed when the thread
// that forked it ends. bubblewrap's --die-with-parent follows the forking
// thread, and the daemon ends threads on purpose (goroutines that exit
// locked, as internal/anonmount's do), so a git forked from a thread that
// later ends would die with "signal: killed".
func TestJailOutlivesThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "the jail's mount namespace needs root")
	}
	tree := t.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				done := make(chan struct{})
				go func() {
					runtime.LockOSThread() // and exit locked: the thread ends
					close(done)
				}()
				<-done
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var runs sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		runs.Add(1)
		go func() {
			defer runs.Done()
			// git reads its input for a while: it outlives many threads.
			r, w := io.Pipe()
			go func() {
				for j := 0; j < 20; j++ {
					w.Write([]byte("data\n"))
					time.Sleep(5 * time.Millisecond)
				}
				w.Close()
			}()
			if _, err := Run(t.Context(), Cmd{Hardened: true, Jail: &Jail{ReadOnly: []string{tree}}, Stdin: r, Args: []string{"hash-object", "--stdin"}}); err != nil {
				errs <- err
			}
		}()
	}
	runs.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a confined git died with the thread that forked it: %v", err)
	}
}
