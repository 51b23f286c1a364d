package envdfs

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

// download serves GET /files?path=P&username=U: the file's bytes. A file
// over fileapi's read limit (64 MiB) is refused with 413.
func (s *service) download(w http.ResponseWriter, r *http.Request) {
	t, err := s.resolve(r)
	if err != nil {
		writeHTTPError(w, err, fromResolve)
		return
	}
	q := r.URL.Query()
	if !q.Has("path") {
		writeHTTPError(w, errdefs.Invalid("query parameter path is required"), fromFiles)
		return
	}
	p, err := t.resolvePath(q.Get("path"))
	if err != nil {
		writeHTTPError(w, err, fromFiles)
		return
	}
	ctx := r.Context()
	f, release, err := s.m.Files(ctx, t.WorkspaceID, false)
	if err != nil {
		writeHTTPError(w, err, fromFiles)
		return
	}
	defer release()
	lw := &lazyWriter{w: w}
	_, err = f.Read(ctx, p.rel, lw)
	switch {
	case err != nil && lw.started:
		// Part of the file went out: abort so the client sees a broken
		// transfer, never a silently short file.
		panic(http.ErrAbortHandler)
	case err != nil:
		writeHTTPError(w, named(p, err), fromFiles)
	case !lw.started:
		// An empty file: the SDK reads Content-Length 0 as "".
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	}
}

// lazyWriter sends the 200 header only with the first byte, so that an
// error found before any byte still gets its own status.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/octet-stream")
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

// maxUploadFiles bounds the files of one upload (each is a write and an
// event in the workspace's log).
const maxUploadFiles = 10000

// writtenEntry is one element of the upload reply.
type writtenEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// upload serves POST /files: a multipart form with one "file" part per
// file (each named by the path query parameter or, without it, by the
// part's file name), or a raw application/octet-stream body for the file
// the path parameter names; either may be gzip-encoded. Missing parents
// are created. Each file replaces its target atomically (fileapi.Write).
//
// The request is bounded by Options.MaxUpload after decoding and by the
// workspace's disk quota. A body over the limit fails with 413, a full
// quota with 507 (the SDK's NotEnoughSpaceError); either way the file being
// written and the parents created for it are removed. Files of the same
// request written before the failing one stay.
func (s *service) upload(w http.ResponseWriter, r *http.Request) {
	t, err := s.resolve(r)
	if err != nil {
		writeHTTPError(w, err, fromResolve)
		return
	}
	limit := s.opts.MaxUpload
	if r.ContentLength > limit {
		writeHTTPError(w, tooLarge(limit), fromFiles)
		return
	}
	q := r.URL.Query()
	hasPath := q.Has("path")
	var body io.Reader = &limitReader{r: r.Body, left: limit, limit: limit}
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		// Decoded bytes are what count: a small bomb must not fill the
		// workspace.
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeHTTPError(w, errdefs.Invalid("reading the gzip body: %v", err), fromFiles)
			return
		}
		defer zr.Close()
		body = &limitReader{r: zr, left: limit, limit: limit}
	default:
		writeHTTPError(w, errdefs.Invalid("content encoding %q is not supported (identity or gzip)", enc), fromFiles)
		return
	}
	ctx := r.Context()
	f, release, err := s.m.Files(ctx, t.WorkspaceID, true)
	if err != nil {
		writeHTTPError(w, err, fromFiles)
		return
	}
	defer release()

	var written []writtenEntry
	put := func(name string, data io.Reader) error {
		p, err := t.resolvePath(name)
		if err != nil {
			return err
		}
		info, err := s.writeOne(ctx, f, p, data)
		if err != nil {
			return named(p, err)
		}
		s.m.FileChanged(ctx, t.WorkspaceID, "written", info.Path, map[string]any{"bytes": info.Size, "via": "e2b"})
		abs := p.abs()
		written = append(written, writtenEntry{Path: abs, Name: path.Base(abs), Type: "file"})
		return nil
	}

	ctype, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ctype {
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeHTTPError(w, uploadReadError(err), fromFiles)
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			if len(written) >= maxUploadFiles {
				writeHTTPError(w, errdefs.Invalid("the upload holds more than %d files; send them in several", maxUploadFiles), fromFiles)
				return
			}
			name := q.Get("path")
			if hasPath && len(written) > 0 {
				writeHTTPError(w, errdefs.Invalid("the path query parameter names one file, and the upload holds more; send several files without it, each named by its part's file name"), fromFiles)
				return
			}
			if !hasPath {
				// Not part.FileName(): it keeps only the last element,
				// and the SDK sends the whole path there.
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				name = dp["filename"]
				if name == "" {
					writeHTTPError(w, errdefs.Invalid("a file part has no file name and the path query parameter is not set"), fromFiles)
					return
				}
			}
			err = put(name, part)
			part.Close()
			if err != nil {
				writeHTTPError(w, err, fromFiles)
				return
			}
		}
	case "application/octet-stream", "":
		if !hasPath {
			writeHTTPError(w, errdefs.Invalid("query parameter path is required for an application/octet-stream upload"), fromFiles)
			return
		}
		if err := put(q.Get("path"), body); err != nil {
			writeHTTPError(w, err, fromFiles)
			return
		}
	default:
		writeHTTPError(w, errdefs.Invalid("content type %q is not supported (multipart/form-data or application/octet-stream)", ctype), fromFiles)
		return
	}
	if len(written) == 0 {
		writeHTTPError(w, errdefs.Invalid("the upload holds no file part"), fromFiles)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(written)
}

// writeOne writes data to p, creating missing parents, and on failure
// removes the parents it created (one at a time and only when empty, so
// nothing the sandbox put there meanwhile goes).
func (s *service) writeOne(ctx context.Context, f *fileapi.FS, p spath, data io.Reader) (fileapi.Info, error) {
	var created []string
	for dir := path.Dir(p.rel); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, err := f.Stat(ctx, dir); !errors.Is(err, errdefs.ErrNotFound) {
			break
		}
		created = append(created, dir)
	}
	info, err := f.Write(ctx, p.rel, data, 0, true)
	if err != nil {
		// The request's context may be the reason; the cleanup must run
		// regardless.
		clean := context.WithoutCancel(ctx)
		for _, dir := range created {
			f.Remove(clean, dir, false)
		}
		return fileapi.Info{}, err
	}
	return info, nil
}

func tooLarge(limit int64) error {
	return fmt.Errorf("upload: the body exceeds the %d-byte limit of one upload: %w", limit, errdefs.ErrTooLarge)
}

// uploadReadError classifies an error reading the multipart stream.
func uploadReadError(err error) error {
	if errors.Is(err, errdefs.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("reading the multipart upload: %v: %w", err, errdefs.ErrInvalid)
}

// limitReader fails with ErrTooLarge once more than limit bytes were read.
type limitReader struct {
	r           io.Reader
	left, limit int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, tooLarge(l.limit)
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, tooLarge(l.limit)
	}
	return n, err
}
