// tunnel_client.js: bcd's Agent.Tunnel from an independent client
// (@grpc/grpc-js + proto-loader over proto/bc/node/v1/agent.proto). Opens
// a tunnel with the given certificate (- - for none), verifying bcd's
// tunnel certificate against CA with the node id as the server name, sends
// stdin as data chunks (half-close at its EOF) and writes what comes back
// to stdout. Exit 0 when the tunnel ended OK; otherwise prints
// {"code": <grpc status>, "details": "..."} on stderr and exits 1.
//
//   node tunnel_client.js HOST:PORT CA CERT KEY NODE_ID INSTANCE_ID [PORT]
'use strict';
process.noDeprecation = true;
const fs = require('node:fs');
const path = require('node:path');
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
