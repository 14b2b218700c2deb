// attack_streams.js: hold many server-streaming calls open against a
// controller, as an attacker would, and keep a tally of what became of them
// (tests/integration/attack_streams.t, the "API under attack" bench row).
//
//   node attack_streams.js HOST:PORT CA MODE N STATUS_FILE [reopen]
//
// MODE health: grpc.health.v1.Health/Watch with no credential at all.
// MODE events: bc.compute.v1.Events/Watch with the bearer token in BC_TOKEN.
// Streams are spread over channels of 10 (each its own HTTP/2 connection),
// so a per-connection stream limit does not hide a per-server one.
// With "reopen", a stream that ends is opened again a second later, as an
// attacker keeping up the pressure would (each of the N keeps trying).
// STATUS_FILE is rewritten every 200 ms with one line
// "open=<n> refused=<n> ended=<n> answered=<n> codes=<code:count,...>":
// open streams received at least one message and have not ended; refused
// ended without any message (their status codes in codes=); ended ended
// after a message; answered is how many of the N had a first outcome
// (refused and ended count every attempt with reopen). Runs until killed.
'use strict';
process.noDeprecation = true;
const fs = require('node:fs');
const path = require('node:path');
const interop = path.join(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(interop, '@grpc/grpc-js'));
const protoLoader = require(path.join(interop, '@grpc/proto-loader'));

const [addr, ca, mode, nArg, statusFile, reopen] = process.argv.slice(2);
const n = parseInt(nArg, 10);
const proto = mode === 'health' ? 'grpc/health/v1/health.proto' : 'bc/compute/v1/events.proto';
const def = protoLoader.loadSync(proto, {
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  includeDirs: [path.join(__dirname, '..', '..', 'proto')],
});
const pkg = grpc.loadPackageDefinition(def);
const Svc = mode === 'health' ? pkg.grpc.health.v1.Health : pkg.bc.compute.v1.Events;
const creds = grpc.credentials.createSsl(fs.readFileSync(ca));
const tally = { open: 0, refused: 0, ended: 0, answered: 0, codes: {} };
const clients = [];

function write() {
  const codes = Object.entries(tally.codes).map(([k, v]) => `${k}:${v}`).join(',');
  fs.writeFileSync(statusFile + '.tmp',
    `open=${tally.open} refused=${tally.refused} ended=${tally.ended} ` +
    `answered=${tally.answered} codes=${codes}\n`);
  fs.renameSync(statusFile + '.tmp', statusFile);
}

function watch(i, first) {
  const md = new grpc.Metadata();
  if (mode !== 'health' && process.env.BC_TOKEN)
    md.set('authorization', `Bearer ${process.env.BC_TOKEN}`);
  const call = clients[Math.floor(i / 10)].Watch(mode === 'health' ? { service: '' } : {}, md);
  let got = false;
  const answered = () => {
    if (first) {
      first = false;
      tally.answered++;
    }
  };
  call.on('data', () => {
    if (!got) {
      got = true;
      tally.open++;
      answered();
    }
  });
  call.on('status', (st) => {
    if (got) {
      tally.open--;
      tally.ended++;
    } else {
      tally.refused++;
    }
    answered();
    tally.codes[st.code] = (tally.codes[st.code] || 0) + 1;
    if (reopen === 'reopen')
      setTimeout(() => watch(i, false), 1000);
  });
  call.on('error', () => {});
}

for (let i = 0; i < n; i++) {
  if (i % 10 === 0)
    clients.push(new Svc(addr, creds, { 'grpc.use_local_subchannel_pool': 1 }));
  watch(i, true);
}
write();
setInterval(write, 200);
