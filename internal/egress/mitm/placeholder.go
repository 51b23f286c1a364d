package mitm

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// PlaceholderPrefix starts every placeholder, so that tools and logs can
// tell one from a real value.
const PlaceholderPrefix = "agentbox-secret-"

// NewPlaceholder returns a fresh placeholder for the secret name:
// "agentbox-secret-NAME-" and 32 random hex digits. Each sandbox gets its
// own, so that one sandbox's placeholder is worth nothing to another.
func NewPlaceholder(name string) (string, error) {
	if reason := policy.SecretNameProblem(name); reason != "" {
		return "", errdefs.Invalid("secret %q: %s", name, reason)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return PlaceholderPrefix + name + "-" + hex.EncodeToString(b[:]), nil
}
