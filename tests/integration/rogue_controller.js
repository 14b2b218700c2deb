// rogue_controller.js: a hostile stand-in for the controller, holding one
// node's certificate and key as its server certificate (a compromised host).
// It serves the Node API over TLS like bc-controller, and answers every
// WatchSpec with a NodeSpec of a huge generation for the node id given on
// the command line, with one instance of the fake runtime. Every WatchSpec
// that reaches it is recorded ("watch" lines in EVENTS_FILE). A bcd that
// trusted it would accept the spec and create the instance;
// tests/integration/node_identity.t checks that bcd refuses the TLS
// handshake instead.
//
//   node rogue_controller.js PORT NODE_ID INSTANCE_ID CERT KEY CLIENT_CA EVENTS_FILE
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [port, nodeId, instanceId, cert, key, clientCa, events] = process.argv.slice(2);
const def = protoLoader.loadSync('bc/node/v1/node.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const node = grpc.loadPackageDefinition(def).bc.node.v1;
const sha = 'a'.repeat(64);
const instance = {
  id: instanceId, runtime: 'fake', desired_state: 'DESIRED_RUNNING', vcpus: 1,
  memory_mib: 512, disk_gib: 1, numa_node: -1,
  image: { id: 'img_rogue', url: 'https://images.bc.invalid/rogue.qcow2', sha256: sha,
    format: 'qcow2', size_bytes: 1073741824 },
};

const server = new grpc.Server();
server.addService(node.Node.service, {
  Join: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
  WatchSpec: (call) => {
    fs.appendFileSync(events, 'watch\n');
    call.write({ spec: { generation: '1000000', node_id: nodeId, instances: [instance] } });
  },
  Report: (call, cb) => {
    fs.appendFileSync(events, `report ${call.request.applied_generation}\n`);
    cb(null, { spec_generation: '1000000' });
  },
  GetBootData: (_call, cb) => cb({ code: grpc.status.NOT_FOUND }),
});
const creds = grpc.ServerCredentials.createSsl(fs.readFileSync(clientCa),
  [{ private_key: fs.readFileSync(key), cert_chain: fs.readFileSync(cert) }], false);
server.bindAsync(`127.0.0.1:${port}`, creds, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log('listening');
});
