import type { MachineInfo } from '../mcp-overhead/machine.js';
import { type Distribution, round } from '../mcp-overhead/stats.js';

/** What bench/jobs/run.ts writes, and its docs/benchmarks.md section. */

export interface JobsFile {
  benchmark: 'jobs';
  date: string;
  machine: MachineInfo;
  /** max_pass_ms when the run set one (the server's default, 100 ms, otherwise). */
  config: { images: number; seconds: number; model: string; batch: number; max_pass_ms?: number };
  raw: { items: number; seconds: number; items_per_s: number; cores?: number };
  /** cores: CPU in use over the job, the gateway's and its workers' (runs before it was measured have none). */
  job: { seconds: number; items_per_s: number; ratio_to_raw: number; cores?: { gateway: number; workers: number } };
  /** The model without processing, fed tensors over OIP v2 binary (runs before it was measured have none). */
  predecoded_oip?: { clients: number; items_per_s: number; latency: Distribution };
  interactive: {
    alone: Distribution;
    during_job: Distribution;
    p99_ratio: number;
    /** The job's items/s during the closed loop (runs from before it was measured have none). */
    job_items_per_s_during?: number;
    /** Single calls 1.5 s apart while a job runs (runs from before it was measured have none). */
    sporadic_during_job?: Distribution;
  };
}

const TARGET_RATIO = 0.9;
const TARGET_P99 = 2;

export function renderJobs(files: unknown[]): string {
  const f = files.at(-1) as JobsFile;
  const m = f.machine;
  const { alone, during_job: during, sporadic_during_job: sporadic } = f.interactive;
  const met = (ok: boolean) => (ok ? 'yes' : '**no**');
  return [
    '## Batch jobs (bench/jobs)',
    '',
    `\`node --import tsx bench/jobs/run.ts\`: a job (\`start_job\`) over ${f.config.images} distinct 320x240 JPEG photos on \`${f.config.model}\` (the demo image model with processing: resize 256, crop 224, normalise, top 5; batches of ${f.config.batch}), from its start to \`completed\`, against one Python process looping over the same files by hand (Pillow, the transforms, batches of ${f.config.batch}, the forward pass). Then the model's tool called on one photo in a closed loop for ${f.config.seconds} s, without a job and while a second job runs, and, while that job runs, single calls 1.5 s apart, as an agent calls now and then: each finds the job at its full request size, sized to keep a pass within \`max_pass_ms\` (100 ms): after a call the job steps back for a second (one item at a time, sent once the model has had no other call in flight for 50 ms), so the closed loop mostly finds the model free of it. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| measure | raw loop | tensorgate job | ratio |',
    '| --- | ---: | ---: | ---: |',
    `| items/s | ${f.raw.items_per_s} | ${f.job.items_per_s} | ${f.job.ratio_to_raw} |`,
    ...(f.job.cores && f.raw.cores !== undefined
      ? [
          `| cores in use | ${f.raw.cores} | ${round(f.job.cores.gateway + f.job.cores.workers, 2)} (gateway ${f.job.cores.gateway}, worker ${f.job.cores.workers}) | |`,
        ]
      : []),
    ...(f.predecoded_oip
      ? [
          '',
          `For scale, the same model without processing, sent decoded 224x224 tensors over OIP v2 binary by ${f.predecoded_oip.clients} closed-loop clients and batched by the server, answers ${f.predecoded_oip.items_per_s} images/s: what tensorgate does with nothing left to decode (the job is at ${round(f.job.items_per_s / f.predecoded_oip.items_per_s, 2)}x of it).`,
        ]
      : []),
    '',
    "| interactive call (the model's tool, one photo) | p50 ms | p90 ms | p99 ms |",
    '| --- | ---: | ---: | ---: |',
    `| alone | ${alone.p50} | ${alone.p90} | ${alone.p99} |`,
    `| while a job runs | ${during.p50} | ${during.p90} | ${during.p99} |`,
    ...(sporadic
      ? [
          `| while a job runs, single calls 1.5 s apart (${sporadic.n}; max ${sporadic.max} ms) | ${sporadic.p50} | ${sporadic.p90} | ${sporadic.p99} |`,
        ]
      : []),
    ...(f.interactive.job_items_per_s_during !== undefined
      ? [
          '',
          `Meanwhile the job gives way: ${f.interactive.job_items_per_s_during} items/s during the closed loop (${f.job.items_per_s} alone), as it sends an item only in a pause of the calls or after a second without one.`,
        ]
      : []),
    '',
    '| target | goal | measured | met |',
    '| --- | --- | ---: | --- |',
    `| job throughput | at least ${TARGET_RATIO}x the raw loop | ${f.job.ratio_to_raw}x | ${met(f.job.ratio_to_raw >= TARGET_RATIO)} |`,
    `| interactive p99 during a job | at most ${TARGET_P99}x without | ${f.interactive.p99_ratio}x | ${met(f.interactive.p99_ratio <= TARGET_P99)} |`,
    '',
    ...(files.length > 1
      ? [
          'Every recorded run. Runs before 4d795a1 timed the job alone by polling `get_job` every 20 ms, which took CPU from the job on 2 cores (the gateway at 0.09 cores, the worker at 1.71-1.75); from 4d795a1 on, the bench waits in `start_job` (gateway 0.04, worker 1.89). From 5914eb9 on, a job stepping back for interactive calls waits for a pause in them.',
          '',
          '| run (UTC) | commit | raw items/s | job items/s | job / raw | interactive p99 during / alone |',
          '| --- | --- | ---: | ---: | ---: | ---: |',
          ...(files as JobsFile[]).map(
            (r) =>
              `| ${r.date.slice(0, 16).replace('T', ' ')} | ${r.machine.commit} | ${r.raw.items_per_s} | ${r.job.items_per_s} | ${r.job.ratio_to_raw} | ${r.interactive.p99_ratio} |`,
          ),
          '',
        ]
      : []),
  ].join('\n');
}
