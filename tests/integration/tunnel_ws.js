// tunnel_ws.js: an exec tunnel over the WebSocket route, from the npm `ws`
// client (an independent RFC 6455 implementation): opens URL (wss://
// HOST:PORT/api/compute/<grant path>) trusting CA, then relays stdin to
// binary frames and every frame received to stdout, so it can stand as
// ssh's ProxyCommand. At the end prints {"close": code, "reason": "..."} on
// stderr and exits 0 for a normal close (1000), 1 otherwise.
//
//   node tunnel_ws.js wss://127.0.0.1:8443/api/compute/tunnels/connect?... CA
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const WebSocket = require(path.join(__dirname, '..', 'interop', 'node_modules', 'ws'));

const [url, ca] = process.argv.slice(2);
const ws = new WebSocket(url, { ca: fs.readFileSync(ca), perMessageDeflate: false });
let done = false;
const finish = (code, reason) => {
  if (done) return;
  done = true;
  process.stderr.write(JSON.stringify({ close: code, reason }) + '\n');
  process.stdout.write('', () => process.exit(code === 1000 ? 0 : 1));
};
ws.on('open', () => {
  process.stdin.on('data', (buf) => {
    ws.send(buf, { binary: true });
    if (ws.bufferedAmount > 1 << 20) {
      process.stdin.pause();
      const t = setInterval(() => {
        if (ws.bufferedAmount < 1 << 18) { clearInterval(t); process.stdin.resume(); }
      }, 5);
    }
  });
});
ws.on('message', (data) => {
  if (!process.stdout.write(data)) {
    ws.pause();
    process.stdout.once('drain', () => ws.resume());
  }
});
ws.on('close', (code, reason) => finish(code, reason.toString()));
ws.on('error', (e) => finish(-1, String(e.message)));
ws.on('unexpected-response', (req, res) => finish(-res.statusCode, `HTTP ${res.statusCode}`));
