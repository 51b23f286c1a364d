package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Ports: /v1/workspaces/{id}/ports publishes a port of the workspace's
// running sandbox on the host's loopback; /v1/sandboxes/{id}/ports/{port}/
// PATH forwards an HTTP request (WebSocket upgrades included) to the port
// inside the sandbox through its guest, published or not, under the API's
// own authentication.

func (s *Server) publishPort(w http.ResponseWriter, r *http.Request) {
	var req apitypes.PortRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.m.PublishPort(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	ps, err := s.m.ListPorts(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.PortList{Ports: ps})
}

func (s *Server) unpublishPort(w http.ResponseWriter, r *http.Request) {
	port, err := portParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.m.UnpublishPort(r.Context(), r.PathValue("id"), port); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.PortRemoved{Port: port, Removed: true})
}

func portParam(r *http.Request) (int, error) {
	v := r.PathValue("port")
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 {
		return 0, errdefs.Invalid("port %q is not a number between 1 and 65535", v)
	}
	return port, nil
}

// forwardPort relays one HTTP request to a port of a running sandbox. The
// request goes as it came, but for its path (what follows the port) and
// its Authorization header, which is the daemon's token and never reaches
// the sandbox.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := portParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// The rest of the path as the client escaped it.
	marker := "/ports/" + r.PathValue("port") + "/"
	rest := r.URL.EscapedPath()
	if i := strings.Index(rest, marker); i >= 0 {
		rest = rest[i+len(marker):]
	} else {
		rest = r.PathValue("path")
	}
	host := "127.0.0.1:" + strconv.Itoa(port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = host
			pr.Out.Host = host
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+rest, ""
			if p, err := url.PathUnescape(rest); err == nil {
				pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+p, "/"+rest
			}
			pr.Out.Header.Del("Authorization")
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return s.m.DialPort(ctx, id, port)
			},
			DisableKeepAlives: true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errdefs.Code(err) == "internal" {
				err = fmt.Errorf("forwarding to port %d of sandbox %s: %v: %w", port, id, err, errdefs.ErrUnavailable)
			}
			writeError(w, err)
		},
	}
	rp.ServeHTTP(w, r)
}
