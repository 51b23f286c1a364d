package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
)

// E2B sandbox states as the control API shows them.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// record is one E2B sandbox: the agentbox workspace it is (its ID is the
// workspace's, so `agentbox ws diff ID` shows its changes) and what E2B
// says of it that agentbox's own records do not hold. Records live in
// DATA/e2b/sandboxes/<id>.json (0600: the envd token is in it), so that a
// restarted daemon still answers for, and times out, the sandboxes it
// handed out; the processes in them are gone with the daemon, as every
// background process is.
type record struct {
	ID         string            `json:"id"`
	TemplateID string            `json:"template_id"`
	Alias      string            `json:"alias,omitempty"`
	Metadata   map[string]string `json:"metadata"`
	// EnvdToken is the access token envd calls must carry
	// (X-Access-Token).
	EnvdToken string `json:"envd_token"`
	// SpecJSON is the agentbox sandbox spec (sandbox.Spec), kept to start
	// the sandbox again on resume.
	SpecJSON      json.RawMessage `json:"spec"`
	AllowInternet bool            `json:"allow_internet"`
	// User and Home are the template's account and home (see
	// config.E2BTemplate).
	User string `json:"user"`
	Home string `json:"home"`
	// CPUs and MemoryMB are the sandbox's limits as getInfo shows them.
	CPUs     int `json:"cpus"`
	MemoryMB int `json:"memory_mb"`
	// KeepWorkspace says kill leaves the workspace (a repo workspace: its
	// changes are a result); a scratch workspace goes with the sandbox.
	KeepWorkspace bool      `json:"keep_workspace"`
	AutoPause     bool      `json:"auto_pause,omitempty"`
	State         string    `json:"state"`
	StartedAt     time.Time `json:"started_at"`
	EndAt         time.Time `json:"end_at"`
}

// registry holds the records, on disk and in memory, and their timers.
type registry struct {
	dir string
	// changing serializes update and remove, so that a change made from
	// a copy never undoes another (a timeout set while a pause runs) or
	// brings back a removed record.
	changing sync.Mutex

	mu     sync.Mutex
	recs   map[string]*record
	timers map[string]*time.Timer
	// expire is called (in its own goroutine) when a sandbox's time is up.
	expire func(id string)
}

// newRegistry loads the records in dir. Their timers start with start.
func newRegistry(dir string) (*registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	r := &registry{dir: dir, recs: map[string]*record{}, timers: map[string]*time.Timer{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil || rec.ID+".json" != name {
			// A half-written file cannot exist (save renames into place);
			// anything else here is not ours to guess at.
			continue
		}
		r.recs[rec.ID] = &rec
	}
	return r, nil
}

// start arms every running sandbox's timer, calling expire at its end (at
// once for one whose end passed while the daemon was down).
func (r *registry) start(expire func(string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire = expire
	for _, rec := range r.recs {
		r.armLocked(rec)
	}
}

// newToken is a fresh envd access token.
func newToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r *registry) path(id string) string { return filepath.Join(r.dir, id+".json") }

// save writes rec whole: to a temporary file, then renamed into place.
func (r *registry) save(rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(r.dir, "."+rec.ID+".tmp-")
	if err != nil {
		return fmt.Errorf("saving e2b sandbox %s: %w", rec.ID, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("saving e2b sandbox %s: %w", rec.ID, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("saving e2b sandbox %s: %w", rec.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), r.path(rec.ID)); err != nil {
		return fmt.Errorf("saving e2b sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// get returns a copy of the record of id.
func (r *registry) get(id string) (record, error) {
	if !ids.HasPrefix(id, "ws") {
		return record{}, errdefs.NotFound("sandbox", fmt.Sprintf("%q", id))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.recs[id]
	if !ok {
		return record{}, errdefs.NotFound("sandbox", id)
	}
	return *rec, nil
}

// put stores rec (new or changed) and re-arms its timer.
func (r *registry) put(rec record) error {
	if err := r.save(&rec); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs[rec.ID] = &rec
	r.armLocked(&rec)
	return nil
}

// update changes the record of id under the lock with fn and saves it;
// fn's error leaves everything as it was.
func (r *registry) update(id string, fn func(*record) error) (record, error) {
	r.changing.Lock()
	defer r.changing.Unlock()
	r.mu.Lock()
	cur, ok := r.recs[id]
	if !ok {
		r.mu.Unlock()
		return record{}, errdefs.NotFound("sandbox", id)
	}
	next := *cur
	r.mu.Unlock()
	if err := fn(&next); err != nil {
		return record{}, err
	}
	if err := r.put(next); err != nil {
		return record{}, err
	}
	return next, nil
}

// remove forgets id.
func (r *registry) remove(id string) error {
	r.changing.Lock()
	defer r.changing.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.timers[id]; t != nil {
		t.Stop()
		delete(r.timers, id)
	}
	delete(r.recs, id)
	if err := os.Remove(r.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing e2b sandbox %s: %w", id, err)
	}
	return nil
}

// list returns copies of every record, oldest first.
func (r *registry) list() []record {
	r.mu.Lock()
	out := make([]record, 0, len(r.recs))
	for _, rec := range r.recs {
		out = append(out, *rec)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// armLocked sets the timer of a running sandbox to its end; a paused one
// has none (E2B keeps paused sandboxes until they are killed).
func (r *registry) armLocked(rec *record) {
	if t := r.timers[rec.ID]; t != nil {
		t.Stop()
		delete(r.timers, rec.ID)
	}
	if rec.State != stateRunning || r.expire == nil {
		return
	}
	id := rec.ID
	r.timers[id] = time.AfterFunc(max(time.Until(rec.EndAt), 0), func() { r.expire(id) })
}

// close stops every timer.
func (r *registry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, t := range r.timers {
		t.Stop()
		delete(r.timers, id)
	}
}
