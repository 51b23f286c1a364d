package guest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestOpenPort relays connections through a guest that runs on the host,
// so the host's loopback is the "sandbox's": an echo server that reads
// to the end, a large transfer both ways through a slow client, a port
// nobody listens on, a server that closes first and a relay the daemon
// kills.
func TestOpenPort(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	// The server echoes everything it reads, then closes once the client
	// half-closed.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	t.Run("echo to the end of input", func(t *testing.T) {
		client, relay := socketPair(t)
		p, err := g.conn.OpenPort(t.Context(), port, relay)
		if err != nil {
			t.Fatal(err)
		}
		// 4 MiB, far more than a window, written while read back.
		want := make([]byte, 4<<20)
		rand.Read(want)
		go func() {
			client.Write(want)
			client.(*net.UnixConn).CloseWrite()
		}()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(client)
			got <- b
		}()
		res, err := p.Wait(t.Context())
		relay.Close()
		if err != nil || res.Lost {
			t.Fatalf("relay ended with %v %+v", err, res)
		}
		if b := <-got; !bytes.Equal(b, want) {
			t.Errorf("echoed %d bytes, want the %d sent", len(b), len(want))
		}
	})

	t.Run("nobody listens", func(t *testing.T) {
		closed, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		free := uint16(closed.Addr().(*net.TCPAddr).Port)
		closed.Close()
		_, relay := socketPair(t)
		_, err = g.conn.OpenPort(t.Context(), free, relay)
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, "connection refused") {
			t.Fatalf("OpenPort of a closed port: %v, want a StartError saying connection refused", err)
		}
		if _, err := g.conn.Ping(t.Context()); err != nil {
			t.Fatalf("connection after a refused port: %v", err)
		}
	})

	t.Run("killed by the daemon", func(t *testing.T) {
		client, relay := socketPair(t)
		p, err := g.conn.OpenPort(t.Context(), port, relay)
		if err != nil {
			t.Fatal(err)
		}
		client.Write([]byte("ping"))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo %q %v", buf, err)
		}
		p.Kill()
		done := make(chan struct{})
		go func() {
			p.Wait(t.Context())
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a killed relay did not end")
		}
	})

	t.Run("port 0", func(t *testing.T) {
		_, relay := socketPair(t)
		if _, err := g.conn.OpenPort(t.Context(), 0, relay); !errors.Is(err, ErrInvalid) {
			t.Errorf("OpenPort(0): %v, want ErrInvalid", err)
		}
	})
}

// socketPair is a connected pair of unix stream sockets, closed at the
// end of the test.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	dir := shortDir(t)
	ln, err := net.Listen("unix", dir+"/p.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("unix", dir+"/p.sock")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}
