package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// PathRecord says that an image named by path was used, so that `image
// ls` can list it (the engine holds such an image untagged, if at all).
type PathRecord struct {
	// Ref is the path reference, as the sandbox spec names it.
	Ref string `json:"ref"`
	// ID is the image id it resolved to when last used.
	ID string `json:"id"`
	// Backends are the backends it was used on.
	Backends []string `json:"backends"`
	// Used is when it was last used.
	Used time.Time `json:"used"`
}

// pathRecordDir holds one PathRecord per reference, under the cache.
const pathRecordDir = "paths"

func pathRecordFile(cacheDir, ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return filepath.Join(cacheDir, pathRecordDir, hex.EncodeToString(sum[:16])+".json")
}

// RecordPath notes that backend used the image at ref, with id. It is
// best effort: a record that cannot be written only leaves `image ls`
// without it.
func RecordPath(cacheDir, ref, id, backend string) {
	p := pathRecordFile(cacheDir, ref)
	var r PathRecord
	if b, err := os.ReadFile(p); err == nil {
		json.Unmarshal(b, &r)
	}
	if r.Ref != ref || r.ID != id {
		r = PathRecord{Ref: ref, ID: id}
	}
	if !slices.Contains(r.Backends, backend) {
		r.Backends = append(r.Backends, backend)
		sort.Strings(r.Backends)
	}
	r.Used = time.Now().UTC()
	b, _ := json.MarshalIndent(r, "", "  ")
	if os.MkdirAll(filepath.Dir(p), 0o755) != nil {
		return
	}
	// A temporary file renamed over the record: a reader sees the old
	// record or the new one, whole.
	tmp, err := os.CreateTemp(filepath.Dir(p), ".record-")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil && cerr == nil {
		os.Chmod(tmp.Name(), 0o644)
		os.Rename(tmp.Name(), p)
	}
}

// PathRecords lists the path images used so far, by reference.
func PathRecords(cacheDir string) []PathRecord {
	ents, _ := os.ReadDir(filepath.Join(cacheDir, pathRecordDir))
	var out []PathRecord
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(cacheDir, pathRecordDir, e.Name()))
		if err != nil {
			continue
		}
		var r PathRecord
		if json.Unmarshal(b, &r) == nil && r.Ref != "" && pathRecordFile(cacheDir, r.Ref) == filepath.Join(cacheDir, pathRecordDir, e.Name()) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// ForgetPath removes the record of ref.
func ForgetPath(cacheDir, ref string) { os.Remove(pathRecordFile(cacheDir, ref)) }
