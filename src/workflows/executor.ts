import { asTensorgateError, tgError } from '../errors.js';
import type { StageTimings } from '../gateway.js';
import type { Tensor } from '../tensor/tensor.js';
import type { PlannedBranch, PlannedStage, Ref, WorkflowPlan } from './definition.js';
import { evaluateCondition, tensorValue, type Value, type ValueTensor } from './expression.js';

/**
 * Runs a compiled workflow as a data-flow graph: every stage starts as soon as the tensors it
 * reads exist and the branch decisions it runs under are made, so independent stages run
 * concurrently whatever their order in the file. Intermediate tensors stay in this process as the
 * bytes the engine returned (one copy into the next worker's arena, no re-encoding). The first
 * failure aborts the stages still running and fails the workflow, naming the stage; the timeout
 * covers the whole graph.
 */

export interface StageRecord {
  stage: string;
  kind: 'model' | 'workflow';
  target: string;
  version?: string;
  /** pending while waiting or running; after a failure, cancelled (was running) or not_run. */
  status: 'pending' | 'ok' | 'skipped' | 'failed' | 'cancelled' | 'not_run';
  /** Milliseconds from the start of the workflow. */
  started_ms?: number;
  ended_ms?: number;
  /** Model stages: the stage times of the model call; workflow stages: run_ms only. */
  timings?: StageTimings | { total_ms: number };
  batch_size?: number;
  error?: string;
}

export interface BranchRecord {
  condition: string;
  /** true: `then` ran; false: `else` ran; null: not evaluated (an enclosing branch went the other way). */
  taken: boolean | null;
}

export type WorkflowOutputValue = { name: string; tensor: Tensor; from: string } | { name: string; value: unknown };

export interface WorkflowRun {
  outputs: WorkflowOutputValue[];
  stages: StageRecord[];
  branches: BranchRecord[];
  /** Milliseconds from start to the last stage's end. */
  run_ms: number;
}

/** What a stage calls: the gateway for models, the workflow catalogue for nested workflows. */
export interface StageCaller {
  model(
    target: string,
    version: string | undefined,
    inputs: Map<string, Tensor>,
    options: { signal: AbortSignal; timeoutMs: number; requestId: string },
  ): Promise<{
    version: string;
    outputs: { name: string; tensor: Tensor }[];
    timings: StageTimings;
    batch_size: number;
  }>;
  workflow(
    target: string,
    inputs: Map<string, Tensor>,
    options: { signal: AbortSignal; timeoutMs: number; requestId: string },
  ): Promise<WorkflowRun>;
}

export interface RunOptions {
  timeoutMs: number;
  signal?: AbortSignal | undefined;
  requestId: string;
}

const refKey = (r: Ref) => (r.stage === undefined ? r.tensor : `${r.stage}.${r.tensor}`);

