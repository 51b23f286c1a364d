package workspace

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A fork of a workspace with a quota volume is a copy of the volume's
// image, taken while its file system is frozen: the kernel writes out
// everything the parent's sandbox wrote and holds new writes for the few
// milliseconds of the copy. The host never walks the parent's files, and
// the cost follows the bytes the image holds, not the number of files
// changed: a thousand small files are a few hundred KiB of blocks.
//
// The image is copied sparse, and without the body of ext4's journal: a
// frozen file system has checkpointed its journal and marked it empty
// (its superblock's s_start is 0), so the blocks after the journal's own
// superblock hold nothing the copy needs, and they are left as holes, as
// they were in the template. That keeps a long-lived parent, whose
// journal has filled its 64 MiB, as quick to fork as a new one. The
// journal is skipped only when the snapshot shows it empty.

// ioctl numbers of FIFREEZE and FITHAW (_IOWR('X', 119/120, int)).
const (
	ioctlFreeze = 0xC0045877
	ioctlThaw   = 0xC0045878
)

// snapshotVolume makes dst (which must not exist) a copy of the image of
// the workspace at dir, whose volume is mounted, consistent as of one
// instant. It first tries a quiet snapshot, which needs the volume to
// take no write while it runs; when one comes, it freezes the volume for
// the copy and thaws it after, whatever happens. The caller keeps other
// snapshots of dir from running at the same time (the manager forks a
// parent under its lock): a second freeze of a frozen file system fails
// with EBUSY.
func snapshotVolume(dir, dst string) error {
	if ok, err := volumeMounted(dir); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("snapshotting the disk of %s: it is not mounted", dir)
	}
	fd, err := openVolume(dir)
	if err != nil {
		return fmt.Errorf("snapshotting the disk of %s: %w", dir, err)
	}
	defer unix.Close(fd)
	quiet, err := quietSnapshot(fd, VolumeImage(dir), dst)
	if err != nil {
		return fmt.Errorf("snapshotting the disk of %s: %w", dir, err)
	}
	if quiet {
		return nil
	}
	return frozenSnapshot(fd, dir, dst)
}

// frozenSnapshot copies the image of the workspace at dir to dst while
// the file system mounted from it, open at fd, is frozen.
func frozenSnapshot(fd int, dir, dst string) (err error) {
	img := VolumeImage(dir)
	if err := unix.IoctlSetInt(fd, ioctlFreeze, 0); err != nil {
		return fmt.Errorf("freezing the disk of %s: %w", dir, err)
	}
	defer func() {
		if terr := unix.IoctlSetInt(fd, ioctlThaw, 0); terr != nil && err == nil {
			err = fmt.Errorf("thawing the disk of %s: %w", dir, terr)
		}
	}()
	skip, err := emptyJournal(img)
	if err != nil {
		return fmt.Errorf("snapshotting the disk of %s: %w", dir, err)
	}
	if err := copySparse(img, dst, skip...); err != nil {
		return fmt.Errorf("snapshotting the disk of %s: %w", dir, err)
	}
	return nil
}

// ioctlCheckpoint is EXT4_IOC_CHECKPOINT (_IOW('f', 43, __u32)): commit
// ext4's journal, write every block it holds to its place, and mark it
// empty.
const ioctlCheckpoint = 0x4004662B

// quietHook, when set (by tests), runs between the two looks at the
// device's counters.
var quietHook func()

// quietSnapshot copies img to dst without freezing the file system
// mounted from it (open at fd), when nothing writes to it meanwhile: a
// freeze waits for three RCU grace periods (about 24 ms on this
// machine's kernel), and an idle parent does not need one. It reports
// false, with dst removed, when the volume took a write, or when the
// kernel cannot checkpoint ext4's journal; the caller then freezes.
//
// The file system is made clean on its device twice: everything written
// back (syncfs), the journal committed, written to its places and marked
// empty (EXT4_IOC_CHECKPOINT). The device's counters are read between the
// two and after the copy. When no sector was written or discarded and no
// request was in flight at either look, the second cleaning found nothing
// to write, so the device held the whole file system, clean, before the
// copy, and the copy read one unchanging device: the same instant a
// freeze would have given. The copy's journal is empty, as a freeze
// leaves it (its body is left out); only its super block still says the
// file system is mounted, and the journal it names is empty, so mounting
// it replays nothing. A sandbox that keeps writing only sends its
// workspace's forks down the frozen path.
func quietSnapshot(fd int, img, dst string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	counters := fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev))
	clean := func() bool {
		return unix.Syncfs(fd) == nil && unix.IoctlSetPointerInt(fd, ioctlCheckpoint, 0) == nil
	}
	if !clean() {
		return false, nil
	}
	before, err := deviceWrites(counters)
	if err != nil || !clean() {
		return false, nil
	}
	if quietHook != nil {
		quietHook()
	}
	skip, err := emptyJournal(img)
	if err != nil {
		return false, err
	}
	if skip == nil {
		return false, nil
	}
	if err := copySparse(img, dst, skip...); err != nil {
		return false, err
	}
	after, err := deviceWrites(counters)
	if err != nil || after != before || before.inFlight != 0 {
		os.Remove(dst)
		return false, nil
	}
	return true, nil
}

