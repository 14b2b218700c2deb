// client.test.js: an independent gRPC client (@grpc/grpc-js with
// @grpc/proto-loader, loading the project's own .proto files) drives the
// public API of a running bc-controller and checks that it answers as bcctl
// does. Run by run.t, which starts the stack and passes:
//
//   BC_URL       host:port of a replica (TLS)
//   BC_CA_FILE   the API CA (pki/api-ca.pem)
//   BC_TOKEN     an admin bearer token
//   BC_TENANT    tenant for instances (empty: the token's own)
//   BC_POOL_ID, BC_FLAVOR, BC_IMAGE_ID   a pool, flavor (name) and image to use
//   BC_BCCTL     the bcctl binary to compare with
//
// Field names: keepCase true, so messages carry the .proto names
// (pool_id, memory_mib); bcctl's JSON is compared after its keys are put in
// the same snake_case, whichever spelling it prints.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
// protobufjs as proto-loader itself resolves it (not a dependency of ours)
const protobuf = require(require.resolve('protobufjs', {
  paths: [path.dirname(require.resolve('@grpc/proto-loader'))],
}));

const PROTO_DIR = path.resolve(__dirname, '../../proto');
const CALL_TIMEOUT_MS = 10000;
const STATE_TIMEOUT_MS = 30000;

const env = (name, fallback) => {
  const v = process.env[name] ?? (fallback && process.env[fallback]);
  if (!v) throw new Error(`${name} is not set (run.t sets it)`);
  return v;
};

let cfg;      // env values
let authed;   // clients with the bearer token
let anon;     // clients without one
let home;     // empty HOME for bcctl
let instance; // the instance created by the Create test

// ------------------------------------------------------------ helpers

function loadPackage() {
  const def = protoLoader.loadSync(
    ['bc/compute/v1/instances.proto', 'bc/compute/v1/sandboxes.proto', 'bc/admin/v1/admin.proto',
      'bc/compute/v1/secrets.proto', 'bc/compute/v1/volumes.proto', 'grpc/health/v1/health.proto'],
    {
      keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
      includeDirs: [PROTO_DIR],
    });
  return grpc.loadPackageDefinition(def);
}

