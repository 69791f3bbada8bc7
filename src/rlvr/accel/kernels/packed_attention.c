/* Causal attention of packed heads on the padded attention view, forward and backward, in float32 arithmetic,
   for rlvr.accel.packed_attention (PackedCausalAttention's native path).

   heads [N, 3H, D] (float32 or bf16; q heads 0..H-1, k heads H..2H-1, v heads 2H..3H-1 of each packed token),
   view_tok [B*L] (the packed token at each view position), need [B*L] (1 where a packed token's output is read:
   the only queries computed; a row's positions after its last needed one are neither queries nor keys of one). For each row b and head h:
       S = scale * Q K^T + causal mask,  P = softmax(S),  O = P V          (Q, K, V: the row's tokens' heads)
   forward writes O at the needed view positions (out [B*L, H*D], other rows untouched); backward takes
   dO [B*L, H*D] (zero where not needed) and adds dQ, dK, dV into dheads [N, 3H, D] (float32) at each view
   position's packed token (a token shared by several rows gets the sum):
       dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = scale dS K,  dK = scale dS^T Q.
   P is recomputed in backward by the same code as in forward (the same values). Queries that are not needed
   have dO = 0 and contribute nothing, so they are skipped in both passes.

   The products run over a row's positions j (vectorised over j with K and V transposed) or over the head dim
   (vectorised over d); the upper triangle is never computed. Threads split the heads (each writes its own
   heads' columns of out and dheads: no two threads touch the same memory). */

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    const void *heads;
    int bf16, N, H, D, B, L, h0, h1, backward;
    const int64_t *view_tok;
    const uint8_t *need;
    float scale;
    float *out;        /* forward: [B*L, H*D] */
    const float *dout; /* backward: [B*L, H*D] */
    float *dheads;     /* backward: [N, 3H, D] */
    int status;
} Job;



/* the row's head `which` (0 q, 1 k, 2 v) of head h as float32 [len, D] */
static void gather(const Job *j, int b, int h, int which, int len, float *dst) {
    const int D = j->D, H3 = 3 * j->H;
    for (int i = 0; i < len; i++) {
        size_t at = ((size_t)j->view_tok[(size_t)b * j->L + i] * H3 + (size_t)which * j->H + h) * D;
        float *o = dst + (size_t)i * D;
        if (j->bf16) {
            const uint16_t *src = (const uint16_t *)j->heads + at;
#pragma omp simd
            for (int d = 0; d < D; d++) o[d] = from_bf16(src[d]);
        } else {
            memcpy(o, (const float *)j->heads + at, sizeof(float) * D);
        }
    }
}

static void transpose(const float *src, int len, int D, int ld, float *dst) { /* [len, D] -> [D, ld] */
    for (int i = 0; i < len; i++)
        for (int d = 0; d < D; d++) dst[(size_t)d * ld + i] = src[(size_t)i * D + d];
}

/* y[t] = sum_d x[d] MT[d * ld + t] for t < n (MT: a [len, D] matrix transposed; each of its rows readable up to
   t = n + 31). 32 outputs at a time, even and odd d in separate registers: four independent FMA chains (one
   accumulator, or one in memory, would wait on every previous step) */
static void dot_cols(const float *x, const float *MT, int D, int ld, int n, float *y) {
    for (int t0 = 0; t0 < n; t0 += 32) {
        float a0[32] = {0}, a1[32] = {0};
        int d = 0;
        for (; d + 1 < D; d += 2) {
            const float x0 = x[d], x1 = x[d + 1], *m0 = MT + (size_t)d * ld + t0, *m1 = m0 + ld;
#pragma omp simd
            for (int u = 0; u < 32; u++) {
                a0[u] += x0 * m0[u];
                a1[u] += x1 * m1[u];
            }
        }
        if (d < D) {
            const float x0 = x[d], *m0 = MT + (size_t)d * ld + t0;
#pragma omp simd
            for (int u = 0; u < 32; u++) a0[u] += x0 * m0[u];
        }
        const int k = n - t0 < 32 ? n - t0 : 32;
        for (int u = 0; u < k; u++) y[t0 + u] = a0[u] + a1[u];
    }
}

