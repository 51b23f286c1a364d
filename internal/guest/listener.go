package guest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultSocketPath is where the guest dials the daemon inside a sandbox.
	DefaultSocketPath = "/run/agentbox/agentbox.sock"
	// TokenEnv is the guest's environment variable holding its token. The
	// guest removes it from its own environment and makes itself
	// non-dumpable so that commands cannot read it from /proc/1/environ.
	TokenEnv = "AGENTBOX_GUEST_TOKEN"
	// TokenFDEnv, instead of TokenEnv, names an inherited descriptor (a
	// pipe whose write end is closed) that holds the token. A backend that
	// can pass a descriptor to the guest (bubblewrap passes on what it
	// inherits) saves the guest the re-execution that hides a token
	// received in the environment: a whole Go runtime start.
	TokenFDEnv = "AGENTBOX_GUEST_TOKEN_FD"
	// SocketEnv overrides DefaultSocketPath for the guest.
	SocketEnv = "AGENTBOX_GUEST_SOCKET"
	// CommandUserEnv, when set ("UID:GID"), is the user the guest runs
	// commands as, apart from its own: see the package comment.
	CommandUserEnv = "AGENTBOX_GUEST_COMMAND_USER"
	// UserEnv ("UID:GID") is the guest's own user, which a guest started
	// as root becomes; one started as another user must already be it.
	UserEnv = "AGENTBOX_GUEST_USER"
	// DefaultEgressSocketPath is where the daemon serves a sandbox's
	// egress proxy, when its policy lets it reach anything.
	DefaultEgressSocketPath = "/run/agentbox/egress.sock"
	// ProxyEnv, when set, is the loopback address (e.g. 127.0.0.1:3128)
	// where the guest relays HTTP proxy connections to the egress socket.
	ProxyEnv = "AGENTBOX_GUEST_PROXY"
	// PrewarmEnv, when set, is how many OS threads the guest adds at start
	// (see initd.Run); 0 adds none. The gvisor backend sets 0: there every
	// thread costs host tasks against the pids limit, and reaching that
	// limit ends the whole sandbox anyway.
	PrewarmEnv = "AGENTBOX_GUEST_PREWARM"
	// SubreaperEnv, when "0", keeps the guest's reapers from being child
	// subreapers: orphans of commands then go to the guest (PID 1), which
	// sweeps them when no command runs. The gvisor backend sets it: gVisor
	// (as of 2026-09) honours PR_SET_CHILD_SUBREAPER but does not recount a
	// process group's links to its session when it reparents an orphan, so
	// the reap of an orphan that went to the reaper (in another group of
	// the command's session) takes away a link it never counted, and
	// gVisor sends the stopped members of the command's group SIGHUP
	// (job control ends with rc 129). gVisor 2022-12 reparented orphans to
	// PID 1 whatever a process asked.
	SubreaperEnv = "AGENTBOX_GUEST_SUBREAPER"
	// DefaultProxyAddr is the address the daemon gives in ProxyEnv, and
	// the one HTTP_PROXY names in commands' environments.
	DefaultProxyAddr = "127.0.0.1:3128"
	// maxPendingHandshakes bounds connections that have not authenticated
	// yet, so that processes in the sandbox cannot exhaust the daemon.
	maxPendingHandshakes = 8
	// maxRefusalReports bounds the refused connections one Listener logs
	// and reports: a guest that lost its connection dials again every
	// second, and a hostile process may dial in a loop. Later ones are
	// counted, and the count is logged when the Listener closes.
	maxRefusalReports = 32
)

