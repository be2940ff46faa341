import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { elapsed, Progress, type ProgressStream } from '../../../src/cli/progress.js';

/** The CLI's progress indicator: silent off a terminal, a throttled one-line bar on one. */

function stream(isTTY: boolean, columns = 60): ProgressStream & { chunks: string[] } {
  const chunks: string[] = [];
  return {
    isTTY,
    columns,
    chunks,
    write(chunk: string) {
      chunks.push(chunk);
      return true;
    },
  };
}

describe('Progress', () => {
  it('writes nothing when the stream is not a terminal, but lets log lines through', () => {
    const out = stream(false);
    const progress = new Progress({ stream: out, total: 3, label: 'loading', tick: false });
    assert.equal(progress.enabled, false);
    progress.update({ done: 1, detail: 'adder@1' });
    progress.tick();
    let logged = 0;
    progress.interrupt(() => logged++);
    progress.stop('done');
    assert.deepEqual(out.chunks, []);
    assert.equal(logged, 1);
  });

  it('draws a bar with the count and elapsed time on a terminal, within its width', () => {
    const out = stream(true, 64);
    const progress = new Progress({ stream: out, total: 4, label: 'loading models', tick: false, intervalMs: 0 });
    progress.update({ done: 1, detail: 'image-classifier@2 1.2s and a detail far too long for the line' });
    const drawn = out.chunks.at(-1) as string;
    assert.ok(drawn.startsWith('\r\x1b[K'), 'redraws over the same line');
    const line = drawn.slice('\r\x1b[K'.length);
    assert.match(line, /^loading models \[█{5}░{15}\] 1\/4 \d+\.\ds image-class/);
    assert.ok([...line].length <= 63, line);
    assert.ok(line.endsWith('…'));
    progress.tick();
    assert.match(out.chunks.at(-1) as string, /\] 2\/4 /);
    progress.stop();
    assert.equal(out.chunks.at(-1), '\r\x1b[K', 'clears its line when done');
    const before = out.chunks.length;
    progress.update({ done: 3 });
    assert.equal(out.chunks.length, before, 'silent once stopped');
  });

  it('throttles redraws', () => {
    const out = stream(true);
    const progress = new Progress({ stream: out, total: 1000, tick: false, intervalMs: 60_000 });
    for (let i = 1; i <= 1000; i++) progress.update({ done: i });
    assert.equal(out.chunks.length, 1);
    progress.stop();
  });

  it('shows a spinner when there is no total, and puts log lines above itself', () => {
    const out = stream(true);
    const progress = new Progress({ stream: out, label: 'registering', tick: false, intervalMs: 0 });
    progress.update({ detail: 'validating' });
    assert.match(out.chunks.at(-1) as string, /registering [⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \d+\.\ds validating$/);
    const log = progress.wrap((line) => out.write(`${line}\n`));
    out.chunks.length = 0;
    log('ready adder@1');
    assert.equal(out.chunks[0], '\r\x1b[K', 'clears the indicator first');
    assert.equal(out.chunks[1], 'ready adder@1\n');
    assert.ok(out.chunks[2]?.startsWith('\r\x1b[Kregistering'), 'then draws it again below');
    progress.stop('registered');
    assert.equal(out.chunks.at(-1), 'registered\n');
  });

  it('writes elapsed times compactly', () => {
    assert.equal(elapsed(4200), '4.2s');
    assert.equal(elapsed(65_000), '1m05s');
  });
});
