/* The per-pair window test of module-map graph construction in one pass over the
 * candidates (sparsegnn.tracking.window_kernel; the numpy form is
 * graph_construction._in_windows, which this equals bit for bit).
 *
 * Each candidate hit pair is oriented outwards (the hit nearer the origin first), and its
 * doublet variables, in WINDOW_VARIABLES order (dphi, dz, deta, phi_slope, z0), are
 * computed one at a time and tested against its pair's widened window, stopping at the
 * first that fails; a NaN value or bound passes. numpy computes each variable for every
 * survivor of the ones before, in five passes that each gather from the hit arrays and
 * the [pairs, 5] bounds; here each candidate's hits and bounds are read once.
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

/* Survivors written to out_src/out_dst in candidate order; returns how many. Bounds are
 * row-major [pairs, 5]. */
int64_t window_edges(int64_t n, const int64_t *src, const int64_t *dst, const int64_t *pair,
                     const double *dist, const double *r, const double *phi, const double *z,
                     const double *eta, const double *low, const double *high, double min_dr,
                     int64_t *out_src, int64_t *out_dst) {
    int64_t kept = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t a = src[e], b = dst[e];
        if (dist[a] > dist[b]) { const int64_t t = a; a = b; b = t; }
        const double *lo = low + pair[e] * 5, *hi = high + pair[e] * 5;
        const double dphi = wrap(phi[b] - phi[a]);
        if (!inside(dphi, lo[0], hi[0])) continue;
        const double dz = z[b] - z[a];
        if (!inside(dz, lo[1], hi[1]) || !inside(eta[b] - eta[a], lo[2], hi[2])) continue;
        const double dr = r[b] - r[a];
        const int has_dr = fabs(dr) >= min_dr;
        const double safe_dr = has_dr ? dr : 1.0;
        if (!inside(has_dr ? dphi / safe_dr : NAN, lo[3], hi[3])) continue;
        if (!inside(has_dr ? z[a] - r[a] * dz / safe_dr : NAN, lo[4], hi[4])) continue;
        out_src[kept] = a;
        out_dst[kept] = b;
        kept++;
    }
    return kept;
}
