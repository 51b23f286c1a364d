package workspace

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// A workspace with a disk quota keeps everything it adds to its base in a
// file system of its own: an ext4 image, DIR/disk.img, sparse (it takes
// host space only as it fills), loop-mounted nosuid,nodev at DIR/vol. The
// driver's own layout (upper, work, merged or tree) lives inside DIR/vol,
// so a write past the quota fails with ENOSPC (and the file count is
// capped too, by the image's inode table: about one inode per 16 KiB),
// while the host's free space is untouched and the files stay readable.
//
// Chosen over project quotas because it needs nothing of the host's file
// system (the data dir here sits on a plain ext4 root mounted without
// prjquota, and XFS is not guaranteed anywhere), and over a tmpfs because
// it is durable: ext4's journal replays after a crash, and an fsync in the
// workspace reaches the image (the loop driver flushes to its backing
// file). The price is ext4's metadata: 1 GiB gives about 0.96 GiB to the
// files, 10 GiB about 9.95 GiB; the quota is the image's size, so usable
// space is never above it.
const (
	volumeImage = "disk.img"
	volumeMount = "vol"
)

// VolumeImage is the image file of the workspace at dir.
func VolumeImage(dir string) string { return filepath.Join(dir, volumeImage) }

// HasVolume reports whether the workspace at dir has a quota volume.
func HasVolume(dir string) bool {
	_, err := os.Lstat(VolumeImage(dir))
	return err == nil
}

// filesRoot is where a driver keeps the layout of the workspace at dir:
// inside its volume when it has one.
func filesRoot(dir string) string {
	if HasVolume(dir) {
		return filepath.Join(dir, volumeMount)
	}
	return dir
}

// MinQuota is the smallest quota a volume can have: ext4 with a journal
// needs about this much for itself.
const MinQuota = 1 << 20

// Usage is the space and file count a workspace's volume has used.
type Usage = apitypes.DiskUsage

// SweepTemp and other layout-aware code see through the quota wrapper.
func unwrapQuota(d Driver, dir string) (Driver, string) {
	if q, ok := d.(quotaDriver); ok {
		return q.inner, filepath.Join(dir, volumeMount)
	}
	return d, dir
}

// Quota is the quota d enforces, 0 for none.
func Quota(d Driver) int64 {
	if q, ok := d.(quotaDriver); ok {
		return q.quota
	}
	return 0
}

// Unwrap is d without its quota.
func Unwrap(d Driver) Driver {
	if q, ok := d.(quotaDriver); ok {
		return q.inner
	}
	return d
}

// RCUExpedited is the host's /sys/kernel/rcu_expedited, "" when it cannot
// be read. A freeze waits for three RCU grace periods, which take about
// 24 ms on this machine's kernel unless the host expedites them.
func RCUExpedited() string {
	b, err := os.ReadFile("/sys/kernel/rcu_expedited")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
