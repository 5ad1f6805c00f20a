/* Fused CPU kernels for attention on a CSR pattern (sparsegnn.sparse.native).
 *
 * Each kernel reads every operand row once and keeps its partial results in registers:
 * torch composes the same products from gathers, products and reductions that each
 * write an nnz-sized temporary (docs/kernels.md, "Attention kernels"). Rows are
 * independent, so OpenMP splits them across threads with no atomics.
 *
 * The file is compiled twice through itself, for float (suffix f32) and double (f64).
 * Shapes: crow[rows + 1] and col[nnz] are int64; node tables are row-major [n, heads, f]
 * or [n, heads]; per-entry values [nnz, heads]. perm, where taken, maps an entry of this
 * pattern to the entry holding its value (a transpose's order), or is NULL.
 */
#ifndef REAL
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#define THREAD_NUM() omp_get_thread_num()
#else /* built without OpenMP (a compiler without it): one thread, pragmas ignored */
#define THREAD_NUM() 0
#endif
#include <stdint.h>
#include <string.h>

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
/* Entries ahead whose column row is prefetched: the gathers are latency-bound (2^18
 * vertices, 8 heads of 8: 4 entries ahead 94 ms, 16 ahead 72 ms, 32 ahead 58 ms). */
#define AHEAD 32

typedef int32_t ivec8 __attribute__((vector_size(32)));
#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (ivec8){__VA_ARGS__})
#endif
typedef float vec_f32 __attribute__((vector_size(32)));
typedef float uvec_f32 __attribute__((vector_size(32), aligned(4)));

/* The eight lane sums of p[0..7], as one vector: a tree of pairwise shuffles and adds
 * (14 shuffles for 8 dots, where summing each vector's lanes takes 7 dependent adds). */
