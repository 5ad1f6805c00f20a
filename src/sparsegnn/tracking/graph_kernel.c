/* Module-map graph construction and the doublet filter's inputs as C loops
 * (sparsegnn.tracking.graph_kernel; the numpy forms are graph_construction's
 * _candidates + _in_windows + _sorted_pairs and filter.doublet_features).
 *
 * search_runs / search_edges: each hit of a map pair's first module finds by binary search
 * the run of the second module's hits (sorted by azimuth) its dphi range allows; each hit
 * pair of the run is then oriented outwards (the hit nearer the origin first) and its
 * doublet variables, in WINDOW_VARIABLES order (dphi, dz, deta, phi_slope, z0), are
 * computed one at a time and tested against its pair's widened window, stopping at the
 * first that fails; a NaN value or bound passes. numpy materialises every candidate
 * (1.8M at pileup 200) and gathers from the hit arrays in a dozen passes; here each
 * candidate is tested as it is found and only the survivors are written.
 *
 * No expression below has a product feeding an addition, so no compiler contracts one
 * into a fused multiply-add: every value rounds as numpy rounds it. */
#include <math.h>
#include <stdint.h>

/* Azimuth difference into [-pi, pi), as windows.wrap computes it for differences of two
 * azimuths: at most one turn added or taken. */
static inline double wrap(double angle) {
    const double turn = 2 * M_PI, shifted = angle + M_PI;
    return (shifted >= turn ? shifted - turn : (shifted < 0 ? shifted + turn : shifted)) - M_PI;
}

static inline int inside(double v, double lo, double hi) { return !(v < lo) && !(v > hi); }

