/* One decode step of a Llama-family decoder in float32, for rlvr.rollout.fast_decode (NativeStep).

   The same function as FastDecoder.step's tensor ops (RMSNorm, fused QKV projection with RoPE on adjacent
   pairs, K/V written into the cache, one query's softmax attention over the cache with the additive padding
   mask, output projection added to the residual, SwiGLU MLP, final norm, last-position logits), in one call:
   the projections go to the BLAS sgemm that torch itself calls (MKL's, bundled in libtorch_cpu, passed in
   as a function pointer), everything else is plain loops. Per token it replaces ~25 tensor ops per layer,
   each a few microseconds of dispatch on tensors of 64 x 128 floats.

   The attention's rows run on torch's OpenMP threads (-fopenmp: libgomp.so.1 resolves to the copy torch has
   loaded, whose pool sits idle between the GEMMs). Layouts are row-major and contiguous; see rlvr/accel/decode_step.py for who owns what. */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *, const float *,
                         const float *, const int *, const float *, const int *, const float *, float *,
                         const int *);

typedef struct {
    int L, Hd, H, Hkv, D, F, V, cap, Bcap, nqkv;
    float scale, norm_eps;
    const float *embed;   /* [V, Hd] */
    const float *cis;     /* [cap, D/2, 2]: cos, sin */
    const float *norm;    /* [Hd] */
    const float *lm;      /* [V, Hd] */
    void *kv;             /* [L, 2, Bcap, Hkv, cap, D]: float32 (rlvr_decode_step), bf16 (rlvr_bf16_*) */
    const float *mask;    /* [Bcap, cap] additive, or NULL */
    const float *const *ln1, *const *ln2, *const *wqkv, *const *bqkv, *const *wo, *const *bo, *const *wgu,
        *const *wd;       /* per layer; bqkv[l] / bo[l] may be NULL */
    const float *eps1, *eps2;
    float *h, *x, *qkv, *att, *gu, *sc; /* scratch: [Bcap,Hd] x2, [Bcap,nqkv], [Bcap,H*D], [Bcap,2F], [Bcap,cap] */
    sgemm_fn sgemm;
    /* bf16 projections (the rlvr_bf16_* calls; torch runs the matmuls between them): rows padded to a bucket */
    uint16_t *xb, *qkvb, *attb, *yb, *gub; /* [R,Hd], [R,nqkv], [R,H*D], [R,Hd], [R,2F] */
} Dec;

/* C[M,N] = beta C + A[M,K] W[N,K]^T, row-major, leading dimensions lda, ldw, ldc. */
static void gemm_nt(const Dec *d, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
                    float beta, float *C, int ldc) {
    const float one = 1.0f;
    d->sgemm("T", "N", &N, &M, &K, &one, W, &ldw, A, &lda, &beta, C, &ldc);
}

static void rms(const float *in, float *out, const float *w, int rows, int n, float eps) {
    for (int b = 0; b < rows; b++) {
        const float *xi = in + (size_t)b * n;
        float *yo = out + (size_t)b * n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < n; j++) s += xi[j] * xi[j];
        float r = 1.0f / sqrtf(s / (float)n + eps);
#pragma omp simd
        for (int j = 0; j < n; j++) yo[j] = (xi[j] * r) * w[j];
    }
}

/* one query's attention over a cache prefix: o = softmax(scale * K q + mask) V (K, V: [n, D] rows, mask: n
   additive values or NULL; sc: n floats of scratch). Four keys' dot products at a time and the output summed
   in registers, 32 dims at a time: one accumulator per product would wait on each step's latency.
   The cache is float32 (attend_one) or bf16 (attend_one_bf16, read exactly as float32). */
#define NAME attend_one
#define CT float
#define LD ld_f32
#include "attend_one.inc"
#undef NAME
#undef CT
#undef LD
#define NAME attend_one_bf16
#define CT uint16_t
#define LD from_bf16
#include "attend_one.inc"
#undef NAME
#undef CT
#undef LD

