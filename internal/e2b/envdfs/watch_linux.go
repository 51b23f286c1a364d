package envdfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// How the watcher stays inside the workspace.
//
// A watch is a set of inotify watches on directories of the workspace, which
// the sandbox changes at will: it can swap any directory for a symlink to
// /etc between two of our system calls. So no watch is ever added by path
// name. Each directory is opened with openat2 from a descriptor of the
// workspace root, O_PATH|O_DIRECTORY|O_NOFOLLOW and RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: the kernel
// refuses any symlink on the way and any step out of the root or off its
// mount. The watch is then added on /proc/self/fd/N of that descriptor,
// which names exactly the directory opened, with IN_ONLYDIR.
// (IN_DONT_FOLLOW cannot be used there: it would make inotify watch the
// /proc magic link itself, which is no directory, and fail.) The
// descriptor is closed at once; descriptors held across a watch would keep
// the workspace's mount busy.
//
// Watches see what processes in the sandbox do: the workspace's host
// directory (the overlay's merged directory, or the copy driver's plain
// one) is what docker, gVisor's gofer and bubblewrap bind-mount at
// /workspace, and inotify marks live on the inodes, not on a path.
//
// One inotify instance serves every watch of a workspace (a host allows
// few instances: 128 per user by default), so a sandbox that floods its
// own workspace with events can only end its own watches.

// watchMask is every watch's mask. IN_EXCL_UNLINK leaves out events of
// files unlinked while still open.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Event bits a watch looks at, named here so the portable code needs no
// unix package.
const (
	evCreate    = unix.IN_CREATE
	evModify    = unix.IN_MODIFY
	evAttrib    = unix.IN_ATTRIB
	evDelete    = unix.IN_DELETE
	evMovedFrom = unix.IN_MOVED_FROM
	evMovedTo   = unix.IN_MOVED_TO
	evIsDir     = unix.IN_ISDIR
)

// maxWatchesPerWorkspace bounds the watches (streams and polling
// watchers) open at once on one workspace.
const maxWatchesPerWorkspace = 128

// maxDirEntries bounds the entries read from one directory while adding
// watches to a tree.
const maxDirEntries = 100000

// hubs are the inotify instances, one per watched workspace.
type hubs struct {
	mu sync.Mutex
	m  map[string]*hub
}

func newHubs() *hubs { return &hubs{m: map[string]*hub{}} }

// acquire returns the workspace's hub, starting it if needed; release
// gives it back.
func (hs *hubs) acquire(ws string) (*hub, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h := hs.m[ws]; h != nil && h.dead() {
		// Its reader ended on an error and stopped its watches: new ones
		// get a hub of their own, the old one goes with its last release.
		delete(hs.m, ws)
	} else if h != nil {
		if h.refs >= maxWatchesPerWorkspace {
			return nil, fmt.Errorf("workspace %s has %d watches already: %w", ws, h.refs, errdefs.ErrTooLarge)
		}
		h.refs++
		return h, nil
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watching workspace %s: creating an inotify instance: %v: %w", ws, err, errdefs.ErrUnavailable)
	}
	// A non-blocking descriptor joins Go's poller: Read parks the
	// goroutine, and Close wakes it.
	h := &hub{ws: ws, parent: hs, refs: 1, fd: fd, file: os.NewFile(uintptr(fd), "inotify"), subs: map[int32]map[*watch]string{}, done: make(chan struct{})}
	hs.m[ws] = h
	go h.read()
	return h, nil
}

func (hs *hubs) release(h *hub) {
	hs.mu.Lock()
	h.refs--
	last := h.refs == 0
	if last && hs.m[h.ws] == h {
		delete(hs.m, h.ws)
	}
	hs.mu.Unlock()
	if last {
		h.file.Close()
		<-h.done
	}
}

