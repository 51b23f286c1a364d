// files.mjs: the E2B JS SDK's files module against agentbox's E2B surface.
//
// Run with node 20+ where the pinned `e2b` package (2.51.0) resolves: either
// next to a node_modules holding it, or with E2B_SDK_MODULE set to the path
// of its dist/index.mjs. The SDK reads, as always:
//
//   E2B_API_URL      the control API (Sandbox.create, kill)
//   E2B_SANDBOX_URL  the envd API (files, commands)
//   E2B_API_KEY      the API key
//
// and this script reads:
//
//   E2B_TEMPLATE        template of the sandbox it creates (default "base")
//   E2B_FILES_HOME      the sandbox user's home (default "/home/user")
//   E2B_FILES_COMMANDS  "0" skips the checks that need commands.run (for a
//                       server with the filesystem service only)
//   E2B_FILES_HUGE      bytes of the upload that must be refused (default
//                       257 MiB, over agentbox's 256 MiB per upload); "0" skips
//
// It creates one sandbox, checks write, read (text and bytes), list with
// depth, exists, getInfo, rename, makeDir, remove, watchDir (events from the
// API and, with commands, from a command inside the sandbox) and the errors
// of bad paths and a huge upload, kills the sandbox, prints one JSON line
// {"ok":true,"checks":N} and exits 0; on the first failure it prints the
// reason and exits 1.

import { pathToFileURL } from 'node:url'

const sdk = await import(process.env.E2B_SDK_MODULE ? pathToFileURL(process.env.E2B_SDK_MODULE).href : 'e2b')
const { Sandbox, FileNotFoundError, InvalidArgumentError, SandboxError, TemplateError } = sdk

const home = process.env.E2B_FILES_HOME || '/home/user'
const withCommands = process.env.E2B_FILES_COMMANDS !== '0'
const huge = process.env.E2B_FILES_HUGE === undefined ? 257 * 1024 * 1024 : Number(process.env.E2B_FILES_HUGE)

let checks = 0
function check(cond, what, got) {
  if (!cond) {
    throw new Error(`${what}${got === undefined ? '' : `: got ${JSON.stringify(got)}`}`)
  }
  checks++
}

async function rejects(promise, cls, what) {
  try {
    await promise
  } catch (err) {
    check(err instanceof cls, `${what}: want ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`)
    return err
  }
  throw new Error(`${what}: did not fail`)
}

// eventWaiter records a watch's events; waitFor resolves with the first
// event that matches, or rejects after ms.
function eventWaiter(ms = 15000) {
  const seen = []
  const events = []
  const waiters = []
  return {
    seen,
    onEvent(e) {
      seen.push(`${e.type} ${e.name}`)
      events.push(e)
      for (const w of waiters) {
        if (w.match(e)) w.resolve(e)
      }
    },
    waitFor(type, name) {
      const match = (e) => e.type === type && e.name === name
      return new Promise((resolve, reject) => {
        const earlier = events.find(match)
        if (earlier) return resolve(earlier)
        const t = setTimeout(() => reject(new Error(`no ${type} event for ${name} within ${ms} ms; saw ${JSON.stringify(seen)}`)), ms)
        waiters.push({ match, resolve: (e) => { clearTimeout(t); resolve(e) } })
      })
    },
  }
}

