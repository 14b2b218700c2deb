// app.js: the bc web console's entry point (docs/console.md): sign in with
// a token, then the Sandboxes page (/console/) or the Volumes page
// (/console/volumes), and the live event feed beside them.
import { token, setToken, clearToken, call } from './api.js';
import * as sandboxes from './sandboxes.js';
import * as volumes from './volumes.js';
import * as feed from './events.js';

const $ = (id) => document.getElementById(id);
const pages = { sandboxes, volumes };

function pageName() {
	return /\/volumes\/?$/.test(location.pathname) ? 'volumes' : 'sandboxes';
}

function showSignin(message) {
	$('signin').hidden = false;
	$('nav').hidden = $('signout').hidden = $('feed').hidden = true;
	for (const p of Object.keys(pages))
		$(`page-${p}`).hidden = true;
	$('signin-error').textContent = message || '';
	$('token').focus();
}

function start() {
	const name = pageName();
	$('signin').hidden = true;
	$('nav').hidden = $('signout').hidden = $('feed').hidden = false;
	for (const a of document.querySelectorAll('#nav a'))
		a.classList.toggle('current', a.dataset.page === name);
	$(`page-${name}`).hidden = false;
	pages[name].start();
	feed.start((ev) => pages[name].onEvent(ev), () => {
		feed.stop();
		clearToken();
		showSignin('The token was refused (UNAUTHENTICATED): sign in again.');
	});
}

// The token is checked by a call every signed-in user may make (a list
// answers with what the token may read, possibly nothing).
async function signIn(ev) {
	ev.preventDefault();
	const t = $('token').value.trim();
	if (!t)
		return;
	setToken(t);
	try {
		await call('compute/sandboxtemplates/list', {});
	} catch (e) {
		clearToken();
		showSignin(`Sign-in failed: ${e}`);
		return;
	}
	$('token').value = '';
	start();
}

function signOut() {
	feed.stop();
	clearToken();
	location.assign('/console/');
}

$('signin-form').addEventListener('submit', signIn);
$('signout').addEventListener('click', signOut);
if (token())
	start();
else
	showSignin();
