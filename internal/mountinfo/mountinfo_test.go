package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`: "/a b", `/tab\011x`: "/tab\tx", `/back\134slash`: `/back\slash`, `/plain`: "/plain", `/bad\09`: `/bad\09`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountPoints(t *testing.T) {
	if ok, err := IsMountPoint("/"); err != nil || !ok {
		t.Fatalf("IsMountPoint(/) = %v, %v", ok, err)
	}
	if os.Geteuid() != 0 {
		skip.OrFail(t, "mounting needs root")
	}
	dir := filepath.Join(t.TempDir(), "with space")
	inner := filepath.Join(dir, "inner")
	os.MkdirAll(inner, 0o755)
	if ok, _ := IsMountPoint(dir); ok {
		t.Fatal("plain dir reported as a mount point")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	os.MkdirAll(inner, 0o755)
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(inner, unix.MNT_DETACH)
	if ok, err := IsMountPoint(dir + "/"); err != nil || !ok {
		t.Errorf("IsMountPoint(%q) = %v, %v", dir, ok, err)
	}
	got, err := Under(dir)
	if err != nil || len(got) != 2 || got[0] != inner || got[1] != dir {
		t.Errorf("Under = %q, %v; want deepest first [%s %s]", got, err, inner, dir)
	}
}

func TestAt(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "mounting needs root")
	}
	dir := filepath.Join(t.TempDir(), "a b")
	os.MkdirAll(dir, 0o755)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	got, err := At("/proc/self/mountinfo", dir+"/")
	if err != nil || len(got) != 2 {
		t.Fatalf("At = %+v, %v; want two mounts", got, err)
	}
	under, top := got[0], got[1]
	if under.Options[0] != "rw" || !slices.Contains(under.Options, "nosuid") || len(under.Propagation) != 0 {
		t.Errorf("the lower mount: %+v, want rw,nosuid and private", under)
	}
	if top.Options[0] != "ro" || !slices.Contains(top.Options, "nodev") || len(top.Propagation) != 1 || !strings.HasPrefix(top.Propagation[0], "shared:") {
		t.Errorf("the top mount: %+v, want ro,nodev and shared", top)
	}
}
