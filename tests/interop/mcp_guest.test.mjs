// mcp_guest.test.mjs: the official TypeScript MCP SDK as the client of
// `bcctl mcp` over stdio against a stack with the libvirt runtime and the
// real guest image (tests/e2e/mcp.t starts it): an agent's whole session
// with a sandbox through MCP alone. create_sandbox, wait until the guest
// answers, run python3 in it, a binary file written and read back,
// delete_sandbox.
//
// Environment (from mcp.t): BC_BIN, BC_URL, BC_CA_FILE, MCP_HOME,
// ALICE_TOKEN, TEMPLATE_ID, MCP_KEY (alice's ssh key), BOOT_TIMEOUT (s).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const env = process.env;
const bootMs = Number(env.BOOT_TIMEOUT || 600) * 1000;
let client;
let sandboxId;

after(async () => {
	if (client)
		await client.close();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (res) => res.content?.[0]?.text;

test('connect over stdio with an ssh key', async () => {
	const transport = new StdioClientTransport({
		command: `${env.BC_BIN}/bcctl`,
		args: ['--url', env.BC_URL, '--ca-file', env.BC_CA_FILE, 'mcp', '--key', env.MCP_KEY],
		env: { HOME: env.MCP_HOME, PATH: env.PATH, BC_TOKEN: env.ALICE_TOKEN },
		stderr: 'inherit',
	});
	client = new Client({ name: 'bc-e2e', version: '1.0.0' });
	await client.connect(transport);
	const names = (await client.listTools()).tools.map((t) => t.name);
	for (const n of ['create_sandbox', 'run_command', 'write_file', 'read_file', 'delete_sandbox'])
		assert.ok(names.includes(n), `${n} listed`);
});

test('create_sandbox on a real guest, ready', { timeout: bootMs + 60000 }, async () => {
	let res = await client.callTool({
		name: 'create_sandbox', arguments: { templateId: env.TEMPLATE_ID, ttlSeconds: 1800, waitSeconds: 20 },
	});
	assert.notEqual(res.isError, true, text(res));
	sandboxId = res.structuredContent.sandbox.id;
	assert.match(sandboxId, /^sbx_[0-9a-z]{26}$/);
	const until = Date.now() + bootMs;
	let state = res.structuredContent.sandbox.state;
	while (state !== 'ready' && Date.now() < until) {
		await sleep(2000);
		res = await client.callTool({ name: 'get_sandbox', arguments: { sandboxId } });
		state = res.structuredContent?.state;
		assert.notEqual(state, 'failed', text(res));
	}
	assert.equal(state, 'ready');
});

test('run_command reaches the guest once it is up', { timeout: bootMs + 60000 }, async () => {
	// the guest is up once its sshd takes our certificate and cloud-init is
	// done (its last stage reloads sshd)
	const until = Date.now() + bootMs;
	let res;
	do {
		res = await client.callTool({ name: 'run_command', arguments: {
			sandboxId, command: 'cloud-init status --wait >/dev/null; echo up', timeoutSeconds: 120 } });
		if (!res.isError && res.structuredContent.stdout === 'up\n')
			break;
		await sleep(3000);
	} while (Date.now() < until);
	assert.notEqual(res.isError, true, text(res));
	assert.equal(res.structuredContent.stdout, 'up\n', text(res));
});

test("run_command: python3 -c 'print(6*7)' in the guest", async () => {
	let res = await client.callTool({ name: 'run_command', arguments: {
		sandboxId, command: "python3 -c 'print(6*7)'" } });
	assert.notEqual(res.isError, true, text(res));
	assert.equal(res.structuredContent.stdout, '42\n');
	assert.equal(res.structuredContent.exitCode, 0);
	res = await client.callTool({ name: 'run_command', arguments: {
		sandboxId, command: ['python3', '-c', 'import sys; print(6*7); sys.exit(5)'] } });
	assert.equal(res.structuredContent.stdout, '42\n', 'argv form');
	assert.equal(res.structuredContent.exitCode, 5, "the command's exit code");
	res = await client.callTool({ name: 'run_command', arguments: { sandboxId, command: 'id -un; uname -s' } });
	assert.equal(res.structuredContent.stdout, 'sandbox\nLinux\n', "as the sandbox account, in the guest's Linux");
});

test('write_file and read_file: a binary file byte for byte in the guest', async () => {
	const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(100000)]);
	const path = '/tmp/mcp e2e.bin';
	let res = await client.callTool({ name: 'write_file', arguments: {
		sandboxId, path, content: bytes.toString('base64'), encoding: 'base64', mode: '0600' } });
	assert.notEqual(res.isError, true, text(res));
	assert.equal(res.structuredContent.bytes, bytes.length);
	res = await client.callTool({ name: 'run_command', arguments: {
		sandboxId, command: ['stat', '-c', '%s %a', path] } });
	assert.equal(res.structuredContent.stdout, `${bytes.length} 600\n`, 'the guest holds it, mode 0600');
	res = await client.callTool({ name: 'read_file', arguments: { sandboxId, path } });
	assert.equal(res.structuredContent.encoding, 'base64');
	assert.ok(Buffer.from(res.structuredContent.content, 'base64').equals(bytes), 'read back byte for byte');
});

test('delete_sandbox', async () => {
	const res = await client.callTool({ name: 'delete_sandbox', arguments: { sandboxId } });
	assert.notEqual(res.isError, true, text(res));
	assert.match(res.structuredContent.state, /^(deleting|deleted)$/);
});
