import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { asTensorgateError, type TensorgateError, tgError } from '../errors.js';
import type { Registry } from '../registry/registry.js';
import { subfolders } from '../registry/repository.js';
import {
  type CallableSpec,
  callableOf,
  compileWorkflow,
  parseWorkflowDefinition,
  type WorkflowDefinition,
  type WorkflowInput,
  type WorkflowPlan,
} from './definition.js';

/**
 * The registered workflows: read from repository folders (workflow.json, workflow.yaml or
 * workflow.yml), kept in the registry so they survive restarts, and compiled against the models
 * and workflows registered now. A workflow that no longer compiles (a model it calls was removed
 * or changed its specs) stays listed as invalid, with the reason, until it compiles again.
 */

export const WORKFLOW_FILES = ['workflow.json', 'workflow.yaml', 'workflow.yml'] as const;

export function workflowFile(dir: string): string | undefined {
  return WORKFLOW_FILES.map((f) => join(dir, f)).find((p) => existsSync(p));
}

/** Lists workflow folders directly under a repository folder. */
export function scanWorkflows(root: string): string[] {
  const abs = resolve(root);
  if (!existsSync(abs) || !statSync(abs).isDirectory()) return [];
  return subfolders(abs).filter((dir) => workflowFile(dir) !== undefined);
}

/** Reads one workflow folder's definition file (JSON or YAML) and checks its schema. */
export function readWorkflowDir(dir: string): { dir: string; definition: WorkflowDefinition } {
  const abs = resolve(dir);
  const file = workflowFile(abs);
  if (!file)
    throw tgError('INVALID_WORKFLOW', `${abs} has no ${WORKFLOW_FILES.join(', ')}; a workflow folder holds one`, {
      dir: abs,
    });
  let raw: unknown;
  try {
    const text = readFileSync(file, 'utf8');
    raw = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw tgError('INVALID_WORKFLOW', `${file} does not parse: ${(err as Error).message}`, { source: file });
  }
  return { dir: abs, definition: parseWorkflowDefinition(raw, file) };
}

export interface WorkflowInfo {
  name: string;
  description: string;
  state: 'ready' | 'invalid';
  error?: string;
  inputs: WorkflowInput[];
  outputs: { name: string; dtype?: string; shape?: number[]; from: string[] }[];
  stages: { stage: string; model?: string; workflow?: string; version?: string; when?: string }[];
  /** Every model it runs, through nested workflows too. */
  models: string[];
  dir: string;
}

interface Entry {
  dir: string;
  definition: WorkflowDefinition;
  plan?: WorkflowPlan;
  error?: TensorgateError;
}

export class WorkflowCatalogue {
  private readonly entries = new Map<string, Entry>();
  private loaded = false;

  constructor(
    private readonly registry: Registry,
    /** A registered model's inputs and outputs; undefined when there is no such model. */
    private readonly modelSpec: (name: string) => CallableSpec | undefined,
    private readonly log: (message: string, fields: Record<string, unknown>) => void,
  ) {}

  /**
   * Registers every workflow already in the registry and every workflow folder in the repository,
   * then compiles them all; one that does not compile is logged and listed as invalid.
   */
  async loadAll(repository?: string): Promise<void> {
    this.loaded = true;
    const dirs = new Set(this.registry.listWorkflows().map((w) => w.dir));
    if (repository !== undefined) for (const dir of scanWorkflows(repository)) dirs.add(dir);
    for (const dir of dirs) {
      try {
        const { definition } = readWorkflowDir(dir);
        this.entries.set(definition.name, { dir, definition });
        await this.registry.upsertWorkflow(definition.name, dir, definition, 'sync');
      } catch (err) {
        this.log(`could not register workflow ${dir}: ${(err as Error).message}`, { dir });
      }
    }
    this.compileAll();
    for (const [name, entry] of this.entries)
      if (entry.error) this.log(`workflow "${name}" is invalid: ${entry.error.message}`, { workflow: name });
  }

  /** Registers (or replaces) one workflow folder; refuses it, unchanged, unless it compiles. */
  async register(dir: string): Promise<WorkflowInfo> {
    const { dir: abs, definition } = readWorkflowDir(dir);
    // A process that did not load the registry yet (the CLI) still sees the workflows this one may call.
    if (!this.loaded) await this.loadAll();
    const previous = this.entries.get(definition.name);
    this.entries.set(definition.name, { dir: abs, definition });
    this.compileAll();
    const entry = this.entries.get(definition.name) as Entry;
    if (entry.error) {
      const error = entry.error;
      if (previous) this.entries.set(definition.name, previous);
      else this.entries.delete(definition.name);
      this.compileAll();
      throw error;
    }
    try {
      await this.registry.upsertWorkflow(definition.name, abs, definition);
    } catch (err) {
      // Not recorded (the registry is unreachable, or the name was registered elsewhere meanwhile).
      if (previous) this.entries.set(definition.name, previous);
      else this.entries.delete(definition.name);
      this.compileAll();
      throw err;
    }
    return this.info(definition.name);
  }

  /**
   * Takes the workflows as the registry now holds them (another process registered one) and
   * compiles every workflow again, the models they call having possibly changed too.
   */
  followRegistry(): void {
    this.entries.clear();
    for (const record of this.registry.listWorkflows()) {
      try {
        const definition = parseWorkflowDefinition(record.definition, `registry entry ${record.name}`);
        this.entries.set(record.name, { dir: record.dir, definition });
      } catch (err) {
        this.log(`could not take workflow "${record.name}" from the registry: ${(err as Error).message}`, {
          workflow: record.name,
        });
      }
    }
    this.compileAll();
  }

