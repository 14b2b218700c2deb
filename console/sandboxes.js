// sandboxes.js: the Sandboxes page. The tenant's templates with their warm
// pools, a create form (template, lifetime in minutes capped at the
// template's maximum), the person's own sandboxes or everyone's with a
// live countdown to expiresAt (a warning in the last 5 minutes), and per
// row +30 min, Snapshot, Delete and the `bcctl sandbox exec` line to copy.
import { call, el, idemKey } from './api.js';

const WARN_MS = 5 * 60 * 1000;
const SNAP_OFF = 'bc.snapshots-off';
const $ = (id) => document.getElementById(id);
let templates = new Map();
let volumes = [];           // the person's ready volumes, for Attach
const shown = {};           // what each table shows now, as JSON: unchanged data is not redrawn
let ticker = null;
let refreshTimer = null;

function error(e) {
	$('sbx-error').textContent = e ? String(e) : '';
}

function duration(ms) {
	const s = Math.max(0, Math.floor(ms / 1000));
	const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
	const two = (n) => String(n).padStart(2, '0');
	return h ? `${h}h ${two(m)}m ${two(r)}s` : `${m}m ${two(r)}s`;
}

// Every countdown cell from its data-expires, once a second.
function tick() {
	const now = Date.now();
	for (const c of document.querySelectorAll('#sandboxes .countdown')) {
		const left = Number(c.dataset.expires) - now;
		c.textContent = left > 0 ? duration(left) : 'expired';
		c.classList.toggle('warn', left > 0 && left <= WARN_MS);
		c.classList.toggle('over', left <= 0);
	}
}

function maxMinutes(t) {
	return Math.max(1, Math.floor(Number(t.maxTtlSeconds) / 60));
}

function onTemplate() {
	const t = templates.get($('create-template').value);
	const input = $('create-minutes');
	if (!t)
		return;
	input.max = String(maxMinutes(t));
	const def = Math.floor(Number(t.defaultTtlSeconds) / 60) || 60;
	input.value = String(Math.min(def, maxMinutes(t)));
	$('create-max').textContent = `at most ${maxMinutes(t)}`;
}

async function loadTemplates() {
	const { items } = await call('compute/sandboxtemplates/list', {});
	templates = new Map(items.map((t) => [t.id, t]));
	if (shown.templates === JSON.stringify(items))
		return;
	shown.templates = JSON.stringify(items);
	const body = $('templates').tBodies[0];
	body.replaceChildren(...items.map((t) => el('tr', { 'data-id': t.id },
		el('td', {}, t.name), el('td', { class: 'mono' }, t.id), el('td', { class: 'mono' }, t.poolId),
		el('td', {}, t.flavor), el('td', {}, `${maxMinutes(t)} min`),
		el('td', {}, el('span', { class: 'warm' }, `${t.warmReady} / ${t.warmBooting} / ` +
			`${t.warm ? t.warm.min : 0}–${t.warm ? t.warm.max : 0}`), ' ',
		el('button', { type: 'button', class: 'warm-up', disabled: (t.volumes || []).length > 0,
			title: (t.volumes || []).length ? 'a template with volumes has no warm pool' : null,
			onclick: () => warmUp(t) }, 'Warm +1')),
		el('td', { class: 'volumes' }, (t.volumes || []).map((v) => el('div', { 'data-volume': v.volumeId },
			`${v.name || v.volumeId} at ${v.mountPath}${v.readOnly ? ' (read-only)' : ''} `,
			el('button', { type: 'button', class: 'detach', onclick: () => detach(t, v) }, 'Detach')))))));
	const sel = $('create-template');
	const was = sel.value;
	sel.replaceChildren(...items.map((t) => el('option', { value: t.id }, `${t.name} (${t.id})`)));
	if (templates.has(was))
		sel.value = was;
	const att = $('attach-template'), attWas = att.value;
	att.replaceChildren(...items.map((t) => el('option', { value: t.id }, t.name)));
	if (templates.has(attWas))
		att.value = attWas;
	attachChoices();
	if (sel.value !== was)
		onTemplate();      // a refresh keeps what the person typed
	else if (templates.has(sel.value))
		$('create-minutes').max = String(maxMinutes(templates.get(sel.value)));
}

// Update a template with req (sandboxTemplates.update), then reload.
async function updateTemplate(t, req) {
	error(null);
	try {
		await call('compute/sandboxtemplates/update', { templateId: t.id, ...req });
		await loadTemplates();
	} catch (e) {
		error(e);
	}
}

function warmUp(t) {
	const min = (t.warm ? t.warm.min : 0) + 1;
	updateTemplate(t, { warm: { min, max: Math.max(min, t.warm ? t.warm.max : 0) } });
}

const plain = (v) => ({ volumeId: v.volumeId, mountPath: v.mountPath, readOnly: !!v.readOnly });

function detach(t, v) {
	updateTemplate(t, { volumes: t.volumes.filter((x) => x.volumeId !== v.volumeId).map(plain) });
}

// The Attach form offers the ready volumes of the chosen template's pool.
function attachChoices() {
	const t = templates.get($('attach-template').value);
	const fit = volumes.filter((v) => t && v.poolId === t.poolId && v.state === 'ready');
	$('attach-volume').replaceChildren(...fit.map((v) => el('option', { value: v.id }, `${v.name} (${v.id})`)));
}

