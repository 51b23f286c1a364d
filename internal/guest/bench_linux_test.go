package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These benchmarks time what a sandbox's creator and its agent wait for.
// Run them one at a time, on a quiet machine:
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/guest/
//
// Every op of BenchmarkFirstExec starts a fresh guest; connect-ms is the
// time from starting it (bubblewrap, docker run or the bare binary) to the
// daemon's Accept returning, first-exec-ms the first command after that.

// BenchmarkFirstExec times start -> authenticated connection -> first
// command done, the create-to-first-exec latency of a sandbox, minus the
// backend's own bookkeeping.
func BenchmarkFirstExec(b *testing.B) {
	rootfs := buildRootfs(b)
	trueArgv := []string{"/bin/busybox", "true"}
	type starter func(b *testing.B, dir, token string) (stop func())
	process := func(b *testing.B, dir, token string) func() {
		cmd := exec.Command(guestBin, "-socket", filepath.Join(dir, "agentbox.sock"))
		cmd.Env = []string{TokenEnv + "=" + token}
		return startCmd(b, cmd)
	}
	bwrap := func(asPid1 bool) starter {
		return func(b *testing.B, dir, token string) func() {
			return startCmd(b, bwrapCommand(b, rootfs, dir, token, asPid1))
		}
	}
	// The token in a pipe instead of the environment: the guest need not
	// re-execute itself to hide it (see initd.TakeToken), which saves a
	// Go runtime start. Only a backend that can pass a descriptor to the
	// guest can do this (bubblewrap passes on what it inherits).
	bwrapTokenFD := func(b *testing.B, dir, token string) func() {
		cmd := bwrapCommand(b, rootfs, dir, token, true)
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		w.WriteString(token)
		w.Close()
		defer r.Close()
		cmd.ExtraFiles = []*os.File{r}
		cmd.Env = []string{TokenFDEnv + "=3"}
		return startCmd(b, cmd)
	}
	docker := func(runtime string) starter {
		return func(b *testing.B, dir, token string) func() {
			out, err := exec.Command("docker", dockerRunArgs(runtime, dir, token)...).CombinedOutput()
			if err != nil {
				b.Fatalf("docker run: %v %s", err, out)
			}
			id := strings.TrimSpace(string(out))
			return func() { exec.Command("docker", "rm", "-f", id).Run() }
		}
	}
	for _, k := range []struct {
		name   string
		start  starter
		docker string
	}{
		{"process", process, ""},
		{"bwrap", bwrap(false), ""},
		{"bwrap-as-pid-1", bwrap(true), ""},
		{"bwrap-as-pid-1-token-fd", bwrapTokenFD, ""},
		{"runc", docker("runc"), "runc"},
		{"runsc", docker("runsc"), "runsc"},
	} {
		b.Run(k.name, func(b *testing.B) {
			if k.docker != "" {
				requireDocker(b)
				requireRuntime(b, k.docker)
				ensureImage(b, rootfs)
				b.Cleanup(func() { removeTestContainers(b) })
			}
			req := ExecRequest{Argv: trueArgv, Dir: "/"}
			if k.name == "process" {
				req.Argv = []string{"true"}
				req.Env = hostEnv
			}
			var connect, first time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				dir := shortDir(b)
				os.Chmod(dir, 0o755)
				token, err := NewToken()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				ln, err := Listen(filepath.Join(dir, "agentbox.sock"), token, ListenOptions{})
				if err != nil {
					b.Fatal(err)
				}
				stop := k.start(b, dir, token)
				ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
				c, err := ln.Accept(ctx)
				cancel()
				if err != nil {
					b.Fatalf("the guest did not connect: %v", err)
				}
				t1 := time.Now()
				res, err := c.Exec(b.Context(), req, nil, nil, nil)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("first exec: %v %+v", err, res)
				}
				t2 := time.Now()
				b.StopTimer()
				connect += t1.Sub(t0)
				first += t2.Sub(t1)
				c.Close()
				stop()
				ln.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(connect.Microseconds())/1000/float64(b.N), "connect-ms")
			b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first-exec-ms")
		})
	}
}

// startCmd starts cmd and returns a function that stops it with SIGTERM
// (SIGKILL after 10s) and waits for it.
func startCmd(b *testing.B, cmd *exec.Cmd) func() {
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Errorf("%s did not exit after SIGTERM\n%s", cmd.Path, log.String())
			cmd.Process.Kill()
			<-done
		}
	}
}

// BenchmarkExec times the round trip of a trivial command through a warm
// guest: the steady state of an agent's loop.
func BenchmarkExec(b *testing.B) {
	rootfs := buildRootfs(b)
	for _, name := range []string{"process", "bwrap-as-pid-1", "runc", "runsc"} {
		b.Run(name, func(b *testing.B) {
			var c *Conn
			req := ExecRequest{Argv: []string{"/bin/busybox", "true"}, Dir: "/"}
			dir, token, ln := sandboxSocket(b)
			switch name {
			case "process":
				req = ExecRequest{Argv: []string{"true"}, Env: hostEnv, Dir: "/"}
				cmd := exec.Command(guestBin, "-socket", ln.Path())
				cmd.Env = []string{TokenEnv + "=" + token}
				b.Cleanup(startCmd(b, cmd))
			case "bwrap-as-pid-1":
				b.Cleanup(startCmd(b, bwrapCommand(b, rootfs, dir, token, true)))
			default:
				requireDocker(b)
				requireRuntime(b, name)
				ensureImage(b, rootfs)
				out, err := exec.Command("docker", dockerRunArgs(name, dir, token)...).CombinedOutput()
				if err != nil {
					b.Fatalf("docker run: %v %s", err, out)
				}
				id := strings.TrimSpace(string(out))
				b.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
			}
			c = accept(b, ln, func() string { return "" })
			// The first command may start the guest's first reaper.
			if _, err := c.Exec(b.Context(), req, nil, nil, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				res, err := c.Exec(b.Context(), req, nil, nil, nil)
				if err != nil || res.ExitCode != 0 {
					b.Fatal(fmt.Sprint(err, res))
				}
			}
		})
	}
}

// BenchmarkExecOutput times a command's output through a warm guest (a
// process on the host): 8 MiB of stdout (under the default output cap), read by the daemon's side.
func BenchmarkExecOutput(b *testing.B) {
	const size = 8 << 20
	req := ExecRequest{Argv: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, Env: hostEnv, Dir: "/"}
	_, token, ln := sandboxSocket(b)
	cmd := exec.Command(guestBin, "-socket", ln.Path())
	cmd.Env = []string{TokenEnv + "=" + token}
	b.Cleanup(startCmd(b, cmd))
	c := accept(b, ln, func() string { return "" })
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		var n countWriter
		res, err := c.Exec(b.Context(), req, nil, &n, nil)
		if err != nil || res.ExitCode != 0 || n != size {
			b.Fatal(fmt.Sprint(err, res, n))
		}
	}
}

// countWriter counts what is written to it.
type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}
