package initd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/guest"
)

// tokenFDEnv tells the re-executed guest which descriptor holds its token.
const tokenFDEnv = "AGENTBOX_GUEST_TOKEN_FD"

// TakeToken returns the guest's token and makes sure no process of the
// sandbox can read it. The token arrives in the environment, and a
// process's initial environment stays readable in /proc/PID/environ for
// its whole life; PR_SET_DUMPABLE hides it on Linux but not under gVisor.
// So the guest re-executes itself (keeping its pid, 1) with the token in a
// pipe instead: the new image's environment never held it.
func TakeToken() (string, error) {
	if v, ok := os.LookupEnv(tokenFDEnv); ok {
		os.Unsetenv(tokenFDEnv)
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return "", fmt.Errorf("bad %s %q", tokenFDEnv, v)
		}
		f := os.NewFile(uintptr(fd), "token")
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 4096))
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		return string(b), nil
	}
	token := os.Getenv(guest.TokenEnv)
	if token == "" {
		return "", errors.New("no token: set " + guest.TokenEnv)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	if _, err := io.WriteString(w, token); err != nil {
		return "", fmt.Errorf("passing the token on: %w", err)
	}
	w.Close()
	fd := r.Fd() // blocking, and kept across exec:
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFD, 0); e != 0 {
		return "", fmt.Errorf("passing the token on: %w", e)
	}
	env := []string{tokenFDEnv + "=" + strconv.Itoa(int(fd))}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, guest.TokenEnv+"=") && !strings.HasPrefix(e, tokenFDEnv+"=") {
			env = append(env, e)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the guest binary: %w", err)
	}
	err = syscall.Exec(exe, os.Args, env)
	return "", fmt.Errorf("re-executing the guest: %w", err)
}
