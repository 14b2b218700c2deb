// old_replica.js: a stand-in for a controller replica that is behind (an
// old process, a restored database): it serves the Node API over mTLS like
// bc-controller, answers every WatchSpec with a NodeSpec of the generation
// given on the command line and NO instances, and records every Report's
// applied generation and number of instances (" delta" after a report that
// is not complete). An agent that accepted that spec would destroy every
// instance it runs; tests/integration/nodes.t checks that it refuses it.
//
//   node old_replica.js PORT GENERATION NODE_ID CERT KEY CLIENT_CA REPORTS_FILE
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [port, generation, nodeId, cert, key, clientCa, reports] = process.argv.slice(2);
const def = protoLoader.loadSync('bc/node/v1/node.proto', {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const node = grpc.loadPackageDefinition(def).bc.node.v1;

const server = new grpc.Server();
server.addService(node.Node.service, {
  Join: (_call, cb) => cb({ code: grpc.status.UNIMPLEMENTED }),
  WatchSpec: (call) => {
    call.write({ spec: { generation, node_id: nodeId, instances: [] } });
    // hold the stream open, as a replica does
  },
  Report: (call, cb) => {
    const kind = call.request.complete ? '' : ' delta';
    fs.appendFileSync(reports,
      `${call.request.applied_generation} ${call.request.instances.length}${kind}\n`);
    cb(null, { spec_generation: generation });
  },
});
const creds = grpc.ServerCredentials.createSsl(fs.readFileSync(clientCa),
  [{ private_key: fs.readFileSync(key), cert_chain: fs.readFileSync(cert) }], true);
server.bindAsync(`127.0.0.1:${port}`, creds, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log('listening');
});
