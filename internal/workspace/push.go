package workspace

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/gitx"
)

// PushAuth is the credential of a push over HTTP: sent as basic
// authentication in a header given to git through its environment, never
// on a command line, in a config file or in a URL.
type PushAuth struct {
	User, Token string
}

// Push sends commit, an object of hostgit, to branch of remote (an http or
// https URL, or an absolute path of a repository on the host), never
// forced: the remote refuses anything but a fast-forward or a new branch.
// It runs host-side git in the jail, with the network, and reads only
// hostgit and the mirror's objects: nothing of the sandbox's tree.
func (g Git) Push(ctx context.Context, remote, commit, branch string, auth *PushAuth) error {
	if !shaRE.MatchString(commit) {
		return errdefs.Invalid("push: %q is not a commit name", commit)
	}
	if err := ValidBranch(ctx, branch); err != nil {
		return err
	}
	jail, err := g.jail()
	if err != nil {
		return fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	if jail == nil {
		jail = &gitx.Jail{}
	}
	jail.Network = true
	// No redirect (the header would follow it), no hints after the error.
	args := []string{"-c", "http.followRedirects=false", "-c", "advice.pushUpdateRejected=false"}
	u, perr := url.Parse(remote)
	switch {
	case perr == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil:
		args = append(args, "-c", "protocol."+u.Scheme+".allow=always")
	case filepath.IsAbs(remote) && filepath.Clean(remote) == remote:
		info, err := os.Stat(remote)
		if err != nil || !info.IsDir() {
			return fmt.Errorf("push: the remote %s is not a repository directory: %w", remote, errdefs.ErrInvalid)
		}
		args = append(args, "-c", "protocol.file.allow=always")
		jail.Writable = append(jail.Writable, remote)
		auth = nil
	default:
		return errdefs.Invalid("push: remote %q is not an http(s) URL without credentials or an absolute path", remote)
	}
	env := []string{"GIT_DIR=" + HostGitDir(g.Dir)}
	var redact []string
	if auth != nil && auth.Token != "" {
		user := auth.User
		if user == "" {
			user = "x-access-token"
		}
		basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + auth.Token))
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic "+basic)
		redact = []string{auth.Token, basic}
	}
	args = append(args, "push", "--no-verify", "--", remote, commit+":refs/heads/"+branch)
	_, err = gitx.Run(ctx, gitx.Cmd{Hardened: true, Jail: jail, Env: env, Redact: redact, Args: args})
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "non-fast-forward") || strings.Contains(msg, "fetch first") || strings.Contains(msg, "[rejected]") {
			return fmt.Errorf("push of %s to %s %s refused: the remote branch has commits this one lacks (agentbox never forces): %s: %w", commit[:12], remote, branch, msg, errdefs.ErrConflict)
		}
		return fmt.Errorf("push of %s to %s %s: %s", commit[:12], remote, branch, msg)
	}
	return nil
}
