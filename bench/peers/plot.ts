import { existsSync, writeFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { LABELS, type PeerBlock, type PeersResult, type SystemId } from './results.js';

/**
 * Throughput against p99 latency, one panel per model, one line per system through its
 * concurrency levels (1, 8, 32): up and to the left is better. Drawn as SVG, then turned into a
 * PNG by Chromium (the one the dashboard test uses) when it is installed.
 */

/** tensorgate in blues and greens, MCP dashed; the peers in warm colours. */
const STYLE: Record<Exclude<SystemId, 'raw'>, { colour: string; dash?: string }> = {
  'tensorgate-mcp-stdio-path': { colour: '#1f77b4', dash: '6 3' },
  'tensorgate-mcp-stdio-b64': { colour: '#6baed6', dash: '6 3' },
  'tensorgate-mcp-http-path': { colour: '#08519c', dash: '2 3' },
  'tensorgate-mcp-http-b64': { colour: '#9ecae1', dash: '2 3' },
  'tensorgate-oip-json': { colour: '#74c476' },
  'tensorgate-oip-binary': { colour: '#31a354' },
  'tensorgate-oip-shm': { colour: '#006d2c' },
  'kserve-oip-binary': { colour: '#d62728' },
  'fastmcp-list': { colour: '#7f7f7f', dash: '6 3' },
  'litserve-http': { colour: '#ff7f0e' },
  'litserve-mcp': { colour: '#ffbb78', dash: '6 3' },
  'ray-serve-http': { colour: '#9467bd' },
};

const PANEL = { width: 520, height: 400, left: 64, right: 16, top: 40, bottom: 48 };
const LEGEND_WIDTH = 270;

function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= lo && v <= hi) ticks.push(v);
    }
  return ticks;
}

const fmt = (v: number) => (v >= 1000 ? `${v / 1000}k` : String(v));
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

function panel(model: string, blocks: PeerBlock[], x0: number): string {
  const measured = blocks.filter((b) => b.system !== 'raw' && b.latency.n > 0);
  const raw = blocks.find((b) => b.system === 'raw');
  const p99s = measured.map((b) => b.latency.p99);
  const rates = measured.map((b) => b.throughput).concat(raw ? [raw.throughput] : []);
  const [xLo, xHi] = [Math.min(...p99s) / 1.3, Math.max(...p99s) * 1.3];
  const [yLo, yHi] = [Math.min(...rates) / 1.5, Math.max(...rates) * 1.5];
  const plotW = PANEL.width - PANEL.left - PANEL.right;
  const plotH = PANEL.height - PANEL.top - PANEL.bottom;
  const x = (v: number) => x0 + PANEL.left + (Math.log(v / xLo) / Math.log(xHi / xLo)) * plotW;
  const y = (v: number) => PANEL.top + plotH - (Math.log(v / yLo) / Math.log(yHi / yLo)) * plotH;
  const out = [
    `<text x="${x0 + PANEL.left}" y="24" class="title">${esc(model)} model</text>`,
    `<rect x="${x0 + PANEL.left}" y="${PANEL.top}" width="${plotW}" height="${plotH}" class="frame"/>`,
  ];
  for (const t of logTicks(xLo, xHi))
    out.push(
      `<line x1="${x(t)}" x2="${x(t)}" y1="${PANEL.top}" y2="${PANEL.top + plotH}" class="grid"/>`,
      `<text x="${x(t)}" y="${PANEL.top + plotH + 16}" class="tick" text-anchor="middle">${fmt(t)}</text>`,
    );
  for (const t of logTicks(yLo, yHi))
    out.push(
      `<line x1="${x0 + PANEL.left}" x2="${x0 + PANEL.left + plotW}" y1="${y(t)}" y2="${y(t)}" class="grid"/>`,
      `<text x="${x0 + PANEL.left - 6}" y="${y(t) + 4}" class="tick" text-anchor="end">${fmt(t)}</text>`,
    );
  out.push(
    `<text x="${x0 + PANEL.left + plotW / 2}" y="${PANEL.height - 10}" class="axis" text-anchor="middle">p99 latency, ms (log)</text>`,
    `<text transform="translate(${x0 + 16} ${PANEL.top + plotH / 2}) rotate(-90)" class="axis" text-anchor="middle">requests/s (log)</text>`,
  );
  if (raw)
    out.push(
      `<line x1="${x0 + PANEL.left}" x2="${x0 + PANEL.left + plotW}" y1="${y(raw.throughput)}" y2="${y(raw.throughput)}" class="raw"/>`,
      `<text x="${x0 + PANEL.left + plotW - 4}" y="${y(raw.throughput) - 5}" class="tick" text-anchor="end">raw forward, one at a time</text>`,
    );
  for (const [system, style] of Object.entries(STYLE)) {
    const points = measured.filter((b) => b.system === system).sort((a, b) => a.concurrency - b.concurrency);
    if (points.length === 0) continue;
    const path = points.map((b) => `${x(b.latency.p99).toFixed(1)},${y(b.throughput).toFixed(1)}`).join(' ');
    out.push(
      `<polyline points="${path}" fill="none" stroke="${style.colour}" stroke-width="2"${style.dash ? ` stroke-dasharray="${style.dash}"` : ''}/>`,
      ...points.map(
        (b) =>
          `<circle cx="${x(b.latency.p99).toFixed(1)}" cy="${y(b.throughput).toFixed(1)}" r="${2 + Math.log2(b.concurrency)}" fill="${style.colour}" stroke="#fff"/>`,
      ),
    );
  }
  return out.join('\n');
}

