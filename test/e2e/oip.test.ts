import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { decodeNpy } from '../../src/tensor/npy.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { ROOT } from '../helpers/models.js';

/**
 * The Open Inference Protocol v2 REST routes of the real server (`serve --http`), driven by
 * Triton's own Python client (tritonclient.http, installed apart by
 * scripts/install-python-clients.sh) and by raw HTTP for the inputs no client would send; and
 * the same inputs over MCP give the same numbers.
 */

const CLIENT_PYTHON = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
let server: Connected;
let base: string;
let grpcAddress: string;

before(async () => {
  server = await connect('http', 120_000, ['--grpc', '0']);
  base = (server.url as string).replace(/\/mcp$/, '');
  grpcAddress = /OIP v2 gRPC at ([\d.]+:\d+)/.exec(server.serverLog())?.[1] as string;
});

after(async () => {
  await server.close();
});

interface Stats {
  name: string;
  version: string;
  inference_count: number;
  execution_count: number;
  inference_stats: Record<string, { count: number; ns: number }>;
}

interface Report {
  live: boolean;
  ready: boolean;
  server: { name: string; extensions: string[] };
  tabular_metadata: { name: string; versions: string[]; inputs: { name: string; datatype: string; shape: number[] }[] };
  image_v2_metadata: { versions: string[]; platform: string };
  tabular_ready: boolean;
  index: { name: string; version: string; state: string }[];
  tabular_response: { id: string; model_version: string; parameters: Record<string, number> };
  image_shape: number[];
  errors: Record<string, string | null>;
  shared_memory: {
    status: { name: string; byte_size: number }[];
    output: { shape: number[]; parameters: Record<string, unknown> };
    errors: Record<string, string | null>;
    after_unregister: string | null;
    status_at_end: { name: string }[];
  };
  tabular_stats: { model_stats: Stats[] };
  all_stats: { model_stats: Stats[] };
  ready_after_unload: boolean;
  ready_after_load: boolean;
  live_at_end: boolean;
}

function npy(path: string): Float32Array {
  const t = decodeNpy(readFileSync(path));
  return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
}

async function mcpOutput(model: string, version: string, input: string, path: string): Promise<Float32Array> {
  const result = await server.client.callTool({
    name: 'infer',
    arguments: { model, version, inputs: { [input]: { path } } },
  });
  assert.ok(!result.isError, JSON.stringify(result.content));
  const uri = (result.structuredContent as { outputs: { uri: string }[] }).outputs[0]?.uri as string;
  const resource = await server.client.readResource({ uri });
  const blob = Buffer.from((resource.contents[0] as { blob: string }).blob, 'base64');
  const t = decodeNpy(blob);
  return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
}

async function post(path: string, body: string | Buffer, headers: Record<string, string> = {}) {
  const payload = typeof body === 'string' ? body : new Uint8Array(body);
  const response = await fetch(`${base}${path}`, { method: 'POST', body: payload, headers });
  const text = await response.text();
  return { status: response.status, text };
}

