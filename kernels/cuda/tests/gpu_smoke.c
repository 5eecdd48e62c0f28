/* Runs the saxpy smoke kernel on the GPU and checks every element; skips (77) without a GPU. */
#include "kernels/cuda/smoke.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    if (cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    int rc = 1;
    if (!x || !y) {
        goto out;
    }
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    char err[256];
    if (cuda_saxpy(2.0f, x, y, N, err, sizeof(err)) != 0) {
        fprintf(stderr, "FAIL: %s\n", err);
        goto out;
    }
    for (int i = 0; i < N; i++) {
        if (fabsf(y[i] - (2.0f * (float)i + 1.0f)) > 1e-3f * (1.0f + (float)i)) {
            fprintf(stderr, "FAIL: y[%d] = %f, want %f\n", i, y[i], 2.0 * i + 1.0);
            goto out;
        }
    }
    printf("ok: saxpy over %d elements on the GPU\n", N);
    rc = 0;
out:
    free(x);
    free(y);
    return rc;
}
