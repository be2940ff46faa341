import { z } from 'zod';
import { tgError } from '../errors.js';
import { type TensorSpec, TensorSpecSchema } from '../registry/model-config.js';
import type { ProcessedInputConfig } from '../registry/processing.js';
import { type Expr, parseExpression, referencesOf } from './expression.js';

/**
 * Workflow definitions (workflow.json or workflow.yaml in a repository folder) and their
 * compilation into a plan the executor runs. Compilation is where every mistake is caught, each
 * named by stage and field: unknown models or tensors, inputs that cannot fit a model's declared
 * dtype and shape, cycles, conditions that do not parse or read a tensor that may not exist, and
 * outputs that some path never produces.
 *
 *   {"name": "triage", "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
 *    "steps": [
 *      {"stage": "s", "model": "multi_out", "inputs": {"x": "x"}},
 *      {"if": "max(s.scores) > 0.5",
 *       "then": [{"stage": "plus", "model": "adder", "inputs": {"a": "x", "b": "s.scores"}}]}],
 *    "outputs": {"total": ["plus.sum", {"value": "uncertain"}], "scores": "s.scores"}}
 *
 * Stages run as soon as the tensors they read exist (data flow): independent stages run
 * concurrently whatever their order in the file. A branch's `then` stages run only when its
 * condition holds, its `else` stages only when it does not. An output lists alternatives: the
 * first whose stage ran is returned; `{"value": ...}` is a literal JSON value.
 */

const IDENTIFIER = /^[A-Za-z_]\w*$/;
/** `stage.tensor`, or the name of a workflow input. */
const REF = /^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$/;

const StageStepSchema = z
  .object({
    stage: z.string().regex(IDENTIFIER, 'stage names are letters, digits and "_" (they appear in references)'),
    model: z.string().min(1).optional(),
    workflow: z.string().min(1).optional(),
    version: z.string().regex(/^\d+$/).optional(),
    inputs: z.record(z.string(), z.string().regex(REF, 'an input is "stage.tensor" or a workflow input name')),
  })
  .strict()
  .refine((s) => (s.model === undefined) !== (s.workflow === undefined), {
    message: 'a stage calls exactly one "model" or "workflow"',
  });
type StageStep = z.infer<typeof StageStepSchema>;

interface BranchStep {
  if: string;
  then: Step[];
  else?: Step[] | undefined;
}
type Step = StageStep | BranchStep;

const StepSchema: z.ZodType<Step> = z.lazy(() =>
  z.union([
    StageStepSchema,
    // biome-ignore lint/suspicious/noThenProperty: "then" is the workflow format's word; it holds an array, never a function, so the object is not thenable.
    z.object({ if: z.string().min(1), then: z.array(StepSchema), else: z.array(StepSchema).optional() }).strict(),
  ]),
);

/**
 * A workflow input that is what an agent holds (an image or WAV file, a text), not a tensor: it
 * goes, as the files' bytes, to model stages whose processing takes that kind, and each model's
 * worker decodes it its own way.
 */
const ProcessedWorkflowInputSchema = z
  .object({
    name: z.string().regex(IDENTIFIER, 'input names are letters, digits and "_" (they appear in references)'),
    type: z.enum(['image', 'text', 'audio']),
    description: z.string().optional(),
  })
  .strict();
export type ProcessedWorkflowInput = z.infer<typeof ProcessedWorkflowInputSchema>;
export type WorkflowInput = TensorSpec | ProcessedWorkflowInput;

export function isProcessedInput(input: WorkflowInput): input is ProcessedWorkflowInput {
  return 'type' in input;
}

const LiteralSchema = z.object({ value: z.json() }).strict();
const AlternativeSchema = z.union([
  z.string().regex(REF, 'an output is "stage.tensor", an input name or {"value": ...}'),
  LiteralSchema,
]);