int rlvr_decode_step(const Dec *d, int B, int t, const int64_t *ids, const int64_t *pos, float *logits) {
    const int Hd = d->Hd, H = d->H, Hkv = d->Hkv, D = d->D, F = d->F, nq = d->nqkv, HD = d->H * d->D;
    const int grp = H / Hkv, half = D / 2, n = t + 1;
    float *h = d->h, *x = d->x, *qkv = d->qkv, *att = d->att, *gu = d->gu, *sc = d->sc;
    for (int b = 0; b < B; b++) memcpy(h + (size_t)b * Hd, d->embed + (size_t)ids[b] * Hd, sizeof(float) * Hd);
    for (int l = 0; l < d->L; l++) {
        rms(h, x, d->ln1[l], B, Hd, d->eps1[l]);
        float beta = 0.0f;
        if (d->bqkv[l]) {
            for (int b = 0; b < B; b++) memcpy(qkv + (size_t)b * nq, d->bqkv[l], sizeof(float) * nq);
            beta = 1.0f;
        }
        gemm_nt(d, B, nq, Hd, x, Hd, d->wqkv[l], Hd, beta, qkv, nq);
        float *kc = (float *)d->kv + (size_t)l * 2 * d->Bcap * Hkv * d->cap * D;
        float *vc = kc + (size_t)d->Bcap * Hkv * d->cap * D;
        for (int b = 0; b < B; b++) {
            float *row = qkv + (size_t)b * nq;
            const float *cs = d->cis + (size_t)pos[b] * half * 2;
            for (int hh = 0; hh < H + Hkv; hh++) { /* q and k heads: rotate adjacent pairs */
                float *p = row + (size_t)hh * D;
                for (int j = 0; j < half; j++) {
                    float a = p[2 * j], c = p[2 * j + 1], co = cs[2 * j], si = cs[2 * j + 1];
                    p[2 * j] = a * co - c * si;
                    p[2 * j + 1] = a * si + c * co;
                }
            }
            for (int g = 0; g < Hkv; g++) { /* this token's K, V into the cache at position t */
                size_t at = (((size_t)b * Hkv + g) * d->cap + t) * D;
                memcpy(kc + at, row + HD + (size_t)g * D, sizeof(float) * D);
                memcpy(vc + at, row + HD + (size_t)(Hkv + g) * D, sizeof(float) * D);
            }
        }
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; b++) { /* rows in parallel: torch's OpenMP pool, idle between the GEMMs */
            const float *mrow = d->mask ? d->mask + (size_t)b * d->cap : NULL;
            for (int hq = 0; hq < H; hq++) {
                const int g = hq / grp;
                attend_one(qkv + (size_t)b * nq + (size_t)hq * D, kc + ((size_t)b * Hkv + g) * d->cap * D,
                           vc + ((size_t)b * Hkv + g) * d->cap * D, n, D, d->scale, mrow, sc + (size_t)b * d->cap,
                           att + (size_t)b * HD + (size_t)hq * D);
            }
        }
        if (d->bo[l])
            for (int b = 0; b < B; b++)
                for (int j = 0; j < Hd; j++) h[(size_t)b * Hd + j] += d->bo[l][j];
        gemm_nt(d, B, Hd, HD, att, HD, d->wo[l], HD, 1.0f, h, Hd);
        rms(h, x, d->ln2[l], B, Hd, d->eps2[l]);
        gemm_nt(d, B, 2 * F, Hd, x, Hd, d->wgu[l], Hd, 0.0f, gu, 2 * F);
        for (int b = 0; b < B; b++) {
            float *gr = gu + (size_t)b * 2 * F;
#pragma omp simd
            for (int j = 0; j < F; j++) {
                float g = gr[j];
                gr[j] = g / (1.0f + fexp(-g)) * gr[F + j];
            }
        }
        gemm_nt(d, B, Hd, F, gu, 2 * F, d->wd[l], F, 1.0f, h, Hd);
    }
    rms(h, x, d->norm, B, Hd, d->norm_eps);
    gemm_nt(d, B, d->V, Hd, x, Hd, d->lm, Hd, 0.0f, logits, d->V);
    return 0;
}

/* ---- bf16 projections: torch's bf16 matmuls (oneDNN) between these calls; the values of FastDecoder's
   compute_dtype=bf16 path (autocast's numerics): residual stream, norms, KV cache and attention in float32,
   the projections' inputs and outputs rounded to bf16, RoPE rotated in float32 and rounded once. */



/* xb[b] = bf16(rms(h[b]) * w) for row b */
static inline void rms_row_bf16(const Dec *d, int b, const float *w, float eps) {
    const int n = d->Hd;
    const float *xi = d->h + (size_t)b * n;
    uint16_t *yo = d->xb + (size_t)b * n;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) s += xi[j] * xi[j];
    const float r = 1.0f / sqrtf(s / (float)n + eps);
#pragma omp simd
    for (int j = 0; j < n; j++) yo[j] = to_bf16((xi[j] * r) * w[j]);
}

/* rows B..m-1 of xb zero (they only pad the matmuls' row count) */
static void zero_pad_rows(const Dec *d, int B, int m) {
    memset(d->xb + (size_t)B * d->Hd, 0, sizeof(uint16_t) * (size_t)(m - B) * d->Hd);
}

