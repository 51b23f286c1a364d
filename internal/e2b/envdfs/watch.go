package envdfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

// How events are reported.
//
// Events follow envd (which follows fsnotify): create for IN_CREATE and
// for an entry moved in, write for IN_MODIFY, chmod for IN_ATTRIB, remove
// for IN_DELETE, rename for an entry moved away. Names are relative to the
// watched directory ("sub/file.txt" in a recursive watch).
//
// Files written through the API (or fileapi) are replaced atomically: a
// hidden temporary file is written and renamed over the target. The
// temporary file's own events are left out, and its rename onto the target
// is reported as create then write of the target, which is what a client
// waiting for "the file was written" looks for (and true: the target is a
// new file).
//
// Watches of directories created after the watch began are added when
// their create event arrives; entries made in them before that are
// reported as created then.

// tempPrefix is the name prefix of fileapi's temporary files (pinned by a
// test that writes through fileapi and watches).
const tempPrefix = ".agentbox-tmp-"

// Watch timings.
const (
	// aliveEvery is how often a watch asks the Resolver again whether its
	// request still names a running sandbox.
	aliveEvery = 2 * time.Second
	// defaultKeepalive is the keepalive interval when the client names
	// none (the SDK asks for 50 s in the Keepalive-Ping-Interval header).
	defaultKeepalive = 50 * time.Second
	// pollIdle ends a polling watcher nobody asked for events for this
	// long, and forgets an ended one.
	pollIdle = 2 * time.Minute
	// maxPollers bounds the polling watchers of one sandbox.
	maxPollers = 64
	// batchMax bounds the raw events handled in one go.
	batchMax = 256
)

// rawEvent is one inotify event as a watch sees it.
type rawEvent struct {
	// dir is the event's directory below the watch's base ("" for the
	// base itself); name the entry's name in it ("" for dir itself).
	dir, name string
	mask      uint32
	cookie    uint32
}

// watch follows one directory (and, recursive, its subtree).
type watch struct {
	hub       *hub
	base      string
	recursive bool
	// maxWatches bounds wds.
	maxWatches int
	// wds are the inotify watches w follows, with each directory's path
	// below base; guarded by hub.mu.
	wds map[int32]string
	// q holds events for w's goroutine; full means the client is too slow.
	q chan rawEvent

	once sync.Once
	done chan struct{}
	err  error
	// tmpMoves are cookies of temporary files moved away, whose arrival
	// is reported as a write of the target.
	tmpMoves map[uint32]bool
}

func (w *watch) push(ev rawEvent) {
	select {
	case w.q <- ev:
	default:
		w.stop(fmt.Errorf("watching %s: more than %d events are waiting for the client: %w", w.base, cap(w.q), errdefs.ErrTooLarge))
	}
}

// stop ends w with err (nil: the watched directory went away).
func (w *watch) stop(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// outEvent is an event to report.
type outEvent struct {
	rel string // below the watch's base
	typ fspb.EventType
	// newDir says rel is a directory that appeared in a recursive watch:
	// it is to be watched, and what it holds already reported.
	newDir bool
}

// translate turns raw events into reported ones.
func (w *watch) translate(batch []rawEvent) (out []outEvent) {
	for _, ev := range batch {
		if ev.name == "" {
			continue // the directory's own events; its parent reports it
		}
		rel := path.Join(ev.dir, ev.name)
		isDir := ev.mask&evIsDir != 0
		if strings.HasPrefix(ev.name, tempPrefix) {
			if ev.mask&evMovedFrom != 0 {
				if len(w.tmpMoves) > 1024 {
					clear(w.tmpMoves)
				}
				w.tmpMoves[ev.cookie] = true
			}
			continue
		}
		switch {
		case ev.mask&evCreate != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_CREATE, isDir && w.recursive})
		case ev.mask&evMovedTo != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_CREATE, isDir && w.recursive})
			if w.tmpMoves[ev.cookie] {
				delete(w.tmpMoves, ev.cookie)
				out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_WRITE, false})
			}
		case ev.mask&evModify != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_WRITE, false})
		case ev.mask&evAttrib != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_CHMOD, false})
		case ev.mask&evDelete != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_REMOVE, false})
		case ev.mask&evMovedFrom != 0:
			out = append(out, outEvent{rel, fspb.EventType_EVENT_TYPE_RENAME, false})
			if isDir && w.recursive {
				// Its watches would report under the old name.
				w.dropTree(rel)
			}
		}
	}
	return out
}

