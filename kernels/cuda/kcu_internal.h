/*
 * Internal to libtandem_cuda (the .cu files): the context's stream and cuBLAS handle, and the
 * error plumbing behind kcu_last_error(). C++ (nvcc) only; the backend sees kcu.h alone.
 *
 * Device binding: kcu_ctx_create makes the context's device current on the calling thread; the
 * ops assume the thread that enqueues on a context has that device current (one thread per GPU).
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_INTERNAL_H
#define TANDEM_KERNELS_CUDA_KCU_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kcu.h"

/* The context's stream (non-blocking) and cuBLAS handle (bound to that stream). */
cudaStream_t kcu_stream(kcu_ctx *c);
cublasHandle_t kcu_blas(kcu_ctx *c);
int kcu_ctx_device(const kcu_ctx *c);

/* Sets the thread's last-error text (printf format); kcu_last_error() returns it. */
void kcu_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* After a kernel launch: 0, or -EIO with "<what>: <CUDA error text>" as the last error. */
int kcu_check_launch(const char *what);

/* A failed CUDA runtime / cuBLAS call: records "<what>: <text>" and returns -EIO. cudaSuccess /
 * CUBLAS_STATUS_SUCCESS return 0. The CUDA variant also clears the non-sticky last error. */
int kcu_cuda_fail(cudaError_t rc, const char *what);
int kcu_blas_fail(cublasStatus_t st, const char *what);

#endif