const sbx = await Sandbox.create(process.env.E2B_TEMPLATE || 'base')
try {
  // write and read: text, bytes, several files at once.
  const info = await sbx.files.write('hello.txt', 'Hello, agentbox!')
  check(info.path === `${home}/hello.txt` && info.name === 'hello.txt', 'write info', info)
  check((await sbx.files.read('hello.txt')) === 'Hello, agentbox!', 'read text')
  check((await sbx.files.read(`${home}/hello.txt`)) === 'Hello, agentbox!', 'read by absolute path')
  const bin = new Uint8Array([0, 1, 2, 127, 128, 254, 255])
  await sbx.files.write('bin/data.bin', bin)
  const back = await sbx.files.read('bin/data.bin', { format: 'bytes' })
  check(back instanceof Uint8Array && Buffer.from(back).equals(Buffer.from(bin)), 'read bytes', Array.from(back))
  await sbx.files.write('gz/zipped.txt', 'compressed on the wire', { gzip: true })
  check((await sbx.files.read('gz/zipped.txt')) === 'compressed on the wire', 'write with gzip')
  const blob = await sbx.files.read('bin/data.bin', { format: 'blob' })
  check(Buffer.from(await blob.arrayBuffer()).equals(Buffer.from(bin)), 'read as a blob')
  const chunks = []
  for await (const c of await sbx.files.read('gz/zipped.txt', { format: 'stream' })) chunks.push(Buffer.from(c))
  check(Buffer.concat(chunks).toString() === 'compressed on the wire', 'read as a stream')
  await sbx.files.write('empty.txt', '')
  check((await sbx.files.read('empty.txt')) === '', 'read an empty file')
  const many = await sbx.files.write([
    { path: 'multi/a.txt', data: 'a' },
    { path: '/workspace/multi/deep/b.txt', data: 'b' },
  ])
  check(Array.isArray(many) && many.length === 2 && many[1].path === '/workspace/multi/deep/b.txt', 'write several files', many)
  check((await sbx.files.read(`${home}/multi/deep/b.txt`)) === 'b', 'the home and /workspace are one directory')

  // makeDir, list with depth, exists, getInfo.
  check((await sbx.files.makeDir('tree/sub')) === true, 'makeDir creates')
  check((await sbx.files.makeDir('tree/sub')) === false, 'makeDir of an existing directory')
  await sbx.files.write('tree/sub/x.txt', 'x')
  await sbx.files.write('tree/y.txt', 'y')
  const one = await sbx.files.list('tree')
  check(JSON.stringify(one.map((e) => [e.name, e.type])) === JSON.stringify([['sub', 'dir'], ['y.txt', 'file']]), 'list depth 1', one)
  const two = await sbx.files.list('tree', { depth: 2 })
  check(JSON.stringify(two.map((e) => e.path)) === JSON.stringify([`${home}/tree/sub`, `${home}/tree/sub/x.txt`, `${home}/tree/y.txt`]), 'list depth 2', two)
  check((await sbx.files.exists('tree/y.txt')) === true, 'exists')
  check((await sbx.files.exists('tree/nope')) === false, 'exists of a missing file')
  const st = await sbx.files.getInfo('tree/y.txt')
  check(st.type === 'file' && st.size === 1 && st.permissions === '-rw-r--r--' && st.modifiedTime instanceof Date, 'getInfo', st)

  // rename and remove.
  const moved = await sbx.files.rename('hello.txt', 'renamed.txt')
  check(moved.path === `${home}/renamed.txt` && moved.type === 'file', 'rename', moved)
  check((await sbx.files.exists('hello.txt')) === false, 'the old name is gone')
  check((await sbx.files.read('renamed.txt')) === 'Hello, agentbox!', 'read the new name')
  await sbx.files.remove('renamed.txt')
  check((await sbx.files.exists('renamed.txt')) === false, 'remove')
  await sbx.files.remove('tree')
  check((await sbx.files.exists('tree/sub/x.txt')) === false, 'remove a tree')
  await sbx.files.remove('never-there.txt') // as with E2B: no error

  // watchDir: events of writes through the API, then of a command.
  await sbx.files.makeDir('watched')
  const w = eventWaiter()
  const handle = await sbx.files.watchDir('watched', (e) => w.onEvent(e))
  await sbx.files.write('watched/f.txt', 'one')
  await w.waitFor('write', 'f.txt')
  await sbx.files.rename('watched/f.txt', 'watched/g.txt')
  await w.waitFor('rename', 'f.txt')
  await w.waitFor('create', 'g.txt')
  await sbx.files.remove('watched/g.txt')
  await w.waitFor('remove', 'g.txt')
  if (withCommands) {
    await sbx.commands.run('echo from-inside > /workspace/watched/cmd.txt')
    await w.waitFor('write', 'cmd.txt')
    check((await sbx.files.read('watched/cmd.txt')) === 'from-inside\n', 'read what a command wrote')
  }
  await handle.stop()
  checks++

  const r = eventWaiter()
  const rh = await sbx.files.watchDir('watched', (e) => r.onEvent(e), { recursive: true })
  await sbx.files.makeDir('watched/nested')
  await r.waitFor('create', 'nested')
  await sbx.files.write('watched/nested/deep.txt', 'deep')
  await r.waitFor('write', 'nested/deep.txt')
  await rh.stop()
  checks++

  // Entries in events need envd 0.6.3; the SDK refuses before asking an
  // older one.
  const ie = eventWaiter()
  const ih = await sbx.files.watchDir('watched', (e) => ie.onEvent(e), { includeEntry: true }).catch((err) => {
    if (err instanceof TemplateError) return null
    throw err
  })
  if (ih) {
    await sbx.files.write('watched/entry.txt', 'with entry')
    const ev = await ie.waitFor('write', 'entry.txt')
    check(ev.entry && ev.entry.path === `${home}/watched/entry.txt` && ev.entry.type === 'file', 'watch event with its entry', ev)
    await ih.stop()
  }

  // Errors the SDK knows.
  await rejects(sbx.files.read('missing.txt'), FileNotFoundError, 'read of a missing file')
  await rejects(sbx.files.getInfo('missing.txt'), FileNotFoundError, 'getInfo of a missing file')
  await rejects(sbx.files.rename('missing.txt', 'x.txt'), FileNotFoundError, 'rename of a missing file')
  await rejects(sbx.files.watchDir('missing-dir', () => {}), FileNotFoundError, 'watchDir of a missing directory')
  await rejects(sbx.files.watchDir('empty.txt', () => {}), SandboxError, 'watchDir of a file')
  await rejects(sbx.files.read('/etc/passwd'), InvalidArgumentError, 'read outside the workspace')
  await rejects(sbx.files.read('../../etc/passwd'), InvalidArgumentError, 'read through ..')
  await rejects(sbx.files.write('/etc/agentbox-e2b-canary', 'x'), InvalidArgumentError, 'write outside the workspace')
  await rejects(sbx.files.list('/'), InvalidArgumentError, 'list /')
  await rejects(sbx.files.remove('/etc/hostname'), InvalidArgumentError, 'remove outside the workspace')
  if (huge > 0) {
    const err = await rejects(sbx.files.write('huge/too-big.bin', new Uint8Array(huge)), SandboxError, 'a huge upload')
    check(/limit|space/i.test(err.message), 'the huge upload names the limit', err.message)
    check((await sbx.files.exists('huge')) === false, 'a refused upload leaves nothing behind')
  }
} finally {
  await sbx.kill().catch(() => {})
}
console.log(JSON.stringify({ ok: true, checks }))
