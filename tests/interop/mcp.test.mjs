// mcp.test.mjs: the official TypeScript MCP SDK (@modelcontextprotocol/sdk)
// as the client of `bcctl mcp` over stdio, against a fake-runtime stack that
// mcp.t starts. The SDK negotiates the protocol revision, checks every
// answer against its own schemas, and checks each tool's structuredContent
// against that tool's outputSchema; Ajv compiles every schema here too.
//
// Environment (from mcp.t): BC_BIN, BC_URL, BC_CA_FILE, MCP_HOME, ALICE_TOKEN
// (may do everything to sandboxes), CAROL_TOKEN (no policy), TEMPLATE_ID,
// POOL_ID.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const env = process.env;
const clients = [];

async function connect(token) {
	const transport = new StdioClientTransport({
		command: `${env.BC_BIN}/bcctl`,
		args: ['--url', env.BC_URL, '--ca-file', env.BC_CA_FILE, 'mcp'],
		env: { HOME: env.MCP_HOME, PATH: env.PATH, BC_TOKEN: token },
		stderr: 'inherit',
	});
	const client = new Client({ name: 'bc-interop', version: '1.0.0' });
	await client.connect(transport);
	clients.push(client);
	return client;
}

after(async () => {
	for (const c of clients) await c.close();
});

const specTools = [
	'create_sandbox', 'create_sandbox_volume', 'delete_sandbox', 'delete_sandbox_volume',
	'extend_sandbox', 'get_sandbox', 'list_sandbox_templates', 'list_sandbox_volumes',
	'list_sandboxes', 'resize_sandbox_volume',
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

test('tools/list: the ten tools, every schema compiles', async () => {
	const { tools } = await alice.listTools();
	assert.deepEqual(tools.map((t) => t.name).sort(), specTools);
	const ajv = new Ajv({ strict: false });
	for (const t of tools) {
		assert.equal(t.inputSchema.type, 'object', `${t.name} inputSchema`);
		assert.equal(t.outputSchema.type, 'object', `${t.name} outputSchema`);
		ajv.compile(t.inputSchema);
		ajv.compile(t.outputSchema);
		const destructive = t.name.startsWith('delete_');
		assert.equal(t.annotations.destructiveHint, destructive, `${t.name} destructiveHint`);
	}
});

test('sandbox: create, extend, get, list, delete', async () => {
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
});

test('volume: create, resize, delete', async () => {
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
});

test('refusals are tool results with the API code and details', async () => {
	let err = refusal(await alice.callTool({
		name: 'get_sandbox', arguments: { sandboxId: 'sbx_00000000000000000000000000' },
	}));
	assert.equal(err.code, 'NOT_FOUND');
	err = refusal(await alice.callTool({
		name: 'create_sandbox_volume', arguments: { poolId: env.POOL_ID, name: 'big', sizeGiB: 0 },
	}));
	assert.equal(err.code, 'INVALID_INPUT');
	assert.equal(err.details.field, 'sizeGib');
	const carol = await connect(env.CAROL_TOKEN);
	err = refusal(await carol.callTool({
		name: 'create_sandbox', arguments: { templateId: env.TEMPLATE_ID, waitSeconds: 0 },
	}));
	assert.equal(err.code, 'ACCESS_DENIED');
	assert.ok(err.details.action, `the refused action (${JSON.stringify(err.details)})`);
});

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
	assert.equal(names.length, 8);
});
