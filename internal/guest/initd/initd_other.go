//go:build !linux

package initd

import (
	"context"
	"errors"
	"log/slog"
)

// ReaperArg is the first argument that makes the guest binary a reaper.
const ReaperArg = "reaper"

// Config is how the guest was started.
type Config struct {
	SocketPath string
	Token      string
	Version    string
	Logger     *slog.Logger
	Landlock   Landlock
	Egress     *Egress
	Commands   *User
}

var errLinuxOnly = errors.New("agentbox-guest runs only on Linux")

// Run fails: the guest needs Linux.
func Run(ctx context.Context, cfg Config) error { return errLinuxOnly }

// RunReaper fails: the guest needs Linux.
func RunReaper(args []string) int { return 1 }

// TakeToken fails: the guest needs Linux.
func TakeToken(l Landlock, commands *User) (string, error) { return "", errLinuxOnly }

// BecomeGuest fails: the guest needs Linux.
func BecomeGuest(self User) error { return errLinuxOnly }
