// The acceptance test of agentbox's E2B endpoint with the official E2B JS
// SDK, pinned (package.json): run by cmd/agentbox's TestE2BSDK against a
// real daemon with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
// argv[2] is a git repository the daemon can cache. Every check that
// fails throws; the last line of stdout is a JSON summary.
import assert from 'node:assert/strict'
import {
  Sandbox, CommandExitError, TimeoutError, AuthenticationError, NotFoundError, SandboxError,
} from 'e2b'

const repo = process.argv[2]
let checks = 0
const check = (cond, what) => { assert.ok(cond, what); checks++ }
const eq = (got, want, what) => { assert.deepStrictEqual(got, want, what); checks++ }
const rejects = async (p, cls, what, re) => {
  let err
  try { await p } catch (e) { err = e }
  assert.ok(err, `${what}: did not fail`)
  assert.ok(err instanceof cls, `${what}: ${err?.constructor?.name}: ${err?.message} is not a ${cls.name}`)
  if (re) assert.match(err.message, re, what)
  checks++
  return err
}
const sleep = ms => new Promise(r => setTimeout(r, ms))

for (const k of Object.keys(process.env)) {
  if (k.startsWith('E2B_')) check(['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY'].includes(k), `only the three E2B variables are set (${k})`)
}

// --- create, info, list
const tag = `run-${process.pid}`
const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: tag, kind: 'scratch' }, envs: { SANDBOX_VAR: 'from-sandbox' } })
check(typeof sbx.sandboxId === 'string' && sbx.sandboxId.length > 0, 'create answers a sandbox id')
let info = await sbx.getInfo()
eq(info.sandboxId, sbx.sandboxId, 'getInfo: id')
eq(info.templateId, 'base', 'getInfo: template')
eq(info.state, 'running', 'getInfo: state')
eq(info.metadata, { suite: tag, kind: 'scratch' }, 'getInfo: metadata')
check(info.endAt > info.startedAt, 'getInfo: endAt after startedAt')
check(await sbx.isRunning(), 'isRunning')

// --- commands.run: output callbacks, exit codes, env, cwd, user
const outs = [], errs = []
let r = await sbx.commands.run('echo out1; echo err1 >&2; echo out2', { onStdout: d => outs.push(d), onStderr: d => errs.push(d) })
eq(r.exitCode, 0, 'run: exit code 0')
eq(r.stdout, 'out1\nout2\n', 'run: stdout')
eq(r.stderr, 'err1\n', 'run: stderr')
eq(outs.join(''), 'out1\nout2\n', 'run: onStdout saw stdout')
eq(errs.join(''), 'err1\n', 'run: onStderr saw stderr')
const exitErr = await rejects(sbx.commands.run('echo partial; echo bad >&2; exit 7'), CommandExitError, 'non-zero exit')
eq(exitErr.exitCode, 7, 'CommandExitError.exitCode')
eq(exitErr.stdout, 'partial\n', 'CommandExitError.stdout')
eq(exitErr.stderr, 'bad\n', 'CommandExitError.stderr')
check(/exit status 7/.test(exitErr.error), 'CommandExitError.error says the status')
r = await sbx.commands.run('echo "$SANDBOX_VAR $CMD_VAR"', { envs: { CMD_VAR: 'from-command' } })
eq(r.stdout, 'from-sandbox from-command\n', 'envs: sandbox and command variables')
r = await sbx.commands.run('pwd; whoami; echo $HOME')
eq(r.stdout, '/home/user\nuser\n/home/user\n', 'default cwd, user and HOME are E2B\'s')
r = await sbx.commands.run('pwd', { cwd: '/tmp' })
eq(r.stdout, '/tmp\n', 'cwd')
await sbx.commands.run('mkdir -p sub && echo in-home > sub/f.txt')
r = await sbx.commands.run('cat f.txt', { cwd: 'sub' })
eq(r.stdout, 'in-home\n', 'relative cwd is under the home')
r = await sbx.commands.run('cat /workspace/sub/f.txt')
eq(r.stdout, 'in-home\n', 'the home is the workspace')
await rejects(sbx.commands.run('id', { user: 'root' }), SandboxError, 'user root is refused', /never run as root/)
r = await sbx.commands.run('whoami', { user: 'user' })
eq(r.stdout, 'user\n', 'user "user" is accepted')

