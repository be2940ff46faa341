import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPVersion, Instance } from 'find-my-way';
import { tgError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { errorAnswer, jsonAnswer, writeAnswer } from '../http/answer.js';
import { readBody, readBodyChunks } from '../http/body.js';
import { checkJobAccess, jobAllowed } from '../jobs/access.js';
import { JobSpecSchema } from '../jobs/spec.js';
import type { ObjectKind, Permission } from '../security/rbac.js';
import { answerInfer } from './infer-call.js';
import { HEADER_LENGTH } from './infer-codec.js';
import { checkVersion, metadataFor, readinessFor, repositoryIndex, serverMetadata, serverReady } from './service.js';
import { SharedMemoryRegistry } from './shared-memory.js';

/**
 * Open Inference Protocol v2 REST (the KServe v2 / Triton HTTP protocol) over the Gateway: health,
 * server and model metadata, readiness, infer (JSON and binary tensor data), and the model
 * repository extension. Every failure is the protocol's error body, `{"error": "CODE: message"}`,
 * with the code's HTTP status; the server goes on serving.
 */

type Params = Record<string, string | undefined>;
type Handler = (req: IncomingMessage, res: ServerResponse, params: Params) => Promise<void> | void;

function send(res: ServerResponse, status: number, body?: unknown): void {
  writeAnswer(res, jsonAnswer(status, body));
}

function sendError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  writeAnswer(res, errorAnswer(err));
}

/**
 * Registers the /v2 routes; the returned function unregisters every shared-memory region.
 * `regions` are the registered system shared-memory regions (shared with the OIP data plane).
 */