// NewToken returns a fresh random token for one sandbox.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating guest token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ListenOptions tunes a Listener; the zero value is ready to use.
type ListenOptions struct {
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// HandshakeTimeout bounds how long a new connection may take to
	// authenticate (default 5s).
	HandshakeTimeout time.Duration
	// KeepAlive is how often an idle connection is pinged; a guest silent
	// for three intervals is declared dead (default 10s).
	KeepAlive time.Duration
	// WriteTimeout bounds each frame write (default 10s).
	WriteTimeout time.Duration
	// Owner, when set, owns the socket, which is then mode 0600: only
	// the guest's own user may connect, not the commands it runs as
	// another user (see the package comment). Unset, the socket is mode
	// 0666, and the directory that holds it must keep others out.
	Owner *Owner
	// OnRefused, when set, is told of every connection the Listener
	// refuses (up to a bound): anything on the socket that is not the
	// sandbox's guest connecting once. The Listener logs them as well.
	OnRefused func(Refusal)
}

// Owner is a uid and gid.
type Owner struct{ UID, GID int }

// Refusal is a connection to a guest socket that was not the guest's.
type Refusal struct {
	// Reason says what was wrong: no hello, a wrong token, a second
	// connection after the guest's, a second hello on it, ...
	Reason string
	// PeerPID and PeerUID are the connecting process as the kernel saw
	// it (SO_PEERCRED), -1 when unknown. Under gVisor the peer is the
	// sandbox's runtime, not the process inside.
	PeerPID, PeerUID int
}

func (o *ListenOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
}

// Listener is the daemon's end of one sandbox's guest socket. The guest
// dials it (the daemon never connects into a sandbox: gVisor lets a sandbox
// connect to a host socket but not serve one) and every connection that
// authenticates with the sandbox's token comes out of Accept.
type Listener struct {
	path  string
	token []byte
	opts  ListenOptions
	ln    *net.UnixListener
	conns chan *Conn
	sem   chan struct{}

	// guest is set once a connection has authenticated: a Listener
	// serves one guest connection in its life, and refuses every later
	// one, whatever its token.
	guest atomic.Bool
	// refusals counts the refused connections.
	refusals atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
}

// Listen creates the socket at path (replacing a stale socket, never any
// other file) for a guest holding token. The socket is mode 0666 because
// the guest runs as an unprivileged user; the token and the directory that
// holds the socket (one per sandbox) keep others out.
func Listen(path string, token string, opts ListenOptions) (*Listener, error) {
	if len(token) < 16 {
		return nil, fmt.Errorf("guest socket %s: %w: token shorter than 16 bytes", path, ErrInvalid)
	}
	opts.setDefaults()
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("guest socket %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale guest socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("guest socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	// A new socket is at most 0755 under any umask: connectable by its
	// creator alone until it has its owner and mode.
	mode := os.FileMode(0o666)
	if o := opts.Owner; o != nil {
		mode = 0o600
		err = os.Chown(path, o.UID, o.GID)
	}
	if err == nil {
		err = os.Chmod(path, mode)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("guest socket %s: %w", path, err)
	}
	l := &Listener{
		path:   path,
		token:  []byte(token),
		opts:   opts,
		ln:     ln,
		conns:  make(chan *Conn),
		sem:    make(chan struct{}, maxPendingHandshakes),
		closed: make(chan struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Path is the socket's path on the host.
func (l *Listener) Path() string { return l.path }

// Accept waits for the next authenticated guest connection.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("guest socket %s: %w", l.path, ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting and removes the socket. Connections already
// accepted stay open.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.ln.Close()
		l.wg.Wait()
		if n := l.refusals.Load(); n > maxRefusalReports {
			l.opts.Logger.Warn("guest connections refused and not reported one by one", "socket", l.path, "count", n-maxRefusalReports, "refused", n)
		}
	})
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.AcceptUnix()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.opts.Logger.Warn("accepting guest connection", "socket", l.path, "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case l.sem <- struct{}{}:
		default:
			l.refuse(nc, fmt.Sprintf("more than %d connections without a hello", maxPendingHandshakes))
			nc.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.handshake(nc)
			<-l.sem
			if err != nil {
				l.refuse(nc, err.Error())
				nc.Close()
				return
			}
			select {
			case l.conns <- c:
			case <-l.closed:
				c.Close()
			}
		}()
	}
}

