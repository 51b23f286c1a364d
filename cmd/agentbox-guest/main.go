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
// $AGENTBOX_GUEST_COMMAND_USER (UID:GID) runs commands as that user, apart
// from the guest's own, $AGENTBOX_GUEST_USER (UID:GID), which a guest
// started as root becomes, keeping only the capabilities it needs to
// start commands as the other user (see internal/guest/initd).
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
	self, commands, err := users()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox-guest: %v\n", err)
		return 2
	}
	token, err := initd.TakeToken(landlock, commands)
	if err != nil {
		log.Error("guest failed", "error", err)
		return 2
	}
	if commands != nil {
		// After TakeToken: a guest started as root re-executes itself
		// there, and would lose what it keeps here.
		if err := initd.BecomeGuest(*self); err != nil {
			log.Error("guest failed: it cannot become its own user", "user", self.String(), "error", err)
			return 2
		}
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
		Commands:   commands,
	})
	if err != nil {
		log.Error("guest failed", "error", err)
		return 1
	}
	return 0
}

// users reads the guest's own user and its commands' from the
// environment. Without $AGENTBOX_GUEST_COMMAND_USER commands run as the
// guest; with it, the guest is $AGENTBOX_GUEST_USER, or the user it was
// started as.
func users() (self, commands *initd.User, err error) {
	// Kept in the environment: a guest that re-executes itself (see
	// initd.TakeToken) reads them again.
	v := os.Getenv(guest.CommandUserEnv)
	sv := os.Getenv(guest.UserEnv)
	if v == "" {
		if sv != "" {
			return nil, nil, fmt.Errorf("$%s without $%s", guest.UserEnv, guest.CommandUserEnv)
		}
		return nil, nil, nil
	}
	c, err := initd.ParseUser(v)
	if err != nil {
		return nil, nil, fmt.Errorf("$%s: %w", guest.CommandUserEnv, err)
	}
	s := initd.User{UID: os.Getuid(), GID: os.Getgid()}
	if sv != "" {
		if s, err = initd.ParseUser(sv); err != nil {
			return nil, nil, fmt.Errorf("$%s: %w", guest.UserEnv, err)
		}
	}
	if s.UID == 0 || s.UID == c.UID {
		return nil, nil, fmt.Errorf("the guest's user %s must be neither root nor the commands' user %s", s, c)
	}
	return &s, &c, nil
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