int rlvr_bf16_embed_rms(const Dec *d, int B, int m, const int64_t *ids) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        memcpy(d->h + (size_t)b * d->Hd, d->embed + (size_t)ids[b] * d->Hd, sizeof(float) * d->Hd);
        rms_row_bf16(d, b, d->ln1[0], d->eps1[0]);
    }
    zero_pad_rows(d, B, m);
    return 0;
}

/* h += yb (B rows); then xb = bf16(rms(h) * w) (w, eps: the next norm); rows in parallel (torch's OpenMP pool) */
int rlvr_bf16_add_rms(const Dec *d, int B, int m, const float *w, float eps) {
    const int n = d->Hd;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *hi = d->h + (size_t)b * n;
        const uint16_t *yi = d->yb + (size_t)b * n;
#pragma omp simd
        for (int j = 0; j < n; j++) hi[j] += from_bf16(yi[j]);
        rms_row_bf16(d, b, w, eps);
    }
    zero_pad_rows(d, B, m);
    return 0;
}

/* layer l, after qkvb = xb W_qkv: RoPE on q and k (float32, rounded to bf16), this token's K, V into the float32
   cache at t, one query's attention per head (float32) -> attb (bf16, rows B..m-1 zero) */
int rlvr_bf16_attend(const Dec *d, int l, int B, int m, int t, const int64_t *pos) {
    const int H = d->H, Hkv = d->Hkv, D = d->D, nq = d->nqkv, HD = d->H * d->D;
    const int grp = H / Hkv, half = D / 2, n = t + 1;
    uint16_t *kc = (uint16_t *)d->kv + (size_t)l * 2 * d->Bcap * Hkv * d->cap * D;
    uint16_t *vc = kc + (size_t)d->Bcap * Hkv * d->cap * D;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) { /* rows in parallel: torch's OpenMP pool, idle between the GEMMs */
        float *q = d->qkv + (size_t)b * nq, *o = d->att + (size_t)b * HD, *sc = d->sc + (size_t)b * d->cap;
        uint16_t *row = d->qkvb + (size_t)b * nq;
        const float *cs = d->cis + (size_t)pos[b] * half * 2;
        for (int hh = 0; hh < H + Hkv; hh++) {
            uint16_t *p = row + (size_t)hh * D;
            for (int j = 0; j < half; j++) {
                const float a = from_bf16(p[2 * j]), c = from_bf16(p[2 * j + 1]), co = cs[2 * j], si = cs[2 * j + 1];
                p[2 * j] = to_bf16(a * co - c * si);
                p[2 * j + 1] = to_bf16(a * si + c * co);
            }
        }
        for (int g = 0; g < Hkv; g++) {
            const size_t at = (((size_t)b * Hkv + g) * d->cap + t) * D;
            memcpy(kc + at, row + HD + (size_t)g * D, sizeof(uint16_t) * D);
            memcpy(vc + at, row + HD + (size_t)(Hkv + g) * D, sizeof(uint16_t) * D);
        }
        const float *mrow = d->mask ? d->mask + (size_t)b * d->cap : NULL;
        for (int hq = 0; hq < H; hq++) {
            const int g = hq / grp;
            const uint16_t *K = kc + ((size_t)b * Hkv + g) * d->cap * D;
            const uint16_t *V = vc + ((size_t)b * Hkv + g) * d->cap * D;
#pragma omp simd
            for (int j = 0; j < D; j++) q[j] = from_bf16(row[(size_t)hq * D + j]);
            attend_one_bf16(q, K, V, n, D, d->scale, mrow, sc, o);
            uint16_t *ob = d->attb + (size_t)b * HD + (size_t)hq * D;
#pragma omp simd
            for (int j = 0; j < D; j++) ob[j] = to_bf16(o[j]);
        }
    }
    memset(d->attb + (size_t)B * HD, 0, sizeof(uint16_t) * (size_t)(m - B) * HD);
    return 0;
}

/* gub[:, :F] = bf16(bf16(silu(g)) * u) for the m rows (padding rows are 0 and stay 0) */
int rlvr_bf16_swiglu(const Dec *d, int m) {
    const int F = d->F;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < m; b++) {
        uint16_t *gr = d->gub + (size_t)b * 2 * F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            const float g = from_bf16(gr[j]);
            const float a = from_bf16(to_bf16(g / (1.0f + fexp(-g))));
            gr[j] = to_bf16(a * from_bf16(gr[F + j]));
        }
    }
    return 0;
}
