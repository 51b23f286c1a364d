package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkQuotaFork times, one step each, what a fork of a workspace
// with a quota volume (the default) is made of, so that a fork's figure
// in agentbox bench workspace can be read as a sum:
//
//	go test -run '^$' -bench QuotaFork ./internal/workspace
//
// The steps:
//   - make volume: a new, empty volume (copy of the template, loop
//     device, mount), which a fork below snapshotMinFiles starts from,
//     before it copies the parent's files (BenchmarkCopyTree);
//   - freeze and thaw: FIFREEZE and FITHAW of a parent's volume, the
//     floor of a snapshot fork whatever the parent holds, each 100 ms
//     after the last, as forks come;
//   - snapshot: snapshotVolume of a parent holding 1,000 written files,
//     which takes no write meanwhile: a quiet snapshot (two cleanings
//     of the file system, sparse copy of the image);
//   - snapshot, frozen: the same copy taken frozen (freeze, copy, thaw),
//     as a parent that is written to during a fork is;
//   - mount snapshot: a snapshot's image under a new loop device.
//
// Each step's setup and clean-up run with the timer stopped.
func BenchmarkQuotaFork(b *testing.B) {
	const quota = 1 << 30
	templates := b.TempDir()
	parent := b.TempDir()
	if err := makeVolume(b.Context(), parent, templates, quota); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unmountVolume(parent) })
	for i := range 1000 {
		p := filepath.Join(parent, volumeMount, fmt.Sprintf("d%d", i%40), fmt.Sprintf("f%d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package changed\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	scratch := b.TempDir()
	fresh := func() string {
		d, err := os.MkdirTemp(scratch, "fork-")
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	// drop unmounts and removes the volume in d, off the clock.
	drop := func(b *testing.B, d string) {
		b.StopTimer()
		defer b.StartTimer()
		if err := unmountVolume(d); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(d)
	}

	b.Run("make volume", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			d := fresh()
			b.StartTimer()
			if err := makeVolume(b.Context(), d, templates, quota); err != nil {
				b.Fatal(err)
			}
			drop(b, d)
		}
	})

	b.Run("freeze and thaw", func(b *testing.B) {
		fd, err := openVolume(parent)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		for range b.N {
			// Apart, as forks are: the kernel skips the grace periods
			// of a freeze that follows the last thaw closely.
			b.StopTimer()
			time.Sleep(100 * time.Millisecond)
			b.StartTimer()
			if err := unix.IoctlSetInt(fd, ioctlFreeze, 0); err != nil {
				b.Fatal(err)
			}
			if err := unix.IoctlSetInt(fd, ioctlThaw, 0); err != nil {
				b.Fatal(err)
			}
		}
	})

	// snapshots times snap into a new image, each 100 ms after the last.
	snapshots := func(b *testing.B, snap func(img string) error) {
		for range b.N {
			b.StopTimer()
			img := VolumeImage(fresh())
			time.Sleep(100 * time.Millisecond)
			b.StartTimer()
			if err := snap(img); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(filepath.Dir(img))
			b.StartTimer()
		}
	}
	b.Run("snapshot", func(b *testing.B) {
		snapshots(b, func(img string) error { return snapshotVolume(parent, img) })
	})
	b.Run("snapshot, frozen", func(b *testing.B) {
		fd, err := openVolume(parent)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		snapshots(b, func(img string) error { return frozenSnapshot(fd, parent, img) })
	})

	b.Run("mount snapshot", func(b *testing.B) {
		img := filepath.Join(fresh(), "snapshot.img")
		if err := snapshotVolume(parent, img); err != nil {
			b.Fatal(err)
		}
		for range b.N {
			b.StopTimer()
			d := fresh()
			copyImg := VolumeImage(d)
			if err := copySparse(img, copyImg); err != nil {
				b.Fatal(err)
			}
			mnt := filepath.Join(d, volumeMount)
			if err := os.Mkdir(mnt, 0o755); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := mountImage(copyImg, mnt, true); err != nil {
				b.Fatal(err)
			}
			drop(b, d)
		}
	})
}
