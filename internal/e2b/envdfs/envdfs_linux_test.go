package envdfs

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb/fspbconnect"
)

func TestPaths(t *testing.T) {
	home := Target{Home: "/home/user"}
	for _, tc := range []struct {
		t       Target
		in      string
		root    string
		rel     string
		refused bool
	}{
		{home, "a.txt", "/home/user", "a.txt", false},
		{home, "", "/home/user", ".", false},
		{home, "~", "/home/user", ".", false},
		{home, "~/x/y", "/home/user", "x/y", false},
		{home, "/home/user/./x//y/", "/home/user", "x/y", false},
		{home, "/workspace", "/workspace", ".", false},
		{home, "/workspace/src/../a", "/workspace", "a", false},
		{home, "/workspace/../home/user/a", "/home/user", "a", false},
		{home, "/etc/passwd", "", "", true},
		{home, "../../etc/passwd", "", "", true},
		{home, "/workspace/../etc", "", "", true},
		{home, "/home/userx/a", "", "", true},
		{home, "/workspacex", "", "", true},
		{home, "/", "", "", true},
		{home, "/tmp/x", "", "", true},
		{home, "/proc/self/root/etc", "", "", true},
		{home, "a\x00b", "", "", true},
		{home, strings.Repeat("a/", 3000), "", "", true},
		// A home inside the workspace is a directory of it, no alias.
		{Target{Home: "/workspace/me"}, "x", "/workspace", "me/x", false},
		{Target{Home: "/"}, "workspace/x", "/workspace", "x", false},
		{Target{Home: "/"}, "etc", "", "", true},
		{Target{}, "x", "/workspace", "x", false},
	} {
		got, err := tc.t.resolvePath(tc.in)
		if tc.refused {
			if err == nil {
				t.Errorf("resolvePath(%q) with home %q = %+v, want a refusal", tc.in, tc.t.Home, got)
			} else if connect.CodeOf(connectError(err, fromFiles)) != connect.CodeInvalidArgument {
				t.Errorf("resolvePath(%q): %v is not invalid_argument", tc.in, err)
			}
			continue
		}
		if err != nil || got.root != tc.root || got.rel != tc.rel {
			t.Errorf("resolvePath(%q) with home %q = %+v, %v; want root %s rel %s", tc.in, tc.t.Home, got, err, tc.root, tc.rel)
		}
	}
}

