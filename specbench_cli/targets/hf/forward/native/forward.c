/* The native forward: a Llama decoder's layers for a few query rows per sequence, in one call.
 *
 * Built once per machine at first use (targets/hf/forward/native/build.py) with the C compiler
 * and OpenMP; linked to the OpenMP runtime torch itself loaded, so both share one thread pool.
 *
 * Every row is computed on its own and in a fixed order, whatever else is in the block: a matrix
 * product sums over the input dimension k = 0, 1, ... for each output, an attention row sums
 * over the cache slots in slot order, and a hidden slot adds an exact zero. So a row's result
 * does not depend on how many rows the block has: verifying a draft of ten tokens gives, for
 * each accepted token, the bits one-token steps give (AR's), and a batch gives each sequence
 * the bits it would get alone.
 *
 * Weights are packed once (`sb_pack`) into tiles of TILE output columns: tile t holds, for
 * k = 0..K-1, the TILE weights W[t*TILE + j][k] contiguously, so a tile streams from memory in
 * one pass, and the rows of a block (up to MR at a time) share each load.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

/* With -DSB_PROFILE (SPECBENCH_NATIVE_PROFILE=1 at build), thread 0 adds each phase's wall time
 * of sb_forward to sb_profile[]: 0 norms + q/k/v, 1 rope + cache, 7 the keys transposed,
 * 2 attention, 3 o, 4 norm + gate/up, 5 SiLU, 6 down (each phase ends at its barrier, so it
 * includes waiting for the slower thread). */
#ifdef SB_PROFILE
double sb_profile[8];
#define PHASE(i)                                                     \
    if (omp_get_thread_num() == 0) {                                 \
        double now_ = omp_get_wtime();                               \
        sb_profile[i] += now_ - t_prev_;                             \
        t_prev_ = now_;                                              \
    }
#define PHASE_START double t_prev_ = omp_get_wtime();
#else
#define PHASE(i)
#define PHASE_START
#endif

#if defined(__AVX512F__)
#define VW 16   /* floats a vector register holds */
#define NV 2    /* vectors of output columns a packed tile holds */
#define MR 12   /* rows a tile's pass computes at once: 24 accumulators of 32 registers */
#define VS 4    /* vectors of a value row one pass over the values weights (a slice) */
#elif defined(__AVX2__)
#define VW 8
#define NV 1    /* one vector a tile, so that a block of up to 12 rows shares one pass: */
#define MR 12   /* 12 accumulators of 16 registers */
#define VS 2
#else
#define VW 4
#define NV 2
#define MR 4
#define VS 2
#endif
#define QV 6    /* queries weighting one pass over a slice of the values (QV*VS accumulators) */
#define TILE (NV * VW) /* output columns of a packed tile */
/* The weights stream from memory through software prefetches a window ahead: while a thread
 * computes over window w of its contiguous share of a matrix (PW bytes), it prefetches window w+1
 * as PS streams at once (each a PW/PS-byte segment, in order). One stream per thread leaves a
 * core's memory bandwidth to the latency of one sequential stream (about 11 GB/s a core here);
 * several concurrent ones keep more lines in flight, and the prefetches run ahead of the
 * products whether the block is one row (bandwidth-bound) or ten (partly compute-bound). */
#define PW 65536
#define PS 4
#define PRB 1024 /* bytes of a share a prefetch round goes with: PRB / PS / 64 lines of each stream */

/* The round of prefetches that goes with the PRB bytes at offset o of a thread's share
 * [pbase, pbase + plen). With `l1` (one row, a decode step, bound by bandwidth alone) the window
 * goes into L1; a block of rows computes longer on each line and keeps its own rows' inputs in L1
 * (ten rows of the down product's input are 60 KB), so there it goes into L2 only. */
static inline __attribute__((always_inline)) void prefetch_round(const char *pbase, int64_t plen, int64_t o,
                                                                 const int l1) {
    const int64_t ahead = (o / PW + 1) * PW + (o % PW) / PS;
    for (int s = 0; s < PS; s++)
        for (int u = 0; u < PRB / PS; u += 64)
            if (ahead + s * (PW / PS) + u < plen) {
                if (l1) __builtin_prefetch(pbase + ahead + s * (PW / PS) + u, 0, 3);
                else __builtin_prefetch(pbase + ahead + s * (PW / PS) + u, 0, 2);
            }
}
typedef float vf __attribute__((vector_size(VW * 4)));                /* a register */
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4), may_alias));  /* memory, any alignment */

static inline vf loadv(const float *p) { return *(const vfu *)p; }
static inline void storev(float *p, vf v) { *(vfu *)p = v; }
static inline vf splat(float x) {
#if VW == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#elif VW == 8
    return (vf){x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x};
#endif
}

