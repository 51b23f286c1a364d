package testutil

import (
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestStartGitea: the server runs as a user other than root, answers with
// the version built, takes its token, and is gone after Close with its
// port closed.
func TestStartGitea(t *testing.T) {
	g := StartGitea(t)
	status, err := os.ReadFile("/proc/" + strconv.Itoa(g.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && os.Geteuid() == 0 && f[1] == "0" {
			t.Errorf("gitea runs as root: %s", line)
		}
	}
	var v struct {
		Version string `json:"version"`
	}
	g.API(t, http.MethodGet, "/version", nil, &v)
	if "v"+v.Version != GiteaVersion {
		t.Errorf("version %q, want %s", v.Version, GiteaVersion)
	}
	var me struct {
		Login   string `json:"login"`
		IsAdmin bool   `json:"is_admin"`
	}
	g.API(t, http.MethodGet, "/user", nil, &me)
	if me.Login != g.User || !me.IsAdmin {
		t.Errorf("the token's user: %+v, want admin %s", me, g.User)
	}
	url := g.CreateRepo(t, "probe", map[string]string{"a.txt": "a\n"})
	if !strings.HasPrefix(url, g.URL+"/") || strings.Contains(url, "@") {
		t.Errorf("clone URL %q", url)
	}
	out := Git(t, "", "-c", "http.extraHeader="+g.GitAuthHeader(), "ls-remote", url)
	if !strings.Contains(out, "refs/heads/main") {
		t.Errorf("ls-remote %s: %s", url, out)
	}

	// A push by token alone, whatever the user name (GitHub's convention
	// "x-access-token", which workspace.Push uses by default).
	src := NewRepo(t, map[string]string{"b.txt": "b\n"})
	header := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+g.Token))
	Git(t, src.Dir, "-c", "http.extraHeader="+header, "push", "-q", url, "main:refs/heads/by-token")
	if out := Git(t, "", "ls-remote", url, "refs/heads/by-token"); !strings.Contains(out, "by-token") {
		t.Errorf("the push by token made no branch: %q", out)
	}

	addr := strings.TrimPrefix(g.URL, "http://")
	g.Close()
	if _, err := os.Stat("/proc/" + strconv.Itoa(g.cmd.Process.Pid)); err == nil {
		t.Errorf("gitea pid %d still there after Close", g.cmd.Process.Pid)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Close", addr)
	}
}
