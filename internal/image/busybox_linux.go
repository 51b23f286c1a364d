package image

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// busyboxPath is Debian's busybox-static; tests may point elsewhere.
var busyboxPath = "/bin/busybox"

// requiredApplets are what tests and the guest's callers rely on; a busybox
// built without one of them is refused rather than half-working.
var requiredApplets = strings.Fields(`sh ls cat echo sleep true false env id ps kill
	mkdir rm cp mv grep sed wc head tail stat touch chmod find xargs dd mkfifo ln
	readlink sync uname date printf test [ seq nproc df mount umount hostname tee
	sort uniq cut tr base64 sha256sum`)

// busyboxDigest checks that path is a static busybox and returns its sha256.
func busyboxDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("busybox: %v (install Debian's busybox-static): %w", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", fmt.Errorf("busybox %s: not an executable: %v: %w", path, err, errdefs.ErrUnavailable)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("busybox %s is dynamically linked; install Debian's busybox-static: %w", path, errdefs.ErrUnavailable)
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", fmt.Errorf("reading busybox %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// busyboxApplets asks the binary for its applets.
func busyboxApplets(path string) ([]string, error) {
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the applets of %s: %w", path, err)
	}
	have := map[string]bool{}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") && !have[a] {
			have[a] = true
			applets = append(applets, a)
		}
	}
	var missing []string
	for _, a := range requiredApplets {
		if !have[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("busybox %s lacks applets %s: %w", path, strings.Join(missing, " "), errdefs.ErrUnavailable)
	}
	sort.Strings(applets)
	return applets, nil
}

// buildBusybox lays out a root file system around the static busybox: every
// applet as a symlink in /bin (with /sbin, /usr/bin and /usr/sbin pointing
// there), root, nobody and the sandbox user, and the usual mount points.
func (b *builder) buildBusybox(stage string) error {
	o := b.o
	b.logf("building a busybox root file system from %s", busyboxPath)
	applets, err := busyboxApplets(busyboxPath)
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return fmt.Errorf("reading busybox %s: %w", busyboxPath, err)
	}
	if sum := sha256.Sum256(bin); hex.EncodeToString(sum[:]) != b.rec.Busybox {
		return fmt.Errorf("busybox %s changed during the build", busyboxPath)
	}
	dir := func(p string, mode os.FileMode) entry { return entry{path: p, dir: true, mode: mode} }
	file := func(p, data string) entry { return entry{path: p, mode: 0o644, data: data} }
	entries := []entry{
		dir("bin", 0o755), dir("etc", 0o755), dir("home", 0o755), dir("root", 0o700),
		dir("tmp", 0o777|os.ModeSticky), dir("var", 0o755), dir("var/tmp", 0o777|os.ModeSticky),
		dir("proc", 0o555), dir("sys", 0o555), dir("dev", 0o755), dir("run", 0o755),
		dir("mnt", 0o755), dir("usr", 0o755),
		{path: "sbin", link: "bin"},
		{path: "usr/bin", link: "../bin"},
		{path: "usr/sbin", link: "../bin"},
		{path: "bin/busybox", mode: 0o755, data: string(bin)},
		file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
		file("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
		file("etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
		file("etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"),
		file("etc/os-release", "NAME=\"agentbox busybox\"\nID=agentbox-busybox\nPRETTY_NAME=\"agentbox busybox (Debian busybox-static)\"\n"),
	}
	for _, a := range applets {
		entries = append(entries, entry{path: filepath.Join("bin", a), link: "busybox"})
	}
	if err := createAll(stage, entries); err != nil {
		return err
	}
	if err := addUser(stage, string(KindBusybox), o, "/bin/sh"); err != nil {
		return err
	}
	return createAll(stage, commonEntries(o, b.rec))
}
