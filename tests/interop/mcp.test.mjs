// mcp.test.mjs: the official TypeScript MCP SDK (@modelcontextprotocol/sdk)
// as the client of `bcctl mcp` over stdio, against a fake-runtime stack that
// mcp.t starts. The SDK negotiates the protocol revision, checks every
// answer against its own schemas, and checks each tool's structuredContent
// against that tool's outputSchema; Ajv compiles every schema here too.
//
// Environment (from mcp.t): BC_BIN, BC_URL, BC_CA_FILE, MCP_HOME, ALICE_TOKEN
// (may do everything to sandboxes), CAROL_TOKEN (no policy), TEMPLATE_ID,
// POOL_ID; EXEC_SANDBOX (a ready sandbox whose guest sshd is a real sshd on
// this machine; empty: the exec subtests skip), MCP_KEY (alice's ssh key),
// MCP_DIR (a directory the "guest" may write); MCP_URL (the controller's
// https://.../mcp, its CA in NODE_EXTRA_CA_CERTS).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import Ajv from 'ajv';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = process.env;
const clients = [];

async function connect(token, extra = []) {
	const transport = new StdioClientTransport({
		command: `${env.BC_BIN}/bcctl`,
		args: ['--url', env.BC_URL, '--ca-file', env.BC_CA_FILE, 'mcp', ...extra],
		env: { HOME: env.MCP_HOME, PATH: env.PATH, BC_TOKEN: token },
		stderr: 'inherit',
	});
	const client = new Client({ name: 'bc-interop', version: '1.0.0' });
	await client.connect(transport);
	clients.push(client);
	return client;
}

async function connectHttp(token) {
	const transport = new StreamableHTTPClientTransport(new URL(env.MCP_URL), {
		requestInit: { headers: { Authorization: `Bearer ${token}` } },
	});
	const client = new Client({ name: 'bc-interop-http', version: '1.0.0' });
	await client.connect(transport);
	clients.push(client);
	return client;
}

after(async () => {
	for (const c of clients) await c.close();
});

// the spec's tools, snapshot_sandbox and, over stdio, the three that run
// code and move files
const stdioTools = [
	'create_sandbox', 'create_sandbox_volume', 'delete_sandbox', 'delete_sandbox_snapshot',
	'delete_sandbox_volume', 'extend_sandbox', 'get_sandbox', 'list_sandbox_snapshots',
	'list_sandbox_templates', 'list_sandbox_volumes', 'list_sandboxes', 'read_file',
	'resize_sandbox_volume', 'run_command', 'snapshot_sandbox', 'write_file',
];

// The error body of a refused call (a tool result with isError).
function refusal(res) {
	assert.equal(res.isError, true, 'isError');
	assert.equal(res.structuredContent, undefined, 'no structuredContent on an error');
	return JSON.parse(res.content[0].text).error;
}

let alice;

test('initialize over stdio: server info and the tools capability', async () => {
	alice = await connect(env.ALICE_TOKEN);
	assert.equal(alice.getServerVersion().name, 'bc');
	assert.ok(alice.getServerCapabilities().tools, 'tools capability');
	await alice.ping();
});

test('tools/list: the sixteen stdio tools, every schema compiles', async () => {
	const { tools } = await alice.listTools();
	assert.deepEqual(tools.map((t) => t.name).sort(), stdioTools);
	const ajv = new Ajv({ strict: false });
	for (const t of tools) {
		assert.equal(t.inputSchema.type, 'object', `${t.name} inputSchema`);
		assert.equal(t.outputSchema.type, 'object', `${t.name} outputSchema`);
		ajv.compile(t.inputSchema);
		ajv.compile(t.outputSchema);
		const destructive = /^(delete_|run_command|write_file)/.test(t.name);
		assert.equal(t.annotations.destructiveHint, destructive, `${t.name} destructiveHint`);
	}
});

