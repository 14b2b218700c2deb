// ws.test.js: an independent WebSocket client (npm `ws`) over TLS against
// the JSON/HTTP transport's WebSocket routes (docs/http.md). The server is
// `test_rpc_ws --serve` (tests/unit/test_rpc_ws.c): a bidi echo service at
// /api/compute/tunnels/ whose first frame is the path it was given, and a
// pump at /api/compute/pump/ that sends and receives 3000 patterned
// messages at once on two threads. ws.t runs this with BC_WS_SERVER set.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const readline = require('node:readline');
const WebSocket = require('ws');

const SERVER = process.env.BC_WS_SERVER;
const MAX = 1 << 20; // the server's max_message_bytes
let server, port, ca;

function url(path) {
	return `wss://localhost:${port}${path}`;
}

function open(path, opts = {}) {
	return new WebSocket(url(path), { ca, ...opts });
}

// The close event: {code, reason}.
function closed(ws) {
	return new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
}

// Every binary message, in order, until close.
function collect(ws) {
	const got = [];
	ws.on('message', (data, isBinary) => got.push({ data: Buffer.from(data), isBinary }));
	return got;
}

function until(cond, ms = 20000) {
	return new Promise((resolve, reject) => {
		const t0 = Date.now();
		const tick = () => {
			if (cond()) return resolve();
			if (Date.now() - t0 > ms) return reject(new Error('timed out'));
			setTimeout(tick, 5);
		};
		tick();
	});
}

test('WebSocket routes over TLS (npm ws)', { skip: !SERVER && 'BC_WS_SERVER not set (tests/interop/ws.t)' }, async (t) => {
	server = spawn(SERVER, ['--serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
	const line = await new Promise((resolve, reject) => {
		readline.createInterface({ input: server.stdout }).once('line', resolve);
		server.once('exit', (c) => reject(new Error(`server exited ${c}`)));
	});
	const m = /^port=(\d+) ca=(\S+)$/.exec(line);
	assert.ok(m, `server said: ${line}`);
	port = Number(m[1]);
	ca = fs.readFileSync(m[2]);
	t.after(() => server.stdin.end());

	await t.test('first message is the path; 1 MiB round trip in random chunk sizes', async () => {
		const ws = open('/api/compute/tunnels/tun_x/connect?ticket=abc');
		const got = collect(ws);
		const done = closed(ws);
		await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
		await until(() => got.length >= 1);
		assert.equal(got[0].data.toString(), 'tunnels/tun_x/connect?ticket=abc');
		assert.equal(got[0].isBinary, true);

		const payload = crypto.randomBytes(MAX);
		const sizes = [];
		for (let off = 0; off < payload.length;) {
			const n = Math.min(payload.length - off, 1 + crypto.randomInt(65536));
			ws.send(payload.subarray(off, off + n), { binary: true });
			sizes.push(n);
			off += n;
		}
		await until(() => got.length >= 1 + sizes.length);
		const echoed = got.slice(1);
		assert.deepEqual(echoed.map((g) => g.data.length), sizes, 'one frame back per message, same sizes');
		assert.ok(echoed.every((g) => g.isBinary));
		assert.ok(Buffer.concat(echoed.map((g) => g.data)).equals(payload), 'the bytes came back intact');

		ws.close(1000, 'bye');
		const c = await done;
		assert.equal(c.code, 1000);
	});

	await t.test('a whole 1 MiB message and a fragmented one pass; one byte more closes 1009', async () => {
		const ws = open('/api/compute/tunnels/big');
		const got = collect(ws);
		const done = closed(ws);
		await new Promise((resolve) => ws.once('open', resolve));
		await until(() => got.length >= 1);
		const whole = crypto.randomBytes(MAX);
		ws.send(whole);
		// ws fragments when told: fin false then true
		const parts = [crypto.randomBytes(1000), crypto.randomBytes(2000), crypto.randomBytes(3)];
		ws.send(parts[0], { fin: false });
		ws.send(parts[1], { fin: false });
		ws.send(parts[2], { fin: true });
		await until(() => got.length >= 3);
		assert.ok(got[1].data.equals(whole), '1 MiB message echoed');
		assert.ok(got[2].data.equals(Buffer.concat(parts)), 'fragments reassembled');
		ws.send(crypto.randomBytes(MAX + 1));
		const c = await done;
		assert.equal(c.code, 1009);
	});

	await t.test('ping answered by pong; text closes 1003', async () => {
		const ws = open('/api/compute/tunnels/text');
		const done = closed(ws);
		await new Promise((resolve) => ws.once('open', resolve));
		const pong = new Promise((resolve) => ws.once('pong', (d) => resolve(d.toString())));
		ws.ping('are-you-there');
		assert.equal(await pong, 'are-you-there');
		ws.send('some text');
		assert.equal((await done).code, 1003);
	});

	await t.test('handler error closes 1011 with its message cut to 123 bytes', async () => {
		const ws = open('/api/compute/tunnels/x/fail');
		const c = await closed(ws);
		assert.equal(c.code, 1011);
		assert.equal(c.reason, '0'.repeat(123));
	});

	await t.test('two server threads send and receive at once (TLS)', async () => {
		const N = 3000;
		const len = (i) => 4 + ((i * 2654435761) >>> 0) % 12000;
		const make = (i) => {
			const b = Buffer.alloc(len(i));
			b.writeUInt32BE(i, 0);
			for (let k = 4; k < b.length; k++) b[k] = (i * 7 + k) & 0xff;
			return b;
		};
		const ws = open('/api/compute/pump/x');
		const got = collect(ws);
		const done = closed(ws);
		await new Promise((resolve) => ws.once('open', resolve));
		// read nothing for a while: the server's sender blocks mid-frame
		// while its receiver owes pongs for the pings among our messages
		ws.pause();
		for (let i = 0; i < N; i++) {
			ws.send(make(i));
			if (i % 5 === 0) ws.ping(String(i));
		}
		await new Promise((resolve) => setTimeout(resolve, 500));
		ws.resume();
		const c = await done;
		assert.equal(c.code, 1000, 'pump returned after receiving all');
		assert.equal(got.length, N);
		let intact = 0;
		got.forEach((g, i) => { intact += g.data.equals(make(i)) ? 1 : 0; });
		assert.equal(intact, N, 'every message the server sent arrived intact, in order');
	});

	await t.test('bad handshakes are plain HTTP errors', async () => {
		const status = (ws) => new Promise((resolve) => {
			ws.once('unexpected-response', (req, res) => { resolve(res.statusCode); res.resume(); req.destroy(); });
			ws.once('error', () => {});
		});
		assert.equal(await status(open('/api/compute/tunnels/v', { protocolVersion: 8 })), 426);
		assert.equal(await status(open('/api/compute/nowhere/x')), 404);
		assert.equal(await status(open('/api/compute/tunnels/d', { headers: { 'x-deny': '1' } })), 403);
	});
});
