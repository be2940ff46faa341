import { readdirSync, readFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { join } from 'node:path';
import { median, round } from './stats.js';

/**
 * Reads a V8 `.cpuprofile` (node --cpu-prof) and attributes the samples taken inside given time
 * windows. Sample timestamps are CLOCK_MONOTONIC microseconds, the same clock as
 * process.hrtime(), so the client can name windows in its own clock and the server's profile can
 * be cut to them: only the calls of one scenario are counted, not start-up or model loading.
 */

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Window {
  startUs: number;
  endUs: number;
  calls: number;
}

export interface FrameCost {
  frame: string;
  category: string;
  ms_per_call: number;
}

export interface ProfileSummary {
  calls: number;
  /** Busy (non-idle) main-thread time per call, from samples. */
  busy_ms_per_call: number;
  /** Busy time by pipeline step: each sample goes to the innermost frame that names a step. */
  by_step: Record<string, number>;
  by_category: Record<string, number>;
  top_self: FrameCost[];
  top_inclusive: FrameCost[];
}

export function nowUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** Profiles this process (the benchmark client) through the inspector, like --cpu-prof does for the servers. */
export class SelfProfiler {
  private readonly session = new Session();

  private post(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    return new Promise((resolve, reject) =>
      this.session.post(method, params, (err, result) => (err ? reject(err) : resolve(result))),
    );
  }

  async start(intervalUs = 100): Promise<void> {
    this.session.connect();
    await this.post('Profiler.enable');
    await this.post('Profiler.setSamplingInterval', { interval: intervalUs });
    await this.post('Profiler.start');
  }

  async stop(): Promise<CpuProfile> {
    const { profile } = (await this.post('Profiler.stop')) as { profile: CpuProfile };
    this.session.disconnect();
    return profile;
  }
}

export function loadProfile(dir: string): CpuProfile {
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  if (files.length !== 1) throw new Error(`expected one .cpuprofile in ${dir}, found ${files.length}`);
  return JSON.parse(readFileSync(join(dir, files[0] as string), 'utf8')) as CpuProfile;
}

function shortUrl(url: string): string {
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  const dist = url.lastIndexOf('/dist/');
  if (dist >= 0) return `tensorgate/${url.slice(dist + 1)}`;
  return url.replace(/^file:\/\//, '');
}

export function categoryOf(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (functionName === '(garbage collector)') return 'gc';
  if (functionName === '(program)') return 'program (native, unattributed)';
  if (url.includes('@modelcontextprotocol/')) return 'mcp sdk';
  if (url.includes('node_modules/zod')) return 'zod';
  if (url.includes('node_modules/ajv')) return 'ajv';
  if (url.includes('node_modules/')) return 'other deps';
  if (url.includes('/dist/')) return 'tensorgate';
  if (url.includes('/bench/')) return 'benchmark harness';
  if (url.startsWith('node:')) return 'node core';
  if (url === '') return `builtin ${functionName || '(anonymous)'}`;
  return 'other';
}

const isSdk = (f: CallFrame) => f.url.includes('@modelcontextprotocol/');

/** Pipeline steps recognised by a frame on the stack; the innermost match wins. The last GENERIC are fallbacks. */
const STEPS: [string, (f: CallFrame) => boolean][] = [
  ['garbage collection', (f) => f.functionName === '(garbage collector)'],
  ['tensorgate Gateway.infer', (f) => f.functionName === 'infer' && f.url.endsWith('/dist/gateway.js')],
  ['tensorgate createMcpServer (per HTTP request)', (f) => f.functionName === 'createMcpServer'],
  [
    'sdk stdio framing (ReadBuffer concat/scan/toString)',
    (f) => isSdk(f) && (f.functionName === 'append' || f.functionName === 'readMessage'),
  ],
  ['sdk JSON.parse + JSON-RPC zod validation', (f) => isSdk(f) && f.functionName === 'deserializeMessage'],
  ['sdk node adapter: Node request to web Request', (f) => isSdk(f) && f.functionName === 'toWebRequest'],
  ['sdk HTTP body read + TextDecoder', (f) => isSdk(f) && f.functionName === 'readRequestBody'],
  ['sdk HTTP classify (JSON.parse, routing)', (f) => isSdk(f) && f.functionName === 'classifyEntryRequest'],
  ['sdk tool dispatch (args + result validation)', (f) => isSdk(f) && f.functionName === 'executeToolHandler'],
  [
    'sdk serialize + write response',
    (f) => isSdk(f) && (f.functionName === 'serializeMessage' || f.functionName === 'send'),
  ],
  [
    'sdk per-request server lifecycle (HTTP)',
    (f) => isSdk(f) && /^(handle|serveLegacyRoute|teardown|completeExchange|close|connect)$/.test(f.functionName),
  ],
  ['node http (parse, write, sockets)', (f) => f.url.startsWith('node:_http') || f.url === 'node:net'],
  [
    'node streams + pipes',
    (f) => f.url.startsWith('node:internal/streams') || f.url === 'node:internal/stream_base_commons',
  ],
];

/** Generic steps name where the time went only when no specific step is on the stack. */
const GENERIC = 2;

function stepOf(node: ProfileNode, byId: Map<number, ProfileNode>, parent: Map<number, number>): string {
  for (const steps of [STEPS.slice(0, -GENERIC), STEPS.slice(-GENERIC)]) {
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = (byId.get(id) as ProfileNode).callFrame;
      for (const [name, match] of steps) if (match(frame)) return name;
    }
  }
  return 'other (event loop, microtasks, timers)';
}

function frameKey(frame: CallFrame): string {
  const name = frame.functionName || '(anonymous)';
  return frame.url ? `${name} ${shortUrl(frame.url)}:${frame.lineNumber + 1}` : name;
}

/** Attributes the samples inside `windows` (all calls of one scenario) to frames and categories. */
export function summarize(profile: CpuProfile, windows: readonly Window[], top = 25): ProfileSummary {
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const self = new Map<string, { category: string; us: number }>();
  const inclusive = new Map<string, { category: string; us: number }>();
  const categories = new Map<string, number>();
  const steps = new Map<string, number>();
  let busyUs = 0;
  // Every sample counts as one median sampling interval: an estimate of on-CPU time. Weighting a
  // sample by the gap to the next one would charge it with time the thread spent descheduled
  // (on 2 cores the model's threads often hold both), roughly doubling the figures.
  const weight = median(profile.timeDeltas);
  let t = profile.startTime;
  const sorted = [...windows].sort((a, b) => a.startUs - b.startUs);
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    if (!sorted.some((w) => t >= w.startUs && t <= w.endUs)) continue;
    const node = byId.get(profile.samples[i] as number);
    if (!node || node.callFrame.functionName === '(idle)') continue;
    busyUs += weight;
    const category = categoryOf(node.callFrame);
    categories.set(category, (categories.get(category) ?? 0) + weight);
    const step = stepOf(node, byId, parent);
    steps.set(step, (steps.get(step) ?? 0) + weight);
    const key = frameKey(node.callFrame);
    const s = self.get(key) ?? { category, us: 0 };
    s.us += weight;
    self.set(key, s);
    const seen = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const frame = (byId.get(id) as ProfileNode).callFrame;
      if (!frame.functionName || frame.functionName.startsWith('(')) continue;
      const k = frameKey(frame);
      if (seen.has(k)) continue;
      seen.add(k);
      const inc = inclusive.get(k) ?? { category: categoryOf(frame), us: 0 };
      inc.us += weight;
      inclusive.set(k, inc);
    }
  }
  const calls = windows.reduce((a, w) => a + w.calls, 0);
  const perCall = (us: number) => round(us / 1000 / Math.max(1, calls));
  const rank = (m: Map<string, { category: string; us: number }>) =>
    [...m.entries()]
      .sort((a, b) => b[1].us - a[1].us)
      .slice(0, top)
      .map(([frame, v]) => ({ frame, category: v.category, ms_per_call: perCall(v.us) }));
  const ranked = (m: Map<string, number>) =>
    Object.fromEntries([...m.entries()].sort((a, b) => b[1] - a[1]).map(([k, us]) => [k, perCall(us)]));
  return {
    calls,
    busy_ms_per_call: perCall(busyUs),
    by_step: ranked(steps),
    by_category: ranked(categories),
    top_self: rank(self),
    top_inclusive: rank(inclusive),
  };
}