describe('OIP v2 with tritonclient', () => {
  let report: Report;

  before(() => {
    assert.ok(existsSync(CLIENT_PYTHON), 'tritonclient is missing: run bash scripts/install-python-clients.sh');
    const out = execFileSync(
      CLIENT_PYTHON,
      [join(ROOT, 'test/fixtures/triton_http_client.py'), base.replace('http://', ''), server.workDir],
      { encoding: 'utf8', timeout: 120_000 },
    );
    report = JSON.parse(out) as Report;
  });

  it('answers health, server and model metadata, readiness and the repository index', () => {
    assert.equal(report.live, true);
    assert.equal(report.ready, true);
    assert.equal(report.server.name, 'tensorgate');
    assert.ok(report.server.extensions.includes('binary_tensor_data'));
    assert.deepEqual(report.tabular_metadata.inputs, [{ name: 'features', datatype: 'FP32', shape: [-1, 4] }]);
    assert.deepEqual(report.image_v2_metadata.versions, ['2']);
    assert.equal(report.image_v2_metadata.platform, 'pytorch');
    assert.equal(report.tabular_ready, true);
    assert.ok(report.index.some((m) => m.name === 'image-classifier' && m.version === '2' && m.state === 'READY'));
  });

  it('infers with JSON and with binary tensor data, returning the request id and stage timings', () => {
    assert.equal(report.tabular_response.id, 'req-1');
    assert.equal(report.tabular_response.model_version, '1');
    for (const stage of ['decode_ms', 'queue_ms', 'compute_ms', 'total_ms'])
      assert.equal(typeof report.tabular_response.parameters[stage], 'number', stage);
    assert.deepEqual(report.image_shape, [2, 10]);
    const json = npy(join(server.workDir, 'tabular_json.npy'));
    const binary = npy(join(server.workDir, 'tabular_binary.npy'));
    assert.deepEqual(json, binary);
  });

  it('gives the same numbers as MCP infer for the same inputs', async () => {
    const dir = server.workDir;
    const tabular = await mcpOutput('tabular-classifier', '1', 'features', join(dir, 'tabular_input.npy'));
    assert.deepEqual(tabular, npy(join(dir, 'tabular_binary.npy')));
    const image = await mcpOutput('image-classifier', '1', 'image', join(dir, 'image_input.npy'));
    assert.deepEqual(image, npy(join(dir, 'image_binary.npy')));
  });

  it('reads inputs from and writes outputs to system shared memory, the same numbers as binary', () => {
    const shm = report.shared_memory;
    assert.deepEqual(
      shm.status.map((r) => [r.name, r.byte_size]),
      [
        ['in0', 2 * 3 * 224 * 224 * 4],
        ['out0', 80],
      ],
    );
    assert.deepEqual(shm.output.shape, [2, 10]);
    assert.deepEqual(shm.output.parameters, {
      shared_memory_region: 'out0',
      shared_memory_byte_size: 80,
      shared_memory_offset: 0,
    });
    assert.deepEqual(npy(join(server.workDir, 'image_shm.npy')), npy(join(server.workDir, 'image_binary.npy')));
  });

  it('checks every region, offset and size, and forgets unregistered regions', () => {
    const errors = report.shared_memory.errors;
    assert.match(
      errors.offset_past_end ?? '',
      /^SHARED_MEMORY_OUT_OF_RANGE: input "image": offset 16 \+ 1204224 bytes is past the end/,
    );
    assert.match(errors.unknown_region ?? '', /^SHARED_MEMORY_NOT_FOUND: no shared-memory region "nope"/);
    assert.match(errors.output_too_small ?? '', /^SHARED_MEMORY_OUT_OF_RANGE: output "logits" is 80 bytes/);
    assert.match(errors.register_twice ?? '', /^SHARED_MEMORY_IN_USE/);
    assert.match(errors.register_too_big ?? '', /^SHARED_MEMORY_OUT_OF_RANGE: .* does not fit/);
    assert.match(errors.register_missing ?? '', /^SHARED_MEMORY_NOT_FOUND: cannot open .*ENOENT/);
    assert.match(
      report.shared_memory.after_unregister ?? '',
      /^SHARED_MEMORY_NOT_FOUND: no shared-memory region "in0"/,
    );
    assert.deepEqual(
      report.shared_memory.status_at_end.map((r) => r.name),
      ['out0'],
    );
  });

  it('reports statistics per model version in the format tritonclient reads', () => {
    const [tabular] = report.tabular_stats.model_stats;
    assert.equal(tabular?.name, 'tabular-classifier');
    // Two calls of 3 rows succeeded; the wrong shape and the wrong dtype failed.
    assert.equal(tabular?.inference_count, 6);
    assert.equal(tabular?.inference_stats.success?.count, 2);
    assert.equal(tabular?.inference_stats.fail?.count, 2);
    assert.ok((tabular?.inference_stats.compute_infer?.ns ?? 0) > 0);
    assert.ok((tabular?.execution_count ?? 0) >= 1);
    const names = report.all_stats.model_stats.map((m) => `${m.name}@${m.version}`);
    assert.ok(names.includes('image-classifier@1') && names.includes('tabular-classifier@1'), names.join());
  });

  it('turns bad requests into protocol errors the client shows, and loads and unloads models', () => {
    assert.match(report.errors.wrong_shape ?? '', /^SHAPE_MISMATCH: input "features" has shape \[2, 5\]/);
    assert.match(report.errors.wrong_dtype ?? '', /^DTYPE_MISMATCH: input "features" is float64/);
    assert.match(report.errors.unknown_model ?? '', /^MODEL_NOT_FOUND/);
    assert.match(report.errors.unknown_version ?? '', /^VERSION_NOT_FOUND/);
    assert.equal(report.ready_after_unload, false);
    assert.equal(report.ready_after_load, true);
    assert.equal(report.live_at_end, true);
  });
});

