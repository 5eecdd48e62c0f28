/* See smoke.h: a saxpy kernel and a device probe, proving the CUDA plumbing. */
#include "kernels/cuda/smoke.h"

#include <cuda_runtime.h>
#include <stdio.h>

__global__ static void saxpy_kernel(float a, const float *x, float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" int cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return count;
}

static int fail(cudaError_t rc, const char *what, char *err, size_t errlen)
{
    if (err && errlen) {
        snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(rc));
    }
    return -1;
}

extern "C" int cuda_saxpy(float a, const float *x, float *y, size_t n, char *err, size_t errlen)
{
    float *dx = NULL, *dy = NULL;
    size_t bytes = n * sizeof(float);
    cudaError_t rc;
    int ret = 0;

    if ((rc = cudaMalloc(&dx, bytes)) != cudaSuccess) {
        return fail(rc, "cudaMalloc(x)", err, errlen);
    }
    if ((rc = cudaMalloc(&dy, bytes)) != cudaSuccess) {
        ret = fail(rc, "cudaMalloc(y)", err, errlen);
        goto err_free_x;
    }
    if ((rc = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (rc = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        ret = fail(rc, "cudaMemcpy to device", err, errlen);
        goto err_free_y;
    }
    saxpy_kernel<<<(unsigned)((n + 255) / 256), 256>>>(a, dx, dy, n);
    if ((rc = cudaGetLastError()) != cudaSuccess) {
        ret = fail(rc, "saxpy launch", err, errlen);
        goto err_free_y;
    }
    if ((rc = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        ret = fail(rc, "cudaMemcpy to host", err, errlen);
    }
err_free_y:
    cudaFree(dy);
err_free_x:
    cudaFree(dx);
    return ret;
}
