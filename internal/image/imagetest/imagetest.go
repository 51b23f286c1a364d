// Package imagetest makes images named by path for tests: a `docker save`
// archive of an engine image, an OCI layout made from it, an OCI archive of
// that layout, and layouts from hand-written (hostile) layers.
package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// DockerSave writes `docker save name` to dir/name.tar and returns its path.
func DockerSave(t testing.TB, name, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "saved.tar")
	if out, err := exec.Command("docker", "save", "-o", p, name).CombinedOutput(); err != nil {
		t.Fatalf("docker save %s: %v\n%s", name, err, out)
	}
	return p
}

// Digest is the "sha256:..." digest of b.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// LayoutFromDockerArchive makes an OCI image layout at dir from the one
// image of a `docker save` archive, with gzip-compressed layers, its
// manifest tagged tag in index.json. It returns the image id (the config
// digest).
func LayoutFromDockerArchive(t testing.TB, archive, dir, tag string) string {
	t.Helper()
	files := readTar(t, archive)
	var ms []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &ms); err != nil || len(ms) != 1 {
		t.Fatalf("%s: manifest.json: %v (%d images)", archive, err, len(ms))
	}
	var layers [][]byte
	for _, l := range ms[0].Layers {
		layers = append(layers, files[resolve(files, l)])
	}
	return WriteLayout(t, dir, tag, files[ms[0].Config], layers, true)
}

// resolve follows docker save's layer links.
func resolve(files map[string][]byte, name string) string {
	if link, ok := files["\x00link:"+name]; ok {
		return filepath.Join(filepath.Dir(name), string(link))
	}
	return name
}

func readTar(t testing.TB, p string) map[string][]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[name] = b
		case tar.TypeSymlink:
			files["\x00link:"+name] = []byte(h.Linkname)
		}
	}
	return files
}

// WriteLayout writes an OCI layout at dir of one image: config is its
// config (if nil, one is made for the layers with a shell-less default),
// layers its uncompressed layer tars, gzipped when compress is set.
func WriteLayout(t testing.TB, dir, tag string, config []byte, layers [][]byte, compress bool) string {
	t.Helper()
	blob := func(b []byte) string {
		d := Digest(b)
		p := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if config == nil {
		var diffIDs []string
		for _, l := range layers {
			diffIDs = append(diffIDs, Digest(l))
		}
		config, _ = json.Marshal(map[string]any{
			"os": "linux", "architecture": runtime.GOARCH,
			"config": map[string]any{"Env": []string{"PATH=/bin"}},
			"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
		})
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.oci.image.manifest.v1+json",
		Config: desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: blob(config), Size: len(config)}}
	for _, l := range layers {
		mt := "application/vnd.oci.image.layer.v1.tar"
		if compress {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(l)
			zw.Close()
			l, mt = buf.Bytes(), mt+"+gzip"
		}
		m.Layers = append(m.Layers, desc{MediaType: mt, Digest: blob(l), Size: len(l)})
	}
	mb, _ := json.Marshal(m)
	md := desc{MediaType: m.MediaType, Digest: blob(mb), Size: len(mb)}
	if tag != "" {
		md.Annotations = map[string]string{"org.opencontainers.image.ref.name": tag}
	}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []desc{md}})
	os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	return Digest(config)
}

// TarDir writes the tree at dir into the tar file out (an OCI archive when
// dir is a layout).
func TarDir(t testing.TB, dir, out string) {
	t.Helper()
	if b, err := exec.Command("tar", "-C", dir, "-cf", out, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar %s: %v\n%s", dir, err, b)
	}
}

// Entry is one member of a hand-written layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg when 0
	Body     string
	Linkname string
	Mode     int64
	Size     int64 // when set, a file of this many zero bytes instead of Body
}

// Layer writes entries as an uncompressed layer tar.
func Layer(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Linkname, Mode: e.Mode, ModTime: time.Unix(1e9, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
			if e.Size > 0 {
				h.Size = e.Size
			}
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.Size > 0 {
			io.CopyN(tw, zeros{}, e.Size)
		} else if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.Body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
