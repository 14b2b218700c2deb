// exec_calls.js: Sandboxes.Exec round trips beside Health.Check on the same
// @grpc/grpc-js channel to a bc-controller (bench/exec.sh): N sequential
// calls of each, after a warm-up; prints one key=value line with the p50
// and p99 of each in microseconds.
//
//   node exec_calls.js HOST:PORT CA TOKEN SANDBOX_ID 'PUBLIC KEY LINE' N
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const nm = path.join(__dirname, '..', 'tests', 'interop', 'node_modules');
const grpc = require(path.join(nm, '@grpc/grpc-js'));
const loader = require(path.join(nm, '@grpc/proto-loader'));

const [addr, ca, token, sbx, pub, nArg] = process.argv.slice(2);
const n = Number(nArg || 200);
const opts = { keepCase: true, longs: String, defaults: true,
  includeDirs: [path.join(__dirname, '..', 'proto')] };
const pkg = grpc.loadPackageDefinition(loader.loadSync(
  ['bc/compute/v1/sandboxes.proto', 'grpc/health/v1/health.proto'], opts));
const creds = grpc.credentials.combineChannelCredentials(
  grpc.credentials.createSsl(fs.readFileSync(ca)),
  grpc.credentials.createFromMetadataGenerator((_, cb) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${token}`);
    cb(null, md);
  }));
const sbxs = new pkg.bc.compute.v1.Sandboxes(addr, creds);
const health = new pkg.grpc.health.v1.Health(addr, creds, { channelOverride: sbxs.getChannel() });

const once = (fn) => new Promise((res, rej) => {
  const t0 = process.hrtime.bigint();
  fn((err) => (err ? rej(err) : res(Number(process.hrtime.bigint() - t0) / 1000)));
});
const exec = (cb) => sbxs.Exec({ sandbox_id: sbx, public_key: pub, minutes: 1 }, cb);
const check = (cb) => health.Check({ service: '' }, cb);
const pct = (v, p) => v[Math.min(v.length - 1, Math.floor(v.length * p))];

(async () => {
  for (let i = 0; i < 20; i++) { await once(exec); await once(check); }
  const e = [], h = [];
  for (let i = 0; i < n; i++) { e.push(await once(exec)); h.push(await once(check)); }
  e.sort((a, b) => a - b);
  h.sort((a, b) => a - b);
  console.log(`exec_p50_us=${pct(e, 0.5).toFixed(0)} exec_p99_us=${pct(e, 0.99).toFixed(0)} ` +
    `health_p50_us=${pct(h, 0.5).toFixed(0)} health_p99_us=${pct(h, 0.99).toFixed(0)}`);
  process.exit(0);
})().catch((err) => { console.error(String(err)); process.exit(1); });
