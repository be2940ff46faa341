import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { Script } from 'node:vm';
import { parse, parseAllDocuments } from 'yaml';
import { parseModelConfig } from '../../src/registry/model-config.js';
import { ApiKeyStore } from '../../src/security/api-keys.js';

/**
 * The deployment files, checked without a cluster or a Docker engine (docs/deploy.md): the
 * Dockerfile linted by hadolint, the Helm chart linted and rendered by Helm, and every rendered
 * manifest decoded strictly into its Go type by deploy/validate. The tools are the pinned ones
 * scripts/check-deploy.sh installs into .tensorgate/tools.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const TOOLS = join(ROOT, '.tensorgate', 'tools');
const HELM = join(TOOLS, 'bin', 'helm');
const VALIDATE = join(TOOLS, 'bin', 'tensorgate-validate');
const HADOLINT = join(TOOLS, 'hadolint', 'bin', 'hadolint');
const CHART = join(ROOT, 'deploy', 'helm', 'tensorgate');
const FULL_VALUES = join(CHART, 'ci', 'full-values.yaml');
const DOCKERFILE = join(ROOT, 'deploy', 'docker', 'Dockerfile');

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
}
interface Probe {
  httpGet: { path: string; port: string; scheme: string; httpHeaders?: { name: string; value: string }[] };
}
interface Container {
  name: string;
  command: string[];
  args: string[];
  env: EnvVar[];
  ports: { name: string; containerPort: number }[];
  startupProbe: Probe;
  livenessProbe: Probe;
  readinessProbe: Probe;
  securityContext: { readOnlyRootFilesystem: boolean; allowPrivilegeEscalation: boolean };
  volumeMounts: { name: string; mountPath: string; readOnly?: boolean }[];
}
interface Volume {
  name: string;
  emptyDir?: { medium?: string; sizeLimit?: string };
  persistentVolumeClaim?: { claimName: string; readOnly: boolean };
  projected?: { sources: { configMap: { name: string; items: { key: string; path: string }[] } }[] };
}
interface Deployment {
  spec: {
    replicas?: number;
    template: {
      spec: {
        containers: Container[];
        initContainers?: Container[];
        volumes: Volume[];
        securityContext: { runAsNonRoot: boolean; runAsUser: number };
      };
    };
  };
}
interface Manifest {
  kind: string;
  metadata: { name: string; annotations?: Record<string, string> };
  spec?: unknown;
  data?: Record<string, string>;
}
interface KServeModel {
  name: string;
  remote?: { url?: string };
}

function helm(...args: string[]): string {
  return execFileSync(HELM, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** `helm template` in namespace ml; the release is named tensorgate, as the chart's objects then are. */
function render(...args: string[]): string {
  return helm('template', 'tensorgate', CHART, '--namespace', 'ml', ...args);
}

function manifests(text: string): Manifest[] {
  return parseAllDocuments(text)
    .map((doc) => doc.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null);
}

function find<T>(docs: Manifest[], kind: string, name?: string): Manifest & T {
  const found = docs.filter((m) => m.kind === kind && (name === undefined || m.metadata.name === name));
  assert.equal(found.length, 1, `one ${kind}${name ? ` ${name}` : ''} expected, found ${found.length}`);
  return found[0] as Manifest & T;
}

function gateway(docs: Manifest[]): Container {
  const container = find<Deployment>(docs, 'Deployment').spec.template.spec.containers[0];
  assert.ok(container);
  return container;
}

function env(container: Container, name: string): EnvVar {
  const found = container.env.find((e) => e.name === name);
  assert.ok(found, `env ${name} is set`);
  return found;
}

