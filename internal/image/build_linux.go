package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
)

// Build builds the image opts describes, imports it into the engine and
// unpacks it at opts.RootfsDir. It does nothing when both already match the
// recipe (unless opts.Force). On failure nothing it started is left behind:
// no temporary directory, no half-imported image, and the previous image
// and root file system stay as they were.
func Build(ctx context.Context, opts BuildOptions) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	fail := func(err error) (Image, error) {
		return Image{}, fmt.Errorf("building image %s: %w", o.Name, err)
	}
	if os.Geteuid() != 0 {
		return fail(fmt.Errorf("needs root to create files owned by root and uid %d: %w", o.UID, errdefs.ErrUnavailable))
	}
	rec := recipe{Version: recipeVersion, Kind: o.Kind, UID: o.UID, GID: o.GID}
	switch o.Kind {
	case KindBusybox:
		if rec.Busybox, err = busyboxDigest(busyboxPath); err != nil {
			return fail(err)
		}
	case KindDebian:
		rec.Debian = newDebootstrapRecipe(o.Packages)
	}
	b := &builder{o: o, rec: rec, logf: func(format string, args ...any) {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}}
	if !o.NoEngine {
		if b.c, err = connect(ctx); err != nil {
			return fail(err)
		}
		defer b.c.Close()
	}
	if lock := b.lockPath(); lock != "" {
		if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
			return fail(err)
		}
		l, err := flock.Acquire(ctx, lock)
		if err != nil {
			return fail(err)
		}
		defer l.Unlock()
	}
	img, err := b.run(ctx)
	if err != nil {
		return fail(err)
	}
	return img, nil
}

// builder carries one build.
type builder struct {
	o    BuildOptions
	rec  recipe
	c    *client.Client // nil with NoEngine
	logf func(format string, args ...any)
}

// lockPath serialises builds that share a root file system or a cache.
func (b *builder) lockPath() string {
	switch {
	case b.o.RootfsDir != "":
		return filepath.Join(filepath.Dir(b.o.RootfsDir), "."+filepath.Base(b.o.RootfsDir)+".lock")
	case b.o.CacheDir != "":
		return filepath.Join(b.o.CacheDir, ".lock")
	}
	return ""
}

// failAt, when set by a test, fails the build at the named step ("built",
// "imported", "installed") so that every rollback path runs.
var failAt func(step string) error

func step(name string) error {
	if failAt != nil {
		return failAt(name)
	}
	return nil
}