export async function executeWorkflow(
  plan: WorkflowPlan,
  inputs: Map<string, Tensor>,
  caller: StageCaller,
  options: RunOptions,
): Promise<WorkflowRun> {
  const name = plan.definition.name;
  const start = performance.now();
  const since = () => Math.round((performance.now() - start) * 1000) / 1000;
  const tensors = new Map<string, Tensor>(inputs);
  const values = new Map<string, ValueTensor>();
  const records = new Map<string, StageRecord>(
    plan.stages.map((s) => [
      s.name,
      {
        stage: s.name,
        kind: s.kind,
        target: s.target,
        ...(s.version ? { version: s.version } : {}),
        status: 'pending',
      },
    ]),
  );
  const decisions: (boolean | null | undefined)[] = plan.branches.map(() => undefined);
  const done = new Set<string>();
  const started = new Set<string>();

  const abort = new AbortController();
  const deadline = setTimeout(() => abort.abort(timeoutError()), options.timeoutMs);
  const onCallerAbort = () => abort.abort(tgError('CANCELLED', `workflow "${name}" was cancelled by the caller`));
  if (options.signal?.aborted) onCallerAbort();
  options.signal?.addEventListener('abort', onCallerAbort, { once: true });

  function timeoutError() {
    return tgError(
      'TIMEOUT',
      `workflow "${name}" did not finish within ${options.timeoutMs} ms (${
        [...started]
          .filter((s) => !done.has(s))
          .map((s) => `"${s}"`)
          .join(', ') || 'no stage'
      } still running)`,
      { workflow: name, timeout_ms: options.timeoutMs },
    );
  }

  /** undefined: not decided yet; true: every guard holds; false: one does not (the step is skipped). */
  const guardsHold = (guards: PlannedStage['guards']): boolean | undefined => {
    let pending = false;
    for (const g of guards) {
      const d = decisions[g.branch];
      if (d === undefined) pending = true;
      else if (d !== g.taken) return false; // also null: an enclosing branch skipped this one
    }
    return pending ? undefined : true;
  };

  const lookup = (stage: string | undefined, tensor: string): Value => {
    const key = refKey({ stage, tensor });
    let v = values.get(key);
    if (!v) {
      v = tensorValue(tensors.get(key) as Tensor);
      values.set(key, v);
    }
    return v;
  };

  return new Promise<WorkflowRun>((resolvePromise, rejectPromise) => {
    let settled = false;
    let running = 0;

    const finish = (err?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      options.signal?.removeEventListener('abort', onCallerAbort);
      if (err !== undefined) {
        rejectPromise(err);
        return;
      }
      resolvePromise({
        outputs: plan.outputs.map((o) => {
          for (const alt of o.alternatives) {
            if ('value' in alt) return { name: o.name, value: alt.value };
            const t = tensors.get(refKey(alt.ref));
            if (t) return { name: o.name, tensor: t, from: refKey(alt.ref) };
          }
          // Compilation proved some alternative exists on every path.
          throw new Error(`workflow "${name}": output "${o.name}" has no value`);
        }),
        stages: [...records.values()],
        branches: plan.branches.map((b, i) => ({ condition: b.condition, taken: decisions[i] ?? null })),
        run_ms: since(),
      });
    };

    /** After a failure: what was running was cancelled, what had not started never will. */
    const closeRecords = () => {
      for (const r of records.values())
        if (r.status === 'pending') r.status = started.has(r.stage) ? 'cancelled' : 'not_run';
    };

    const fail = (stage: PlannedStage | PlannedBranch, err: unknown) => {
      if (settled) return;
      const cause = asTensorgateError(err);
      const where =
        'name' in stage
          ? `stage "${stage.name}" (${stage.kind} ${stage.target}${stage.version ? `@${stage.version}` : ''})`
          : `condition "${stage.condition}"`;
      closeRecords();
      const error = tgError(cause.code, `workflow "${name}", ${where}: ${cause.message}`, {
        ...cause.data,
        workflow: name,
        ...('name' in stage ? { stage: stage.name } : { condition: stage.condition }),
        stages: [...records.values()],
      });
      finish(error);
      abort.abort(error); // withdraws the stages still queued or running
    };

    abort.signal.addEventListener('abort', () => {
      if (settled) return;
      const reason = asTensorgateError(abort.signal.reason);
      closeRecords();
      finish(tgError(reason.code, reason.message, { ...reason.data, workflow: name, stages: [...records.values()] }));
    });

    const runStage = (stage: PlannedStage) => {
      started.add(stage.name);
      running++;
      const record = records.get(stage.name) as StageRecord;
      record.started_ms = since();
      const stageInputs = new Map(stage.inputs.map((i) => [i.name, tensors.get(refKey(i.from)) as Tensor]));
      const remaining = Math.max(1, options.timeoutMs - (performance.now() - start));
      const callOptions = {
        signal: abort.signal,
        timeoutMs: remaining,
        requestId: `${options.requestId}/${stage.name}`,
      };
      const call =
        stage.kind === 'model'
          ? caller.model(stage.target, stage.version, stageInputs, callOptions).then((r) => {
              record.version = r.version;
              record.timings = r.timings;
              record.batch_size = r.batch_size;
              return r.outputs;
            })
          : caller.workflow(stage.target, stageInputs, callOptions).then((r) => {
              record.timings = { total_ms: r.run_ms };
              return r.outputs.flatMap((o) => ('tensor' in o ? [{ name: o.name, tensor: o.tensor }] : []));
            });
      call.then(
        (outputs) => {
          if (settled) return; // the workflow already failed; its record says cancelled
          running--;
          record.ended_ms = since();
          record.status = 'ok';
          for (const o of outputs) tensors.set(`${stage.name}.${o.name}`, o.tensor);
          done.add(stage.name);
          pump();
        },
        (err: unknown) => {
          if (settled) return;
          running--;
          record.ended_ms = since();
          record.status = 'failed';
          record.error = asTensorgateError(err).code;
          fail(stage, err);
        },
      );
    };

    /** Settles whatever can be settled now: branch decisions, skipped steps, stages ready to start. */
    const pump = () => {
      if (settled) return;
      let progress = true;
      while (progress) {
        progress = false;
        for (const branch of plan.branches) {
          if (decisions[branch.id] !== undefined) continue;
          const hold = guardsHold(branch.guards);
          if (hold === false) {
            decisions[branch.id] = null;
            progress = true;
          } else if (hold === true && branch.after.every((s) => done.has(s))) {
            try {
              decisions[branch.id] = evaluateCondition(branch.condition, branch.expr, lookup);
            } catch (err) {
              fail(branch, err);
              return;
            }
            progress = true;
          }
        }
        for (const stage of plan.stages) {
          if (started.has(stage.name) || done.has(stage.name)) continue;
          const hold = guardsHold(stage.guards);
          if (hold === false) {
            (records.get(stage.name) as StageRecord).status = 'skipped';
            done.add(stage.name);
            progress = true;
          } else if (hold === true && stage.after.every((s) => done.has(s))) {
            runStage(stage);
            if (settled) return;
          }
        }
      }
      if (running === 0 && done.size === plan.stages.length) finish();
    };

    pump();
  });
}
