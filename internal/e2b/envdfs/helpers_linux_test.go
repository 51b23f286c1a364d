package envdfs

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb/fspbconnect"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/workspace"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.Cleanup(func(int) {
			if assets.dir != "" {
				os.RemoveAll(assets.dir)
			}
		}),
	)
}

// The test resolver's credentials.
const (
	testSandboxHeader = "E2b-Sandbox-Id"
	testToken         = "test-token"
)

// fixture is the service on a real manager with one scratch workspace,
// behind an httptest server, and a Connect client speaking JSON as the
// E2B SDK does.
type fixture struct {
	m   *manager.Manager
	srv *httptest.Server
	svc *service
	ws  store.Workspace
	// files is the workspace's host directory.
	files string
	fs    fspbconnect.FilesystemClient
	// target is what the resolver hands out.
	target Target
	// e2bID is the E2B sandbox id the client sends.
	e2bID string
	// mu guards target, which the server reads.
	mu sync.Mutex
}

func (f *fixture) setTarget(t Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = t
}

type fixtureOpts struct {
	opts Options
	// disk is the workspace's quota; 0 none.
	disk int64
	// m and ws, when set, are used instead of a new manager and workspace
	// (sandbox tests bring their own).
	m      *manager.Manager
	ws     store.Workspace
	target Target
	// alive, when set, is asked by the resolver whether the sandbox
	// still runs, as package e2b's resolver checks its registry.
	alive func(context.Context) error
}

func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	f := &fixture{m: o.m, ws: o.ws, e2bID: "sbx_test", target: o.target}
	if f.m == nil {
		data := t.TempDir()
		if err := workspace.ProbeOverlay(data); err != nil {
			t.Fatalf("overlay mounts do not work here: %v", err)
		}
		st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: 1000, GID: 1000})
		if err != nil {
			t.Fatal(err)
		}
		f.m = m
		ws, err := m.CreateWorkspace(t.Context(), manager.CreateRequest{Empty: true, Task: "envdfs " + t.Name(), Disk: apitypes.ByteSize(o.disk)})
		if err != nil {
			t.Fatal(err)
		}
		f.ws = ws
		t.Cleanup(func() {
			if err := m.RemoveWorkspace(context.Background(), ws.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("cleanup: %v", err)
			}
		})
		f.target = Target{WorkspaceID: ws.ID, User: "user", Home: "/home/user"}
	}
	f.files = f.m.FilesPath(f.ws)
	mux := http.NewServeMux()
	f.svc = register(mux, f.m, func(r *http.Request) (Target, error) {
		if r.Header.Get("X-Access-Token") != testToken {
			return Target{}, fmt.Errorf("access token: %w", errdefs.ErrUnauthorized)
		}
		if id := r.Header.Get(testSandboxHeader); id != f.e2bID {
			return Target{}, errdefs.NotFound("sandbox", id)
		}
		if o.alive != nil {
			if err := o.alive(r.Context()); err != nil {
				return Target{}, err
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.target, nil
	}, o.opts)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.fs = fspbconnect.NewFilesystemClient(f.client(f.e2bID, testToken), f.srv.URL, connect.WithProtoJSON())
	return f
}

// client is an HTTP client that sends the E2B headers, as the SDK does.
func (f *fixture) client(id, token string) *http.Client {
	return &http.Client{Transport: headerTransport{id: id, token: token, base: f.srv.Client().Transport}}
}

type headerTransport struct {
	id, token string
	base      http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(testSandboxHeader, h.id)
	r.Header.Set("X-Access-Token", h.token)
	return h.base.RoundTrip(r)
}

// upload is one file of a multipart upload.
type upload struct {
	name string
	data []byte
}

// postFiles sends a multipart upload the way the SDK's FormData does and
// returns the status and body.
func (f *fixture) postFiles(t *testing.T, query string, files ...upload) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, u := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, u.name))
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(u.data)
	}
	mw.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+"/files"+query, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return f.do(t, req)
}

// postRaw sends an application/octet-stream upload; gz compresses it and
// chunked hides its length.
func (f *fixture) postRaw(t *testing.T, query string, data []byte, gz, chunked bool) (int, []byte) {
	t.Helper()
	var body io.Reader = bytes.NewReader(data)
	if gz {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		body = &buf
	}
	if chunked {
		body = io.MultiReader(body) // hides the length from net/http
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+"/files"+query, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	return f.do(t, req)
}

func (f *fixture) get(t *testing.T, query string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.srv.URL+"/files"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.client(f.e2bID, testToken).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

func (f *fixture) do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := f.client(f.e2bID, testToken).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// wantEnvdError checks an envd JSON error body with the status code.
func wantEnvdError(t *testing.T, status int, body []byte, want int, contains string) {
	t.Helper()
	var e envdError
	if err := json.Unmarshal(body, &e); err != nil || status != want || e.Code != want || !strings.Contains(e.Message, contains) {
		t.Errorf("got %d %s, want %d with an envd error naming %q", status, body, want, contains)
	}
}

// wantCode checks a Connect error's code.
func wantCode(t *testing.T, err error, want connect.Code, contains string) {
	t.Helper()
	if connect.CodeOf(err) != want || !strings.Contains(fmt.Sprint(err), contains) {
		t.Errorf("got error %v (code %v), want code %v naming %q", err, connect.CodeOf(err), want, contains)
	}
}

// stream is a WatchDir stream read by a goroutine into a channel.
type stream struct {
	events chan *fspb.FilesystemEvent
	// err is the stream's end, once events is closed.
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

// watch starts WatchDir and waits for its start event.
func (f *fixture) watch(t *testing.T, req *fspb.WatchDirRequest) (*stream, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cr := connect.NewRequest(req)
	cr.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := f.fs.WatchDir(ctx, cr)
	if err != nil {
		cancel()
		return nil, err
	}
	if !s.Receive() {
		err := s.Err()
		s.Close()
		cancel()
		return nil, err
	}
	if s.Msg().GetStart() == nil {
		t.Fatalf("first message %v, want the start event", s.Msg())
	}
	st := &stream{events: make(chan *fspb.FilesystemEvent, 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		defer close(st.events)
		for s.Receive() {
			if e := s.Msg().GetFilesystem(); e != nil {
				st.events <- e
			}
		}
		st.err = s.Err()
		s.Close()
	}()
	t.Cleanup(st.stop)
	return st, nil
}

func (s *stream) stop() {
	s.cancel()
	for range s.events {
	}
	<-s.done
}

// ev is an event as tests compare them.
type ev struct {
	Name string
	Type string
}

func (e ev) String() string { return e.Type + " " + e.Name }

func short(e *fspb.FilesystemEvent) ev {
	return ev{Name: e.GetName(), Type: strings.ToLower(strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_"))}
}

// until collects events until one equals want, failing after d.
func (s *stream) until(t *testing.T, want ev, d time.Duration) []ev {
	t.Helper()
	var got []ev
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended (%v) before %v; got %v", s.err, want, got)
			}
			got = append(got, short(e))
			if short(e) == want {
				return got
			}
		case <-timer.C:
			t.Fatalf("no %v within %s; got %v", want, d, got)
		}
	}
}

// contains reports whether evs holds want.
func contains(evs []ev, want ev) bool {
	for _, e := range evs {
		if e == want {
			return true
		}
	}
	return false
}

// syncBuffer is a buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// noTemp fails if a fileapi temporary file is left in dir.
func noTemp(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			t.Errorf("temporary file %s left behind", p)
		}
		return nil
	})
}
