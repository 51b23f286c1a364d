package initd

import (
	"fmt"
	"strconv"
	"strings"
)

// User is a uid and a gid.
type User struct{ UID, GID int }

// ParseUser parses "UID:GID", both positive: neither the guest's own user
// nor its commands' may be root.
func ParseUser(s string) (User, error) {
	us, gs, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if !ok || err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return User{}, fmt.Errorf("user %q is not UID:GID, both above 0", s)
	}
	return User{UID: uid, GID: gid}, nil
}

func (u User) String() string { return strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID) }