function clients(pkg, withToken) {
  const ca = fs.readFileSync(cfg.caFile);
  let creds = grpc.credentials.createSsl(ca);
  if (withToken) {
    const callCreds = grpc.credentials.createFromMetadataGenerator((_params, cb) => {
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${cfg.token}`);
      cb(null, md);
    });
    creds = grpc.credentials.combineChannelCredentials(creds, callCreds);
  }
  return {
    health: new pkg.grpc.health.v1.Health(cfg.url, creds),
    instances: new pkg.bc.compute.v1.Instances(cfg.url, creds),
    templates: new pkg.bc.compute.v1.SandboxTemplates(cfg.url, creds),
    sandboxes: new pkg.bc.compute.v1.Sandboxes(cfg.url, creds),
    secrets: new pkg.bc.compute.v1.Secrets(cfg.url, creds),
    volumes: new pkg.bc.compute.v1.SandboxVolumes(cfg.url, creds),
  };
}

// rpc(client, 'Get', req): the answer, or rejects with the grpc-js error
// (code, details, metadata = trailers).
function rpc(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, { deadline: Date.now() + CALL_TIMEOUT_MS }, (err, res) => {
      if (err) reject(err); else resolve(res);
    });
  });
}

// rpcError(promise): the error a call must fail with.
async function rpcError(p) {
  try {
    const res = await p;
    assert.fail(`expected an error, got ${JSON.stringify(res)}`);
  } catch (err) {
    if (err instanceof assert.AssertionError) throw err;
    return err;
  }
}

const tenantArgs = () => (cfg.tenant ? ['--tenant', cfg.tenant] : []);

function bcctl(...args) {
  const r = spawnSync(cfg.bcctl,
    ['--url', cfg.url, '--ca-file', cfg.caFile, '--format', 'json', ...args], {
      env: { ...process.env, BC_TOKEN: cfg.token, HOME: home },
      encoding: 'utf8', timeout: CALL_TIMEOUT_MS * 2,
    });
  let json = null;
  try { json = r.stdout.trim() ? JSON.parse(r.stdout) : null; } catch { json = null; }
  return { status: r.status, json, stdout: r.stdout, stderr: r.stderr };
}

const snake = (k) => k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

// canon(v): one spelling for both sides: snake_case keys, numbers as
// strings, proto3 defaults ("", 0, false, [], {}) as absent.
function canon(v) {
  if (v === null || v === undefined) return undefined;
  if (Array.isArray(v)) {
    const a = v.map(canon);
    return a.length ? a : undefined;
  }
  if (typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v).sort()) {
      const c = canon(v[k]);
      if (c !== undefined) o[snake(k)] = c;
    }
    return Object.keys(o).length ? o : undefined;
  }
  if (v === false || v === '' || v === 0 || v === '0') return undefined;
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  return v;
}

const listItems = (j) => (Array.isArray(j) ? j : (j && j.items) || []);

async function getInstance(id) {
  return rpc(authed.instances, 'Get', { tenant_id: cfg.tenant, instance_id: id });
}

async function waitFor(what, fn) {
  const deadline = Date.now() + STATE_TIMEOUT_MS;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last.done) return last.value;
    } catch (err) {
      last = { error: `${err.code} ${err.details || err.message}` };
    }
    if (Date.now() > deadline) {
      assert.fail(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

// decodeStatusDetails(err): google.rpc.Status from grpc-status-details-bin.
function decodeStatusDetails(err) {
  const bins = err.metadata ? err.metadata.get('grpc-status-details-bin') : [];
  assert.equal(bins.length, 1, 'one grpc-status-details-bin trailer');
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(PROTO_DIR, target);
  root.loadSync('google/rpc/status.proto');
  const Status = root.lookupType('google.rpc.Status');
  const ErrorInfo = root.lookupType('google.rpc.ErrorInfo');
  const status = Status.toObject(Status.decode(bins[0]), { defaults: true });
  const infos = status.details.map((any) => ({
    type_url: any.type_url ?? any.typeUrl,
    info: ErrorInfo.toObject(ErrorInfo.decode(any.value), { defaults: true }),
  }));
  return { status, infos };
}

function assertInvalidInput(err, what) {
  assert.equal(err.code, grpc.status.INVALID_ARGUMENT,
    `${what}: INVALID_ARGUMENT (3), got ${err.code} ${err.details}`);
  const { status, infos } = decodeStatusDetails(err);
  assert.equal(status.code, grpc.status.INVALID_ARGUMENT, 'Status.code is the call status');
  assert.equal(infos.length, 1, 'one detail');
  assert.equal(infos[0].type_url, 'type.googleapis.com/google.rpc.ErrorInfo');
  assert.equal(infos[0].info.reason, 'INVALID_INPUT');
}

// ------------------------------------------------------------ tests

before(() => {
  cfg = {
    url: env('BC_URL'),
    caFile: env('BC_CA_FILE'),
    token: env('BC_TOKEN'),
    tenant: process.env.BC_TENANT || '', // empty: the token's own tenant
    pool: env('BC_POOL_ID', 'POOL_ID'),
    flavor: env('BC_FLAVOR', 'FLAVOR_NAME'),
    image: env('BC_IMAGE_ID'),
    bcctl: env('BC_BCCTL'),
  };
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-interop-home-'));
  const pkg = loadPackage();
  authed = clients(pkg, true);
  anon = clients(pkg, false);
});

after(() => {
  for (const set of [authed, anon]) {
    if (!set) continue;
    for (const c of Object.values(set)) c.close();
  }
  if (home) fs.rmSync(home, { recursive: true, force: true });
});

test('Health/Check answers SERVING', async () => {
  const res = await rpc(authed.health, 'Check', { service: '' });
  assert.equal(res.status, 'SERVING');
});

test('a call without a token is UNAUTHENTICATED', async () => {
  const err = await rpcError(rpc(anon.instances, 'List', { tenant_id: cfg.tenant }));
  assert.equal(err.code, grpc.status.UNAUTHENTICATED, `got ${err.code} ${err.details}`);
  const cli = spawnSync(cfg.bcctl, ['--url', cfg.url, '--ca-file', cfg.caFile, 'instance', 'list',
    ...tenantArgs()], { env: { ...process.env, BC_TOKEN: '', HOME: home }, encoding: 'utf8' });
  assert.equal(cli.status, 14, 'bcctl without a token exits 14 (UNAUTHENTICATED)');
});

test('Get of a malformed id is INVALID_ARGUMENT with ErrorInfo INVALID_INPUT', async () => {
  const err = await rpcError(getInstance('not-an-id'));
  assertInvalidInput(err, 'Get("not-an-id")');
  assert.equal(bcctl('instance', 'get', 'not-an-id', ...tenantArgs()).status, 2,
    'bcctl exits 2 (INVALID_INPUT) for the same request');
});

test('Create with an unknown flavor is INVALID_ARGUMENT with ErrorInfo INVALID_INPUT', async () => {
  const err = await rpcError(rpc(authed.instances, 'Create', {
    tenant_id: cfg.tenant, pool_id: cfg.pool, flavor: 'no-such-flavor', image_id: cfg.image,
  }));
  assertInvalidInput(err, 'Create(flavor=no-such-flavor)');
});

test('a request over the 1 MiB message cap is INVALID_ARGUMENT naming maxBytes', async () => {
  const err = await rpcError(rpc(authed.instances, 'Create', {
    tenant_id: cfg.tenant, pool_id: cfg.pool, flavor: cfg.flavor, image_id: cfg.image,
    user_data: 'x'.repeat(2 * 1024 * 1024),
  }));
  assertInvalidInput(err, 'Create(2 MiB userData)');
  const { infos } = decodeStatusDetails(err);
  assert.ok(Number(infos[0].info.metadata.maxBytes) > 0, 'ErrorInfo.metadata.maxBytes is set');
});

test('Create places an instance that reaches running', async () => {
  const created = await rpc(authed.instances, 'Create', {
    tenant_id: cfg.tenant, pool_id: cfg.pool, flavor: cfg.flavor, image_id: cfg.image,
    idempotency_key: `interop-${process.pid}-${Date.now()}`,
  });
  assert.match(created.id, /^inst_/);
  assert.equal(created.pool_id, cfg.pool);
  assert.equal(created.image_id, cfg.image);
  if (cfg.tenant) assert.equal(created.tenant_id, cfg.tenant);
  else assert.ok(created.tenant_id, 'tenant_id is set (the token\'s own tenant)');
  assert.equal(created.flavor, cfg.flavor);
  instance = await waitFor('state running', async () => {
    const got = await getInstance(created.id);
    return { done: got.state === 'running', value: got, state: got.state };
  });
  assert.equal(instance.desired_state, 'running');
  assert.ok(instance.node_id.startsWith('node_'), `node_id ${instance.node_id}`);
});

test('Get answers what bcctl instance get shows', async () => {
  assert.ok(instance, 'an instance from the Create test');
  // compare a bcctl answer with gRPC answers around it that agree, so a
  // report landing in between cannot make a false difference
  let lastDiff;
  for (let attempt = 0; attempt < 10; attempt++) {
    const g1 = await getInstance(instance.id);
    const cli = bcctl('instance', 'get', instance.id, ...tenantArgs());
    const g2 = await getInstance(instance.id);
    assert.equal(cli.status, 0, `bcctl instance get: ${cli.stderr}`);
    assert.ok(cli.json, `bcctl printed JSON: ${cli.stdout}`);
    try {
      assert.deepEqual(canon(g1), canon(g2));
    } catch {
      continue; // changed between the two gRPC reads: try again
    }
    assert.equal(canon(g1).id, instance.id, 'the gRPC answer is the instance');
    try {
      assert.deepEqual(canon(cli.json), canon(g1));
      return;
    } catch (err) {
      lastDiff = err;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw lastDiff || new Error('the instance kept changing');
});

test('List answers what bcctl instance list shows', async () => {
  assert.ok(instance, 'an instance from the Create test');
  const res = await rpc(authed.instances, 'List', { tenant_id: cfg.tenant, pool_id: cfg.pool });
  const ids = res.items.map((i) => i.id).sort();
  assert.ok(ids.includes(instance.id), 'List includes the instance');
  const item = res.items.find((i) => i.id === instance.id);
  assert.equal(item.state, 'running');
  assert.equal(item.pool_id, cfg.pool);
  const cli = bcctl('instance', 'list', ...tenantArgs(), '--pool', cfg.pool);
  assert.equal(cli.status, 0, `bcctl instance list: ${cli.stderr}`);
  assert.deepEqual(listItems(cli.json).map((i) => i.id).sort(), ids, 'the same instances');
});

test('Pause, Resume, Stop and Start move the instance; a refusal is FAILED_PRECONDITION with ErrorInfo INVALID_STATE', async () => {
  assert.ok(instance, 'an instance from the Create test');
  const req = { tenant_id: cfg.tenant, instance_id: instance.id };
  const reach = (want) => waitFor(`state ${want}`, async () => {
    const got = await getInstance(instance.id);
    return { done: got.state === want, value: got, state: got.state };
  });
  assert.equal((await rpc(authed.instances, 'Pause', req)).desired_state, 'paused');
  await reach('paused');
  assert.equal((await rpc(authed.instances, 'Resume', req)).desired_state, 'running');
  await reach('running');
  assert.equal((await rpc(authed.instances, 'Stop', req)).desired_state, 'stopped');
  await reach('stopped');
  const err = await rpcError(rpc(authed.instances, 'Pause', req));
  assert.equal(err.code, grpc.status.FAILED_PRECONDITION, `Pause of a stopped instance: ${err.code} ${err.details}`);
  const { infos } = decodeStatusDetails(err);
  assert.equal(infos[0].info.reason, 'INVALID_STATE');
  assert.equal(infos[0].info.metadata.reason, 'not-running');
  assert.equal(infos[0].info.metadata.state, 'stopped');
  const started = await rpc(authed.instances, 'Start', req);
  assert.equal(started.desired_state, 'running');
  assert.ok(['starting', 'running'].includes(started.state), `state after Start: ${started.state}`);
  instance = await reach('running');
});

test('Delete ends in deleted, as bcctl shows it', async () => {
  assert.ok(instance, 'an instance from the Create test');
  const del = await rpc(authed.instances, 'Delete', { tenant_id: cfg.tenant, instance_id: instance.id });
  assert.equal(del.id, instance.id);
  assert.equal(del.desired_state, 'deleted');
  assert.ok(['deleting', 'deleted'].includes(del.state), `state after Delete: ${del.state}`);
  const final = await waitFor('state deleted', async () => {
    try {
      const got = await getInstance(instance.id);
      return { done: got.state === 'deleted', value: { state: got.state }, state: got.state };
    } catch (err) {
      if (err.code === grpc.status.NOT_FOUND) return { done: true, value: { notFound: true } };
      throw err;
    }
  });
  const cli = bcctl('instance', 'get', instance.id, ...tenantArgs());
  if (final.notFound) {
    assert.equal(cli.status, 3, 'bcctl: NOT_FOUND (3) as well');
  } else {
    assert.equal(cli.status, 0, `bcctl instance get: ${cli.stderr}`);
    assert.equal(cli.json.state, 'deleted');
  }
  const res = await rpc(authed.instances, 'List', { tenant_id: cfg.tenant, pool_id: cfg.pool });
  assert.ok(!res.items.some((i) => i.id === instance.id), 'List without deleted leaves it out');
});

test('Sandboxes: template update by oneof presence, create with wait, extend, refusal details', async () => {
  const t = await rpc(authed.templates, 'Create', {
    tenant_id: cfg.tenant, name: `interop-${process.pid}`, pool_id: cfg.pool, flavor: cfg.flavor,
    image_id: cfg.image, max_ttl_seconds: 7200,
  });
  assert.match(t.id, /^sbxt_/);
  assert.equal(t.default_ttl_seconds, '3600', 'defaultTtlSeconds defaults to 3600');
  // only max_ttl_seconds is present: the flavor stays, the version rises
  const u = await rpc(authed.templates, 'Update', {
    tenant_id: cfg.tenant, template_id: t.id, max_ttl_seconds: 10800,
  });
  assert.equal(u.max_ttl_seconds, '10800');
  assert.equal(u.flavor, t.flavor, 'a field not given is unchanged');
  assert.equal(u.version, '2');
  const s = await rpc(authed.sandboxes, 'Create', {
    tenant_id: cfg.tenant, template_id: t.id, ttl_seconds: 900, wait: { timeout_ms: 20000 },
  });
  assert.match(s.id, /^sbx_/);
  assert.equal(s.state, 'ready', 'the wait answers once the sandbox is ready');
  const e = await rpc(authed.sandboxes, 'Extend', { tenant_id: cfg.tenant, sandbox_id: s.id, by: '30m' });
  assert.equal(BigInt(e.expires_at) - BigInt(s.expires_at), 1800000n, 'by 30m: 30 minutes later');
  assert.equal(e.ttl_seconds, '2700');
  const err = await rpcError(rpc(authed.sandboxes, 'Extend', {
    tenant_id: cfg.tenant, sandbox_id: s.id, by: '30m', until: String(Date.now()),
  }));
  assertInvalidInput(err, 'Extend with both until and by');
  assert.equal(decodeStatusDetails(err).infos[0].info.metadata.field, 'until');
  const cli = bcctl('sandbox', 'get', s.id, ...tenantArgs());
  assert.equal(cli.status, 0, `bcctl sandbox get: ${cli.stderr}`);
  assert.equal(String(cli.json.expiresAt ?? cli.json.expires_at), e.expires_at, 'bcctl shows the same expiry');
  const d = await rpc(authed.sandboxes, 'Delete', { tenant_id: cfg.tenant, sandbox_id: s.id });
  assert.ok(['deleting', 'deleted'].includes(d.state), `state after Delete: ${d.state}`);
  await rpc(authed.templates, 'Delete', { tenant_id: cfg.tenant, template_id: t.id });
});

test('Secrets: Put takes bytes and answers no value, List matches bcctl, a template env map, Delete', async () => {
  const name = `interop-${process.pid}`;
  // bytes no string field could carry as they are: quotes, newline, $, non-UTF-8
  const value = Buffer.from([0x27, 0x22, 0x0a, 0x24, 0x5c, 0xff, 0xfe, 0x80, 0x41]);
  const p = await rpc(authed.secrets, 'Put', { tenant_id: cfg.tenant, name, value });
  assert.match(p.id, /^sec_/);
  assert.equal(p.version, '1');
  assert.equal(p.scope, 'tenant');
  assert.ok(!('value' in p), 'the answer has no value field');
  const r = await rpc(authed.secrets, 'Put', { tenant_id: cfg.tenant, name, value: Buffer.from('x') });
  assert.equal(r.id, p.id, 'a second Put rotates the same secret');
  assert.equal(r.version, '2');
  const l = await rpc(authed.secrets, 'List', { tenant_id: cfg.tenant });
  const mine = l.items.find((x) => x.name === name);
  assert.equal(mine.version, '2');
  const cli = bcctl('secret', 'list', ...tenantArgs());
  assert.equal(cli.status, 0, `bcctl secret list: ${cli.stderr}`);
  assert.deepEqual(canon(listItems(cli.json)), canon(l.items), 'bcctl lists the same secrets');
  const err = await rpcError(rpc(authed.secrets, 'Put', { tenant_id: cfg.tenant, name: 'Bad Name', value }));
  assertInvalidInput(err, 'Put with a bad name');
  assert.equal(decodeStatusDetails(err).infos[0].info.metadata.field, 'name');
  const tenant = p.tenant_id;
  const t = await rpc(authed.templates, 'Create', {
    tenant_id: cfg.tenant, name: `interop-env-${process.pid}`, pool_id: cfg.pool, flavor: cfg.flavor,
    image_id: cfg.image, env: { API_KEY: `secret://${tenant}/${name}`, BY_ID: `secret://${tenant}/${p.id}` },
  });
  assert.deepEqual(t.env, { API_KEY: `secret://${tenant}/${name}`, BY_ID: `secret://${tenant}/${p.id}` },
    'the template answers its env map');
  const u = await rpc(authed.templates, 'Update', { tenant_id: cfg.tenant, template_id: t.id, clear_env: true });
  assert.deepEqual(u.env, {}, 'clear_env empties it');
  await rpc(authed.templates, 'Delete', { tenant_id: cfg.tenant, template_id: t.id });
  const d = await rpc(authed.secrets, 'Delete', { tenant_id: cfg.tenant, name });
  assert.equal(d.id, p.id);
  const gone = await rpc(authed.secrets, 'List', { tenant_id: cfg.tenant });
  assert.ok(!gone.items.some((x) => x.name === name), 'deleted');
});