/* y[d] = alpha * sum_{t0 <= t < n} w[t * ws] M[t * D + d] (M: [len, D], readable up to 31 floats past its end):
   32 outputs at a time, even and odd t in separate registers */
static void mix_rows(const float *w, int ws, const float *M, int t0, int n, int D, float alpha, float *y) {
    for (int d0 = 0; d0 < D; d0 += 32) {
        float a0[32] = {0}, a1[32] = {0};
        int t = t0;
        for (; t + 1 < n; t += 2) {
            const float w0 = w[(size_t)t * ws], w1 = w[(size_t)(t + 1) * ws], *m0 = M + (size_t)t * D + d0, *m1 = m0 + D;
#pragma omp simd
            for (int u = 0; u < 32; u++) {
                a0[u] += w0 * m0[u];
                a1[u] += w1 * m1[u];
            }
        }
        if (t < n) {
            const float w0 = w[(size_t)t * ws], *m0 = M + (size_t)t * D + d0;
#pragma omp simd
            for (int u = 0; u < 32; u++) a0[u] += w0 * m0[u];
        }
        const int k = D - d0 < 32 ? D - d0 : 32;
        for (int u = 0; u < k; u++) y[d0 + u] = alpha * (a0[u] + a1[u]);
    }
}

/* P[0..i] of query i: softmax(scale * q K^T) over the causal prefix (KT: K transposed, leading dim ld) */
static void probs(const float *q, const float *KT, int i, int D, int ld, float scale, float *p) {
    const int n = i + 1;
    dot_cols(q, KT, D, ld, n, p);
    float m = -INFINITY;
    for (int t = 0; t < n; t++) {
        p[t] *= scale;
        m = p[t] > m ? p[t] : m;
    }
    float z = 0.0f;
#pragma omp simd reduction(+ : z)
    for (int t = 0; t < n; t++) {
        float e = fexp(p[t] - m);
        p[t] = e;
        z += e;
    }
    const float inv = 1.0f / z;
#pragma omp simd
    for (int t = 0; t < n; t++) p[t] *= inv;
}

