package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Bounds on what a path image may unpack to: its layers' tar streams
// together, uncompressed, and their entries. A compression bomb or a
// layer of millions of empty files stops here, not at a full disk.
var (
	MaxImageBytes   int64 = 32 << 30
	MaxImageEntries       = 4 << 20
)

// The whiteout names of an image layer (OCI image spec, "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// flattener turns an image's layers into one tar of its final tree, the
// view an overlay of the layers would show, made safe to extract as root:
//
//   - every name is relative to the root; a name with a ".." element is
//     refused, a leading "/" dropped;
//   - only directories, regular files, symbolic links and hard links come
//     out: device nodes, FIFOs and sockets are left out (a sandbox's root
//     is bound read-only without nodev), whiteouts are applied;
//   - no entry lies below a path that is not a directory in the result,
//     so an extractor never follows a symbolic link of the image;
//   - a hard link points at a regular file already written;
//   - every path comes out once.
//
// Layers are read from the top one down, as whatever a layer holds hides
// the same path below it.
type flattener struct {
	img *pathImage
	out *tar.Writer
	// seen are the paths written (or left out, such as a device node);
	// nonDir those of them that are not directories; implied are the
	// parents of written paths, which must stay directories; regular the
	// regular files written, which hard links may point at.
	seen, nonDir, implied, regular map[string]bool
	// hidden are paths a whiteout of an upper layer removed; opaque the
	// directories whose lower contents an upper layer removed.
	hidden, opaque map[string]bool
	left           int64
	entries        int
}

func newFlattener(img *pathImage, out io.Writer) *flattener {
	return &flattener{img: img, out: tar.NewWriter(out),
		seen: map[string]bool{}, nonDir: map[string]bool{}, implied: map[string]bool{}, regular: map[string]bool{},
		hidden: map[string]bool{}, opaque: map[string]bool{}, left: MaxImageBytes}
}

// run writes the flattened tree and closes the tar (not the writer under it).
func (f *flattener) run() error {
	for i := len(f.img.layers) - 1; i >= 0; i-- {
		if err := f.layer(i); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, f.img.layers[i].diffID, err)
		}
	}
	return f.out.Close()
}

// hashReader counts and hashes what is read through it, and stops the
// whole image at its byte budget.
type hashReader struct {
	r    io.Reader
	h    hash.Hash
	left *int64
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	if h.left != nil {
		*h.left -= int64(n)
		if *h.left < 0 {
			return n, fmt.Errorf("more than %d bytes uncompressed: %w", MaxImageBytes, errdefs.ErrTooLarge)
		}
	}
	return n, err
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// layer reads layer i and writes what of it shows, then checks its
// digests: of the stored blob (OCI) and of its uncompressed tar.
func (f *flattener) layer(i int) error {
	l := f.img.layers[i]
	rc, _, err := f.img.store.open(l.name)
	if err != nil {
		return err
	}
	defer rc.Close()
	stored := &hashReader{r: rc, h: sha256.New()}
	br := bufio.NewReader(stored)
	magic, _ := br.Peek(4)
	var u io.Reader = br
	switch {
	case isGzip(magic):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("gzip: %v", err)
		}
		defer gz.Close()
		u = gz
	case isZstd(magic):
		return errors.New("zstd-compressed: only uncompressed and gzip layers are supported")
	}
	plain := &hashReader{r: u, h: sha256.New(), left: &f.left}
	tr := tar.NewReader(plain)
	whiteouts, opaques := map[string]bool{}, map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading: %w", err)
		}
		if f.entries++; f.entries > MaxImageEntries {
			return fmt.Errorf("more than %d entries: %w", MaxImageEntries, errdefs.ErrTooLarge)
		}
		if err := f.entry(tr, h, whiteouts, opaques); err != nil {
			return err
		}
	}
	// The rest of the stream (tar padding, gzip trailer) counts in both
	// digests.
	if _, err := io.Copy(io.Discard, plain); err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if got := digestOf(plain.h); got != l.diffID {
		return fmt.Errorf("its content has digest %s, the config says %s (corrupt)", got, l.diffID)
	}
	if l.digest != "" {
		if got := digestOf(stored.h); got != l.digest {
			return fmt.Errorf("blob %s has digest %s (corrupt)", l.digest, got)
		}
	}
	for p := range whiteouts {
		f.hidden[p] = true
	}
	for p := range opaques {
		f.opaque[p] = true
	}
	return nil
}

