/*
 * Device-side reductions of the token-wise and attention kernels, in the fixed order that
 * kcu_math.h's kcu_warp_sum_emul / kcu_tree_sum replay on the host: xor butterfly over a warp
 * (offsets 16, 8, 4, 2, 1; lane l adds v[l] + v[l ^ off]), then warp 0 over the per-warp sums
 * padded with zeros. CUDA only.
 */
#ifndef TANDEM_KERNELS_CUDA_KCU_REDUCE_CUH
#define TANDEM_KERNELS_CUDA_KCU_REDUCE_CUH

#include "kernels/cuda/kcu_math.h"

/* Sum of v over the warp; every lane gets the same value. */
__device__ __forceinline__ float kcu_warp_sum(float v)
{
    for (int off = KCU_WARP / 2; off > 0; off >>= 1) {
        v = v + __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
 * result. scratch: KCU_WARP floats of shared memory; the call synchronises the block three times.
 */
__device__ __forceinline__ float kcu_block_sum(float v, float *scratch)
{
    const int lane = (int)threadIdx.x % KCU_WARP;
    const int warp = (int)threadIdx.x / KCU_WARP;
    const int n_warps = (int)blockDim.x / KCU_WARP;
    v = kcu_warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        float w = lane < n_warps ? scratch[lane] : 0.0f;
        w = kcu_warp_sum(w);
        if (lane == 0) {
            scratch[0] = w;
        }
    }
    __syncthreads();
    const float total = scratch[0];
    __syncthreads(); /* scratch may be reused right after */
    return total;
}

#endif
