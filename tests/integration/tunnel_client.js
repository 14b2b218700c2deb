// tunnel_client.js: bcd's Agent.Tunnel from an independent client
// (@grpc/grpc-js + proto-loader over proto/bc/node/v1/agent.proto). Opens
// a tunnel with the given certificate (- - for none), verifying bcd's
// tunnel certificate against CA with the node id as the server name, sends
// stdin as data chunks (half-close at its EOF) and writes what comes back
// to stdout. Exit 0 when the tunnel ended OK; otherwise prints
// {"code": <grpc status>, "details": "..."} on stderr and exits 1.
//
//   node tunnel_client.js HOST:PORT CA CERT KEY NODE_ID INSTANCE_ID [PORT]
//
// BC_TUNNEL_RAW=1: the raw protocol instead (common/tunnel_raw.h) over
// node:tls, with the same certificates and server-name check: the request
// line, bcd's answer line, then stdin's bytes; it reads until as many bytes
// came back as it sent (the tests' guest is an echo server) and exits 0. A
// refusal or a failed handshake prints {"code": <the gRPC status of the
// same refusal>, "details": "...", "reason": "..."} and exits 1.
'use strict';
process.noDeprecation = true;
const fs = require('node:fs');
const path = require('node:path');
if (process.env.BC_TUNNEL_RAW === '1') { raw(); return; }
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [addr, ca, cert, key, nodeId, instanceId, port] = process.argv.slice(2);
const def = protoLoader.loadSync('bc/node/v1/agent.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const Agent = grpc.loadPackageDefinition(def).bc.node.v1.Agent;
const creds = grpc.credentials.createSsl(fs.readFileSync(ca),
  key === '-' ? null : fs.readFileSync(key), cert === '-' ? null : fs.readFileSync(cert));
const client = new Agent(addr, creds, { 'grpc.ssl_target_name_override': nodeId });
const call = client.Tunnel();
let failed = false;
call.on('data', (m) => { if (m.data && m.data.length) process.stdout.write(m.data); });
call.on('error', (err) => {
  failed = true;
  process.stderr.write(JSON.stringify({ code: err.code, details: err.details }) + '\n');
  process.exit(1);
});
call.on('end', () => { if (!failed) process.exit(0); });
call.write({ open: { instance_id: instanceId, port: Number(port || 22), tunnel_id: 'tun_js' } });
process.stdin.on('data', (b) => call.write({ data: b }));
process.stdin.on('end', () => call.end());

function raw() {
  const tls = require('node:tls');
  const [addr, ca, cert, key, nodeId, instanceId, port] = process.argv.slice(2);
  const i = addr.lastIndexOf(':');
  const grpcCode = { INVALID_INPUT: 3, NOT_FOUND: 5, ACCESS_DENIED: 7, RESOURCE_EXHAUSTED: 8,
    INVALID_STATE: 9, UNAVAILABLE: 14, UNAUTHENTICATED: 16 };
  const fail = (code, details, reason) => {
    process.stderr.write(JSON.stringify({ code, details, reason }) + '\n');
    process.exit(1);
  };
  const input = [];
  let inputDone = false, sent = 0, got = 0, open = false, head = Buffer.alloc(0);
  const s = tls.connect({
    host: addr.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(addr.slice(i + 1)),
    ca: fs.readFileSync(ca), servername: nodeId,
    cert: cert === '-' ? undefined : fs.readFileSync(cert),
    key: key === '-' ? undefined : fs.readFileSync(key),
  });
  const done = () => { if (open && inputDone && got >= sent) { s.destroy(); process.exit(0); } };
  s.on('error', (e) => fail(14, String(e.message), 'handshake'));
  s.on('secureConnect', () => {
    s.write(`BCTUNNEL/1 ${instanceId} ${Number(port || 22)} tun_js\n`);
  });
  s.on('data', (b) => {
    if (!open) {
      head = Buffer.concat([head, b]);
      const nl = head.indexOf(10);
      if (nl < 0) return;
      const line = head.subarray(0, nl).toString();
      b = head.subarray(nl + 1);
      if (line !== 'OK') {
        const m = /^ERR (\S+) (\S+) (.*)$/.exec(line) || [];
        fail(grpcCode[m[1]] || 2, m[3] || line, m[2]);
      }
      open = true;
      for (const c of input) { s.write(c); sent += c.length; }
      done();
    }
    got += b.length;
    process.stdout.write(b);
    done();
  });
  s.on('end', () => { if (!open) fail(14, 'bcd closed the connection', ''); done(); process.exit(open ? 0 : 1); });
  process.stdin.on('data', (b) => { if (open) { s.write(b); sent += b.length; } else input.push(b); });
  process.stdin.on('end', () => { inputDone = true; done(); });
}
