// spec_controller.js: a stand-in for the controller's Node API that serves a
// NodeSpec from a file, for bcd-side tests of spec fields the controller
// does not send yet (snapshot_host.t: InstanceSpec.restore_from). It uses
// the stack's own server certificate (pki/server.pem), so a bcd of the
// stack trusts it as it trusts bc-controller.
//
// WatchSpec sends the spec in SPEC_FILE (proto-loader JSON of a NodeSpec)
// and again whenever the file changes (polled every 200 ms). Report appends
// one line per instance status to EVENTS_FILE ("<id> <state> <reason>") and
// acks the newest generation and every command result.
//
//   node spec_controller.js PORT CERT KEY SPEC_FILE EVENTS_FILE
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [port, cert, key, specFile, events] = process.argv.slice(2);
const def = protoLoader.loadSync('bc/node/v1/node.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const node = grpc.loadPackageDefinition(def).bc.node.v1;

function readSpec() {
  try {
    return fs.readFileSync(specFile, 'utf8');
  } catch (e) {
    return '';
  }
}

let generation = '0';
const server = new grpc.Server();
server.addService(node.Node.service, {
  Join: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
  WatchSpec: (call) => {
    let sent = '';
    const push = () => {
      const text = readSpec();
      if (!text || text === sent) return;
      sent = text;
      const spec = JSON.parse(text);
      generation = spec.generation;
      call.write({ spec });
      fs.appendFileSync(events, `spec ${spec.generation}\n`);
    };
    push();
    const t = setInterval(push, 200);
    call.on('cancelled', () => clearInterval(t));
    call.on('close', () => clearInterval(t));
  },
  Report: (call, cb) => {
    const r = call.request;
    const lines = (r.instances || []).map((i) => `${i.id} ${i.state} ${i.reason}`);
    fs.appendFileSync(events, lines.map((l) => `${l}\n`).join(''));
    cb(null, { spec_generation: generation, settled: (r.results || []).map((x) => x.id) });
  },
  GetBootData: (_call, cb) => cb({ code: grpc.status.NOT_FOUND }),
  RenewCertificate: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
});
const creds = grpc.ServerCredentials.createSsl(null,
  [{ private_key: fs.readFileSync(key), cert_chain: fs.readFileSync(cert) }], false);
server.bindAsync(`127.0.0.1:${port}`, creds, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log('listening');
});