static inline vec_f32 sum8_f32(const vec_f32 p[8]) {
    vec_f32 a[4], b[2];
    for (int k = 0; k < 4; k++)
        a[k] = SHUF(p[2 * k], p[2 * k + 1], 0, 8, 2, 10, 4, 12, 6, 14)
             + SHUF(p[2 * k], p[2 * k + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    for (int k = 0; k < 2; k++)
        b[k] = SHUF(a[2 * k], a[2 * k + 1], 0, 1, 8, 9, 4, 5, 12, 13)
             + SHUF(a[2 * k], a[2 * k + 1], 2, 3, 10, 11, 6, 7, 14, 15);
    return SHUF(b[0], b[1], 0, 1, 2, 3, 8, 9, 10, 11) + SHUF(b[0], b[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

/* expf without a call, so that a loop of it vectorises: 2^n * e^r with n = round(x /
 * ln 2), |r| <= ln 2 / 2, e^r by a degree-6 polynomial (Cephes expf's coefficients;
 * within 2 ulp of expf). Below -87.3 it gives 0, above 88.7 infinity, NaN stays NaN. */
static inline float exp_poly_f32(float x) {
    const float t = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
    const float n = __builtin_rintf(t * 1.44269504088896341f);
    const float r = t - n * 0.693359375f + n * 2.12194440e-4f;
    float q = 1.9875691500e-4f * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    q = q * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float y = q * scale;
    return x != x ? x : (x > 88.7228f ? INFINITY : (x < -87.3365f ? 0.0f : y));
}

/* LayerNorm over each row of x [rows, width] in place (mean and variance of the row,
 * then gamma * normalised + beta), then max(., 0) if relu: one pass over a row held in
 * L1, where torch's layer_norm and relu_ each stream the whole tensor through memory.
 * Inference only: no statistics are kept for a backward. NaN stays NaN. bfloat16 rows
 * are widened to float (the high half of its bits), normalised in float and rounded back
 * to nearest even, as torch rounds; gamma and beta always come as float. */
static inline float load_f32(const float *p) { return *p; }
static inline void store_f32(float *p, float v) { *p = v; }
static inline float load_bf16(const uint16_t *p) {
    union { uint32_t u; float f; } c = {.u = (uint32_t)*p << 16};
    return c.f;
}
static inline void store_bf16(uint16_t *p, float v) {
    union { float f; uint32_t u; } c = {.f = v};
    const uint32_t b = c.u;
    *p = (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? (b >> 16) | 0x40u
                                                     : (b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* A 64-wide row in four 16-float AVX-512 registers: loaded (bfloat16 widened by a shift),
 * summed, centred, squared and summed, scaled and stored (bfloat16 by the CPU's own
 * round-to-nearest-even conversion, which also keeps NaN) without leaving them. On
 * 8192 x 64 bfloat16 rows: 0.35 ms with the portable loops below, ~3x less with these.
 * ln64x8_* does eight such rows and returns 1; without AVX-512 it returns 0 and the
 * portable loops run. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline __m512 ln64_load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline void ln64_store_f32(float *p, __m512 y) { _mm512_storeu_ps(p, y); }
#define LN64_ROW(NAME, T, LD, ST)                                                           \
    static inline void NAME(T *v, const float *g, const float *b, float eps, int relu) {    \
        __m512 x0 = LD(v), x1 = LD(v + 16), x2 = LD(v + 32), x3 = LD(v + 48);               \
        const __m512 m = _mm512_set1_ps(                                                     \
            _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3))) \
            * (1.0f / 64));                                                                  \
        x0 = _mm512_sub_ps(x0, m); x1 = _mm512_sub_ps(x1, m);                                \
        x2 = _mm512_sub_ps(x2, m); x3 = _mm512_sub_ps(x3, m);                                \
        __m512 q = _mm512_mul_ps(x0, x0);                                                    \
        q = _mm512_fmadd_ps(x1, x1, q); q = _mm512_fmadd_ps(x2, x2, q);                      \
        q = _mm512_fmadd_ps(x3, x3, q);                                                      \
        const __m512 k = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(q) * (1.0f / 64) + eps)); \
        const __m512 zero = _mm512_setzero_ps();                                             \
        __m512 y0 = _mm512_fmadd_ps(_mm512_mul_ps(x0, k), _mm512_loadu_ps(g), _mm512_loadu_ps(b)); \
        __m512 y1 = _mm512_fmadd_ps(_mm512_mul_ps(x1, k), _mm512_loadu_ps(g + 16),           \
                                    _mm512_loadu_ps(b + 16));                                \
        __m512 y2 = _mm512_fmadd_ps(_mm512_mul_ps(x2, k), _mm512_loadu_ps(g + 32),           \
                                    _mm512_loadu_ps(b + 32));                                \
        __m512 y3 = _mm512_fmadd_ps(_mm512_mul_ps(x3, k), _mm512_loadu_ps(g + 48),           \
                                    _mm512_loadu_ps(b + 48));                                \
        if (relu) { /* max(0, y) returns y where y is NaN */                                 \
            y0 = _mm512_max_ps(zero, y0); y1 = _mm512_max_ps(zero, y1);                      \
            y2 = _mm512_max_ps(zero, y2); y3 = _mm512_max_ps(zero, y3);                      \
        }                                                                                    \
        ST(v, y0); ST(v + 16, y1); ST(v + 32, y2); ST(v + 48, y3);                           \
    }
LN64_ROW(ln64_f32, float, ln64_load_f32, ln64_store_f32)
static inline int ln64x8_f32(float *v, const float *g, const float *b, float eps, int relu) {
    for (int r = 0; r < 8; r++) ln64_f32(v + 64 * r, g, b, eps, relu);
    return 1;
}
#else
static inline int ln64x8_f32(float *v, const float *g, const float *b, float eps, int relu) {
    (void)v; (void)g; (void)b; (void)eps; (void)relu;
    return 0;
}
#endif
#if defined(__AVX512F__) && defined(__AVX512BF16__)
static inline __m512 ln64_load_bf16(const uint16_t *p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
static inline void ln64_store_bf16(uint16_t *p, __m512 y) {
    _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(y));
}
LN64_ROW(ln64_bf16, uint16_t, ln64_load_bf16, ln64_store_bf16)
static inline int ln64x8_bf16(uint16_t *v, const float *g, const float *b, float eps, int relu) {
    for (int r = 0; r < 8; r++) ln64_bf16(v + 64 * r, g, b, eps, relu);
    return 1;
}
#else
static inline int ln64x8_bf16(uint16_t *v, const float *g, const float *b, float eps, int relu) {
    (void)v; (void)g; (void)b; (void)eps; (void)relu;
    return 0;
}
#endif

/* NORM_ROWS rows at a time: one row's sum, variance and square root form a chain of
 * dependent reductions, and interleaving rows keeps the vector units busy meanwhile
 * (bfloat16, 8192 x 64: one row at a time 0.63 ms, eight 0.35 ms). The width is a
 * compile-time 64 (the tracking networks') where it can be, so the loops unroll. */
#define NORM_ROWS 8
#define LAYER_NORM(NAME, T, LOAD, STORE, FAST)                                                  \
    static inline __attribute__((always_inline)) void NAME##_rows(                           \
        T *restrict v, const int64_t n, const int64_t width, const float *restrict gamma,    \
        const float *restrict beta, float eps, int relu) {                                   \
        float mean[NORM_ROWS], rstd[NORM_ROWS];                                              \
        for (int64_t r = 0; r < n; r++) {                                                    \
            float s = 0;                                                                     \
            _Pragma("omp simd reduction(+ : s)")                                             \
            for (int64_t j = 0; j < width; j++) s += LOAD(v + r * width + j);                \
            mean[r] = s / (float)width;                                                      \
        }                                                                                    \
        for (int64_t r = 0; r < n; r++) {                                                    \
            float q = 0;                                                                     \
            const float m = mean[r];                                                         \
            _Pragma("omp simd reduction(+ : q)")                                             \
            for (int64_t j = 0; j < width; j++) {                                            \
                const float d = LOAD(v + r * width + j) - m;                                 \
                q += d * d;                                                                  \
            }                                                                                \
            rstd[r] = q / (float)width + eps;                                                \
        }                                                                                    \
        _Pragma("omp simd")                                                                  \
        for (int64_t r = 0; r < n; r++) rstd[r] = 1.0f / sqrtf(rstd[r]);                     \
        for (int64_t r = 0; r < n; r++) {                                                    \
            const float m = mean[r], k = rstd[r];                                            \
            _Pragma("omp simd")                                                              \
            for (int64_t j = 0; j < width; j++) {                                            \
                const float y = (LOAD(v + r * width + j) - m) * k * gamma[j] + beta[j];      \
                STORE(v + r * width + j, relu && y < 0 ? 0.0f : y);                          \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    void NAME(int64_t rows, int64_t width, T *x, const float *gamma, const float *beta,      \
              float eps, int relu, int threads) {                                            \
        const int64_t blocks = (rows + NORM_ROWS - 1) / NORM_ROWS;                           \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                    \
        for (int64_t b = 0; b < blocks; b++) {                                               \
            const int64_t lo = b * NORM_ROWS;                                                \
            const int64_t n = rows - lo < NORM_ROWS ? rows - lo : NORM_ROWS;                 \
            if (n == NORM_ROWS && width == 64) {                                             \
                if (!FAST(x + lo * 64, gamma, beta, eps, relu))                              \
                    NAME##_rows(x + lo * 64, NORM_ROWS, 64, gamma, beta, eps, relu);         \
            } else                                                                           \
                NAME##_rows(x + lo * width, n, width, gamma, beta, eps, relu);               \
        }                                                                                    \
    }
LAYER_NORM(layer_norm_f32, float, load_f32, store_f32, ln64x8_f32)
LAYER_NORM(layer_norm_bf16, uint16_t, load_bf16, store_bf16, ln64x8_bf16)
#undef LAYER_NORM
#undef NORM_ROWS

#define REAL float
#define SUFFIX f32
#define LANES 8
#define VEC vec_f32
#define UVEC uvec_f32
#define SUM8 sum8_f32
#define EXP exp_poly_f32
#include __FILE__
#undef REAL
#undef SUFFIX
#undef EXP
#undef LANES
#undef VEC
#undef UVEC
#undef SUM8

#define REAL double
#define SUFFIX f64
#define LANES 4
typedef double vec_f64 __attribute__((vector_size(32)));
typedef double uvec_f64 __attribute__((vector_size(32), aligned(8)));
#define VEC vec_f64
#define UVEC uvec_f64
#define EXP exp
#include __FILE__

#else

/* Prefetch the w-long row that entry e + AHEAD will read. */
static inline void CAT(prefetch_row, SUFFIX)(const REAL *table, const int64_t *col,
                                            int64_t e, int64_t end, int64_t w) {
    if (e + AHEAD < end) {
        const char *p = (const char *)(table + col[e + AHEAD] * w);
        for (int64_t b = 0; b < w * (int64_t)sizeof(REAL); b += 64) __builtin_prefetch(p + b);
    }
}

/* out[e, h] = sum_c left[i, h, c] * right[col[e], h, c]; f fixed at compile time where
 * the caller passes a constant, so the products vectorise. */
static inline __attribute__((always_inline)) void CAT(dot_row, SUFFIX)(
    const int64_t *restrict crow, const int64_t *restrict col, const REAL *restrict left,
    const REAL *restrict right, int64_t heads, int64_t f, REAL *restrict out, int64_t i, int64_t limit) {
    const int64_t w = heads * f, end = crow[i + 1];
    const REAL *l = left + i * w;
    for (int64_t e = crow[i]; e < end; e++) {
        CAT(prefetch_row, SUFFIX)(right, col, e, limit, w);
        const REAL *r = right + col[e] * w;
#ifdef SUM8
        if (f == 8 && heads % 8 == 0) {
            const UVEC *lv = (const UVEC *)l, *rv = (const UVEC *)r;
            for (int64_t g = 0; g < heads; g += 8) {
                VEC p[8];
                for (int k = 0; k < 8; k++) p[k] = lv[g + k] * rv[g + k];
                *(UVEC *)(out + e * heads + g) = SUM8(p);
            }
            continue;
        }
#endif
        for (int64_t h = 0; h < heads; h++) {
            REAL s = 0;
            for (int64_t c = 0; c < f; c++) s += l[h * f + c] * r[h * f + c];
            out[e * heads + h] = s;
        }
    }
}

void CAT(sddmm_dot, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *col,
                            const REAL *left, const REAL *right, int64_t heads, int64_t f,
                            REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        if (heads == 8 && f == 8) CAT(dot_row, SUFFIX)(crow, col, left, right, 8, 8, out, i, crow[rows]);
        else if (f == 8) CAT(dot_row, SUFFIX)(crow, col, left, right, heads, 8, out, i, crow[rows]);
        else if (f == 16) CAT(dot_row, SUFFIX)(crow, col, left, right, heads, 16, out, i, crow[rows]);
        else CAT(dot_row, SUFFIX)(crow, col, left, right, heads, f, out, i, crow[rows]);
    }
}

/* out[e, h] = u[i, h] + v[col[e], h] (GAT's additive scores). */
void CAT(sddmm_add, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *col,
                            const REAL *u, const REAL *v, int64_t heads, REAL *out,
                            int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        const REAL *ui = u + i * heads;
        for (int64_t e = crow[i]; e < crow[i + 1]; e++) {
            CAT(prefetch_row, SUFFIX)(v, col, e, crow[rows], heads);
            const REAL *vj = v + col[e] * heads;
            for (int64_t h = 0; h < heads; h++) out[e * heads + h] = ui[h] + vj[h];
        }
    }
}

/* out[i, h, :] = sum_e val[p(e), h] * x[col[e], h, :], p the identity or perm. The row's
 * sums stay in registers: 32-byte vectors along f, each scaled by its head's value (a
 * plain loop let the compiler vectorise across heads, with a permute per product). */
static inline __attribute__((always_inline)) void CAT(spmm_row, SUFFIX)(
    const int64_t *restrict crow, const int64_t *restrict col, const int64_t *restrict perm,
    const REAL *restrict val, const REAL *restrict x, int64_t heads, int64_t f,
    REAL *restrict out, int64_t i, int64_t limit) {
    const int64_t w = heads * f, end = crow[i + 1];
    if (f % LANES) {
        REAL acc[w];
        for (int64_t k = 0; k < w; k++) acc[k] = 0;
        for (int64_t e = crow[i]; e < end; e++) {
            CAT(prefetch_row, SUFFIX)(x, col, e, limit, w);
            const REAL *xr = x + col[e] * w;
            const REAL *a = val + (perm ? perm[e] : e) * heads;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t c = 0; c < f; c++) acc[h * f + c] += a[h] * xr[h * f + c];
        }
        memcpy(out + i * w, acc, (size_t)w * sizeof(REAL));
        return;
    }
    const int64_t nv = w / LANES, per_head = f / LANES;
    VEC acc[nv];
    for (int64_t k = 0; k < nv; k++) acc[k] = (VEC){0};
    for (int64_t e = crow[i]; e < end; e++) {
        CAT(prefetch_row, SUFFIX)(x, col, e, limit, w);
        const UVEC *xr = (const UVEC *)(x + col[e] * w);
        const REAL *a = val + (perm ? perm[e] : e) * heads;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t k = 0; k < per_head; k++) acc[h * per_head + k] += a[h] * xr[h * per_head + k];
    }
    UVEC *o = (UVEC *)(out + i * w);
    for (int64_t k = 0; k < nv; k++) o[k] = acc[k];
}

void CAT(spmm_heads, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *col,
                             const int64_t *perm, const REAL *val, const REAL *x,
                             int64_t heads, int64_t f, REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        if (heads == 8 && f == 8) CAT(spmm_row, SUFFIX)(crow, col, perm, val, x, 8, 8, out, i, crow[rows]);
        else if (f == 8) CAT(spmm_row, SUFFIX)(crow, col, perm, val, x, heads, 8, out, i, crow[rows]);
        else if (f == 16) CAT(spmm_row, SUFFIX)(crow, col, perm, val, x, heads, 16, out, i, crow[rows]);
        else CAT(spmm_row, SUFFIX)(crow, col, perm, val, x, heads, f, out, i, crow[rows]);
    }
}

