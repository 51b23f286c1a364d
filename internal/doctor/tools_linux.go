package doctor

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// checkGit: the repo cache and every workspace driver run the git command.
func checkGit(ctx context.Context, _ Options) Check {
	c := Check{Name: "git"}
	if _, err := exec.LookPath("git"); err != nil {
		c.Status, c.Detail, c.Fix = StatusMissing, "git not found on PATH", "apt-get install -y git"
		return c
	}
	out, err := command(ctx, "git", "--version")
	if err != nil {
		c.Status, c.Detail, c.Fix = StatusMissing, "git --version: "+commandError(err, out), "apt-get install -y --reinstall git"
		return c
	}
	c.Status, c.Detail = StatusOK, firstLine(out)
	return c
}

// checkBubblewrap: the local backend's jail, and host-side git's (gitx.Jail). Beyond the version, it runs a real sandbox
// with every namespace unshared, since bwrap can be installed yet unusable (user
// namespaces off, or a setuid bwrap refused by the kernel).
func checkBubblewrap(ctx context.Context, _ Options) Check {
	c := Check{Name: "bubblewrap"}
	if _, err := exec.LookPath("bwrap"); err != nil {
		c.Status, c.Detail, c.Fix = StatusMissing, "bwrap not found on PATH", "apt-get install -y bubblewrap"
		return c
	}
	out, err := command(ctx, "bwrap", "--version")
	if err != nil {
		c.Status, c.Detail, c.Fix = StatusMissing, "bwrap --version: "+commandError(err, out), "apt-get install -y --reinstall bubblewrap"
		return c
	}
	version := firstLine(out)
	start := time.Now()
	out, err = command(ctx, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true")
	took := time.Since(start)
	if err != nil {
		c.Status = StatusWarn
		c.Detail = version + "; sandboxed run (bwrap --ro-bind / / --unshare-all true) failed: " + commandError(err, out)
		c.Fix = "enable user namespaces (sysctl -w user.max_user_namespaces=15000; on Debian/Ubuntu also kernel.unprivileged_userns_clone=1) and see the user-namespaces check"
		return c
	}
	c.Status, c.Detail = StatusOK, version+"; sandboxed run with all namespaces unshared ok in "+ms(took)
	return c
}

// checkRunsc: gVisor's runtime binary, which the gvisor backend reaches through Docker: the
// one the engine has registered (scripts/setup.sh builds a current one off PATH), else the
// one on PATH. Whether it runs ordinary tools is the probe-gvisor check.
func checkRunsc(ctx context.Context, opts Options) Check {
	c := Check{Name: "runsc"}
	path, how := registeredRunsc(ctx, opts.DockerHost), "registered with the engine"
	if path == "" {
		p, err := exec.LookPath("runsc")
		if err != nil {
			c.Status, c.Detail, c.Fix = StatusMissing, "runsc not registered with the engine nor on PATH", "scripts/setup.sh"
			return c
		}
		path, how = p, "on PATH (the engine lists none)"
	}
	out, err := command(ctx, path, "--version")
	if err != nil {
		c.Status, c.Detail, c.Fix = StatusMissing, path+" --version: "+commandError(err, out), "scripts/setup.sh"
		return c
	}
	c.Status, c.Detail = StatusOK, firstLine(out)+" at "+path+", "+how
	if strings.Contains(out, "0.0~2022") {
		// Debian's 0.0~20221219: statx fails with EINVAL, so ls -l, stat and ls / fail.
		c.Status = StatusWarn
		c.Detail += "; this build breaks statx (ls -l, stat fail inside gVisor)"
		c.Fix = "scripts/setup.sh (builds and registers a current runsc)"
	}
	return c
}

// registeredRunsc is the path of the engine's runsc runtime, or "".
func registeredRunsc(ctx context.Context, host string) string {
	client, base, err := dockerClient(host)
	if err != nil {
		return ""
	}
	defer client.CloseIdleConnections()
	var info dockerInfo
	if err := dockerGetJSON(ctx, client, base, "/info", &info); err != nil {
		return ""
	}
	if p := info.Runtimes["runsc"].Path; filepath.IsAbs(p) {
		return p
	}
	return ""
}