// isBelow reports whether rel lies below dir.
func isBelow(rel, dir string) bool {
	return dir == "" || strings.HasPrefix(rel, dir+"/")
}

// withRoot runs fn with a descriptor of the workspace's host directory,
// holding the workspace (ready, mounted, not being removed) for fn only.
func (s *service) withRoot(ctx context.Context, t Target, fn func(root int) error) error {
	_, release, err := s.m.Files(ctx, t.WorkspaceID, false)
	if err != nil {
		return err
	}
	defer release()
	ws, err := s.m.GetWorkspace(ctx, t.WorkspaceID)
	if err != nil {
		return err
	}
	root, err := openRoot(s.m.FilesPath(ws))
	if err != nil {
		return err
	}
	defer closeRoot(root)
	return fn(root)
}

// startWatch checks that p is a directory and starts a watch on it. The
// caller runs it (runWatch) and closes it.
func (s *service) startWatch(ctx context.Context, t Target, p spath, recursive bool) (*watch, error) {
	err := s.withFiles(ctx, t, false, func(f *fileapi.FS) error {
		in, err := f.Stat(ctx, p.rel)
		if err != nil {
			return err
		}
		if in.Type != fileapi.TypeDir {
			return fmt.Errorf("watching: not a directory (%s): %w", in.Type, errdefs.ErrInvalid)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	h, err := s.hubs.acquire(t.WorkspaceID)
	if err != nil {
		return nil, err
	}
	w := &watch{hub: h, base: p.rel, recursive: recursive, maxWatches: s.opts.MaxWatches,
		wds: map[int32]string{}, q: make(chan rawEvent, s.opts.MaxPending), done: make(chan struct{}), tmpMoves: map[uint32]bool{}}
	err = s.withRoot(ctx, t, func(root int) error {
		_, err := w.addTree(root, "", false)
		return err
	})
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// runWatch reports w's events through emit until ctx ends, w stops, the
// sandbox ends (r, resolved again every aliveEvery, fails or names another
// workspace), or emit or tick fail. tick runs every keepalive interval.
func (s *service) runWatch(ctx context.Context, r *http.Request, t Target, p spath, w *watch, includeEntry bool, keepalive time.Duration, emit func(*fspb.FilesystemEvent) error, tick func() error) error {
	alive := time.NewTicker(aliveEvery)
	defer alive.Stop()
	keep := time.NewTicker(keepalive)
	defer keep.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.done:
			return w.err
		case <-alive.C:
			if err := s.stillThere(r, t); err != nil {
				return err
			}
		case <-keep.C:
			if err := tick(); err != nil {
				return err
			}
		case ev := <-w.q:
			batch := []rawEvent{ev}
		drain:
			for len(batch) < batchMax {
				select {
				case ev := <-w.q:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			out, err := s.follow(ctx, t, w, w.translate(batch))
			if err != nil {
				return err
			}
			events := make([]*fspb.FilesystemEvent, len(out))
			for i, o := range out {
				events[i] = &fspb.FilesystemEvent{Name: o.rel, Type: o.typ}
			}
			if includeEntry {
				s.addEntries(ctx, t, p, out, events)
			}
			for _, e := range events {
				if err := emit(e); err != nil {
					return err
				}
			}
		}
	}
}

// follow adds watches for the directories that appeared, and reports what
// each already holds right after its own create event: the sandbox may
// have filled it before the watch was in place. A client that sees a
// directory's create event knows the directory is watched.
func (s *service) follow(ctx context.Context, t Target, w *watch, out []outEvent) ([]outEvent, error) {
	var dirs []string
	for _, o := range out {
		if o.newDir {
			dirs = append(dirs, o.rel)
		}
	}
	if len(dirs) == 0 {
		return out, nil
	}
	found := map[string][]found{}
	n := 0
	err := s.withRoot(ctx, t, func(root int) error {
		for _, d := range dirs {
			f, err := w.addTree(root, d, true)
			found[d] = f
			if n += len(f); n > cap(w.q) {
				err = fmt.Errorf("watching %s: new directories hold more than %d entries: %w", w.base, cap(w.q), errdefs.ErrTooLarge)
			}
			if errors.Is(err, errdefs.ErrTooLarge) {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, errdefs.ErrTooLarge) {
		return nil, err
	}
	all := make([]outEvent, 0, len(out))
	for _, o := range out {
		all = append(all, o)
		if o.newDir {
			for _, f := range found[o.rel] {
				all = append(all, outEvent{f.rel, fspb.EventType_EVENT_TYPE_CREATE, false})
			}
			delete(found, o.rel) // a directory created twice in a batch
		}
	}
	return all, nil
}

// addEntries looks up the entry of each event whose entry should exist,
// best effort.
func (s *service) addEntries(ctx context.Context, t Target, p spath, out []outEvent, events []*fspb.FilesystemEvent) {
	s.withFiles(ctx, t, false, func(f *fileapi.FS) error {
		for i, o := range out {
			switch o.typ {
			case fspb.EventType_EVENT_TYPE_REMOVE, fspb.EventType_EVENT_TYPE_RENAME:
				continue
			}
			rel := path.Join(p.rel, o.rel)
			if in, err := f.Stat(ctx, rel); err == nil {
				events[i].Entry = t.entry(p, in)
			}
		}
		return nil
	})
}

// stillThere resolves the watch's request again: the sandbox's watches end
// with it (killed, paused, its token gone), whatever becomes of the
// agentbox sandbox that runs its commands, which may be replaced meanwhile.
func (s *service) stillThere(r *http.Request, t Target) error {
	now, err := s.resolve(r)
	if err != nil {
		return connectError(err, fromResolve)
	}
	if now.WorkspaceID != t.WorkspaceID {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the sandbox no longer holds workspace %s", t.WorkspaceID))
	}
	return nil
}

// keepaliveInterval reads the client's Keepalive-Ping-Interval (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(min(max(n, 1), 3600)) * time.Second
	}
	return defaultKeepalive
}

func (s *service) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	t, err := s.target(ctx)
	if err != nil {
		return err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return connectError(err, fromFiles)
	}
	w, err := s.startWatch(ctx, t, p, req.Msg.GetRecursive())
	if err != nil {
		return connectError(named(p, err), fromFiles)
	}
	defer w.close()
	defer s.cutStalled(ctx, w)()
	start := &fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	r, _ := ctx.Value(requestKey{}).(*http.Request)
	err = s.runWatch(ctx, r, t, p, w, req.Msg.GetIncludeEntry(), keepaliveInterval(req.Header()),
		func(e *fspb.FilesystemEvent) error {
			return stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: e}})
		},
		func() error {
			return stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}})
		})
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return connectError(named(p, err), fromFiles)
}

