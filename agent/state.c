/* state.c: bcd's persistent state and the spec acceptance rule.
 *
 * The agent applies a NodeSpec only if it is newer than the one it applied,
 * and writes it to spec.pb before acting on it: after a crash the agent
 * restarts from exactly the last spec it accepted, and reports that
 * generation when it re-opens the watch. Command ids are recorded before a
 * command starts so that no command ever runs twice. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

#define CMD_ID_MAX 128
#define CMDS_FILE_MAX (64u << 20)
#define LINE_FILE_MAX 4096

int state_accept_spec(uint64_t applied_generation, const Bc__Node__V1__NodeSpec *incoming)
{
	if (!incoming || incoming->n_instances > STATE_MAX_INSTANCES ||
	    incoming->n_volumes > STATE_MAX_VOLUMES)
		return -EINVAL;
	if (incoming->generation <= applied_generation)
		return -ESTALE;
	return 0;
}

static char *spec_path(const char *dir)
{
	return xasprintf("%s/%s", dir, STATE_SPEC_FILE);
}

int state_save_spec(const char *dir, const Bc__Node__V1__NodeSpec *spec)
{
	_cleanup_free_ char *path = spec_path(dir);
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len = protobuf_c_message_get_packed_size(&spec->base);

	if (len > STATE_MAX_SPEC_BYTES)
		return -EFBIG;
	buf = xmalloc(len);
	protobuf_c_message_pack(&spec->base, buf);
	return file_replace(path, buf, len, 0600);
}

int state_sync_spec(const char *dir)
{
	_cleanup_free_ char *path = spec_path(dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC), e = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		e = -errno;
	close(fd);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return e ? e : -errno;
	if (fsync(fd) < 0 && !e)
		e = -errno;
	close(fd);
	return e;
}

static Bc__Node__V1__NodeSpec *spec_unpack(const void *buf, size_t len)
{
	return bc__node__v1__node_spec__unpack(NULL, len, buf);
}

int state_load_spec(const char *dir, Bc__Node__V1__NodeSpec **ret)
{
	_cleanup_free_ char *path = spec_path(dir);
	_cleanup_free_ char *buf = NULL;
	Bc__Node__V1__NodeSpec *spec;
	size_t len = 0;
	int e;

	e = file_read_all(path, STATE_MAX_SPEC_BYTES, &buf, &len);
	if (e < 0)
		return e;
	spec = spec_unpack(buf, len);
	if (!spec)
		return -EBADMSG;
	*ret = spec;
	return 0;
}

Bc__Node__V1__NodeSpec *state_spec_dup(const Bc__Node__V1__NodeSpec *spec)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len;

	if (!spec)
		return NULL;
	len = protobuf_c_message_get_packed_size(&spec->base);
	buf = xmalloc(len);
	protobuf_c_message_pack(&spec->base, buf);
	return spec_unpack(buf, len);
}

void state_spec_free(Bc__Node__V1__NodeSpec *spec)
{
	if (spec)
		bc__node__v1__node_spec__free_unpacked(spec, NULL);
}

int state_take_spec(const char *dir, uint64_t *applied_generation,
		    const Bc__Node__V1__NodeSpec *incoming, Bc__Node__V1__NodeSpec **ret_copy)
{
	Bc__Node__V1__NodeSpec *copy;
	int e;

	e = state_accept_spec(*applied_generation, incoming);
	if (e < 0)
		return e;
	copy = state_spec_dup(incoming);
	if (!copy)
		return -ENOMEM;
	e = state_save_spec(dir, incoming);
	if (e < 0) {
		state_spec_free(copy);
		return e;
	}
	*applied_generation = incoming->generation;
	*ret_copy = copy;
	return 0;
}

/* ------------------------------------------------------------ commands */

struct state_cmds {
	char *path;
	char **ids;     /* sorted */
	size_t n, cap;
};

static bool cmd_id_valid(const char *id)
{
	if (!id || !*id || !str_is_printable(id, CMD_ID_MAX))
		return false;
	return strpbrk(id, " \t") == NULL;
}

/* Index where id is or would be inserted; *found says which. */
static size_t cmds_find(const struct state_cmds *s, const char *id, bool *found)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(s->ids[mid], id);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

static void cmds_insert(struct state_cmds *s, size_t at, const char *id)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 64;
		s->ids = realloc(s->ids, s->cap * sizeof(*s->ids));
		if (!s->ids)
			abort();
	}
	memmove(s->ids + at + 1, s->ids + at, (s->n - at) * sizeof(*s->ids));
	s->ids[at] = xstrdup(id);
	s->n++;
}

/* Parse complete lines of buf; returns the length of the complete part. */
static size_t cmds_parse(struct state_cmds *s, char *buf, size_t len)
{
	size_t done = 0;

	for (char *nl; done < len && (nl = memchr(buf + done, '\n', len - done));) {
		bool found;
		char *line = buf + done;
		size_t at;
		*nl = '\0';
		done = (size_t)(nl - buf) + 1;
		if (!cmd_id_valid(line))
			continue;
		at = cmds_find(s, line, &found);
		if (!found)
			cmds_insert(s, at, line);
	}
	return done;
}

