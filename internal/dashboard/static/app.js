// agentbox dashboard. Plain JavaScript, no framework, no build step.
//
// One rule above all: whatever an agent controls (file names, branches,
// commands, output, task labels, event details) reaches the page only as
// text: through el() children and textContent, never through innerHTML or
// an attribute that runs code. The page's CSP (Trusted Types) makes any
// HTML sink throw, so a slip fails loudly instead of running.
"use strict";

(function () {
  const API = "/ui/api";
  const MAX_EVENTS = 1000;      // the events kept in memory for every page
  const MAX_OUTPUT = 200000;    // characters of live output kept per pane
  const MAX_EVENT_ROWS = 500;   // rows on the events page

  let csrf = "";
  const main = document.getElementById("main");

  // el builds an element: attrs are set with setAttribute (never an
  // event handler), children are nodes or strings (text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) throw new Error("no inline handlers");
      e.setAttribute(k, v === true ? "" : String(v));
    }
    append(e, children);
    return e;
  }
  function append(e, children) {
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    append(e, children);
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function badge(state) {
    const cls = /^[a-z_]+$/.test(state || "") ? state : "";
    return el("span", { class: "badge " + cls }, state || "?");
  }
  function bytes(n) {
    if (!n) return "0 B";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function secs(s) { return s < 1 ? (s * 1000).toFixed(0) + " ms" : s < 120 ? s.toFixed(1) + " s" : (s / 60).toFixed(1) + " min"; }
  function when(t) { try { return new Date(t).toLocaleString(); } catch (_) { return String(t); } }
  function short(id) { return String(id || "").slice(0, 12); }
  function detailOf(ev) {
    if (!ev.detail) return {};
    try { const d = JSON.parse(ev.detail); return d && typeof d === "object" ? d : {}; } catch (_) { return {}; }
  }
  // detailText shows an event's detail as key: value pairs (JSON that
  // Go wrote escapes <, > and & as \u003c...; this shows the characters).
  function detailText(ev) {
    const d = detailOf(ev);
    const keys = Object.keys(d);
    if (!keys.length) return ev.detail || "";
    return keys.map((k) => k + ": " + (typeof d[k] === "string" ? d[k] : JSON.stringify(d[k]))).join("  ");
  }
  function link(hash, text) { return el("a", { href: hash }, text); }
  function wsLink(id) { return link("#/ws/" + encodeURIComponent(id), id); }

  // ---- the API, through the dashboard's gate --------------------------
  class HTTPError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }
  async function api(path, opts) {
    opts = opts || {};
    const headers = { Accept: "application/json" };
    const init = { method: opts.method || "GET", headers, credentials: "same-origin", signal: opts.signal };
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    if (init.method !== "GET") headers["X-Agentbox-Csrf"] = csrf;
    const r = await fetch(API + path, init);
    if (r.status === 401) { showLogin(); throw new HTTPError(401, "not logged in"); }
    const text = await r.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (!r.ok) {
      const msg = body && body.error ? body.error.message : r.status + " " + r.statusText;
      throw new HTTPError(r.status, msg);
    }
    return body === null ? text : body;
  }
  async function apiText(path, signal) {
    const r = await fetch(API + path, { credentials: "same-origin", signal });
    if (r.status === 401) { showLogin(); throw new HTTPError(401, "not logged in"); }
    if (!r.ok) throw new HTTPError(r.status, r.status + " " + r.statusText);
    return r.text();
  }
  // ndjson follows a streaming NDJSON reply, calling onItem per line,
  // until it ends or signal aborts.
  async function ndjson(path, signal, onItem) {
    const r = await fetch(API + path, { credentials: "same-origin", signal, headers: { Accept: "application/x-ndjson" } });
    if (!r.ok) throw new HTTPError(r.status, r.status + " " + r.statusText);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (!line) continue; // keepalive
        try { onItem(JSON.parse(line)); } catch (e) { console.warn(e); }
      }
    }
  }
  function errorBox(err) { return el("p", { class: "error", role: "alert" }, String(err && err.message || err)); }

  // ---- live events: one stream for every page --------------------------
  const bus = {
    events: [],        // the last MAX_EVENTS, oldest first
    lastID: 0,
    listeners: new Set(),
    source: null,
    retry: null,
    on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); },
    push(ev) {
      if (ev.id <= this.lastID) return; // a reconnect replays; keep each once
      this.lastID = ev.id;
      this.events.push(ev);
      if (this.events.length > MAX_EVENTS) this.events.splice(0, this.events.length - MAX_EVENTS);
      for (const fn of this.listeners) { try { fn(ev); } catch (e) { console.warn(e); } }
    },
    // start loads the last MAX_EVENTS (the newest first, from the
    // server), then follows from the newest; a restart follows on from
    // the last event seen.
    async start() {
      this.stop();
      try {
        if (this.lastID === 0) {
          const evs = (await api("/v1/events?order=newest&limit=" + MAX_EVENTS)).events || [];
          for (const ev of evs.reverse()) this.push(ev);
        }
      } catch (e) { if (e.status === 401) return; }
      const src = new EventSource(API + "/v1/events?follow=true&after=" + this.lastID);
      this.source = src;
      const live = document.getElementById("live");
      src.addEventListener("open", () => { live.textContent = "live"; live.classList.add("on"); });
      src.addEventListener("event", (m) => { try { this.push(JSON.parse(m.data)); } catch (e) { console.warn(e); } });
      src.addEventListener("error", () => {
        live.textContent = "reconnecting"; live.classList.remove("on");
        src.close();
        if (this.source !== src) return;
        // A stream that ended because the session did is not retried.
        this.retry = setTimeout(async () => {
          try {
            const info = await (await fetch("/ui/session", { credentials: "same-origin" })).json();
            if (!info.authenticated) { showLogin(); return; }
          } catch (_) { /* the daemon is away: try again */ }
          this.start();
        }, 3000);
      });
    },
    stop() {
      if (this.source) this.source.close();
      this.source = null;
      clearTimeout(this.retry);
    },
  };
  // debounce runs fn ms after a call, once for all the calls meanwhile:
  // at most once per ms however fast events come, and never starved by a
  // steady stream of them.
  function debounce(fn, ms) {
    let t = null;
    const d = () => { if (t === null) t = setTimeout(() => { t = null; fn(); }, ms); };
    d.cancel = () => { clearTimeout(t); t = null; };
    return d;
  }

  // ---- charts: small SVG bar charts, text only -------------------------
  function barChart(points, opts) {
    opts = opts || {};
    const w = 320, h = 90, pad = 14;
    const max = Math.max(1, ...points.map((p) => p.value));
    const s = svg("svg", { class: "chart", viewBox: `0 0 ${w} ${h + pad}`, role: "img", "aria-label": opts.label || "chart" });
    const bw = points.length ? Math.min(opts.labels ? 76 : 40, (w - 4) / points.length) : w;
    points.forEach((p, i) => {
      const bh = Math.round((p.value / max) * (h - 12));
      const r = svg("rect", { class: "bar" + (p.bad ? " bad" : ""), x: 2 + i * bw, y: h - bh, width: Math.max(1, bw - 2), height: bh });
      r.appendChild(svg("title", {}, `${p.label}: ${p.value}`));
      s.appendChild(r);
      if (opts.labels && points.length <= 12) s.appendChild(svg("text", { x: 2 + i * bw, y: h + 11 }, String(p.label).slice(0, 10)));
    });
    s.appendChild(svg("text", { x: 2, y: 10 }, "max " + max));
    return s;
  }
  function meter(frac) {
    const f = Math.max(0, Math.min(1, frac || 0));
    return svg("svg", { class: "chart", viewBox: "0 0 300 12", role: "img", "aria-label": Math.round(f * 100) + "%" },
      svg("rect", { x: 0, y: 0, width: 300, height: 12, fill: "#e8eaee", rx: 6 }),
      svg("rect", { x: 0, y: 0, width: Math.round(300 * f), height: 12, fill: f > 0.9 ? "#b3261e" : "#1d5fbf", rx: 6 }));
  }
  function parseMetrics(text) {
    const out = [];
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      out.push({ name: m[1], labels, value: Number(m[4]) });
    }
    return out;
  }
  function kv(pairs) {
    const dl = el("dl", { class: "kv" });
    for (const [k, v] of pairs) dl.append(el("dt", {}, k), el("dd", {}, v));
    return dl;
  }

  // ---- pages -----------------------------------------------------------
  // Each page renders into root and returns its cleanup (streams to
  // abort, listeners to drop), run when the page is left.

  // history samples the running sandboxes each time the overview
  // reloads (on events), across visits of the page; bounded.
  const history = [];
  async function overview(root) {
    root.append(el("h1", {}, "Overview"));
    const grid = el("div", { class: "grid" });
    root.append(grid);
    const cards = {};
    for (const [k, title] of [["sandboxes", "Sandboxes by state"], ["backends", "Backends"], ["execs", "Execs per minute (last 30 min)"],
      ["failures", "Failures by kind"], ["pool", "Warm pool"], ["disk", "Disk budget"], ["history", "Running sandboxes over time"]]) {
      cards[k] = el("section", { class: "card", id: "card-" + k, "aria-label": title }, el("h2", {}, title), el("div", { class: "body" }, "loading…"));
      grid.append(cards[k]);
    }
    const body = (k) => clear(cards[k].querySelector(".body"));

    async function loadState() {
      try {
        const sbs = (await api("/v1/sandboxes")).sandboxes || [];
        const byState = {}, byBackend = {};
        for (const s of sbs) {
          byState[s.state] = (byState[s.state] || 0) + 1;
          byBackend[s.backend] = byBackend[s.backend] || { running: 0, total: 0 };
          byBackend[s.backend].total++;
          if (s.state === "running") byBackend[s.backend].running++;
        }
        const states = ["creating", "running", "stopped", "lost"].map((st) => ({ label: st, value: byState[st] || 0, bad: st === "lost" }));
        body("sandboxes").append(barChart(states, { labels: true, label: "sandboxes by state" }),
          el("p", {}, states.map((s) => `${s.label} ${s.value}`).join(" · ")));
        let metrics = [];
        try { metrics = parseMetrics(await apiText("/metrics")); } catch (_) { /* no metrics served */ }
        for (const m of metrics) if (m.labels.backend && !byBackend[m.labels.backend]) byBackend[m.labels.backend] = { running: 0, total: 0 };
        history.push({ label: new Date().toLocaleTimeString(), value: byState.running || 0 });
        if (history.length > 60) history.splice(0, history.length - 60);
        body("history").append(barChart(history, { label: "running sandboxes over time" }),
          el("p", { class: "muted" }, `${history.length} samples, one per change`));
        const bt = el("table", {}, el("tr", {}, el("th", {}, "backend"), el("th", { class: "num" }, "running"), el("th", { class: "num" }, "sandboxes")));
        for (const [b, n] of Object.entries(byBackend)) bt.append(el("tr", {}, el("td", {}, b), el("td", { class: "num" }, n.running), el("td", { class: "num" }, n.total)));
        body("backends").append(bt);
        const ready = metrics.filter((m) => m.name === "agentbox_warm_pool_ready").reduce((a, m) => a + m.value, 0);
        const claims = metrics.filter((m) => m.name === "agentbox_warm_pool_claims_total");
        const hit = claims.filter((m) => m.labels.result === "hit").reduce((a, m) => a + m.value, 0);
        const miss = claims.filter((m) => m.labels.result === "miss").reduce((a, m) => a + m.value, 0);
        body("pool").append(el("div", { class: "stat" }, hit + miss ? Math.round((100 * hit) / (hit + miss)) + "% hits" : "no claims yet"),
          meter(hit + miss ? hit / (hit + miss) : 0), el("p", {}, `${ready} ready · ${hit} hits · ${miss} misses`));
      } catch (e) { body("sandboxes").append(errorBox(e)); }
    }
    // execs holds the exec.finished events of the last 30 minutes (at
    // most MAX_EXEC_EVENTS), asked of the server once, then kept from the
    // stream: the events in memory may hold none however many ran.
    const MAX_EXEC_EVENTS = 5000;
    let execs = [];
    const recent = (ev, now) => now - new Date(ev.time).getTime() < 30 * 60000;
    async function loadExecs() {
      try {
        const evs = (await api("/v1/events?order=newest&type=exec.finished&limit=" + MAX_EXEC_EVENTS)).events || [];
        const now = Date.now();
        execs = evs.reverse().filter((ev) => recent(ev, now));
      } catch (_) { execs = bus.events.filter((ev) => ev.type === "exec.finished"); }
    }
    function drawEvents() {
      const now = Date.now();
      execs = execs.filter((ev) => recent(ev, now)).slice(-MAX_EXEC_EVENTS);
      const buckets = Array.from({ length: 30 }, (_, i) => ({ label: `-${29 - i}m`, value: 0 }));
      const failures = {};
      const seen = new Set(execs.map((ev) => ev.id));
      for (const ev of execs.concat(bus.events.filter((ev) => !seen.has(ev.id)))) {
        const age = (now - new Date(ev.time).getTime()) / 60000;
        if (ev.type === "exec.finished" && age >= 0 && age < 30) buckets[29 - Math.floor(age)].value++;
        const d = detailOf(ev);
        let kind = "";
        if (ev.type === "exec.finished" && (d.error || d.state === "timed_out" || d.oom)) kind = d.oom ? "exec oom" : d.state === "timed_out" ? "exec timeout" : "exec error";
        else if (ev.type === "exec.finished" && d.exit_code) kind = "exec exit≠0";
        else if (/failed|lost|refused|oom_killed|rolled_back/.test(ev.type)) kind = ev.type;
        if (kind) failures[kind] = (failures[kind] || 0) + 1;
      }
      const total = buckets.reduce((a, b) => a + b.value, 0);
      body("execs").append(el("div", { class: "stat" }, (total / 30).toFixed(1) + " / min"), barChart(buckets, { label: "execs per minute" }));
      const f = Object.entries(failures).map(([label, value]) => ({ label, value, bad: true }));
      body("failures").append(f.length ? barChart(f, { labels: true, label: "failures" }) : el("p", { class: "muted" }, "none in the recent events"),
        el("ul", {}, f.map((x) => el("li", {}, `${x.label}: ${x.value}`))));
    }
    async function loadDisk() {
      try {
        const r = await api("/v1/gc", { method: "POST", body: { dry_run: true } });
        const b = body("disk");
        if (!r.budget_bytes) b.append(el("p", {}, `${bytes(r.usage_bytes)} used; no budget set`));
        else b.append(el("div", { class: "stat" }, Math.round((100 * r.usage_bytes) / r.budget_bytes) + "%"), meter(r.usage_bytes / r.budget_bytes),
          el("p", {}, `${bytes(r.usage_bytes)} of ${bytes(r.budget_bytes)} (${r.method || ""})`));
      } catch (e) {
        if (e.status === 400) body("disk").append(el("p", { class: "muted" }, "no data budget configured (data_budget)"));
        else body("disk").append(errorBox(e));
      }
    }
    await Promise.all([loadState(), loadDisk(), loadExecs()]);
    drawEvents();
    const again = debounce(() => { loadState(); drawEvents(); }, 1000);
    const off = bus.on((ev) => {
      if (ev.type === "exec.finished" && !(execs.length && ev.id <= execs[execs.length - 1].id)) execs.push(ev);
      again();
    });
    const tick = setInterval(drawEvents, 60000); // the minute buckets move on
    return () => { off(); again.cancel(); clearInterval(tick); };
  }

  // lastCommands lists a workspace's last n execs from the event log,
  // asked of the server (the events in memory may all be another
  // workspace's), and again as each one ends.
  function lastCommands(wsID, n) {
    const box = el("div", { class: "last-commands" }, el("p", { class: "muted" }, "loading…"));
    const ctl = new AbortController();
    async function load() {
      try {
        const q = new URLSearchParams({ order: "newest", limit: String(n), workspace: wsID, type: "exec.finished" });
        const evs = (await api("/v1/events?" + q.toString(), { signal: ctl.signal })).events || [];
        const t = el("table", { class: "commands" }, el("tr", {}, el("th", {}, "exec"), el("th", {}, "command"), el("th", { class: "num" }, "exit"),
          el("th", { class: "num" }, "wall"), el("th", { class: "num" }, "CPU"), el("th", { class: "num" }, "memory"), el("th", {}, "at")));
        for (const ev of evs) {
          const d = detailOf(ev);
          t.append(el("tr", {}, el("td", { class: "mono" }, short(d.exec_id)), el("td", { class: "mono" }, Array.isArray(d.argv) ? d.argv.join(" ") : ""),
            el("td", { class: "num" }, d.state && d.state !== "exited" ? d.state : d.exit_code ?? ""), el("td", { class: "num" }, secs((d.wall_ms || 0) / 1000)),
            el("td", { class: "num" }, secs((d.cpu_ns || 0) / 1e9)), el("td", { class: "num" }, bytes(d.peak_mem_bytes || 0)), el("td", {}, when(ev.time))));
        }
        clear(box).append(evs.length ? el("div", { class: "table-wrap" }, t) : el("p", { class: "muted" }, "no commands yet"));
      } catch (e) { if (e.name !== "AbortError") clear(box).append(errorBox(e)); }
    }
    load();
    const again = debounce(load, 500);
    const off = bus.on((ev) => { if (ev.workspace_id === wsID && ev.type === "exec.finished") again(); });
    box.cleanup = () => { off(); again.cancel(); ctl.abort(); };
    return box;
  }

  // processPanel lists a workspace's commands whose output the daemon
  // keeps, background processes and ordinary execs alike, and follows the
  // output of the one chosen: the newest running one, until one is
  // chosen by hand or while the one followed still runs. Execs come from
  // a stream of the workspace's execs as they start and end.
  const MAX_EXEC_ROWS = 50;
  function processPanel(wsID) {
    const box = el("section", { class: "card processes", "aria-label": "Processes" }, el("h2", {}, "Commands and live output"));
    const list = el("div", {});
    const head = el("p", { class: "muted", id: "live-head" }, "");
    const out = el("pre", { class: "output", id: "live-output", "aria-live": "off", tabindex: "0" });
    box.append(list, head, out);
    const wsEnc = encodeURIComponent(wsID);
    let ctl = null, chosen = "", running = false, pinned = false;
    let procs = [];
    const execs = new Map(); // exec ID -> the exec as last seen, the last MAX_EXEC_ROWS
    const ended = (x) => (x.kind === "exec" ? x.exec : x.process);
    function showHead(x, v) {
      clear(head).append(el("span", { class: "muted" }, x.kind, " "), el("span", { class: "mono" }, (v.argv || []).join(" ")), " ", badge(v.state),
        v.state !== "running" ? ` exit ${v.exit_code}` : "");
    }
    function follow(x, byHand) {
      if (ctl) ctl.abort();
      ctl = new AbortController();
      chosen = x.id;
      running = x.state === "running";
      pinned = pinned || !!byHand;
      clear(out);
      showHead(x, x);
      let size = 0;
      const add = (cls, text) => {
        out.append(el("span", { class: cls }, text));
        size += text.length;
        while (size > MAX_OUTPUT && out.firstChild) { size -= out.firstChild.textContent.length; out.removeChild(out.firstChild); }
        out.scrollTop = out.scrollHeight;
      };
      const base = x.kind === "exec" ? `/v1/execs/${encodeURIComponent(x.id)}/output?follow=true&offset=-65536&stream=`
        : `/v1/workspaces/${wsEnc}/processes/${encodeURIComponent(x.id)}/logs?follow=true&offset=-65536&stream=`;
      const mine = ctl;
      for (const stream of ["stdout", "stderr"]) {
        ndjson(base + stream, ctl.signal, (l) => {
          if (l.data) add(stream, l.data);
          else if (l.data_b64) add(stream, atob(l.data_b64));
          const v = ended(Object.assign({ kind: x.kind }, l));
          if (v && stream === "stdout" && mine === ctl) { running = false; showHead(x, v); }
        }).catch((e) => { if (e.name !== "AbortError") add("stderr", "\n[" + e.message + "]\n"); });
      }
    }
    function rows() {
      const all = procs.map((p) => Object.assign({ kind: "process" }, p))
        .concat([...execs.values()].map((e) => Object.assign({ kind: "exec" }, e)));
      all.sort((a, b) => (a.started_at < b.started_at ? 1 : -1));
      return all;
    }
    function draw() {
      const all = rows();
      clear(list);
      if (!all.length) { list.append(el("p", { class: "muted" }, "no commands running or recently ended")); return; }
      const t = el("table", {}, el("tr", {}, el("th", {}, "kind"), el("th", {}, "id"), el("th", {}, "command"), el("th", {}, "state"), el("th", {}, "")));
      for (const x of all.slice(0, MAX_EXEC_ROWS)) {
        const attrs = { type: "button" };
        attrs[x.kind === "exec" ? "data-exec" : "data-process"] = x.id;
        const b = el("button", attrs, chosen === x.id ? "following" : "follow");
        b.addEventListener("click", () => { follow(x, true); draw(); });
        t.append(el("tr", {}, el("td", {}, x.kind), el("td", { class: "mono" }, short(x.id)), el("td", { class: "mono" }, (x.argv || []).join(" ")),
          el("td", {}, badge(x.state), x.kind === "exec" && !x.ring_bytes ? el("span", { class: "muted" }, " (output not kept)") : null), el("td", {}, b)));
      }
      list.append(el("div", { class: "table-wrap" }, t));
    }
    // maybeFollow follows x, a running command, when none is followed,
    // or the one followed has ended and was not chosen by hand.
    function maybeFollow(x) {
      if (!chosen || (!running && !pinned && x.id !== chosen)) follow(x);
    }
    async function load() {
      try {
        procs = (await api(`/v1/workspaces/${wsEnc}/processes`)).processes || [];
        const r = procs.find((p) => p.state === "running");
        if (r) maybeFollow(Object.assign({ kind: "process" }, r));
        else if (!chosen && procs.length) follow(Object.assign({ kind: "process" }, procs[0]));
        draw();
      } catch (e) { clear(list).append(errorBox(e)); }
    }
    const redraw = debounce(draw, 200);
    const streamCtl = new AbortController();
    ndjson(`/v1/workspaces/${wsEnc}/execs?follow=true`, streamCtl.signal, (e) => {
      execs.delete(e.id);
      execs.set(e.id, e);
      while (execs.size > MAX_EXEC_ROWS) execs.delete(execs.keys().next().value);
      if (e.state === "running") maybeFollow(Object.assign({ kind: "exec" }, e));
      redraw();
    }).catch((e) => { if (e.name !== "AbortError") list.append(errorBox(e)); });
    load();
    const again = debounce(load, 300);
    const off = bus.on((ev) => { if (ev.workspace_id === wsID && /^(process|exec)\./.test(ev.type)) again(); });
    box.cleanup = () => { off(); again.cancel(); redraw.cancel(); streamCtl.abort(); if (ctl) ctl.abort(); };
    return box;
  }

  async function tasks(root) {
    root.append(el("h1", {}, "Tasks and workspaces"));
    const split = el("div", { class: "split" });
    const treeBox = el("section", { class: "card", "aria-label": "Workspaces" });
    const detail = el("div", { id: "task-detail" }, el("p", { class: "muted" }, "Choose a workspace to see its commands and live output."));
    split.append(treeBox, detail);
    root.append(split);
    let selected = "", panel = null, commands = null;
    function select(ws) {
      if (panel) panel.cleanup();
      if (commands) commands.cleanup();
      selected = ws.id;
      clear(detail);
      panel = processPanel(ws.id);
      commands = lastCommands(ws.id, 10);
      detail.append(el("section", { class: "card" }, el("h2", {}, "Workspace ", wsLink(ws.id)),
        kv([["task", ws.task || "(none)"], ["branch", ws.branch], ["state", badge(ws.state)], ["base", short(ws.base_commit)]]),
        el("h3", {}, "Last commands"), commands), panel);
    }
    async function load() {
      try {
        const [wss, sbs] = await Promise.all([api("/v1/workspaces"), api("/v1/sandboxes")]);
        const sbOf = {};
        for (const s of sbs.sandboxes || []) if (!sbOf[s.workspace_id] || s.state === "running") sbOf[s.workspace_id] = s;
        const all = wss.workspaces || [];
        const ids = new Set(all.map((w) => w.id));
        const kids = {};
        for (const w of all) { const p = w.parent_id && ids.has(w.parent_id) ? w.parent_id : ""; (kids[p] = kids[p] || []).push(w); }
        const byTask = {};
        for (const w of kids[""] || []) (byTask[w.task || ""] = byTask[w.task || ""] || []).push(w);
        const node = (w) => {
          const sb = sbOf[w.id];
          const b = el("button", { type: "button", class: "pick", "data-ws": w.id, "aria-pressed": selected === w.id ? "true" : "false" }, "details");
          b.addEventListener("click", () => { select(w); load(); });
          const li = el("li", {}, el("span", { class: "node" }, wsLink(w.id), el("span", { class: "mono branch" }, w.branch), badge(w.state),
            w.dirty ? el("span", { class: "badge" }, "changed") : null,
            sb ? el("span", { class: "muted" }, "sandbox ", el("span", { class: "mono" }, short(sb.id)), " ", badge(sb.state)) : el("span", { class: "muted" }, "no sandbox"), b));
          if (kids[w.id]) li.append(el("ul", {}, kids[w.id].map(node)));
          return li;
        };
        clear(treeBox).append(el("h2", {}, `${all.length} workspaces`));
        if (!all.length) treeBox.append(el("p", { class: "muted" }, "no workspaces"));
        for (const [task, ws] of Object.entries(byTask)) {
          treeBox.append(el("h3", { class: "task" }, task || "(no task)"), el("ul", { class: "tree" }, ws.map(node)));
        }
      } catch (e) { clear(treeBox).append(errorBox(e)); }
    }
    await load();
    const again = debounce(load, 1000);
    const off = bus.on((ev) => { if (/^(workspace|sandbox)\./.test(ev.type)) again(); });
    return () => { off(); again.cancel(); if (panel) panel.cleanup(); if (commands) commands.cleanup(); };
  }

  // highlight splits a line of code into spans of a few token classes:
  // every piece is a text node, so a "token" is never markup.
  const KW = new Set(("break case catch class const continue def default defer do else elif enum export extends false fn for from func function go if " +
    "import in interface let match mod nil none null package pub return self static struct switch this throw true try type use var while with yield").split(" "));
  function highlight(line) {
    const frag = document.createDocumentFragment();
    const re = /(\/\/.*$|#.*$|"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|`[^`]*`?|\b\d[\d_.xa-fA-F]*\b|\b[A-Za-z_][A-Za-z0-9_]*\b)/g;
    let last = 0, m;
    while ((m = re.exec(line))) {
      if (m.index > last) frag.append(line.slice(last, m.index));
      const t = m[0];
      let cls = "";
      if (t.startsWith("//") || t.startsWith("#")) cls = "tok-com";
      else if (/^["'`]/.test(t)) cls = "tok-str";
      else if (/^\d/.test(t)) cls = "tok-num";
      else if (KW.has(t)) cls = "tok-kw";
      frag.append(cls ? el("span", { class: cls }, t) : t);
      last = m.index + t.length;
    }
    if (last < line.length) frag.append(line.slice(last));
    return frag;
  }
  function renderDiff(text) {
    const box = el("div", { class: "diff mono", id: "diff", tabindex: "0", role: "region", "aria-label": "diff" });
    if (!text) { box.append(el("p", { class: "muted" }, "no changes")); return box; }
    const lines = text.split("\n");
    const n = Math.min(lines.length, 20000);
    for (let i = 0; i < n; i++) {
      const l = lines[i];
      let cls = "ln";
      if (/^(diff --git|index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode|Binary)/.test(l)) cls += " file";
      else if (l.startsWith("@@")) cls += " hunk";
      else if (l.startsWith("+")) cls += " add";
      else if (l.startsWith("-")) cls += " del";
      const span = el("span", { class: cls });
      if (/ (add|del)$/.test(cls) || cls === "ln") { span.append(l.slice(0, 1)); span.append(highlight(l.slice(1))); } else span.append(l);
      box.append(span);
    }
    if (lines.length > n) box.append(el("p", { class: "muted" }, `${lines.length - n} more lines not shown`));
    return box;
  }
  function renderFindings(rep) {
    const box = el("div", { class: "findings-box" });
    box.append(el("p", {}, rep.ok ? badge("ok") : badge("bad"), rep.ok ? " nothing found" : " findings"));
    const ul = el("ul", { class: "findings" });
    for (const f of rep.outside_writable || []) ul.append(el("li", {}, "outside the writable paths: ", el("span", { class: "mono" }, f.path), ` (${f.status})`));
    for (const f of rep.secrets || []) ul.append(el("li", {}, `looks like a secret (${f.kind}): `, el("span", { class: "mono" }, `${f.path}:${f.line}:${f.column}`)));
    if (rep.truncated) ul.append(el("li", {}, "the check stopped early (truncated)"));
    box.append(ul);
    return box;
  }

  async function workspacePage(root, id) {
    const enc = encodeURIComponent(id);
    root.append(el("h1", {}, "Workspace ", el("span", { class: "mono" }, id)));
    let ws;
    try { ws = await api(`/v1/workspaces/${enc}`); } catch (e) { root.append(errorBox(e)); return () => {}; }
    root.append(el("section", { class: "card" }, kv([["task", ws.task || "(none)"], ["branch", el("span", { class: "mono", id: "ws-branch" }, ws.branch)],
      ["state", badge(ws.state)], ["base commit", el("span", { class: "mono" }, ws.base_commit)], ["parent", ws.parent_id ? wsLink(ws.parent_id) : "—"],
      ["changed", ws.dirty ? "yes" : "no"], ["size", bytes(ws.size_bytes)]])));
    const split = el("div", { class: "split" });
    const filesBox = el("section", { class: "card", "aria-label": "Files" }, el("h2", {}, "Files"));
    const viewBox = el("section", { class: "card", "aria-label": "File viewer" }, el("h2", {}, "Viewer"), el("p", { class: "muted" }, "Choose a file."));
    split.append(filesBox, viewBox);
    const diffBox = el("section", { class: "card", "aria-label": "Diff" }, el("h2", {}, "Diff against the base"));
    const checkBox = el("section", { class: "card", "aria-label": "Diff check" }, el("h2", {}, "Diff check"));
    const panel = processPanel(id);
    root.append(split, diffBox, checkBox, panel);
    const ctl = new AbortController();

    async function view(path) {
      clear(viewBox).append(el("h2", {}, "Viewer: ", el("span", { class: "mono", id: "viewer-path" }, path)));
      try {
        const fc = await api(`/v1/workspaces/${enc}/files?lines=1:2000&path=${encodeURIComponent(path)}`, { signal: ctl.signal });
        const v = el("div", { class: "viewer mono", id: "viewer", tabindex: "0" });
        if (fc.encoding && fc.encoding !== "utf-8") v.append(el("p", { class: "muted" }, `binary (${fc.encoding}), ${bytes(fc.size)}`));
        else if (Array.isArray(fc.lines)) for (const l of fc.lines) v.append(el("div", { class: "ln" }, el("span", { class: "no" }, l.number ?? l.line ?? ""), el("span", {}, highlight(l.text ?? l.content ?? ""))));
        else String(fc.content || "").split("\n").forEach((l, i) => v.append(el("div", { class: "ln" }, el("span", { class: "no" }, i + 1), el("span", {}, highlight(l)))));
        viewBox.append(v);
      } catch (e) { viewBox.append(errorBox(e)); }
    }
    try {
      const fl = await api(`/v1/workspaces/${enc}/files/list?depth=6`, { signal: ctl.signal });
      const ul = el("ul", { class: "filelist tree", id: "files" });
      const entries = (fl.entries || []).filter((e) => !/^\.git(\/|$)/.test(e.path)).slice(0, 2000);
      for (const e of entries) {
        const depth = (e.path.match(/\//g) || []).length;
        const label = e.type === "dir" ? e.name + "/" : e.name;
        const li = el("li", {}, el("span", { class: "muted" }, "\u00a0\u00a0".repeat(depth)));
        if (e.type === "file") {
          const b = el("button", { type: "button", "data-path": e.path }, label);
          b.addEventListener("click", () => view(e.path));
          li.append(b);
        } else append(li, [el("span", { class: "mono" }, label), e.link_target ? el("span", { class: "muted" }, " → ", e.link_target) : null]);
        ul.append(li);
      }
      filesBox.append(ul);
      if (fl.truncated) filesBox.append(el("p", { class: "muted" }, "list truncated"));
    } catch (e) { filesBox.append(errorBox(e)); }
    try {
      const d = await api(`/v1/workspaces/${enc}/diff`, { signal: ctl.signal });
      diffBox.append(renderDiff(d.diff));
      if (d.note) diffBox.append(el("p", { class: "muted" }, d.note));
    } catch (e) { diffBox.append(errorBox(e)); }
    try {
      checkBox.append(renderFindings(await api(`/v1/workspaces/${enc}/diff/check`, { method: "POST", body: {}, signal: ctl.signal })));
    } catch (e) { checkBox.append(errorBox(e)); }
    return () => { ctl.abort(); panel.cleanup(); };
  }

  function evidence(c) {
    const ev = c.evidence || {};
    const rows = [];
    for (const [name, t] of [["tests", ev.tests], ["regression", ev.regress]]) {
      if (t) rows.push([name, el("span", {}, t.passed ? badge("ok") : badge("failed"), " ", el("span", { class: "mono" }, t.command), ` exit ${t.exit_code}, ${secs((t.duration_ms || 0) / 1000)}`)]);
    }
    const st = ev.stats || {};
    rows.push(["diff", `${st.files || 0} files, +${st.insertions || 0} −${st.deletions || 0}`]);
    if (ev.note) rows.push(["note", ev.note]);
    return kv(rows);
  }
  // safeURL returns an http(s) URL as given, or "" (never a javascript:
  // or data: link).
  function safeURL(u) {
    try { const p = new URL(u); return p.protocol === "https:" || p.protocol === "http:" ? p.href : ""; } catch (_) { return ""; }
  }
  function candidateCard(c, reload) {
    const box = el("article", { class: "cand", "data-candidate": c.id, "aria-label": "candidate " + c.id });
    box.append(el("h3", {}, el("span", { class: "mono" }, c.id), " ", badge(c.disposition), " on ", el("span", { class: "mono" }, c.branch)));
    const rows = [["workspace", el("span", {}, wsLink(c.workspace_id), " (", link("#/ws/" + encodeURIComponent(c.workspace_id), "files and diff"), ")")], ["task", c.task || "(none)"], ["commit", el("span", { class: "mono" }, short(c.commit))]];
    if (c.decision) rows.push(["decision", `${c.decision.disposition} by ${c.decision.actor}: ${c.decision.reason}`]);
    if (c.push) rows.push(["pushed", el("span", { class: "mono" }, `${c.push.branch} → ${c.push.remote}`)]);
    if (c.pr) {
      const u = safeURL(c.pr.url);
      rows.push(["pull request", u ? el("a", { href: u, rel: "noopener noreferrer", target: "_blank", class: "pr-link" }, `#${c.pr.number} ${u}`) : `#${c.pr.number}`]);
    }
    box.append(kv(rows), evidence(c));
    if ((c.findings || []).length) box.append(el("ul", { class: "findings" }, c.findings.map((f) => el("li", {}, f))));
    box.append(renderFindings((c.evidence || {}).check || { ok: true }));
    if (c.disposition === "ready" || c.disposition === "blocked") {
      const reasonID = "reason-" + c.id.replace(/[^A-Za-z0-9_-]/g, "");
      const reason = el("textarea", { id: reasonID, rows: 2, required: true, class: "reason" });
      const approve = el("button", { type: "button", class: "primary approve" }, "Approve");
      const reject = el("button", { type: "button", class: "danger reject" }, "Reject");
      const msg = el("p", { class: "error", role: "alert" });
      const decide = async (verb) => {
        if (!reason.value.trim()) { msg.textContent = "a reason is required"; reason.focus(); return; }
        approve.disabled = reject.disabled = true;
        try {
          await api(`/v1/candidates/${encodeURIComponent(c.id)}/${verb}`, { method: "POST", body: { reason: reason.value, actor: "dashboard" } });
          reload();
        } catch (e) { msg.textContent = e.message; approve.disabled = reject.disabled = false; }
      };
      approve.addEventListener("click", () => decide("approve"));
      reject.addEventListener("click", () => decide("reject"));
      box.append(el("div", { class: "decide" }, el("label", { for: reasonID }, "Reason"), reason, el("div", { class: "row" }, approve, reject), msg));
    }
    return box;
  }

  async function review(root) {
    root.append(el("h1", {}, "Review"));
    const list = el("div", { id: "candidates" });
    root.append(list);
    async function load() {
      try {
        const wss = ((await api("/v1/workspaces")).workspaces || []).slice(0, 100);
        const all = [];
        await Promise.all(wss.map(async (w) => {
          try { all.push(...((await api(`/v1/workspaces/${encodeURIComponent(w.id)}/candidates`)).candidates || [])); } catch (_) { /* gone meanwhile */ }
        }));
        all.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
        const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest(".decide");
        if (focused) return; // do not redraw under someone typing a reason
        clear(list);
        if (!all.length) { list.append(el("p", { class: "muted" }, "no candidates: `agentbox review WORKSPACE` makes one")); return; }
        for (const c of all) list.append(el("section", { class: "card" }, candidateCard(c, load)));
      } catch (e) { clear(list).append(errorBox(e)); }
    }
    await load();
    const again = debounce(load, 500);
    const off = bus.on((ev) => { if (ev.type.startsWith("candidate.")) again(); });
    return () => { off(); again.cancel(); };
  }

  // events shows the newest MAX_EVENT_ROWS events that match the
  // filters, asked of the server (the whole log, not the events in
  // memory), then each new one that matches, live.
  async function events(root) {
    root.append(el("h1", {}, "Events"));
    const type = el("input", { id: "f-type", type: "search", list: "types", placeholder: "sandbox.created" });
    const object = el("input", { id: "f-object", type: "search", placeholder: "ws_… sb_… repo_…" });
    const actor = el("input", { id: "f-actor", type: "search", placeholder: "api, daemon…" });
    const types = el("datalist", { id: "types" });
    const count = el("span", { class: "muted", id: "event-count", role: "status" });
    root.append(el("form", { class: "filters", role: "search" },
      el("label", {}, "type", type), el("label", {}, "object", object), el("label", {}, "actor", actor), types, count));
    const tbody = el("tbody", { id: "event-rows" });
    root.append(el("div", { class: "table-wrap card" }, el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", {}, "time"), el("th", {}, "type"),
      el("th", {}, "actor"), el("th", {}, "objects"), el("th", {}, "detail"))), tbody)));
    const seenTypes = new Set();
    const filters = () => ({ t: type.value.trim(), o: object.value.trim(), a: actor.value.trim() });
    // match is the server's filter, for the events that arrive live: the
    // type as a prefix, the object as any of the event's IDs, the actor.
    const match = (ev, f) => {
      if (f.t && !ev.type.startsWith(f.t)) return false;
      if (f.a && ev.actor !== f.a) return false;
      if (f.o && ![ev.repo_id, ev.workspace_id, ev.sandbox_id].includes(f.o)) return false;
      return true;
    };
    const row = (ev) => el("tr", { "data-type": ev.type }, el("td", { class: "num" }, ev.id), el("td", {}, when(ev.time)), el("td", { class: "mono" }, ev.type),
      el("td", {}, ev.actor), el("td", { class: "mono" }, [ev.repo_id, ev.workspace_id, ev.sandbox_id].filter(Boolean).join(" ")),
      el("td", { class: "mono" }, detailText(ev)));
    const addType = (t) => { if (!seenTypes.has(t) && seenTypes.size < 200) { seenTypes.add(t); types.append(el("option", { value: t })); } };
    let newest = 0, gen = 0, loading = true;
    const ctl = new AbortController();
    const add = (ev) => {
      if (ev.id <= newest) return;
      newest = ev.id;
      tbody.insertBefore(row(ev), tbody.firstChild);
      while (tbody.childNodes.length > MAX_EVENT_ROWS) tbody.removeChild(tbody.lastChild);
    };
    async function query() {
      const my = ++gen, f = filters();
      const q = new URLSearchParams({ order: "newest", limit: String(MAX_EVENT_ROWS) });
      if (f.t) q.set("type_prefix", f.t);
      if (f.o) q.set("object", f.o);
      if (f.a) q.set("actor", f.a);
      loading = true;
      try {
        const evs = (await api("/v1/events?" + q.toString(), { signal: ctl.signal })).events || [];
        if (my !== gen) return;
        clear(tbody);
        newest = 0;
        for (const ev of evs.slice().reverse()) { add(ev); addType(ev.type); }
        // What arrived live while the server answered.
        for (const ev of bus.events) if (ev.id > newest && match(ev, f)) add(ev);
        count.textContent = `${tbody.childNodes.length} shown: the newest that match, from the whole log`;
      } catch (e) { if (e.name !== "AbortError" && my === gen) { clear(tbody); count.textContent = e.message; } }
      if (my === gen) loading = false;
    }
    for (const ev of bus.events) addType(ev.type);
    await query();
    const again = debounce(query, 250);
    for (const i of [type, object, actor]) i.addEventListener("input", () => { gen++; loading = true; again(); });
    const off = bus.on((ev) => {
      addType(ev.type);
      if (loading || !match(ev, filters())) return; // a query under way picks it up
      add(ev);
      count.textContent = `${tbody.childNodes.length} shown, live`;
    });
    return () => { off(); again.cancel(); ctl.abort(); };
  }

  function tokens(n) { return n >= 1e6 ? (n / 1e6).toFixed(2) + " M" : n >= 1e4 ? (n / 1e3).toFixed(1) + " k" : String(n || 0); }
  function usd(x) { return "$" + (x || 0).toFixed(x && x < 1 ? 4 : 2); }
  async function usage(root) {
    root.append(el("h1", {}, "Usage"));
    const charts = {};
    const grid = el("div", { class: "grid" });
    for (const [k, title] of [["cpu", "CPU per task (ms)"], ["tokens", "Tokens per task"], ["cost", "Cost per task (USD cents)"], ["wsTokens", "Tokens per workspace"]]) {
      charts[k] = el("section", { class: "card", id: "chart-" + k, "aria-label": title });
      grid.append(charts[k]);
    }
    const table = el("section", { class: "card table-wrap", "aria-label": "Usage per task" });
    const wsTable = el("section", { class: "card table-wrap", "aria-label": "Usage per workspace" });
    root.append(grid, table, wsTable);
    const cols = ["CPU", "peak memory", "wall", "output", "egress up", "egress down", "tokens in", "tokens out", "cost"];
    const cells = (x) => [secs(x.cpu_seconds), bytes(x.peak_mem_bytes), secs(x.wall_seconds), bytes(x.output_bytes), bytes(x.egress_bytes_up),
      bytes(x.egress_bytes_down), tokens(x.input_tokens), tokens(x.output_tokens), usd(x.cost_usd)].map((v) => el("td", { class: "num" }, v));
    const label = (x) => x.task || "(none)";
    async function load() {
      try {
        const [u, w] = await Promise.all([api("/v1/usage"), api("/v1/usage?by=workspace")]);
        const ts = u.tasks || [];
        const ws = w.workspaces || [];
        const chart = (k, title, points) => clear(charts[k]).append(el("h2", {}, title), barChart(points.slice(0, 30), { labels: true, label: title }));
        chart("cpu", "CPU per task (ms)", ts.map((t) => ({ label: label(t), value: Math.round(t.cpu_seconds * 1000) })));
        chart("tokens", "Tokens per task", ts.map((t) => ({ label: label(t), value: (t.input_tokens || 0) + (t.output_tokens || 0) })));
        chart("cost", "Cost per task (USD cents)", ts.map((t) => ({ label: label(t), value: Math.round((t.cost_usd || 0) * 10000) / 100 })));
        chart("wsTokens", "Tokens per workspace", ws.filter((x) => x.input_tokens || x.output_tokens)
          .map((x) => ({ label: short(x.workspace_id), value: (x.input_tokens || 0) + (x.output_tokens || 0) })));
        const t = el("table", { id: "usage-table" }, el("tr", {}, ["task", "workspaces", "execs"].concat(cols).map((h, i) => el("th", { class: i ? "num" : "" }, h))));
        for (const x of ts) t.append(el("tr", { "data-task": x.task }, el("td", {}, label(x)), el("td", { class: "num" }, x.workspaces), el("td", { class: "num" }, x.execs), cells(x)));
        clear(table).append(el("h2", {}, "Per task"), t);
        const wt = el("table", { id: "usage-ws-table" }, el("tr", {}, ["task", "workspace", "solve run", "execs"].concat(cols).map((h, i) => el("th", { class: i > 2 ? "num" : "" }, h))));
        for (const x of ws) {
          wt.append(el("tr", { "data-ws": x.workspace_id }, el("td", {}, label(x)), el("td", { class: "mono" }, wsLink(x.workspace_id)),
            el("td", { class: "mono" }, x.solve_run || "—"), el("td", { class: "num" }, x.execs), cells(x)));
        }
        clear(wsTable).append(el("h2", {}, "Per workspace"), wt,
          el("p", { class: "muted" }, "Tokens and cost are what the agent loop's model calls spent (agentbox solve), counted for each attempt's workspace."));
      } catch (e) { clear(table).append(errorBox(e)); }
    }
    await load();
    const again = debounce(load, 2000);
    const off = bus.on((ev) => { if (ev.type === "exec.finished" || ev.type.startsWith("workspace.") || ev.type.startsWith("solve.")) again(); });
    return () => { off(); again.cancel(); };
  }

  // ---- router and login -------------------------------------------------
  let cleanup = null, generation = 0, navigated = false;
  async function route() {
    const gen = ++generation;
    if (cleanup) { try { cleanup(); } catch (e) { console.warn(e); } cleanup = null; }
    const hash = location.hash || "#/overview";
    const [, page, arg] = /^#\/([a-z]+)(?:\/(.*))?$/.exec(hash) || [null, "overview", ""];
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.getAttribute("href") === "#/" + (page === "ws" ? "tasks" : page)) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    const root = el("div", { "data-page": page });
    clear(main).append(root);
    const pages = { overview, tasks, review, events, usage };
    let fn = pages[page];
    let c;
    try {
      if (page === "ws" && arg) c = await workspacePage(root, decodeURIComponent(arg));
      else c = await (fn || overview)(root);
    } catch (e) { root.append(errorBox(e)); }
    if (gen !== generation) { if (c) c(); return; }
    cleanup = c || null;
    root.setAttribute("data-ready", "true");
    if (navigated && !main.contains(document.activeElement)) main.focus({ preventScroll: true });
    navigated = false;
  }

  function showLogin() {
    bus.stop();
    document.getElementById("login").hidden = false;
    main.hidden = true;
    document.getElementById("logout").hidden = true;
    document.getElementById("token").focus();
  }
  async function start(info) {
    csrf = info.csrf || "";
    document.getElementById("login").hidden = true;
    main.hidden = false;
    document.getElementById("logout").hidden = !info.login_required;
    await bus.start();
    await route();
  }
  document.getElementById("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const err = document.getElementById("login-error");
    err.textContent = "";
    const r = await fetch("/ui/login", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: document.getElementById("token").value }) });
    if (!r.ok) { err.textContent = r.status === 401 ? "That token is not the daemon's." : "Login failed (" + r.status + ")."; return; }
    document.getElementById("token").value = "";
    start(await r.json());
  });
  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("/ui/logout", { method: "POST", credentials: "same-origin", headers: { "X-Agentbox-Csrf": csrf } });
    csrf = "";
    bus.lastID = 0; bus.events = [];
    showLogin();
  });
  window.addEventListener("hashchange", () => { navigated = true; route(); });
  fetch("/ui/session", { credentials: "same-origin" }).then((r) => r.json()).then((info) => {
    if (info.authenticated) start(info); else showLogin();
  });
})();
