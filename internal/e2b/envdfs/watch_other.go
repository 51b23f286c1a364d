//go:build !linux

package envdfs

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Watching needs inotify and openat2; elsewhere WatchDir and CreateWatcher
// fail with unavailable.
var errNoWatch = fmt.Errorf("watching directories needs Linux (inotify, openat2): %w", errdefs.ErrUnavailable)

const (
	evCreate = 1 << iota
	evModify
	evAttrib
	evDelete
	evMovedFrom
	evMovedTo
	evIsDir
)

type hubs struct{}

func newHubs() *hubs { return &hubs{} }

func (*hubs) acquire(string) (*hub, error) { return nil, errNoWatch }

type hub struct{}

type found struct {
	rel string
	dir bool
}

func (w *watch) addTree(int, string, bool) ([]found, error) { return nil, errNoWatch }
func (w *watch) dropTree(string)                            {}
func (w *watch) close()                                     {}

func openRoot(string) (int, error) { return -1, errors.New("unsupported") }
func closeRoot(int)                {}
