/* fake_gpu.h - what a FAKE_V3 stand-in of libhora_gpu.so (fake_gpu.c)
 * offers a test besides the ABI: counters of what was done through it, so
 * that a test can check that libhora freed what it allocated and aborted a
 * broken communicator. The stand-in exports
 *
 *	void hora_fake_gpu_counters(struct hora_fake_gpu_counters *out);
 *
 * which a test reaches with dlopen(path, RTLD_NOW | RTLD_NOLOAD) (the
 * handle the loader already holds) and dlsym. */
#ifndef HORA_FAKE_GPU_H
#define HORA_FAKE_GPU_H

#define HORA_FAKE_GPU_COUNTERS_SYMBOL "hora_fake_gpu_counters"

struct hora_fake_gpu_counters {
	long dev_live;   /* dev_alloc'ed blocks not freed yet */
	long host_live;  /* host_alloc'ed blocks not freed yet */
	long comms_live; /* nccl_init'ed communicators not destroyed yet */
	long destroys;   /* nccl_destroy with abort 0 */
	long aborts;     /* nccl_destroy with abort != 0 */
	long copies;     /* successful copy calls */
	long colls;      /* nccl_coll calls (failed ones too) */
};

typedef void (*hora_fake_gpu_counters_fn)(struct hora_fake_gpu_counters *out);

#endif
