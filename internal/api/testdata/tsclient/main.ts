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