// hub is one inotify instance and the watches it feeds.
type hub struct {
	ws     string
	parent *hubs
	// refs counts the watches using the hub; guarded by parent.mu.
	refs int
	fd   int
	file *os.File
	// mu guards subs and every watch's wds.
	mu sync.Mutex
	// subs maps a watch descriptor to the watches that follow it, each
	// with the directory's path below its base.
	subs map[int32]map[*watch]string
	// done is closed when read returns.
	done chan struct{}
}

// dead reports whether read has returned.
func (h *hub) dead() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// read dispatches events until the instance is closed. It never blocks on
// a watch: a watch whose queue is full stops with an error.
func (h *hub) read() {
	defer close(h.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := h.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				h.stopAll(fmt.Errorf("reading inotify events: %v: %w", err, errdefs.ErrUnavailable))
			}
			return
		}
		h.dispatch(buf[:n])
	}
}

func (h *hub) dispatch(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := ""
		if ev.Len > 0 {
			raw := b[unix.SizeofInotifyEvent:end]
			for i, c := range raw {
				if c == 0 {
					raw = raw[:i]
					break
				}
			}
			name = string(raw)
		}
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			h.stopLocked(errOverflow)
			continue
		}
		for w, dir := range h.subs[ev.Wd] {
			if ev.Mask&unix.IN_IGNORED != 0 || (dir == "" && ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0) {
				if dir == "" {
					// The watched directory itself is gone or moved:
					// the watch ends.
					w.stop(nil)
				}
				continue
			}
			w.push(rawEvent{dir: dir, name: name, mask: ev.Mask, cookie: ev.Cookie})
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			for w := range h.subs[ev.Wd] {
				delete(w.wds, ev.Wd)
			}
			delete(h.subs, ev.Wd)
		}
	}
}

var errOverflow = fmt.Errorf("the host's inotify queue overflowed and events were lost: %w", errdefs.ErrTooLarge)

func (h *hub) stopAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopLocked(err)
}

func (h *hub) stopLocked(err error) {
	for _, ws := range h.subs {
		for w := range ws {
			w.stop(err)
		}
	}
}

// addDir adds a watch on the directory rel (below w's base) of the
// workspace whose root is the descriptor root.
func (w *watch) addDir(root int, rel string) error {
	h := w.hub
	h.mu.Lock()
	n := len(w.wds)
	h.mu.Unlock()
	if n >= w.maxWatches {
		return fmt.Errorf("watching %s: more than %d directories: %w", w.base, w.maxWatches, errdefs.ErrTooLarge)
	}
	fd, err := openBeneath(root, path.Join(w.base, rel), unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	h.mu.Lock()
	defer h.mu.Unlock()
	wd, err := unix.InotifyAddWatch(h.fd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return classifyErrno("watching "+path.Join(w.base, rel), err)
	}
	if h.subs[int32(wd)] == nil {
		h.subs[int32(wd)] = map[*watch]string{}
	}
	h.subs[int32(wd)][w] = rel
	w.wds[int32(wd)] = rel
	return nil
}

// dropTree stops following rel and everything below it.
func (w *watch) dropTree(rel string) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for wd, r := range w.wds {
		if r != rel && !isBelow(r, rel) {
			continue
		}
		w.dropLocked(wd)
	}
}

func (w *watch) dropLocked(wd int32) {
	h := w.hub
	delete(w.wds, wd)
	delete(h.subs[wd], w)
	if len(h.subs[wd]) == 0 {
		delete(h.subs, wd)
		unix.InotifyRmWatch(h.fd, uint32(wd))
	}
}

// close removes every watch of w.
func (w *watch) close() {
	h := w.hub
	h.mu.Lock()
	for wd := range w.wds {
		w.dropLocked(wd)
	}
	h.mu.Unlock()
	h.parent.release(h)
}