// --- files (envd's filesystem service and /files), when this build serves them
let files = false
try {
  await sbx.files.write('probe.txt', 'p')
  files = true
} catch (e) {
  if (!/501|not in this build/.test(e.message)) throw e
}
if (files) {
  await sbx.files.write('/home/user/notes/a.txt', 'alpha\n')
  eq(await sbx.files.read('notes/a.txt'), 'alpha\n', 'files: write, then read as text')
  eq(Buffer.from(await sbx.files.read('notes/a.txt', { format: 'bytes' })).toString(), 'alpha\n', 'files: read as bytes')
  eq((await sbx.commands.run('cat notes/a.txt')).stdout, 'alpha\n', 'files: a command reads what was written')
  await sbx.commands.run('mkdir -p notes/deep/er && echo b > notes/deep/er/b.txt')
  const listed = (await sbx.files.list('notes', { depth: 3 })).map(e => e.path).sort()
  eq(listed, ['/home/user/notes/a.txt', '/home/user/notes/deep', '/home/user/notes/deep/er', '/home/user/notes/deep/er/b.txt'], 'files: list with depth')
  check(await sbx.files.exists('notes/deep/er/b.txt') && !(await sbx.files.exists('notes/none')), 'files: exists')
  await sbx.files.rename('notes/a.txt', 'notes/c.txt')
  await sbx.files.makeDir('notes/made')
  await sbx.files.remove('notes/deep')
  eq((await sbx.commands.run('ls notes')).stdout, 'c.txt\nmade\n', 'files: rename, makeDir, remove')
  const events = []
  const watch = await sbx.files.watchDir('notes', e => events.push(`${e.type}:${e.name}`))
  await sbx.commands.run('echo w > notes/w.txt')
  for (let i = 0; i < 100 && !events.some(e => e.endsWith(':w.txt')); i++) await sleep(50)
  await watch.stop()
  check(events.some(e => e.endsWith(':w.txt')), 'files: watchDir sees a command\'s write')
  await rejects(sbx.files.read('/etc/passwd'), Error, 'files: a path outside the workspace')
  await rejects(sbx.files.read('notes/c.txt', { user: 'root' }), Error, 'files: user root', /root/)
  await sbx.files.remove('probe.txt')
}

// --- timeouts: the SDK's error, and the command is killed
const t0 = Date.now()
await rejects(sbx.commands.run('sleep 3; echo late > late.txt', { timeoutMs: 1000 }), TimeoutError, 'timeoutMs')
check(Date.now() - t0 < 2800, 'the timeout ends the call in time')
await sleep(3000)
r = await sbx.commands.run('test -e late.txt && echo present || echo absent')
eq(r.stdout, 'absent\n', 'a timed-out command was killed')

// --- background commands: stdin, list, connect, wait, kill
const bg = await sbx.commands.run('read a; echo got:$a; read b; echo got:$b; sleep 60', { background: true, stdin: true, timeoutMs: 0 })
check(bg.pid > 0, 'background: a pid')
let listed = await sbx.commands.list()
check(listed.some(p => p.pid === bg.pid && p.cmd === '/bin/bash'), 'commands.list shows it')
await bg.sendStdin('one\n')
for (let i = 0; i < 100 && !bg.stdout.includes('got:one'); i++) await sleep(50)
eq(bg.stdout, 'got:one\n', 'sendStdin reaches the command')
const other = await Sandbox.connect(sbx.sandboxId)
eq(other.sandboxId, sbx.sandboxId, 'Sandbox.connect: same sandbox')
let seen = ''
const h2 = await other.commands.connect(bg.pid, { onStdout: d => { seen += d } })
await other.commands.sendStdin(bg.pid, 'two\n')
for (let i = 0; i < 100 && !seen.includes('got:two'); i++) await sleep(50)
eq(seen, 'got:two\n', 'commands.connect streams output from then on')
check(bg.stdout.includes('got:one\ngot:two\n'), 'the first handle saw all of it')
check(await bg.kill(), 'kill answers true')
const killed = await rejects(bg.wait(), CommandExitError, 'wait on a killed command')
eq(killed.exitCode, -1, 'a killed command has no exit code')
check(/signal: killed/.test(killed.error), 'its error names the signal')
await rejects(h2.wait(), CommandExitError, 'the connected handle sees the end too')
check(!(await sbx.commands.kill(bg.pid)), 'killing it again answers false')
await rejects(sbx.commands.connect(bg.pid), NotFoundError, 'connecting to an ended command')
const quick = await sbx.commands.run('echo quick; exit 3', { background: true })
const qerr = await rejects(quick.wait(), CommandExitError, 'background wait with a non-zero exit')
eq(qerr.exitCode, 3, 'background exit code')
const ok = await sbx.commands.run('cat', { background: true, stdin: true })
await ok.sendStdin('piped')
await ok.closeStdin()
r = await ok.wait()
eq(r.stdout, 'piped', 'closeStdin ends the input')