// stallGrace is how long a stopped watch waits for a blocked send before
// cutting the connection.
const stallGrace = 5 * time.Second

// cutStalled makes sure a watch that stopped (its queue overflowed, most
// likely because the client reads nothing) does not hold its goroutine
// and connection forever in a send the client never takes: after
// stallGrace, the response's write deadline passes and the send fails. The
// returned func ends the guard when the handler returns.
func (s *service) cutStalled(ctx context.Context, w *watch) func() {
	rw, ok := ctx.Value(writerKey{}).(http.ResponseWriter)
	if !ok {
		return func() {}
	}
	returned := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-returned:
			return
		case <-w.done:
		}
		t := time.NewTimer(stallGrace)
		defer t.Stop()
		select {
		case <-returned:
		case <-t.C:
			http.NewResponseController(rw).SetWriteDeadline(time.Now())
		}
	}()
	return func() {
		close(returned)
		<-ended
	}
}

// pollers are the watchers of CreateWatcher, by id.
type pollers struct {
	mu sync.Mutex
	m  map[string]*poller
}

func newPollers() *pollers { return &pollers{m: map[string]*poller{}} }

// poller is one polling watcher: a watch run by its own goroutine into a
// bounded buffer that GetWatcherEvents drains.
type poller struct {
	// workspaceID owns the watcher: the E2B sandbox, whichever agentbox
	// sandbox runs it.
	id, workspaceID string
	cancel          context.CancelFunc
	// ended is closed when the goroutine returns.
	ended chan struct{}

	mu       sync.Mutex
	events   []*fspb.FilesystemEvent
	err      error
	finished bool
	lastPoll time.Time
}

