// Package secrets keeps the daemon's secrets: values that a sandbox may use
// through the egress proxy but never sees. Each value is sealed with
// AES-256-GCM under a key that lives in the data dir (secrets.key, mode
// 0600), with the secret's name as additional data, so that the database
// alone reveals nothing and a sealed value cannot be moved to another
// name. Values are never logged and never returned by the API: only the
// egress proxy (to swap them in) and result checks (to look for them) call
// Reveal and Values.
package secrets

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/atomicfile"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/store"
)

// KeyFile is the name of the key in the data dir.
const KeyFile = "secrets.key"

// MaxValueBytes bounds one secret.
const MaxValueBytes = 64 << 10

// keySize is AES-256's.
const keySize = 32

// Box seals, stores and opens secrets.
type Box struct {
	st   store.Store
	aead cipher.AEAD
	now  func() time.Time
}

// Open loads the key in dataDir, making it on first use, and returns a Box
// over st. A key file that is not a regular file of keySize bytes, readable
// by its owner only, is refused: it may have been read or replaced.
func Open(dataDir string, st store.Store) (*Box, error) {
	key, err := loadKey(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &Box{st: st, aead: aead, now: func() time.Time { return time.Now().UTC() }}, nil
}

// loadKey reads the key, or makes it: written whole and synced under a
// temporary name, then linked into place, so that two daemons starting on
// one data dir end with one key, and a crash never leaves half a key.
func loadKey(p string) ([]byte, error) {
	for range 2 {
		key, err := readKey(p)
		if !errors.Is(err, fs.ErrNotExist) {
			return key, err
		}
		if err := makeKey(p); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return readKey(p)
}

func readKey(p string) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 || fi.Size() != keySize {
		return nil, fmt.Errorf("%s must be a regular file of %d bytes with mode 0600 (it is %s, %d bytes): %w", p, keySize, fi.Mode(), fi.Size(), errdefs.ErrInvalid)
	}
	return os.ReadFile(p)
}

func makeKey(p string) error {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return atomicfile.WriteNew(p, 0o600, key)
}

// checkName refuses a name that no policy could bind.
func checkName(name string) error {
	if reason := policy.SecretNameProblem(name); reason != "" {
		return errdefs.Invalid("secret %q: %s", name, reason)
	}
	return nil
}

// Set stores value under name, replacing any value it had. A value goes
// into request headers, so line breaks and NUL bytes are refused.
func (b *Box) Set(ctx context.Context, name string, value []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	switch {
	case len(value) == 0:
		return errdefs.Invalid("secret %s: the value is empty", name)
	case len(value) > MaxValueBytes:
		return errdefs.Invalid("secret %s: the value is over %d bytes", name, MaxValueBytes)
	case bytes.ContainsAny(value, "\r\n\x00"):
		return errdefs.Invalid("secret %s: the value holds a line break or NUL byte (it is sent in a header)", name)
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	now := b.now()
	return b.st.PutSecret(ctx, store.SealedSecret{Name: name, Nonce: nonce, Sealed: b.aead.Seal(nil, nonce, value, []byte(name)),
		CreatedAt: now, UpdatedAt: now})
}

// Reveal returns the value of name. Only the egress proxy may hand it on,
// and only to the hosts a policy binds it to.
func (b *Box) Reveal(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	sec, err := b.st.GetSecret(ctx, name)
	if err != nil {
		return nil, err
	}
	v, err := b.aead.Open(nil, sec.Nonce, sec.Sealed, []byte(name))
	if err != nil {
		// Another key, or bytes changed behind the daemon's back.
		return nil, fmt.Errorf("secret %s does not open with this data dir's key: %w", name, errdefs.ErrConflict)
	}
	return v, nil
}

// List returns every secret's name and times, never a value.
func (b *Box) List(ctx context.Context) ([]store.SealedSecret, error) {
	return b.st.ListSecrets(ctx)
}

// Delete removes a secret.
func (b *Box) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return b.st.DeleteSecret(ctx, name)
}

// Values returns every secret's value, for checks that look for them in
// what leaves a workspace. A secret that does not open is skipped.
func (b *Box) Values(ctx context.Context) ([][]byte, error) {
	list, err := b.st.ListSecrets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(list))
	for _, s := range list {
		if v, err := b.Reveal(ctx, s.Name); err == nil {
			out = append(out, v)
		}
	}
	return out, nil
}
