package testutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/flock"
)

// ErrNoNode says node or npm is not on this machine.
var ErrNoNode = errors.New("node and npm are needed (Node 20 or later)")

// NPMCacheDir is where NPMTools keeps what it installs: outside any clone,
// so that a second run, of this tree or another, finds it installed.
func NPMCacheDir() string {
	if d := os.Getenv("AGENTBOX_NPM_CACHE"); d != "" {
		return d
	}
	return "/var/cache/agentbox/npm"
}

// NPMTools installs the npm packages that spec (a directory holding a
// package.json and its package-lock.json, every version pinned) names,
// once per lock file, into a directory of NPMCacheDir, and returns that
// directory (its node_modules/.bin holds the tools). A run whose packages
// are installed already costs a stat.
func NPMTools(ctx context.Context, spec string) (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", ErrNoNode
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", ErrNoNode
	}
	h := sha256.New()
	var files [][]byte
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(spec, name))
		if err != nil {
			return "", err
		}
		h.Write(b)
		files = append(files, b)
	}
	root := NPMCacheDir()
	dir := filepath.Join(root, filepath.Base(spec)+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	done := filepath.Join(dir, ".installed")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	// One installer at a time, across processes.
	lock, err := flock.Acquire(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return "", err
	}
	defer lock.Unlock()
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	os.RemoveAll(dir) // a half-made install
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i, name := range []string{"package.json", "package-lock.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), files[i], 0o644); err != nil {
			return "", err
		}
	}
	// npm ci installs exactly the lock file; no package's scripts run.
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--cache", filepath.Join(root, "_npm"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci for %s: %w\n%s", spec, err, strings.TrimSpace(string(out)))
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}
