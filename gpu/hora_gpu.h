/* hora_gpu.h - what the GPU module offers the rest of hora (internal).
 *
 * Built from device.cu when CUDA + NCCL are found (HORA_HAVE_CUDA), from
 * stub.c otherwise, where every call returns -ENOTSUP. A build with CUDA
 * on a machine with no GPU answers -ENODEV at run time, so callers (and the
 * tests) can tell "not built" from "no device" and skip with a clear reason.
 */
#ifndef HORA_GPU_H
#define HORA_GPU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (>= 1), -ENODEV when there is none (reason
 * in why, if given), -ENOTSUP when built without CUDA. */
int hora_gpu_device_count(char *why, size_t whylen);

/* A human-readable list of devices and the CUDA/NCCL versions into buf.
 * Returns 0, -ENODEV (buf says why) or -ENOTSUP. */
int hora_gpu_describe(char *buf, size_t len);

/* Run y = a*x + y for n floats on device 0 with hora's saxpy kernel and
 * compare with the same computation on the CPU; *max_abs_err gets the
 * largest difference. Returns 0, -ENODEV, -ENOTSUP, -ENOMEM or -EIO. */
int hora_gpu_saxpy_check(int n, float a, double *max_abs_err);

/* NCCL's version code (e.g. 22703) or -ENOTSUP. */
int hora_gpu_nccl_version(void);

#ifdef __cplusplus
}
#endif
#endif
