import type { FixedCostAbResult } from './results.js';

/** The docs/benchmarks.md section of bench/fixed-cost/ab.ts, rendered from its result files. */

function build(b: FixedCostAbResult['a']): string {
  return b.label ? `${b.commit} (${b.label})` : b.commit;
}

export function renderFixedCostAb(files: unknown[]): string {
  const runs = files as FixedCostAbResult[];
  const last = runs.at(-1) as FixedCostAbResult;
  const m = last.machine;
  return [
    '## Two builds side by side (bench/fixed-cost/ab.ts)',
    '',
    "`node --import tsx bench/fixed-cost/ab.ts --a CHECKOUT --b CHECKOUT`: the fixed-cost scenarios of two builds (two checkouts, e.g. a `git worktree` of the commit before a change) serving the same model repository at once, with their calls interleaved: every round runs each scenario as a block of sequential calls on one build and then on the other, the order alternating between rounds (ABBA), so that the drift of the machine (±20-40 µs at p50 between separate runs of `run.ts` on this VM) hits both alike. Each build is started first for half of the rounds: with both started once, the one started second measured 20-25 µs faster with the spinning worker when both were the same checkout. _B - A_: the median over rounds of the difference of the two blocks' medians; _B faster_: in how many rounds B's block median was the lower. A run of one build against itself shows what is noise: a difference no larger than its, in not many more than half of the rounds, is not a change.",
    '',
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}.`,
    '',
    ...runs.flatMap((r) => [
      `A ${build(r.a)} against B ${build(r.b)}; run ${r.date.slice(0, 16).replace('T', ' ')} UTC, ${r.config.calls} calls per block, ${r.config.rounds} rounds (${r.config.seconds} s).`,
      '',
      '| scenario | p50 A ms | p50 B ms | B - A µs | B faster |',
      '| --- | ---: | ---: | ---: | ---: |',
      ...r.results.map(
        (s) =>
          `| \`${s.scenario}\` | ${s.p50_a_ms} | ${s.p50_b_ms} | ${s.diff_us > 0 ? '+' : ''}${s.diff_us} | ${s.b_faster_rounds}/${r.config.rounds} |`,
      ),
      '',
    ]),
  ].join('\n');
}
