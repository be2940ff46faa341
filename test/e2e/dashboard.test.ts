import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type Browser, chromium, type Page } from 'playwright-core';
import { parseApiKey } from '../../src/security/api-keys.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { ROOT } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * /dashboard in real headless Chromium (Debian's, driven by playwright-core) against the real
 * server: it loads without console errors, shows every model, its numbers follow real OIP v2
 * traffic, and it says so when the server goes away. Saves a screenshot.
 */

const CHROMIUM = process.env.TENSORGATE_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOT = join(ROOT, '.tensorgate', 'screenshots', 'dashboard.png');

let server: Connected | undefined;
let base: string;
let browser: Browser;
let page: Page;
const problems: string[] = [];

before(async () => {
  assert.ok(
    existsSync(CHROMIUM),
    `no Chromium at ${CHROMIUM}: run scripts/setup.sh --test (installs Debian's chromium) or set TENSORGATE_CHROMIUM`,
  );
  server = await connect('http');
  base = (server.url as string).replace(/\/mcp$/, '');
  // CI runs as root, where Chromium's sandbox cannot start.
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`page: ${err.message}`));
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** A field of a model's card for version 1 (the demo tabular model also has version 2, eager). */
const field = (model: string, name: string) =>
  page.locator(`[data-model="${model}"][data-version="1"] [data-field="${name}"]`);

