package image

import (
	"encoding/hex"
	"strings"
)

// Config is an image's run configuration as the local backend honours it.
type Config struct {
	// Env is the image's ENV, "KEY=value".
	Env []string `json:"env,omitempty"`
	// WorkingDir is its WORKDIR.
	WorkingDir string `json:"working_dir,omitempty"`
	// User is its USER.
	User string `json:"user,omitempty"`
}

// idHex is the hex digest of an image id, validated.
func idHex(id string) (string, bool) {
	h, ok := strings.CutPrefix(id, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", false
	}
	return h, true
}
