package egress

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// clientSocket makes a connection of a descriptor the relay handed over,
// which must be a connected TCP socket (inside the sandbox's network
// namespace): anything else is closed and refused.
func clientSocket(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "egress client")
	defer f.Close() // FileConn holds its own descriptor
	for _, want := range []struct {
		opt  int
		name string
		ok   func(int) bool
	}{
		{syscall.SO_TYPE, "type", func(v int) bool { return v == syscall.SOCK_STREAM }},
		{syscall.SO_DOMAIN, "domain", func(v int) bool { return v == syscall.AF_INET || v == syscall.AF_INET6 }},
		{syscall.SO_PROTOCOL, "protocol", func(v int) bool { return v == syscall.IPPROTO_TCP }},
	} {
		v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, want.opt)
		if err != nil {
			return nil, fmt.Errorf("handed-over descriptor: %w", err)
		}
		if !want.ok(v) {
			return nil, fmt.Errorf("handed-over descriptor is not a TCP socket (socket %s %d)", want.name, v)
		}
	}
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handed-over socket: %w", err)
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, errors.New("handed-over socket is not a TCP connection")
	}
	if tc.RemoteAddr() == nil {
		tc.Close()
		return nil, errors.New("handed-over socket is not connected")
	}
	return tc, nil
}