async function infer(body: unknown): Promise<number> {
  const response = await fetch(`${base}/v2/models/tabular-classifier/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  await response.arrayBuffer();
  return response.status;
}

describe('dashboard', () => {
  it('serves the page with a strict content security policy and nothing outside its files', async () => {
    const response = await fetch(`${base}/dashboard`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(response.headers.get('content-security-policy') ?? '', /script-src 'self'/);
    assert.equal(response.headers.get('x-content-type-options'), 'nosniff');
    for (const asset of ['app.js', 'style.css', 'uPlot.esm.js', 'uPlot.min.css']) {
      const first = await fetch(`${base}/dashboard/assets/${asset}`);
      assert.equal(first.status, 200, asset);
      await first.arrayBuffer();
      const etag = first.headers.get('etag') ?? '';
      assert.match(etag, /^"[\w-]+"$/, asset);
      const again = await fetch(`${base}/dashboard/assets/${asset}`, { headers: { 'if-none-match': etag } });
      assert.equal(again.status, 304, `${asset} unchanged`);
    }
    for (const path of ['/dashboard/assets/..%2Fpackage.json', '/dashboard/assets/index.ts'])
      assert.equal((await fetch(`${base}${path}`)).status, 404, path);
  });

  it('shows every model, live, with numbers that follow real traffic', async () => {
    const models = (await (await fetch(`${base}/v2/repository/index`, { method: 'POST' })).json()) as {
      name: string;
    }[];
    const names = [...new Set(models.map((m) => m.name))];
    assert.ok(names.length >= 3);

    await page.goto(`${base}/dashboard`);
    await page.waitForSelector('#status[data-state="live"]');
    await page.waitForFunction(
      () =>
        document.querySelector('[data-model="tabular-classifier"][data-version="1"] [data-field="state"]')
          ?.textContent === 'ready',
    );
    for (const name of names)
      assert.equal((await page.locator(`article[data-model="${name}"]`).count()) > 0, true, name);
    const before = Number(await field('tabular-classifier', 'requests').textContent());

    const features = {
      name: 'features',
      shape: [2, 4],
      datatype: 'FP32',
      data: [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3],
    };
    for (let i = 0; i < 6; i++) assert.equal(await infer({ inputs: [features] }), 200);
    const bad = { name: 'features', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] };
    assert.equal(await infer({ inputs: [bad] }), 400);

    await page.waitForFunction(
      (expected) =>
        Number(
          document.querySelector('[data-model="tabular-classifier"][data-version="1"] [data-field="requests"]')
            ?.textContent,
        ) >= expected,
      before + 7,
      { timeout: 10_000 },
    );
    const p50 = Number(await field('tabular-classifier', 'p50').textContent());
    assert.ok(p50 > 0, `P50 shown: ${p50}`);
    assert.equal(await field('tabular-classifier', 'batch').textContent(), '2');
    assert.match((await field('tabular-classifier', 'errors').textContent()) ?? '', /^[1-9][\d.]*%$/);
    assert.match((await field('tabular-classifier', 'top-errors').textContent()) ?? '', /SHAPE_MISMATCH ×1/);
    assert.ok(
      (await page.locator('[data-model="tabular-classifier"][data-version="1"] .stage[data-stage]').count()) > 0,
    );
    assert.ok(
      (await page.locator('[data-model="tabular-classifier"][data-version="1"] .uplot').count()) === 2,
      'two charts',
    );

    // Let the charts gather a few points, then keep a picture of it.
    for (let i = 0; i < 3; i++) {
      await infer({ inputs: [features] });
      await page.waitForTimeout(700);
    }
    mkdirSync(join(ROOT, '.tensorgate', 'screenshots'), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    assert.ok(existsSync(SCREENSHOT));
    assert.deepEqual(problems, []);
  });

  it('opens a new stream after an HTTP error, which the browser does not retry', async () => {
    const other = await browser.newPage();
    let refused = 0;
    await other.route('**/dashboard/api/events*', (route) => {
      if (refused++ === 0) return route.fulfill({ status: 502, body: 'bad gateway' });
      return route.continue();
    });
    await other.goto(`${base}/dashboard`);
    await other.waitForSelector('#status[data-state="live"]', { timeout: 10_000 });
    assert.equal(refused, 2);
    await other.close();
  });

  it('says it is disconnected when the server goes away', async () => {
    await server?.close();
    server = undefined;
    await page.waitForSelector('#status[data-state="down"]', { timeout: 10_000 });
    assert.match((await page.locator('#status-text').textContent()) ?? '', /disconnected/);
  });
});

describe('dashboard login, with auth on', { timeout: 180_000 }, () => {
  const run = promisify(execFile);
  let served: Served;
  let keysFile: string;
  const keys: Record<'monitor' | 'inference', string> = { monitor: '', inference: '' };

  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-dash-auth-'));
    keysFile = join(work, 'keys.json');
    for (const role of ['monitor', 'inference'] as const) {
      const { stdout } = await run(
        process.execPath,
        [
          '--import',
          'tsx',
          join(ROOT, 'src/cli/main.ts'),
          '--audit-log',
          join(work, 'a.jsonl'),
          'keys',
          'create',
        ].concat(['--name', role, '--role', role, '--file', keysFile]),
        { cwd: ROOT },
      );
      keys[role] = stdout.trim();
    }
    served = await serveOne('adder', { serveArgs: ['--auth', 'on', '--api-keys', keysFile] });
  });

  after(async () => {
    await served?.stop();
  });

  it('asks for a credential, refuses a wrong or too weak one, and shows the models after a good one', async () => {
    const context = await browser.newContext();
    const login = await context.newPage();
    await login.goto(`${served.base}/dashboard`);
    await login.waitForSelector('#login:not([hidden])');
    assert.equal(await login.locator('#main').isHidden(), true, 'no data is shown before login');

    const signIn = async (token: string) => {
      await login.fill('#login-token', token);
      await login.click('#login button[type="submit"]');
    };
    await signIn('tgk_000000000000_not-a-real-secret-not-a-real-secret-not-a-re');
    await login.waitForFunction(() =>
      /UNAUTHENTICATED/.test(document.querySelector('#login-error')?.textContent ?? ''),
    );
    await signIn(keys.inference);
    await login.waitForFunction(() => /FORBIDDEN/.test(document.querySelector('#login-error')?.textContent ?? ''));

    await signIn(keys.monitor);
    await login.waitForSelector('#status[data-state="live"]');
    await login.waitForSelector('article[data-model="adder"]');
    assert.equal(await login.locator('#login').isHidden(), true);

    const [cookie] = await context.cookies();
    assert.equal(cookie?.name, 'tg_session');
    assert.equal(cookie?.httpOnly, true, 'scripts cannot read the session');
    assert.equal(cookie?.sameSite, 'Strict');
    assert.equal(cookie?.path, '/dashboard');
    assert.ok(!cookie?.value.includes(parseApiKey(keys.monitor)?.secret as string), 'the cookie is not the key');

    // The session opens the dashboard's API and nothing else.
    const withCookie = { headers: { cookie: `tg_session=${cookie?.value}` } };
    assert.equal((await fetch(`${served.base}/dashboard/api/snapshot`, withCookie)).status, 200);
    assert.equal((await fetch(`${served.base}/metrics`, withCookie)).status, 401);
    assert.equal((await fetch(`${served.base}/v2/models/adder`, withCookie)).status, 401);

    // Revoking the key ends its sessions at once; the page asks for a login again.
    const id = parseApiKey(keys.monitor)?.id as string;
    await run(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), 'keys', 'revoke', id, '--file', keysFile],
      {
        cwd: ROOT,
      },
    );
    assert.equal((await fetch(`${served.base}/dashboard/api/snapshot`, withCookie)).status, 401);
    await login.waitForSelector('#login:not([hidden])', { timeout: 15_000 });
    await context.close();
  });

  it('ends a session on sign-out', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), 'keys', 'create', '--name', 'm2', '--role', 'monitor'].concat([
        '--file',
        keysFile,
      ]),
      { cwd: ROOT },
    );
    const res = await fetch(`${served.base}/dashboard/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: stdout.trim() }),
    });
    assert.equal(res.status, 204);
    const session = /tg_session=([\w-]+)/.exec(res.headers.get('set-cookie') ?? '')?.[1];
    const withCookie = { headers: { cookie: `tg_session=${session}` } };
    assert.equal((await fetch(`${served.base}/dashboard/api/snapshot`, withCookie)).status, 200);
    const out = await fetch(`${served.base}/dashboard/logout`, { method: 'POST', ...withCookie });
    assert.equal(out.status, 204);
    assert.match(out.headers.get('set-cookie') ?? '', /Max-Age=0/);
    assert.equal((await fetch(`${served.base}/dashboard/api/snapshot`, withCookie)).status, 401);
  });
});