// writeCounters are what a block device's stat file says of writes:
// sectors written, sectors discarded, and requests in flight. Sectors,
// not requests: each syncfs sends the device an empty flush, which counts
// as a write request that writes nothing.
type writeCounters struct{ written, discarded, inFlight uint64 }

// deviceWrites reads the write counters of a block device's stat file
// (Documentation/block/stat.rst: fields 7, 14 and 9).
func deviceWrites(path string) (writeCounters, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return writeCounters{}, err
	}
	f := strings.Fields(string(b))
	if len(f) < 14 {
		return writeCounters{}, fmt.Errorf("%s: %d fields, want at least 14", path, len(f))
	}
	var n [3]uint64
	for i, k := range []int{6, 13, 8} {
		if n[i], err = strconv.ParseUint(f[k], 10, 64); err != nil {
			return writeCounters{}, fmt.Errorf("%s: field %d: %w", path, k+1, err)
		}
	}
	return writeCounters{written: n[0], discarded: n[1], inFlight: n[2]}, nil
}

// Thaw thaws the volume of the workspace at dir if it is mounted and
// frozen, and reports whether it was: a daemon that died between a
// fork's freeze and its thaw leaves the parent's writers waiting.
func Thaw(dir string) (bool, error) {
	if !HasVolume(dir) {
		return false, nil
	}
	if ok, err := volumeMounted(dir); err != nil || !ok {
		return false, err
	}
	fd, err := openVolume(dir)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	switch err := unix.IoctlSetInt(fd, ioctlThaw, 0); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EINVAL): // not frozen
		return false, nil
	default:
		return false, fmt.Errorf("thawing the disk of %s: %w", dir, err)
	}
}

// openVolume opens the root of the mounted volume of the workspace at
// dir, for its ioctls.
func openVolume(dir string) (int, error) {
	return unix.Open(filepath.Join(dir, volumeMount), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// span is a byte range of an image.
type span struct{ off, end int64 }

// emptyJournal returns the byte ranges of the ext4 image img that hold
// its journal's body, when the journal is internal, described by the
// backup of its inode in the super block (a tree of depth 0), and empty
// (its own super block, which is not in the ranges, says s_start 0).
// Otherwise it returns nothing, and the whole image is copied.
func emptyJournal(img string) ([]span, error) {
	f, err := os.Open(img)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	const (
		compatHasJournal = 0x4
		jnlBackupBlocks  = 1
		extentMagic      = 0xF30A
	)
	if le.Uint16(sb[0x38:]) != 0xEF53 || le.Uint32(sb[0x5C:])&compatHasJournal == 0 ||
		le.Uint32(sb[0xE4:]) != 0 || sb[0xFD] != jnlBackupBlocks {
		return nil, nil
	}
	logBlock := le.Uint32(sb[0x18:])
	if logBlock > 6 {
		return nil, nil
	}
	bs := int64(1024) << logBlock
	iblock := sb[0x10C : 0x10C+60]
	if le.Uint16(iblock[0:]) != extentMagic || le.Uint16(iblock[6:]) != 0 {
		return nil, nil
	}
	n := int(le.Uint16(iblock[2:]))
	if n < 1 || n > 4 {
		return nil, nil
	}
	var spans []span
	var jsb int64 = -1
	var blocks int64
	for i := range n {
		e := iblock[12+12*i:]
		logical := int64(le.Uint32(e[0:]))
		length := int64(le.Uint16(e[4:]))
		if length > 32768 { // an unwritten extent
			length -= 32768
		}
		blocks += length
		phys := int64(le.Uint16(e[6:]))<<32 | int64(le.Uint32(e[8:]))
		if length == 0 {
			return nil, nil
		}
		if logical == 0 {
			jsb = phys * bs
			phys++ // the journal's super block is copied
			length--
		}
		if length > 0 {
			spans = append(spans, span{phys * bs, (phys + length) * bs})
		}
	}
	if jsb < 0 {
		return nil, nil
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	// The journal's super block (big-endian): its magic, its length in
	// blocks (which the extents must cover), and s_start.
	j := make([]byte, 32)
	if _, err := f.ReadAt(j, jsb); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	if be.Uint32(j[0:]) != 0xC03B3998 || int64(be.Uint32(j[0x10:])) != blocks || be.Uint32(j[0x1C:]) != 0 {
		return nil, nil
	}
	return spans, nil
}
