package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// netProbes runs network probes, one per argument, and prints
// "KIND TARGET=RESULT" for each:
//
//	dial:HOST:PORT        a raw TCP connection, ignoring any proxy
//	udp:HOST:PORT         a UDP datagram and a wait for an answer
//	dns:NAME              a lookup with the system resolver
//	get:URL               an HTTP GET through $HTTP_PROXY (Go's client)
//	noproxy:URL           the same GET with the proxy variables ignored
//	proxy:URL             an absolute-form GET written to $HTTP_PROXY by hand
//	                      (Go's client would bypass the proxy for loopback)
//	upgrade:PROTO:URL     the same GET asking to switch to PROTO (h2c, websocket)
//	connect:HOST:PORT:SNI a CONNECT through $HTTP_PROXY, then a TLS handshake
//	                      naming SNI (the certificate is not checked)
//	https:URL             a GET through $HTTPS_PROXY with "Authorization:
//	                      Bearer $API_TOKEN", verifying against $SSL_CERT_FILE
//	https-insecure:URL    the same without verifying the certificate
//	stat:PATH             whether a path exists
//
// RESULT is "0" or an error name; get and proxy give the status code and
// the body's first line.
func netProbes(args []string) {
	for _, a := range args {
		kind, target, _ := strings.Cut(a, ":")
		var res string
		switch kind {
		case "dial":
			c, err := net.DialTimeout("tcp", target, 3*time.Second)
			if err == nil {
				c.Close()
			}
			res = errOf(err)
		case "udp":
			res = udpProbe(target)
		case "dns":
			_, err := net.LookupHost(target)
			res = errOf(err)
		case "get", "noproxy":
			res = getProbe(target, kind == "get")
		case "proxy":
			res = rawProxyGet(target, "")
		case "upgrade":
			// upgrade:PROTO:URL asks the proxy to switch protocols.
			proto, url, _ := strings.Cut(target, ":")
			res = rawProxyGet(url, "Connection: Upgrade\r\nUpgrade: "+proto+"\r\n")
		case "connect":
			res = connectProbe(target)
		case "https", "https-insecure":
			res = httpsProbe(target, kind == "https-insecure")
		case "stat":
			_, err := os.Stat(target)
			res = errOf(err)
		default:
			res = "unknown-probe"
		}
		fmt.Printf("%s %s=%s\n", kind, target, res)
	}
}

func udpProbe(target string) string {
	c, err := net.DialTimeout("udp", target, 3*time.Second)
	if err != nil {
		return errOf(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("probe")); err != nil {
		return errOf(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 64))
	return errOf(err)
}

func getProbe(url string, useProxy bool) string {
	tr := &http.Transport{DisableKeepAlives: true}
	if useProxy {
		tr.Proxy = http.ProxyFromEnvironment
	}
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return errOf(err)
	}
	defer resp.Body.Close()
	return statusAndLine(resp.StatusCode, resp.Body)
}

func statusAndLine(code int, body io.Reader) string {
	line, _ := bufio.NewReader(io.LimitReader(body, 4096)).ReadString('\n')
	return fmt.Sprintf("%d/%s", code, strings.ReplaceAll(strings.TrimSpace(line), " ", "_"))
}

// dialProxy connects to the host:port of $HTTP_PROXY, with a deadline for
// the whole exchange.
func dialProxy() (net.Conn, error) {
	p := os.Getenv("HTTP_PROXY")
	if p == "" {
		return nil, fmt.Errorf("no-proxy-variable")
	}
	c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(p, "http://"), "/"), 3*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, nil
}

func rawProxyGet(url, extra string) string {
	c, err := dialProxy()
	if err != nil {
		return errOf(err)
	}
	defer c.Close()
	host := strings.TrimPrefix(url, "http://")
	host, _, _ = strings.Cut(host, "/")
	if extra == "" {
		extra = "Connection: close\r\n"
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", url, host, extra)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return errOf(err)
	}
	defer resp.Body.Close()
	return statusAndLine(resp.StatusCode, resp.Body)
}

func connectProbe(target string) string {
	i := strings.LastIndexByte(target, ':')
	if i < 0 {
		return "bad-target"
	}
	hostPort, sni := target[:i], target[i+1:]
	c, err := dialProxy()
	if err != nil {
		return errOf(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostPort, hostPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		return errOf(err)
	}
	if resp.StatusCode != 200 {
		return fmt.Sprintf("%d", resp.StatusCode)
	}
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		return "handshake_" + errOf(err)
	}
	fmt.Fprintf(tc, "GET /tls HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostPort)
	r, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "tls_" + errOf(err)
	}
	defer r.Body.Close()
	return statusAndLine(r.StatusCode, r.Body)
}

// bufferedConn reads first what a bufio.Reader already took from Conn.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// listen serves TCP on every address given, answering each connection with
// "hello", prints "listening ADDR" for each, then waits to be killed.
func listen(addrs []string) {
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Printf("listen %s=%s\n", a, errOf(err))
			continue
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("hello\n"))
				c.Close()
			}
		}()
		fmt.Printf("listening %s\n", a)
	}
	select {}
}

func httpsProbe(url string, insecure bool) string {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return errOf(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("API_TOKEN"))
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return errOf(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Sprintf("%d/%s", resp.StatusCode, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "|"))
}