// --- pty
let ptyOut = ''
const dec = new TextDecoder()
const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: d => { ptyOut += dec.decode(d, { stream: true }) }, timeoutMs: 0 })
check(pty.pid > 0, 'pty: a pid')
const enc = new TextEncoder()
await sbx.pty.sendInput(pty.pid, enc.encode('stty size; echo PTY-$((6*7))\n'))
for (let i = 0; i < 100 && !ptyOut.includes('PTY-42'); i++) await sleep(50)
check(ptyOut.includes('24 80'), 'pty: the size asked for')
check(ptyOut.includes('PTY-42'), 'pty: input typed, output seen')
await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 })
await sbx.pty.sendInput(pty.pid, enc.encode('stty size\n'))
for (let i = 0; i < 100 && !ptyOut.includes('40 120'); i++) await sleep(50)
check(ptyOut.includes('40 120'), 'pty: resized')
check(await sbx.pty.kill(pty.pid), 'pty: kill')
await rejects(pty.wait(), CommandExitError, 'pty: wait after kill')

// --- timeout, list, pause and resume
await sbx.setTimeout(600_000)
info = await sbx.getInfo()
check(info.endAt.getTime() - Date.now() > 500_000, 'setTimeout moves endAt')
const mine = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()
eq(mine.map(s => s.sandboxId), [sbx.sandboxId], 'list with a metadata filter')
eq((await Sandbox.list({ query: { metadata: { suite: 'no-such-suite' } } }).nextItems()).length, 0, 'list: a filter that matches nothing')
await sbx.commands.run('echo kept > kept.txt')
check(await sbx.pause(), 'pause')
check(!(await sbx.pause()), 'pausing again answers false')
check(!(await sbx.isRunning()), 'a paused sandbox is not running')
eq((await sbx.getInfo()).state, 'paused', 'getInfo: paused')
const paused = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['paused'] } }).nextItems()
eq(paused.map(s => s.sandboxId), [sbx.sandboxId], 'list with a state filter')
eq((await Sandbox.list({ query: { metadata: { suite: tag }, state: ['running'] } }).nextItems()).length, 0, 'list: running excludes it')
await rejects(sbx.commands.run('true'), Error, 'commands on a paused sandbox fail')
const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
r = await resumed.commands.run('cat kept.txt')
eq(r.stdout, 'kept\n', 'resume keeps the files')

// --- bad input: an E2B-shaped error, and nothing changes
const before = (await Sandbox.list().nextItems()).length
await rejects(Sandbox.create('no-such-template'), SandboxError, 'unknown template', /404|not found/)
await rejects(Sandbox.create({ timeoutMs: 300_000, network: { allowOut: ['example.com'] } }), SandboxError, 'network rules are refused', /501/)
eq((await Sandbox.list().nextItems()).length, before, 'a refused create leaves no sandbox')
await rejects(Sandbox.list({ apiKey: 'wrong-key-0123456789' }).nextItems(), AuthenticationError, 'wrong API key')
await rejects(Sandbox.connect('ws_000000000000'), Error, 'connect to an unknown sandbox', /not found/i)
await rejects(Sandbox.getInfo('not-an-id'), Error, 'getInfo of an unknown sandbox', /not found/i)
check(!(await Sandbox.kill('ws_000000000000')), 'kill of an unknown sandbox answers false')
const forged = new Sandbox({ sandboxId: sbx.sandboxId, envdAccessToken: 'forged-token', envdVersion: '0.5.7' })
await rejects(forged.commands.run('echo hi > forged.txt'), AuthenticationError, 'a wrong envd access token')
r = await resumed.commands.run('test -e forged.txt && echo present || echo absent')
eq(r.stdout, 'absent\n', 'the forged call ran nothing')

// --- kill
check(await resumed.kill(), 'kill')
check(!(await sbx.isRunning()), 'a killed sandbox is not running')
await rejects(Sandbox.getInfo(sbx.sandboxId), Error, 'getInfo after kill', /not found/i)
eq((await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()).length, 0, 'list after kill')

// --- a sandbox's timeout kills it
const short = await Sandbox.create({ timeoutMs: 2000, metadata: { suite: tag } })
eq((await short.commands.run('echo alive')).stdout, 'alive\n', 'a short-lived sandbox runs')
for (let i = 0; i < 100 && await short.isRunning(); i++) await sleep(100)
check(!(await short.isRunning()), 'the timeout ended the sandbox')
await rejects(Sandbox.getInfo(short.sandboxId), Error, 'getInfo after the timeout', /not found/i)

// --- a sandbox on a cached repo: its changes are a workspace's
const rs = await Sandbox.create({ metadata: { 'agentbox.repo': repo, suite: tag, note: 'a b&c=d/%41' } })
eq((await Sandbox.list({ query: { metadata: { 'agentbox.repo': repo, note: 'a b&c=d/%41' } } }).nextItems()).map(s => s.sandboxId), [rs.sandboxId], 'list: a metadata filter with a path and odd characters')
r = await rs.commands.run('cat README.md && echo "def sub(a, b):" >> calc.py && echo "    return a - b" >> calc.py')
eq(r.stdout, '# calc\n', 'the repo is checked out in the home')
check(await rs.kill(), 'kill the repo sandbox')

console.log(JSON.stringify({ checks, repoSandbox: rs.sandboxId, files }))
