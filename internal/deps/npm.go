package deps

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// npmFile is the artifact's file name in the workspace, as `npm pack`
// names it: a scope becomes a prefix ("@types/node" 1.0.0 is
// types-node-1.0.0.tgz). Name and version were validated: no slash or
// dot-dot survives.
func npmFile(name, version string) string {
	name = strings.Replace(strings.TrimPrefix(name, "@"), "/", "-", 1)
	return name + "-" + version + ".tgz"
}

// packument is the part of an npm registry's package document read here.
type packument struct {
	Versions map[string]struct {
		Dist struct {
			Tarball   string `json:"tarball"`
			Integrity string `json:"integrity"`
		} `json:"dist"`
	} `json:"versions"`
}

// fetchNPM reads the package's document from the source, requires the
// version's integrity there to be the approved one and its tarball to be
// on the source, then streams the tarball to a private temporary file,
// hashing as it goes. Only a tarball whose digest is the approved one is
// returned, open at its start; anything else leaves nothing behind.
func (a *Admitter) fetchNPM(ctx context.Context, r Request, e Entry, src *url.URL, want []byte) (*os.File, string, int64, error) {
	// The registry's URL of a scoped package escapes its slash.
	doc, err := url.Parse(src.String() + "/" + strings.Replace(e.Name, "/", "%2f", 1))
	if err != nil {
		return nil, "", 0, fmt.Errorf("npm package %s: %w", e.Name, errdefs.ErrInvalid)
	}
	resp, err := a.get(ctx, r, doc, src, "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8")
	if err != nil {
		return nil, "", 0, err
	}
	var p packument
	err = json.NewDecoder(io.LimitReader(resp.Body, a.o.MaxMetadata)).Decode(&p)
	resp.Body.Close()
	if err != nil {
		return nil, "", 0, fmt.Errorf("npm package %s: reading the registry's document (at most %d bytes): %v: %w", e.Name, a.o.MaxMetadata, err, errdefs.ErrUnavailable)
	}
	v, ok := p.Versions[e.Version]
	if !ok {
		return nil, "", 0, fmt.Errorf("npm package %s: the source %s has no version %s: %w", e.Name, src, e.Version, errdefs.ErrNotFound)
	}
	if got, ok := sriSHA512(v.Dist.Integrity); !ok || !equalDigest(got, want) {
		return nil, "", 0, deny(r, "the source's integrity for it (%q) is not the approved digest %s", v.Dist.Integrity, e.Integrity)
	}
	tarball, err := url.Parse(v.Dist.Tarball)
	if err != nil || tarball.Scheme == "" {
		return nil, "", 0, deny(r, "the source's tarball address %q is not a URL", v.Dist.Tarball)
	}
	resp, err = a.get(ctx, r, tarball, src, "application/octet-stream")
	if err != nil {
		return nil, "", 0, err
	}
	defer resp.Body.Close()
	f, n, got, err := a.stream(resp.Body)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, "", 0, deny(r, "the artifact at %s is over %d bytes", redact(tarball), a.o.MaxArtifact)
		}
		return nil, "", 0, fmt.Errorf("npm package %s: fetching %s: %w", e.Name, redact(tarball), err)
	}
	if !equalDigest(got, want) {
		f.Close()
		return nil, "", 0, deny(r, "digest mismatch: the artifact from %s hashes to %s, the approved digest is %s; nothing was written", redact(tarball), sriString(got), e.Integrity)
	}
	return f, tarball.String(), n, nil
}

// stream copies r to a new temporary file in TempDir, which has no name
// from the start (unlinked at once: nothing to clean up after a crash),
// hashing as it goes, up to MaxArtifact bytes. It returns the file at its
// start, its size and its sha512.
func (a *Admitter) stream(r io.Reader) (*os.File, int64, []byte, error) {
	if err := os.MkdirAll(a.o.TempDir, 0o700); err != nil {
		return nil, 0, nil, err
	}
	f, err := os.CreateTemp(a.o.TempDir, "dep-*")
	if err != nil {
		return nil, 0, nil, err
	}
	os.Remove(f.Name())
	h := sha512.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, a.o.MaxArtifact+1))
	if err == nil && n > a.o.MaxArtifact {
		err = errTooLarge
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		if !errors.Is(err, errTooLarge) {
			err = fmt.Errorf("%v: %w", err, errdefs.ErrUnavailable)
		}
		return nil, 0, nil, err
	}
	return f, n, h.Sum(nil), nil
}