export function registerOipRoutes(
  router: Instance<HTTPVersion.V1>,
  gateway: Gateway,
  regions = new SharedMemoryRegistry(),
): () => void {
  const on = (method: 'GET' | 'POST', path: string, handler: Handler) => {
    router.on(method, path, (req, res, params) => {
      // async: a handler that throws before its first await is answered like any other failure.
      (async () => handler(req, res, params))().catch((err: unknown) => {
        // A body left unread would otherwise keep the socket busy; drain it before answering.
        req.resume();
        gateway.recordFailure(err, { adapter: 'oip-rest' });
        sendError(res, err);
      });
    });
  };
  /** FORBIDDEN unless the request's caller may (no caller: auth is off, everything is allowed). */
  const allow = (req: IncomingMessage, permission: Permission, kind: ObjectKind, name: string) =>
    gateway.access.check(req.auth, permission, kind, name);
  const versioned = (method: 'GET' | 'POST', suffix: string, handler: Handler) => {
    on(method, `/v2/models/:model${suffix}`, handler);
    on(method, `/v2/models/:model/versions/:version${suffix}`, handler);
  };

  on('GET', '/v2', (_req, res) => send(res, 200, serverMetadata()));
  on('GET', '/v2/health/live', (_req, res) => send(res, 200));
  on('GET', '/v2/health/ready', (_req, res) => send(res, serverReady(gateway) ? 200 : 400));
  // A workflow answers under /v2/models/NAME too, like one of Triton's ensembles.
  versioned('GET', '', (req, res, { model, version }) =>
    send(res, 200, metadataFor(gateway, req.auth, model as string, version)),
  );
  versioned('GET', '/ready', (req, res, { model, version }) =>
    send(res, readinessFor(gateway, req.auth, model as string, version) ? 200 : 400),
  );

  versioned('POST', '/infer', async (req, res, { model, version }) => {
    writeAnswer(
      res,
      await answerInfer(gateway, regions, {
        auth: req.auth,
        model: model as string,
        version,
        body: () => readBodyChunks(req, gateway.config.maxHttpBodyBytes),
        headerLength: req.headers[HEADER_LENGTH],
        signal: goneSignal(res),
        adapter: 'oip-rest',
      }),
    );
  });

  /** The signal that withdraws a request whose client went away. */
  function goneSignal(res: ServerResponse): AbortSignal {
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    return gone.signal;
  }

  on('GET', '/v2/systemsharedmemory/status', (req, res) => {
    allow(req, 'read', 'server', 'shared-memory');
    send(res, 200, regions.status());
  });
  on('GET', '/v2/systemsharedmemory/region/:region/status', (req, res, { region }) => {
    allow(req, 'read', 'server', 'shared-memory');
    send(res, 200, regions.status(region));
  });
  on('POST', '/v2/systemsharedmemory/region/:region/register', async (req, res, { region }) => {
    allow(req, 'write', 'server', 'shared-memory');
    regions.register(region as string, parseJson(await readBody(req, 64 * 1024)));
    send(res, 200);
  });
  on('POST', '/v2/systemsharedmemory/region/:region/unregister', async (req, res, { region }) => {
    allow(req, 'write', 'server', 'shared-memory');
    await readBody(req, 64 * 1024);
    regions.unregister(region);
    send(res, 200);
  });
  on('POST', '/v2/systemsharedmemory/unregister', async (req, res) => {
    allow(req, 'write', 'server', 'shared-memory');
    await readBody(req, 64 * 1024);
    regions.unregister();
    send(res, 200);
  });

  // The statistics extension, in Triton's format (what tritonclient's get_inference_statistics reads).
  const statsOf = (name: string, version: string) => {
    const s = gateway.stats.get(name, version);
    const batches = gateway.poolStats(name, version)?.batches ?? {};
    const none = { count: 0, ns: 0 };
    return {
      name,
      version,
      last_inference: s.last_inference,
      inference_count: s.inference_count,
      execution_count: Object.values(batches).reduce((a, b) => a + b, 0),
      inference_stats: {
        success: s.success,
        fail: s.fail,
        queue: s.queue,
        compute_input: s.compute_input,
        compute_infer: s.compute_infer,
        compute_output: s.compute_output,
        cache_hit: none,
        cache_miss: none,
      },
      batch_stats: Object.entries(batches).map(([rows, count]) => ({
        batch_size: Number(rows),
        compute_input: { count, ns: 0 },
        compute_infer: { count, ns: 0 },
        compute_output: { count, ns: 0 },
      })),
    };
  };
  on('GET', '/v2/models/stats', (req, res) =>
    send(res, 200, {
      model_stats: gateway
        .listModels()
        .filter((m) => gateway.access.can(req.auth, 'read', 'model', m.name))
        .flatMap((m) => m.versions.map((v) => statsOf(m.name, v.version))),
    }),
  );
  versioned('GET', '/stats', (req, res, { model, version }) => {
    allow(req, 'read', 'model', model as string);
    const config = gateway.modelConfig(model as string);
    const info = gateway.modelInfo(config.name);
    const versions = version !== undefined ? [checkVersion(info.versions, config.name, version)] : info.versions;
    send(res, 200, { model_stats: versions.map((v) => statsOf(config.name, v.version)) });
  });

  on('POST', '/v2/repository/index', async (req, res) => {
    await readBody(req, 64 * 1024);
    send(res, 200, repositoryIndex(gateway, req.auth));
  });

  for (const action of ['load', 'unload'] as const) {
    on('POST', `/v2/repository/models/:model/${action}`, async (req, res, { model }) => {
      allow(req, 'modify', 'model', model as string);
      await readBody(req, 64 * 1024);
      const actor = req.auth?.clientId ?? `remote:${req.socket.remoteAddress}`;
      if (action === 'load') await gateway.loadFromRepository(model as string, actor);
      else await gateway.unloadModel(model as string, undefined, actor);
      send(res, 200);
    });
  }
  // Batch jobs: a tensorgate extension beside the protocol's routes, the MCP job tools over plain
  // HTTP for callers that do not speak MCP (docs/jobs.md).
  const actorOf = (req: IncomingMessage) => req.auth?.clientId ?? `remote:${req.socket.remoteAddress}`;
  on('POST', '/v2/jobs', async (req, res) => {
    const raw = parseJson(await readBody(req, 16 * 1024 * 1024));
    // A request that is not a job is refused by start() with what is wrong with it.
    const spec = JobSpecSchema.safeParse(raw);
    if (spec.success) checkJobAccess(gateway, req.auth, 'execute', spec.data);
    send(res, 201, await gateway.jobs.start(raw, actorOf(req)));
  });
  on('GET', '/v2/jobs', async (req, res) => {
    const jobs = await gateway.jobs.list();
    send(res, 200, { jobs: jobs.filter((j) => jobAllowed(gateway, req.auth, 'read', j)) });
  });
  on('GET', '/v2/jobs/:id', async (req, res, { id }) => {
    checkJobAccess(gateway, req.auth, 'read', await gateway.jobs.targetOf(id as string));
    send(res, 200, await gateway.jobs.get(id as string));
  });
  for (const action of ['cancel', 'resume'] as const) {
    on('POST', `/v2/jobs/:id/${action}`, async (req, res, { id }) => {
      await readBody(req, 64 * 1024);
      checkJobAccess(gateway, req.auth, 'execute', await gateway.jobs.targetOf(id as string));
      send(res, 200, await gateway.jobs[action](id as string));
    });
  }
  return () => regions.close();
}

function parseJson(body: Buffer): unknown {
  if (body.length === 0) return {};
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw tgError('INVALID_REQUEST', `the request is not valid JSON: ${(err as Error).message}`);
  }
}
