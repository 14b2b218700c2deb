// grpc_call.js: one unary gRPC call from an independent client
// (@grpc/grpc-js + proto-loader over the project's .proto files): with a
// node's client certificate, as bcd calls the Node API, or with the bearer
// token in BC_TOKEN (CERT and KEY given as -), as a tenant calls the API.
// Prints the answer as JSON (bytes as base64) and exits 0, or prints
// {"code": <grpc status>, "details": "..."} and exits 1.
//
//   node grpc_call.js HOST:PORT CA CERT KEY PROTO SERVICE METHOD 'JSON'
//   node grpc_call.js 127.0.0.1:7443 ca.pem node.pem node.key bc/node/v1/node.proto \
//     bc.node.v1.Node GetBootData '{"instance_id": "inst_...", "ref": "sealed_..."}'
'use strict';
process.noDeprecation = true; // TLS to 127.0.0.1 sets an IP as ServerName; harmless here
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [addr, ca, cert, key, proto, service, method, request] = process.argv.slice(2);
const def = protoLoader.loadSync(proto, {
  keepCase: true, longs: String, enums: String, bytes: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const Svc = service.split('.').reduce((o, k) => o[k], grpc.loadPackageDefinition(def));
const creds = grpc.credentials.createSsl(fs.readFileSync(ca),
  key === '-' ? null : fs.readFileSync(key), cert === '-' ? null : fs.readFileSync(cert));
const client = new Svc(addr, creds);
const md = new grpc.Metadata();
if (cert === '-' && process.env.BC_TOKEN) md.set('authorization', `Bearer ${process.env.BC_TOKEN}`);
const deadline = new Date(Date.now() + 30000);
client[method](JSON.parse(request), md, { deadline }, (err, resp) => {
  if (err) {
    console.log(JSON.stringify({ code: err.code, details: err.details }));
    process.exit(1);
  }
  console.log(JSON.stringify(resp));
  process.exit(0);
});
