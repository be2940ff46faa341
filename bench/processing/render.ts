import { LABELS, type ProcessingResult } from './results.js';

/** The docs/benchmarks.md section of bench/processing, rendered from its result files. */

export function renderProcessing(files: unknown[]): string {
  const runs = files as ProcessingResult[];
  const r = runs.at(-1) as ProcessingResult;
  const m = r.machine;
  const stages = Object.entries(r.stages);
  return [
    '## Image files in, labels out (bench/processing)',
    '',
    `\`node --import tsx bench/processing/run.ts\`: "photo path → top-5 labels" on the demo image model (ResNet-18 shape, \`.pt2\`, 2 threads) with processing (resize the shorter side to 256, crop 224, ImageNet mean and std, softmax top 5) and batching (${r.config.batching.max_batch_size} rows, ${r.config.batching.max_queue_delay_us} µs). The input is a ${r.config.photo} on disk, read and decoded on every call by every system. Closed-loop clients, ${r.config.seconds} s per block after ${r.config.warmup_ms / 1000} s of warm-up.${r.raw_batched_images_per_s !== undefined ? ` One Python process decoding 16 images and running them as one batch reaches ${r.raw_batched_images_per_s} images/s.` : ''}`,
    '',
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}${m.python ? `, Python ${m.python}, torch ${m.torch}` : ''}; commit ${m.commit}; run ${r.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    `Top 5 labels of the photo: raw pipeline ${r.answers.raw.join(', ') || '(not run)'}; tensorgate ${r.answers.tensorgate.join(', ') || '(not run)'}.`,
    '',
    '| system | concurrency | p50 ms | p90 ms | p99 ms | images/s |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...r.blocks.map(
      (b) =>
        `| ${LABELS[b.system]} | ${b.concurrency} | ${b.latency.p50} | ${b.latency.p90} | ${b.latency.p99} | ${b.throughput} |`,
    ),
    '',
    ...(stages.length
      ? [
          "Where a tensorgate call's time goes (its own stage timings, median of 21 quiet calls, ms):",
          '',
          `| system | ${Object.keys(stages[0]?.[1] ?? {}).join(' | ')} |`,
          `| --- | ${Object.keys(stages[0]?.[1] ?? {})
            .map(() => '---:')
            .join(' | ')} |`,
          ...stages.map(
            ([system, t]) => `| ${LABELS[system as keyof typeof LABELS] ?? system} | ${Object.values(t).join(' | ')} |`,
          ),
          '',
        ]
      : []),
    ...(r.gateway_cpu && Object.keys(r.gateway_cpu).length
      ? [
          `The gateway's own CPU per image (${Object.values(r.gateway_cpu)[0]?.calls} sequential calls after the blocks, from /proc): ${Object.entries(
            r.gateway_cpu,
          )
            .map(
              ([system, c]) =>
                `${LABELS[system as keyof typeof LABELS] ?? system} ${c.ms_per_image} ms, its main thread ${c.main_ms_per_image} ms`,
            )
            .join('; ')}.`,
          '',
        ]
      : []),
    '| target | goal | measured | allowed | met |',
    '| --- | --- | ---: | ---: | --- |',
    ...r.targets.map((t) => `| ${t.target} | ${t.goal} | ${t.measured} | ${t.allowed} | ${t.met ? 'yes' : '**no**'} |`),
    ...(r.skipped.length ? ['', ...r.skipped.map((s) => `- skipped ${s.system}: ${s.reason}`)] : []),
    '',
  ].join('\n');
}
