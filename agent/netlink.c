/* netlink.c: bridge and taps over rtnetlink with libmnl; the taps
 * themselves through /dev/net/tun (rtnetlink cannot create them). Each
 * call opens its own socket: they run on the converge thread only, a few
 * per pass. */
#include "netlink.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

/* IFLA_BR_FDB_MAX_LEARNED (kernel 6.8) is newer than some uapi headers: it
 * follows IFLA_BR_MCAST_QUERIER_STATE and IFLA_BR_FDB_N_LEARNED. Kernels
 * before 6.8 ignore it (the bridge's attributes are parsed leniently). */
#define BR_FDB_MAX_LEARNED (IFLA_BR_MCAST_QUERIER_STATE + 2)

/* Send one request and wait for its ACK (or error). */
static int talk(struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct mnl_socket *nl = mnl_socket_open(NETLINK_ROUTE);
	uint32_t portid;
	int r;

	if (!nl)
		return -errno;
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		r = -errno;
		mnl_socket_close(nl);
		return r;
	}
	portid = mnl_socket_get_portid(nl);
	nlh->nlmsg_seq = (uint32_t)time(NULL);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		r = -errno;
		mnl_socket_close(nl);
		return r;
	}
	while ((r = (int)mnl_socket_recvfrom(nl, buf, sizeof(buf))) > 0) {
		r = mnl_cb_run(buf, (size_t)r, nlh->nlmsg_seq, portid, cb, data);
		if (r <= 0)
			break;
	}
	r = r < 0 ? -errno : 0;
	mnl_socket_close(nl);
	return r;
}

static struct nlmsghdr *link_msg(char *buf, int type, int flags, const char *name,
				 struct ifinfomsg **ret_ifm)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifm;

	nlh->nlmsg_type = (uint16_t)type;
	nlh->nlmsg_flags = (uint16_t)(NLM_F_REQUEST | NLM_F_ACK | flags);
	ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
	if (ret_ifm)
		*ret_ifm = ifm;
	return nlh;
}

bool nl_link_exists(const char *name)
{
	return if_nametoindex(name) != 0;
}

/* The kind of link name ("bridge", "tun", ...) into kind; "" if none. */
static int kind_cb(const struct nlattr *a, void *data)
{
	if (mnl_attr_get_type(a) == IFLA_INFO_KIND)
		snprintf(data, 32, "%s", mnl_attr_get_str(a));
	return MNL_CB_OK;
}

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nlattr *a;

	mnl_attr_for_each(a, nlh, sizeof(struct ifinfomsg))
		if (mnl_attr_get_type(a) == IFLA_LINKINFO)
			mnl_attr_parse_nested(a, kind_cb, data);
	return MNL_CB_OK;
}

static int link_kind(const char *name, char kind[32])
{
	char buf[MNL_SOCKET_BUFFER_SIZE];

	kind[0] = '\0';
	return talk(link_msg(buf, RTM_GETLINK, 0, name, NULL), link_cb, kind);
}

static int link_set(const char *name, const char *master, bool up)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct ifinfomsg *ifm;
	struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, 0, name, &ifm);

	if (up) {
		ifm->ifi_change = IFF_UP;
		ifm->ifi_flags = IFF_UP;
	}
	if (master) {
		unsigned idx = if_nametoindex(master);

		if (!idx)
			return -ENODEV;
		mnl_attr_put_u32(nlh, IFLA_MASTER, idx);
	}
	return talk(nlh, NULL, NULL);
}

static int addr_add(const char *name, const char *cidr)
{
	char buf[MNL_SOCKET_BUFFER_SIZE], host[NL_ADDR_MAX], *slash, *end;
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifaddrmsg *ifa;
	unsigned char addr[16];
	unsigned idx = if_nametoindex(name);
	int af, e;
	long plen;

	if (!idx)
		return -ENODEV;
	snprintf(host, sizeof(host), "%s", cidr);
	slash = strchr(host, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	plen = strtol(slash + 1, &end, 10);
	af = strchr(host, ':') ? AF_INET6 : AF_INET;
	if (*end || plen < 0 || plen > (af == AF_INET ? 32 : 128) ||
	    inet_pton(af, host, addr) != 1)
		return -EINVAL;
	nlh->nlmsg_type = RTM_NEWADDR;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
	ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	ifa->ifa_family = (unsigned char)af;
	ifa->ifa_prefixlen = (unsigned char)plen;
	ifa->ifa_index = idx;
	mnl_attr_put(nlh, IFA_LOCAL, af == AF_INET ? 4 : 16, addr);
	mnl_attr_put(nlh, IFA_ADDRESS, af == AF_INET ? 4 : 16, addr);
	if (af == AF_INET6)
		mnl_attr_put_u32(nlh, IFA_FLAGS, IFA_F_NODAD);
	e = talk(nlh, NULL, NULL);
	return e == -EEXIST ? 0 : e;
}

int nl_bridge_ensure(const char *name, const char *addr4, const char *addr6)
{
	char kind[32];
	int e;

	if (!nl_link_exists(name)) {
		char buf[MNL_SOCKET_BUFFER_SIZE];
		struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, name,
						NULL);
		struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO);

		mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
		mnl_attr_nest_end(nlh, info);
		e = talk(nlh, NULL, NULL);
		if (e < 0 && e != -EEXIST)
			return e;
	}
	e = link_kind(name, kind);
	if (e < 0)
		return e;
	if (strcmp(kind, "bridge") != 0)
		return -EEXIST;
	if (addr4 && *addr4 && (e = addr_add(name, addr4)) < 0)
		return e;
	if (addr6 && *addr6 && (e = addr_add(name, addr6)) < 0)
		return e;
	return link_set(name, NULL, true);
}

