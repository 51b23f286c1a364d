"""The client of `agentbox bench egress`.

The very same file runs inside a sandbox, through the egress proxy, and on
the host, straight to the upstream, so that both sides of the comparison
run the same code. It times only its own requests (process start and
imports do not count) and prints one JSON line:

    {"elapsed_ns": ..., "requests": ..., "bytes": ..., "python": "3.11.2"}

Modes:
  download  one GET of PATH, the body read in 1 MiB chunks and discarded
  http      N sequential GETs of PATH, each on a new connection
  https     N sequential GETs of PATH over TLS (certificate not verified),
            each on a new connection; with --proxy, through CONNECT

With --proxy HOST:PORT, plain HTTP requests go to the proxy in absolute
form and TLS goes through a CONNECT tunnel (set_tunnel); without it, the
client connects to --target itself. The Host header is always --target.
Any status but 200 or a body of the wrong length is an error (exit 1).
"""

import argparse
import http.client
import json
import platform
import ssl
import sys
import time

CHUNK = 1 << 20


def split(hostport):
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def connect(mode, target, proxy, path, ctx):
    host, port = split(target)
    if proxy:
        phost, pport = split(proxy)
    if mode == "https":
        if proxy:
            conn = http.client.HTTPSConnection(phost, pport, timeout=120, context=ctx)
            conn.set_tunnel(host, port)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=120, context=ctx)
        return conn, path
    if proxy:
        return http.client.HTTPConnection(phost, pport, timeout=120), "http://" + target + path
    return http.client.HTTPConnection(host, port, timeout=120), path


def fetch(mode, target, proxy, path, ctx, buf):
    conn, url = connect(mode, target, proxy, path, ctx)
    try:
        conn.request("GET", url, headers={"Host": target})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError("GET %s: status %d %s" % (url, resp.status, resp.read(200)))
        got = 0
        view = memoryview(buf)
        while True:
            n = resp.readinto(view)
            if not n:
                break
            got += n
        return got
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["download", "http", "https"])
    ap.add_argument("--target", required=True, help="HOST:PORT of the upstream")
    ap.add_argument("--path", required=True)
    ap.add_argument("--proxy", default="", help="HOST:PORT of the HTTP proxy")
    ap.add_argument("-n", type=int, default=1, help="requests")
    ap.add_argument("--expect", type=int, required=True, help="body bytes per request")
    a = ap.parse_args()
    if a.mode == "download":
        a.n = 1
    ctx = ssl._create_unverified_context()
    buf = bytearray(CHUNK)
    total = 0
    start = time.perf_counter_ns()
    for _ in range(a.n):
        got = fetch("https" if a.mode == "https" else "http", a.target, a.proxy, a.path, ctx, buf)
        if got != a.expect:
            raise RuntimeError("GET %s: %d bytes, want %d" % (a.path, got, a.expect))
        total += got
    elapsed = time.perf_counter_ns() - start
    json.dump({"elapsed_ns": elapsed, "requests": a.n, "bytes": total, "python": platform.python_version()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line on stderr, not a traceback
        sys.stderr.write("egress client: %s: %s\n" % (type(e).__name__, e))
        sys.exit(1)