describe('OIP v2 over gRPC with tritonclient.grpc', () => {
  interface GrpcReport {
    live: boolean;
    ready: boolean;
    server: { name: string };
    tabular_metadata: { inputs: { name: string; datatype: string; shape: string[] }[] };
    tabular_ready: boolean;
    index: { models: { name: string; state: string }[] };
    tabular_response: {
      id: string;
      parameters: Record<string, { double_param?: number; int64_param?: string; string_param?: string }>;
    };
    errors: Record<string, string | null>;
    live_at_end: boolean;
  }
  let report: GrpcReport;

  before(() => {
    assert.ok(grpcAddress, `no gRPC address in the server log: ${server.serverLog()}`);
    const out = execFileSync(
      CLIENT_PYTHON,
      [join(ROOT, 'test/fixtures/triton_grpc_client.py'), grpcAddress, server.workDir],
      { encoding: 'utf8', timeout: 120_000 },
    );
    report = JSON.parse(out) as GrpcReport;
  });

  it('answers health, metadata, readiness and the index', () => {
    assert.equal(report.live, true);
    assert.equal(report.ready, true);
    assert.equal(report.server.name, 'tensorgate');
    assert.deepEqual(report.tabular_metadata.inputs, [{ name: 'features', datatype: 'FP32', shape: ['-1', '4'] }]);
    assert.equal(report.tabular_ready, true);
    assert.ok(report.index.models.some((m) => m.name === 'tabular-classifier' && m.state === 'READY'));
  });

  it('infers with raw tensor contents, the same numbers as MCP, with timings as parameters', async () => {
    assert.equal(report.tabular_response.id, 'g-1');
    assert.equal(report.tabular_response.parameters.batch_size?.int64_param, '3');
    assert.equal(report.tabular_response.parameters.variant?.string_param, 'torch-fp32');
    assert.equal(typeof report.tabular_response.parameters.compute_ms?.double_param, 'number');
    const dir = server.workDir;
    const tabular = await mcpOutput('tabular-classifier', '1', 'features', join(dir, 'grpc_tabular_input.npy'));
    assert.deepEqual(tabular, npy(join(dir, 'grpc_tabular.npy')));
    const image = await mcpOutput('image-classifier', '1', 'image', join(dir, 'grpc_image_input.npy'));
    assert.deepEqual(image, npy(join(dir, 'grpc_image.npy')));
  });

  it('turns bad requests into gRPC errors that carry the code', () => {
    assert.match(report.errors.wrong_shape ?? '', /^SHAPE_MISMATCH: input "features" has shape \[2, 5\]/);
    assert.match(report.errors.unknown_model ?? '', /^MODEL_NOT_FOUND/);
    assert.match(report.errors.unknown_output ?? '', /^UNKNOWN_OUTPUT: output "nope"/);
    assert.equal(report.live_at_end, true);
  });
});

