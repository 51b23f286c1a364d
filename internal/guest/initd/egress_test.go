package initd

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// upperServer answers each connection on a unix socket with its input in
// upper case, after the client's end of data, then closes.
func upperServer(t *testing.T, path string) {
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
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
}

func TestEgressRelay(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opts) }) // runs last
	sock := filepath.Join(t.TempDir(), "egress.sock")
	upperServer(t, sock)
	e := Egress{Listen: "127.0.0.1:0", Socket: sock}
	ln, err := e.Listener()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx, ln) }()

	// Two clients at once, each half-closing after its request: both get
	// their whole answer.
	results := make(chan string, 2)
	for _, msg := range []string{"hello through the relay", "another connection"} {
		go func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				results <- "dial: " + err.Error()
				return
			}
			defer c.Close()
			c.Write([]byte(msg))
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(bufio.NewReader(c))
			if err != nil {
				results <- "read: " + err.Error()
				return
			}
			results <- string(b)
		}()
	}
	got := map[string]bool{<-results: true, <-results: true}
	for _, want := range []string{"HELLO THROUGH THE RELAY", "ANOTHER CONNECTION"} {
		if !got[want] {
			t.Errorf("answers %v lack %q", got, want)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

func TestEgressRelayRefusesBadSetups(t *testing.T) {
	for name, e := range map[string]Egress{
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
	e := Egress{Listen: "127.0.0.1:0", Socket: filepath.Join(t.TempDir(), "missing.sock")}
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
