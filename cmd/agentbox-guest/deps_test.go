package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencies keeps the guest small: it runs in every sandbox, so it
// may use only the standard library (without net/http), golang.org/x/sys,
// creack/pty, go-landlock's system call package (with psx, which it
// needs to restrict all threads and which needs no cgo) and its own
// packages.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{
		"github.com/agentbox/agentbox/cmd/agentbox-guest",
		"github.com/agentbox/agentbox/internal/guest",
		"github.com/agentbox/agentbox/internal/seccomp",
		"golang.org/x/sys/",
		"github.com/creack/pty",
		"github.com/landlock-lsm/go-landlock/landlock/syscall",
		"kernel.org/pub/linux/libs/security/libcap/psx",
	}
	for _, pkg := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			if pkg == a || strings.HasPrefix(pkg, a+"/") || (strings.HasSuffix(a, "/") && strings.HasPrefix(pkg, a)) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("agentbox-guest depends on %s", pkg)
		}
	}
	std, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(std)) {
		if pkg == "net/http" || strings.HasPrefix(pkg, "net/http/") {
			t.Errorf("agentbox-guest depends on %s", pkg)
		}
	}
}

// TestStaticBinary checks that the guest builds without cgo into a static
// binary of a reasonable size, and that "version" works.
func TestStaticBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentbox-guest")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the guest binary is dynamically linked (%s)", p.Type)
		}
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 8<<20 {
		t.Errorf("the guest binary is %d bytes; keep it under 8 MiB", fi.Size())
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "agentbox-guest ") {
		t.Errorf("version: %v %q", err, out)
	}
}
