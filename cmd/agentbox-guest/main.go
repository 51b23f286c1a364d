// Command agentbox-guest is the init of every agentbox sandbox. It is
// mounted read-only into the sandbox and started as its first process, as
// an unprivileged user without network. It dials the daemon's unix socket
// (bind-mounted from a per-sandbox host directory), authenticates with the
// token in $AGENTBOX_GUEST_TOKEN, and runs the daemon's commands. See
// internal/guest for the protocol.
//
// Usage:
//
//	agentbox-guest [-socket PATH]   run as the sandbox's init
//	agentbox-guest version          print the version
//	agentbox-guest reaper           internal: supervise one command
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/initd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "version":
			fmt.Printf("agentbox-guest %s (protocol %d)\n", version, guest.ProtocolVersion)
			return
		case initd.ReaperArg:
			os.Exit(initd.RunReaper())
		}
	}
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("agentbox-guest", flag.ContinueOnError)
	socket := fs.String("socket", envOr(guest.SocketEnv, guest.DefaultSocketPath), "the daemon's socket")
	debug := fs.Bool("debug", false, "log connection attempts")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "agentbox-guest: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	token, err := initd.TakeToken()
	if err != nil {
		log.Error("guest failed", "error", err)
		return 2
	}
	err = initd.Run(context.Background(), initd.Config{
		SocketPath: *socket,
		Token:      token,
		Version:    version,
		Logger:     log,
	})
	if err != nil {
		log.Error("guest failed", "error", err)
		return 1
	}
	return 0
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