// sweep forgets pollers ended or unpolled for pollIdle (their goroutines
// end themselves when idle).
func (ps *pollers) sweep(now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id, p := range ps.m {
		p.mu.Lock()
		idle := now.Sub(p.lastPoll) > pollIdle
		p.mu.Unlock()
		if idle {
			p.cancel()
			delete(ps.m, id)
		}
	}
}

func (s *service) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	p, err := t.resolvePath(req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err, fromFiles)
	}
	s.pollers.sweep(time.Now())
	s.pollers.mu.Lock()
	n := 0
	for _, q := range s.pollers.m {
		if q.workspaceID == t.WorkspaceID {
			n++
		}
	}
	s.pollers.mu.Unlock()
	if n >= maxPollers {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the sandbox has %d watchers already; remove one first", n))
	}
	w, err := s.startWatch(ctx, t, p, req.Msg.GetRecursive())
	if err != nil {
		return nil, connectError(named(p, err), fromFiles)
	}
	id, err := newWatcherID()
	if err != nil {
		w.close()
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	// The watcher outlives this request.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	q := &poller{id: id, workspaceID: t.WorkspaceID, cancel: cancel, ended: make(chan struct{}), lastPoll: time.Now()}
	// The request outlives its handler here: resolve a copy that is not
	// cancelled with it.
	var r *http.Request
	if orig, ok := ctx.Value(requestKey{}).(*http.Request); ok {
		r = orig.Clone(wctx)
	}
	s.pollers.mu.Lock()
	s.pollers.m[id] = q
	s.pollers.mu.Unlock()
	go func() {
		defer close(q.ended)
		defer w.close()
		err := s.runWatch(wctx, r, t, p, w, req.Msg.GetIncludeEntry(), pollIdle/4,
			func(e *fspb.FilesystemEvent) error {
				q.mu.Lock()
				defer q.mu.Unlock()
				if len(q.events) >= s.opts.MaxPending {
					return fmt.Errorf("watching %s: more than %d events are waiting to be fetched: %w", p.abs(), s.opts.MaxPending, errdefs.ErrTooLarge)
				}
				q.events = append(q.events, e)
				return nil
			},
			func() error {
				q.mu.Lock()
				defer q.mu.Unlock()
				if time.Since(q.lastPoll) > pollIdle {
					return fmt.Errorf("watcher %s was not polled for %s: %w", id, pollIdle, errdefs.ErrNotFound)
				}
				return nil
			})
		q.mu.Lock()
		q.finished = true
		if err != nil && !errors.Is(err, context.Canceled) {
			q.err = connectError(named(p, err), fromFiles)
		}
		q.mu.Unlock()
	}()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// lookup finds the watcher id of t's sandbox (its workspace).
func (s *service) lookup(t Target, id string) (*poller, error) {
	s.pollers.mu.Lock()
	defer s.pollers.mu.Unlock()
	q := s.pollers.m[id]
	if q == nil || q.workspaceID != t.WorkspaceID {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return q, nil
}

func (s *service) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	s.pollers.sweep(time.Now())
	q, err := s.lookup(t, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	events, qerr, finished := q.events, q.err, q.finished
	q.events = nil
	q.lastPoll = time.Now()
	q.mu.Unlock()
	if len(events) == 0 && finished {
		// Ended: report why once, then forget it.
		s.pollers.mu.Lock()
		delete(s.pollers.m, q.id)
		s.pollers.mu.Unlock()
		if qerr != nil {
			return nil, qerr
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q ended: the watched directory is gone", q.id))
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}

func (s *service) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	t, err := s.target(ctx)
	if err != nil {
		return nil, err
	}
	q, err := s.lookup(t, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.pollers.mu.Lock()
	delete(s.pollers.m, q.id)
	s.pollers.mu.Unlock()
	q.cancel()
	<-q.ended
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}

func newWatcherID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("naming a watcher: %w", err)
	}
	return "w_" + hex.EncodeToString(b[:]), nil
}
