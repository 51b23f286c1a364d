package egress

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
)

// openEgress reads the opening of a connection on a sandbox's egress
// socket (see guest.EgressHandoff) and returns the connection to serve:
// the client's own TCP socket when the relay handed it over, else c,
// which then carries the client's bytes. When it returns another
// connection than c, c is closed, which tells the relay it may let go.
// ok is false when there is nothing to serve (the relay went away, or
// sent nothing before the idle timeout); c is then closed.
func (p *Proxy) openEgress(c *net.UnixConn) (_ net.Conn, ok bool) {
	var b [1]byte
	oob := make([]byte, syscall.CmsgSpace(4)) // room for one descriptor: more are discarded
	_ = c.SetReadDeadline(time.Now().Add(p.idleTimeout))
	n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
	_ = c.SetReadDeadline(time.Time{})
	fds := unixRights(oob[:oobn])
	if n == 0 || err != nil {
		closeFDs(fds)
		c.Close()
		return nil, false
	}
	switch b[0] {
	case guest.EgressHandoff:
		if len(fds) == 1 {
			tc, err := clientSocket(fds[0])
			if err == nil {
				c.Close()
				return tc, true
			}
			p.log.Debug("egress handoff refused", logErr, err)
		} else {
			closeFDs(fds)
		}
		// Nothing usable arrived: the relay carries the bytes.
		_ = c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
		if _, err := c.Write([]byte{guest.EgressRelayAck}); err != nil {
			c.Close()
			return nil, false
		}
		_ = c.SetWriteDeadline(time.Time{})
		widenRelay(c)
		return c, true
	case guest.EgressRelay:
		closeFDs(fds)
		widenRelay(c)
		return c, true
	default:
		// A client speaking HTTP on the socket itself.
		closeFDs(fds)
		return &prefixConn{UnixConn: c, first: b[:n]}, true
	}
}

// unixRights returns the descriptors of the SCM_RIGHTS messages in oob.
func unixRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// prefixConn reads first, then the connection: the byte the proxy read to
// tell a relay from a client that speaks HTTP on the socket itself.
type prefixConn struct {
	*net.UnixConn
	first []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.UnixConn.Read(b)
}

// relayBuffer is the socket buffer of a relayed connection, each way.
// The relay runs under gVisor, whose reads from a host socket cost a
// system call of tens of microseconds each, and a read returns at most
// what the sender's buffer held: with the default (about 200 KiB) a 100 MB
// download reached 530 MB/s, with 1 MiB 700-940 MB/s (4 MiB gained
// nothing more). It is kernel memory the daemon may hold per relayed
// connection, which keeps it at 1 MiB.
const relayBuffer = 1 << 20

// widenRelay sets c's buffers to relayBuffer, past the system's maximum
// when the daemon may (root: SO_SNDBUFFORCE), else up to it.
func widenRelay(c *net.UnixConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], relayBuffer) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], relayBuffer)
			}
		}
	})
}
