// grpcjs_server.js: the peer of the RPC round-trip benchmark. A plain
// @grpc/grpc-js server (no TLS) answering grpc.health.v1.Health/Check, loaded
// from the project's own proto/grpc/health/v1/health.proto, so the C bench
// client can time the same call against bc-controller and against it.
//
//   node bench/grpcjs_server.js PORT [HOST]     (PORT 0: any free port)
//
// Prints "listening HOST:PORT" on stdout once bound; exits on SIGTERM/SIGINT.
// The npm packages come from tests/interop/node_modules (`npm ci` there).
'use strict';

const path = require('node:path');
const { createRequire } = require('node:module');

const repo = path.resolve(__dirname, '..');

function load(name) {
  try {
    return require(name);
  } catch {
    return createRequire(path.join(repo, 'tests/interop/package.json'))(name);
  }
}

const grpc = load('@grpc/grpc-js');
const protoLoader = load('@grpc/proto-loader');

const port = process.argv[2];
const host = process.argv[3] || '127.0.0.1';
if (!port || !/^\d+$/.test(port)) {
  process.stderr.write('usage: node bench/grpcjs_server.js PORT [HOST]\n');
  process.exit(1);
}

const def = protoLoader.loadSync('grpc/health/v1/health.proto', {
  keepCase: true, longs: String, enums: String, defaults: true,
  includeDirs: [path.join(repo, 'proto')],
});
const health = grpc.loadPackageDefinition(def).grpc.health.v1;

const server = new grpc.Server({
  'grpc.max_concurrent_streams': 1000,
});
server.addService(health.Health.service, {
  Check(call, cb) {
    const svc = call.request.service;
    if (svc === '' || svc === 'grpc.health.v1.Health') {
      cb(null, { status: 'SERVING' });
    } else {
      cb({ code: grpc.status.NOT_FOUND, details: `unknown service ${svc}` });
    }
  },
  Watch(call) {
    call.write({ status: 'SERVING' });
    // held open until the client cancels, as the protocol says
    call.on('cancelled', () => call.end());
  },
});

server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
  if (err) {
    process.stderr.write(`grpcjs_server: bind ${host}:${port}: ${err.message}\n`);
    process.exit(1);
  }
  process.stdout.write(`listening ${host}:${bound}\n`);
});

function stop() {
  server.tryShutdown(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
