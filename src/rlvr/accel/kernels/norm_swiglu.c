/* RMSNorm and SwiGLU, forward and backward, for rlvr.accel.packed_fused (NormLinear, SwiGLULinear): the
   elementwise halves of the fused projections in one pass each, rows split over torch's OpenMP threads.

   RMSNorm (HF's): r = 1 / sqrt(mean(h^2) + eps), x = w * (h r), x rounded to the projection's dtype (bf16 under
   autocast). Its backward, from dx = dL/dx (float32):
       dw = sum_rows dx * h r,   dh = r (dx w) - (r^3 / n) sum_j (dx_j w_j h_j) h.
   SwiGLU: a = silu(g) u for gu = [g | u]; under bf16 each op rounds as torch's bf16 ops do (silu(g) rounded,
   then the product). Its backward from ds = dL/da:
       dg = silu'(g) (ds u),  du = ds silu(g),  silu'(g) = sig(g) (1 + g (1 - sig(g))).
   Float32 arithmetic throughout; bf16 values are read exactly and written rounded to nearest even. */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"



static inline float rnd(float f, int bf16) { return bf16 ? from_bf16(to_bf16(f)) : f; }


/* r[N] and x[N, n] (bf16 if x_bf16, else float32) of RMSNorm over float32 h[N, n] */
int rlvr_rms_fwd(const float *h, int N, int n, const float *w, float eps, float *r, void *x, int x_bf16) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *hi = h + (size_t)i * n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < n; j++) s += hi[j] * hi[j];
        const float ri = 1.0f / sqrtf(s / (float)n + eps);
        r[i] = ri;
        if (x_bf16) {
            uint16_t *xo = (uint16_t *)x + (size_t)i * n;
#pragma omp simd
            for (int j = 0; j < n; j++) xo[j] = to_bf16(w[j] * (hi[j] * ri));
        } else {
            float *xo = (float *)x + (size_t)i * n;
#pragma omp simd
            for (int j = 0; j < n; j++) xo[j] = w[j] * (hi[j] * ri);
        }
    }
    return 0;
}

/* dh[N, n] and dw[n] (if dw is not NULL) of RMSNorm from dx[N, n]; h, r as in the forward */
int rlvr_rms_bwd(const float *h, const float *r, const float *w, const float *dx, int N, int n, float *dh,
                 float *dw) {
    const int T = omp_get_max_threads();
    float *part = dw ? (float *)calloc((size_t)T * n, sizeof(float)) : NULL;
    if (dw && !part) return 1;
#pragma omp parallel num_threads(T)
    {
        const int t = omp_get_thread_num();
        float *acc = part ? part + (size_t)t * n : NULL;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const float *hi = h + (size_t)i * n, *gi = dx + (size_t)i * n;
            const float ri = r[i];
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int j = 0; j < n; j++) s += gi[j] * w[j] * hi[j];
            const float c = ri * ri * ri * s / (float)n;
            float *o = dh + (size_t)i * n;
#pragma omp simd
            for (int j = 0; j < n; j++) o[j] = ri * (gi[j] * w[j]) - c * hi[j];
            if (acc) {
#pragma omp simd
                for (int j = 0; j < n; j++) acc[j] += gi[j] * (hi[j] * ri);
            }
        }
    }
    if (dw) { /* the threads' partial sums in thread order: the same result for the same thread count */
        memcpy(dw, part, sizeof(float) * n);
        for (int t = 1; t < T; t++)
            for (int j = 0; j < n; j++) dw[j] += part[(size_t)t * n + j];
        free(part);
    }
    return 0;
}

/* a[N, F] = silu(g) u of gu[N, 2F] (both bf16, or both float32) */
int rlvr_swiglu_fwd(const void *gu, int N, int F, int bf16, void *a) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        if (bf16) {
            const uint16_t *gi = (const uint16_t *)gu + (size_t)i * 2 * F;
            uint16_t *o = (uint16_t *)a + (size_t)i * F;
#pragma omp simd
            for (int j = 0; j < F; j++) {
                const float g = from_bf16(gi[j]);
                o[j] = to_bf16(rnd(g / (1.0f + fexp(-g)), 1) * from_bf16(gi[F + j]));
            }
        } else {
            const float *gi = (const float *)gu + (size_t)i * 2 * F;
            float *o = (float *)a + (size_t)i * F;
#pragma omp simd
            for (int j = 0; j < F; j++) {
                const float g = gi[j];
                o[j] = g / (1.0f + fexp(-g)) * gi[F + j];
            }
        }
    }
    return 0;
}

/* dgu[N, 2F] = [silu'(g) (ds u) | ds silu(g)] from ds[N, F]; all three bf16, or all float32 */
int rlvr_swiglu_bwd(const void *gu, const void *ds, int N, int F, int bf16, void *dgu) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        if (bf16) {
            const uint16_t *gi = (const uint16_t *)gu + (size_t)i * 2 * F, *di = (const uint16_t *)ds + (size_t)i * F;
            uint16_t *o = (uint16_t *)dgu + (size_t)i * 2 * F;
#pragma omp simd
            for (int j = 0; j < F; j++) {
                const float g = from_bf16(gi[j]), u = from_bf16(gi[F + j]), d = from_bf16(di[j]);
                const float e1 = 1.0f + fexp(-g), sig = 1.0f / e1;
                const float gd = rnd(d * u, 1);                        /* MulBackward: ds * u, rounded */
                o[j] = to_bf16(gd * sig * (1.0f + g * (1.0f - sig)));    /* silu_backward */
                o[F + j] = to_bf16(d * rnd(g / e1, 1));                  /* ds * silu(g) (silu as the forward) */
            }
        } else {
            const float *gi = (const float *)gu + (size_t)i * 2 * F, *di = (const float *)ds + (size_t)i * F;
            float *o = (float *)dgu + (size_t)i * 2 * F;
#pragma omp simd
            for (int j = 0; j < F; j++) {
                const float g = gi[j], u = gi[F + j], d = di[j];
                const float e1 = 1.0f + fexp(-g), sig = 1.0f / e1;
                o[j] = (d * u) * sig * (1.0f + g * (1.0f - sig));
                o[F + j] = d * (g / e1);
            }
        }
    }
    return 0;
}
