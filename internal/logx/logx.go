// Package logx carries the ids of the objects an operation is about
// (request, workspace, sandbox, exec) in its context, and adds them to
// every log record logged with that context, so that each line about one
// object names it without every call site repeating the ids.
//
// An HTTP request starts a Scope; whatever the request learns on its way
// down (the workspace a path names, the sandbox and exec a command ran in)
// is noted with With, which returns a context for the callee and also
// reports the ids to the request's Scope, so that the request's own log
// line names them once it ends.
package logx

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// The log keys of object ids, constant across the daemon.
const (
	KeyRequest   = "request_id"
	KeyRepo      = "repo_id"
	KeyWorkspace = "workspace_id"
	KeySandbox   = "sandbox_id"
	KeyExec      = "exec_id"
)

type ctxKey struct{}

// ids is what a context carries: its own attributes (immutable) and the
// scope of the request it belongs to, if any.
type ids struct {
	attrs []slog.Attr
	scope *Scope
}

// Scope collects the ids an operation learned, for its final log line.
type Scope struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

// NewScope returns ctx carrying a new scope that starts with attrs (a
// request id, say), and the scope.
func NewScope(ctx context.Context, attrs ...slog.Attr) (context.Context, *Scope) {
	s := &Scope{attrs: slices.Clone(attrs)}
	return context.WithValue(ctx, ctxKey{}, &ids{attrs: slices.Clone(attrs), scope: s}), s
}

// Attrs returns what the scope collected, first value per key.
func (s *Scope) Attrs() []slog.Attr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attrs)
}

func (s *Scope) note(attrs []slog.Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range attrs {
		if !hasKey(s.attrs, a.Key) {
			s.attrs = append(s.attrs, a)
		}
	}
}

// With returns ctx carrying the ids kv (key, value pairs of strings; empty
// values are skipped) on top of those it carries, a later value replacing
// an earlier one of the same key. The ids also reach the scope of ctx, if
// any, unless it has those keys already.
func With(ctx context.Context, kv ...string) context.Context {
	var add []slog.Attr
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			add = append(add, slog.String(kv[i], kv[i+1]))
		}
	}
	if len(add) == 0 {
		return ctx
	}
	parent, _ := ctx.Value(ctxKey{}).(*ids)
	next := &ids{}
	if parent != nil {
		next.scope = parent.scope
		for _, a := range parent.attrs {
			if !hasKey(add, a.Key) {
				next.attrs = append(next.attrs, a)
			}
		}
	}
	next.attrs = append(next.attrs, add...)
	if next.scope != nil {
		next.scope.note(add)
	}
	return context.WithValue(ctx, ctxKey{}, next)
}

// Attrs returns the ids ctx carries.
func Attrs(ctx context.Context) []slog.Attr {
	if c, ok := ctx.Value(ctxKey{}).(*ids); ok {
		return slices.Clone(c.attrs)
	}
	return nil
}

// Get returns the value of id key that ctx carries, or "".
func Get(ctx context.Context, key string) string {
	if c, ok := ctx.Value(ctxKey{}).(*ids); ok {
		for _, a := range c.attrs {
			if a.Key == key {
				return a.Value.String()
			}
		}
	}
	return ""
}

func hasKey(attrs []slog.Attr, key string) bool {
	for _, a := range attrs {
		if a.Key == key {
			return true
		}
	}
	return false
}

// Handler adds the ids of a record's context to the record, except those
// the record (or the logger's With) already has, so that no key appears
// twice in a JSON line.
type Handler struct {
	next slog.Handler
	// have are the keys the logger's With attributes set.
	have []string
}

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle adds the context's ids and passes r on.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if extra := Attrs(ctx); len(extra) > 0 {
			present := slices.Clone(h.have)
			r.Attrs(func(a slog.Attr) bool {
				present = append(present, a.Key)
				return true
			})
			r = r.Clone()
			for _, a := range extra {
				if !slices.Contains(present, a.Key) {
					r.AddAttrs(a)
				}
			}
		}
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs remembers the keys set, so that Handle does not repeat them.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	have := slices.Clone(h.have)
	for _, a := range attrs {
		have = append(have, a.Key)
	}
	return &Handler{next: h.next.WithAttrs(attrs), have: have}
}

// WithGroup nests what follows; the ids stay at the top level only as far
// as the wrapped handler puts them (they are added to the record).
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), have: h.have}
}
