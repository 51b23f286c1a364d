package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestGCSettings(t *testing.T) {
	c := Default()
	if c.DataBudget != 0 || c.WorkspaceRetention.Duration != 0 {
		t.Errorf("collection is on by default: budget %d, retention %s", c.DataBudget, c.WorkspaceRetention)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("data_budget: 50GiB\nworkspace_retention: 72h\ngc_interval: 10m\n"), 0o600)
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataBudget != 50<<30 || c.WorkspaceRetention.Duration != 72*time.Hour || c.GCInterval.Duration != 10*time.Minute {
		t.Errorf("got budget %d, retention %s, interval %s", c.DataBudget, c.WorkspaceRetention, c.GCInterval)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	c.GCInterval.Duration = 0
	if err := c.Validate(); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a budget without an interval: %v", err)
	}
	os.WriteFile(file, []byte("data_budget: lots\n"), 0o600)
	if _, err := Load(file); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("data_budget: lots: %v", err)
	}
}
