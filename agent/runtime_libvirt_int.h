/* runtime_libvirt_int.h: the libvirt runtime's state and the helpers its
 * files share (runtime_libvirt.c, _admit.c, _create.c, _images.c); private. */
#ifndef BC_AGENT_RUNTIME_LIBVIRT_INT_H
#define BC_AGENT_RUNTIME_LIBVIRT_INT_H

#include <libvirt/libvirt.h>
#include <pthread.h>

#include "admit.h"
#include "runtime.h"

#define GIB (1024ull * 1024 * 1024)
#define DEFAULT_URI "qemu:///system"
#define DEFAULT_STOP_MS 30000
#define DEFAULT_IMAGE_MAX (64 * GIB)
#define NODE_ID_MAX 128
#define STOP_POLL_MS 100

#define SHUT_MAX 64
#define STOP_SYNC_MS 2000  /* a stop waits this long itself; then later passes */

/* A guest asked to shut down (ACPI), forced off at deadline. */
struct shutdown {
	char id[RT_ID_MAX + 1];  /* "" = free */
	int64_t deadline;        /* mono ms */
};

/* An instance with runtime calls under way (several: never, but counted). */
struct lv_call {
	char id[RT_ID_MAX + 1];
	unsigned n;
};

/* A calling thread's own libvirt connection. */
struct lv_conn {
	pthread_t thread;
	virConnectPtr conn;
};

struct rt_libvirt {
	struct rt base;
	struct lv_conn *conns;        /* one per calling thread, under mu */
	size_t n_conns, cap_conns;
	char *uri;
	char *node_id;
	char *data_dir, *images_dir, *instances_dir, *volumes_dir;
	char *ca_file;
	const char *type;             /* "kvm" | "qemu" */
	uint32_t cap_vcpus;
	uint64_t cap_memory_mib;
	uint64_t image_max;
	uint32_t stop_ms;
	rt_boot_data_fn boot_data;
	void *boot_data_ctx;
	struct imgfetch *fetch;       /* image downloads (worker threads) */
	struct guestready *gr;        /* the guests' up marks (may be NULL) */
	/* Several converge workers call at once (runtime.h), never two for
	 * one instance: mu guards the connections' table, shut and
	 * gateway4; admit_mu the admission and its bookings; fetch_mu
	 * imgfetch_get (one caller at a time). */
	pthread_mutex_t mu, admit_mu, fetch_mu;
	struct admit_res booked;      /* admitted creates not defined yet */
	struct shutdown shut[SHUT_MAX]; /* ACPI shutdowns under way */
	char gateway4[64];            /* NodeSpec.ipam_gateway, from node() */
	/* Under mu: the calls under way per instance (call_begin/call_end),
	 * bumped epoch at each; this node's domains as last seen (known,
	 * valid once one whole list was taken). See lv_list. */
	struct lv_call *calls;
	size_t n_calls, cap_calls;
	uint64_t epoch;
	struct rt_instance *known;
	size_t n_known, cap_known;
	bool known_valid;
	char hugepages_dir[256];      /* /sys/kernel/mm/hugepages (tests: BC_HUGEPAGES_DIR) */
};

/* runtime_libvirt.c */
struct rt_libvirt *lv_of(struct rt *rt);
const char *lv_err(void);
virConnectPtr conn_of(struct rt_libvirt *lv);
bool dom_ours(struct rt_libvirt *lv, virDomainPtr dom);
enum rt_state dom_state(virDomainPtr dom);
char *inst_path(const struct rt_libvirt *lv, const char *id, const char *file);
int inst_dir_remove(const struct rt_libvirt *lv, const char *id);
bool file_exists(const char *path);
int doms_ours(struct rt_libvirt *lv, virDomainPtr **ret, size_t *ret_n);
void doms_free(virDomainPtr *v, size_t n);
void known_set(struct rt_libvirt *lv, const char *id, enum rt_state st, bool add);
/* runtime_libvirt_admit.c: admit books what it admitted until unbook
 * (comments above each). */
int admit(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason);
void unbook(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s);
/* runtime_libvirt_create.c, runtime_libvirt_images.c */
int create_call(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *reason);
void images_gc(struct rt_libvirt *lv, const Bc__Node__V1__NodeSpec *spec);
/* Define spec's instance on the disk already at its disk.qcow2 (a
 * restore): admission, seed, define, as create_call without the image and
 * overlay; macs (n_macs), when not NULL, replace the NICs' MACs. The
 * caller removes the instance directory on failure. */
int define_restored(struct rt_libvirt *lv, const Bc__Node__V1__InstanceSpec *s, char *const *macs,
		    size_t n_macs, char *reason);
/* runtime_libvirt_snapshot.c: the runtime's capture and restore
 * (runtime.h), and the object's framing (pure, tested without libvirt):
 * "bc-libvirt-snapshot 1\n", then sections "section <name> <bytes>\n"
 * followed by that many bytes, then "end\n". */
#define LVSNAP_MAGIC "bc-libvirt-snapshot 1\n"
int lv_capture(struct rt *rt, const char *id, bool include_memory, const char *path,
	       int64_t *ret_paused_ms, char *reason);
int lv_restore(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const char *path,
	       enum rt_state *ret_state, char *reason);
void lv_capture_recover(struct rt *rt, const char *workdir);
/* runtime_libvirt_rebind.c: runtime_ops.rebind (docs/rebind.md). */
int lv_rebind(struct rt *rt, const Bc__Node__V1__InstanceSpec *s, const void *tar, size_t len,
	      const char *nonce, char *reason);
/* Write the object to fd: meta (text), then the files disk and mem (NULL:
 * no memory section). 0 or -errno. */
int lvsnap_write(int fd, const char *meta, const char *disk, const char *mem);
/* Split the object at path: its meta text (*ret_meta malloc'd), its disk
 * into disk_out, its memory (if any) into mem_out (*ret_has_mem). -EBADMSG
 * for anything that is not such an object (written files removed). */
/* runtime_libvirt_save.c: libvirt's save image (pure). Check the image at
 * path (header, its XML and cookie, QEMU's stream) before libvirtd sees it;
 * *ret_xml (malloc'd, NULL: not wanted) is the saved domain's XML. 0;
 * -EBADMSG or -errno, with reason. */
int lvsnap_save_check(const char *path, char **ret_xml, char *reason);
/* xml (a new instance's definition) with its <os> replaced by the saved
 * domain XML's (its resolved firmware), naming xml's NVRAM file; NULL with
 * reason when they cannot be combined safely. */
char *lvsnap_save_bind_xml(const char *saved, const char *xml, char *reason);
/* Rewrite libvirt's save image in as out with xml (a domain definition,
 * through lvsnap_save_bind_xml) in its header in place of the saved
 * domain's, the cookie and QEMU's stream unchanged. 0; -EBADMSG (an image
 * lvsnap_save_check refuses, or XML that cannot be bound) or -errno, with
 * reason. */
int lvsnap_save_rebind(const char *in, const char *out, const char *xml, char *reason);
int lvsnap_read(const char *path, const char *disk_out, const char *mem_out, char **ret_meta,
		bool *ret_has_mem);

#endif
