package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/moby/moby/client"
)

// Runnable is an image and the backends that can run it here.
type Runnable struct {
	Image
	// Backends are the backends that can run it: docker and gvisor when the engine
	// has it and the runc or runsc runtime; local when it is unpacked (Rootfs) or the
	// engine has it to unpack on first use, and bubblewrap is installed.
	Backends []string `json:"backends"`
	// LocalUnpacked says the local backend has it unpacked already (at Rootfs).
	LocalUnpacked bool `json:"local_unpacked"`
	// Why says, for each backend that cannot run it, why not.
	Why map[string]string `json:"why,omitempty"`
}

// ListRunnable lists every tagged image in the engine (agentbox's and any other), the
// root file systems `image build --no-engine` left under dataDir/images, and the images
// named by path that a backend has used (image.RecordPath), each with the backends that
// can run it. cacheDir is the local backend's cache of unpacked images. An
// unreachable engine leaves only the unpacked root file systems.
func ListRunnable(ctx context.Context, dataDir, cacheDir string) ([]Runnable, error) {
	_, bwrapErr := exec.LookPath("bwrap")
	var out []Runnable
	seen := map[string]bool{}
	runtimes := map[string]bool{}
	if c, err := connect(ctx); err == nil {
		defer c.Close()
		info, err := c.Info(ctx, client.InfoOptions{})
		if err != nil {
			return nil, engineErr("asking the engine for its runtimes", err)
		}
		for r := range info.Info.Runtimes {
			runtimes[r] = true
		}
		res, err := c.ImageList(ctx, client.ImageListOptions{})
		if err != nil {
			return nil, engineErr("listing images", err)
		}
		for _, s := range res.Items {
			for _, tag := range s.RepoTags {
				if tag == "<none>:<none>" {
					continue
				}
				r := Runnable{Image: fromLabels(tag, s.ID, s.Labels, s.Size, time.Unix(s.Created, 0)), Why: map[string]string{}}
				for _, b := range []struct{ name, runtime string }{{"docker", "runc"}, {"gvisor", "runsc"}} {
					if _, ok := info.Info.Runtimes[b.runtime]; ok {
						r.Backends = append(r.Backends, b.name)
					} else {
						r.Why[b.name] = "the engine has no " + b.runtime + " runtime"
					}
				}
				if u, ok := CachedID(cacheDir, s.ID); ok {
					r.Rootfs, r.LocalUnpacked = u.Rootfs, true
				}
				if bwrapErr != nil {
					r.Why["local"] = "bubblewrap is not installed"
				} else {
					r.Backends = append(r.Backends, "local")
				}
				seen[tag] = true
				out = append(out, r)
			}
		}
	}
	for _, k := range []Kind{KindBusybox, KindDebian} {
		dir := filepath.Join(dataDir, "images", string(k), "rootfs")
		if readRelease(dir) == "" {
			continue
		}
		name := DefaultName(k)
		if seen[name] {
			// The engine's image of that name; its build left this rootfs too.
			for i := range out {
				if out[i].Name == name && !out[i].LocalUnpacked {
					out[i].Rootfs, out[i].LocalUnpacked = dir, true
				}
			}
			continue
		}
		r := Runnable{Image: Image{Name: name, Kind: k, Rootfs: dir}, LocalUnpacked: true,
			Why: map[string]string{"docker": "not in the engine", "gvisor": "not in the engine"}}
		if fi, err := os.Stat(filepath.Join(dir, ReleaseFile)); err == nil {
			r.Created = fi.ModTime().UTC()
		}
		if bwrapErr != nil {
			r.Why["local"] = "bubblewrap is not installed"
		} else {
			r.Backends = append(r.Backends, "local")
		}
		out = append(out, r)
	}
	// Images named by path that a backend has used: any backend can run
	// one while its path still holds it (docker and gvisor load it into
	// the engine on first use, local unpacks it).
	for _, rec := range PathRecords(cacheDir) {
		if pr, err := ParsePathRef(rec.Ref); err != nil || !exists(pr.Path) {
			continue // gone: no image any more (the collector forgets it)
		}
		r := Runnable{Image: Image{Name: rec.Ref, ID: rec.ID, Created: rec.Used}, Why: map[string]string{}}
		if u, ok := CachedID(cacheDir, rec.ID); ok {
			r.Rootfs, r.LocalUnpacked = u.Rootfs, true
		}
		id, _, err := InspectPath(rec.Ref)
		switch {
		case err != nil:
			for _, b := range []string{"docker", "gvisor", "local"} {
				r.Why[b] = "the path holds no valid image now"
			}
		case id != rec.ID:
			r.ID = id
			r.Rootfs, r.LocalUnpacked = "", false
			if u, ok := CachedID(cacheDir, id); ok {
				r.Rootfs, r.LocalUnpacked = u.Rootfs, true
			}
		}
		if err == nil {
			for _, b := range []struct{ name, runtime string }{{"docker", "runc"}, {"gvisor", "runsc"}} {
				switch {
				case len(runtimes) == 0:
					r.Why[b.name] = "no engine"
				case runtimes[b.runtime]:
					r.Backends = append(r.Backends, b.name)
				default:
					r.Why[b.name] = "the engine has no " + b.runtime + " runtime"
				}
			}
			if bwrapErr != nil {
				r.Why["local"] = "bubblewrap is not installed"
			} else {
				r.Backends = append(r.Backends, "local")
			}
		}
		out = append(out, r)
	}
	for i := range out {
		if len(out[i].Why) == 0 {
			out[i].Why = nil
		}
		if out[i].Backends == nil {
			out[i].Backends = []string{}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if out == nil {
		out = []Runnable{}
	}
	return out, nil
}

// String is a short description for errors and logs.
func (r Runnable) String() string { return fmt.Sprintf("%s %v", r.Name, r.Backends) }

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
