import { McpServer } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import { VERSION } from '../version.js';
import { registerJobTasks } from './job-tasks.js';
import { registerJobTools } from './job-tools.js';
import { registerModelTools } from './model-tools.js';
import { registerMonitorTools } from './monitor-tools.js';
import { registerResources } from './resources.js';
import { registerTools } from './tools.js';
import { registerTrainingTools } from './training-tools.js';
import { registerWorkflowTools } from './workflow-tools.js';

/**
 * Builds the MCP server over a Gateway. Cheap: HTTP builds one per request, stdio one per process.
 * A `live` server (one that outlives a request: stdio, an HTTP session) follows the models being
 * loaded and unloaded, adding and removing their own tools with `notifications/tools/list_changed`.
 */
export function createMcpServer(gateway: Gateway, { live = false }: { live?: boolean } = {}): McpServer {
  const server = new McpServer(
    { name: 'tensorgate', version: VERSION },
    {
      instructions:
        'tensorgate serves PyTorch models. Models that take image files have a tool of their own, named after the model (pass the path of the file). For the others call list_models, then describe_model to learn input names, dtypes and shapes, then infer. get_metrics shows latency, traffic and errors per model; explain_latency says where the time of a model (or of one request) goes and what to change. Outputs come back as summaries plus tensor:// handles you can pass as later inputs. list_workflows and run_workflow run a whole graph of models server-side in one call. To run a model over many files or texts, start_job runs it server-side and writes the answers to a file; get_job reports progress. Training runs attached with tensorgate.train: list_runs, get_run, then set_hyperparameters or control_run.',
    },
  );
  registerJobTasks(server, gateway); // before any tool: it wraps the tools/call handler
  registerTools(server, gateway);
  registerResources(server, gateway);
  registerWorkflowTools(server, gateway);
  registerJobTools(server, gateway);
  registerMonitorTools(server, gateway);
  registerTrainingTools(server, gateway.training, gateway.access);
  registerModelTools(server, gateway, { live });
  return server;
}
