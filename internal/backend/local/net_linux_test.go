package local

import (
	"context"
	"net"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// hostListener is a TCP listener on the host's loopback that counts what
// it accepts: the oracle for "the sandbox cannot reach the host".
type hostListener struct {
	port int
	n    atomic.Int64
}

func (h *hostListener) accepted() int64 { return h.n.Load() }

func netListen(t *testing.T) (*hostListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { ln.Close() })
	h := &hostListener{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.n.Add(1)
			c.Close()
		}
	}()
	return h, nil
}

// hostProbe runs the probe on the host as the sandbox user, unconfined.
func hostProbe(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testGID, Groups: []uint32{}}}
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
