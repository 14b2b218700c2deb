// events.js: the live event feed. It reads the newline-delimited JSON
// stream of POST /api/compute/events/watch with fetch (the token in the
// Authorization header, as every call), resumes after the last id it saw
// when the stream ends (a deadline, a restart, a dropped connection) and
// reconnects with a growing delay, reset once a stream opened.
import { stream } from './api.js';

const MAX_SHOWN = 100;
let controller = null;
let lastId = 0;

const $ = (id) => document.getElementById(id);

function setState(text, live) {
	const s = $('feed-state');
	s.textContent = text;
	s.classList.toggle('live', live);
	$('feed').dataset.state = live ? 'live' : 'down';
}

function show(ev) {
	const li = document.createElement('li');
	const t = new Date(Number(ev.createdAt) || Date.now()).toLocaleTimeString();
	li.textContent = `${t} ${ev.type} ${ev.subject}`;
	li.dataset.type = ev.type;
	li.dataset.subject = ev.subject;
	const list = $('feed-list');
	list.prepend(li);
	while (list.children.length > MAX_SHOWN)
		list.lastElementChild.remove();
}

const sleep = (ms, signal) => new Promise((resolve) => {
	const t = setTimeout(resolve, ms);
	signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

async function run(onEvent, onUnauthenticated, signal) {
	let delay = 1000;
	const feed = $('feed');
	feed.dataset.connects = '0';
	while (!signal.aborted) {
		try {
			await stream('compute/events/watch', { afterId: String(lastId) }, () => {
				feed.dataset.connects = String(Number(feed.dataset.connects) + 1);
				setState('live', true);
				delay = 1000;
			}, (ev) => {
				lastId = Math.max(lastId, Number(ev.id));
				show(ev);
				onEvent(ev);
			}, signal);
		} catch (e) {
			if (signal.aborted)
				return;
			if (e.code === 'UNAUTHENTICATED') {
				onUnauthenticated();
				return;
			}
			if (e.code === 'ACCESS_DENIED') {
				// retrying cannot help: the token may not read events
				setState('not allowed (compute:events:read)', false);
				return;
			}
			feed.dataset.lastError = String(e.code || e.name);
		}
		if (signal.aborted)
			return;
		setState(`reconnecting in ${Math.round(delay / 1000)} s`, false);
		await sleep(delay, signal);
		delay = Math.min(delay * 2, 15000);
	}
}

// Start reading the feed: onEvent(event) for each event, onUnauthenticated()
// once if the token is refused (the feed then stops).
export function start(onEvent, onUnauthenticated) {
	stop();
	controller = new AbortController();
	setState('connecting', false);
	run(onEvent, onUnauthenticated, controller.signal);
}

export function stop() {
	if (controller)
		controller.abort();
	controller = null;
}