/* GATv2's score for row i: out[e, h] = sum_c att[h, c] * leaky(u[i, h, c] + v[col[e], h, c]). */
static inline __attribute__((always_inline)) void CAT(leaky_row, SUFFIX)(
    const int64_t *restrict crow, const int64_t *restrict col, const REAL *restrict u,
    const REAL *restrict v, const REAL *restrict att, int64_t heads, int64_t f, REAL slope,
    REAL *restrict out, int64_t i, int64_t limit) {
    const int64_t w = heads * f;
    const REAL *ui = u + i * w;
    for (int64_t e = crow[i]; e < crow[i + 1]; e++) {
        CAT(prefetch_row, SUFFIX)(v, col, e, limit, w);
        const REAL *vj = v + col[e] * w;
        for (int64_t h = 0; h < heads; h++) {
            REAL s = 0;
            for (int64_t c = 0; c < f; c++) {
                const REAL z = ui[h * f + c] + vj[h * f + c];
                s += att[h * f + c] * (z > 0 ? z : slope * z);
            }
            out[e * heads + h] = s;
        }
    }
}

void CAT(sddmm_leaky, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *col,
                              const REAL *u, const REAL *v, const REAL *att, int64_t heads,
                              int64_t f, REAL slope, REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        if (heads == 8 && f == 8)
            CAT(leaky_row, SUFFIX)(crow, col, u, v, att, 8, 8, slope, out, i, crow[rows]);
        else CAT(leaky_row, SUFFIX)(crow, col, u, v, att, heads, f, slope, out, i, crow[rows]);
    }
}