static inline double clip(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* First index in sorted[0, n) whose value is >= x (right = 0) or > x (right = 1), as
 * numpy's searchsorted "left" / "right". */
static inline int64_t bisect(const double *sorted, int64_t n, double x, int right) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (right ? sorted[mid] <= x : sorted[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* For every map pair p (modules ia[p], ib[p]) and every hit of ia[p] in azimuth order,
 * the run [run_lo, run_hi) of ib[p]'s sorted hits within [low[p], high[p]] of its dphi
 * (offsets from each module's reference azimuth, queries clipped to +-half); entries are
 * written pair after pair. Returns how many hit pairs the runs hold. */
int64_t search_runs(int64_t pairs, const int64_t *ia, const int64_t *ib, const double *low,
                    const double *high, const int64_t *start, const int64_t *count,
                    const int64_t *order, const double *phi, const double *reference,
                    const double *offset, double half, int64_t *run_lo, int64_t *run_hi) {
    int64_t entry = 0, total = 0;
    for (int64_t p = 0; p < pairs; p++) {
        const int64_t a0 = start[ia[p]], b0 = start[ib[p]], nb = count[ib[p]];
        for (int64_t j = a0; j < a0 + count[ia[p]]; j++, entry++) {
            const double u = wrap(phi[order[j]] - reference[ib[p]]);
            const int64_t lo = bisect(offset + b0, nb, clip(u + low[p], -half, half), 0);
            const int64_t hi = bisect(offset + b0, nb, clip(u + high[p], -half, half), 1);
            run_lo[entry] = b0 + lo;
            run_hi[entry] = b0 + (hi > lo ? hi : lo);
            total += hi > lo ? hi - lo : 0;
        }
    }
    return total;
}

/* Whether the outward edge a -> b lies in the window [lo, hi] (5 values each). */
static inline int in_window(int64_t a, int64_t b, const double *lo, const double *hi,
                            const double *r, const double *phi, const double *z,
                            const double *eta, double min_dr) {
    const double dphi = wrap(phi[b] - phi[a]);
    if (!inside(dphi, lo[0], hi[0])) return 0;
    const double dz = z[b] - z[a];
    if (!inside(dz, lo[1], hi[1]) || !inside(eta[b] - eta[a], lo[2], hi[2])) return 0;
    const double dr = r[b] - r[a];
    const int has_dr = fabs(dr) >= min_dr;
    const double safe_dr = has_dr ? dr : 1.0;
    if (!inside(has_dr ? dphi / safe_dr : NAN, lo[3], hi[3])) return 0;
    return inside(has_dr ? z[a] - r[a] * dz / safe_dr : NAN, lo[4], hi[4]);
}

/* The hit pairs of search_runs' runs, each unordered pair once (a pair of one module with
 * itself keeps a < b), in run order. With window bounds (low/high non-NULL, row-major
 * [map pairs, 5], indexed by row[p]) each is oriented outwards and kept only inside its
 * window; without, it is written as found (first module's hit first). out_row gets each
 * written pair's map row. Returns how many were written. */
int64_t search_edges(int64_t pairs, const int64_t *ia, const int64_t *ib, const int64_t *start,
                     const int64_t *count, const int64_t *order, const int64_t *run_lo,
                     const int64_t *run_hi, const int64_t *row, const double *dist,
                     const double *r, const double *phi, const double *z, const double *eta,
                     const double *low, const double *high, double min_dr,
                     int64_t *out_src, int64_t *out_dst, int64_t *out_row) {
    int64_t entry = 0, kept = 0;
    for (int64_t p = 0; p < pairs; p++) {
        const int same = ia[p] == ib[p];
        const double *lo = low ? low + row[p] * 5 : 0, *hi = high ? high + row[p] * 5 : 0;
        for (int64_t j = start[ia[p]]; j < start[ia[p]] + count[ia[p]]; j++, entry++) {
            const int64_t s = order[j];
            for (int64_t k = run_lo[entry]; k < run_hi[entry]; k++) {
                int64_t a = s, b = order[k];
                if (same && !(a < b)) continue;
                if (lo) {
                    if (dist[a] > dist[b]) { const int64_t t = a; a = b; b = t; }
                    if (!in_window(a, b, lo, hi, r, phi, z, eta, min_dr)) continue;
                }
                out_src[kept] = a;
                out_dst[kept] = b;
                out_row[kept] = row[p];
                kept++;
            }
        }
    }
    return kept;
}

/* A graph's edge features (graph_construction._graph): dr, dphi, dz, deta of the edges
 * src -> dst over scale, as float32 ([E, 4]). */
void edge_features(int64_t n, const int64_t *src, const int64_t *dst, const double *r,
                   const double *phi, const double *z, const double *eta, const double *scale,
                   float *out) {
    for (int64_t e = 0; e < n; e++) {
        const int64_t a = src[e], b = dst[e];
        float *o = out + e * 4;
        o[0] = (float)((r[b] - r[a]) / scale[0]);
        o[1] = (float)(wrap(phi[b] - phi[a]) / scale[1]);
        o[2] = (float)((z[b] - z[a]) / scale[2]);
        o[3] = (float)((eta[b] - eta[a]) / scale[3]);
    }
}

/* A permutation putting the edges in (smaller hit, larger hit) order, stably: a counting
 * sort on the smaller hit, then insertion sort of each bucket (a hit has tens of edges)
 * on the larger. bucket needs num_hits + 1 zeroed entries. */
void pair_order(int64_t n, const int64_t *src, const int64_t *dst, int64_t num_hits,
                int64_t *bucket, int64_t *perm) {
    for (int64_t e = 0; e < n; e++) bucket[(src[e] < dst[e] ? src[e] : dst[e]) + 1]++;
    for (int64_t h = 0; h < num_hits; h++) bucket[h + 1] += bucket[h];
    for (int64_t e = 0; e < n; e++) perm[bucket[src[e] < dst[e] ? src[e] : dst[e]]++] = e;
    /* bucket[h] is now the end of hit h's run, and the start of h + 1's. */
    int64_t begin = 0;
    for (int64_t h = 0; h < num_hits; h++) {
        const int64_t end = bucket[h];
        for (int64_t i = begin + 1; i < end; i++) {
            const int64_t e = perm[i], key = src[e] > dst[e] ? src[e] : dst[e];
            int64_t j = i;
            for (; j > begin; j--) {
                const int64_t f = perm[j - 1];
                if ((src[f] > dst[f] ? src[f] : dst[f]) <= key) break;
                perm[j] = f;
            }
            perm[j] = e;
        }
        begin = end;
    }
}

/* The doublet filter's first nine input columns (filter.doublet_features) of the edges
 * src -> dst, from the graph's scaled float32 node [N, 3] and edge [E, 4] features: the
 * values are unscaled in double precision, and each column is divided by divisor[k] and
 * stored as float32 (out is [E, 10]; column 9 is the caller's); z0 (float64) is written
 * for the caller's vertex. */
void doublet_features(int64_t n, const int64_t *src, const int64_t *dst, const float *node,
                      const float *edge, const double *node_scale, const double *edge_scale,
                      const double *divisor, float *out, double *z0) {
    for (int64_t e = 0; e < n; e++) {
        const float *ns = node + src[e] * 3, *nd = node + dst[e] * 3, *ed = edge + e * 4;
        const double r_src = (double)ns[0] * node_scale[0], z_src = (double)ns[2] * node_scale[2];
        const double dr = (double)ed[0] * edge_scale[0], dphi = (double)ed[1] * edge_scale[1];
        const double dz = (double)ed[2] * edge_scale[2], deta = (double)ed[3] * edge_scale[3];
        const double safe_dr = fabs(dr) >= 10.0 ? dr : copysign(10.0, dr);
        const double column[9] = {r_src, z_src, (double)nd[0] * node_scale[0],
                                  (double)nd[2] * node_scale[2], dr, dphi, dz, deta,
                                  dphi / safe_dr};
        float *o = out + e * 10;
        for (int k = 0; k < 9; k++) o[k] = (float)(column[k] / divisor[k]);
        z0[e] = z_src - r_src * dz / safe_dr;
    }
}