async function sandboxLifecycle(alice) {
	let res = await alice.callTool({
		name: 'create_sandbox',
		arguments: { templateId: env.TEMPLATE_ID, ttlSeconds: 900, waitSeconds: 20 },
	});
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	const { idempotencyKey, sandbox } = res.structuredContent;
	assert.match(sandbox.id, /^sbx_[0-9a-z]{26}$/);
	assert.ok(idempotencyKey, 'a fresh idempotency key');
	assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent, 'text copy');

	res = await alice.callTool({
		name: 'create_sandbox',
		arguments: { templateId: env.TEMPLATE_ID, ttlSeconds: 900, idempotencyKey },
	});
	assert.equal(res.structuredContent.sandbox.id, sandbox.id, 'the same key, the same sandbox');

	res = await alice.callTool({ name: 'extend_sandbox', arguments: { sandboxId: sandbox.id, by: '30m' } });
	assert.equal(res.structuredContent.expiresAt, sandbox.expiresAt + 1800000, 'extended by 30 minutes');

	res = await alice.callTool({ name: 'get_sandbox', arguments: { sandboxId: sandbox.id } });
	assert.equal(res.structuredContent.id, sandbox.id);
	assert.equal(res.structuredContent.ttlSeconds, 900 + 1800);

	res = await alice.callTool({ name: 'list_sandboxes', arguments: {} });
	assert.ok(res.structuredContent.items.some((s) => s.id === sandbox.id), 'listed');

	res = await alice.callTool({ name: 'delete_sandbox', arguments: { sandboxId: sandbox.id } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	assert.match(res.structuredContent.state, /^(deleting|deleted)$/);
}

async function volumeLifecycle(alice) {
	let res = await alice.callTool({
		name: 'create_sandbox_volume',
		arguments: { poolId: env.POOL_ID, name: 'notes', sizeGiB: 2 },
	});
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	const vol = res.structuredContent.volume;
	assert.match(vol.id, /^vol_/);
	assert.equal(vol.sizeGib, 2);
	res = await alice.callTool({ name: 'resize_sandbox_volume', arguments: { volumeId: vol.id, sizeGiB: 4 } });
	assert.equal(res.structuredContent.sizeGib, 4);
	res = await alice.callTool({ name: 'list_sandbox_volumes', arguments: { poolId: env.POOL_ID } });
	assert.ok(res.structuredContent.items.some((v) => v.id === vol.id), 'listed');
	res = await alice.callTool({ name: 'delete_sandbox_volume', arguments: { volumeId: vol.id } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	assert.match(res.structuredContent.state, /^(deleting|deleted)$/);
}

async function refusals(alice, carol) {
	let err = refusal(await alice.callTool({
		name: 'get_sandbox', arguments: { sandboxId: 'sbx_00000000000000000000000000' },
	}));
	assert.equal(err.code, 'NOT_FOUND');
	err = refusal(await alice.callTool({
		name: 'create_sandbox_volume', arguments: { poolId: env.POOL_ID, name: 'big', sizeGiB: 0 },
	}));
	assert.equal(err.code, 'INVALID_INPUT');
	assert.equal(err.details.field, 'sizeGib');
	err = refusal(await carol.callTool({
		name: 'create_sandbox', arguments: { templateId: env.TEMPLATE_ID, waitSeconds: 0 },
	}));
	assert.equal(err.code, 'ACCESS_DENIED');
	assert.ok(err.details.action, `the refused action (${JSON.stringify(err.details)})`);
}

test('sandbox: create, extend, get, list, delete', () => sandboxLifecycle(alice));
// snapshot_sandbox on the fake runtime: bcd captures and uploads to the
// stack's s3rver; the snapshot becomes ready, is listed, then deleted
async function snapshotLifecycle(alice) {
	let res = await alice.callTool({
		name: 'create_sandbox', arguments: { templateId: env.TEMPLATE_ID, ttlSeconds: 900, waitSeconds: 20 },
	});
	const sandboxId = res.structuredContent.sandbox.id;
	res = await alice.callTool({ name: 'snapshot_sandbox', arguments: { sandboxId, includeMemory: false } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	const { idempotencyKey, snapshot } = res.structuredContent;
	assert.match(snapshot.id, /^snap_/);
	assert.equal(snapshot.includeMemory ?? false, false, 'disk only');
	res = await alice.callTool({ name: 'snapshot_sandbox', arguments: { sandboxId, includeMemory: false, idempotencyKey } });
	assert.equal(res.structuredContent.snapshot.id, snapshot.id, 'the same key, the same snapshot');
	let state = snapshot.state;
	for (let i = 0; i < 120 && state !== 'ready'; i++) {
		await new Promise((r) => setTimeout(r, 500));
		res = await alice.callTool({ name: 'list_sandbox_snapshots', arguments: { sandboxId } });
		state = res.structuredContent.items?.find((x) => x.id === snapshot.id)?.state;
		assert.notEqual(state, 'failed', JSON.stringify(res.structuredContent));
	}
	assert.equal(state, 'ready', 'the host uploaded it');
	res = await alice.callTool({ name: 'delete_sandbox_snapshot', arguments: { snapshotId: snapshot.id } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	assert.equal(res.structuredContent.state, 'deleted');
	await alice.callTool({ name: 'delete_sandbox', arguments: { sandboxId } });
}
test('snapshot_sandbox: taken, ready, listed, deleted', () => snapshotLifecycle(alice));

test('volume: create, resize, delete', () => volumeLifecycle(alice));
test('refusals are tool results with the API code and details',
	async () => refusals(alice, await connect(env.CAROL_TOKEN)));

test('protocol errors stay JSON-RPC errors', async () => {
	await assert.rejects(alice.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602);
	await assert.rejects(alice.request({ method: 'resources/list', params: {} }, (await import('@modelcontextprotocol/sdk/types.js')).ListResourcesResultSchema), (e) => e.code === -32601);
});

test('the gate: a tenant identity without template read sees no create tools', async () => {
	const carol = await connect(env.CAROL_TOKEN);
	const names = (await carol.listTools()).tools.map((t) => t.name);
	assert.ok(!names.includes('create_sandbox'), 'create_sandbox hidden');
	assert.ok(!names.includes('create_sandbox_volume'), 'create_sandbox_volume hidden');
	assert.ok(names.includes('list_sandboxes'), 'the open tools listed');
	assert.equal(names.length, 14);
});

const noExec = env.EXEC_SANDBOX ? false : 'no sshd to stand for the guest (mcp.t needs root)';

test('run_command over the exec grant and tunnel: output and exit code', { skip: noExec }, async () => {
	const c = await connect(env.ALICE_TOKEN, ['--key', env.MCP_KEY]);
	let res = await c.callTool({ name: 'run_command', arguments: { sandboxId: env.EXEC_SANDBOX, command: 'echo hi; exit 3' } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	assert.equal(res.structuredContent.exitCode, 3);
	assert.equal(res.structuredContent.stdout, 'hi\n');
	assert.equal(res.structuredContent.timedOut, false);
	res = await c.callTool({ name: 'run_command', arguments: {
		sandboxId: env.EXEC_SANDBOX, command: ['printf', '%s|', 'a b', "it's", '$HOME', ';true'] } });
	assert.equal(res.structuredContent.stdout, "a b|it's|$HOME|;true|", 'argv words reach the command unchanged');
	res = await c.callTool({ name: 'run_command', arguments: {
		sandboxId: env.EXEC_SANDBOX, command: ['wc', '-c'], stdin: 'AAEC/w==', stdinEncoding: 'base64' } });
	assert.equal(res.structuredContent.stdout.trim(), '4', 'stdin bytes piped through');
	res = await c.callTool({ name: 'run_command', arguments: {
		sandboxId: env.EXEC_SANDBOX, command: 'head -c 1100000 /dev/zero | tr "\\0" x' } });
	assert.equal(res.structuredContent.stdout.length, 1048576, 'stdout capped at 1 MiB');
	assert.equal(res.structuredContent.stdoutTruncated, true, 'and flagged');
	res = await c.callTool({ name: 'run_command', arguments: {
		sandboxId: env.EXEC_SANDBOX, command: 'sleep 30', timeoutSeconds: 2 } });
	assert.equal(res.structuredContent.timedOut, true, 'the deadline ends it');
	// ... and the command itself, not only the ssh client: the guest's
	// process is gone soon after (the "guest" is this machine). The
	// command names itself with a sleep length no other process uses.
	const mark = `sleep 300.${process.pid}`;
	const running = () => spawnSync('pgrep', ['-f', `^${mark.replace('.', '\\.')}$`]).status === 0;
	let seen = false;
	// a slow machine may take the whole deadline to set the session up:
	// longer deadlines until the command was seen running
	for (const t of [10, 30, 90]) {
		let done = false;
		const watch = (async () => {
			while (!done && !seen) {
				seen = running();
				await new Promise((r) => setTimeout(r, 50));
			}
		})();
		res = await c.callTool({ name: 'run_command', arguments: {
			sandboxId: env.EXEC_SANDBOX, command: `exec ${mark}`, timeoutSeconds: t } });
		done = true;
		await watch;
		assert.equal(res.structuredContent.timedOut, true);
		if (seen)
			break;
	}
	assert.ok(seen, 'the command ran in the guest before its deadline');
	const until = Date.now() + 30000;
	while (running() && Date.now() < until)
		await new Promise((r) => setTimeout(r, 200));
	assert.equal(running(), false, `the timed-out command (${mark}) still runs in the guest 30 s later`);
});

test('write_file and read_file: a binary file byte for byte', { skip: noExec }, async () => {
	const c = await connect(env.ALICE_TOKEN, ['--key', env.MCP_KEY]);
	const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(70000)]);
	const path = `${env.MCP_DIR}/it's a file.bin`;
	let res = await c.callTool({ name: 'write_file', arguments: {
		sandboxId: env.EXEC_SANDBOX, path, content: bytes.toString('base64'), encoding: 'base64', mode: '0600' } });
	assert.notEqual(res.isError, true, res.content?.[0]?.text);
	assert.equal(res.structuredContent.bytes, bytes.length);
	assert.ok(readFileSync(path).equals(bytes), 'the "guest" holds the very bytes');
	assert.equal(statSync(path).mode & 0o777, 0o600, 'with mode 0600');
	res = await c.callTool({ name: 'read_file', arguments: { sandboxId: env.EXEC_SANDBOX, path } });
	assert.equal(res.structuredContent.encoding, 'base64', 'binary comes back as base64');
	assert.ok(Buffer.from(res.structuredContent.content, 'base64').equals(bytes), 'read back byte for byte');
	assert.equal(res.structuredContent.truncated, false);
	res = await c.callTool({ name: 'read_file', arguments: { sandboxId: env.EXEC_SANDBOX, path: `${env.MCP_DIR}/none` } });
	const err = refusal(res);
	assert.equal(err.code, 'INVALID_STATE');
	assert.equal(err.details.reason, 'command-failed');
});

// ---- the Streamable HTTP transport at /mcp on the controller's HTTP port

let halice;

test('HTTP /mcp: initialize, the thirteen API tools (none that needs ssh), schemas', async () => {
	halice = await connectHttp(env.ALICE_TOKEN);
	assert.equal(halice.getServerVersion().name, 'bc-controller');
	const { tools } = await halice.listTools();
	assert.deepEqual(tools.map((t) => t.name).sort(),
		stdioTools.filter((n) => !['run_command', 'write_file', 'read_file'].includes(n)));
	const ajv = new Ajv({ strict: false });
	for (const t of tools) {
		ajv.compile(t.inputSchema);
		ajv.compile(t.outputSchema);
	}
	await halice.ping();
});

test('HTTP: sandbox lifecycle', () => sandboxLifecycle(halice));
test('HTTP: volume lifecycle', () => volumeLifecycle(halice));
test('HTTP: refusals as tool results', async () => refusals(halice, await connectHttp(env.CAROL_TOKEN)));

test('HTTP: the gate hides the creates from carol', async () => {
	const carol = await connectHttp(env.CAROL_TOKEN);
	const names = (await carol.listTools()).tools.map((t) => t.name);
	assert.ok(!names.includes('create_sandbox') && !names.includes('create_sandbox_volume'));
	assert.equal(names.length, 11);
});

// raw requests: the transport's own rules
async function post(body, headers = {}, token = env.ALICE_TOKEN) {
	const h = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers };
	if (token) h.Authorization = `Bearer ${token}`;
	return fetch(env.MCP_URL, { method: 'POST', headers: h, body: JSON.stringify(body) });
}
const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
	params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };

test('HTTP: sessions, credentials, Origin, methods, protocol version', async () => {
	let r = await post(init);
	assert.equal(r.status, 200);
	assert.match(r.headers.get('content-type'), /^application\/json/);
	const sid = r.headers.get('mcp-session-id');
	assert.match(sid, /^[0-9a-f]{32}$/, 'initialize issues a session id');
	const v = { 'MCP-Protocol-Version': '2025-06-18' };
	r = await post(ping, { ...v, 'Mcp-Session-Id': sid });
	assert.equal(r.status, 200, 'a ping in the session');
	assert.deepEqual((await r.json()).result, {});
	r = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { ...v, 'Mcp-Session-Id': sid });
	assert.equal(r.status, 202, 'a notification: 202 Accepted');
	r = await post(ping, v);
	assert.equal(r.status, 400, 'no session id: 400');
	r = await post(ping, { ...v, 'Mcp-Session-Id': '0'.repeat(32) });
	assert.equal(r.status, 404, 'an unknown session: 404');
	r = await post(ping, { ...v, 'Mcp-Session-Id': sid }, env.CAROL_TOKEN);
	assert.equal(r.status, 404, "another credential cannot use alice's session");
	r = await post(ping, { 'MCP-Protocol-Version': '1999-01-01', 'Mcp-Session-Id': sid });
	assert.equal(r.status, 400, 'an unsupported MCP-Protocol-Version: 400');
	r = await post(init, { Origin: 'https://evil.example' });
	assert.equal(r.status, 403, 'an Origin not in mcp_allowed_origins: 403 (DNS rebinding)');
	r = await post(init, { Origin: 'https://console.example' });
	assert.equal(r.status, 200, 'an allowed Origin');
	r = await post(init, {}, null);
	assert.equal(r.status, 401, 'no bearer token: 401, no session');
	assert.equal(r.headers.get('mcp-session-id'), null);
	r = await post(init, {}, 'bct_not_a_token');
	assert.equal(r.status, 401, 'a bad token: 401');
	r = await fetch(env.MCP_URL, { headers: { Authorization: `Bearer ${env.ALICE_TOKEN}`, Accept: 'text/event-stream' } });
	assert.equal(r.status, 405, 'GET: 405 (no server-initiated stream)');
	r = await fetch(env.MCP_URL, { method: 'DELETE', headers: { Authorization: `Bearer ${env.ALICE_TOKEN}`, 'Mcp-Session-Id': sid } });
	assert.equal(r.status, 200, 'DELETE ends the session');
	r = await post(ping, { ...v, 'Mcp-Session-Id': sid });
	assert.equal(r.status, 404, '... after which it is unknown');
	r = await post([ping], {});
	assert.equal(r.status, 400, 'a batch is not an initialize: no session, 400');
});

test('HTTP: sessions are bounded (mcp_max_sessions = 64 in mcp.t)', async () => {
	let r;
	let opened = 0;
	for (let i = 0; i < 70; i++) {
		r = await post(init);
		if (r.status !== 200) break;
		await r.arrayBuffer();
		opened++;
	}
	assert.equal(r.status, 503, `past the bound: 503 (after ${opened} more sessions)`);
	assert.equal((await r.json()).error.code, 'RESOURCE_EXHAUSTED');
	assert.ok(r.headers.get('retry-after'), 'with Retry-After');
	assert.ok(opened > 0 && opened <= 64, 'no more sessions than the bound');
});