// readBufferSize is the read buffer of a guest connection on the
// daemon's side. It holds frame headers and small frames; a payload
// larger than what is buffered is read into its own slice directly, so a
// larger buffer saves no copy. Every idle sandbox holds one: at 64 KiB
// they were about half the daemon's heap with 2,000 sandboxes.
const readBufferSize = 4 << 10

// handshake reads the guest's Hello, checks its version and token, and
// answers. Nothing of the guest's is trusted before this returns.
func (l *Listener) handshake(nc *net.UnixConn) (*Conn, error) {
	nc.SetDeadline(time.Now().Add(l.opts.HandshakeTimeout))
	br := bufio.NewReaderSize(nc, readBufferSize)
	f, err := ReadFrame(br)
	if err != nil {
		return nil, fmt.Errorf("no hello: %w", err)
	}
	if f.Type != FrameHello {
		return nil, fmt.Errorf("%w: first frame is %s, want hello", ErrProtocol, f.Type)
	}
	h, err := DecodeHello(f.Payload)
	if err != nil {
		return nil, err
	}
	w := NewFrameWriter(nc, l.opts.WriteTimeout)
	if subtle.ConstantTimeCompare(h.Token, l.token) != 1 {
		w.WriteFrame(FrameError, 0, EncodeError(ErrKindAuth, "token refused"))
		return nil, errors.New("hello with a wrong token")
	}
	if h.Version != ProtocolVersion {
		msg := fmt.Sprintf("protocol version %d not supported (want %d)", h.Version, ProtocolVersion)
		w.WriteFrame(FrameError, 0, EncodeError(ErrKindProtocol, msg))
		return nil, errors.New(msg)
	}
	// The guest connects once; whoever comes second, even with the
	// token, is not it.
	if !l.guest.CompareAndSwap(false, true) {
		w.WriteFrame(FrameError, 0, EncodeError(ErrKindAuth, "the guest is connected already"))
		return nil, errors.New("a second hello: the guest is connected already")
	}
	if err := w.WriteFrame(FrameHelloOK, 0, []byte{byte(ProtocolVersion >> 8), byte(ProtocolVersion)}); err != nil {
		return nil, fmt.Errorf("answering hello: %w", err)
	}
	nc.SetDeadline(time.Time{})
	info := GuestInfo{Version: h.GuestVersion, Pid: int(h.Pid), Landlock: h.Landlock}
	level := slog.LevelInfo
	if info.Landlock.Mode != LandlockOff && !info.Landlock.Enforced {
		// Asked for and missing: worth a look, whether the guest runs
		// commands anyway (best effort) or refuses them (required).
		level = slog.LevelWarn
	}
	l.opts.Logger.Log(context.Background(), level, "guest connected", "socket", l.path, "guest_version", info.Version, "guest_pid", info.Pid, "landlock", info.Landlock.String())
	return newConn(nc, br, w, info, l.opts, l.refuse), nil
}

// refuse logs and reports a refused connection nc.
func (l *Listener) refuse(nc net.Conn, reason string) {
	n := l.refusals.Add(1)
	if n > maxRefusalReports {
		return
	}
	r := Refusal{Reason: reason, PeerPID: -1, PeerUID: -1}
	if uc, ok := nc.(*net.UnixConn); ok {
		r.PeerPID, r.PeerUID = peerCred(uc)
	}
	l.opts.Logger.Warn("guest connection refused", "socket", l.path, "reason", reason, "peer_pid", r.PeerPID, "peer_uid", r.PeerUID)
	if n == maxRefusalReports {
		l.opts.Logger.Warn("further refused guest connections are counted, not reported", "socket", l.path)
	}
	if l.opts.OnRefused != nil {
		l.opts.OnRefused(r)
	}
}