static int tap_create(const char *name)
{
	struct ifreq ifr = { 0 };
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC), e = 0;

	if (fd < 0)
		return -errno;
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || ioctl(fd, TUNSETPERSIST, 1) < 0)
		e = -errno;
	close(fd);
	return e;
}

int nl_tap_ensure(const char *name, const char *bridge)
{
	int e;

	if (strlen(name) >= IFNAMSIZ)
		return -EINVAL;
	if (!nl_link_exists(name) && (e = tap_create(name)) < 0)
		return e;
	return link_set(name, bridge, true);
}

/* Bridge port attributes (IFLA_BRPORT_*) of port, as u8 flags. */
static int port_flags(const char *port, const int *attr, const uint8_t *val, size_t n)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, 0, port, NULL);
	struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO), *data;

	mnl_attr_put_strz(nlh, IFLA_INFO_SLAVE_KIND, "bridge");
	data = mnl_attr_nest_start(nlh, IFLA_INFO_SLAVE_DATA);
	for (size_t i = 0; i < n; i++)
		mnl_attr_put_u8(nlh, (uint16_t)attr[i], val[i]);
	mnl_attr_nest_end(nlh, data);
	mnl_attr_nest_end(nlh, info);
	return talk(nlh, NULL, NULL);
}

/* A static, sticky FDB entry: mac on port, never learned elsewhere. */
static int fdb_static(const char *port, const uint8_t mac[6])
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ndmsg *nd;
	unsigned idx = if_nametoindex(port);

	if (!idx)
		return -ENODEV;
	nlh->nlmsg_type = RTM_NEWNEIGH;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
	nd = mnl_nlmsg_put_extra_header(nlh, sizeof(*nd));
	nd->ndm_family = AF_BRIDGE;
	nd->ndm_ifindex = (int)idx;
	nd->ndm_state = NUD_NOARP;              /* "static" */
	nd->ndm_flags = NTF_MASTER | NTF_STICKY;
	mnl_attr_put(nlh, NDA_LLADDR, 6, mac);
	return talk(nlh, NULL, NULL);
}

int nl_port_secure(const char *port, const uint8_t *mac, bool lock)
{
	static const int attr[] = { IFLA_BRPORT_LEARNING, IFLA_BRPORT_UNICAST_FLOOD,
				    IFLA_BRPORT_LOCKED };
	uint8_t val[] = { 0, !mac && !lock, lock };
	int e;

	/* the entry before the lock: a locked port drops every source
	 * without one */
	if (mac && (e = fdb_static(port, mac)) < 0)
		return e;
	return port_flags(port, attr, val, sizeof(val));
}

int nl_bridge_fdb_max_learned(const char *bridge, uint32_t max)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, 0, bridge, NULL);
	struct nlattr *info = mnl_attr_nest_start(nlh, IFLA_LINKINFO), *data;

	mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
	data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
	mnl_attr_put_u32(nlh, BR_FDB_MAX_LEARNED, max);
	mnl_attr_nest_end(nlh, data);
	mnl_attr_nest_end(nlh, info);
	return talk(nlh, NULL, NULL);
}

int nl_link_set_up(const char *name, bool up)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct ifinfomsg *ifm;
	struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, 0, name, &ifm);

	ifm->ifi_change = IFF_UP;
	ifm->ifi_flags = up ? IFF_UP : 0;
	return talk(nlh, NULL, NULL);
}

int nl_link_delete(const char *name)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	int e;

	if (!nl_link_exists(name))
		return 0;
	e = talk(link_msg(buf, RTM_DELLINK, 0, name, NULL), NULL, NULL);
	return e == -ENODEV ? 0 : e;
}

struct addrs {
	unsigned idx;
	char (*out)[NL_ADDR_MAX];
	size_t max, n;
};

static int addr_cb(const struct nlmsghdr *nlh, void *data)
{
	struct addrs *a = data;
	const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
	struct nlattr *at;

	if (ifa->ifa_index != a->idx || a->n >= a->max)
		return MNL_CB_OK;
	mnl_attr_for_each(at, nlh, sizeof(*ifa)) {
		int t = mnl_attr_get_type(at);

		/* IFA_LOCAL for IPv4 (point-to-point safe), IFA_ADDRESS for IPv6 */
		if ((ifa->ifa_family == AF_INET && t == IFA_LOCAL) ||
		    (ifa->ifa_family == AF_INET6 && t == IFA_ADDRESS)) {
			inet_ntop(ifa->ifa_family, mnl_attr_get_payload(at), a->out[a->n],
				  NL_ADDR_MAX);
			a->n++;
			break;
		}
	}
	return MNL_CB_OK;
}

int nl_addrs(const char *name, char (*out)[NL_ADDR_MAX], size_t max, size_t *ret_n)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct addrs a = { if_nametoindex(name), out, max, 0 };
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct rtgenmsg *g;
	int e;

	if (!a.idx)
		return -ENODEV;
	nlh->nlmsg_type = RTM_GETADDR;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
	g->rtgen_family = AF_UNSPEC;
	e = talk(nlh, addr_cb, &a);
	if (e < 0)
		return e;
	*ret_n = a.n;
	return 0;
}
