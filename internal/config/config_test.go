package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestLoadFileEnvValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agentbox.yaml")
	os.WriteFile(file, []byte("data_dir: /srv/ab\nworkspace_driver: copy\ngit_timeout: 45s\nwarm_pool: [{backend: docker, image: agentbox/busybox:latest, size: 2}]\n"), 0o600)
	t.Setenv("AGENTBOX_DATA", "/srv/env")
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/srv/env" || c.WorkspaceDriver != "copy" || c.GitTimeout.Duration != 45*time.Second ||
		len(c.WarmPool) != 1 || c.WarmPool[0] != (WarmPool{Backend: "docker", Image: "agentbox/busybox:latest", Size: 2}) {
		t.Errorf("got %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestStrictFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("data_dir: /x\nworkspace_drivr: copy\n"), 0o600)
	if _, err := Load(file); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "workspace_drivr") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]func(*Config){
		"tcp without token":      func(c *Config) { c.Listen = "tcp://127.0.0.1:7000" },
		"short token":            func(c *Config) { c.Listen = "tcp://127.0.0.1:7000"; c.Token = "short" },
		"bad listen":             func(c *Config) { c.Listen = "127.0.0.1:7000" },
		"bad driver":             func(c *Config) { c.WorkspaceDriver = "zfs" },
		"half uid":               func(c *Config) { c.SandboxUID = -1; c.SandboxGID = 5 },
		"half guest uid":         func(c *Config) { c.GuestUID = 65000 },
		"guest is sandbox":       func(c *Config) { c.SandboxUID, c.SandboxGID, c.GuestUID, c.GuestGID = 1000, 1000, 1000, 1001 },
		"bad author":             func(c *Config) { c.AuthorEmail = "<x>" },
		"long data dir":          func(c *Config) { c.DataDir = "/" + strings.Repeat("d", 120) },
		"bad log level":          func(c *Config) { c.LogLevel = "loud" },
		"bad pool backend":       func(c *Config) { c.WarmPool = []WarmPool{{Backend: "k8s", Size: 1}} },
		"negative pool":          func(c *Config) { c.WarmPool = []WarmPool{{Size: -1}} },
		"e2b without token":      func(c *Config) { c.E2BListen = "tcp://127.0.0.1:3000" },
		"bad e2b listen":         func(c *Config) { c.Token = "0123456789abcdef0123"; c.E2BListen = "127.0.0.1:3000" },
		"e2b root user":          func(c *Config) { c.E2BTemplates = map[string]E2BTemplate{"base": {User: "root"}} },
		"e2b relative home":      func(c *Config) { c.E2BTemplates = map[string]E2BTemplate{"base": {Home: "home/user"}} },
		"e2b bad backend":        func(c *Config) { c.E2BTemplates = map[string]E2BTemplate{"py": {Backend: "vm"}} },
		"e2b bad name":           func(c *Config) { c.E2BTemplates = map[string]E2BTemplate{"a/b": {}} },
		"push branch without ws": func(c *Config) { c.PushBranch = "agentbox/{task}" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := Default()
			mutate(&c)
			if err := c.Validate(); !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
	c := Default()
	c.Listen, c.Token = "tcp://127.0.0.1:7000", "0123456789abcdef0123"
	c.E2BListen, c.E2BTemplates = "tcp://127.0.0.1:3000", map[string]E2BTemplate{"base": {Image: "agentbox/e2b:base", Home: "/home/user"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestStoreURL checks the store's validation, and that no problem it
// reports carries the password.
func TestStoreURL(t *testing.T) {
	for _, u := range []string{"", "postgres://agent:pw@db.internal:5432/agentbox", "postgresql://db/agentbox?sslmode=require",
		"postgres://postgres@/agentbox?host=/run/postgresql"} {
		c := Default()
		c.Store = u
		if err := c.Validate(); err != nil {
			t.Errorf("store %q: %v", u, err)
		}
	}
	for _, u := range []string{"mysql://agent:hunter2secret@db/agentbox", "postgres://agent:hunter2secret@db:5432",
		"postgres://agent:hunter2secret@db:5432/", "postgres://agent:hunter2secret@db:port/x", "/var/lib/agentbox/agentbox.db",
		"postgres://agent@db/?password=hunter2secret"} {
		c := Default()
		c.Store = u
		err := c.Validate()
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("store %q: %v, want ErrInvalid", u, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("the error names the password: %v", err)
		}
	}
	t.Setenv("AGENTBOX_STORE", "postgres://db/agentbox")
	c, err := Load("")
	if err != nil || c.Store != "postgres://db/agentbox" {
		t.Errorf("AGENTBOX_STORE: store %q, %v", c.Store, err)
	}
}

// TestDashboardPublicOrigin: the setting is read from the file, checked,
// and written as a browser sends an Origin header.
func TestDashboardPublicOrigin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("data_dir: /srv/ab\ndashboard: {public_origin: 'HTTPS://AgentBox.Example.com:443/'}\n"), 0o600)
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Dashboard.PublicOrigin != "https://agentbox.example.com" {
		t.Errorf("public_origin = %q, want https://agentbox.example.com", c.Dashboard.PublicOrigin)
	}
	for in, want := range map[string]string{
		"https://a.example:8443": "https://a.example:8443",
		"http://a.example:80":    "http://a.example",
		"https://[::1]:9000":     "https://[::1]:9000",
	} {
		if got, err := CanonicalOrigin(in); err != nil || got != want {
			t.Errorf("CanonicalOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"agentbox.example.com", "ftp://a.example", "https://", "https://u:p@a.example",
		"https://a.example/ui", "https://a.example?x=1", "https://a.example#f", "https://a.example:0", "https://a.example:99999", "javascript:alert(1)"} {
		c := Default()
		c.Dashboard.PublicOrigin = bad
		if err := c.Validate(); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "dashboard.public_origin") {
			t.Errorf("public_origin %q: %v, want it refused", bad, err)
		}
	}
}