// cleanEntryName is an entry's name relative to the root ("" for the root
// itself); a name with a ".." element is an error.
func cleanEntryName(name string) (string, error) {
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("entry %q has a \"..\" element", name)
	}
	return strings.TrimPrefix(path.Clean("/"+name), "/"), nil
}

// shadowed reports whether p does not show: written already, removed by
// an upper whiteout, or below something that is not a directory.
func (f *flattener) shadowed(p string) bool {
	if f.seen[p] || f.hidden[p] || f.opaque["."] {
		return true
	}
	for a := path.Dir(p); a != "."; a = path.Dir(a) {
		if f.nonDir[a] || f.hidden[a] || f.opaque[a] {
			return true
		}
	}
	return false
}

func (f *flattener) entry(tr *tar.Reader, h *tar.Header, whiteouts, opaques map[string]bool) error {
	name, err := cleanEntryName(h.Name)
	if err != nil {
		return err
	}
	if name == "" {
		return nil // the root keeps the cache's owner and mode
	}
	switch base := path.Base(name); {
	case base == whiteoutOpaque:
		opaques[path.Dir(name)] = true
		return nil
	case strings.HasPrefix(base, whiteoutPrefix):
		whiteouts[path.Join(path.Dir(name), strings.TrimPrefix(base, whiteoutPrefix))] = true
		return nil
	}
	if f.shadowed(name) {
		return nil
	}
	isDir := h.Typeflag == tar.TypeDir
	if f.implied[name] && !isDir {
		return nil // an upper layer has files below it: it stays a directory
	}
	if h.Uid < 0 || h.Gid < 0 {
		return fmt.Errorf("entry %q has a negative owner", h.Name)
	}
	out := &tar.Header{Name: name, Mode: h.Mode & 0o7777, Uid: h.Uid, Gid: h.Gid, ModTime: h.ModTime, Format: tar.FormatPAX}
	switch h.Typeflag {
	case tar.TypeDir:
		out.Typeflag, out.Name = tar.TypeDir, name+"/"
	case tar.TypeReg, tar.TypeRegA:
		out.Typeflag, out.Size = tar.TypeReg, h.Size
	case tar.TypeSymlink:
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return fmt.Errorf("symbolic link %q has an empty or invalid target", h.Name)
		}
		out.Typeflag, out.Linkname = tar.TypeSymlink, h.Linkname
	case tar.TypeLink:
		target, err := cleanEntryName(h.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", h.Name, err)
		}
		if !f.regular[target] {
			return fmt.Errorf("hard link %q points at %q, which is no regular file of the image", h.Name, h.Linkname)
		}
		out.Typeflag, out.Linkname = tar.TypeLink, target
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// Left out, and it hides what lies at its path below.
		f.seen[name], f.nonDir[name] = true, true
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("entry %q has type %q, which no image layer holds", h.Name, h.Typeflag)
	}
	if err := f.out.WriteHeader(out); err != nil {
		return err
	}
	if out.Typeflag == tar.TypeReg {
		if _, err := io.CopyN(f.out, tr, h.Size); err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		f.regular[name] = true
	}
	f.seen[name] = true
	if !isDir {
		f.nonDir[name] = true
	}
	for a := path.Dir(name); a != "." && !f.implied[a]; a = path.Dir(a) {
		f.implied[a] = true
	}
	return nil
}
