package envdfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
)

const eventWait = 10 * time.Second

// TestWatchDir: the events of writes through the API and of changes made
// on the workspace directly, with the names and types the SDK expects.
func TestWatchDir(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := t.Context()
	if _, err := f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "w"})); err != nil {
		t.Fatal(err)
	}

	// Not recursive: the API's atomic write is reported as create and
	// write of the file, never with the temporary file's name.
	s, err := f.watch(t, &fspb.WatchDirRequest{Path: "w", IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	f.postFiles(t, "?path=w/a.txt", upload{"w/a.txt", []byte("1")})
	got := s.until(t, ev{"a.txt", "write"}, eventWait)
	if !contains(got, ev{"a.txt", "create"}) {
		t.Errorf("events %v: no create of a.txt", got)
	}
	for _, e := range got {
		if len(e.Name) > len(tempPrefix) && e.Name[:len(tempPrefix)] == tempPrefix {
			t.Errorf("temporary file reported: %v", got)
		}
	}
	// Changes made on the workspace directly, as a sandbox makes them.
	dir := filepath.Join(f.files, "w")
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("x"), 0o644)
	s.until(t, ev{"b.txt", "write"}, eventWait)
	os.Chmod(filepath.Join(dir, "b.txt"), 0o600)
	s.until(t, ev{"b.txt", "chmod"}, eventWait)
	os.Rename(filepath.Join(dir, "b.txt"), filepath.Join(dir, "c.txt"))
	got = s.until(t, ev{"c.txt", "create"}, eventWait)
	if !contains(got, ev{"b.txt", "rename"}) {
		t.Errorf("events %v: no rename of b.txt", got)
	}
	os.Remove(filepath.Join(dir, "c.txt"))
	s.until(t, ev{"c.txt", "remove"}, eventWait)
	// Not recursive: a subdirectory's own changes are not reported, its
	// creation is.
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	s.until(t, ev{"sub", "create"}, eventWait)
	os.WriteFile(filepath.Join(dir, "sub", "deep"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644)
	got = s.until(t, ev{"marker", "create"}, eventWait)
	if contains(got, ev{"sub/deep", "create"}) {
		t.Errorf("a non-recursive watch reported sub/deep: %v", got)
	}

	// include_entry: the entry, with the path under the root the client used.
	s2, err := f.watch(t, &fspb.WatchDirRequest{Path: "/workspace/w", IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "e.txt"), []byte("entry"), 0o644)
	for e := range s2.events {
		if short(e) == (ev{"e.txt", "write"}) {
			if e.GetEntry().GetPath() != "/workspace/w/e.txt" || e.GetEntry().GetSize() == 0 && e.GetEntry().GetType() != fspb.FileType_FILE_TYPE_FILE {
				t.Errorf("entry = %v", e.GetEntry())
			}
			break
		}
	}

	// A missing directory is not_found; a file is invalid_argument.
	_, err = f.watch(t, &fspb.WatchDirRequest{Path: "nope"})
	wantCode(t, err, connect.CodeNotFound, "nope")
	_, err = f.watch(t, &fspb.WatchDirRequest{Path: "w/a.txt"})
	wantCode(t, err, connect.CodeInvalidArgument, "not a directory")

	// Removing the watched directory ends the watch.
	os.RemoveAll(dir)
	for range s.events {
	}
	if s.err != nil {
		t.Errorf("watch of a removed directory ended with %v", s.err)
	}
}

// TestWatchRecursive: subdirectories, old and new, are followed; a moved
// one is followed under its new name; a link out of the workspace is not.
func TestWatchRecursive(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	root := filepath.Join(f.files, "r")
	os.MkdirAll(filepath.Join(root, "old", "older"), 0o755)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(root, "out"))
	s, err := f.watch(t, &fspb.WatchDirRequest{Path: "r", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "old", "older", "f"), nil, 0o644)
	s.until(t, ev{"old/older/f", "create"}, eventWait)
	// A directory made after the watch began, with content made at once.
	os.MkdirAll(filepath.Join(root, "new", "a", "b"), 0o755)
	os.WriteFile(filepath.Join(root, "new", "a", "b", "g"), []byte("x"), 0o644)
	got := s.until(t, ev{"new", "create"}, eventWait)
	f.postFiles(t, "?path=r/new/a/b/h", upload{"r/new/a/b/h", []byte("h")})
	got = append(got, s.until(t, ev{"new/a/b/h", "write"}, eventWait)...)
	if !contains(got, ev{"new/a/b/g", "create"}) {
		t.Errorf("events %v: g, made before its directory was watched, not reported as created", got)
	}
	// A moved directory is reported under its new name only.
	os.Rename(filepath.Join(root, "old"), filepath.Join(root, "moved"))
	s.until(t, ev{"moved", "create"}, eventWait)
	os.WriteFile(filepath.Join(root, "moved", "older", "z"), nil, 0o644)
	got = s.until(t, ev{"moved/older/z", "create"}, eventWait)
	if contains(got, ev{"old/older/z", "create"}) {
		t.Errorf("moved directory reported under its old name: %v", got)
	}
	// Changes in the linked-to host directory never show.
	os.WriteFile(filepath.Join(outside, "secret"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "marker"), nil, 0o644)
	got = s.until(t, ev{"marker", "create"}, eventWait)
	for _, e := range got {
		if e.Name == "out/secret" || e.Name == "secret" {
			t.Errorf("event from outside the workspace: %v", got)
		}
	}
}

