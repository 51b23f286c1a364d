// An agent's session with agentbox through the official TypeScript MCP SDK,
// run by TestMCPTypeScriptSDK (cmd/agentbox/mcp_js_e2e_test.go) against a
// real daemon, over one transport:
//
//   node client.mjs stdio   runs `$AGENTBOX_BIN mcp` (reaching the daemon at
//                           $AGENTBOX_HOST with $AGENTBOX_TOKEN)
//   node client.mjs http    talks to $AGENTBOX_URL/mcp with the bearer token
//
// $REPO is the repository to work on. Every check that fails throws; the
// last line of stdout is a JSON summary.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import Ajv from 'ajv';

const mode = process.argv[2];
const env = process.env;
const checks = [];

function check(name, ok, detail) {
  if (!ok) {
    throw new Error(`${mode}: ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`);
  }
  checks.push(name);
}

function transport(token) {
  if (mode === 'stdio') {
    return new StdioClientTransport({
      command: env.AGENTBOX_BIN,
      args: ['mcp'],
      env: { PATH: env.PATH, AGENTBOX_HOST: env.AGENTBOX_HOST, AGENTBOX_TOKEN: token },
      stderr: 'inherit',
    });
  }
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return new StreamableHTTPClientTransport(new URL('/mcp', env.AGENTBOX_URL), { requestInit: { headers } });
}