// addTree adds watches on rel and, for a recursive watch, every directory
// below it (breadth first, within maxWatches). With report, it returns the
// entries found below rel, which were created before their directory was
// watched and so had no event, at most cap(w.q) of them (more fail the
// call with ErrTooLarge, as a client that far behind would). Directories
// that vanish or turn into symlinks meanwhile are skipped; only rel itself
// must be watchable.
func (w *watch) addTree(root int, rel string, report bool) ([]found, error) {
	if err := w.addDir(root, rel); err != nil {
		return nil, err
	}
	if !w.recursive {
		return nil, nil
	}
	var out []found
	queue := []string{rel}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		children, err := listBeneath(root, path.Join(w.base, dir))
		if err != nil {
			continue
		}
		for _, c := range children {
			crel := path.Join(dir, c.name)
			if report {
				if len(out) >= cap(w.q) {
					return out, fmt.Errorf("watching %s: new directory %s holds more than %d entries: %w", w.base, rel, cap(w.q), errdefs.ErrTooLarge)
				}
				out = append(out, found{rel: crel, dir: c.dir})
			}
			if !c.dir {
				continue
			}
			if err := w.addDir(root, crel); err != nil {
				if errors.Is(err, errdefs.ErrTooLarge) {
					return out, err
				}
				continue
			}
			queue = append(queue, crel)
		}
	}
	return out, nil
}

// found is an entry addTree found.
type found struct {
	rel string
	dir bool
}

// child is one directory entry.
type child struct {
	name string
	dir  bool
}

// openBeneath opens the workspace path rel (a clean relative path, "."
// for the root) below the root descriptor without following any symlink
// or leaving the root's mount.
func openBeneath(root int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, classifyErrno("opening "+rel, err)
		}
		return fd, nil
	}
}

// listBeneath lists the directory rel below root: names and whether each
// is a directory (from the entry's type, or an lstat relative to the
// directory's descriptor when the file system does not give one).
func listBeneath(root int, rel string) ([]child, error) {
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []child
	buf := make([]byte, 32<<10)
	for len(out) < maxDirEntries {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n <= 0 {
			break
		}
		b := buf[:n]
		for len(b) > 0 {
			d := (*unix.Dirent)(unsafe.Pointer(&b[0]))
			if int(d.Reclen) == 0 || int(d.Reclen) > len(b) {
				break
			}
			nameBytes := (*[256]byte)(unsafe.Pointer(&d.Name[0]))[:]
			l := 0
			for l < len(nameBytes) && nameBytes[l] != 0 {
				l++
			}
			name := string(nameBytes[:l])
			typ := d.Type
			b = b[d.Reclen:]
			if name == "." || name == ".." || name == "" {
				continue
			}
			isDir := typ == unix.DT_DIR
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					isDir = st.Mode&unix.S_IFMT == unix.S_IFDIR
				}
			}
			out = append(out, child{name: name, dir: isDir})
		}
	}
	return out, nil
}

// openRoot opens the workspace's host directory, a path the daemon made
// and the sandbox cannot change, as the root of every lookup.
func openRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the workspace: %v: %w", err, errdefs.ErrUnavailable)
	}
	return fd, nil
}

func closeRoot(fd int) { unix.Close(fd) }

// classifyErrno gives a system error its errdefs class.
func classifyErrno(op string, err error) error {
	var class error
	switch err {
	case unix.ENOENT:
		class = errdefs.ErrNotFound
	case unix.ENOTDIR:
		return fmt.Errorf("%s: not a directory: %w", op, errdefs.ErrInvalid)
	case unix.ELOOP, unix.EXDEV:
		return fmt.Errorf("%s: is or passes through a symlink, or leaves the workspace: %w", op, errdefs.ErrInvalid)
	case unix.ENOSPC:
		// inotify_add_watch: the host's max_user_watches.
		return fmt.Errorf("%s: the host's inotify watch limit is reached: %w", op, errdefs.ErrTooLarge)
	case unix.EMFILE, unix.ENFILE, unix.ENOMEM:
		class = errdefs.ErrUnavailable
	}
	if class == nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, err, class)
}