/* One row of leaky_backward (below); ga the thread's part of att's gradient, or NULL. */
static inline __attribute__((always_inline)) void CAT(leaky_grad_row, SUFFIX)(
    const int64_t *restrict crow, const int64_t *restrict col, const int64_t *restrict perm,
    const REAL *restrict fixed, const REAL *restrict gathered, const REAL *restrict att,
    const REAL *restrict grad, int64_t heads, int64_t f, REAL slope,
    REAL *restrict grad_fixed, REAL *restrict ga, int64_t i, int64_t limit) {
    const int64_t w = heads * f;
    const REAL *xi = fixed + i * w;
    REAL acc[w];
    for (int64_t k = 0; k < w; k++) acc[k] = 0;
    for (int64_t e = crow[i]; e < crow[i + 1]; e++) {
        CAT(prefetch_row, SUFFIX)(gathered, col, e, limit, w);
        const REAL *xj = gathered + col[e] * w;
        const REAL *g = grad + (perm ? perm[e] : e) * heads;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t c = 0; c < f; c++) {
                const int64_t k = h * f + c;
                const REAL z = xi[k] + xj[k];
                acc[k] += g[h] * att[k] * (z > 0 ? 1 : slope);
            }
        if (ga)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t c = 0; c < f; c++) {
                    const int64_t k = h * f + c;
                    const REAL z = xi[k] + xj[k];
                    ga[k] += g[h] * (z > 0 ? z : slope * z);
                }
    }
    memcpy(grad_fixed + i * w, acc, (size_t)w * sizeof(REAL));
}