describe('OIP v2 shared memory under a request', () => {
  it('finishes a queued request whose region is unregistered meanwhile, then refuses the region', async () => {
    const key = `/tg_test_sleepy_${process.pid}`;
    const path = `/dev/shm${key}`;
    const values = new Float32Array([1, 2, 3, 4]);
    writeFileSync(path, Buffer.from(values.buffer));
    try {
      const register = await post(
        '/v2/systemsharedmemory/region/sleepy_in/register',
        JSON.stringify({ key, byte_size: 16 }),
      );
      assert.equal(register.status, 200, register.text);
      const request = JSON.stringify({
        inputs: [
          {
            name: 'x',
            shape: [1, 4],
            datatype: 'FP32',
            parameters: { shared_memory_region: 'sleepy_in', shared_memory_byte_size: 16 },
          },
        ],
      });
      // Two calls on sleepy's one instance: the second waits in the queue, its input not yet read.
      const first = post('/v2/models/sleepy/infer', request);
      const second = post('/v2/models/sleepy/infer', request);
      await new Promise((r) => setTimeout(r, 150));
      const unregister = await post('/v2/systemsharedmemory/region/sleepy_in/unregister', '');
      assert.equal(unregister.status, 200);
      for (const answer of await Promise.all([first, second])) {
        assert.equal(answer.status, 200, answer.text);
        assert.deepEqual((JSON.parse(answer.text) as { outputs: { data: number[] }[] }).outputs[0]?.data, [2, 4, 6, 8]);
      }
      const late = await post('/v2/models/sleepy/infer', request);
      assert.equal(late.status, 404);
      assert.match(late.text, /SHARED_MEMORY_NOT_FOUND/);
    } finally {
      rmSync(path, { force: true });
    }
  });

  it('refuses keys that are not shared-memory names', async () => {
    for (const key of ['../etc/passwd', '/a/b', 'noslash', '/..']) {
      const answer = await post('/v2/systemsharedmemory/region/evil/register', JSON.stringify({ key, byte_size: 8 }));
      assert.equal(answer.status, 400, key);
      assert.match(answer.text, /INVALID_REQUEST: key .* is not a POSIX shared-memory name/);
    }
  });
});

describe('OIP v2 large tensors over raw HTTP', () => {
  it('adds two 640 KB tensors that arrive in many socket reads and answers 640 KB, bit for bit', async () => {
    const rows = 400;
    const a = new Float32Array(rows * rows).map((_, i) => Math.fround(Math.sin(i) * 1000));
    const b = new Float32Array(rows * rows).map((_, i) => Math.fround(1 / (i + 1)));
    const header = Buffer.from(
      JSON.stringify({
        inputs: ['a', 'b'].map((name) => ({
          name,
          datatype: 'FP32',
          shape: [rows, rows],
          parameters: { binary_data_size: a.byteLength },
        })),
        parameters: { binary_data_output: true },
      }),
    );
    const body = Buffer.concat([header, Buffer.from(a.buffer), Buffer.from(b.buffer)]);
    for (let round = 0; round < 3; round++) {
      const response = await fetch(`${base}/v2/models/adder/infer`, {
        method: 'POST',
        body: new Uint8Array(body),
        headers: { 'Inference-Header-Content-Length': String(header.length) },
      });
      const answer = Buffer.from(await response.arrayBuffer());
      assert.equal(response.status, 200, answer.toString('utf8', 0, 300));
      const length = Number(response.headers.get('inference-header-content-length'));
      const head = JSON.parse(answer.subarray(0, length).toString()) as {
        outputs: { name: string; shape: number[]; parameters: { binary_data_size: number } }[];
      };
      assert.deepEqual(head.outputs[0]?.shape, [rows, rows]);
      assert.equal(head.outputs[0]?.parameters.binary_data_size, a.byteLength);
      assert.equal(answer.length, length + a.byteLength);
      const sum = new Float32Array(answer.buffer.slice(answer.byteOffset + length, answer.byteOffset + answer.length));
      const expected = a.map((x, i) => Math.fround(x + (b[i] as number)));
      assert.deepEqual(Buffer.from(sum.buffer), Buffer.from(expected.buffer));
    }
  });
});

