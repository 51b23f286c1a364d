package envdfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
)

// TestHostilePaths: paths outside the workspace, and symlinks the sandbox
// planted to host paths, reach nothing outside through any call, and
// change nothing.
func TestHostilePaths(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := t.Context()
	// A host directory outside the workspace, with a canary.
	outside := t.TempDir()
	canary := "canary-" + randHex(8)
	if err := os.WriteFile(filepath.Join(outside, "canary"), []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"etc": "/etc", "out": outside, "rel": "../../../../../../" + outside, "self": "/proc/self/root" + outside} {
		if err := os.Symlink(target, filepath.Join(f.files, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := listing(t, outside)

	for _, p := range []string{
		"/etc/passwd", "../../etc/passwd", "/workspace/../etc/passwd", "/home/user/../../etc/passwd",
		outside + "/canary", "/tmp/x", "/proc/self/environ",
		"etc/passwd", "out/canary", "rel/canary", "self/canary", "/workspace/out/canary",
	} {
		_, err := f.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
		_, err = f.fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: filepath.Dir(p), Depth: 3}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
		_, err = f.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: p + "-dir/x"}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
		_, err = f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: p, Destination: "stolen"}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
		_, err = f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: p}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
		_, err = f.watch(t, &fspb.WatchDirRequest{Path: filepath.Dir(p), Recursive: true})
		wantCode(t, err, connect.CodeInvalidArgument, "")

		status, body, _ := f.get(t, "?path="+url.QueryEscape(p))
		if bytes.Contains(body, []byte(canary)) || bytes.Contains(body, []byte("root:")) {
			t.Fatalf("download of %s leaked: %s", p, body)
		}
		wantEnvdError(t, status, body, http.StatusBadRequest, "")
		status, body = f.postRaw(t, "?path="+url.QueryEscape(p+"-new"), []byte("pwned"), false, false)
		wantEnvdError(t, status, body, http.StatusBadRequest, "")
		status, body = f.postFiles(t, "", upload{p + "-new", []byte("pwned")})
		wantEnvdError(t, status, body, http.StatusBadRequest, "")
	}
	// Moving a workspace file out, through a link or by name, fails too.
	os.WriteFile(filepath.Join(f.files, "mine"), []byte("x"), 0o644)
	for _, dst := range []string{"out/mine", outside + "/mine", "/tmp/mine", "etc/mine"} {
		_, err := f.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "mine", Destination: dst}))
		wantCode(t, err, connect.CodeInvalidArgument, "")
	}
	if diff := listingDiff(before, listing(t, outside)); diff != "" {
		t.Errorf("the outside directory changed: %s", diff)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "canary")); string(b) != canary {
		t.Errorf("canary changed: %q", b)
	}
	for _, p := range []string{"/etc/passwd-new", "/tmp/x-new", "/etc/passwd-dir"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created on the host", p)
		}
	}
	// The links themselves are still there and can be removed (the link,
	// never its target).
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "out"})); err != nil {
		t.Errorf("removing the link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "canary")); err != nil {
		t.Errorf("removing the link removed its target: %v", err)
	}
}

// TestHugeUpload: an upload over the limit, plain, chunked, gzip-bombed or
// over the disk quota, is refused E2B-shaped and leaves nothing behind:
// no file, no temporary file, no parent made for it.
func TestHugeUpload(t *testing.T) {
	const limit = 1 << 20
	f := newFixture(t, fixtureOpts{opts: Options{MaxUpload: limit}, disk: 4 << 20})
	big := bytes.Repeat([]byte("x"), limit+1)
	for _, tc := range []struct {
		name        string
		gz, chunked bool
		multipart   bool
		want        int
	}{
		{"length", false, false, false, http.StatusRequestEntityTooLarge},
		{"chunked", false, true, false, http.StatusRequestEntityTooLarge},
		{"gzip bomb", true, true, false, http.StatusRequestEntityTooLarge},
		{"multipart", false, false, true, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var status int
			var body []byte
			if tc.multipart {
				status, body = f.postFiles(t, "", upload{"big/deep/huge.bin", big})
			} else {
				status, body = f.postRaw(t, "?path=big/deep/huge.bin", big, tc.gz, tc.chunked)
			}
			wantEnvdError(t, status, body, tc.want, "limit")
			if _, err := os.Lstat(filepath.Join(f.files, "big")); !os.IsNotExist(err) {
				t.Errorf("the refused upload left big/: %v", err)
			}
			noTemp(t, f.files)
		})
	}
	// Over the quota but under the limit: 507, NotEnoughSpaceError.
	f2 := newFixture(t, fixtureOpts{opts: Options{MaxUpload: 64 << 20}, disk: 2 << 20})
	status, body := f2.postRaw(t, "?path=q/huge.bin", bytes.Repeat([]byte("y"), 8<<20), false, false)
	wantEnvdError(t, status, body, http.StatusInsufficientStorage, "")
	if _, err := os.Lstat(filepath.Join(f2.files, "q")); !os.IsNotExist(err) {
		t.Errorf("the refused upload left q/: %v", err)
	}
	noTemp(t, f2.files)
	// The workspace still takes a small file afterwards.
	if status, body := f2.postRaw(t, "?path=small.txt", []byte("ok"), false, false); status != 200 {
		t.Errorf("small upload after a full one: %d %s", status, body)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// listing is dir's names, sizes and modes, for a before/after check.
func listing(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out[p] = fmt.Sprint(fi.Mode(), fi.ModTime(), fi.Size())
		}
		return nil
	})
	return out
}

func listingDiff(a, b map[string]string) string {
	var d string
	for k, v := range a {
		if b[k] != v {
			d += "changed " + k + "; "
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d += "new " + k + "; "
		}
	}
	return d
}

// TestUploadSwapRace: uploads (and the cleanup of a refused one) into a
// directory that the sandbox swaps with a symlink to a host directory in a
// tight loop write nothing outside the workspace.
func TestUploadSwapRace(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: Options{MaxUpload: 64 << 10}})
	outside := t.TempDir()
	before := listing(t, outside)
	os.MkdirAll(filepath.Join(f.files, "d"), 0o755)
	os.Symlink(outside, filepath.Join(f.files, "l"))
	done := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, filepath.Join(f.files, "d"), unix.AT_FDCWD, filepath.Join(f.files, "l"), unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	}()
	big := bytes.Repeat([]byte("z"), 128<<10)
	for i := range 200 {
		f.postFiles(t, "", upload{fmt.Sprintf("d/new%d/f", i%7), []byte("pwned")})
		f.postRaw(t, fmt.Sprintf("?path=l/deep%d/g", i%5), big, false, true) // refused: its parents are removed again
	}
	close(done)
	if n := <-swapped; n < 100 {
		t.Errorf("only %d swaps happened during the uploads", n)
	}
	if diff := listingDiff(before, listing(t, outside)); diff != "" {
		t.Errorf("the host directory changed: %s", diff)
	}
	noTemp(t, f.files)
}