/* The gradient of sddmm_leaky for the operand on this pattern's row side, ``fixed``
 * (u on A, v on A^T with perm mapping to A's entries): grad_fixed[i] = sum_e g[p(e), h]
 * att[h, c] leaky'(z). With parts non-NULL, also the attention vector's gradient
 * sum_e g[p(e), h] leaky(z), one partial sum per thread (static schedule: the same rows
 * per thread on every call, so the caller's sum over parts is deterministic). */
void CAT(leaky_backward, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *col,
                                 const int64_t *perm, const REAL *fixed,
                                 const REAL *gathered, const REAL *att, const REAL *grad,
                                 int64_t heads, int64_t f, REAL slope, REAL *grad_fixed,
                                 REAL *parts, int threads) {
#pragma omp parallel num_threads(threads)
    {
        REAL *ga = parts ? parts + (int64_t)THREAD_NUM() * heads * f : NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < rows; i++) {
            if (heads == 8 && f == 8)
                CAT(leaky_grad_row, SUFFIX)(crow, col, perm, fixed, gathered, att, grad, 8, 8,
                                            slope, grad_fixed, ga, i, crow[rows]);
            else
                CAT(leaky_grad_row, SUFFIX)(crow, col, perm, fixed, gathered, att, grad, heads,
                                            f, slope, grad_fixed, ga, i, crow[rows]);
        }
    }
}

