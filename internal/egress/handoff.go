package egress

import (
	"net"
	"syscall"
	"time"

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
		return c, true
	case guest.EgressRelay:
		closeFDs(fds)
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
