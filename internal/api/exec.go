package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
)

const (
	// maxStreamLine caps one line of a streamed exec request (the request
	// itself or one stdin chunk).
	maxStreamLine = 1 << 20
	// ndjsonType is the media type of NDJSON bodies, both ways.
	ndjsonType = "application/x-ndjson"
	// sseType selects Server-Sent Events output.
	sseType = "text/event-stream"
)

// ExecRequest is a command to run. Output streams back as NDJSON lines
// {"stream":"stdout"|"stderr","data":"..."} (or "data_b64" for bytes that
// are not UTF-8), then one {"result": {...}} line; or, with "Accept:
// text/event-stream", as stdout, stderr and result events; or, with
// "Accept: application/json", in one apitypes.ExecOutput document once
// the command has ended (a buffered exec).
//
// Sent as application/json, the request is one document and Stdin its
// whole input. Sent as application/x-ndjson, it is the body's first line and
// the input streams in the lines after it (StdinLine) while the output
// streams back: the connection is full duplex.
type ExecRequest = apitypes.ExecRequest

// StdinLine is one line of a streamed exec request after the first: a
// chunk of input as text or as base64, or the end of the input. A body
// that ends also ends the input.
type StdinLine = apitypes.StdinLine

// ExecLine is one line of an exec's NDJSON stream.
type ExecLine = apitypes.ExecLine

// ExecResult is the last line of an exec stream.
type ExecResult = apitypes.ExecResult

// execStream writes an exec's output as NDJSON lines or SSE events. Its
// methods are safe for concurrent use; the first write error (the client
// went away) cancels the exec.
type execStream struct {
	mu     sync.Mutex
	w      io.Writer
	flush  func()
	sse    bool
	failed bool
	cancel context.CancelFunc
}

func newExecStream(w http.ResponseWriter, sse bool, cancel context.CancelFunc) *execStream {
	if sse {
		w.Header().Set("Content-Type", sseType)
		w.Header().Set("Cache-Control", "no-cache")
	} else {
		w.Header().Set("Content-Type", ndjsonType)
	}
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	es := &execStream{w: w, sse: sse, cancel: cancel, flush: func() {}}
	if flusher != nil {
		es.flush = flusher.Flush
	}
	return es
}

// send writes one event: NDJSON line ndjson, or SSE event name with data.
func (es *execStream) send(event string, ndjson ExecLine, data any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if es.sse {
		buf.WriteString("event: " + event + "\ndata: ")
		enc.Encode(data) // one line: JSON escapes every newline
		buf.WriteString("\n")
	} else {
		enc.Encode(ndjson)
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.failed {
		return errClientGone
	}
	if _, err := es.w.Write(buf.Bytes()); err != nil {
		es.failed = true
		es.cancel()
		return errClientGone
	}
	es.flush()
	return nil
}

var errClientGone = errors.New("the client stopped reading the exec stream")

func (es *execStream) output(stream string, b []byte) error {
	var d apitypes.ExecChunk
	if utf8.Valid(b) {
		d.Data = string(b)
	} else {
		d.DataB64 = base64.StdEncoding.EncodeToString(b)
	}
	return es.send(stream, ExecLine{Stream: stream, Data: d.Data, DataB64: d.DataB64}, d)
}

func (es *execStream) result(r ExecResult) { es.send("result", ExecLine{Result: &r}, r) }

func (es *execStream) fail(err error) {
	e := errorDetail(err)
	es.send("error", ExecLine{Error: e}, e)
}

// streamWriter is one output stream of an exec.
type streamWriter struct {
	es     *execStream
	stream string
}

func (sw streamWriter) Write(b []byte) (int, error) {
	if err := sw.es.output(sw.stream, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func mediaType(h string) string {
	t, _, err := mime.ParseMediaType(h)
	if err != nil {
		return ""
	}
	return t
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	streamed := mediaType(r.Header.Get("Content-Type")) == ndjsonType
	var body *bufio.Reader
	if streamed {
		body = bufio.NewReaderSize(r.Body, 64<<10)
		line, err := readLine(body, maxStreamLine)
		if err == nil {
			err = decodeStrict(line, &req)
		}
		if err != nil {
			writeError(w, errdefs.Invalid("exec request (first line of the stream): %v", err))
			return
		}
		if req.Stdin != "" {
			writeError(w, errdefs.Invalid("exec request: a streamed request sends its input as stdin lines, not in the stdin field"))
			return
		}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, 17<<20)
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, errdefs.Invalid("exec request: %v", err))
			return
		}
	}
	greq, err := manager.Command(req)
	if err != nil {
		writeError(w, err)
		return
	}
	// An unknown target is an error reply, not a stream that ends in one.
	// The command then goes to the workspace found (a sandbox's commands
	// run in its workspace's sandbox anyway), without finding it again.
	wsID, err := s.m.ExecTarget(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	buffered := acceptsJSON(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var stdin io.Reader = strings.NewReader(req.Stdin)
	var in *stdinPump
	if streamed {
		rc := http.NewResponseController(w)
		if err := rc.EnableFullDuplex(); err != nil {
			writeError(w, fmt.Errorf("streamed exec over this connection: %v: %w", err, errdefs.ErrUnavailable))
			return
		}
		in = startStdinPump(body, cancel)
		stdin = in.pr
		defer in.stop(rc)
	}
	if buffered {
		out, err := s.m.ExecBuffered(ctx, wsID, req, stdin)
		if in != nil {
			if perr := in.err(); perr != nil {
				err = perr // the cause of the cancellation
			}
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	es := newExecStream(w, strings.Contains(r.Header.Get("Accept"), sseType), cancel)
	out, err := s.m.Exec(ctx, wsID, greq, stdin, streamWriter{es, "stdout"}, streamWriter{es, "stderr"})
	if in != nil {
		if perr := in.err(); perr != nil {
			err = perr // the cause of the cancellation
		}
	}
	if err != nil {
		es.fail(err)
		return
	}
	es.result(out.Result())
}

// acceptsJSON says the client asked for one JSON document (Accept:
// application/json) rather than a stream.
func acceptsJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mediaType(strings.TrimSpace(part)) == "application/json" {
			return true
		}
	}
	return false
}

func checkEnv(env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return errdefs.Invalid("env entry %q is not KEY=VALUE", kv)
		}
	}
	return nil
}

