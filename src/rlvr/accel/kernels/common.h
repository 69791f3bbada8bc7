/* Shared by rlvr's C kernels: a vectorisable exp and bf16 <-> float32 conversions as torch does them. */
#ifndef RLVR_NATIVE_COMMON_H
#define RLVR_NATIVE_COMMON_H

#include <stdint.h>
#include <string.h>

/* exp(x), ~1 ulp (Cephes' expf polynomial); exactly 0 below -87.3, clamped above 88.7. n = round(x / ln 2) by the
   1.5 * 2^23 trick (no floorf call: libm's is not inlined without -ffast-math, and callers' loops must vectorise) */
static inline float fexp(float x) {
    const float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, sizeof s);
    return x < -87.3f ? 0.0f : y * s;
}

static inline float from_bf16(uint16_t v) { /* exact */
    const uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t to_bf16(float f) { /* round to nearest even, as torch's float -> bfloat16; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

static inline float ld_f32(float v) { return v; }

#endif