/* out[i, h] = sum over row i's entries of val[p(e), h]. */
void CAT(segment_sum, SUFFIX)(int64_t rows, const int64_t *crow, const int64_t *perm,
                              const REAL *val, int64_t heads, REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        REAL *o = out + i * heads;
        for (int64_t h = 0; h < heads; h++) o[h] = 0;
        for (int64_t e = crow[i]; e < crow[i + 1]; e++) {
            const REAL *a = val + (perm ? perm[e] : e) * heads;
            for (int64_t h = 0; h < heads; h++) o[h] += a[h];
        }
    }
}

/* p[k] = exp(p[k]) for k < n (vectorised for float: exp_poly_f32). */
static inline void CAT(exp_inplace, SUFFIX)(REAL *restrict p, int64_t n) {
    for (int64_t k = 0; k < n; k++) p[k] = EXP(p[k]);
}

/* Row softmax per head: alpha = exp(s - max) / sum exp(s - max) over each row. */
void CAT(softmax_rows, SUFFIX)(int64_t rows, const int64_t *crow, const REAL *scores,
                               int64_t heads, REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        const int64_t b = crow[i], end = crow[i + 1];
        if (b == end) continue;
        REAL m[heads], s[heads];
        for (int64_t h = 0; h < heads; h++) { m[h] = -INFINITY; s[h] = 0; }
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++) {
                const REAL z = scores[e * heads + h];
                m[h] = z > m[h] ? z : m[h];
            }
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++) out[e * heads + h] = scores[e * heads + h] - m[h];
        CAT(exp_inplace, SUFFIX)(out + b * heads, (end - b) * heads);
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++) s[h] += out[e * heads + h];
        for (int64_t h = 0; h < heads; h++) s[h] = 1 / s[h];
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++) out[e * heads + h] *= s[h];
    }
}

/* ds = alpha * (g - sum_row alpha * g), per head. */
void CAT(softmax_backward, SUFFIX)(int64_t rows, const int64_t *crow, const REAL *alpha,
                                   const REAL *grad, int64_t heads, REAL *out, int threads) {
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads)
    for (int64_t i = 0; i < rows; i++) {
        const int64_t b = crow[i], end = crow[i + 1];
        if (b == end) continue;
        REAL t[heads];
        for (int64_t h = 0; h < heads; h++) t[h] = 0;
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++) t[h] += alpha[e * heads + h] * grad[e * heads + h];
        for (int64_t e = b; e < end; e++)
            for (int64_t h = 0; h < heads; h++)
                out[e * heads + h] = alpha[e * heads + h] * (grad[e * heads + h] - t[h]);
    }
}

#endif
