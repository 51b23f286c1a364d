package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestForwardSignature checks what a node takes as forwarded by another:
// only a request signed with the cluster key, for itself, within the
// clock skew, with the method, path, query, nonce, nodes and principal it
// was signed with, and only once.
func TestForwardSignature(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	from := &forwarder{self: "node_a", key: key}
	to := &forwarder{self: "node_b", key: key}
	now := time.Unix(1_800_000_000, 0)
	nonces := 1
	signed := func(method, uri, toNode string, at time.Time, principal string) *httptestRequest {
		r := httptest.NewRequest(method, uri, nil)
		ts := strconv.FormatInt(at.Unix(), 10)
		r.Header.Set(hdrFrom, "node_a")
		r.Header.Set(hdrTo, toNode)
		r.Header.Set(hdrTime, ts)
		r.Header.Set(hdrPrincipal, principal)
		nonce := fmt.Sprintf("%032x", nonces)
		nonces++
		r.Header.Set(hdrNonce, nonce)
		r.Header.Set(hdrSig, from.sign(method, uri, ts, nonce, "node_a", toNode, principal))
		return &httptestRequest{r}
	}
	good := signed("POST", "/v1/workspaces/ws_1/exec?x=1", "node_b", now, principalToken)
	if p, err := to.verify(good.Request, now); err != nil || p != principalToken {
		t.Fatalf("a good signature: principal %q, %v", p, err)
	}
	cases := map[string]struct {
		r    *httptestRequest
		at   time.Time
		want string
	}{
		"another node":    {signed("POST", "/v1/workspaces/ws_1/exec", "node_c", now, principalToken), now, "not this one"},
		"stale":           {signed("POST", "/v1/workspaces/ws_1/exec", "node_b", now.Add(-2*time.Minute), principalToken), now, "away from this node's clock"},
		"from the future": {signed("POST", "/v1/workspaces/ws_1/exec", "node_b", now.Add(2*time.Minute), principalToken), now, "away from this node's clock"},
		"no nonce": {func() *httptestRequest {
			r := signed("GET", "/v1/x", "node_b", now, principalToken)
			r.Header.Del(hdrNonce)
			return r
		}(), now, "valid nonce"},
		"a short nonce": {func() *httptestRequest {
			r := signed("GET", "/v1/x", "node_b", now, principalToken)
			r.Header.Set(hdrNonce, "abcd")
			return r
		}(), now, "valid nonce"},
		// The good request again, as someone who saw it on the wire
		// would send it: same signature, same nonce.
		"replayed": {good, now.Add(30 * time.Second), "replayed"},
		"no time": {func() *httptestRequest {
			r := signed("GET", "/v1/x", "node_b", now, principalToken)
			r.Header.Del(hdrTime)
			return r
		}(), now, "valid time"},
	}
	// A signed request changed on the way: method, path, query, principal.
	for name, change := range map[string]func(r *httptestRequest){
		"method":    func(r *httptestRequest) { r.Method = "DELETE" },
		"path":      func(r *httptestRequest) { r.URL.Path = "/v1/workspaces/ws_2/exec" },
		"query":     func(r *httptestRequest) { r.URL.RawQuery = "x=2" },
		"principal": func(r *httptestRequest) { r.Header.Set(hdrPrincipal, principalLocal) },
		"other key": func(r *httptestRequest) {
			other := &forwarder{key: []byte("another key, as long as the first")}
			r.Header.Set(hdrSig, other.sign(r.Method, r.URL.RequestURI(), r.Header.Get(hdrTime), r.Header.Get(hdrNonce), "node_a", "node_b", principalToken))
		},
		"nonce": func(r *httptestRequest) { r.Header.Set(hdrNonce, strings.Repeat("ab", nonceBytes)) },
	} {
		r := signed("POST", "/v1/workspaces/ws_1/exec?x=1", "node_b", now, principalToken)
		change(r)
		cases["changed "+name] = struct {
			r    *httptestRequest
			at   time.Time
			want string
		}{r, now, "wrong signature"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := to.verify(c.r.Request, c.at); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("verify = %v, want an error saying %q", err, c.want)
			}
		})
	}
	// A daemon without a key takes none.
	var none *forwarder
	if _, err := none.verify(good.Request, now); err == nil {
		t.Errorf("a daemon without the key took a forwarded request")
	}
}

// httptestRequest lets the cases change a request's fields in place.
type httptestRequest struct{ *http.Request }

// TestForwardNoncesExpire: the nonces a node keeps against replays are
// dropped once their requests would be refused by their time anyway, so
// the set stays as large as one clock window's traffic.
func TestForwardNoncesExpire(t *testing.T) {
	f := &forwarder{self: "node_b"}
	start := time.Unix(1_800_000_000, 0)
	for i := range 5000 {
		now := start.Add(time.Duration(i) * 100 * time.Millisecond)
		if !f.firstSight(fmt.Sprint(i), now.Add(forwardSkew), now) {
			t.Fatalf("nonce %d: seen before", i)
		}
	}
	// 5000 requests over 500 s, each kept for 60 s: about 600 are live.
	if n := len(f.seen); n > 2*1024+600 {
		t.Errorf("%d nonces kept after 500 s of 10 requests a second", n)
	}
	if f.firstSight("4999", start.Add(500*time.Second), start.Add(500*time.Second)) {
		t.Errorf("a nonce still in its window was taken twice")
	}
}
