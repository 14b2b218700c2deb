// volumes.js: the Volumes page. Create a volume from a pool, a name and a
// size in GiB (1 to 16,384) with a fresh console-... idempotency key; the
// person's own volumes or everyone's, each with its id, its
// /dev/disk/by-id/virtio-<serial> path, pool, host, size and state; Grow
// (a larger size) and Delete (confirmed: the data is wiped) for a ready one.
import { call, el, idemKey } from './api.js';

const MAX_GIB = 16384;
const $ = (id) => document.getElementById(id);
let refreshTimer = null;
let shown = null;           // the list drawn, as JSON: unchanged data is not redrawn

function error(e) {
	$('vol-error').textContent = e ? String(e) : '';
}

// The pools the tenant's templates use, offered in the pool field.
async function loadPools() {
	const { items } = await call('compute/sandboxtemplates/list', {});
	const pools = [...new Set(items.map((t) => t.poolId))].sort();
	$('vol-pools').replaceChildren(...pools.map((p) => el('option', { value: p })));
	if (!$('vol-pool').value && pools.length)
		$('vol-pool').value = pools[0];
}

async function create(ev) {
	ev.preventDefault();
	error(null);
	const poolId = $('vol-pool').value.trim(), name = $('vol-name').value.trim();
	const size = Number($('vol-size').value);
	if (!poolId || !name)
		return error('A pool and a name are needed.');
	if (!Number.isInteger(size) || size < 1 || size > MAX_GIB)
		return error(`The size must be 1 to ${MAX_GIB} GiB.`);
	try {
		const v = await call('compute/sandboxvolumes/create',
			{ poolId, name, sizeGib: String(size), idempotencyKey: idemKey() });
		$('vol-form').dataset.last = v.id;
		$('vol-name').value = '';
		await loadVolumes();
	} catch (e) {
		error(e);
	}
}

async function act(what, body) {
	error(null);
	try {
		await call(`compute/sandboxvolumes/${what}`, body);
		await loadVolumes();
	} catch (e) {
		error(e);
	}
}

function grow(v) {
	const cur = Number(v.sizeGib);
	const answer = prompt(`New size of ${v.name} (${v.id}) in GiB: larger than ${cur}, at most ${MAX_GIB}.`,
		String(cur + 1));
	if (answer === null)
		return;
	const size = Number(answer);
	if (!Number.isInteger(size) || size <= cur || size > MAX_GIB)
		return error(`The new size must be a whole number of GiB larger than ${cur} (at most ${MAX_GIB}).`);
	act('resize', { volumeId: v.id, sizeGib: String(size) });
}

function remove(v) {
	if (confirm(`Delete volume ${v.name} (${v.id})? Its data is wiped and cannot be recovered.`))
		act('delete', { volumeId: v.id });
}

function row(v) {
	const ready = v.state === 'ready';
	return el('tr', { 'data-id': v.id, 'data-state': v.state },
		el('td', { class: 'mono' }, v.id), el('td', {}, v.name),
		el('td', { class: 'mono device' }, `/dev/disk/by-id/virtio-${v.serial}`),
		el('td', { class: 'mono' }, v.poolId), el('td', { class: 'mono' }, v.nodeId),
		el('td', { class: 'size' }, `${v.sizeGib} GiB`), el('td', { class: 'state' }, v.state),
		el('td', { class: 'actions' }, ready ? [
			el('button', { type: 'button', class: 'grow', onclick: () => grow(v) }, 'Grow'),
			el('button', { type: 'button', class: 'delete', onclick: () => remove(v) }, 'Delete'),
		] : null));
}

async function loadVolumes() {
	const scope = $('vol-everyone').checked ? 'all' : 'mine';
	const { items } = await call('compute/sandboxvolumes/list', { scope, limit: 200 });
	if (shown === JSON.stringify(items))
		return;
	shown = JSON.stringify(items);
	$('volumes').tBodies[0].replaceChildren(...items.map(row));
	$('volumes').dataset.loaded = String(Date.now());
}

export function onEvent(ev) {
	if (ev.type.startsWith('sandbox.volume.')) {
		clearTimeout(refreshTimer);
		refreshTimer = setTimeout(() => loadVolumes().catch(error), 300);
	}
}

export function start() {
	$('vol-form').addEventListener('submit', create);
	$('vol-everyone').addEventListener('change', () => loadVolumes().catch(error));
	Promise.all([loadPools(), loadVolumes()]).catch(error);
}
