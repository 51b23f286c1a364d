package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// UploadWorkspace makes a workspace whose base commit is the directory
// tree in archive, a tar stream (gzipped when gzipped is set). The daemon
// refuses what a plain tree cannot hold: names with "..", absolute names,
// entries under a symlink, hard links, devices, FIFOs, .git directories,
// and archives over its limits. req.Repo, Ref and Empty must be unset.
func (c *Client) UploadWorkspace(ctx context.Context, req CreateWorkspace, archive io.Reader, gzipped bool) (Workspace, error) {
	if req.Repo != "" || req.Ref != "" || req.Empty {
		return Workspace{}, fmt.Errorf("an uploaded directory is the workspace's base: no repo, ref or empty with it: %w", ErrInvalid)
	}
	q := url.Values{}
	for k, v := range map[string]string{"branch": req.Branch, "task": req.Task, "driver": req.Driver} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.Disk != 0 {
		q.Set("disk", req.Disk.String())
	}
	ctype := "application/x-tar"
	if gzipped {
		ctype = "application/gzip"
	}
	var w Workspace
	return w, c.json(ctx, request{method: "POST", path: "/v1/workspaces", query: q, raw: archive, rawType: ctype}, &w)
}

// UploadDir makes a workspace whose base commit is the files under dir on
// this machine: they are sent as a tar stream as they are read. .git
// directories are left out (the workspace gets a repository of its own),
// and so are sockets, FIFOs and devices, which skipped, if not nil, is told
// of; symlinks are sent as symlinks, never followed.
func (c *Client) UploadDir(ctx context.Context, req CreateWorkspace, dir string, skipped func(path string)) (Workspace, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return Workspace{}, err
	}
	if !fi.IsDir() {
		return Workspace{}, fmt.Errorf("%s is not a directory: %w", dir, ErrInvalid)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(ctx, pw, dir, skipped)) }()
	ws, err := c.UploadWorkspace(ctx, req, pr, false)
	pr.CloseWithError(errUploadDone)
	return ws, err
}

var errUploadDone = errors.New("the upload ended")

// writeTar writes the tree under dir to w as a tar stream.
func writeTar(ctx context.Context, w io.Writer, dir string, skipped func(string)) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // a worktree's .git file
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch fi.Mode().Type() {
		case 0, fs.ModeDir:
		case fs.ModeSymlink:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			if skipped != nil {
				skipped(rel)
			}
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// The header promised Size bytes: a file that grew is cut there,
		// one that shrank fails the upload.
		if _, err := io.Copy(tw, io.LimitReader(f, hdr.Size)); err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
