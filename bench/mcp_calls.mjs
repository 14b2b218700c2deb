// mcp_calls.mjs: the MCP row of bench/guest_ready.sh. The official MCP SDK
// client starts `bcctl mcp` over stdio once (as an agent does), then calls
// run_command `true` in SANDBOX N times, one at a time, and prints each
// call's time in ms, one per line. The first call (a warm-up, not printed)
// pays for the connection.
//
//   node mcp_calls.mjs NODE_MODULES BCCTL URL CA_FILE KEY SANDBOX N
// (the token in BC_TOKEN, HOME in MCP_HOME)
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [nm, bcctl, url, ca, key, sandboxId, n] = process.argv.slice(2);
const sdk = join(nm, '@modelcontextprotocol/sdk/dist/esm/client');
const { Client } = await import(pathToFileURL(join(sdk, 'index.js')).href);
const { StdioClientTransport } = await import(pathToFileURL(join(sdk, 'stdio.js')).href);

const transport = new StdioClientTransport({
	command: bcctl,
	args: ['--url', url, '--ca-file', ca, 'mcp', '--key', key],
	env: { HOME: process.env.MCP_HOME, PATH: process.env.PATH, BC_TOKEN: process.env.BC_TOKEN },
	stderr: 'ignore',
});
const client = new Client({ name: 'bc-bench', version: '1.0.0' });
await client.connect(transport);
const call = async () => {
	const res = await client.callTool({ name: 'run_command', arguments: { sandboxId, command: 'true' } });
	if (res.isError || res.structuredContent.exitCode !== 0)
		throw new Error(`run_command failed: ${res.content?.[0]?.text}`);
};
await call();
for (let i = 0; i < Number(n); i++) {
	const t0 = process.hrtime.bigint();
	await call();
	console.log(Number(process.hrtime.bigint() - t0) / 1e6);
}
await client.close();