int state_cmds_open(const char *dir, struct state_cmds **ret)
{
	struct state_cmds *s = xcalloc(1, sizeof(*s));
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, good;
	int e;

	s->path = xasprintf("%s/%s", dir, STATE_CMDS_FILE);
	e = file_read_all(s->path, CMDS_FILE_MAX, &buf, &len);
	if (e == -ENOENT) {
		*ret = s;
		return 0;
	}
	if (e < 0)
		goto fail;
	good = cmds_parse(s, buf, len);
	if (good < len && truncate(s->path, (off_t)good) < 0) {
		e = -errno;
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	state_cmds_free(s);
	return e;
}

bool state_cmds_has(const struct state_cmds *s, const char *id)
{
	bool found = false;

	if (s && id)
		cmds_find(s, id, &found);
	return found;
}

static int append_line(const char *path, const char *line)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	size_t len = strlen(line);
	ssize_t w;

	if (fd < 0)
		return -errno;
	w = write(fd, line, len);
	if (w < 0)
		return -errno;
	if ((size_t)w != len)
		return -EIO;
	if (fsync(fd) < 0)
		return -errno;
	return 0;
}

int state_cmds_add(struct state_cmds *s, const char *id)
{
	_cleanup_free_ char *line = NULL;
	bool found;
	size_t at;
	int e;

	if (!cmd_id_valid(id))
		return -EINVAL;
	at = cmds_find(s, id, &found);
	if (found)
		return -EEXIST;
	line = xasprintf("%s\n", id);
	e = append_line(s->path, line);
	if (e < 0)
		return e;
	cmds_insert(s, at, id);
	return 0;
}

size_t state_cmds_count(const struct state_cmds *s)
{
	return s ? s->n : 0;
}

void state_cmds_free(struct state_cmds *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->ids[i]);
	free(s->ids);
	free(s->path);
	free(s);
}

/* ------------------------------------------------------------ identity */

/* Rename dir/name to dir/name.<owner>.<seconds> (kept for the operator). */
static int set_aside(const char *dir, const char *name, const char *owner)
{
	_cleanup_free_ char *from = xasprintf("%s/%s", dir, name);
	_cleanup_free_ char *to = xasprintf("%s/%s.%s.%lld", dir, name, owner,
					    (long long)time(NULL));

	if (rename(from, to) < 0)
		return errno == ENOENT ? 0 : -errno;
	return 1;
}

/* Whose spec.pb is in dir: its node id (malloc'd), "" for none, NULL
 * when it does not unpack (left alone: starting without a spec is safe). */
static char *spec_owner(const char *dir)
{
	Bc__Node__V1__NodeSpec *spec = NULL;
	int e = state_load_spec(dir, &spec);
	char *owner;

	if (e == -ENOENT)
		return xstrdup("");
	if (e < 0)
		return NULL;
	owner = xstrdup(spec->node_id);
	state_spec_free(spec);
	return owner;
}

int state_set_aside_foreign(const char *dir, const char *node_id, bool joined_now,
			    char **ret_owner)
{
	_cleanup_free_ char *owner = spec_owner(dir);
	int n = 0, e;

	if (!joined_now && (!owner || !*owner || strcmp(owner, node_id) == 0))
		return 0;
	if (!owner || !*owner || !str_is_printable(owner, 64) || strchr(owner, '/')) {
		free(owner);
		owner = xstrdup("before-join");
	}
	if ((e = set_aside(dir, STATE_SPEC_FILE, owner)) < 0)
		return e;
	n += e;
	if ((e = set_aside(dir, STATE_CMDS_FILE, owner)) < 0)
		return e;
	n += e;
	if (n > 0 && ret_owner) {
		*ret_owner = owner;
		owner = NULL;
	}
	return n;
}

int state_read_line(const char *dir, const char *name, char **ret)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
	char *buf = NULL;
	size_t len = 0;
	int e;

	e = file_read_all(path, LINE_FILE_MAX, &buf, &len);
	if (e < 0)
		return e;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	if (len == 0 || !str_is_printable(buf, LINE_FILE_MAX)) {
		free(buf);
		return -EBADMSG;
	}
	*ret = buf;
	return 0;
}

/* See state.h. */
Bc__Node__V1__DesiredState state_effective_desired(Bc__Node__V1__DesiredState desired,
						   bool pause_after_ready, int64_t ready_at)
{
	if (desired == BC__NODE__V1__DESIRED_STATE__DESIRED_PAUSED && pause_after_ready &&
	    ready_at == 0)
		return BC__NODE__V1__DESIRED_STATE__DESIRED_RUNNING;
	return desired;
}