/* Lane-wise `mask ? a : b` (mask lanes all ones or all zeros, as vector comparisons give). */
static inline vf selectv(vi mask, vf a, vf b) {
    vi ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    vi ri = (mask & ai) | (~mask & bi);
    vf r;
    memcpy(&r, &ri, sizeof r);
    return r;
}

/* exp(x) lane by lane (Cody-Waite reduction by ln 2, degree-6 polynomial, 2^n by exponent bits):
 * within 2 ulp of expf; exactly 0 below -87.3 (where float32 exp underflows), so a masked slot
 * adds nothing. */
static inline vf vexp(vf x) {
    const vf lo = splat(-87.3f), hi = splat(88.3f);
    vf xc = selectv(x < lo, lo, x);
    xc = selectv(xc > hi, hi, xc);
    const vf magic = splat(12582912.0f);  /* 1.5 * 2^23: adding and subtracting it rounds to nearest */
    vf n = (xc * splat(1.44269504088896341f) + magic) - magic;
    vf f = xc - n * splat(0.693359375f) + n * splat(2.12194440e-4f);
    vf p = splat(1.9875691500e-4f);
    p = p * f + splat(1.3981999507e-3f);
    p = p * f + splat(8.3334519073e-3f);
    p = p * f + splat(4.1665795894e-2f);
    p = p * f + splat(1.6666665459e-1f);
    p = p * f + splat(5.0000001201e-1f);
    p = p * f * f + f + splat(1.0f);
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    memcpy(&scale, &bits, sizeof scale);
    return selectv(x < lo, splat(0.0f), p * scale);
}

/* Floats a packed [N, K] weight takes. */
int64_t sb_packed_size(int64_t n, int64_t k) { return ((n + TILE - 1) / TILE) * TILE * k; }

/* Pack w ([n, k], row-major, as torch stores a Linear's weight) into `out`. */
void sb_pack(const float *w, int64_t n, int64_t k, float *out) {
    int64_t tiles = (n + TILE - 1) / TILE;
    #pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        float *dst = out + t * TILE * k;
        for (int64_t kk = 0; kk < k; kk++)
            for (int j = 0; j < TILE; j++) {
                int64_t row = t * TILE + j;
                dst[kk * TILE + j] = row < n ? w[row * k + kk] : 0.0f;
            }
    }
}

/* y[r, n0:n0+TILE) (op)= x[r, :] . W[n0 + j, :] for M rows of one tile, summing k in order.
 * mode 0: store, mode 1: add to y. Only `ncols` columns are written. */