// decodeStrict decodes one JSON document, refusing unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

var errLineTooLong = fmt.Errorf("line over %d bytes", maxStreamLine)

// readLine reads one newline-terminated line of at most max bytes; the
// last line may lack its newline. io.EOF means there is no line.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// stdinPump turns the StdinLines of a streamed request body into the
// command's input.
//
// Its goroutine owns the body for its whole life: nothing else reads it
// once the pump started, and the pump reads it to its end (or to an
// error) before it is done, whether the input ended with a stdin_eof
// line, a bad line or a command that stopped reading. The handler waits
// for the pump before it returns. A full-duplex handler must not leave
// the end of the body to net/http: the server would read it in
// finishRequest, after it stopped its background read of the
// connection, and start a new one on hitting the end, which then races
// the read of the next request on a kept-alive connection and panics
// with "invalid concurrent Body.Read call" (golang/go#68560).
type stdinPump struct {
	pr   *io.PipeReader
	done chan struct{}

	mu      sync.Mutex
	ended   bool
	protErr error
}

var errExecEnded = errors.New("the command ended")

func startStdinPump(body *bufio.Reader, cancel context.CancelFunc) *stdinPump {
	pr, pw := io.Pipe()
	p := &stdinPump{pr: pr, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		err := p.copy(body, pw)
		pw.CloseWithError(err) // nil: the command sees EOF
		if err != nil && !errors.Is(err, errExecEnded) {
			p.failed(err, cancel)
		}
		// Take in and drop the rest of the body: what follows a
		// stdin_eof or bad line, or, once the command stopped
		// reading, the upload of a client that still sends. Cutting
		// the upload would make the client's HTTP stack drop the
		// connection, result and all, before the client has read it;
		// a client stops once it has the result, and stop bounds the
		// wait.
		io.Copy(io.Discard, body)
	}()
	return p
}

// failed handles a copy that ended in err, a bad line or a body that
// broke off (the client went away): the command's input is unknown, so
// the command is killed, unless it ended first.
func (p *stdinPump) failed(err error, cancel context.CancelFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return // the command ended first: nothing more to say
	}
	if errdefs.Code(err) == "invalid" {
		p.protErr = err
	}
	cancel()
}

func (p *stdinPump) copy(body *bufio.Reader, pw *io.PipeWriter) error {
	for n := 1; ; n++ {
		line, err := readLine(body, maxStreamLine)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				return errdefs.Invalid("exec stdin line %d: %v", n, err)
			}
			return fmt.Errorf("reading exec stdin: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var sl StdinLine
		if err := decodeStrict(line, &sl); err != nil {
			return errdefs.Invalid("exec stdin line %d: %v", n, err)
		}
		data := []byte(sl.Stdin)
		if sl.StdinB64 != "" {
			if data, err = base64.StdEncoding.DecodeString(sl.StdinB64); err != nil {
				return errdefs.Invalid("exec stdin line %d: stdin_b64: %v", n, err)
			}
		}
		if len(data) > 0 {
			if _, err := pw.Write(data); err != nil {
				return err // the command ended: the pipe was closed
			}
		}
		if sl.StdinEOF {
			return nil
		}
	}
}

// err is the protocol error that killed the command, if any.
func (p *stdinPump) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	return p.protErr
}

// stdinGrace is how long, after the result went out, the server keeps
// taking in (and dropping) the request body of a client that is still
// sending, so that the client reads the result before its upload fails.
const stdinGrace = 5 * time.Second

// stop ends the pump once the command has ended and its result is
// written, and returns only when the pump is done with the body: the
// client gets stdinGrace to end its body, then a Read of the body still
// blocked on it is cut short by a read deadline in the past. The rest of
// that body is still on the connection, which therefore cannot carry
// another request: it is closed.
func (p *stdinPump) stop(rc *http.ResponseController) {
	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	p.pr.CloseWithError(errExecEnded)
	rc.Flush()
	select {
	case <-p.done:
	case <-time.After(stdinGrace):
		rc.SetReadDeadline(time.Now())
		<-p.done
		if conn, _, err := rc.Hijack(); err == nil {
			conn.Close()
		}
	}
}
