package api

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

// pathParam returns the required "path" query parameter. It is decoded
// exactly once (by net/url); what it contains is validated by fileapi.
func pathParam(r *http.Request, name string) (string, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return "", errdefs.Invalid("query parameter %s is required", name)
	}
	return q.Get(name), nil
}

func (s *Server) withFiles(w http.ResponseWriter, r *http.Request, write bool, fn func(f *fileapi.FS) error) {
	id := r.PathValue("id")
	f, release, err := s.m.Files(r.Context(), id, write)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	if err := fn(f); err != nil {
		writeError(w, fmt.Errorf("workspace %s: %w", id, err))
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	rng, ranged, err := rangeParams(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if acceptsJSON(r) {
		s.withFiles(w, r, false, func(f *fileapi.FS) error {
			var buf bytes.Buffer
			fc, err := f.ReadRange(r.Context(), p, rng, &buf)
			if err != nil {
				return err
			}
			writeJSON(w, 200, fileapi.Content(fc, buf.Bytes()))
			return nil
		})
		return
	}
	s.withFiles(w, r, false, func(f *fileapi.FS) error {
		lw := &lazyWriter{w: w, ctype: "application/octet-stream"}
		var err error
		if ranged {
			_, err = f.ReadRange(r.Context(), p, rng, lw)
		} else {
			_, err = f.Read(r.Context(), p, lw)
		}
		if err != nil && lw.started {
			// Part of the file went out: abort so the client sees a
			// broken transfer, never a silently short file.
			panic(http.ErrAbortHandler)
		}
		if err == nil && !lw.started {
			lw.Write(nil) // empty file
		}
		return err
	})
}

// rangeParams reads a read's range: lines=FIRST:LAST or bytes=OFFSET:LENGTH.
func rangeParams(r *http.Request) (fileapi.Range, bool, error) {
	q := r.URL.Query()
	var rng fileapi.Range
	var err error
	switch {
	case q.Has("lines") && q.Has("bytes"):
		return rng, false, errdefs.Invalid("query parameters lines and bytes: give one range, not both")
	case q.Has("lines"):
		rng.FirstLine, rng.LastLine, err = fileapi.ParseLines(q.Get("lines"))
	case q.Has("bytes"):
		rng.Offset, rng.Length, err = fileapi.ParseBytes(q.Get("bytes"))
	default:
		return rng, false, nil
	}
	return rng, err == nil, err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	parents, err := boolParam(r, "parents")
	if err != nil {
		writeError(w, err)
		return
	}
	mode := fs.FileMode(0) // keep an existing file's mode, else 0644
	if v := r.URL.Query().Get("mode"); v != "" {
		n, err := strconv.ParseUint(v, 8, 32)
		if err != nil || n > 0o777 {
			writeError(w, errdefs.Invalid("query parameter mode=%q is not an octal permission like 0644", v))
			return
		}
		mode = fs.FileMode(n)
	}
	s.withFiles(w, r, true, func(f *fileapi.FS) error {
		info, err := f.Write(r.Context(), p, r.Body, mode, parents)
		if err != nil {
			return err
		}
		s.m.FileChanged(r.Context(), r.PathValue("id"), "written", info.Path, map[string]any{"bytes": info.Size})
		writeJSON(w, 200, info)
		return nil
	})
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, true, func(f *fileapi.FS) error {
		if err := f.Remove(r.Context(), p, recursive); err != nil {
			return err
		}
		s.m.FileChanged(r.Context(), r.PathValue("id"), "removed", p)
		writeJSON(w, 200, apitypes.FileRemoved{Path: p, Removed: true})
		return nil
	})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, false, func(f *fileapi.FS) error {
		info, err := f.Stat(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, 200, info)
		return nil
	})
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > fileapi.MaxTreeDepth {
			writeError(w, errdefs.Invalid("query parameter depth=%q is not a depth between 1 and %d", v, fileapi.MaxTreeDepth))
			return
		}
		depth = n
	}
	s.withFiles(w, r, false, func(f *fileapi.FS) error {
		if depth > 1 {
			list, err := f.Tree(r.Context(), p, depth)
			if err != nil {
				return err
			}
			list.Path = p
			writeJSON(w, 200, list)
			return nil
		}
		entries, err := f.List(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, 200, apitypes.FileList{Path: p, Depth: 1, Entries: entries})
		return nil
	})
}

func (s *Server) editFile(w http.ResponseWriter, r *http.Request) {
	var req apitypes.EditRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, true, func(f *fileapi.FS) error {
		res, err := f.Edit(r.Context(), req)
		if err != nil {
			return err
		}
		s.m.FileChanged(r.Context(), r.PathValue("id"), "edited", res.Path, map[string]any{"replacements": res.Replacements, "bytes": res.Size})
		writeJSON(w, 200, res)
		return nil
	})
}

func (s *Server) findFiles(w http.ResponseWriter, r *http.Request) {
	var req apitypes.FindRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, false, func(f *fileapi.FS) error {
		res, err := f.Find(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, 200, res)
		return nil
	})
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req apitypes.MkdirRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, true, func(f *fileapi.FS) error {
		info, err := f.Mkdir(r.Context(), req.Path, req.Parents)
		if err != nil {
			return err
		}
		s.m.FileChanged(r.Context(), r.PathValue("id"), "mkdir", info.Path)
		writeJSON(w, 200, info)
		return nil
	})
}

func (s *Server) rename(w http.ResponseWriter, r *http.Request) {
	var req apitypes.RenameRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, true, func(f *fileapi.FS) error {
		if err := f.Rename(r.Context(), req.From, req.To); err != nil {
			return err
		}
		s.m.FileChanged(r.Context(), r.PathValue("id"), "renamed", req.To, map[string]any{"from": req.From})
		writeJSON(w, 200, apitypes.RenameRequest{From: req.From, To: req.To})
		return nil
	})
}

func (s *Server) grep(w http.ResponseWriter, r *http.Request) {
	var req apitypes.GrepRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.withFiles(w, r, false, func(f *fileapi.FS) error {
		res, err := f.Grep(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, 200, res)
		return nil
	})
}
