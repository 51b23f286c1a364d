// Package ids makes agentbox object identifiers: a kind prefix and 12
// random lowercase base32 characters ("ws_k3j9a0c2mq7p").
package ids

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

var enc = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns prefix + "_" + 12 random characters (60 bits).
func New(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + "_" + enc.EncodeToString(b[:])[:12]
}

// HasPrefix reports whether id looks like an identifier of the given kind.
func HasPrefix(id, prefix string) bool {
	return strings.HasPrefix(id, prefix+"_") && len(id) == len(prefix)+13
}