function validate(text: string): { status: number | null; out: string } {
  const r = spawnSync(VALIDATE, [], { input: text, encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

/** The long options a command's --help lists (`node src/cli/main.ts [command] --help`). */
function cliOptions(...command: string[]): Set<string> {
  const help = execFileSync(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), ...command, '--help'],
    {
      cwd: ROOT,
      encoding: 'utf8',
    },
  );
  return new Set(help.match(/(?<=^\s+(?:-\w, )?)--[a-z-]+/gm));
}

let knownOptions: Set<string>[] | undefined;

/** Checks that every option before `serve` is a global option and every one after it a serve option. */
function assertKnownOptions(args: string[], where: string): void {
  const serveAt = args.indexOf('serve');
  assert.ok(serveAt > 0, `${where}: serve comes after the global options`);
  knownOptions ??= [cliOptions(), cliOptions('serve')];
  const known = knownOptions;
  args.forEach((arg, i) => {
    if (!arg.startsWith('--')) return;
    const options = known[i < serveAt ? 0 : 1] as Set<string>;
    assert.ok(options.has(arg), `${where}: ${arg} is not a ${i < serveAt ? 'global' : 'serve'} option of the CLI`);
  });
}

let defaults: Manifest[];
let defaultText: string;
let full: Manifest[];
let fullText: string;

before(() => {
  execFileSync('bash', [join(ROOT, 'scripts/check-deploy.sh'), '--install-only'], { cwd: ROOT, stdio: 'ignore' });
  defaultText = render();
  defaults = manifests(defaultText);
  fullText = render('-f', FULL_VALUES);
  full = manifests(fullText);
});

describe('deploy/docker/Dockerfile', () => {
  it('has no hadolint findings', () => {
    const r = spawnSync(HADOLINT, [DOCKERFILE], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  });

  it('copies only files that exist and that .dockerignore lets into the build context', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((line) => line.trim() && !line.startsWith('#'));
    const isIgnored = (path: string) =>
      ignored.some((pattern) =>
        pattern.startsWith('**/')
          ? path.split('/').includes(pattern.slice(3))
          : path === pattern || path.startsWith(`${pattern}/`),
      );
    const sources = [...readFileSync(DOCKERFILE, 'utf8').matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) =>
      (m[1] as string).split(/\s+/),
    );
    assert.ok(sources.includes('src') && sources.includes('python/tensorgate'));
    for (const source of sources) {
      assert.ok(existsSync(join(ROOT, source)), `COPY ${source}: not in the repository`);
      assert.ok(!isIgnored(source), `COPY ${source}: excluded by .dockerignore`);
    }
  });

  it('starts the CLI with options it has, and checks health with valid JavaScript', () => {
    const text = readFileSync(DOCKERFILE, 'utf8');
    const json = (instruction: string) =>
      JSON.parse(new RegExp(`^${instruction} (\\[.*\\])$`, 'm').exec(text)?.[1] ?? '[]');
    const entrypoint: string[] = json('ENTRYPOINT');
    assert.deepEqual(entrypoint.slice(0, 4), ['/usr/bin/tini', '--', 'node', '/app/bin/tensorgate.js']);
    assertKnownOptions([...entrypoint.slice(4), ...json('CMD')], 'Dockerfile');
    const healthcheck = /^ {2}CMD \["node", "-e", (".*")\]$/m.exec(text)?.[1];
    assert.ok(healthcheck, 'HEALTHCHECK runs node -e');
    const code = JSON.parse(healthcheck) as string;
    assert.match(code, /\/v2\/health\/ready/);
    assert.doesNotThrow(() => new Script(code));
  });
});

