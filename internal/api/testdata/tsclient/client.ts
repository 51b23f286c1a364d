// A tiny fetch-based client typed by api.d.ts, which openapi-typescript
// generates from the daemon's /v1/openapi.json: if a path, a parameter,
// a field or a media type the calls below use leaves the document, this
// stops type-checking.
import type { components, paths } from "./api";

type Schemas = components["schemas"];
type WorkspaceExec = paths["/v1/workspaces/{id}/exec"]["post"];
type WriteFile = paths["/v1/workspaces/{id}/files"]["put"];
type ReadFile = paths["/v1/workspaces/{id}/files"]["get"];
type StartProcess = paths["/v1/workspaces/{id}/processes"]["post"];
type ProcessLogs = paths["/v1/workspaces/{id}/processes/{pid}/logs"]["get"];
type SignalProcess = paths["/v1/workspaces/{id}/processes/{pid}/signal"]["post"];
type WaitProcess = paths["/v1/workspaces/{id}/processes/{pid}/wait"]["post"];

export type ExecRequest = NonNullable<WorkspaceExec["requestBody"]>["content"]["application/json"];
export type ExecOutput = WorkspaceExec["responses"][200]["content"]["application/json"];
export type FileInfo = WriteFile["responses"][200]["content"]["application/json"];
export type FileContent = ReadFile["responses"][200]["content"]["application/json"];
export type ApiError = Schemas["ErrorReply"];
export type Process = StartProcess["responses"][201]["content"]["application/json"];
export type Logs = ProcessLogs["responses"][200]["content"]["application/json"];

export class AgentboxError extends Error {
  constructor(readonly status: number, readonly code: Schemas["ErrorDetail"]["code"], message: string) {
    super(message);
  }
}

export class Client {
  constructor(private readonly base: string, private readonly token?: string) {}

  private async call<T>(method: string, path: string, init: { query?: Record<string, string>; body?: BodyInit; type?: string; accept?: string }): Promise<T> {
    const url = new URL(this.base + path);
    for (const [k, v] of Object.entries(init.query ?? {})) url.searchParams.set(k, v);
    const headers: Record<string, string> = { Accept: init.accept ?? "application/json" };
    if (init.type) headers["Content-Type"] = init.type;
    if (this.token) headers["Authorization"] = "Bearer " + this.token;
    const resp = await fetch(url, { method, headers, body: init.body });
    const text = await resp.text();
    if (!resp.ok) {
      const e = JSON.parse(text) as ApiError;
      throw new AgentboxError(resp.status, e.error.code, e.error.message);
    }
    return JSON.parse(text) as T;
  }

  /** A buffered exec: the command runs to its end and one document comes back. */
  exec(workspace: WorkspaceExec["parameters"]["path"]["id"], req: ExecRequest): Promise<ExecOutput> {
    return this.call("POST", `/v1/workspaces/${encodeURIComponent(workspace)}/exec`, { body: JSON.stringify(req), type: "application/json", accept: "application/json" });
  }

  writeFile(workspace: string, path: NonNullable<WriteFile["parameters"]["query"]>["path"], content: string, parents = true): Promise<FileInfo> {
    return this.call("PUT", `/v1/workspaces/${encodeURIComponent(workspace)}/files`, { query: { path, parents: String(parents) }, body: content, type: "application/octet-stream" });
  }

  readFile(workspace: string, path: string, lines?: string): Promise<FileContent> {
    const query: Record<string, string> = { path };
    if (lines) query["lines"] = lines;
    return this.call("GET", `/v1/workspaces/${encodeURIComponent(workspace)}/files`, { query });
  }

  /** Starts a command in the background: it runs on after the call. */
  startProcess(workspace: string, req: NonNullable<StartProcess["requestBody"]>["content"]["application/json"]): Promise<Process> {
    return this.call("POST", `/v1/workspaces/${encodeURIComponent(workspace)}/processes`, { body: JSON.stringify(req), type: "application/json" });
  }

  logs(workspace: string, pid: string, query: NonNullable<ProcessLogs["parameters"]["query"]>): Promise<Logs> {
    const q: Record<string, string> = {};
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q[k] = String(v);
    return this.call("GET", `/v1/workspaces/${encodeURIComponent(workspace)}/processes/${encodeURIComponent(pid)}/logs`, { query: q });
  }

  signal(workspace: string, pid: string, req: NonNullable<SignalProcess["requestBody"]>["content"]["application/json"]): Promise<Process> {
    return this.call("POST", `/v1/workspaces/${encodeURIComponent(workspace)}/processes/${encodeURIComponent(pid)}/signal`, { body: JSON.stringify(req), type: "application/json" });
  }

  wait(workspace: string, pid: string, req: NonNullable<WaitProcess["requestBody"]>["content"]["application/json"]): Promise<Process> {
    return this.call("POST", `/v1/workspaces/${encodeURIComponent(workspace)}/processes/${encodeURIComponent(pid)}/wait`, { body: JSON.stringify(req), type: "application/json" });
  }
}
