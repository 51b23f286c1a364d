// Runs the typed client against a daemon: AGENTBOX_URL, AGENTBOX_WS.
import { AgentboxError, Client } from "./client";

// The little of Node's API this needs (no @types/node to install).
declare const process: { env: Record<string, string | undefined>; exit(code: number): never };

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error("check failed: " + what);
}

async function main(): Promise<void> {
  const base = process.env["AGENTBOX_URL"];
  const ws = process.env["AGENTBOX_WS"];
  if (!base || !ws) throw new Error("AGENTBOX_URL and AGENTBOX_WS must be set");
  const c = new Client(base, process.env["AGENTBOX_TOKEN"]);

  const out = await c.exec(ws, { sh: "echo out; echo err >&2; exit 3", timeout: "60s" });
  check(out.stdout === "out\n" && out.stderr === "err\n", "exec output: " + JSON.stringify(out));
  check(out.exit_code === 3 && !out.timed_out && !out.truncated && out.signal === 0, "exec status: " + JSON.stringify(out));

  const info = await c.writeFile(ws, "ts/hello.txt", "one\ntwo\nthree\n");
  check(info.path === "ts/hello.txt" && info.size === 14 && info.type === "file", "write: " + JSON.stringify(info));
  const read = await c.readFile(ws, "ts/hello.txt", "2:3");
  check(read.content === "two\nthree\n" && read.lines?.[0]?.line === 2 && read.lines?.[0]?.text === "two", "read: " + JSON.stringify(read));

  const cat = await c.exec(ws, { argv: ["cat", "ts/hello.txt"] });
  check(cat.stdout === "one\ntwo\nthree\n" && cat.exit_code === 0, "the sandbox sees the write: " + JSON.stringify(cat));

  // A background process: it outlives the call that started it, its
  // output is read from an offset, and a signal ends it.
  const proc = await c.startProcess(ws, { sh: "echo started; while :; do sleep 1; done" });
  check(proc.state === "running" && proc.id.startsWith("ex_"), "process: " + JSON.stringify(proc));
  let logs = await c.logs(ws, proc.id, { offset: 0 });
  for (let i = 0; i < 100 && logs.data === ""; i++) {
    await new Promise((r) => setTimeout(r, 100));
    logs = await c.logs(ws, proc.id, { offset: 0 });
  }
  check(logs.data === "started\n" && logs.offset === 0 && logs.next_offset === 8, "logs: " + JSON.stringify(logs));
  await c.signal(ws, proc.id, { signal: "KILL" });
  const ended = await c.wait(ws, proc.id, { timeout: "30s" });
  check(ended.state === "killed", "the killed process: " + JSON.stringify(ended));

  try {
    await c.exec("ws_nope", { argv: ["true"] });
    check(false, "exec in an unknown workspace succeeded");
  } catch (e) {
    check(e instanceof AgentboxError && e.status === 404 && e.code === "not_found", "unknown workspace: " + String(e));
  }
  console.log("typescript client: ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
