package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// slimDpkg keeps later package installs as small as the image (the same
// exclusions as Debian's official slim images).
const slimDpkg = `# agentbox: no documentation, manuals or translations (like Debian's slim images)
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
`

// aptClean keeps apt from leaving downloaded packages and caches behind.
const aptClean = `// agentbox: keep no downloaded packages or package caches
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
`

// gitConfig is the system-wide git configuration. There is no
// safe.directory: backends mount the workspace owned by the sandbox user,
// which is exactly what git's ownership check wants, and "*" would switch
// that protection off for every repository. An identity is set so that
// `git commit` works in a fresh sandbox; callers override it with
// GIT_AUTHOR_* / GIT_COMMITTER_* or the repository's own config.
const gitConfig = `[user]
	name = agentbox agent
	email = agent@agentbox.invalid
[init]
	defaultBranch = main
[advice]
	detachedHead = false
`

// buildDebian fills stage with a Debian root file system: the cached
// result of the recipe if there is one, else the base (the cached
// debootstrap result, or a fresh debootstrap, cached for next time) with
// the recipe's extra packages installed by apt (cached apart), then the
// sandbox user and the agentbox files.
func (b *builder) buildDebian(ctx context.Context, stage string) error {
	d, o := b.rec.Debian, b.o
	arch := hostArch()
	base := *d
	base.Extra = nil
	if len(d.Extra) == 0 {
		if err := b.cachedStage(ctx, stage, &base, arch, func() error { return b.debootstrap(ctx, stage, &base, arch) }); err != nil {
			return err
		}
	} else if err := b.cachedStage(ctx, stage, d, arch, func() error {
		if err := b.cachedStage(ctx, stage, &base, arch, func() error { return b.debootstrap(ctx, stage, &base, arch) }); err != nil {
			return err
		}
		return b.aptInstall(ctx, stage, d.Extra)
	}); err != nil {
		return err
	}
	if err := addUser(stage, string(KindDebian), o, "/bin/bash"); err != nil {
		return err
	}
	entries := append([]entry{
		{path: "etc/gitconfig", mode: 0o644, data: gitConfig},
	}, commonEntries(o, b.rec)...)
	return createAll(stage, entries)
}

// cachedStage fills stage with the cached tree of recipe d, or makes it with
// make, slims it and caches it for next time.
func (b *builder) cachedStage(ctx context.Context, stage string, d *debootstrapRecipe, arch string, make func() error) error {
	o := b.o
	var cached string
	if o.CacheDir != "" {
		cached = filepath.Join(o.CacheDir, fmt.Sprintf("debootstrap-%s-%s-%s.tar", d.Suite, arch, d.cacheKey(o.Mirror, arch)))
	}
	if cached != "" {
		if _, err := os.Stat(cached); err == nil {
			start := time.Now()
			b.logf("unpacking the cached tree %s", cached)
			if err := untar(ctx, cached, stage); err != nil {
				if ctx.Err() != nil {
					return err
				}
				// A damaged cache heals itself: drop it and make it again.
				b.logf("warning: %v; removing it and making it again", err)
				os.Remove(cached)
				if err := emptyDir(stage); err != nil {
					return err
				}
			} else {
				b.logf("unpacked in %s", time.Since(start).Round(100*time.Millisecond))
				return nil
			}
		}
	}
	if err := make(); err != nil {
		return err
	}
	if err := slimDebian(stage); err != nil {
		return fmt.Errorf("cleaning the tree: %w", err)
	}
	if cached != "" {
		if err := writeCache(ctx, stage, cached); err != nil {
			if ctx.Err() != nil {
				return err
			}
			b.logf("warning: not caching the tree: %v", err)
		} else {
			b.logf("cached the tree in %s", cached)
		}
	}
	return nil
}

// aptScript installs packages in the root at $1 from its own apt sources,
// in a mount namespace of its own (the caller's), where /proc, /dev and the
// host's resolv.conf are mounted for apt and the maintainer scripts only.
const aptScript = `set -e
root=$1; shift
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
touch "$root/etc/resolv.conf"
mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
chroot "$root" apt-get update -q
chroot "$root" apt-get install -y -q --no-install-recommends "$@"
chroot "$root" apt-get clean
`

// aptInstall installs extra packages into a Debian tree with apt.
func (b *builder) aptInstall(ctx context.Context, stage string, pkgs []string) error {
	b.logf("installing %s with apt", strings.Join(pkgs, " "))
	start := time.Now()
	out := newTail(20)
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", aptScript, "apt-install", stage}, pkgs...)...)
	cmd.Env = append(debootstrapEnv(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout = io.MultiWriter(b.o.Progress, out)
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("installing %s: %w", strings.Join(pkgs, " "), ctx.Err())
		}
		return fmt.Errorf("installing %s: %v:\n%s", strings.Join(pkgs, " "), err, out)
	}
	b.logf("apt installed them in %s", time.Since(start).Round(time.Second))
	return nil
}

