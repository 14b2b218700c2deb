/* runtime.c: the table of runtimes built into bcd and helpers shared by
 * every runtime (state names, capability strings, id checks). */
#include "runtime.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

static const struct runtime_ops *const runtimes[] = {
	&rt_fake_ops,
	&rt_libvirt_ops,
};

static const char *const state_names[] = {
	[RT_STATE_STOPPED] = "stopped",
	[RT_STATE_RUNNING] = "running",
	[RT_STATE_PAUSED] = "paused",
	[RT_STATE_ERROR] = "error",
};

/* Capability strings the control plane places by (the spec's names). The
 * snapshot trait is no capability string: every runtime's snapshot support
 * is checked by the command that needs it. */
static const struct {
	size_t offset;
	const char *name;
} capabilities[] = {
	{offsetof(struct rt_traits, network_policy), "instance.network-policy"},
	{offsetof(struct rt_traits, ssh_host_only), "instance.ssh-host-only"},
	{offsetof(struct rt_traits, volumes), "instance.volumes"},
};

const struct runtime_ops *rt_lookup(const char *name)
{
	for (size_t i = 0; name && i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		if (strcmp(runtimes[i]->name, name) == 0)
			return runtimes[i];
	return NULL;
}

int rt_open(const char *name, const struct rt_config *cfg, struct rt **ret)
{
	const struct runtime_ops *ops = rt_lookup(name);

	if (!ops)
		return -ENOENT;
	return ops->open(cfg, ret);
}

void rt_close(struct rt *rt)
{
	if (rt)
		rt->ops->close(rt);
}

const char *rt_state_name(enum rt_state s)
{
	if ((unsigned)s >= sizeof(state_names) / sizeof(state_names[0]))
		return "error";
	return state_names[s];
}

int rt_state_parse(const char *s, enum rt_state *ret)
{
	for (size_t i = 0; s && i < sizeof(state_names) / sizeof(state_names[0]); i++)
		if (strcmp(state_names[i], s) == 0) {
			*ret = (enum rt_state)i;
			return 0;
		}
	return -EINVAL;
}

size_t rt_capabilities(const struct rt_traits *t, const char **out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < sizeof(capabilities) / sizeof(capabilities[0]) && n < max; i++) {
		const bool *flag = (const bool *)((const char *)t + capabilities[i].offset);
		if (*flag)
			out[n++] = capabilities[i].name;
	}
	return n;
}

bool rt_id_valid(const char *id)
{
	size_t n = 0;

	if (!id || !*id || *id == '.')
		return false;
	for (const char *p = id; *p; p++, n++) {
		char ch = *p;
		bool good = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
		if (!good || n >= RT_ID_MAX)
			return false;
	}
	return true;
}
