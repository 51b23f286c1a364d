package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/image"
)

// hostSuiteScript mounts /proc, /dev and a fresh /tmp in the root file
// system $1, in the private mount namespace it runs in, and runs the
// suite script $2 there as the sandbox user ($3) in /tmp, with the
// pytest arguments after them and only $SUITE_ENV in its environment.
const hostSuiteScript = `set -e; r=$1; s=$2; u=$3; shift 3
mount --make-rprivate /; mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"; mount -t tmpfs tmpfs "$r/tmp"
exec chroot --userspec="$u:$u" "$r" env -i $SUITE_ENV bash -c "$s" suite /tmp "$@"`

// hostSuite is the suite's host baseline: the engine's image img
// unpacked where the local backend unpacks it (image.DefaultCache), held
// until release so that no collector removes it meanwhile.
func hostSuite(ctx context.Context, img string) (run suiteRun, release func(), err error) {
	for _, tool := range []string{"unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, nil, fmt.Errorf("bench: the suite's host baseline needs %s: %w", tool, err)
		}
	}
	u, err := image.Unpack(ctx, img, image.DefaultCache)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	hold, err := image.HoldRootfs(ctx, image.DefaultCache, u.Rootfs)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	run = func(ctx context.Context, pytestArgs ...string) (string, error) {
		args := append([]string{"-m", "sh", "-c", hostSuiteScript, "host", u.Rootfs, suiteScript, strconv.Itoa(sandboxUID)}, pytestArgs...)
		cmd := exec.CommandContext(ctx, "unshare", args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SUITE_ENV=" + strings.Join(suiteEnv, " ")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("pytest on the host: %v: %s", err, lastBytes(string(out), 2000))
		}
		return strings.TrimSpace(string(out)), nil
	}
	return run, hold.Release, nil
}
