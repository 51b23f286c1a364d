package envdfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

// requestKey carries the HTTP request of a Connect call in its context:
// the Resolver takes the request itself, and a Connect handler sees only
// its headers.
type requestKey struct{}

// writerKey carries the call's http.ResponseWriter, through which a
// stream stuck on a client that reads nothing is cut off (WatchDir).
type writerKey struct{}

// withRequest puts r and w in r's context for target and WatchDir.
func withRequest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), requestKey{}, r)
		h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, writerKey{}, w)))
	})
}

// target resolves the call's target, with the error already E2B-shaped.
func (s *service) target(ctx context.Context) (Target, error) {
	r, ok := ctx.Value(requestKey{}).(*http.Request)
	if !ok {
		return Target{}, connect.NewError(connect.CodeInternal, errors.New("envdfs: the Connect handler was mounted without withRequest"))
	}
	t, err := s.resolve(r)
	if err != nil {
		return Target{}, connectError(err, fromResolve)
	}
	return t, nil
}

// withFiles runs fn on the workspace of t, holding it only for fn.
func (s *service) withFiles(ctx context.Context, t Target, write bool, fn func(f *fileapi.FS) error) error {
	f, release, err := s.m.Files(ctx, t.WorkspaceID, write)
	if err != nil {
		return err
	}
	defer release()
	return fn(f)
}

func (s *service) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	var entry *fspb.EntryInfo
	err = s.withFiles(ctx, t, false, func(f *fileapi.FS) error {
		in, err := f.Stat(ctx, p.rel)
		if err != nil {
			return err
		}
		entry = t.entry(p, in)
		return nil
	})
	if err != nil {
		return nil, connectError(named(p, err), fromFiles)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entry}), nil
}

func (s *service) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	depth := int(min(req.Msg.GetDepth(), fileapi.MaxTreeDepth))
	if depth == 0 {
		depth = 1
	}
	var entries []*fspb.EntryInfo
	err = s.withFiles(ctx, t, false, func(f *fileapi.FS) error {
		var infos []fileapi.Info
		if depth == 1 {
			infos, err = f.List(ctx, p.rel)
			if err != nil {
				return err
			}
		} else {
			list, err := f.Tree(ctx, p.rel, depth)
			if err != nil {
				return err
			}
			if list.Truncated {
				return fmt.Errorf("listing: more entries than one listing returns; list a subdirectory or a smaller depth: %w", errdefs.ErrTooLarge)
			}
			infos = list.Entries
		}
		entries = make([]*fspb.EntryInfo, 0, len(infos))
		for _, in := range infos {
			entries = append(entries, t.entry(p, in))
		}
		return nil
	})
	if err != nil {
		return nil, connectError(named(p, err), fromFiles)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// MakeDir creates the directory and its missing parents; an existing entry
// is already_exists, which the SDK's makeDir reports as false.
func (s *service) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	var entry *fspb.EntryInfo
	err = s.withFiles(ctx, t, true, func(f *fileapi.FS) error {
		if dir := path.Dir(p.rel); dir != "." {
			if _, err := f.Mkdir(ctx, dir, true); err != nil {
				// A file where a parent should be is bad input, not
				// an existing directory.
				if errors.Is(err, errdefs.ErrConflict) {
					return fmt.Errorf("%s: %w", strings.TrimSuffix(errdefs.Message(err), ": "+errdefs.ErrConflict.Error()), errdefs.ErrInvalid)
				}
				return err
			}
		}
		in, err := f.Mkdir(ctx, p.rel, false)
		if err != nil {
			return err
		}
		s.m.FileChanged(ctx, t.WorkspaceID, "mkdir", in.Path)
		entry = t.entry(p, in)
		return nil
	})
	if err != nil {
		return nil, connectError(named(p, err), fromFiles)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entry}), nil
}

// Move renames source to destination, creating the destination's missing
// parents, as envd does.
func (s *service) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	from, err := t.resolvePath(req.Msg.GetSource())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	to, err := t.resolvePath(req.Msg.GetDestination())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	var entry *fspb.EntryInfo
	err = s.withFiles(ctx, t, true, func(f *fileapi.FS) error {
		// Look the source up first so that a missing one is not_found,
		// not a parent directory created for nothing.
		if _, err := f.Stat(ctx, from.rel); err != nil {
			return err
		}
		if dir := path.Dir(to.rel); dir != "." {
			if _, err := f.Mkdir(ctx, dir, true); err != nil {
				return err
			}
		}
		if err := f.Rename(ctx, from.rel, to.rel); err != nil {
			return err
		}
		s.m.FileChanged(ctx, t.WorkspaceID, "renamed", to.rel, map[string]any{"from": from.rel})
		in, err := f.Stat(ctx, to.rel)
		if err != nil {
			return err
		}
		entry = t.entry(to, in)
		return nil
	})
	if err != nil {
		return nil, connectError(fmt.Errorf("moving %s to %s: %w", from.abs(), to.abs(), err), fromFiles)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entry}), nil
}

// Remove deletes a file, or a directory with everything in it. A missing
// path is not an error, as with envd (the SDK's remove of a missing file
// succeeds).
func (s *service) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	err = s.withFiles(ctx, t, true, func(f *fileapi.FS) error {
		err := f.Remove(ctx, p.rel, true)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err == nil {
			s.m.FileChanged(ctx, t.WorkspaceID, "removed", p.rel)
		}
		return err
	})
	if err != nil {
		return nil, connectError(named(p, err), fromFiles)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// named prefixes err with the sandbox path it concerns (fileapi names the
// workspace-relative one).
func named(p spath, err error) error {
	return fmt.Errorf("%s: %w", p.abs(), err)
}

// entry converts a fileapi entry found under p's root.
func (t Target) entry(p spath, in fileapi.Info) *fspb.EntryInfo {
	abs := p.sandboxPath(in.Path)
	perm, _ := strconv.ParseUint(in.Mode, 8, 32)
	mode := fs.FileMode(perm & 0o777)
	if perm&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if perm&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if perm&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	e := &fspb.EntryInfo{
		Name:         path.Base(abs),
		Path:         abs,
		Size:         in.Size,
		Mode:         uint32(perm & 0o777),
		Owner:        t.User,
		Group:        t.User,
		ModifiedTime: timestamppb.New(in.ModTime),
	}
	switch in.Type {
	case fileapi.TypeFile:
		e.Type = fspb.FileType_FILE_TYPE_FILE
	case fileapi.TypeDir:
		e.Type = fspb.FileType_FILE_TYPE_DIRECTORY
		mode |= fs.ModeDir
	case fileapi.TypeSymlink:
		e.Type = fspb.FileType_FILE_TYPE_SYMLINK
		mode |= fs.ModeSymlink
		// envd reports the target made absolute; it is never followed.
		target := in.LinkTarget
		if target != "" && !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(abs), target)
		}
		e.SymlinkTarget = &target
	default:
		mode |= fs.ModeIrregular
	}
	e.Permissions = mode.String()
	return e
}
