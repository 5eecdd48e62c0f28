/*
 * KCU_HD: marks the arithmetic the CUDA kernels share with the host. Under nvcc the functions
 * are __host__ __device__ (and inlined), so a kernel and a plain-C host test call the same code;
 * under a C compiler they are ordinary static inline functions.
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_HD_H
#define TANDEM_KERNELS_CUDA_KCU_HD_H

#ifdef __CUDACC__
#define KCU_HD __host__ __device__ __forceinline__
#else
#define KCU_HD static inline
#endif

#endif