#define PCH (PRB / (TILE * 4)) /* k steps a prefetch round covers */
#define KERNEL(M)                                                                              \
    static void tile_##M(const float *restrict x, int64_t ldx, const float *restrict wt,       \
                         int64_t k, float *restrict y, int64_t ldy, int64_t ncols, int mode,   \
                         const char *pbase, int64_t plen) {                                    \
        vf acc[M][NV];                                                                        \
        for (int i = 0; i < M; i++)                                                            \
            for (int v = 0; v < NV; v++) acc[i][v] = splat(0.0f);                              \
        for (int64_t k0 = 0; k0 < k; k0 += PCH) {                                              \
            prefetch_round(pbase, plen, (const char *)(wt + k0 * TILE) - pbase, M == 1);       \
            int64_t k1 = k0 + PCH < k ? k0 + PCH : k;                                          \
            _Pragma("GCC unroll 8")                                                            \
            for (int64_t kk = k0; kk < k1; kk++) {                                             \
                const float *wk = wt + kk * TILE;                                              \
                vf w[NV];                                                                     \
                for (int v = 0; v < NV; v++) w[v] = loadv(wk + VW * v);                       \
                for (int i = 0; i < M; i++) {                                                  \
                    vf xs = splat(x[i * ldx + kk]);                                           \
                    for (int v = 0; v < NV; v++) acc[i][v] += xs * w[v];                       \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        for (int i = 0; i < M; i++) {                                                          \
            float *yr = y + i * ldy;                                                           \
            if (ncols == TILE) {                                                               \
                for (int v = 0; v < NV; v++)                                                   \
                    storev(yr + VW * v, mode == 0 ? acc[i][v] : loadv(yr + VW * v) + acc[i][v]); \
                continue;                                                                      \
            }                                                                                  \
            float out[TILE];                                                                   \
            for (int v = 0; v < NV; v++) storev(out + VW * v, acc[i][v]);                     \
            if (mode == 0) for (int64_t j = 0; j < ncols; j++) yr[j] = out[j];                  \
            else for (int64_t j = 0; j < ncols; j++) yr[j] += out[j];                           \
        }                                                                                      \
    }
KERNEL(1)
KERNEL(2)
KERNEL(3)
KERNEL(4)
#if MR > 4
KERNEL(5)
KERNEL(6)
#endif
#if MR > 6
KERNEL(7)
KERNEL(8)
KERNEL(9)
KERNEL(10)
KERNEL(11)
KERNEL(12)
#endif

typedef void (*tile_fn)(const float *restrict, int64_t, const float *restrict, int64_t, float *restrict,
                        int64_t, int64_t, int, const char *, int64_t);
static const tile_fn tile_kernels[MR + 1] = {
    NULL, tile_1, tile_2, tile_3, tile_4,
#if MR > 4
    tile_5, tile_6,
#endif
#if MR > 6
    tile_7, tile_8, tile_9, tile_10, tile_11, tile_12,
#endif
};

static void tile_rows(const float *x, int64_t ldx, const float *wt, int64_t k, float *y, int64_t ldy,
                      int64_t ncols, int mode, int64_t rows, const char *pbase, int64_t plen) {
    for (int64_t r = 0; r < rows; r += MR) {
        int64_t m = rows - r < MR ? rows - r : MR;
        tile_kernels[m](x + r * ldx, ldx, wt, k, y + r * ldy, ldy, ncols, mode, pbase, plen);
    }
}

/* A product's tiles are shared out in contiguous shares, one a thread, so each thread's weights are
 * one stream it prefetches a window ahead; a thread that finishes its share then takes tiles from
 * the back of the others' shares, one at a time, so the threads end together even when one core
 * runs slower for a while (a VM's cores do, by 20-45 % over seconds). A share's claims are one
 * word, `front | back << 32` (tiles taken from each end), changed by compare-and-swap only, so no
 * tile is computed twice or skipped. The words live on the calling forward's stack (so forwards
 * running at once in different threads never share one) and alternate between two sets
 * from one product to the next: a thread clears its word of the set the next product uses before
 * the barrier that ends this one, when nobody reads that set. */
typedef struct {
    uint64_t *words; /* 2 sets x threads x 8 (a word per cache line) */
    unsigned seq;    /* this thread's products so far (private to the thread) */
} sb_claims;

static inline int64_t claim(uint64_t *w, int64_t size, int back) {
    uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
    for (;;) {
        const int64_t f = (int64_t)(old & 0xffffffffu), b = (int64_t)(old >> 32);
        if (f + b >= size) return -1;
        const uint64_t next = back ? old + (1ull << 32) : old + 1;
        if (__atomic_compare_exchange_n(w, &old, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return back ? size - 1 - b : f;
    }
}

/* Inside a parallel region: y[rows, n] (op)= x[rows, k] @ W^T (x's rows ldx apart), shared out
 * as above; a barrier ends it. */
static void matmul_in(const float *x, int64_t ldx, const float *packed, int64_t rows, int64_t k,
                      int64_t n, float *y, int64_t ldy, int mode, sb_claims *cl) {
    const int64_t tiles = (n + TILE - 1) / TILE, nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t t0 = tiles * tid / nt, t1 = tiles * (tid + 1) / nt;
    const char *pbase = (const char *)(packed + t0 * TILE * k);
    const int64_t plen = (t1 - t0) * TILE * k * (int64_t)sizeof(float);
    uint64_t *set = cl->words + (cl->seq++ & 1) * nt * 8;
    int64_t i;
    while ((i = claim(set + tid * 8, t1 - t0, 0)) >= 0) {
        const int64_t t = t0 + i, n0 = t * TILE, ncols = n - n0 < TILE ? n - n0 : TILE;
        tile_rows(x, ldx, packed + t * TILE * k, k, y + n0, ldy, ncols, mode, rows, pbase, plen);
    }
    for (int64_t o = 1; o < nt; o++) {  /* then from the back of the others' shares */
        const int64_t v = (tid + o) % nt, v0 = tiles * v / nt, v1 = tiles * (v + 1) / nt;
        while ((i = claim(set + v * 8, v1 - v0, 1)) >= 0) {
            const int64_t t = v0 + i, n0 = t * TILE, ncols = n - n0 < TILE ? n - n0 : TILE;
            tile_rows(x, ldx, packed + t * TILE * k, k, y + n0, ldy, ncols, mode, rows,
                      (const char *)(packed + t * TILE * k), 0);  /* taken late: no prefetch */
        }
    }
    __atomic_store_n(cl->words + ((cl->seq & 1) * nt + tid) * 8, 0, __ATOMIC_RELAXED);
    #pragma omp barrier
}

/* The claim words of a parallel region of up to `threads` threads: 2 sets x threads x 8. */
#define CLAIM_WORDS(threads) (2 * (threads) * 8)

/* y[rows, n] = x[rows, k] @ W^T through the packed weight (the output head). */
void sb_linear(const float *x, const float *packed, int64_t rows, int64_t k, int64_t n, float *y) {
    uint64_t words[CLAIM_WORDS(omp_get_max_threads())];
    memset(words, 0, sizeof words);
    #pragma omp parallel
    {
        sb_claims cl = {words, 0};
        matmul_in(x, k, packed, rows, k, n, y, n, 0, &cl);
    }
}

/* A bandwidth probe: reads n floats as the products read their weights (each thread its
 * contiguous share, prefetching the window ahead as PS concurrent streams) and returns their sum,
 * so the floor `specbench cost` prints is what this machine's best streaming read reaches. */
double sb_read(const float *buf, int64_t n) {
    double total = 0.0;
    #pragma omp parallel reduction(+ : total)
    {
        const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
        const int64_t lo = n / 256 * tid / nt * 256, hi = tid == nt - 1 ? n : n / 256 * (tid + 1) / nt * 256;
        const char *pbase = (const char *)(buf + lo);
        const int64_t plen = (hi - lo) * (int64_t)sizeof(float);
        vf a[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
        int64_t i = lo;
        for (; i + PRB / 4 <= hi; i += PRB / 4) {
            prefetch_round(pbase, plen, (i - lo) * (int64_t)sizeof(float), 1);
            for (int u = 0; u < PRB / 4; u += 4 * VW)
                for (int v = 0; v < 4; v++) a[v] += loadv(buf + i + u + v * VW);
        }
        float lanes[VW], part = 0.0f;
        storev(lanes, (a[0] + a[1]) + (a[2] + a[3]));
        for (int l = 0; l < VW; l++) part += lanes[l];
        for (; i < hi; i++) part += buf[i];
        total += part;
    }
    return total;
}

/* The sum of squares runs in 4 x VW lanes (element i into lane i mod 4*VW), the lanes then summed
 * in a fixed order: the same order for every row, so a row's norm does not depend on its block. */
static void rms_norm_row(const float *h, const float *w, int64_t n, float eps, float *out) {
    vf a[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
    int64_t i = 0;
    for (; i + 4 * VW <= n; i += 4 * VW)
        for (int u = 0; u < 4; u++) {
            vf x = loadv(h + i + u * VW);
            a[u] += x * x;
        }
    float lanes[VW], ss = 0.0f;
    storev(lanes, (a[0] + a[1]) + (a[2] + a[3]));
    for (int l = 0; l < VW; l++) ss += lanes[l];
    for (; i < n; i++) ss += h[i] * h[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w[i] * (h[i] * inv);
}

typedef struct {
    int64_t layers, hidden, heads, kv_heads, head_dim, inter;
    float eps, scale;
    const float **qkv, **o, **gate_up, **down, **norm1, **norm2;  /* per layer */
    const float *final_norm;
    float *scratch;
    int64_t scratch_floats;
} sb_model;

void *sb_model_new(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   int64_t inter, double eps, double scale, const int64_t *ptrs, const float *final_norm) {
    /* ptrs: per layer qkv, o, gate_up, down (packed), input norm, post-attention norm */
    sb_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->layers = layers; m->hidden = hidden; m->heads = heads; m->kv_heads = kv_heads;
    m->head_dim = head_dim; m->inter = inter; m->eps = (float)eps; m->scale = (float)scale;
    const float ***slots[6] = {&m->qkv, &m->o, &m->gate_up, &m->down, &m->norm1, &m->norm2};
    for (int s = 0; s < 6; s++) {
        *slots[s] = malloc(sizeof(float *) * layers);
        if (!*slots[s]) return NULL;
        for (int64_t l = 0; l < layers; l++) (*slots[s])[l] = (const float *)(intptr_t)ptrs[l * 6 + s];
    }
    m->final_norm = final_norm;
    return m;
}

void sb_model_free(void *handle) {
    sb_model *m = handle;
    if (!m) return;
    free(m->qkv); free(m->o); free(m->gate_up); free(m->down); free(m->norm1); free(m->norm2);
    free(m->scratch);
    free(m);
}

/* A pass of the scores takes QB queries against two blocks of VW keys at once: 2*QB accumulators,
 * enough independent chains to keep both FMA pipes busy (one block's QB chains wait on the
 * FMA's latency), with the two blocks' key vectors and a query's broadcast in registers too. */
#if VW == 16
#define QB 8
#else
#define QB 6
#endif

/* The lane shuffles of an in-register VW x VW transpose: stage s swaps bit s of the row and the
 * lane index (row r, lane j with bit s set <-> row r+s, lane j-s), for r without bit s. */
#if VW == 16
#define STAGES(X)                                                                                    \
    X(1, ((vi){0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}),                         \
      ((vi){1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}))                            \
    X(2, ((vi){0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}),                          \
      ((vi){2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}))                           \
    X(4, ((vi){0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}),                          \
      ((vi){4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}))                           \
    X(8, ((vi){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}),                            \
      ((vi){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}))
#elif VW == 8
#define STAGES(X)                                                                                    \
    X(1, ((vi){0, 8, 2, 10, 4, 12, 6, 14}), ((vi){1, 9, 3, 11, 5, 13, 7, 15}))                     \
    X(2, ((vi){0, 1, 8, 9, 4, 5, 12, 13}), ((vi){2, 3, 10, 11, 6, 7, 14, 15}))                     \
    X(4, ((vi){0, 1, 2, 3, 8, 9, 10, 11}), ((vi){4, 5, 6, 7, 12, 13, 14, 15}))
#else
#define STAGES(X)                                                                                    \
    X(1, ((vi){0, 4, 2, 6}), ((vi){1, 5, 3, 7}))                                                    \
    X(2, ((vi){0, 1, 4, 5}), ((vi){2, 3, 6, 7}))
#endif

/* kt[i * VW + l] = k[l][i] for the n (<= VW) keys from `k` (rows of d floats), zeros for l >= n:
 * a block of keys laid out dimension by dimension, so a query's scores against VW keys are VW
 * lanes summed over the dimensions in order. Moves bits only. */
static void transpose_keys(const float *k, int64_t n, int64_t d, float *kt) {
    if (d % VW == 0) {
        for (int64_t i0 = 0; i0 < d; i0 += VW) {
            vf a[VW];
            for (int l = 0; l < VW; l++) a[l] = l < n ? loadv(k + l * d + i0) : splat(0.0f);
#define STAGE(S, LO, HI)                                                                             \
            for (int r = 0; r < VW; r++)                                                             \
                if (!(r & S)) {                                                                      \
                    vf lo_ = __builtin_shuffle(a[r], a[r + S], LO);                                  \
                    vf hi_ = __builtin_shuffle(a[r], a[r + S], HI);                                  \
                    a[r] = lo_;                                                                      \
                    a[r + S] = hi_;                                                                  \
                }
            STAGES(STAGE)
#undef STAGE
            for (int i = 0; i < VW; i++) storev(kt + (i0 + i) * VW, a[i]);
        }
    } else {
        memset(kt, 0, sizeof(float) * VW * d);
        for (int64_t l = 0; l < n; l++)
            for (int64_t i = 0; i < d; i++) kt[i * VW + l] = k[l * d + i];
    }
}

/* out[qq * ldo + l] = scale * sum_i q_qq[i] kt[i][l] for N queries and the first n of VW keys. */
#define SCORES(N)                                                                                    \
    static void scores_##N(const float *const *qp, const float *kt, int64_t d, float scale,        \
                           float *out, int64_t ldo, int64_t n) {                                    \
        vf acc[N];                                                                                   \
        for (int i = 0; i < N; i++) acc[i] = splat(0.0f);                                            \
        for (int64_t i = 0; i < d; i++) {                                                            \
            vf k = loadv(kt + i * VW);                                                               \
            for (int qq = 0; qq < N; qq++) acc[qq] += splat(qp[qq][i]) * k;                          \
        }                                                                                            \
        if (n == VW)                                                                                 \
            for (int qq = 0; qq < N; qq++) storev(out + qq * ldo, acc[qq] * splat(scale));          \
        else                                                                                         \
            for (int qq = 0; qq < N; qq++) {                                                         \
                float tmp[VW];                                                                       \
                storev(tmp, acc[qq] * splat(scale));                                                 \
                memcpy(out + qq * ldo, tmp, sizeof(float) * n);                                      \
            }                                                                                        \
    }
/* The same for two whole blocks of keys (kt: the first, kt + VW*d: the next): each score is the
 * same chain of products over i in order as in scores_N. */
#define SCORES2(N)                                                                                   \
    static void scores2_##N(const float *const *qp, const float *kt, int64_t d, float scale,       \
                            float *out, int64_t ldo) {                                              \
        vf acc[N][2];                                                                                \
        const float *kt2 = kt + VW * d;                                                              \
        for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = splat(0.0f);                             \
        for (int64_t i = 0; i < d; i++) {                                                            \
            vf k0 = loadv(kt + i * VW), k1 = loadv(kt2 + i * VW);                                    \
            for (int qq = 0; qq < N; qq++) {                                                         \
                vf x = splat(qp[qq][i]);                                                             \
                acc[qq][0] += x * k0;                                                                \
                acc[qq][1] += x * k1;                                                                \
            }                                                                                        \
        }                                                                                            \
        for (int qq = 0; qq < N; qq++) {                                                             \
            storev(out + qq * ldo, acc[qq][0] * splat(scale));                                       \
            storev(out + qq * ldo + VW, acc[qq][1] * splat(scale));                                  \
        }                                                                                            \
    }
SCORES(1)
SCORES(2)
SCORES(3)
SCORES(4)
SCORES(5)
SCORES(6)
SCORES2(1)
SCORES2(2)
SCORES2(3)
SCORES2(4)
SCORES2(5)
SCORES2(6)
#if QB > 6
SCORES(7)
SCORES(8)
SCORES2(7)
SCORES2(8)
#endif

/* By the number of queries a pass has (1..QB). */
typedef void (*scores_fn)(const float *const *, const float *, int64_t, float, float *, int64_t, int64_t);
typedef void (*scores2_fn)(const float *const *, const float *, int64_t, float, float *, int64_t);
static const scores_fn scores_kernels[QB + 1] = {
    NULL, scores_1, scores_2, scores_3, scores_4, scores_5, scores_6,
#if QB > 6
    scores_7, scores_8,
#endif
};
static const scores2_fn scores2_kernels[QB + 1] = {
    NULL, scores2_1, scores2_2, scores2_3, scores2_4, scores2_5, scores2_6,
#if QB > 6
    scores2_7, scores2_8,
#endif
};

static inline float hmax(vf v) {
    float t[VW];
    storev(t, v);
    float m = t[0];
    for (int i = 1; i < VW; i++) m = t[i] > m ? t[i] : m;
    return m;
}

/* acc[i] = sum_j e_i[j] v_j[x0 : x0 + VS*VW] over the slots in order for NQ (<= QV) queries,
 * written divided by sum[i]; with `first_slice`, sum[i] = sum_j e_i[j] is summed (in slot order)
 * in the same pass, where its chain of additions hides behind the products. NQ is a constant at
 * each call, so a pass computes only the queries it has. */
static inline __attribute__((always_inline)) void values_slice(
        const float *const *e, const float *vb, int64_t d, int64_t L, int64_t x0, float *sum,
        const int first_slice, float *const *outp, const int NQ) {
    vf acc[QV][VS];
    float s[QV];
    for (int i = 0; i < NQ; i++) {
        s[i] = sum[i];
        for (int v = 0; v < VS; v++) acc[i][v] = splat(0.0f);
    }
    for (int64_t j = 0; j < L; j++) {
        const float *vj = vb + j * d + x0;
        vf vv[VS];
        for (int v = 0; v < VS; v++) vv[v] = loadv(vj + VW * v);
        for (int i = 0; i < NQ; i++) {
            float p = e[i][j];
            if (first_slice) s[i] += p;
            vf ps = splat(p);
            for (int v = 0; v < VS; v++) acc[i][v] += ps * vv[v];
        }
    }
    for (int i = 0; i < NQ; i++) {
        sum[i] = s[i];
        vf inv = splat(1.0f / s[i]);
        for (int v = 0; v < VS; v++) storev(outp[i] + x0 + VW * v, acc[i][v] * inv);
    }
}

/* All slices of the values for NQ queries. */
static inline __attribute__((always_inline)) void values_all(
        const float *const *e, const float *vb, int64_t d, int64_t L, float *const *outp, const int NQ) {
    float sum[QV] = {0};
    values_slice(e, vb, d, L, 0, sum, 1, outp, NQ);
    for (int64_t x0 = VS * VW; x0 < d; x0 += VS * VW) values_slice(e, vb, d, L, x0, sum, 0, outp, NQ);
}

/* Attention of `count` queries (from `first`) of sequence b's key/value head g: query qi is head
 * g*group + qi/T at row qi%T. kt: the keys transposed by blocks of VW (transpose_keys). Scores
 * are the dot products over the head dimension in order; the softmax's sum and the weighted sum
 * of values run over the slots in slot order, hidden ones adding exact zeros, so a row's result
 * is the same whatever else the block holds (slot order, not lanes: a tree row's visible slots
 * are not contiguous, and only slot order gives the bits of its path decoded as steps).
 * sc: count x L scores. */
static void attend(const sb_model *m, const float *qkv, int64_t qkv_n, int64_t T, int64_t b, int64_t g,
                   int64_t first, int64_t count, const float *kt, const float *vb, const float *mask,
                   int64_t mask_len, int64_t past, float *attn, float *sc) {
    const int64_t d = m->head_dim, nh = m->heads, group = nh / m->kv_heads, L = past + T;
    for (int64_t q0 = 0; q0 < count; q0 += QB) {
        int64_t nb = count - q0 < QB ? count - q0 : QB;
        const float *qp[QB];
        for (int64_t i = 0; i < nb; i++) {
            int64_t qi = first + q0 + i;
            qp[i] = qkv + (b * T + qi % T) * qkv_n + (g * group + qi / T) * d;
        }
        const scores2_fn two = scores2_kernels[nb];
        const scores_fn one = scores_kernels[nb];
        int64_t j0 = 0;
        for (; j0 + 2 * VW <= L; j0 += 2 * VW)  /* two whole blocks of keys a pass */
            two(qp, kt + j0 * d, d, m->scale, sc + q0 * L + j0, L);
        for (; j0 < L; j0 += VW)  /* the rest, a block (maybe partial) at a time */
            one(qp, kt + j0 * d, d, m->scale, sc + q0 * L + j0, L, L - j0 < VW ? L - j0 : VW);
    }
    /* softmax numerators: exp(score - max) over the visible slots, exactly 0 on hidden ones */
    for (int64_t qq = 0; qq < count; qq++) {
        int64_t t = (first + qq) % T;
        float *s = sc + qq * L;
        const float *mrow = mask ? mask + t * mask_len : NULL;
        int64_t visible = mask ? L : past + t + 1;
        vf mxv = splat(-INFINITY);
        int64_t j = 0;
        for (; j + VW <= visible; j += VW) {
            vf v = loadv(s + j);
            if (mrow) {
                v += loadv(mrow + j);
                storev(s + j, v);
            }
            mxv = selectv(v > mxv, v, mxv);
        }
        float mx = hmax(mxv);
        for (; j < visible; j++) {
            if (mrow) s[j] += mrow[j];
            if (s[j] > mx) mx = s[j];
        }
        for (j = visible; j < L; j++) s[j] = -INFINITY;
        for (j = 0; j + VW <= L; j += VW) storev(s + j, vexp(loadv(s + j) - splat(mx)));
        if (j < L) {
            float tail[VW];
            for (int64_t i = 0; i < VW; i++) tail[i] = j + i < L ? s[j + i] - mx : -INFINITY;
            storev(tail, vexp(loadv(tail)));
            for (int64_t i = j; i < L; i++) s[i] = tail[i - j];
        }
    }
    /* out = sum_j e_j v_j / sum_j e_j, the values summed over the slots in order (a hidden slot
     * adds an exact zero), QV queries per pass over a slice of VS vectors of the values */
    for (int64_t q0 = 0; q0 < count; q0 += QV) {
        int64_t nb = count - q0 < QV ? count - q0 : QV;
        const float *e[QV];
        for (int64_t i = 0; i < QV; i++) e[i] = sc + (q0 + (i < nb ? i : 0)) * L;
        float *outp[QV];
        for (int64_t i = 0; i < nb; i++) {
            int64_t qi = first + q0 + i;
            outp[i] = attn + (b * T + qi % T) * nh * d + (g * group + qi / T) * d;
        }
        if (d % (VS * VW) == 0) {
            switch (nb) {
            case 1: values_all(e, vb, d, L, outp, 1); break;
            case 2: values_all(e, vb, d, L, outp, 2); break;
            case 3: values_all(e, vb, d, L, outp, 3); break;
            case 4: values_all(e, vb, d, L, outp, 4); break;
            case 5: values_all(e, vb, d, L, outp, 5); break;
            default: values_all(e, vb, d, L, outp, QV); break;
            }
        } else {
            for (int64_t i = 0; i < nb; i++) {
                float acc[256];
                for (int64_t x = 0; x < d; x++) acc[x] = 0.0f;
                for (int64_t j = 0; j < L; j++) {
                    float p = e[i][j];
                    for (int64_t x = 0; x < d; x++) acc[x] += p * vb[j * d + x];
                }
                float sum = 0.0f;
                for (int64_t j = 0; j < L; j++) sum += e[i][j];
                for (int64_t x = 0; x < d; x++) outp[i][x] = acc[x] / sum;
            }
        }
    }
}

/* The decoder body for B sequences of T new rows each.
 *
 * h: [B*T, hidden] embeddings in, final-normed states out (written to `out`);
 * cos, sin: [B*T, head_dim] rope tables (sin signed: rope(x) = x*cos + roll(x, d/2)*sin);
 * mask: NULL (causal: row t sees slots 0..past+t) or additive [B, T, mask_len] whose last
 *   past+T columns are the slots 0..past+T-1;
 * kv: per layer the key and value buffers [rows, kv_heads, cap, head_dim] (2 pointers a layer);
 *   the new rows are written at slots past..past+T-1 of each sequence's row.
 * Returns 0, or -1 when scratch memory could not be had. */
int sb_forward(void *handle, int64_t B, int64_t T, float *h, const float *cos, const float *sin,
               const float *mask, int64_t mask_len, int64_t past, const int64_t *kv, int64_t cap,
               float *out) {
    sb_model *m = handle;
    const int64_t R = B * T, H = m->hidden, nh = m->heads, nkv = m->kv_heads, d = m->head_dim;
    const int64_t qkv_n = (nh + 2 * nkv) * d, I = m->inter, L = past + T, half = d / 2;
    const int64_t per_row = H + qkv_n + nh * d + 2 * I;  /* x, qkv, attn, gate_up */
    const int64_t nblk = (L + VW - 1) / VW;  /* blocks of VW keys */
    /* chunks of a head group's queries: enough items for every thread (the keys are transposed
     * once per layer, before, so a chunk costs only its own queries' work) */
    const int64_t threads = omp_get_max_threads(), group = nh / nkv, nq = group * T;
    int64_t chunks = (2 * threads + B * nkv - 1) / (B * nkv);
    if (chunks > nq) chunks = nq;
    if (chunks < 1) chunks = 1;
    const int64_t per_chunk = (nq + chunks - 1) / chunks;
    const int64_t kt_floats = B * nkv * nblk * VW * d;
    const int64_t need = per_row * R + kt_floats + threads * per_chunk * L;  /* + keys, scores */
    if (need > m->scratch_floats) {
        int64_t want = need * 2;  /* room for the cache to grow before the next realloc */
        float *s = realloc(m->scratch, sizeof(float) * want);
        if (!s) return -1;
        m->scratch = s; m->scratch_floats = want;
    }
    float *x = m->scratch, *qkv = x + R * H, *attn = qkv + R * qkv_n, *gu = attn + R * nh * d;
    float *kt = gu + R * 2 * I, *scores = kt + kt_floats;
    const int64_t mask_off = mask_len - L;
    uint64_t words[CLAIM_WORDS(threads)];
    memset(words, 0, sizeof words);
    #pragma omp parallel
    {
        PHASE_START
        sb_claims cl = {words, 0};
        for (int64_t l = 0; l < m->layers; l++) {
            float *kc = (float *)(intptr_t)kv[2 * l], *vc = (float *)(intptr_t)kv[2 * l + 1];
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) rms_norm_row(h + r * H, m->norm1[l], H, m->eps, x + r * H);
            matmul_in(x, H, m->qkv[l], R, H, qkv_n, qkv, qkv_n, 0, &cl);
            PHASE(0)
            /* rope on queries and keys; keys and values into the cache */
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) {
                int64_t b = r / T, t = r % T;
                float *row = qkv + r * qkv_n;
                const float *c = cos + r * d, *s = sin + r * d;
                for (int64_t hd = 0; hd < nh + nkv; hd++) {
                    float *v = row + hd * d, tmp[256];
                    for (int64_t i = 0; i < half; i++) tmp[i] = v[i] * c[i] + v[i + half] * s[i];
                    for (int64_t i = half; i < d; i++) tmp[i] = v[i] * c[i] + v[i - half] * s[i];
                    memcpy(v, tmp, sizeof(float) * d);
                }
                for (int64_t g = 0; g < nkv; g++) {
                    int64_t slot = ((b * nkv + g) * cap + past + t) * d;
                    memcpy(kc + slot, row + (nh + g) * d, sizeof(float) * d);
                    memcpy(vc + slot, row + (nh + nkv + g) * d, sizeof(float) * d);
                }
            }
            PHASE(1)
            /* the keys of every sequence and key/value head, transposed by blocks of VW */
            #pragma omp for schedule(static)
            for (int64_t it = 0; it < B * nkv * nblk; it++) {
                int64_t bg = it / nblk, j0 = (it % nblk) * VW;
                transpose_keys(kc + bg * cap * d + j0 * d, L - j0 < VW ? L - j0 : VW, d,
                               kt + bg * nblk * VW * d + j0 * d);
            }
            PHASE(7)
            /* attention: per sequence and key/value head, its queries in chunks */
            #pragma omp for schedule(static)
            for (int64_t item = 0; item < B * nkv * chunks; item++) {
                int64_t b = item / (nkv * chunks), g = (item / chunks) % nkv, c = item % chunks;
                int64_t first = c * per_chunk, count = nq - first < per_chunk ? nq - first : per_chunk;
                if (count > 0)
                    attend(m, qkv, qkv_n, T, b, g, first, count, kt + (b * nkv + g) * nblk * VW * d,
                           vc + (b * nkv + g) * cap * d, mask ? mask + b * T * mask_len + mask_off : NULL,
                           mask_len, past, attn,
                           scores + (int64_t)omp_get_thread_num() * per_chunk * L);
            }
            PHASE(2)
            matmul_in(attn, nh * d, m->o[l], R, nh * d, H, h, H, 1, &cl);
            PHASE(3)
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) rms_norm_row(h + r * H, m->norm2[l], H, m->eps, x + r * H);
            matmul_in(x, H, m->gate_up[l], R, H, 2 * I, gu, 2 * I, 0, &cl);
            PHASE(4)
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) {
                float *row = gu + r * 2 * I;
                int64_t i = 0;
                for (; i + VW <= I; i += VW) {
                    vf gt = loadv(row + i);
                    storev(row + i, gt / (splat(1.0f) + vexp(-gt)) * loadv(row + I + i));
                }
                for (; i < I; i++) row[i] = row[i] / (1.0f + expf(-row[i])) * row[I + i];
            }
            PHASE(5)
            /* down: x [R, I] is the first half of each gate_up row */
            matmul_in(gu, 2 * I, m->down[l], R, I, H, h, H, 1, &cl);
            PHASE(6)
        }
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++) rms_norm_row(h + r * H, m->final_norm, H, m->eps, out + r * H);
    }
    return 0;
}