test('SandboxVolumes: create with a key, retry, resize, refusal details, list as bcctl, delete', async () => {
  const key = `interop-${process.pid}`;
  const req = { tenant_id: cfg.tenant, pool_id: cfg.pool, name: key, size_gib: 2, idempotency_key: key };
  let v;
  // the host reports its volume store every few seconds after it joins
  for (let i = 0; ; i++) {
    try { v = await rpc(authed.volumes, 'Create', req); break; } catch (err) {
      if (i >= 20) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  assert.match(v.id, /^vol_[0-9a-z]{26}$/);
  assert.equal(v.serial, `bcv-${v.id.slice(-16)}`, "serial: bcv- and the id's last 16 characters");
  assert.equal(v.state, 'ready');
  assert.equal(v.size_gib, '2');
  const again = await rpc(authed.volumes, 'Create', req);
  assert.equal(again.id, v.id, 'the same key and request: the same volume');
  const r = await rpc(authed.volumes, 'Resize', { tenant_id: cfg.tenant, volume_id: v.id, size_gib: 3 });
  assert.equal(r.size_gib, '3');
  const err = await rpcError(rpc(authed.volumes, 'Resize', { tenant_id: cfg.tenant, volume_id: v.id, size_gib: 1 }));
  assertInvalidInput(err, 'Resize to a smaller size');
  assert.equal(decodeStatusDetails(err).infos[0].info.metadata.reason, 'shrink');
  const l = await rpc(authed.volumes, 'List', { tenant_id: cfg.tenant, scope: 'all' });
  assert.ok(l.items.some((x) => x.id === v.id && x.size_gib === '3'), 'List shows it grown');
  const cli = bcctl('sandbox-volume', 'list', '--all', ...tenantArgs());
  assert.equal(cli.status, 0, `bcctl sandbox-volume list: ${cli.stderr}`);
  assert.deepEqual(canon(listItems(cli.json)), canon(l.items), 'bcctl lists the same volumes');
  const d = await rpc(authed.volumes, 'Delete', { tenant_id: cfg.tenant, volume_id: v.id });
  assert.ok(['deleting', 'deleted'].includes(d.state), `state after Delete: ${d.state}`);
});
