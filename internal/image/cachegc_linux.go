package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The cache of unpacked images and its collector. Every unpacked root
// file system cacheDir/HEX has a lock file cacheDir/.HEX.lock: Unpack and
// UnpackPath hold it exclusively while they unpack, a sandbox running from
// the root file system holds it shared for as long as it runs (HoldRootfs),
// and the collector removes an entry only while it holds it exclusively,
// so never one that a sandbox of any daemon on the machine runs from.

// Hold is a shared lock on an unpacked root file system; Release ends it.
type Hold struct{ f *os.File }

// Release ends the hold. A nil Hold releases nothing.
func (h *Hold) Release() {
	if h != nil && h.f != nil {
		h.f.Close()
	}
}

// HoldRootfs takes a shared lock on the cache entry that rootfs is
// (cacheDir/HEX/rootfs), so that the collector leaves it while a sandbox
// runs from it. A rootfs outside cacheDir needs none: it returns nil. An
// entry that is gone (collected between its lookup and the hold) is an
// error wrapping fs.ErrNotExist: look it up again.
func HoldRootfs(ctx context.Context, cacheDir, rootfs string) (*Hold, error) {
	rel, err := filepath.Rel(cacheDir, rootfs)
	if err != nil || filepath.Base(rel) != "rootfs" || filepath.Dir(filepath.Dir(rel)) != "." {
		return nil, nil
	}
	hexID := filepath.Dir(rel)
	if _, ok := idHex("sha256:" + hexID); !ok {
		return nil, nil
	}
	f, err := lockFile(ctx, filepath.Join(cacheDir, "."+hexID+".lock"), syscall.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("holding image %s: %w", hexID[:12], err)
	}
	if _, err := os.Stat(filepath.Join(cacheDir, hexID, unpackedFile)); err != nil {
		f.Close()
		return nil, fmt.Errorf("holding image %s: %w", hexID[:12], err)
	}
	return &Hold{f: f}, nil
}

// lockFile opens path and takes how (LOCK_SH or LOCK_EX) on it, polling
// until ctx ends (flock cannot be interrupted).
func lockFile(ctx context.Context, path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	delay := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// CacheItem is one entry the collector removed, or would remove.
type CacheItem struct {
	// ID is the image id; Name what it was unpacked as.
	ID, Name string
	// Reason says why it is garbage.
	Reason string
	// Bytes is its size on disk.
	Bytes int64
	// Removed is set once it is gone; Err says why removing it failed.
	Removed bool
	Err     error
}

// leftoverAge is how old an unfinished unpack must be to count as a
// crashed one.
const leftoverAge = time.Hour

// CollectCache removes the root file systems in cacheDir whose image is
// gone and that no sandbox runs from (see HoldRootfs): an image the engine
// no longer has and no path that unpacked it still holds. It also removes
// the records of path images whose path no longer holds them, and unpacks
// left unfinished by a crash. When the engine cannot be reached, every
// image is kept: whether it is gone cannot be told. A dry run removes
// nothing and lists what would go.
func CollectCache(ctx context.Context, cacheDir string, dryRun bool) ([]CacheItem, error) {
	ents, err := os.ReadDir(cacheDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("collecting the image cache %s: %w", cacheDir, err)
	}
	var engineHas func(id string) (bool, error)
	c, cerr := connect(ctx)
	if cerr == nil {
		defer c.Close()
		engineHas = func(id string) (bool, error) {
			_, ok, err := inspect(ctx, c, id)
			return ok, err
		}
	}
	var out []CacheItem
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		name := e.Name()
		if strings.HasPrefix(name, ".unpack-") || strings.HasPrefix(name, ".gc-") {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > leftoverAge {
				it := CacheItem{Name: name, Reason: "an unpack that did not finish"}
				it.Bytes, _ = dirSize(filepath.Join(cacheDir, name))
				if !dryRun {
					it.Err = removeTree(filepath.Join(cacheDir, name))
					it.Removed = it.Err == nil
				}
				out = append(out, it)
			}
			continue
		}
		if !e.IsDir() {
			continue
		}
		u, ok := CachedID(cacheDir, "sha256:"+name)
		if !ok {
			continue
		}
		// One entry per image id, whichever source unpacked it: an image
		// named by a path and the same image in the engine share it. It
		// is garbage only when neither holds the image any more.
		why := "the engine no longer has it"
		if u.Source != "" {
			id, _, err := InspectPath(u.Source)
			switch {
			case err == nil && id == u.ID:
				continue
			case err != nil:
				why = fmt.Sprintf("its path no longer holds an image (%v), nor does the engine", err)
			default:
				why = fmt.Sprintf("its path holds another image now (%s), and the engine does not have it", id)
			}
		}
		if engineHas == nil {
			continue // whether the engine has it cannot be told
		}
		if has, err := engineHas(u.ID); err != nil || has {
			continue
		}
		it, err := collectEntry(ctx, cacheDir, u, why, dryRun)
		if err != nil {
			continue // in use
		}
		out = append(out, it)
	}
	for _, r := range PathRecords(cacheDir) {
		if id, _, err := InspectPath(r.Ref); (err != nil || id != r.ID) && !dryRun {
			ForgetPath(cacheDir, r.Ref)
		}
	}
	return out, nil
}

// errInUse says a sandbox holds an entry.
var errInUse = errors.New("a sandbox runs from it")

// collectEntry removes one entry under its exclusive lock, or fails with
// errInUse when a sandbox holds it.
func collectEntry(ctx context.Context, cacheDir string, u Unpacked, why string, dryRun bool) (CacheItem, error) {
	hexID, _ := idHex(u.ID)
	it := CacheItem{ID: u.ID, Name: u.Name, Reason: why}
	f, err := os.OpenFile(filepath.Join(cacheDir, "."+hexID+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return it, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return it, errInUse
	}
	dir := filepath.Join(cacheDir, hexID)
	it.Bytes, _ = dirSize(dir)
	if dryRun {
		return it, nil
	}
	// Out of the way first, whole: a lookup sees the entry or nothing.
	rnd := make([]byte, 6)
	rand.Read(rnd)
	trash := filepath.Join(cacheDir, ".gc-"+hexID[:12]+"-"+hex.EncodeToString(rnd))
	if it.Err = os.Rename(dir, trash); it.Err == nil {
		it.Err = removeTree(trash)
	}
	it.Removed = it.Err == nil
	return it, nil
}
