// tunnels_hold.js: N exec tunnels held open at once (bench/exec.sh): for
// each, Sandboxes.Exec, then Tunnels.Connect with its ticket, until the
// guest's SSH banner came back through it; then prints "open N" and holds
// them all until stdin closes.
//
//   node tunnels_hold.js HOST:PORT CA TOKEN SANDBOX_ID 'PUBLIC KEY LINE' N
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const nm = path.join(__dirname, '..', 'tests', 'interop', 'node_modules');
const grpc = require(path.join(nm, '@grpc/grpc-js'));
const loader = require(path.join(nm, '@grpc/proto-loader'));

const [addr, ca, token, sbx, pub, nArg] = process.argv.slice(2);
const n = Number(nArg || 100);
const opts = { keepCase: true, longs: String, defaults: true,
  includeDirs: [path.join(__dirname, '..', 'proto')] };
const pkg = grpc.loadPackageDefinition(loader.loadSync(
  ['bc/compute/v1/sandboxes.proto', 'bc/compute/v1/tunnels.proto'], opts)).bc.compute.v1;
const ssl = grpc.credentials.createSsl(fs.readFileSync(ca));
const md = new grpc.Metadata();
md.set('authorization', `Bearer ${token}`);
const sbxs = new pkg.Sandboxes(addr, ssl);
const tunnels = new pkg.Tunnels(addr, ssl, { 'grpc.max_concurrent_streams': 1000 });
const calls = [];

const openOne = () => new Promise((res, rej) => {
  sbxs.Exec({ sandbox_id: sbx, public_key: pub, minutes: 15 }, md, (err, g) => {
    if (err) return rej(err);
    const call = tunnels.Connect();
    calls.push(call);
    call.on('data', (f) => { if (f.data && f.data.toString().startsWith('SSH-')) res(); });
    call.on('error', rej);
    call.write({ ticket: g.ticket });
  });
});

(async () => {
  for (let i = 0; i < n; i += 10) {
    await Promise.all(Array.from({ length: Math.min(10, n - i) }, openOne));
  }
  console.log(`open ${calls.length}`);
  process.stdin.resume();
  process.stdin.on('end', () => { calls.forEach((c) => c.cancel()); process.exit(0); });
})().catch((err) => { console.error(String(err)); process.exit(1); });