// TestWatchSwapRace: the sandbox swaps a directory of a recursive watch
// with a symlink to a host directory in a tight loop while directories
// come and go; no watch is ever placed on the host directory.
func TestWatchSwapRace(t *testing.T) {
	// The race makes events faster than a stream carries them: room for
	// all, so that the watch lives to be checked.
	f := newFixture(t, fixtureOpts{opts: Options{MaxPending: 1 << 18}})
	root := filepath.Join(f.files, "race")
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "sub"), 0o755)
	os.MkdirAll(filepath.Join(root, "d", "sub"), 0o755)
	os.Symlink(outside, filepath.Join(root, "l"))
	s, err := f.watch(t, &fspb.WatchDirRequest{Path: "race", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 3000 && !stop.Load(); i++ {
			unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "d"), unix.AT_FDCWD, filepath.Join(root, "l"), unix.RENAME_EXCHANGE)
		}
	}()
	func() {
		for i := range 1500 {
			// Each new directory makes the watch open it (and "d", or
			// whatever "d" is at that moment, on the way).
			p := filepath.Join(root, "d", fmt.Sprintf("n%d", i%50))
			os.Mkdir(p, 0o755)
			os.Remove(p)
			os.Mkdir(filepath.Join(root, fmt.Sprintf("top%d", i%50)), 0o755)
			os.Remove(filepath.Join(root, fmt.Sprintf("top%d", i%50)))
		}
	}()
	stop.Store(true)
	wg.Wait()
	// Drain, then poke the host directory and a marker.
	os.WriteFile(filepath.Join(root, "marker1"), nil, 0o644)
	s.until(t, ev{"marker1", "create"}, 6*eventWait) // the race left a backlog
	os.WriteFile(filepath.Join(outside, "secret"), nil, 0o644)
	os.WriteFile(filepath.Join(outside, "sub", "secret"), nil, 0o644)
	os.Mkdir(filepath.Join(outside, "newdir"), 0o755)
	os.WriteFile(filepath.Join(root, "marker2"), nil, 0o644)
	got := s.until(t, ev{"marker2", "create"}, eventWait)
	for _, e := range got {
		if filepath.Base(e.Name) == "secret" || filepath.Base(e.Name) == "newdir" {
			t.Errorf("event from the host directory: %v in %v", e, got)
		}
	}
	if n := f.svc.hubs.count(); n != 1 {
		t.Errorf("%d hubs, want 1", n)
	}
}

// TestWatchBounds: a client that reads nothing is cut off with an error
// once its queue fills; a tree over the watch limit is refused.
func TestWatchBounds(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: Options{MaxPending: 16, MaxWatches: 4}})
	for i := range 5 {
		os.MkdirAll(filepath.Join(f.files, "big", fmt.Sprint(i)), 0o755)
	}
	_, err := f.watch(t, &fspb.WatchDirRequest{Path: "big", Recursive: true})
	wantCode(t, err, connect.CodeFailedPrecondition, "more than 4 directories")
	// The refused watch left nothing in the hub.
	if n := f.svc.hubs.count(); n != 0 {
		t.Errorf("%d hubs after a refused watch", n)
	}

	// A polling watcher nobody polls holds MaxPending events, then ends
	// with an error, which the next poll reports after the events.
	os.Mkdir(filepath.Join(f.files, "flood"), 0o755)
	cw, err := f.fs.CreateWatcher(t.Context(), connect.NewRequest(&fspb.CreateWatcherRequest{Path: "flood"}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		os.WriteFile(filepath.Join(f.files, "flood", fmt.Sprint(i)), nil, 0o644)
	}
	deadline := time.Now().Add(eventWait)
	got := 0
	for {
		r, err := f.fs.GetWatcherEvents(t.Context(), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
		if err != nil {
			wantCode(t, err, connect.CodeFailedPrecondition, "more than 16 events")
			break
		}
		got += len(r.Msg.GetEvents())
		if time.Now().After(deadline) {
			t.Fatalf("the unpolled watcher never overflowed (%d events)", got)
		}
		if got == 0 {
			time.Sleep(20 * time.Millisecond) // the client's polling interval
		}
	}
	if got > 16 {
		t.Errorf("%d events held, want at most 16", got)
	}

	// A stream whose client reads nothing: the connection fills, the send
	// blocks, the queue overflows, and after stallGrace the connection is
	// cut, so nothing stays held (without the cut this waits forever).
	stalled := newFixture(t, fixtureOpts{opts: Options{MaxPending: 4096}})
	os.Mkdir(filepath.Join(stalled.files, "flood"), 0o755)
	cr := connect.NewRequest(&fspb.WatchDirRequest{Path: "flood", IncludeEntry: true})
	st, err := stalled.fs.WatchDir(t.Context(), cr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", st.Err())
	}
	big := strings.Repeat("n", 200) // long names fill the connection sooner
	deadline = time.Now().Add(3 * eventWait)
	for i := 0; stalled.svc.hubs.count() > 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("a stream nobody reads still holds its watch")
		}
		os.WriteFile(filepath.Join(stalled.files, "flood", fmt.Sprint(big, i%500)), nil, 0o644)
		// Slower than the watch handles events: it is the connection,
		// not the queue, that fills first.
		time.Sleep(20 * time.Microsecond)
	}
}

