// The E2B side of `agentbox bench e2b`: the official SDK, driven one
// request a line on stdin, each answered with one JSON line on stdout
// holding how long the timed part took (ns), as the SDK's caller sees it.
//   create TEMPLATE  Sandbox.create(TEMPLATE) then commands.run('true'),
//                    timed; the sandbox is killed after the clock stops
//   open TEMPLATE    create a sandbox kept for run (untimed)
//   run TEMPLATE     commands.run('true') in it, timed
//   list TEMPLATE    commands.list() in it, timed: one unary envd call,
//                    the SDK's and the protocol's floor
//   close            kill the kept sandboxes
import { Sandbox } from 'e2b'
import { createInterface } from 'node:readline'

const kept = {}
const out = v => process.stdout.write(JSON.stringify(v) + '\n')
const now = () => process.hrtime.bigint()
for await (const line of createInterface({ input: process.stdin })) {
  const [op, arg] = line.trim().split(/\s+/)
  try {
    if (op === 'create') {
      const t = now()
      const s = await Sandbox.create(arg, { timeoutMs: 600_000 })
      await s.commands.run('true')
      const ns = Number(now() - t)
      await s.kill()
      out({ ns })
    } else if (op === 'open') {
      kept[arg] = await Sandbox.create(arg, { timeoutMs: 3_600_000 })
      out({ id: kept[arg].sandboxId })
    } else if (op === 'run') {
      const t = now()
      await kept[arg].commands.run('true')
      out({ ns: Number(now() - t) })
    } else if (op === 'list') {
      const t = now()
      await kept[arg].commands.list()
      out({ ns: Number(now() - t) })
    } else if (op === 'close') {
      for (const s of Object.values(kept)) await s.kill()
      out({})
    } else {
      out({ error: `unknown request ${op}` })
    }
  } catch (e) {
    out({ error: `${e.constructor.name}: ${e.message}` })
  }
}