export const WorkflowDefinitionSchema = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'workflow names are lower-case: letters, digits, ".", "_", "-"'),
    description: z.string().default(''),
    inputs: z.array(z.union([ProcessedWorkflowInputSchema, TensorSpecSchema])).min(1),
    steps: z.array(StepSchema).min(1),
    outputs: z.record(z.string().min(1), z.union([AlternativeSchema, z.array(AlternativeSchema).min(1)])),
    /** Limit for the whole graph, in ms; a request may ask for less. Default: the server's. */
    timeout_ms: z.number().int().min(1).optional(),
  })
  .strict()
  .refine((w) => Object.keys(w.outputs).length > 0, { message: 'a workflow needs at least one output' });
export type WorkflowDefinition = z.infer<typeof WorkflowDefinitionSchema>;

/** What a stage can call: a model's or a workflow's declared inputs and outputs. */
export interface CallableSpec {
  /** The tensor inputs it takes. */
  inputs: TensorSpec[];
  /** The inputs it takes as files or texts (a model's processing), by name. */
  processed?: Record<string, ProcessedInputConfig>;
  outputs: TensorSpec[];
  /** The models it runs (itself, or every model of a workflow), for access checks. */
  models: string[];
  /** Workflows it runs, itself included, to refuse a workflow that calls itself. */
  workflows: string[];
  /** A model's versions, to check a stage's "version". */
  versions?: string[];
}

export interface Resolver {
  model(name: string): CallableSpec | undefined;
  workflow(name: string): CallableSpec | undefined;
}

/** One branch decision a stage depends on: branch `branch` went `taken` (then) or not (else). */
export interface Guard {
  branch: number;
  taken: boolean;
}

export interface PlannedStage {
  name: string;
  kind: 'model' | 'workflow';
  target: string;
  version: string | undefined;
  /** model input name -> where its tensor comes from. */
  inputs: { name: string; from: Ref }[];
  guards: Guard[];
  /** Stages whose outputs it reads. */
  after: string[];
}

export interface PlannedBranch {
  id: number;
  condition: string;
  expr: Expr;
  guards: Guard[];
  after: string[];
}

/** A tensor reference: a workflow input (stage undefined) or a stage's output. */
export interface Ref {
  stage: string | undefined;
  tensor: string;
}

export type PlannedOutput = { name: string; alternatives: ({ ref: Ref } | { value: unknown })[]; spec?: TensorSpec };

export interface WorkflowPlan {
  definition: WorkflowDefinition;
  /** The workflow's tensor inputs. */
  inputs: TensorSpec[];
  /**
   * Its inputs taken as files or texts, each with the processing of the first model input it
   * feeds: what the gateway checks an agent's value against before the workers decode it.
   */
  processed: Record<string, ProcessedInputConfig>;
  stages: PlannedStage[];
  branches: PlannedBranch[];
  outputs: PlannedOutput[];
  /** Every model the workflow runs, through nested workflows too. */
  models: string[];
  workflows: string[];
}

/** More branches than this would make checking every path slow; a workflow past it is refused. */
const MAX_BRANCHES = 16;

function invalid(workflow: string, where: string, message: string): never {
  throw tgError('INVALID_WORKFLOW', `workflow "${workflow}", ${where}: ${message}`, { workflow, where });
}

/** Parses raw JSON (or YAML already parsed) into a definition; every schema problem in one error. */
export function parseWorkflowDefinition(raw: unknown, source: string): WorkflowDefinition {
  const parsed = WorkflowDefinitionSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
  throw tgError('INVALID_WORKFLOW', `${source} is not a valid workflow: ${issues.join('; ')}`, { source, issues });
}

const isBranch = (step: Step): step is BranchStep => 'if' in step;

function parseRef(text: string): Ref {
  const [first, second] = text.split('.') as [string, string | undefined];
  return second === undefined ? { stage: undefined, tensor: first } : { stage: first, tensor: second };
}

const showRef = (r: Ref) => (r.stage === undefined ? r.tensor : `${r.stage}.${r.tensor}`);

