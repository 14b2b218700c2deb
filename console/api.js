// api.js: the JSON/HTTP API (docs/http.md) as the console uses it. The
// token lives in this tab's sessionStorage only and travels in the
// Authorization header; the console sets no cookie, so a cross-site page
// cannot make the browser send a credential.
const KEY = 'bc.token';

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(t) { sessionStorage.setItem(KEY, t); }
export function clearToken() { sessionStorage.removeItem(KEY); }

// An API error: the HTTP status and the body's code, message and details.
export class ApiError extends Error {
	constructor(status, code, message, details) {
		super(message || code);
		this.status = status;
		this.code = code;
		this.details = details || {};
	}
	toString() {
		const d = Object.entries(this.details).map(([k, v]) => `${k}=${v}`).join(', ');
		return `${this.code}: ${this.message}${d ? ` (${d})` : ''}`;
	}
}

function headers() {
	return { 'Authorization': `Bearer ${token() || ''}`, 'Content-Type': 'application/json' };
}

async function errorOf(res) {
	let body = null;
	try { body = await res.json(); } catch { /* not JSON */ }
	const e = body && body.error;
	return e ? new ApiError(res.status, e.code, e.message, e.details)
		: new ApiError(res.status, `HTTP ${res.status}`, res.statusText);
}

// POST /api/<path> with body; the answer's JSON, or throws ApiError.
export async function call(path, body = {}) {
	const res = await fetch(`/api/${path}`, {
		method: 'POST', headers: headers(), body: JSON.stringify(body),
		credentials: 'omit', cache: 'no-store',
	});
	if (!res.ok)
		throw await errorOf(res);
	return res.json();
}

// A server stream (POST, newline-delimited JSON): onLine(object) for each
// line until the stream ends or signal aborts. Throws ApiError on a
// refusal or an error line.
export async function stream(path, body, onOpen, onLine, signal) {
	const res = await fetch(`/api/${path}`, {
		method: 'POST', headers: headers(), body: JSON.stringify(body),
		credentials: 'omit', cache: 'no-store', signal,
	});
	if (!res.ok)
		throw await errorOf(res);
	onOpen();
	const reader = res.body.getReader();
	const dec = new TextDecoder();
	let buf = '';
	for (;;) {
		const { value, done } = await reader.read();
		if (done)
			return;
		buf += dec.decode(value, { stream: true });
		let nl;
		while ((nl = buf.indexOf('\n')) >= 0) {
			const line = buf.slice(0, nl).trim();
			buf = buf.slice(nl + 1);
			if (!line)
				continue;
			const msg = JSON.parse(line);
			if (msg.error)
				throw new ApiError(200, msg.error.code, msg.error.message, msg.error.details);
			onLine(msg);
		}
	}
}

// A fresh idempotency key for one create.
export function idemKey() {
	const b = new Uint8Array(12);
	crypto.getRandomValues(b);
	return `console-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

// An element with text and attributes (never innerHTML: no markup from data).
export function el(tag, attrs = {}, ...kids) {
	const e = document.createElement(tag);
	for (const [k, v] of Object.entries(attrs)) {
		if (k === 'class') e.className = v;
		else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
		else if (v !== false && v !== undefined && v !== null) e.setAttribute(k, v === true ? '' : v);
	}
	for (const k of kids.flat())
		if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
	return e;
}
