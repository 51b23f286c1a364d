package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Account is an image USER resolved in the image's own /etc/passwd.
type Account struct {
	// Name is the user's name; empty for a uid the passwd file lacks.
	Name string
	// UID and GID are the user's ids (GID: the USER's group when it names
	// one, else the passwd entry's).
	UID, GID int
	// Home is the passwd entry's home directory; empty without an entry.
	Home string
}

// maxAccountFile bounds the passwd and group files read from an image.
const maxAccountFile = 4 << 20

// ReadAccountFiles reads /etc/passwd and /etc/group of an unpacked root
// file system. Symbolic links resolve inside rootfs (os.Root), never to
// the host's files; a file that is missing or not regular reads as empty.
func ReadAccountFiles(rootfs string) (passwd, group []byte, err error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	read := func(name string) ([]byte, error) {
		f, err := root.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return nil, err
		}
		return io.ReadAll(io.LimitReader(f, maxAccountFile))
	}
	if passwd, err = read("etc/passwd"); err != nil {
		return nil, nil, err
	}
	if group, err = read("etc/group"); err != nil {
		return nil, nil, err
	}
	return passwd, group, nil
}

// ResolveUser resolves an image's USER ("name", "uid", "name:group",
// "uid:gid") in the image's passwd and group files, as the engine would.
// It returns nil for no USER and for root: a sandbox never runs as root,
// and those mean "the sandbox user". A user or group name the files lack
// is an ErrInvalid naming it.
func ResolveUser(user string, passwd, group []byte) (*Account, error) {
	user = strings.TrimSpace(user)
	if user == "" {
		return nil, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	var a *Account
	if uid, err := strconv.Atoi(u); err == nil {
		if uid < 0 {
			return nil, errdefs.Invalid("image USER %q: negative uid", user)
		}
		a = &Account{UID: uid, GID: -1}
		if f := findColon(passwd, 2, u); f != nil {
			a = accountOf(f)
		}
	} else {
		f := findColon(passwd, 0, u)
		if f == nil {
			return nil, errdefs.Invalid("image USER %q: no user %q in the image's /etc/passwd", user, u)
		}
		a = accountOf(f)
	}
	if hasGroup {
		if gid, err := strconv.Atoi(g); err == nil && gid >= 0 {
			a.GID = gid
		} else if f := findColon(group, 0, g); f != nil {
			a.GID, _ = strconv.Atoi(f[2])
		} else {
			return nil, errdefs.Invalid("image USER %q: no group %q in the image's /etc/group", user, g)
		}
	}
	if a.UID == 0 {
		return nil, nil
	}
	return a, nil
}

func accountOf(f []string) *Account {
	a := &Account{Name: f[0]}
	a.UID, _ = strconv.Atoi(f[2])
	a.GID, _ = strconv.Atoi(f[3])
	if len(f) > 5 {
		a.Home = f[5]
	}
	return a
}

// findColon returns the fields of the first line of a colon file whose
// field i is v (passwd lines need 4 fields at least, group lines 3).
func findColon(b []byte, i int, v string) []string {
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ":")
		if len(f) < 4 {
			f = append(f, make([]string, 4-len(f))...)
		}
		if f[i] == v {
			if _, err := strconv.Atoi(f[2]); err != nil {
				continue
			}
			return f
		}
	}
	return nil
}

// String is the account for messages: "name (uid 1001)".
func (a *Account) String() string {
	if a.Name == "" {
		return fmt.Sprintf("uid %d", a.UID)
	}
	return fmt.Sprintf("%s (uid %d)", a.Name, a.UID)
}