// TestPollingWatcher: CreateWatcher, GetWatcherEvents, RemoveWatcher, and
// that another sandbox cannot read a watcher.
func TestPollingWatcher(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := t.Context()
	os.Mkdir(filepath.Join(f.files, "p"), 0o755)
	cw, err := f.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "p"}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	os.WriteFile(filepath.Join(f.files, "p", "x"), []byte("1"), 0o644)
	var got []ev
	deadline := time.Now().Add(eventWait)
	for !contains(got, ev{"x", "write"}) {
		if time.Now().After(deadline) {
			t.Fatalf("no write of x in %v", got)
		}
		r, err := f.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Msg.GetEvents() {
			got = append(got, short(e))
		}
		time.Sleep(20 * time.Millisecond) // the client's polling interval
	}
	// Another sandbox's client does not find it.
	f.setTarget(Target{WorkspaceID: "ws_other", User: "user", Home: "/home/user"})
	_, err = f.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound, id)
	f.setTarget(Target{WorkspaceID: f.ws.ID, User: "user", Home: "/home/user"})
	if _, err := f.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = f.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound, id)
}

func (hs *hubs) count() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.m)
}

// TestWatchEndsWithWorkspace: removing the workspace (which unmounts it)
// ends its watches, and no watch keeps the removal from finishing.
func TestWatchEndsWithWorkspace(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	os.Mkdir(filepath.Join(f.files, "sub"), 0o755)
	s, err := f.watch(t, &fspb.WatchDirRequest{Path: "/workspace", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	cw, err := f.fs.CreateWatcher(t.Context(), connect.NewRequest(&fspb.CreateWatcherRequest{Path: "sub"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.RemoveWorkspace(t.Context(), f.ws.ID); err != nil {
		t.Fatalf("removing a watched workspace: %v", err)
	}
	timer := time.NewTimer(eventWait)
	defer timer.Stop()
	for open := true; open; {
		select {
		case _, open = <-s.events:
		case <-timer.C:
			t.Fatal("the watch outlived its workspace")
		}
	}
	deadline := time.Now().Add(eventWait)
	for {
		_, err := f.fs.GetWatcherEvents(t.Context(), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: cw.Msg.GetWatcherId()}))
		if err != nil {
			wantCode(t, err, connect.CodeNotFound, "")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the polling watcher outlived its workspace")
		}
		time.Sleep(20 * time.Millisecond) // the client's polling interval
	}
	if n := f.svc.hubs.count(); n != 0 {
		t.Errorf("%d hubs left", n)
	}
}

// TestWatchNewDirBound: a directory moved into a recursive watch holding
// more entries than the watch may queue ends the watch with an error
// rather than growing without bound.
func TestWatchNewDirBound(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: Options{MaxPending: 64}})
	os.Mkdir(filepath.Join(f.files, "w"), 0o755)
	full := filepath.Join(f.files, "full")
	os.Mkdir(full, 0o755)
	for i := range 100 {
		os.WriteFile(filepath.Join(full, fmt.Sprint(i)), nil, 0o644)
	}
	s, err := f.watch(t, &fspb.WatchDirRequest{Path: "w", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	os.Rename(full, filepath.Join(f.files, "w", "full"))
	timer := time.NewTimer(eventWait)
	defer timer.Stop()
	for open := true; open; {
		select {
		case _, open = <-s.events:
		case <-timer.C:
			t.Fatal("the watch took a directory over its bound")
		}
	}
	wantCode(t, s.err, connect.CodeFailedPrecondition, "more than 64 entries")
}
