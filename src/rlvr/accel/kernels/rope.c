/* Rotary position embedding (HF's rotate-half form) on a packed QKV matrix, forward and backward, for
   rlvr.accel.packed_rope: one pass that reads the projection's output and writes the attention's input heads.

   x[N, H, D] (float32 or bf16), the first Hr heads rotated (q and k), the others copied (v); per token i and
   dim j < D/2, with c = cos[i], s = sin[i] (float32 [N, D]) and h = D/2:
       forward:  y[j] = x[j] c[j] - x[j+h] s[j],       y[j+h] = x[j+h] c[j+h] + x[j] s[j+h]
       backward: dx[j] = dy[j] c[j] + dy[j+h] s[j+h],  dx[j+h] = dy[j+h] c[j+h] - dy[j] s[j]
   (the backward is the transpose of the forward's linear map). Float32 arithmetic; bf16 values are read exactly
   and written rounded to nearest even, once. Rows are split over torch's OpenMP threads. */

#include <omp.h>
#include <stdint.h>

#include "common.h"

#define LD_F32(p, k) (((const float *)(p))[k])
#define LD_BF16(p, k) from_bf16(((const uint16_t *)(p))[k])
#define ST_F32(p, k, v) (((float *)(p))[k] = (v))
#define ST_BF16(p, k, v) (((uint16_t *)(p))[k] = to_bf16(v))

/* one token's H heads (x and y: its rows), with the element types fixed so that the loops vectorise */
#define ROPE_ROW(LD, ST)                                                                        \
    for (int hd = 0; hd < H; hd++) {                                                            \
        const size_t base = (size_t)hd * D;                                                     \
        if (hd >= Hr) {                                                                         \
            _Pragma("omp simd") for (int j = 0; j < D; j++) ST(yr, base + j, LD(xr, base + j)); \
            continue;                                                                           \
        }                                                                                       \
        _Pragma("omp simd") for (int j = 0; j < h2; j++) {                                      \
            const float a = LD(xr, base + j), b = LD(xr, base + j + h2);                        \
            ST(yr, base + j, a * c[j] + sg * (b * s1[j]));                                      \
            ST(yr, base + j + h2, b * c[j + h2] - sg * (a * s2[j]));                            \
        }                                                                                       \
    }

/* y = rope(x) (backward = 0) or dx = rope^T(dy) (backward = 1); x_bf16 / y_bf16: the element types */
int rlvr_rope(const void *x, int x_bf16, int N, int H, int Hr, int D, const float *cos, const float *sin, void *y,
              int y_bf16, int backward) {
    if (D % 2 || Hr > H) return 1;
    const int h2 = D / 2;
    const float sg = backward ? 1.0f : -1.0f; /* the sign of the first half's sin term */
    const size_t row = (size_t)H * D, xs = x_bf16 ? 2 : 4, ys = y_bf16 ? 2 : 4;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *c = cos + (size_t)i * D, *s = sin + (size_t)i * D;
        /* forward: the first half's sin is s[j], the second's s[j+h]; the backward (transpose) swaps them */
        const float *s1 = backward ? s + h2 : s, *s2 = backward ? s : s + h2;
        const void *xr = (const char *)x + i * row * xs;
        void *yr = (char *)y + i * row * ys;
        if (x_bf16 && y_bf16) {
            ROPE_ROW(LD_BF16, ST_BF16)
        } else if (x_bf16) {
            ROPE_ROW(LD_BF16, ST_F32)
        } else if (y_bf16) {
            ROPE_ROW(LD_F32, ST_BF16)
        } else {
            ROPE_ROW(LD_F32, ST_F32)
        }
    }
    return 0;
}
