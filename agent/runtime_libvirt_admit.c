/* runtime_libvirt_admit.c: host admission for the libvirt runtime: the
 * capacity rule (admit.c) against what the defined domains book, huge
 * pages and NUMA placement. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admit.h"
#include "domxml.h"
#include "hostcheck.h"
#include "image.h"
#include "imgfetch.h"
#include "log.h"
#include "runtime.h"
#include "runtime_libvirt.h"
#include "runtime_libvirt_int.h"
#include "seed.h"
#include "util.h"
#include "volumes.h"


/* -------------------------------------------------------- admission */

/* What this node's domains hold, whatever their state (a defined domain
 * keeps its booking, as the controller counts it). */
static int usage_of(struct rt_libvirt *lv, struct admit_res *u)
{
	virDomainPtr *doms = NULL;
	size_t n = 0;
	int e = doms_ours(lv, &doms, &n);

	*u = (struct admit_res){0};
	if (e < 0)
		return e;
	for (size_t i = 0; i < n; i++) {
		virDomainInfo info;
		if (virDomainGetInfo(doms[i], &info) < 0)
			continue;
		u->vcpus += info.nrVirtCpu;
		u->memory_mib += info.maxMem / 1024;
	}
	doms_free(doms, n);
	return 0;
}

static uint64_t read_u64(const char *path)
{
	_cleanup_free_ char *buf = NULL;

	if (file_read_all(path, 64, &buf, NULL) < 0)
		return 0;
	return strtoull(buf, NULL, 10);
}

/* Free huge pages of the flavor's size against what the instance needs. */
static int admit_pages(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	uint64_t kib = 0, need, free_pages;
	char path[512];

	if (domxml_page_kib(s->huge_pages, &kib) < 0) {
		snprintf(reason, RT_REASON_MAX, "InvalidSpec: huge_pages must be 2M or 1G");
		return -EINVAL;
	}
	if (!kib)
		return 0;
	snprintf(path, sizeof(path), "%s/hugepages-%" PRIu64 "kB/free_hugepages", lv->hugepages_dir,
		 kib);
	need = (s->memory_mib * 1024 + kib - 1) / kib;
	free_pages = read_u64(path);
	if (free_pages < need) {
		snprintf(reason, RT_REASON_MAX,
			 "ResourcesExhausted: huge pages %s (%" PRIu64 " free, %" PRIu64 " needed)",
			 s->huge_pages, free_pages, need);
		return -ENOSPC;
	}
	return 0;
}

static int admit_placement(const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	char path[128];

	if (s->numa_node >= 0) {
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%" PRId32, s->numa_node);
		if (!file_exists(path)) {
			snprintf(reason, RT_REASON_MAX, "ResourcesExhausted: numa node %" PRId32,
				 s->numa_node);
			return -ENOSPC;
		}
	}
	for (size_t i = 0; i < s->n_pinned_vcpus; i++)
		if ((long)s->pinned_vcpus[i] >= cpus) {
			snprintf(reason, RT_REASON_MAX, "ResourcesExhausted: host cpu %" PRIu32,
				 s->pinned_vcpus[i]);
			return -ENOSPC;
		}
	return 0;
}

/* Host admission: vCPUs and memory against the configured capacity minus
 * what this node's other domains hold (admit.c); huge pages, NUMA node and
 * pinned CPUs against the host. -ENOSPC with "ResourcesExhausted: <what>". */
static int admit_locked(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	struct admit_res cap = {lv->cap_vcpus, lv->cap_memory_mib};
	struct admit_res need = {s->vcpus, s->memory_mib};
	struct admit_res held;
	int e = usage_of(lv, &held);

	if (e < 0) {
		snprintf(reason, RT_REASON_MAX, "libvirt unreachable: %.120s", lv_err());
		return e;
	}
	/* creates admitted and not defined yet hold their share too */
	held.vcpus += lv->booked.vcpus;
	held.memory_mib += lv->booked.memory_mib;
	if ((e = admit_fits(&cap, &held, &need, reason)) < 0)
		return e;
	if ((e = admit_pages(lv, s, reason)) < 0)
		return e;
	return admit_placement(s, reason);
}

/* Admitted: booked until its define ended (unbook), so that creates
 * running at once cannot overcommit the host together. */
int admit(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason)
{
	int e;

	pthread_mutex_lock(&lv->admit_mu);
	e = admit_locked(lv, s, reason);
	if (e == 0) {
		lv->booked.vcpus += s->vcpus;
		lv->booked.memory_mib += s->memory_mib;
	}
	pthread_mutex_unlock(&lv->admit_mu);
	return e;
}

void unbook(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s)
{
	pthread_mutex_lock(&lv->admit_mu);
	lv->booked.vcpus -= s->vcpus;
	lv->booked.memory_mib -= s->memory_mib;
	pthread_mutex_unlock(&lv->admit_mu);
}

