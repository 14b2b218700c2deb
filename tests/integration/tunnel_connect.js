// tunnel_connect.js: Tunnels.Connect from an independent client
// (@grpc/grpc-js): sends FIRST (a TunnelFrame as JSON, e.g. the ticket),
// then the bytes of stdin when SEND is "stdin" (in frames of at most 16 KiB)
// and half-closes; writes every received frame's bytes to stdout. At the
// end prints {"code": <grpc status>, "details": "..."} on stderr (0 for a
// stream that ended OK) and exits 0 for OK, 1 otherwise.
//
//   node tunnel_connect.js HOST:PORT CA '{"ticket": "bctk_..."}' [stdin]
'use strict';
process.noDeprecation = true;
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [addr, ca, first, send] = process.argv.slice(2);
const def = protoLoader.loadSync('bc/compute/v1/tunnels.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const Svc = grpc.loadPackageDefinition(def).bc.compute.v1.Tunnels;
const client = new Svc(addr, grpc.credentials.createSsl(fs.readFileSync(ca)));
const call = client.Connect();
let done = false;
const finish = (code, details) => {
  if (done) return;
  done = true;
  process.stderr.write(JSON.stringify({ code, details }) + '\n');
  process.exit(code === 0 ? 0 : 1);
};
call.on('data', (f) => { if (f.data && f.data.length) process.stdout.write(f.data); });
call.on('error', (e) => finish(e.code, e.details));
call.on('status', (s) => { if (s.code === 0) setImmediate(() => finish(0, s.details)); });
call.on('end', () => setTimeout(() => finish(0, 'end'), 100));
call.write(JSON.parse(first));
if (send === 'stdin') {
  process.stdin.on('data', (buf) => {
    for (let i = 0; i < buf.length; i += 16384) {
      if (!call.write({ data: buf.subarray(i, i + 16384) })) process.stdin.pause();
    }
  });
  call.on('drain', () => process.stdin.resume());
  process.stdin.on('end', () => call.end());
} else {
  call.end();
}