  /** Compiles every workflow again: after a model was registered, changed or removed. */
  refresh(): void {
    this.compileAll();
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  names(): string[] {
    return [...this.entries.keys()].sort();
  }

  /** The plan to run; WORKFLOW_NOT_FOUND, or the reason it is invalid. */
  plan(name: string): WorkflowPlan {
    const entry = this.entries.get(name);
    if (!entry)
      throw tgError(
        'WORKFLOW_NOT_FOUND',
        `no workflow "${name}" is registered; list them with list_workflows${this.entries.size ? ` (there are ${this.names().join(', ')})` : ''}`,
        { name },
      );
    if (entry.plan) return entry.plan;
    throw entry.error ?? tgError('INVALID_WORKFLOW', `workflow "${name}" is not compiled`, { name });
  }

  info(name: string): WorkflowInfo {
    const entry = this.entries.get(name);
    if (!entry) this.plan(name); // throws WORKFLOW_NOT_FOUND
    const { definition, plan, error, dir } = entry as Entry;
    const when = (guards: WorkflowPlan['stages'][number]['guards']) =>
      guards
        .map((g) => {
          const condition = plan?.branches[g.branch]?.condition ?? '?';
          return g.taken ? condition : `not (${condition})`;
        })
        .join(' and ');
    return {
      name,
      description: definition.description,
      state: plan ? 'ready' : 'invalid',
      ...(error ? { error: error.message } : {}),
      inputs: definition.inputs,
      outputs: Object.entries(definition.outputs).map(([output, raw]) => {
        const spec = plan?.outputs.find((o) => o.name === output)?.spec;
        return {
          name: output,
          ...(spec ? { dtype: spec.dtype, shape: spec.shape } : {}),
          from: (Array.isArray(raw) ? raw : [raw]).map((a) => (typeof a === 'string' ? a : JSON.stringify(a.value))),
        };
      }),
      stages: (plan?.stages ?? []).map((s) => ({
        stage: s.name,
        [s.kind]: s.target,
        ...(s.version ? { version: s.version } : {}),
        ...(s.guards.length ? { when: when(s.guards) } : {}),
      })),
      models: plan?.models ?? [],
      dir,
    };
  }

  list(): WorkflowInfo[] {
    return this.names().map((n) => this.info(n));
  }

  /**
   * Compiles every entry, callees first: rounds until no more compile. What is left is invalid,
   * with the error of its last attempt, or the call cycle it is part of.
   */
  private compileAll(): void {
    for (const entry of this.entries.values()) {
      delete entry.plan;
      delete entry.error;
    }
    let pending = [...this.entries.keys()];
    let progress = true;
    while (pending.length > 0 && progress) {
      progress = false;
      const next: string[] = [];
      for (const name of pending) {
        const entry = this.entries.get(name) as Entry;
        try {
          entry.plan = compileWorkflow(entry.definition, {
            model: this.modelSpec,
            workflow: (w) => {
              const callee = this.entries.get(w);
              if (!callee) return undefined;
              if (callee.plan) return callableOf(callee.plan);
              throw tgError('INVALID_WORKFLOW', `workflow "${w}" is not valid yet`, { workflow: w }); // retried next round
            },
          });
          delete entry.error;
          progress = true;
        } catch (err) {
          entry.error = asTensorgateError(err);
          next.push(name);
        }
      }
      pending = next;
    }
    // Cycles first, so that a caller of a workflow in a cycle can quote the cycle.
    for (const name of pending) {
      const cycle = this.callCycle(name);
      if (cycle)
        (this.entries.get(name) as Entry).error = tgError(
          'INVALID_WORKFLOW',
          `workflow "${name}" calls itself: ${cycle.join(' -> ')}; workflows cannot recurse`,
          { workflow: name, cycle },
        );
    }
    // Then callers of invalid workflows, innermost first: each round settles one more level.
    for (let round = 0; round < pending.length; round++)
      for (const name of pending) {
        const entry = this.entries.get(name) as Entry;
        const callee = entry.error?.data.workflow as string | undefined;
        const calleeError = callee === undefined ? undefined : this.entries.get(callee)?.error;
        if (
          entry.error &&
          calleeError &&
          /is not valid yet$/.test(entry.error.message) &&
          !/is not valid yet$/.test(calleeError.message)
        )
          entry.error = tgError(
            'INVALID_WORKFLOW',
            `workflow "${name}" calls workflow "${callee}", which is invalid: ${calleeError.message}`,
            { workflow: name, callee },
          );
      }
  }

  /** A cycle of workflow calls through `name`, as names from it back to it; undefined if none. */
  private callCycle(name: string): string[] | undefined {
    const calls = (w: string): string[] => {
      const out: string[] = [];
      const walk = (steps: WorkflowDefinition['steps']) => {
        for (const step of steps) {
          if ('if' in step) {
            walk(step.then);
            walk(step.else ?? []);
          } else if (step.workflow !== undefined) out.push(step.workflow);
        }
      };
      walk(this.entries.get(w)?.definition.steps ?? []);
      return out;
    };
    const search = (w: string, trail: string[]): string[] | undefined => {
      for (const callee of calls(w)) {
        if (callee === name) return [...trail, callee];
        if (!trail.includes(callee)) {
          const found = search(callee, [...trail, callee]);
          if (found) return found;
        }
      }
      return undefined;
    };
    return search(name, [name]);
  }
}
