package initd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/guest"
)

// upperServer answers each connection on a unix socket with its input in
// upper case, after the client's end of data, then closes. It opens each
// connection as the daemon's egress proxy does (guest.EgressHandoff): with
// take, it serves a handed-over socket itself; without, it answers that
// it got none, as on a runtime that cannot pass descriptors. handed
// counts the sockets it served itself.
func upperServer(t *testing.T, path string, take bool, handed *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var conn net.Conn = c
				defer func() { conn.Close() }()
				b := make([]byte, 1)
				oob := make([]byte, syscall.CmsgSpace(4))
				n, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(b, oob)
				if err != nil || n != 1 {
					return
				}
				var fds []int
				if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
					fds, _ = syscall.ParseUnixRights(&msgs[0])
				}
				switch {
				case b[0] == guest.EgressHandoff && take && len(fds) == 1:
					f := os.NewFile(uintptr(fds[0]), "handed")
					tc, err := net.FileConn(f)
					f.Close()
					if err != nil {
						return
					}
					c.Close()
					conn = tc
					handed.Add(1)
				case b[0] == guest.EgressHandoff:
					for _, fd := range fds {
						syscall.Close(fd)
					}
					c.Write([]byte{guest.EgressRelayAck})
				case b[0] != guest.EgressRelay:
					return
				}
				in, _ := io.ReadAll(conn)
				conn.Write([]byte(strings.ToUpper(string(in))))
			}()
		}
	}()
}

func TestEgressRelay(t *testing.T) {
	for _, take := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", take), func(t *testing.T) {
			opts := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, opts) }) // runs last
			sock := filepath.Join(t.TempDir(), "egress.sock")
			var handed atomic.Int32
			upperServer(t, sock, take, &handed)
			e := &Egress{Listen: "127.0.0.1:0", Socket: sock}
			ln, err := e.Listener()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- e.Serve(ctx, ln) }()

			// Clients one after the other, then two at once, each
			// half-closing after its request: each gets its whole answer.
			ask := func(msg string) string {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					return "dial: " + err.Error()
				}
				defer c.Close()
				c.Write([]byte(msg))
				c.(*net.TCPConn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				b, err := io.ReadAll(bufio.NewReader(c))
				if err != nil {
					return "read: " + err.Error()
				}
				return string(b)
			}
			for _, msg := range []string{"first", "second"} {
				if got, want := ask(msg), strings.ToUpper(msg); got != want {
					t.Errorf("answer %q, want %q", got, want)
				}
			}
			results := make(chan string, 2)
			for _, msg := range []string{"hello through the relay", "another connection"} {
				go func() { results <- ask(msg) }()
			}
			got := map[string]bool{<-results: true, <-results: true}
			for _, want := range []string{"HELLO THROUGH THE RELAY", "ANOTHER CONNECTION"} {
				if !got[want] {
					t.Errorf("answers %v lack %q", got, want)
				}
			}
			// A daemon that takes the socket gets every one; one that
			// cannot is asked once, and then relayed to.
			if want := map[bool]int32{true: 4, false: 0}[take]; handed.Load() != want {
				t.Errorf("%d sockets handed over, want %d", handed.Load(), want)
			}
			if e.noHandoff.Load() == take {
				t.Errorf("noHandoff = %v after a daemon that takes sockets: %v", e.noHandoff.Load(), take)
			}
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve after cancel: %v", err)
			}
		})
	}
}

func TestEgressRelayRefusesBadSetups(t *testing.T) {
	for name, e := range map[string]*Egress{
		"not loopback":   {Listen: "0.0.0.0:3128", Socket: "/x"},
		"not an address": {Listen: "localhost:3128", Socket: "/x"},
		"no socket":      {Listen: "127.0.0.1:0"},
	} {
		t.Run(name, func(t *testing.T) {
			if ln, err := e.Listener(); err == nil {
				ln.Close()
				t.Errorf("Listener(%+v) served", e)
			}
		})
	}
}

// A relay whose egress socket is gone closes the client's connection
// instead of leaving it hanging.
func TestEgressRelayWithoutDaemon(t *testing.T) {
	e := &Egress{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "missing.sock")}
	ln, err := e.Listener()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Serve(ctx, ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Errorf("read on a relay without its daemon: %d bytes, %v; want the connection closed", n, err)
	}
}
