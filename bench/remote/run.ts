/**
 * bench/remote: what the remote engine adds. The KServe model server (PyPI `kserve`, in
 * .tensorgate/kserve) serves a demo model; the same OIP v2 binary request goes to it directly and
 * through tensorgate, whose model of the same name is `engine: "remote"` pointing at it. Same run,
 * same client, alternating request by request at concurrency 1, so drift hits both alike.
 *
 *   node --import tsx bench/remote/run.ts [--requests 2000] [--image-requests 200] [--out FILE]
 *
 * Target: at most 0.5 ms added at p50 with binary tensors. Results go to
 * bench/results/remote-<time>.json; bench/report.ts renders them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { buildDemoModels } from '../batching/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, median, round } from '../mcp-overhead/stats.js';
import { binaryRequest, type Prepared, post } from '../oip/requests.js';
import { freePort, startTensorgate, stopProcess, waitHealthy } from '../peers/harness.js';
import type { RemoteFile, RemoteRow } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const KSERVE_PYTHON = join(ROOT, '.tensorgate', 'kserve', 'bin', 'python');
const TARGET_MS = 0.5;

const { values: opts } = parseArgs({
  options: {
    requests: { type: 'string', default: '2000' },
    'image-requests': { type: 'string', default: '200' },
    out: { type: 'string' },
  },
});

/** POSTs a prepared request; resolves with the response's OIP parameters (tensorgate reports its stage times there). */
function postReading(base: string, path: string, prepared: Prepared, agent: Agent): Promise<Record<string, number>> {
  return new Promise((done, fail) => {
    const req = request(
      `${base}${path}`,
      { method: 'POST', agent, headers: { ...prepared.headers, 'content-length': prepared.body.length } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode !== 200) return fail(new Error(`${path}: HTTP ${res.statusCode}`));
          const body = Buffer.concat(chunks);
          const header = Number(res.headers['inference-header-content-length'] ?? body.length);
          done((JSON.parse(body.subarray(0, header).toString('utf8')).parameters ?? {}) as Record<string, number>);
        });
      },
    );
    req.on('error', fail);
    req.end(prepared.body);
  });
}

const MODELS = [
  { name: 'tabular-classifier', input: 'features', output: 'probabilities', shape: [1, 4], requests: 'requests' },
  { name: 'image-classifier', input: 'image', output: 'logits', shape: [1, 3, 224, 224], requests: 'image-requests' },
] as const;

async function main(): Promise<void> {
  if (!existsSync(KSERVE_PYTHON)) throw new Error('KServe is missing: run bash scripts/install-python-clients.sh');
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, pythonExecutable(), demo);
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-remote-'));
  const servers: ChildProcess[] = [];
  const rows: RemoteRow[] = [];
  try {
    // One KServe server per model, and one tensorgate whose remote models point at them.
    const repo = join(work, 'models');
    mkdirSync(repo);
    const kserve: Record<string, string> = {};
    for (const m of MODELS) {
      const port = await freePort();
      const child = spawn(
        KSERVE_PYTHON,
        [join(ROOT, 'bench/oip/kserve_server.py'), '--model-dir', join(demo, m.name), '--port', String(port)],
        // A process group of its own, which stopProcess stops whole.
        { stdio: 'ignore', detached: true },
      );
      servers.push(child);
      kserve[m.name] = `http://127.0.0.1:${port}`;
      const local = JSON.parse(readFileSync(join(demo, m.name, 'config.json'), 'utf8'));
      mkdirSync(join(repo, m.name));
      writeFileSync(
        join(repo, m.name, 'config.json'),
        JSON.stringify({
          name: m.name,
          engine: 'remote',
          inputs: local.inputs,
          outputs: local.outputs,
          remote: { url: kserve[m.name] },
          versions: { '1': { format: 'remote' } },
        }),
      );
    }
    for (const m of MODELS) await waitHealthy(kserve[m.name] as string, `/v2/models/${m.name}/ready`, 60_000);
    const { child, base: tensorgate } = await startTensorgate(ROOT, repo, work);
    servers.push(child);
    for (const m of MODELS) await waitHealthy(tensorgate, `/v2/models/${m.name}/ready`);

    for (const m of MODELS) {
      const n = Number(opts[m.requests]);
      const count = m.shape.reduce<number>((a, b) => a * b, 1);
      const data = Float32Array.from({ length: count }, (_, i) => ((i * 7) % 13) / 13);
      const request = binaryRequest({ input: m.input, output: m.output, shape: [...m.shape], outputBytes: 0 }, data);
      const path = `/v2/models/${m.name}/infer`;
      const directAgent = new Agent({ keepAlive: true, maxSockets: 1 });
      const viaAgent = new Agent({ keepAlive: true, maxSockets: 1 });
      const direct: number[] = [];
      const via: number[] = [];
      const roundTrip: number[] = [];
      const warmup = Math.max(20, Math.round(n / 10));
      for (let i = 0; i < warmup + n; i++) {
        let t = performance.now();
        await post(kserve[m.name] as string, path, request, directAgent);
        const d = performance.now() - t;
        t = performance.now();
        const parameters = await postReading(tensorgate, path, request, viaAgent);
        const v = performance.now() - t;
        if (i < warmup) continue;
        direct.push(d);
        via.push(v);
        // The remote engine reports its call to KServe (encode, round trip, decode) as compute.
        roundTrip.push(parameters.compute_ms as number);
      }
      directAgent.destroy();
      viaAgent.destroy();
      const row: RemoteRow = {
        model: m.name,
        input_bytes: data.byteLength,
        requests: n,
        direct_ms: distribution(direct),
        via_tensorgate_ms: distribution(via),
        added_p50_ms: round(median(via) - median(direct)),
        paired_added_p50_ms: round(median(via.map((v, i) => v - (direct[i] as number)))),
        engine_call_ms: distribution(roundTrip),
        engine_added_p50_ms: round(median(roundTrip) - median(direct)),
      };
      rows.push(row);
      process.stdout.write(
        `${m.name} (${data.byteLength} B in): KServe directly p50 ${row.direct_ms.p50} ms p99 ${row.direct_ms.p99}; through tensorgate p50 ${row.via_tensorgate_ms.p50} ms p99 ${row.via_tensorgate_ms.p99}; added p50 ${row.added_p50_ms} ms (paired ${row.paired_added_p50_ms}; target <= ${TARGET_MS}); the engine's own call p50 ${row.engine_call_ms.p50} ms, ${row.engine_added_p50_ms} ms over direct\n`,
      );
    }
    const file: RemoteFile = {
      benchmark: 'remote',
      date: new Date().toISOString(),
      machine: machineInfo(ROOT),
      target_ms: TARGET_MS,
      rows,
    };
    const out =
      opts.out ?? join(ROOT, 'bench', 'results', `remote-${file.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
    writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
    process.stdout.write(`wrote ${out}\n`);
  } finally {
    for (const s of servers.reverse()) await stopProcess(s);
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
