package initd

import (
	"testing"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestEOFKeys checks what ends a terminal's input in each of its modes,
// and that it does end a reader's input: the master's settings are the
// slave's.
func TestEOFKeys(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a terminal: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	mfd, sfd := int(master.Fd()), int(slave.Fd())
	set := func(f func(*unix.Termios)) {
		t.Helper()
		tio, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		f(tio)
		if err := unix.IoctlSetTermios(sfd, unix.TCSETS, tio); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]byte{4}, eofKeys(mfd, false)); diff != "" {
		t.Errorf("at the start of a line (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]byte{4, 4}, eofKeys(mfd, true)); diff != "" {
		t.Errorf("after a partial line (-want +got):\n%s", diff)
	}
	// Typed after a partial line, the keys deliver the line, then end of
	// file.
	if _, err := master.Write(append([]byte("partial"), eofKeys(mfd, true)...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, want := range []string{"partial", ""} {
		n, err := unix.Read(sfd, buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("read on the slave: %q %v, want %q", buf[:max(n, 0)], err, want)
		}
	}
	set(func(tio *unix.Termios) { tio.Cc[unix.VEOF] = 0x18 }) // ^X
	if diff := cmp.Diff([]byte{24}, eofKeys(mfd, false)); diff != "" {
		t.Errorf("with ^X as EOF (-want +got):\n%s", diff)
	}
	set(func(tio *unix.Termios) { tio.Lflag &^= unix.ICANON })
	if diff := cmp.Diff([]byte{24}, eofKeys(mfd, true)); diff != "" {
		t.Errorf("in raw mode (-want +got):\n%s", diff)
	}
	set(func(tio *unix.Termios) { tio.Lflag |= unix.ICANON; tio.Cc[unix.VEOF] = 0 })
	if got := eofKeys(mfd, true); len(got) != 0 {
		t.Errorf("with EOF disabled: %q, want nothing", got)
	}
}
