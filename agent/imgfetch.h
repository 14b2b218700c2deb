/* imgfetch.h: image downloads off the converge thread.
 *
 * A create that needs an image not yet in data_dir/images starts its
 * download on a worker thread and is answered "in progress" at once, so a
 * slow or large download never holds up the create's converge worker (and
 * through it the other instances' creates). The next create of an instance naming that image finds
 * the file, or the download's failure, answered from memory for a minute
 * before the image is fetched again (a wrong digest must not cost a full
 * download every pass). At most IMGFETCH_MAX downloads run at once.
 * imgfetch_get is called by one thread at a time (the libvirt runtime's
 * converge workers take its fetch_mu); the download workers only download. */
#ifndef BC_AGENT_IMGFETCH_H
#define BC_AGENT_IMGFETCH_H

#include "image.h"

#define IMGFETCH_MAX 4

struct imgfetch;

/* Downloads into images_dir with ca_file and max_bytes (copied); wake(ctx)
 * is called from the worker when a download ends (NULL: nobody told). */
struct imgfetch *imgfetch_new(const char *images_dir, const char *ca_file, uint64_t max_bytes,
			      void (*wake)(void *ctx), void *ctx);

/* Cancel running downloads (their partial files removed) and wait for the
 * workers. NULL-safe. */
void imgfetch_free(struct imgfetch *f);

/* The image of sha256 at url: 0 with *ret_path (malloc'd) when it is
 * stored; -EINPROGRESS with reason "ImageFetching: ..." while its download
 * runs or waits for a slot (one is started if none); the failure of a
 * download that ended less than a minute ago (image_ensure's codes and
 * reason). Refusals that need no download (not https, bad digest string)
 * are immediate. */
int imgfetch_get(struct imgfetch *f, const char *url, const char *sha256, char **ret_path,
		 char *reason);

#endif
