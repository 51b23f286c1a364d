package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
)

const (
	// shellReadLimit caps one message from the client (terminal input is
	// sent in chunks far below it).
	shellReadLimit = 1 << 20
	// shellPing is how often the server checks that an idle client is
	// still there; a client that does not answer within shellPing ends the
	// session.
	shellPing = 30 * time.Second
)

// ShellControl is a text message of a shell WebSocket.
type ShellControl = apitypes.ShellControl

// shellRequest reads a shell's query parameters: argv (repeated; default
// /bin/sh), env (repeated KEY=VALUE), workdir, rows, cols.
func shellRequest(r *http.Request) (guest.ExecRequest, error) {
	q := r.URL.Query()
	req := guest.ExecRequest{Argv: q["argv"], Env: q["env"], Dir: q.Get("workdir"), TTY: true}
	if len(req.Argv) == 0 {
		req.Argv = []string{"/bin/sh"}
	}
	if req.Argv[0] == "" {
		return req, errdefs.Invalid("shell: the first argv is empty")
	}
	if err := checkEnv(req.Env); err != nil {
		return req, err
	}
	for name, dst := range map[string]*uint16{"rows": &req.Rows, "cols": &req.Cols} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return req, errdefs.Invalid("query parameter %s=%q is not a terminal size between 1 and 65535", name, v)
			}
			*dst = uint16(n)
		}
	}
	return req, nil
}

// shell runs an interactive command on a terminal over a WebSocket: binary
// messages carry terminal bytes both ways, text messages ShellControl. The
// session is opened before the upgrade, so a bad request or an unknown
// workspace gets an ordinary JSON error reply.
func (s *Server) shell(w http.ResponseWriter, r *http.Request) {
	req, err := shellRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, errdefs.Invalid("%s needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)", r.URL.Path))
		return
	}
	sess, err := s.m.OpenSession(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	defer sess.Close()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.WarnContext(r.Context(), "shell: WebSocket upgrade failed", "exec_id", sess.ExecID, "sandbox_id", sess.SandboxID, "err", err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(shellReadLimit)
	// The session lives as long as the WebSocket. The request's context
	// is not cancelled by the hijacked connection's end, only by the
	// server's (a stopping daemon ends sessions at the end of its grace
	// period through it).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if err := writeControl(ctx, c, ShellControl{Type: "started", ExecID: sess.ExecID, SandboxID: sess.SandboxID, Replaced: sess.Replaced}); err != nil {
		return
	}
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		shellInput(ctx, c, sess)
		// The client is gone or broke the protocol: end the command,
		// which ends its output below.
		cancel()
		sess.Close()
	}()
	go keepAlive(ctx, c, cancel)

	buf := make([]byte, 32<<10)
	for {
		n, rerr := sess.Read(buf)
		if n > 0 {
			if err := c.Write(ctx, websocket.MessageBinary, buf[:n]); err != nil {
				cancel()
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	if ctx.Err() != nil {
		sess.Close() // the client is gone: kill the command
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	out, werr := sess.Wait(wctx)
	wcancel()
	if ctx.Err() == nil {
		exit := exitControl(out)
		if werr != nil {
			exit.Message = errMessage(werr)
		}
		if writeControl(ctx, c, exit) == nil {
			// Close waits (bounded) for the client's close frame, which
			// also ends shellInput's Read.
			c.Close(websocket.StatusNormalClosure, "")
		}
	}
	cancel()
	c.CloseNow()
	<-inDone
}

func exitControl(out manager.ExecOutcome) ShellControl {
	code := out.ExitCode
	return ShellControl{Type: "exit", ExecID: out.ExecID, SandboxID: out.SandboxID, ExitCode: &code, Signal: out.Signal,
		Canceled: out.Canceled, Lost: out.Lost, DurationMS: out.Duration.Milliseconds()}
}

// shellInput copies the client's messages to the session until the client
// closes or breaks the protocol.
func shellInput(ctx context.Context, c *websocket.Conn, sess *manager.Session) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			// Input typed after the command ended is dropped; the exit
			// message is on its way.
			sess.Write(b)
			continue
		}
		var ctl ShellControl
		if err := decodeStrict(b, &ctl); err != nil {
			writeControl(ctx, c, ShellControl{Type: "error", Message: "control message: " + err.Error()})
			continue
		}
		switch ctl.Type {
		case "resize":
			if err := sess.Resize(ctl.Rows, ctl.Cols); err != nil {
				writeControl(ctx, c, ShellControl{Type: "error", Message: errMessage(err)})
			}
		default:
			writeControl(ctx, c, ShellControl{Type: "error", Message: "control message: unknown type " + strconv.Quote(ctl.Type) + " (want resize)"})
		}
	}
}

// keepAlive pings the client; one that does not answer ends the session.
func keepAlive(ctx context.Context, c *websocket.Conn, cancel context.CancelFunc) {
	t := time.NewTicker(shellPing)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, shellPing)
		err := c.Ping(pctx)
		pcancel()
		if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			cancel()
			c.CloseNow()
			return
		}
	}
}

func writeControl(ctx context.Context, c *websocket.Conn, ctl ShellControl) error {
	b, err := json.Marshal(ctl)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}