describe('OIP v2 bad input over raw HTTP', () => {
  const infer = '/v2/models/tabular-classifier/infer';
  const input = (extra: Record<string, unknown>) =>
    JSON.stringify({ inputs: [{ name: 'features', shape: [1, 4], datatype: 'FP32', ...extra }] });
  const binaryRequest = (header: string, tail: Buffer, headerLength = header.length) => ({
    body: Buffer.concat([Buffer.from(header), tail]),
    headers: { 'Inference-Header-Content-Length': String(headerLength) },
  });

  const cases: [string, () => { body: string | Buffer; headers?: Record<string, string> }, number, RegExp][] = [
    ['malformed JSON', () => ({ body: '{"inputs": [' }), 400, /^INVALID_REQUEST: the request is not valid JSON/],
    ['no inputs', () => ({ body: '{}' }), 400, /^INVALID_REQUEST: "inputs" must be a non-empty list/],
    [
      'a header length past the body',
      () => binaryRequest(input({ parameters: { binary_data_size: 16 } }), Buffer.alloc(16), 10_000),
      400,
      /^INVALID_REQUEST: Inference-Header-Content-Length is 10000 but the body has only/,
    ],
    [
      'binary size past the body',
      () => binaryRequest(input({ parameters: { binary_data_size: 64 } }), Buffer.alloc(16)),
      400,
      /reaches past the end of the body/,
    ],
    [
      'binary size that does not match dtype and shape',
      () => binaryRequest(input({ parameters: { binary_data_size: 12 } }), Buffer.alloc(12)),
      400,
      /^BYTE_LENGTH_MISMATCH: input "features": float32\[1,4\] needs 16 bytes/,
    ],
    [
      'bytes left after the last input',
      () => binaryRequest(input({ parameters: { binary_data_size: 16 } }), Buffer.alloc(20)),
      400,
      /4 bytes after the last input's binary data/,
    ],
    [
      'an unknown datatype',
      () => ({ body: input({ datatype: 'FP33', data: [1, 2, 3, 4] }) }),
      400,
      /not an OIP v2 datatype/,
    ],
    [
      'BYTES to a model without processing',
      () => ({ body: input({ datatype: 'BYTES', shape: [1], data: ['a'] }) }),
      400,
      /BAD_TENSOR: input "features" is BYTES, but this model takes float32 tensors/,
    ],
    ['a negative shape', () => ({ body: input({ shape: [-1, 4], data: [1, 2, 3, 4] }) }), 400, /shape\[0\] is -1/],
    [
      'a shape too large to address',
      () => ({ body: input({ shape: [1e9, 1e9], data: [1] }) }),
      400,
      /^BAD_TENSOR: input "features": shape \[1000000000,1000000000\] has too many elements/,
    ],
    [
      'a huge shape as JSON',
      () => ({ body: input({ shape: [100000, 100000], data: [1] }) }),
      413,
      /^INPUT_TOO_LARGE: input "features": 10000000000 elements as JSON is over/,
    ],
    [
      'data that does not fill the shape',
      () => ({ body: input({ data: [1, 2, 3] }) }),
      400,
      /"data" holds 3 values but shape \[1, 4\] needs 4/,
    ],
    [
      'an output the model does not have',
      () => ({ body: JSON.stringify({ ...JSON.parse(input({ data: [1, 2, 3, 4] })), outputs: [{ name: 'nope' }] }) }),
      400,
      /^UNKNOWN_OUTPUT: output "nope" is not declared by tabular-classifier; it has probabilities/,
    ],
  ];

  for (const [what, make, status, message] of cases) {
    it(`answers ${what} with ${status} and the reason`, async () => {
      const { body, headers } = make();
      const response = await post(infer, body, headers);
      assert.equal(response.status, status, response.text);
      assert.match((JSON.parse(response.text) as { error: string }).error, message);
    });
  }

  it('keeps serving: a good request after all of them, and binary outputs on request', async () => {
    const request = {
      inputs: [{ name: 'features', shape: [1, 4], datatype: 'FP32', data: [5.1, 3.5, 1.4, 0.2] }],
      outputs: [{ name: 'probabilities', parameters: { binary_data: true } }],
    };
    const response = await fetch(`${base}${infer}`, { method: 'POST', body: JSON.stringify(request) });
    assert.equal(response.status, 200);
    const length = Number(response.headers.get('inference-header-content-length'));
    const body = Buffer.from(await response.arrayBuffer());
    const header = JSON.parse(body.subarray(0, length).toString()) as {
      outputs: { name: string; datatype: string; shape: number[]; parameters: { binary_data_size: number } }[];
    };
    assert.deepEqual(header.outputs[0], {
      name: 'probabilities',
      datatype: 'FP32',
      shape: [1, 3],
      parameters: { binary_data_size: 12 },
    });
    const probabilities = new Float32Array(body.buffer.slice(body.byteOffset + length, body.byteOffset + length + 12));
    assert.ok(Math.abs(probabilities.reduce((a, b) => a + b, 0) - 1) < 1e-5);
    const missing = await fetch(`${base}/v2/models/no-such-model/ready`);
    assert.equal(missing.status, 404);
    assert.equal((await fetch(`${base}/v2/health/live`)).status, 200);
  });
});
