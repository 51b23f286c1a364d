// Command agentbox-guest is the init of every agentbox sandbox. It is
// mounted read-only into the sandbox and started as its first process, as
// an unprivileged user without network. It dials the daemon's unix socket
// (bind-mounted from a per-sandbox host directory), authenticates with the
// token in $AGENTBOX_GUEST_TOKEN, and runs the daemon's commands. See
// internal/guest for the protocol.
//
// Usage:
//
//	agentbox-guest [-socket PATH] [--landlock[=MODE]] [--landlock-tcp-connect=PORTS]
//	               [--proxy ADDR [--egress-socket PATH]]
//	                                run as the sandbox's init
//	agentbox-guest version          print the version
//	agentbox-guest reaper ...       internal: supervise commands
//
// --landlock runs every command under a Landlock ruleset (see
// internal/guest/initd): MODE is best-effort (the default with a bare
// --landlock: commands run anyway where the kernel or runtime has no
// Landlock, and the hello says so) or required (the guest then refuses
// every command); $AGENTBOX_GUEST_LANDLOCK sets the same. PORTS are the
// TCP ports commands may connect to ($AGENTBOX_GUEST_LANDLOCK_TCP_CONNECT).
//
// --proxy ADDR ($AGENTBOX_GUEST_PROXY) makes the guest listen on that
// loopback address and relay each connection to the daemon's egress socket,
// where the sandbox's policy is enforced: the only way out of a sandbox.
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
			os.Exit(initd.RunReaper(os.Args[2:]))
		}
	}
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("agentbox-guest", flag.ContinueOnError)
	socket := fs.String("socket", envOr(guest.SocketEnv, guest.DefaultSocketPath), "the daemon's socket")
	proxy := fs.String("proxy", envOr(guest.ProxyEnv, ""), "loopback address where commands' HTTP proxy traffic is relayed to the egress socket (none: no relay)")
	egressSocket := fs.String("egress-socket", guest.DefaultEgressSocketPath, "the daemon's egress socket")
	debug := fs.Bool("debug", false, "log connection attempts")
	mode, err := guest.ParseLandlockMode(os.Getenv(guest.LandlockEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox-guest: $%s: %v\n", guest.LandlockEnv, err)
		return 2
	}
	fs.Var(&landlockFlag{&mode}, "landlock", "run commands under Landlock: best-effort (a bare --landlock), required or off")
	ports := envOr(guest.LandlockConnectEnv, "")
	fs.StringVar(&ports, "landlock-tcp-connect", ports, "comma-separated TCP ports commands may connect to under Landlock")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	connect, err := initd.ParsePorts(ports)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox-guest: --landlock-tcp-connect: %v\n", err)
		return 2
	}
	landlock := initd.Landlock{Mode: mode, ConnectTCP: connect}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "agentbox-guest: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	token, err := initd.TakeToken(landlock)
	if err != nil {
		log.Error("guest failed", "error", err)
		return 2
	}
	var egress *initd.Egress
	if *proxy != "" {
		egress = &initd.Egress{Listen: *proxy, Socket: *egressSocket, Logger: log}
	}
	err = initd.Run(context.Background(), initd.Config{
		SocketPath: *socket,
		Token:      token,
		Version:    version,
		Logger:     log,
		Landlock:   landlock,
		Egress:     egress,
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

// landlockFlag is --landlock: a bare --landlock means best effort.
type landlockFlag struct{ mode *guest.LandlockMode }

func (f *landlockFlag) String() string {
	if f.mode == nil {
		return guest.LandlockOff.String()
	}
	return f.mode.String()
}

func (f *landlockFlag) Set(s string) error {
	m, err := guest.ParseLandlockMode(s)
	if err != nil {
		return err
	}
	*f.mode = m
	return nil
}

func (f *landlockFlag) IsBoolFlag() bool { return true }
