/* How much of a q-row block's products can hide behind the weight stream on this machine.
 *
 * Two threads each read their half of a buffer the size of the model's float32 weights, as the
 * native forward's products read theirs (a contiguous share, software prefetches a 64 KB window
 * ahead as 4 streams), and do q vector FMAs per vector of weights read: the arithmetic of a q-row
 * block, the native forward's product kernel without its tiles, barriers, norms or attention.
 * q = 0 is the stream alone. Two forms of the q FMAs:
 *   reg:   acc[r] += w * w (nothing else loaded: the least a q-row block can cost)
 *   bcast: acc[r] += x[r][k] * w, x[r][k] broadcast from ten rows kept in L1 and multiplying
 *          one vector of weights on AVX2, two on AVX-512 (the product kernels' form)
 * Each configuration runs 9 times, interleaved with the others; the best time of each is printed,
 * with its ratio to the stream alone: t(q) / t(0) here is the floor of the products' t(q) / t(1)
 * in the forward, whatever the kernel does.
 *
 *   cc -O3 -fopenmp -mavx2 -mfma -DVBYTES=32 overlap.c -o overlap-avx2        (8-float vectors)
 *   cc -O3 -fopenmp -mavx512f -DVBYTES=64 overlap.c -o overlap-avx512          (16-float vectors)
 *   OMP_NUM_THREADS=2 ./overlap-avx2
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef VBYTES
#define VBYTES 32
#endif
#define VF (VBYTES / 4)
typedef float vf __attribute__((vector_size(VBYTES)));
typedef float vfu __attribute__((vector_size(VBYTES), aligned(4), may_alias));

#define WINDOW 65536
#define STREAMS 4
#define ROUND 1024 /* bytes of the share one round of prefetches goes with */
#define XK 512     /* the broadcast inputs: XK values of each of 10 rows */

static float xrows[10][XK];

static inline __attribute__((always_inline)) void prefetch_round(const char *base, int64_t len, int64_t off) {
    const int64_t ahead = (off / WINDOW + 1) * WINDOW + (off % WINDOW) / STREAMS;
    for (int s = 0; s < STREAMS; s++)
        for (int u = 0; u < ROUND / STREAMS; u += 64)
            if (ahead + s * (WINDOW / STREAMS) + u < len) __builtin_prefetch(base + ahead + s * (WINDOW / STREAMS) + u, 0, 3);
}

static inline vf splat(float x) {
#if VF == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x, x, x, x, x};
#endif
}

/* Vectors of weights one broadcast input multiplies, as the product kernels' tiles: two on
 * AVX-512 (a tile is 32 columns), one on AVX2 (8 columns). */
#if VF == 16
#define NVB 2
#else
#define NVB 1
#endif

/* One round (ROUND bytes of the share) four vectors at a time: q = 0 adds each vector to one of
 * four sums (no chain of additions slows the reads); q > 0 does q FMAs per vector. */
#define BODY(Q, BCAST)                                                                   \
    for (int64_t i = lo; i < hi; i += ROUND / 4) {                                       \
        prefetch_round(base, len, (i - lo) * 4);                                         \
        for (int64_t j = i; j < i + ROUND / 4; j += 4 * VF) {                            \
            const int64_t kk = ((j - lo) / VF) % XK;                                     \
            vf w[4];                                                                     \
            for (int u = 0; u < 4; u++) w[u] = *(const vfu *)(buf + j + u * VF);         \
            if (Q == 0)                                                                  \
                for (int u = 0; u < 4; u++) acc[u] += w[u];                              \
            for (int u = 0; u < 4; u += NVB)                                             \
                for (int r = 0; r < Q; r++) {                                            \
                    const vf b = BCAST ? splat(xrows[r][kk + u]) : w[u];                 \
                    for (int v = 0; v < NVB; v++) acc[r * NVB + v] += b * w[u + v];      \
                }                                                                        \
        }                                                                                \
    }

static double run(const float *buf, int64_t n, int q, int bcast, float *sink) {
    const double t0 = omp_get_wtime();
    float total = 0.0f;
    #pragma omp parallel reduction(+ : total)
    {
        const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t lo = n / nt * tid / (ROUND / 4) * (ROUND / 4), hi = n / nt * (tid + 1) / (ROUND / 4) * (ROUND / 4);
        const char *base = (const char *)(buf + lo);
        const int64_t len = (hi - lo) * 4;
        vf acc[24];
        for (int r = 0; r < 24; r++) acc[r] = (vf){0};
        switch (q * 2 + bcast) {
        case 0: BODY(0, 0) break; /* the stream alone */
        case 10: BODY(5, 0) break;
        case 11: BODY(5, 1) break;
        case 20: BODY(10, 0) break;
        case 21: BODY(10, 1) break;
        }
        vf s = (vf){0};
        for (int r = 0; r < 24; r++) s += acc[r];
        total += s[0];
    }
    *sink += total;
    return omp_get_wtime() - t0;
}

int main(void) {
    const int64_t n = (int64_t)538 << 18; /* 538 MB of floats */
    float *buf = aligned_alloc(64, n * 4);
    if (!buf) return 1;
    #pragma omp parallel for
    for (int64_t i = 0; i < n; i++) buf[i] = 1e-3f * (float)(i & 7);
    for (int r = 0; r < 10; r++)
        for (int k = 0; k < XK; k++) xrows[r][k] = 1e-3f * (float)((r + k) & 3);
    const int qs[] = {0, 5, 5, 10, 10}, bc[] = {0, 0, 1, 0, 1};
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    float sink = 0.0f;
    for (int round = 0; round < 9; round++)
        for (int c = 0; c < 5; c++) {
            const double t = run(buf, n, qs[c], bc[c], &sink);
            if (t < best[c]) best[c] = t;
        }
    printf("%d-float vectors, %d threads, %.0f MB read\n", VF, omp_get_max_threads(), n * 4 / 1e6);
    for (int c = 0; c < 5; c++)
        printf("q=%-2d %-5s %7.2f ms  %5.1f GB/s  t(q)/t(0) %.2f\n", qs[c], qs[c] == 0 ? "-" : bc[c] ? "bcast" : "reg",
               best[c] * 1e3, n * 4 / best[c] / 1e9, best[c] / best[0]);
    return sink == 12345.0f;
}
