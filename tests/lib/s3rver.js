// s3rver.js: the snapshot store's tests' S3-compatible server: npm
// @20minutes/s3rver (it checks AWS Signature Version 4, header and
// query-string forms, and refuses expired presigned URLs), on loopback.
//   node s3rver.js DIR PORTFILE BUCKET ACCESS_KEY_ID SECRET_FILE [CERT KEY]
// starts it on 127.0.0.1 on a free port with bucket BUCKET and one key pair
// (the secret read from SECRET_FILE, never from argv), over https with the
// PEM certificate and key CERT and KEY when given, writes the port to
// PORTFILE once it listens, and runs until SIGTERM.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const mods = path.join(process.env.BC_SRC || path.join(__dirname, '..', '..'),
	'tests', 'interop', 'node_modules');
const S3rver = require(path.join(mods, '@20minutes', 's3rver'));
const Account = require(path.join(mods, '@20minutes', 's3rver', 'lib', 'models', 'account'));

const [dir, portFile, bucket, keyId, secretFile, cert, key] = process.argv.slice(2);
if (!secretFile) {
	console.error('usage: s3rver.js DIR PORTFILE BUCKET ACCESS_KEY_ID SECRET_FILE');
	process.exit(2);
}
const secret = fs.readFileSync(secretFile, 'utf8').replace(/\n$/, '');
Account.DUMMY_ACCOUNT.revokeAccessKey('S3RVER'); // only our pair opens it
Account.DUMMY_ACCOUNT.createKeyPair(keyId, secret);
fs.mkdirSync(dir, { recursive: true });
const server = new S3rver({
	address: '127.0.0.1', port: 0, directory: dir, silent: false,
	configureBuckets: [{ name: bucket, configs: [] }],
	...(cert ? { cert: fs.readFileSync(cert), key: fs.readFileSync(key) } : {}),
});
server.run((err, { port } = {}) => {
	if (err) {
		console.error(`s3rver: ${err.message}`);
		process.exit(1);
	}
	fs.writeFileSync(portFile + '.tmp', `${port}\n`);
	fs.renameSync(portFile + '.tmp', portFile);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