func (b *builder) run(ctx context.Context) (_ Image, err error) {
	start := time.Now()
	o, hash := b.o, b.rec.Hash()

	// What is already there?
	var prev client.ImageInspectResult
	var havePrev, imageOK bool
	if b.c != nil {
		if prev, havePrev, err = inspect(ctx, b.c, o.Name); err != nil {
			return Image{}, err
		}
		if havePrev && prev.Config != nil {
			l := prev.Config.Labels
			imageOK = l[LabelKind] == string(o.Kind) && l[LabelRecipe] == hash
		}
	}
	rootfsOK := o.RootfsDir != "" && readRelease(o.RootfsDir) == b.rec.release()
	if o.Force {
		imageOK, rootfsOK = false, false
	}
	needImage := b.c != nil && !imageOK
	needRootfs := o.RootfsDir != "" && !rootfsOK
	if !needImage && !needRootfs {
		b.logf("%s is up to date (recipe %.12s)", o.Name, hash)
		return b.result(ctx)
	}

	// Every step registers its undo; a failure runs them in reverse.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	src := o.RootfsDir // an up-to-date rootfs is imported as it is
	var stage string
	if needRootfs || o.RootfsDir == "" {
		var parent string
		if stage, parent, err = b.newStage(); err != nil {
			return Image{}, err
		}
		defer func() {
			if rerr := removeTree(parent); rerr != nil {
				b.logf("warning: %v", rerr)
			}
		}()
		switch o.Kind {
		case KindBusybox:
			err = b.buildBusybox(stage)
		case KindDebian:
			err = b.buildDebian(ctx, stage)
		}
		if err == nil {
			err = step("built")
		}
		if err != nil {
			return Image{}, err
		}
		src = stage
	}

	newID := ""
	if needImage {
		b.logf("importing %s into the engine", o.Name)
		undoImport := func(id string) {
			// A fresh context: the build's may be what ended it.
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if id == "" {
				// The import failed, but an engine that had the whole stream
				// when the request was cut may still have made the image.
				img, ok, _ := inspect(cctx, b.c, o.Name)
				if !ok || (havePrev && img.ID == prev.ID) || img.Config == nil || img.Config.Labels[LabelRecipe] != hash {
					return
				}
				id = img.ID
			}
			if _, err := b.c.ImageRemove(cctx, id, client.ImageRemoveOptions{Force: true}); err != nil && !isNotFound(err) {
				b.logf("warning: removing half-built image %s: %v", id, err)
			}
			if havePrev {
				if _, err := b.c.ImageTag(cctx, client.ImageTagOptions{Source: prev.ID, Target: o.Name}); err != nil {
					b.logf("warning: restoring tag %s on %s: %v", o.Name, prev.ID, err)
				}
			}
		}
		if newID, err = b.importDir(ctx, src); err != nil {
			undoImport("")
			return Image{}, err
		}
		undo = append(undo, func() { undoImport(newID) })
		if err = step("imported"); err != nil {
			return Image{}, err
		}
	}
	var oldRootfs string
	if needRootfs {
		if err = ctx.Err(); err != nil {
			return Image{}, err
		}
		if oldRootfs, err = installRootfs(stage, o.RootfsDir); err != nil {
			return Image{}, err
		}
		undo = append(undo, func() {
			if err := restoreRootfs(o.RootfsDir, oldRootfs); err != nil {
				b.logf("warning: %v", err)
			}
		})
		if err = step("installed"); err != nil {
			return Image{}, err
		}
	}
	img, err := b.result(ctx)
	if err != nil {
		return Image{}, err
	}

	// Committed. Local sandboxes still running on the old tree lose it here;
	// a rebuild only happens when the recipe changes or is forced.
	if oldRootfs != "" {
		if err := removeTree(oldRootfs); err != nil {
			b.logf("warning: %v", err)
		}
	}
	// The previous image lost its tag; drop it unless something still uses
	// it (a container, another tag), in which case the engine refuses.
	if havePrev && newID != "" && prev.ID != newID {
		if _, err := b.c.ImageRemove(ctx, prev.ID, client.ImageRemoveOptions{}); err == nil {
			b.logf("removed the previous image %.19s", prev.ID)
		}
	}
	b.logf("built %s (%s, %s) in %s", o.Name, orNone(img.ID), humanBytes(img.SizeBytes), time.Since(start).Round(100*time.Millisecond))
	return img, nil
}

// result describes the image as it now is.
func (b *builder) result(ctx context.Context) (Image, error) {
	o := b.o
	if b.c != nil {
		img, ok, err := inspect(ctx, b.c, o.Name)
		if err != nil {
			return Image{}, err
		}
		if !ok {
			return Image{}, fmt.Errorf("image %s vanished from the engine", o.Name)
		}
		out := describe(o.Name, img)
		out.Rootfs = o.RootfsDir
		return out, nil
	}
	size, err := dirSize(o.RootfsDir)
	if err != nil {
		return Image{}, err
	}
	created := time.Now().UTC()
	if fi, err := os.Stat(filepath.Join(o.RootfsDir, ReleaseFile)); err == nil {
		created = fi.ModTime().UTC()
	}
	return Image{Name: o.Name, Kind: o.Kind, Rootfs: o.RootfsDir, SizeBytes: size, Created: created, UID: o.UID, GID: o.GID}, nil
}