static void *run(void *arg) {
    Job *j = (Job *)arg;
    const int L = j->L, D = j->D, H = j->H, HD = j->H * j->D, H3 = 3 * j->H;
    const int ld = L + 32; /* transposed rows: dot_cols reads up to 31 past the last position */
    const size_t blk = (size_t)L * D + 32; /* a [L, D] block and the 31 floats mix_rows may read past it */
    const size_t sq = j->backward ? (size_t)L * ld : 0;
    float *buf = (float *)calloc((size_t)7 * blk + (size_t)2 * D * ld + (size_t)ld + 2 * sq, sizeof(float));
    if (!buf) {
        j->status = 1;
        return NULL;
    }
    float *Q = buf, *K = Q + blk, *V = K + blk, *dQ = V + blk, *dK = dQ + blk, *dV = dK + blk, *GO = dV + blk;
    float *KT = GO + blk, *VT = KT + (size_t)D * ld, *p = VT + (size_t)D * ld, *Pm = p + ld, *Sm = Pm + sq;
    for (int h = j->h0; h < j->h1; h++) {
        for (int b = 0; b < j->B; b++) {
            const size_t v0 = (size_t)b * L;
            int len = L;
            while (len > 0 && !j->need[v0 + len - 1]) len--;
            if (!len) continue;
            gather(j, b, h, 0, len, Q);
            gather(j, b, h, 1, len, K);
            gather(j, b, h, 2, len, V);
            transpose(K, len, D, ld, KT);
            if (!j->backward) {
                for (int i = 0; i < len; i++) {
                    if (!j->need[v0 + i]) continue;
                    probs(Q + (size_t)i * D, KT, i, D, ld, j->scale, p);
                    mix_rows(p, 1, V, 0, i + 1, D, 1.0f, j->out + (v0 + i) * HD + (size_t)h * D);
                }
                continue;
            }
            transpose(V, len, D, ld, VT);
            /* per needed query i: P row i, dS row i (unscaled), dQ row i; rows of other queries stay 0 */
            memset(Pm, 0, sizeof(float) * (size_t)len * ld);
            memset(Sm, 0, sizeof(float) * (size_t)len * ld);
            memset(GO, 0, sizeof(float) * (size_t)len * D);
            memset(dQ, 0, sizeof(float) * (size_t)len * D);
            for (int i = 0; i < len; i++) {
                if (!j->need[v0 + i]) continue;
                const float *go = j->dout + (v0 + i) * HD + (size_t)h * D;
                float *p = Pm + (size_t)i * ld, *ds = Sm + (size_t)i * ld;
                memcpy(GO + (size_t)i * D, go, sizeof(float) * D);
                probs(Q + (size_t)i * D, KT, i, D, ld, j->scale, p);
                const int n = i + 1;
                dot_cols(go, VT, D, ld, n, ds);
                float c = 0.0f;
#pragma omp simd reduction(+ : c)
                for (int t = 0; t < n; t++) c += p[t] * ds[t];
#pragma omp simd
                for (int t = 0; t < n; t++) ds[t] = p[t] * (ds[t] - c);
                mix_rows(ds, 1, K, 0, n, D, j->scale, dQ + (size_t)i * D);
            }
            /* per key t: dV[t] = sum_{i >= t} P[i, t] dO[i],  dK[t] = scale sum_{i >= t} dS[i, t] Q[i] */
            for (int t = 0; t < len; t++) {
                mix_rows(Pm + t, ld, GO, t, len, D, 1.0f, dV + (size_t)t * D);
                mix_rows(Sm + t, ld, Q, t, len, D, j->scale, dK + (size_t)t * D);
            }
            for (int i = 0; i < len; i++) { /* into the packed tokens' rows (shared tokens: summed) */
                float *dst = j->dheads + (size_t)j->view_tok[v0 + i] * H3 * D;
                const float *src[3] = {dQ + (size_t)i * D, dK + (size_t)i * D, dV + (size_t)i * D};
                for (int w = 0; w < 3; w++) {
                    float *o = dst + ((size_t)w * H + h) * D;
#pragma omp simd
                    for (int d = 0; d < D; d++) o[d] += src[w][d];
                }
            }
        }
    }
    free(buf);
    return NULL;
}

/* torch's own OpenMP runtime runs the threads (this library links libgomp.so.1 by name, which resolves to the
   copy torch has loaded): its pool is already awake after torch's last parallel op, where a thread of our own
   would compete with its spinning workers for the two cores */
static int launch(Job *base, int threads) {
    if (threads < 1) threads = 1;
    if (threads > base->H) threads = base->H;
    int status = 0;
#pragma omp parallel num_threads(threads) reduction(| : status)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        Job job = *base;
        job.h0 = base->H * t / n;
        job.h1 = base->H * (t + 1) / n;
        job.status = 0;
        run(&job);
        status |= job.status;
    }
    return status;
}

int rlvr_pattn_fwd(const void *heads, int bf16, int N, int H, int D, int B, int L, const int64_t *view_tok,
                   const uint8_t *need, float scale, float *out, int threads) {
    Job j = {heads, bf16, N, H, D, B, L, 0, H, 0, view_tok, need, scale, out, NULL, NULL, 0};
    return launch(&j, threads);
}

int rlvr_pattn_bwd(const void *heads, int bf16, int N, int H, int D, int B, int L, const int64_t *view_tok,
                   const uint8_t *need, float scale, const float *dout, float *dheads, int threads) {
    Job j = {heads, bf16, N, H, D, B, L, 0, H, 1, view_tok, need, scale, NULL, dout, dheads, 0};
    return launch(&j, threads);
}
