import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import { checkWorkflowAccess } from '../workflows/run-workflow.js';

/**
 * A job is read (get_job, list_jobs) by callers who may read its model or workflow, and started,
 * cancelled or resumed by those who may run it: a workflow's models too, as run_workflow checks.
 */
export function jobAllowed(
  gateway: Gateway,
  caller: AuthInfo | undefined,
  action: 'read' | 'execute',
  job: { model?: string; workflow?: string },
): boolean {
  try {
    checkJobAccess(gateway, caller, action, job);
    return true;
  } catch {
    return false;
  }
}

export function checkJobAccess(
  gateway: Gateway,
  caller: AuthInfo | undefined,
  action: 'read' | 'execute',
  job: { model?: string; workflow?: string },
): void {
  if (job.model !== undefined) gateway.access.check(caller, action, 'model', job.model);
  else if (action === 'execute') checkWorkflowAccess(gateway, caller, job.workflow as string);
  else gateway.access.check(caller, 'read', 'workflow', job.workflow as string);
}