/** The chart as a standalone SVG document. */
export function peersSvg(r: PeersResult): string {
  const models = r.config.models;
  const width = PANEL.width * models.length + LEGEND_WIDTH;
  const systems = Object.keys(STYLE).filter((s) => r.blocks.some((b) => b.system === s)) as (keyof typeof STYLE)[];
  const legendX = PANEL.width * models.length + 8;
  const legend = systems.map((s, i) => {
    const { colour, dash } = STYLE[s];
    const yy = PANEL.top + 10 + i * 20;
    return `<line x1="${legendX}" x2="${legendX + 24}" y1="${yy}" y2="${yy}" stroke="${colour}" stroke-width="3"${dash ? ` stroke-dasharray="${dash}"` : ''}/><text x="${legendX + 30}" y="${yy + 4}" class="legend">${esc(LABELS[s])}</text>`;
  });
  const note = `marker size: concurrency ${r.config.concurrency.join(', ')}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${PANEL.height}" viewBox="0 0 ${width} ${PANEL.height}">`,
    '<style>text{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;fill:#222}.title{font-size:15px;font-weight:bold}.tick{font-size:11px;fill:#555}.axis{font-size:12px}.legend{font-size:12px}.frame{fill:none;stroke:#bbb}.grid{stroke:#eee}.raw{stroke:#222;stroke-dasharray:2 4}</style>',
    `<rect width="${width}" height="${PANEL.height}" fill="#fff"/>`,
    ...models.map((m, i) =>
      panel(
        m,
        r.blocks.filter((b) => b.model === m),
        i * PANEL.width,
      ),
    ),
    ...legend,
    `<text x="${legendX}" y="${PANEL.top + 20 + systems.length * 20}" class="tick">${esc(note)}</text>`,
    '</svg>',
  ].join('\n');
}

const CHROMIUM = process.env.TENSORGATE_CHROMIUM ?? '/usr/bin/chromium';

/**
 * Writes `<base>.svg`, and `<base>.png` when Chromium is installed (scripts/setup.sh --test puts
 * it there). Returns the files written.
 */
export async function writePeersPlot(r: PeersResult, base: string): Promise<string[]> {
  const svg = peersSvg(r);
  writeFileSync(`${base}.svg`, svg);
  if (!existsSync(CHROMIUM)) return [`${base}.svg`];
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  try {
    const width = Number(/width="(\d+)"/.exec(svg)?.[1]);
    const page = await browser.newPage({ viewport: { width, height: PANEL.height }, deviceScaleFactor: 2 });
    await page.setContent(`<html><body style="margin:0">${svg}</body></html>`);
    await page.screenshot({ path: `${base}.png`, clip: { x: 0, y: 0, width, height: PANEL.height } });
  } finally {
    await browser.close();
  }
  return [`${base}.svg`, `${base}.png`];
}