async function loadVolumes() {
	volumes = (await call('compute/sandboxvolumes/list', { limit: 200 })).items;
	attachChoices();
}

async function attach(ev) {
	ev.preventDefault();
	error(null);
	const t = templates.get($('attach-template').value);
	const volumeId = $('attach-volume').value, mountPath = $('attach-path').value.trim();
	if (!t || !volumeId)
		return error('Choose a template and a ready volume of its pool.');
	if (!mountPath.startsWith('/'))
		return error('The mount path must be absolute.');
	await updateTemplate(t, { volumes: [...(t.volumes || []).map(plain),
		{ volumeId, mountPath, readOnly: $('attach-ro').checked }] });
}

async function create(ev) {
	ev.preventDefault();
	error(null);
	const t = templates.get($('create-template').value);
	const minutes = Number($('create-minutes').value);
	if (!t)
		return error('Choose a template.');
	if (!Number.isInteger(minutes) || minutes < 1 || minutes > maxMinutes(t))
		return error(`The lifetime must be 1 to ${maxMinutes(t)} minutes (the template's maximum).`);
	try {
		const s = await call('compute/sandboxes/create',
			{ templateId: t.id, ttlSeconds: String(minutes * 60), idempotencyKey: idemKey() });
		$('create-form').dataset.last = s.id;
		await loadSandboxes();
	} catch (e) {
		error(e);
	}
}

async function act(what, s, body) {
	error(null);
	try {
		await call(`compute/sandboxes/${what}`, body);
		await loadSandboxes();
	} catch (e) {
		if (what === 'snapshot' && e.code === 'INVALID_CONFIG') {
			sessionStorage.setItem(SNAP_OFF, '1');
			snapshotsOff();
			return;
		}
		error(e);
	}
}

function snapshotsOff() {
	const off = sessionStorage.getItem(SNAP_OFF) === '1';
	$('snap-off').hidden = !off;
	for (const b of document.querySelectorAll('#sandboxes button.snapshot'))
		b.hidden = off;
}

function copy(text, button) {
	const done = () => { button.textContent = 'Copied'; setTimeout(() => { button.textContent = 'Copy'; }, 1500); };
	if (navigator.clipboard && window.isSecureContext)
		navigator.clipboard.writeText(text).then(done, () => { button.textContent = 'Select and copy'; });
	else
		button.textContent = 'Select and copy';
}

function row(s) {
	const exec = `bcctl sandbox exec ${s.id}`;
	const live = s.state !== 'deleting' && s.state !== 'deleted';
	const cmd = el('code', { class: 'exec-line' }, exec);
	const copyBtn = el('button', { type: 'button', class: 'copy' }, 'Copy');
	copyBtn.addEventListener('click', () => copy(exec, copyBtn));
	const state = el('td', { class: 'state' }, s.state,
		s.identityRebound === false ? el('span', { class: 'identity-warn' },
			'Restored from memory: it still answers to its source\'s SSH identity, so exec waits ' +
			'until the source and sibling restores are gone or the host gives it its own.') : null);
	return el('tr', { 'data-id': s.id, 'data-state': s.state },
		el('td', { class: 'mono' }, s.id), state,
		el('td', { class: 'mono' }, s.templateId), el('td', { class: 'mono' }, s.ownerId),
		el('td', {}, el('span', { class: 'countdown', 'data-expires': String(s.expiresAt) })),
		el('td', {}, el('div', { class: 'exec' }, cmd, copyBtn)),
		el('td', { class: 'actions' }, live ? [
			el('button', { type: 'button', class: 'extend',
				onclick: () => act('extend', s, { sandboxId: s.id, by: '30m' }) }, '+30 min'),
			el('button', { type: 'button', class: 'snapshot',
				onclick: () => act('snapshot', s, { sandboxId: s.id }) }, 'Snapshot'),
			el('button', { type: 'button', class: 'delete', onclick: () => {
				if (confirm(`Delete sandbox ${s.id}? Its disk and memory are gone for good.`))
					act('delete', s, { sandboxId: s.id });
			} }, 'Delete'),
		] : null));
}

async function loadSandboxes() {
	const scope = $('sbx-everyone').checked ? 'all' : 'mine';
	const { items } = await call('compute/sandboxes/list', { scope, limit: 200 });
	if (shown.sandboxes === JSON.stringify(items))
		return;
	shown.sandboxes = JSON.stringify(items);
	$('sandboxes').tBodies[0].replaceChildren(...items.map(row));
	$('sandboxes').dataset.loaded = String(Date.now());
	snapshotsOff();
	tick();
}

function refreshSoon() {
	clearTimeout(refreshTimer);
	refreshTimer = setTimeout(() => {
		Promise.all([loadTemplates(), loadSandboxes(), loadVolumes()]).catch(error);
	}, 300);
}

// A sandbox (or warm pool) event refreshes the page.
export function onEvent(ev) {
	if (ev.type.startsWith('sandbox.') || ev.type.startsWith('instance.'))
		refreshSoon();
}

export function start() {
	$('create-template').addEventListener('change', onTemplate);
	$('create-form').addEventListener('submit', create);
	$('attach-form').addEventListener('submit', attach);
	$('attach-template').addEventListener('change', attachChoices);
	$('sbx-everyone').addEventListener('change', () => loadSandboxes().catch(error));
	ticker = ticker || setInterval(tick, 1000);
	Promise.all([loadTemplates(), loadSandboxes(), loadVolumes()]).catch(error);
}
