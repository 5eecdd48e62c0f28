/*
 * Smallest CUDA kernel of the GPU backend: y = a*x + y over float vectors. It exists to prove
 * the CUDA build plumbing (nvcc, architectures, static runtime, C linkage) and the device probe
 * every GPU test uses to skip cleanly on a machine without a GPU.
 */
#ifndef TANDEM_KERNELS_CUDA_SMOKE_H
#define TANDEM_KERNELS_CUDA_SMOKE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices visible, or 0 when there is no driver or no device. */
int cuda_device_count(void);

/* Computes y[i] = a * x[i] + y[i] for i < n on device 0. x and y are host arrays owned by the
 * caller. Returns 0, or a negative value when a CUDA call fails (the message is written to
 * err, which may be NULL, of errlen bytes). */
int cuda_saxpy(float a, const float *x, float *y, size_t n, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