async function connect(token) {
  const client = new Client({ name: 'agentbox-ts-e2e', version: '1.0.0' });
  await client.connect(transport(token));
  return client;
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const long = { timeout: 300_000, resetTimeoutOnProgress: true };

async function ok(client, name, args, options = long) {
  const res = await client.callTool({ name, arguments: args }, undefined, options);
  check(`${name} answers`, !res.isError, text(res));
  check(`${name} has structured content`, typeof res.structuredContent === 'object', res);
  return res;
}

async function fails(client, name, args, code) {
  const res = await client.callTool({ name, arguments: args }, undefined, long);
  const err = res._meta?.['agentbox/error'];
  check(`${name} ${JSON.stringify(args).slice(0, 60)} is a tool error ${code}`, res.isError && err?.code === code && text(res) === `${err.code}: ${err.message}`, res);
  return err;
}

async function main() {
  // Without the token, a TCP daemon lets nothing through.
  if (mode === 'http') {
    let refused = false;
    try {
      await connect('');
    } catch (e) {
      refused = /401|unauthorized/i.test(String(e));
    }
    check('no token, no session', refused, 'connected without the bearer token');
  }

  const client = await connect(env.AGENTBOX_TOKEN);
  check('server is agentbox', client.getServerVersion()?.name === 'agentbox', client.getServerVersion());

  // Every tool: a description for a model, and input and output schemas
  // that a strict JSON Schema validator compiles; arguments are checked.
  const { tools } = await client.listTools();
  const ajv = new Ajv({ strict: true, allowUnionTypes: true, allErrors: true });
  for (const tool of tools) {
    check(`${tool.name} is described`, tool.description.length >= 100 && tool.title, tool);
    const input = ajv.compile(tool.inputSchema);
    ajv.compile(tool.outputSchema);
    check(`${tool.name} refuses unknown arguments`, !input({ no_such_argument: 1 }), tool.inputSchema);
    for (const [name, prop] of Object.entries(tool.inputSchema.properties ?? {})) {
      check(`${tool.name}.${name} is described`, prop.description?.length > 0, prop);
    }
  }
  const names = tools.map((t) => t.name).sort();
  for (const want of ['create_workspace', 'list_workspaces', 'show_workspace', 'use_workspace', 'fork_workspace', 'run_command',
    'read_file', 'write_file', 'edit_file', 'list_files', 'find_files', 'grep', 'diff', 'commit', 'check_diff',
    'start_process', 'read_logs', 'list_processes', 'signal_process', 'expose_port']) {
    check(`tool ${want} is listed`, names.includes(want), names);
  }
  const fromDir = JSON.stringify(tools.find((t) => t.name === 'create_workspace').inputSchema).includes('from_dir');
  check('from_dir only on stdio', fromDir === (mode === 'stdio'), fromDir);

  // An agent's session. The client checks each structured result against
  // the tool's output schema.
  const ws = (await ok(client, 'create_workspace', { repo: env.REPO, task: `ts-${mode}` })).structuredContent;
  check('the new workspace is the session default', ws.session_default === true, ws);
  await ok(client, 'write_file', { path: 'tests/unit/test_sub.py', content: 'from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n' });
  await ok(client, 'write_file', { path: 'tests/unit/__init__.py', content: '' });
  const edit = await ok(client, 'edit_file', { path: 'calc.py', old: 'def mul(a, b):', new: 'def sub(a, b):\n    return a - b\n\n\ndef mul(a, b):' });
  check('edit replaced once', edit.structuredContent.replacements === 1, edit.structuredContent);
  const read = await ok(client, 'read_file', { path: 'calc.py', start_line: 5, end_line: 6 });
  check('read a range, numbered', text(read).startsWith('     5\tdef sub(a, b):\n     6\t    return a - b\n'), text(read));
  const grep = await ok(client, 'grep', { pattern: 'def (add|sub)\\(' });
  check('grep finds both', grep.structuredContent.matches.length === 2, grep.structuredContent);

  const tests = await ok(client, 'run_command', { command: 'python3 -m pytest -q -p no:cacheprovider', env: { PYTHONDONTWRITEBYTECODE: '1' } });
  check('the tests pass', tests.structuredContent.exit_code === 0 && tests.structuredContent.stdout.includes('3 passed'), tests.structuredContent);
  // A long command's output comes as progress while it runs. (This client
  // handles a notification a microtask after it arrives, a response at
  // once: output sent just before the result can miss its handler.)
  const progress = [];
  const ticks = await ok(client, 'run_command', { command: 'for i in 1 2 3; do echo tick $i; sleep 0.4; done' },
    { ...long, onprogress: (p) => progress.push(p.message ?? '') });
  check('a long command\'s output came as progress', progress.join('').includes('tick 1\ntick 2\n') && ticks.structuredContent.stdout === 'tick 1\ntick 2\ntick 3\n', progress);

  const diff = await ok(client, 'diff', {});
  check('the diff has the change', diff.structuredContent.diff.includes('+def sub(a, b):'), diff.structuredContent);
  const checked = await ok(client, 'check_diff', {});
  check('the diff check passes', checked.structuredContent.ok === true, checked.structuredContent);
  const commit = await ok(client, 'commit', { message: 'calc: sub' });
  check('committed', /^[0-9a-f]{40}$/.test(commit.structuredContent.commit), commit.structuredContent);

  // A background server, reached through the port relay, its logs read,
  // then stopped.
  const proc = (await ok(client, 'start_process', { command: 'exec python3 -u -m http.server 8000 --bind 127.0.0.1' })).structuredContent;
  check('the server runs', proc.state === 'running' && /^ex_/.test(proc.id), proc);
  const port = (await ok(client, 'expose_port', { port: 8000 })).structuredContent;
  let body = '';
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !body; ) {
    try {
      const resp = await fetch(new URL('calc.py', port.url), { signal: AbortSignal.timeout(5000) });
      if (resp.ok) body = await resp.text();
    } catch (e) {
      console.error(`${mode}: GET ${port.url}calc.py: ${e}`); // the server may not listen yet
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  check('the server answers through the port relay', body.includes('def sub(a, b):'), body);
  // The server logs the request as it answers: the line may reach the
  // daemon a moment after the reply reached us.
  let logs;
  for (let i = 0; i < 50; i++) {
    logs = await ok(client, 'read_logs', { process: proc.id, stream: 'stderr' });
    if (logs.structuredContent.data.includes('"GET /calc.py HTTP/1.1" 200')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check('its logs show the request', logs.structuredContent.data.includes('"GET /calc.py HTTP/1.1" 200'), logs.structuredContent);
  const listed = await ok(client, 'list_processes', {});
  check('it is listed', listed.structuredContent.processes.some((p) => p.id === proc.id && p.state === 'running'), listed.structuredContent);
  await ok(client, 'signal_process', { process: proc.id });
  const ended = await ok(client, 'read_logs', { process: proc.id, offset: -100, wait: '20s' });
  check('it was killed', ended.structuredContent.process.state === 'killed', ended.structuredContent);

  // Two attempts, run at once.
  const forks = (await ok(client, 'fork_workspace', { count: 2 })).structuredContent.forks;
  check('two forks', forks.length === 2, forks);
  const runs = await Promise.all(forks.map((f) => ok(client, 'run_command', { workspace: f.id, argv: ['python3', '-m', 'pytest', '-q', '-p', 'no:cacheprovider'], env: { PYTHONDONTWRITEBYTECODE: '1' } })));
  check('both attempts pass, each in its sandbox', runs.every((r) => r.structuredContent.exit_code === 0) &&
    runs[0].structuredContent.sandbox_id !== runs[1].structuredContent.sandbox_id, runs.map((r) => r.structuredContent));

  // Hostile arguments: tool errors with agentbox's code, nothing crashes.
  await fails(client, 'read_file', { path: '../../etc/passwd' }, 'invalid');
  await fails(client, 'read_file', { workspace: 'ws_aaaaaaaaaaaa', path: 'calc.py' }, 'not_found');
  await fails(client, 'find_files', { pattern: '[unclosed' }, 'invalid');
  await fails(client, 'write_file', { path: 'big.txt', content: 'x'.repeat(9 << 20) }, 'too_large');
  await fails(client, 'read_file', { path: 'calc.py', no_such_argument: 1 }, 'invalid');
  const after = await ok(client, 'list_workspaces', { task: `ts-${mode}` });
  check('the session goes on', after.structuredContent.workspaces.length === 3, after.structuredContent);

  await client.close();
  console.log(JSON.stringify({ transport: mode, tools: tools.length, checks: checks.length }));
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  process.exit(1);
});