// newStage makes an empty root directory to build in, next to RootfsDir so
// that installing it is a rename. parent is what to remove afterwards.
func (b *builder) newStage() (stage, parent string, err error) {
	dir := os.TempDir()
	if b.o.RootfsDir != "" {
		dir = filepath.Dir(b.o.RootfsDir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", err
		}
	}
	parent, err = os.MkdirTemp(dir, ".build-"+string(b.o.Kind)+"-")
	if err != nil {
		return "", "", err
	}
	stage = filepath.Join(parent, "rootfs")
	if err := os.Mkdir(stage, 0o755); err != nil {
		os.RemoveAll(parent)
		return "", "", err
	}
	return stage, parent, nil
}

// importDir streams a tar of dir into the engine and returns the image id.
// GNU tar writes it: it keeps hard links, numeric owners and file
// capabilities, and never crosses into a mount.
func (b *builder) importDir(ctx context.Context, dir string) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	stderr := newTail(20)
	cmd := exec.CommandContext(ctx, "tar", "--create", "--file=-", "--directory="+dir,
		"--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
		"--one-file-system", "--sort=name", ".")
	cmd.Stdout, cmd.Stderr = pw, stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("archiving %s: %w", dir, err)
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("archiving %s: %v: %s", dir, err, stderr)
		}
		pw.CloseWithError(err) // nil: the engine sees the end of the stream
		done <- err
	}()
	id, ierr := importTar(ctx, b.c, pr, b.o.Name, importChanges(b.o, b.rec))
	if ierr != nil {
		cancel() // stop tar if the engine gave up first
	}
	pr.Close()
	terr := <-done
	switch {
	case ierr != nil:
		return "", ierr
	case terr != nil:
		// The engine may have taken a truncated stream for a whole one.
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		b.c.ImageRemove(cctx, id, client.ImageRemoveOptions{Force: true})
		return "", terr
	}
	return id, nil
}

// installRootfs moves stage to dst. An existing dst is renamed aside first,
// so that dst is never half-written; the caller removes old once the build
// is committed, or puts it back with restoreRootfs.
func installRootfs(stage, dst string) (old string, err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("installing rootfs %s: %w", dst, err)
	}
	if _, err := os.Lstat(dst); err == nil {
		old = fmt.Sprintf("%s.old-%d", dst, time.Now().UnixNano())
		if err := os.Rename(dst, old); err != nil {
			return "", fmt.Errorf("installing rootfs %s: moving the old one aside: %w", dst, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("installing rootfs %s: %w", dst, err)
	}
	if err := os.Rename(stage, dst); err != nil {
		err = fmt.Errorf("installing rootfs %s: %w", dst, err)
		if old != "" {
			if rerr := os.Rename(old, dst); rerr != nil {
				err = fmt.Errorf("%v; restoring the old one from %s: %v", err, old, rerr)
			}
		}
		return "", err
	}
	return old, nil
}

// restoreRootfs undoes installRootfs: the new tree goes, the old comes back.
func restoreRootfs(dst, old string) error {
	if err := removeTree(dst); err != nil {
		return fmt.Errorf("rolling back rootfs %s: %w", dst, err)
	}
	if old == "" {
		return nil
	}
	if err := os.Rename(old, dst); err != nil {
		return fmt.Errorf("rolling back rootfs %s from %s: %w", dst, old, err)
	}
	return nil
}

// readRelease returns the release file of an unpacked root, or "".
func readRelease(root string) string {
	b, err := os.ReadFile(filepath.Join(root, ReleaseFile))
	if err != nil {
		return ""
	}
	return string(b)
}

// dirSize is the disk use of a tree's regular files and links, hard links
// counted once.
func dirSize(root string) (int64, error) {
	type ino struct{ dev, ino uint64 }
	seen := map[ino]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := statT(fi); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			k := ino{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring %s: %w", root, err)
	}
	return total, nil
}