function shapesFit(from: number[], to: number[]): boolean {
  return from.length === to.length && from.every((d, i) => d === -1 || to[i] === -1 || d === to[i]);
}

/** Whether everything `required` decides is decided the same way in `held`. */
function covered(required: Guard[], held: Guard[]): boolean {
  return required.every((g) => held.some((h) => h.branch === g.branch && h.taken === g.taken));
}

/** Compiles a definition against the models and workflows it calls; throws INVALID_WORKFLOW. */
export function compileWorkflow(definition: WorkflowDefinition, resolver: Resolver): WorkflowPlan {
  const wf = definition.name;
  const inputs = new Map<string, TensorSpec>();
  const processedInputs = new Map<string, ProcessedWorkflowInput>();
  for (const input of definition.inputs) {
    if (inputs.has(input.name) || processedInputs.has(input.name))
      invalid(wf, `input "${input.name}"`, 'another input has this name');
    if (isProcessedInput(input)) processedInputs.set(input.name, input);
    else inputs.set(input.name, input);
  }
  const processed: Record<string, ProcessedInputConfig> = {};
  const stages: PlannedStage[] = [];
  const branches: PlannedBranch[] = [];
  const outputsOf = new Map<string, Map<string, TensorSpec>>();
  const models = new Set<string>();
  const workflows = new Set<string>([wf]);
  if (resolver.model(wf)) invalid(wf, 'name', 'a model has this name; OIP v2 serves both under /v2/models/NAME');

  // Pass 1: every stage, its callee and the guards it runs under.
  const collect = (steps: Step[], guards: Guard[], path: string) => {
    steps.forEach((step, i) => {
      if (isBranch(step)) {
        const id = branches.length;
        let expr: Expr;
        try {
          expr = parseExpression(step.if);
        } catch (err) {
          invalid(wf, `${path}[${i}].if`, (err as Error).message);
        }
        branches.push({ id, condition: step.if, expr, guards, after: [] });
        collect(step.then, [...guards, { branch: id, taken: true }], `${path}[${i}].then`);
        collect(step.else ?? [], [...guards, { branch: id, taken: false }], `${path}[${i}].else`);
        return;
      }
      const where = `stage "${step.stage}"`;
      if (outputsOf.has(step.stage)) invalid(wf, where, 'another stage has this name');
      if (inputs.has(step.stage) || processedInputs.has(step.stage))
        invalid(wf, where, 'a workflow input has this name; references would be ambiguous');
      const kind = step.model !== undefined ? 'model' : 'workflow';
      const target = (step.model ?? step.workflow) as string;
      const callee = kind === 'model' ? resolver.model(target) : resolver.workflow(target);
      if (!callee) invalid(wf, `${where}, ${kind}`, `no ${kind} "${target}" is registered`);
      if (step.version !== undefined && !callee.versions?.includes(step.version))
        invalid(
          wf,
          `${where}, version`,
          `${kind} "${target}" has no version ${step.version}${callee.versions ? ` (it has ${callee.versions.join(', ')})` : ''}`,
        );
      if (callee.workflows.includes(wf))
        invalid(wf, `${where}, workflow`, `"${target}" calls "${wf}": workflows cannot recurse`);
      for (const m of callee.models) models.add(m);
      for (const w of callee.workflows) workflows.add(w);
      outputsOf.set(step.stage, new Map(callee.outputs.map((o) => [o.name, o])));
      stages.push({
        name: step.stage,
        kind,
        target,
        version: step.version,
        inputs: Object.entries(step.inputs).map(([name, from]) => ({ name, from: parseRef(from) })),
        guards,
        after: [],
      });
      // Inputs are checked in pass 2, once every stage's outputs are known; the callee's spec is kept here.
      (stages.at(-1) as PlannedStage & { spec?: CallableSpec }).spec = callee;
    });
  };
  collect(definition.steps, [], 'steps');
  if (branches.length > MAX_BRANCHES)
    invalid(wf, 'steps', `${branches.length} branches; at most ${MAX_BRANCHES} are allowed`);
  const guardsOf = new Map(stages.map((s) => [s.name, s.guards]));

  /** The spec of a reference read where `guards` hold; throws unless it exists there. */
  const resolve = (ref: Ref, guards: Guard[], where: string): TensorSpec => {
    if (ref.stage === undefined) {
      const file = processedInputs.get(ref.tensor);
      if (file)
        invalid(
          wf,
          where,
          `"${ref.tensor}" is ${file.type === 'image' ? 'an image' : `a ${file.type === 'audio' ? 'recording' : 'text'}`} input, not a tensor: only a model stage whose processing takes ${file.type} reads it`,
        );
      const spec = inputs.get(ref.tensor);
      if (!spec)
        invalid(
          wf,
          where,
          `"${ref.tensor}" is not a workflow input (they are ${[...inputs.keys(), ...processedInputs.keys()].join(', ')}); a stage output is "stage.tensor"`,
        );
      return spec;
    }
    const outs = outputsOf.get(ref.stage);
    if (!outs) invalid(wf, where, `no stage "${ref.stage}"`);
    const spec = outs.get(ref.tensor);
    if (!spec)
      invalid(wf, where, `stage "${ref.stage}" has no output "${ref.tensor}" (it has ${[...outs.keys()].join(', ')})`);
    if (!covered(guardsOf.get(ref.stage) as Guard[], guards))
      invalid(
        wf,
        where,
        `"${showRef(ref)}" is not produced on every path that reaches here (stage "${ref.stage}" runs only under a branch this does not)`,
      );
    return spec;
  };

  // Pass 2: inputs against the callee's declared specs, and the data dependencies.
  for (const stage of stages as (PlannedStage & { spec: CallableSpec })[]) {
    const where = `stage "${stage.name}"`;
    const given = new Set(stage.inputs.map((i) => i.name));
    const takesFiles = stage.spec.processed ?? {};
    for (const name of [...stage.spec.inputs.map((s) => s.name), ...Object.keys(takesFiles)])
      if (!given.has(name)) invalid(wf, `${where}, inputs`, `${stage.kind} "${stage.target}" needs input "${name}"`);
    for (const { name, from } of stage.inputs) {
      const file = takesFiles[name];
      if (file) {
        const fed = from.stage === undefined ? processedInputs.get(from.tensor) : undefined;
        if (fed?.type !== file.type)
          invalid(
            wf,
            `${where}, inputs.${name}`,
            `${stage.target} takes ${file.type === 'text' ? 'a text' : `${file.type} files`} as "${name}": feed it a workflow input declared {"name": ..., "type": "${file.type}"}, not ${fed ? `a ${fed.type} input` : `"${showRef(from)}"`}`,
          );
        processed[from.tensor] ??= file;
        continue;
      }
      const want = stage.spec.inputs.find((s) => s.name === name);
      if (!want)
        invalid(
          wf,
          `${where}, inputs.${name}`,
          `${stage.kind} "${stage.target}" has no input "${name}" (it takes ${[...stage.spec.inputs.map((s) => s.name), ...Object.keys(takesFiles)].join(', ')})`,
        );
      const have = resolve(from, stage.guards, `${where}, inputs.${name}`);
      if (have.dtype !== want.dtype)
        invalid(
          wf,
          `${where}, inputs.${name}`,
          `"${showRef(from)}" is ${have.dtype}; ${stage.target} takes ${want.dtype}`,
        );
      if (!shapesFit(have.shape, want.shape))
        invalid(
          wf,
          `${where}, inputs.${name}`,
          `"${showRef(from)}" has shape [${have.shape}]; ${stage.target} takes [${want.shape}]`,
        );
      if (from.stage !== undefined && !stage.after.includes(from.stage)) stage.after.push(from.stage);
    }
    delete (stage as Partial<typeof stage>).spec;
  }
  branches.forEach((branch, i) => {
    for (const ref of referencesOf(branch.expr)) {
      resolve(ref, branch.guards, `branch ${i} ("${branch.condition}")`);
      if (ref.stage !== undefined && !branch.after.includes(ref.stage)) branch.after.push(ref.stage);
    }
  });
  // A stage also waits for the conditions it runs under, and so for what they read.
  for (const stage of stages)
    for (const g of stage.guards)
      for (const s of (branches[g.branch] as PlannedBranch).after) if (!stage.after.includes(s)) stage.after.push(s);
  rejectCycles(wf, stages);

  const outputs = Object.entries(definition.outputs).map(([name, raw]) => {
    const alternatives: PlannedOutput['alternatives'] = (Array.isArray(raw) ? raw : [raw]).map((a) =>
      typeof a === 'string' ? { ref: parseRef(a) } : { value: a.value },
    );
    let spec: TensorSpec | undefined;
    for (const alt of alternatives)
      if ('ref' in alt) {
        const s = resolveAnywhere(alt.ref);
        spec ??= s;
      }
    checkProducedOnEveryPath(name, alternatives);
    return { name, alternatives, ...(spec ? { spec: { ...spec, name } } : {}) };
  });

  function resolveAnywhere(ref: Ref): TensorSpec {
    // Outputs may name a stage that runs on some paths only; that is what alternatives are for.
    const guards = ref.stage === undefined ? [] : (guardsOf.get(ref.stage) ?? []);
    return resolve(ref, guards, `outputs, "${showRef(ref)}"`);
  }

  function checkProducedOnEveryPath(name: string, alternatives: PlannedOutput['alternatives']): void {
    if (alternatives.some((a) => 'value' in a || a.ref.stage === undefined)) return;
    for (let path = 0; path < 2 ** branches.length; path++) {
      const held = branches.map((b) => ({ branch: b.id, taken: ((path >> b.id) & 1) === 1 }));
      const available = alternatives.some(
        (a) => 'ref' in a && covered(guardsOf.get(a.ref.stage as string) ?? [], held),
      );
      if (!available) {
        const taken = held
          .filter((h) => stagesUnder(h.branch))
          .map((h) => `"${(branches[h.branch] as PlannedBranch).condition}" ${h.taken ? 'true' : 'false'}`)
          .join(', ');
        invalid(wf, `outputs.${name}`, `not produced when ${taken}; add an alternative, e.g. ["...", {"value": null}]`);
      }
    }
  }

  function stagesUnder(branch: number): boolean {
    return stages.some((s) => s.guards.some((g) => g.branch === branch));
  }

  for (const name of processedInputs.keys())
    if (!(name in processed)) invalid(wf, `input "${name}"`, 'no model stage takes it');
  return {
    definition,
    inputs: [...inputs.values()],
    processed,
    stages,
    branches,
    outputs,
    models: [...models],
    workflows: [...workflows],
  };
}

function rejectCycles(wf: string, stages: PlannedStage[]): void {
  const byName = new Map(stages.map((s) => [s.name, s]));
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (name: string, trail: string[]) => {
    if (state.get(name) === 'done') return;
    if (state.get(name) === 'visiting') {
      const cycle = [...trail.slice(trail.indexOf(name)), name];
      invalid(wf, `stage "${name}"`, `its inputs form a cycle: ${cycle.join(' -> ')}`);
    }
    state.set(name, 'visiting');
    for (const dep of byName.get(name)?.after ?? []) visit(dep, [...trail, name]);
    state.set(name, 'done');
  };
  for (const s of stages) visit(s.name, []);
}

/** A compiled workflow seen from outside: what a stage of another workflow may call. */
export function callableOf(plan: WorkflowPlan): CallableSpec {
  return {
    inputs: plan.inputs,
    ...(Object.keys(plan.processed).length ? { processed: plan.processed } : {}),
    // An output that may be a literal is not a tensor another stage could read.
    outputs: plan.outputs.flatMap((o) => (o.spec && !o.alternatives.some((a) => 'value' in a) ? [o.spec] : [])),
    models: plan.models,
    workflows: plan.workflows,
  };
}