describe('deploy/helm/tensorgate', () => {
  it('passes helm lint --strict with the default values and with ci/full-values.yaml', () => {
    helm('lint', '--strict', CHART);
    helm('lint', '--strict', CHART, '-f', FULL_VALUES);
  });

  it('renders manifests the validator accepts, with the default values and with every option', () => {
    for (const [name, text] of [
      ['default', defaultText],
      ['full', fullText],
    ] as const) {
      const r = validate(text);
      assert.equal(r.status, 0, `${name}: ${r.out}`);
    }
    assert.deepEqual(defaults.map((m) => m.kind).sort(), [
      'Deployment',
      'PodDisruptionBudget',
      'Secret',
      'Service',
      'ServiceAccount',
    ]);
  });

  it('by default: one pod on SQLite, probed on the health routes, non-root with a read-only root', () => {
    const deployment = find<Deployment>(defaults, 'Deployment');
    assert.equal(deployment.spec.replicas, 1);
    const c = gateway(defaults);
    assert.equal(env(c, 'TENSORGATE_REGISTRY').value, '/var/lib/tensorgate/registry.db');
    assert.equal(c.startupProbe.httpGet.path, '/v2/health/ready');
    assert.equal(c.readinessProbe.httpGet.path, '/v2/health/ready');
    assert.equal(c.livenessProbe.httpGet.path, '/v2/health/live');
    for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe]) {
      assert.equal(probe.httpGet.port, 'http');
      // The gateway's Host check accepts localhost whatever address the kubelet probes.
      assert.deepEqual(probe.httpGet.httpHeaders, [{ name: 'Host', value: 'localhost' }]);
    }
    assert.deepEqual(
      c.ports.map((p) => [p.name, p.containerPort]),
      [
        ['http', 8765],
        ['grpc', 8001],
      ],
    );
    const pod = deployment.spec.template.spec;
    assert.equal(pod.securityContext.runAsNonRoot, true);
    assert.equal(pod.securityContext.runAsUser, 10001);
    assert.equal(c.securityContext.readOnlyRootFilesystem, true);
    const shm = pod.volumes.find((v) => v.name === 'dshm');
    assert.deepEqual(shm?.emptyDir, { medium: 'Memory', sizeLimit: '1Gi' });
    assert.ok(c.volumeMounts.some((m) => m.name === 'dshm' && m.mountPath === '/dev/shm'));
    assert.ok(c.volumeMounts.some((m) => m.name === 'tmp' && m.mountPath === '/tmp'));
    assert.equal(env(c, 'TENSORGATE_REPLICA_ID').valueFrom?.fieldRef?.fieldPath, 'metadata.name');
    assert.ok(c.args.includes('$(POD_IP)') && env(c, 'POD_IP').valueFrom?.fieldRef?.fieldPath === 'status.podIP');
  });

  it('serves the OIP data port when asked, on the container and the Service', () => {
    assert.ok(!gateway(defaults).args.includes('--oip-port'), 'off by default');
    const c = gateway(full);
    const at = c.args.indexOf('--oip-port');
    assert.deepEqual(c.args.slice(at, at + 4), ['--oip-port', '8002', '--oip-threads', '4']);
    assert.ok(c.ports.some((p) => p.name === 'oip-data' && p.containerPort === 8002));
    const service = find<{ spec: { ports: { name: string; port: number; targetPort: string }[] } }>(full, 'Service');
    assert.ok(service.spec.ports.some((p) => p.name === 'oip-data' && p.port === 8002 && p.targetPort === 'oip-data'));
  });

  it('passes only options the CLI has, global ones before serve', () => {
    assertKnownOptions(gateway(defaults).args, 'default values');
    assertKnownOptions(gateway(full).args, 'full values');
  });

  it('makes, with no credential given, an admin API key that tensorgate accepts', () => {
    const secret = find(defaults, 'Secret');
    const data = secret.data as Record<string, string>;
    const decode = (key: string) => Buffer.from(data[key] as string, 'base64').toString('utf8');
    const dir = mkdtempSync(join(tmpdir(), 'tg-chart-'));
    const file = join(dir, 'api-keys.json');
    writeFileSync(file, decode('api-keys.json'));
    const store = new ApiKeyStore(file);
    const key = decode('admin-api-key');
    const record = store.verify(key);
    assert.ok(record, 'the generated key verifies against the generated key file');
    assert.deepEqual(record.roles, ['admin']);
    const tampered = `${key.slice(0, -1)}${key.endsWith('x') ? 'y' : 'x'}`;
    assert.equal(store.verify(tampered), undefined);
    rmSync(dir, { recursive: true });
    assert.ok(gateway(defaults).args.includes('/etc/tensorgate/secret/api-keys.json'));
  });

  it('with every option: 3 replicas on the PostgreSQL registry, scaled on CPU and queue depth', () => {
    const values = parse(readFileSync(FULL_VALUES, 'utf8')) as { registry: { url: string } };
    // The HPA owns the replica count; without it the Deployment asks for replicaCount.
    assert.equal(find<Deployment>(full, 'Deployment').spec.replicas, undefined);
    const fixed = manifests(render('-f', FULL_VALUES, '--set', 'autoscaling.enabled=false'));
    assert.equal(find<Deployment>(fixed, 'Deployment').spec.replicas, 3);
    assert.equal(validate(render('-f', FULL_VALUES, '--set', 'autoscaling.enabled=false')).status, 0);

    const c = gateway(full);
    assert.deepEqual(env(c, 'TENSORGATE_REGISTRY').valueFrom?.secretKeyRef, {
      name: 'tensorgate',
      key: 'registry-url',
    });
    const secret = find(full, 'Secret', 'tensorgate').data as Record<string, string>;
    assert.equal(Buffer.from(secret['registry-url'] as string, 'base64').toString(), values.registry.url);
    assert.deepEqual(env(c, 'PGPASSWORD').valueFrom?.secretKeyRef, { name: 'postgres-app', key: 'password' });

    const hpa = find<{
      spec: { minReplicas: number; metrics: { type: string; pods?: { metric: { name: string } } }[] };
    }>(full, 'HorizontalPodAutoscaler');
    assert.equal(hpa.spec.minReplicas, 3);
    assert.deepEqual(
      hpa.spec.metrics.map((m) => m.type),
      ['Resource', 'Pods'],
    );
    const queueMetric = hpa.spec.metrics[1]?.pods?.metric.name as string;
    // The gauge the gateway exports under that name.
    assert.match(readFileSync(join(ROOT, 'src/metrics/prometheus.ts'), 'utf8'), new RegExp(`name: '${queueMetric}'`));
    for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe])
      assert.equal(probe.httpGet.scheme, 'HTTPS');
  });

  it('with every option: an ingress keyed on the client address and an authenticated ServiceMonitor', () => {
    const ingress = find(full, 'Ingress');
    assert.equal(ingress.metadata.annotations?.['nginx.ingress.kubernetes.io/upstream-hash-by'], '$remote_addr');
    const monitor = find<{
      spec: { endpoints: { port: string; path: string; authorization: { credentials: { name: string } } }[] };
    }>(full, 'ServiceMonitor');
    const endpoint = monitor.spec.endpoints[0];
    assert.equal(endpoint?.port, 'http');
    assert.equal(endpoint?.path, '/metrics');
    assert.equal(endpoint?.authorization.credentials.name, 'tensorgate-monitor-key');
  });

  it('renders one InferenceService per KServe model, and a model folder tensorgate accepts for each', () => {
    const listed = (parse(readFileSync(FULL_VALUES, 'utf8')) as { kserve: { models: KServeModel[] } }).kserve.models;
    const services = full.filter((m) => m.kind === 'InferenceService');
    assert.equal(services.length, listed.length);
    const deployment = find<Deployment>(full, 'Deployment');
    const projected = deployment.spec.template.spec.volumes.find((v) => v.name === 'remote-models')?.projected;
    assert.ok(deployment.spec.template.spec.initContainers?.some((c) => c.name === 'link-models'));
    for (const model of listed) {
      const isvc = find<{ spec: { predictor: { model?: { protocolVersion: string } } } }>(
        full,
        'InferenceService',
        model.name,
      );
      if (isvc.spec.predictor.model) assert.equal(isvc.spec.predictor.model.protocolVersion, 'v2');
      const configMap = find(full, 'ConfigMap', `tensorgate-model-${model.name}`);
      const config = parseModelConfig(JSON.parse(configMap.data?.['config.json'] as string), model.name);
      assert.equal(config.name, model.name);
      assert.equal(config.engine, 'remote');
      assert.equal(config.remote?.url, model.remote?.url ?? `http://${model.name}-predictor.ml.svc.cluster.local`);
      assert.ok(
        projected?.sources.some(
          (s) =>
            s.configMap.name === configMap.metadata.name && s.configMap.items[0]?.path === `${model.name}/config.json`,
        ),
        `${model.name}/config.json is mounted`,
      );
    }
  });

  it('the validator names the document and the field of what a cluster would refuse', () => {
    const cases: [string, string, string, string][] = [
      [
        'a misspelled Deployment field',
        'readOnlyRootFilesystem:',
        'readOnlyRootFilesytem:',
        'Deployment/tensorgate (tensorgate/templates/deployment.yaml): unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem"',
      ],
      [
        'a misspelled InferenceService field',
        'storageUri:',
        'storageURI:',
        'InferenceService/resnet (tensorgate/templates/kserve.yaml): unknown field "spec.predictor.model.storageURI"',
      ],
      [
        'a misspelled ServiceMonitor field',
        'scrapeTimeout:',
        'scrapeTimout:',
        'ServiceMonitor/tensorgate (tensorgate/templates/servicemonitor.yaml): unknown field "spec.endpoints[0].scrapeTimout"',
      ],
      [
        'a Service port aimed at no container port',
        'targetPort: grpc',
        'targetPort: grcp',
        'Service/tensorgate (tensorgate/templates/service.yaml): spec.ports[1].targetPort: the selected pods have no container port named "grcp"',
      ],
      [
        'a probe on no container port',
        'port: http\n              scheme: HTTPS',
        'port: metrics\n              scheme: HTTPS',
        'spec.template.spec.containers[0].startupProbe.httpGet.port: the container has no port named "metrics"',
      ],
    ];
    for (const [what, from, to, message] of cases) {
      assert.ok(fullText.includes(from), `${what}: the rendered chart has ${JSON.stringify(from)}`);
      const r = validate(fullText.replaceAll(from, to));
      assert.equal(r.status, 1, `${what} was accepted`);
      assert.ok(r.out.includes(message), `${what}: expected ${message}\ngot ${r.out}`);
    }
  });

  it('refuses to render what cannot work', () => {
    const refusals: [string, string[], RegExp][] = [
      ['3 replicas on SQLite', ['--set', 'replicaCount=3'], /needs a shared PostgreSQL registry/],
      ['autoscaling on SQLite', ['--set', 'autoscaling.enabled=true'], /needs a shared PostgreSQL registry/],
      [
        'a registry URL that is not PostgreSQL',
        ['--set', 'registry.url=/data/registry.db'],
        /must be a postgres:\/\/ URL/,
      ],
      ['no credential at all', ['--set', 'secrets.generateAdminKey=false'], /refuses to start without a credential/],
      [
        'a model volume without its claim',
        ['--set', 'modelRepository.type=pvc'],
        /needs modelRepository.pvc.claimName/,
      ],
      [
        'a KServe model tensorgate cannot describe',
        ['--set', 'kserve.models[0].name=m'],
        /needs model .* or containers/,
      ],
    ];
    for (const [what, args, message] of refusals) {
      const r = spawnSync(HELM, ['template', 'tensorgate', CHART, ...args], { encoding: 'utf8' });
      assert.notEqual(r.status, 0, `${what} rendered`);
      assert.match(r.stderr, message, what);
    }
  });
});