// debootstrap runs debootstrap into stage. It runs in a mount namespace of
// its own, so that the /proc and /sys it mounts inside the target vanish
// with it even when it is killed, and in a process group of its own, so
// that cancelling kills dpkg and every maintainer script too.
func (b *builder) debootstrap(ctx context.Context, stage string, d *debootstrapRecipe, arch string) error {
	path, err := lookSbin("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap not found (install Debian's debootstrap): %w", errdefs.ErrUnavailable)
	}
	args := []string{
		"--variant=" + d.Variant,
		"--include=" + strings.Join(d.Include, ","),
		"--components=main",
		"--arch=" + arch,
		d.Suite, stage, b.o.Mirror,
	}
	b.logf("running debootstrap %s (%s, %s) from %s; this takes a few minutes", d.Suite, d.Variant, arch, b.o.Mirror)
	start := time.Now()
	out := newTail(12)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = debootstrapEnv()
	cmd.Stdout = io.MultiWriter(b.o.Progress, out)
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("debootstrap: %w", ctx.Err())
	}
	if err != nil {
		msg := out.String()
		// The reason is often only in the log it keeps in the target.
		if log := tailFile(filepath.Join(stage, "debootstrap", "debootstrap.log"), 12); log != "" {
			msg += "\n--- debootstrap.log ---\n" + log
		}
		return fmt.Errorf("debootstrap failed: %v:\n%s", err, msg)
	}
	b.logf("debootstrap took %s", time.Since(start).Round(time.Second))
	return nil
}

// lookSbin finds a command in PATH or, since a daemon's PATH often lacks
// them, in the sbin directories.
func lookSbin(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if fi, serr := os.Stat(filepath.Join(dir, name)); serr == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}

// debootstrapEnv is a clean environment that keeps only what reaches the
// mirror (proxies).
func debootstrapEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive",
	}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// slimDebian removes what a sandbox never needs and the host files that
// debootstrap copies in.
func slimDebian(root string) error {
	for _, g := range []string{
		"var/cache/apt/archives/*.deb", "var/cache/apt/archives/partial/*", "var/cache/apt/*.bin",
		"var/lib/apt/lists/*_*", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
		"usr/share/man/*", "usr/share/info/*", "usr/share/lintian/*",
		"dev/*", "tmp/*", "var/tmp/*", "root/.cache",
		"etc/resolv.conf", "etc/hostname",
	} {
		matches, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	// Documentation except the copyright files; translations except the
	// alias table.
	if err := removeExcept(filepath.Join(root, "usr/share/doc"), func(rel string, d os.DirEntry) bool {
		return d.Name() == "copyright"
	}); err != nil {
		return err
	}
	if err := removeExcept(filepath.Join(root, "usr/share/locale"), func(rel string, d os.DirEntry) bool {
		return rel == "locale.alias"
	}); err != nil {
		return err
	}
	// Logs of the bootstrap itself.
	if err := filepath.WalkDir(filepath.Join(root, "var/log"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			return os.Remove(p)
		}
		return nil
	}); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return createAll(root, []entry{
		{path: "etc/hostname", mode: 0o644, data: "sandbox\n"},
		{path: "etc/resolv.conf", mode: 0o644, data: ""},
		{path: "etc/hosts", mode: 0o644, data: "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{path: "etc/dpkg/dpkg.cfg.d/agentbox-slim", mode: 0o644, data: slimDpkg},
		{path: "etc/apt/apt.conf.d/agentbox-clean", mode: 0o644, data: aptClean},
	})
}

// removeExcept deletes every file under dir for which keep is false, and
// the directories left empty.
func removeExcept(dir string, keep func(rel string, d os.DirEntry) bool) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if p != dir {
				dirs = append(dirs, p)
			}
			return nil
		}
		if keep(rel, d) {
			return nil
		}
		return os.Remove(p)
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) // fails, as wanted, when something was kept
	}
	return nil
}

// emptyDir removes everything inside dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// writeCache stores a tar of root at path, atomically.
func writeCache(ctx context.Context, root, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	defer os.Remove(tmp)
	stderr := newTail(10)
	cmd := exec.CommandContext(ctx, "tar", "--create", "--file="+tmp, "--directory="+root,
		"--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
		"--one-file-system", "--sort=name", ".")
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("archiving %s: %v: %s", root, err, stderr)
	}
	return os.Rename(tmp, path)
}

// untar unpacks a tar written by writeCache into dir. GNU tar as root
// keeps owners, modes and capabilities, and does not follow a symlink from
// the archive out of dir.
func untar(ctx context.Context, path, dir string) error {
	stderr := newTail(10)
	cmd := exec.CommandContext(ctx, "tar", "--extract", "--file="+path, "--directory="+dir,
		"--numeric-owner", "--same-owner", "--same-permissions", "--xattrs", "--xattrs-include=security.capability")
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("unpacking %s: %v: %s", path, err, stderr)
	}
	return nil
}

// tailFile returns the last n lines of a file, or "".
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	t := newTail(n)
	t.Write(b)
	return t.String()
}

// hostArch is the Debian architecture of this host.
func hostArch() string {
	if out, err := exec.Command("dpkg", "--print-architecture").Output(); err == nil {
		if a := strings.TrimSpace(string(out)); a != "" {
			return a
		}
	}
	switch runtime.GOARCH {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	}
	return runtime.GOARCH // amd64, arm64, ppc64le, s390x, riscv64 match
}