// TestRoundTrip drives every call the SDK's files module makes.
func TestRoundTrip(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := t.Context()

	// makeDir: created with parents, then already_exists (the SDK's false).
	md, err := f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "dir/sub"}))
	if err != nil {
		t.Fatal(err)
	}
	e := md.Msg.GetEntry()
	if e.GetPath() != "/home/user/dir/sub" || e.GetName() != "sub" || e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY ||
		e.GetMode() != 0o755 || e.GetPermissions() != "drwxr-xr-x" || e.GetOwner() != "user" || e.GetGroup() != "user" {
		t.Errorf("MakeDir entry = %v", e)
	}
	_, err = f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/workspace/dir/sub"}))
	wantCode(t, err, connect.CodeAlreadyExists, "/workspace/dir/sub")

	// write: one file named by path, then several named by their parts.
	status, body := f.postFiles(t, "?path=dir/a.txt&username=user", upload{"dir/a.txt", []byte("hello")})
	if status != 200 || !jsonEq(t, body, `[{"path":"/home/user/dir/a.txt","name":"a.txt","type":"file"}]`) {
		t.Fatalf("upload: %d %s", status, body)
	}
	status, body = f.postFiles(t, "", upload{"/workspace/multi/one.txt", []byte("1")}, upload{"multi/deep/two.bin", []byte{0, 1, 2, 255}})
	if status != 200 || !jsonEq(t, body, `[{"path":"/workspace/multi/one.txt","name":"one.txt","type":"file"},{"path":"/home/user/multi/deep/two.bin","name":"two.bin","type":"file"}]`) {
		t.Fatalf("multi upload: %d %s", status, body)
	}
	// The octet-stream form, gzip-encoded, as the SDK sends streams.
	status, body = f.postRaw(t, "?path=/home/user/raw/z.txt", []byte("zipped"), true, true)
	if status != 200 || !jsonEq(t, body, `[{"path":"/home/user/raw/z.txt","name":"z.txt","type":"file"}]`) {
		t.Fatalf("raw upload: %d %s", status, body)
	}
	status, body = f.postFiles(t, "?path=empty.txt", upload{"empty.txt", nil})
	if status != 200 {
		t.Fatalf("empty upload: %d %s", status, body)
	}
	for p, want := range map[string]string{"dir/a.txt": "hello", "multi/one.txt": "1", "multi/deep/two.bin": "\x00\x01\x02\xff", "raw/z.txt": "zipped"} {
		b, err := os.ReadFile(filepath.Join(f.files, p))
		if err != nil || string(b) != want {
			t.Errorf("host %s = %q, %v; want %q", p, b, err, want)
		}
		// Owned by the sandbox user, file and created parents.
		for q := p; q != "."; q = filepath.Dir(q) {
			fi, err := os.Lstat(filepath.Join(f.files, q))
			if st, ok := fi.Sys().(*syscall.Stat_t); err != nil || !ok || st.Uid != 1000 || st.Gid != 1000 {
				t.Errorf("%s: owner %+v, %v; want 1000:1000", q, fi.Sys(), err)
			}
		}
	}
	noTemp(t, f.files)

	// read: text and bytes, and an empty file with Content-Length 0.
	status, got, _ := f.get(t, "?path=/workspace/multi/deep/two.bin&username=user")
	if status != 200 || !bytes.Equal(got, []byte{0, 1, 2, 255}) {
		t.Errorf("download = %d %q", status, got)
	}
	status, got, hdr := f.get(t, "?path=empty.txt")
	if status != 200 || len(got) != 0 || hdr.Get("Content-Length") != "0" {
		t.Errorf("empty download = %d %q %v", status, got, hdr)
	}
	status, got, _ = f.get(t, "?path=missing.txt")
	wantEnvdError(t, status, got, http.StatusNotFound, "/home/user/missing.txt")
	status, got, _ = f.get(t, "?path=dir")
	wantEnvdError(t, status, got, http.StatusBadRequest, "not a regular file")

	// stat (getInfo, exists).
	st, err := f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/workspace/dir/a.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	e = st.Msg.GetEntry()
	if e.GetPath() != "/workspace/dir/a.txt" || e.GetSize() != 5 || e.GetMode() != 0o644 || e.GetPermissions() != "-rw-r--r--" ||
		e.GetType() != fspb.FileType_FILE_TYPE_FILE || e.GetModifiedTime().AsTime().Before(time.Now().Add(-time.Minute)) || e.SymlinkTarget != nil {
		t.Errorf("Stat entry = %v", e)
	}
	_, err = f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "nope"}))
	wantCode(t, err, connect.CodeNotFound, "/home/user/nope")
	if err := os.Symlink("a.txt", filepath.Join(f.files, "dir", "ln")); err != nil {
		t.Fatal(err)
	}
	st, err = f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "dir/ln"}))
	if err != nil || st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_SYMLINK || st.Msg.GetEntry().GetSymlinkTarget() != "/home/user/dir/a.txt" {
		t.Errorf("Stat of a symlink = %v, %v", st, err)
	}

	// list, depth 1 and 2, in the SDK's order.
	ls, err := f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "dir"}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/home/user/dir/a.txt", "/home/user/dir/ln", "/home/user/dir/sub"}, paths(ls.Msg.GetEntries())); diff != "" {
		t.Errorf("ListDir depth 1 (-want +got):\n%s", diff)
	}
	ls, err = f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/multi", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/workspace/multi/deep", "/workspace/multi/deep/two.bin", "/workspace/multi/one.txt"}, paths(ls.Msg.GetEntries())); diff != "" {
		t.Errorf("ListDir depth 2 (-want +got):\n%s", diff)
	}
	_, err = f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "dir/a.txt"}))
	wantCode(t, err, connect.CodeInvalidArgument, "dir/a.txt")

	// rename, with the destination's parents made.
	mv, err := f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "dir/a.txt", Destination: "/workspace/moved/b.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := mv.Msg.GetEntry(); e.GetPath() != "/workspace/moved/b.txt" || e.GetName() != "b.txt" || e.GetType() != fspb.FileType_FILE_TYPE_FILE {
		t.Errorf("Move entry = %v", e)
	}
	_, err = f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "dir/a.txt", Destination: "c.txt"}))
	wantCode(t, err, connect.CodeNotFound, "dir/a.txt")
	if _, err := os.Stat(filepath.Join(f.files, "c.txt")); !os.IsNotExist(err) {
		t.Errorf("a failed move left c.txt: %v", err)
	}

	// remove: a tree, then a missing path (no error, as with envd).
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "multi"})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "multi"})); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.files, "multi")); !os.IsNotExist(err) {
		t.Errorf("multi still there: %v", err)
	}
	_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/home/user"}))
	wantCode(t, err, connect.CodeInvalidArgument, "root")

	// The changes mark the workspace dirty and are in its event log.
	ws, err := f.m.GetWorkspace(ctx, f.ws.ID)
	if err != nil || !ws.Dirty {
		t.Errorf("workspace after writes: %+v, %v", ws, err)
	}
}

func paths(es []*fspb.EntryInfo) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.GetPath()
	}
	return out
}

func jsonEq(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		return false
	}
	json.Unmarshal([]byte(want), &b)
	return cmp.Equal(a, b)
}

// TestCallerErrors: an unknown sandbox and a wrong token get the shapes
// the SDK maps to its errors, on both surfaces.
func TestCallerErrors(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := t.Context()
	bad := fspbconnect.NewFilesystemClient(f.client(f.e2bID, "wrong"), f.srv.URL, connect.WithProtoJSON())
	_, err := bad.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "."}))
	wantCode(t, err, connect.CodeUnauthenticated, "access token")
	unknown := fspbconnect.NewFilesystemClient(f.client("sbx_nope", testToken), f.srv.URL, connect.WithProtoJSON())
	_, err = unknown.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "."}))
	wantCode(t, err, connect.CodeUnavailable, "sbx_nope")

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/files?path=a", nil)
	resp, err := f.client(f.e2bID, "wrong").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e envdError
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 401 || e.Code != 401 {
		t.Errorf("wrong token on /files: %d %+v", resp.StatusCode, e)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/files?path=a", strings.NewReader("x"))
	resp, err = f.client("sbx_nope", testToken).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 502 || e.Code != 502 || !strings.Contains(e.Message, "sbx_nope") {
		t.Errorf("unknown sandbox on /files: %d %+v", resp.StatusCode, e)
	}
	if _, err := os.Stat(filepath.Join(f.files, "a")); !os.IsNotExist(err) {
		t.Errorf("a refused upload wrote a: %v", err)
	}
}

// TestRequestBound: a huge request message is refused before it is
// buffered, even without credentials.
func TestRequestBound(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, client := range []fspbconnect.FilesystemClient{f.fs, fspbconnect.NewFilesystemClient(f.srv.Client(), f.srv.URL, connect.WithProtoJSON())} {
		_, err := client.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: strings.Repeat("a", 1<<20)}))
		wantCode(t, err, connect.CodeResourceExhausted, "")
	}
}
