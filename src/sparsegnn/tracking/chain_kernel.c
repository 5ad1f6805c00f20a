/* Track building's loops in C (sparsegnn.tracking.chain_kernel; the Python and numpy
 * forms are chains.label_components, triplets._triplet_chains' greedy and
 * triplets._triplet_misfit, which these equal bit for bit).
 *
 * Products must round as numpy rounds them: no compiler may contract one feeding an
 * addition into a fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>

static inline int64_t find(int64_t *parent, int64_t v) {
    while (parent[v] != v) {
        parent[v] = parent[parent[v]]; /* path halving */
        v = parent[v];
    }
    return v;
}

/* Connected components of the undirected graph src[e] - dst[e] on n hits: out[v] is its
 * component's number, counted in order of each component's first (lowest) hit over the
 * components of at least min_hits hits, and -1 on smaller ones. Union by index keeps
 * every root its component's lowest hit. parent and size need n entries (scratch). */
void label_components(int64_t n, int64_t m, const int64_t *src, const int64_t *dst,
                      int64_t min_hits, int64_t *parent, int64_t *size, int64_t *out) {
    for (int64_t v = 0; v < n; v++) { parent[v] = v; size[v] = 0; }
    for (int64_t e = 0; e < m; e++) {
        const int64_t a = find(parent, src[e]), b = find(parent, dst[e]);
        if (a < b) parent[b] = a; else if (b < a) parent[a] = b;
    }
    for (int64_t v = 0; v < n; v++) size[find(parent, v)]++;
    int64_t next = 0;
    for (int64_t v = 0; v < n; v++) {  /* a root comes before every other hit of its own */
        const int64_t root = find(parent, v);
        if (size[root] < min_hits) out[v] = -1;
        else out[v] = root == v ? next++ : out[root];
    }
}

/* The triplet greedy: triplets i-j-k in the order given, each taken when j is the middle
 * of no taken triplet and every hit keeps at most one way in and one way out; out_of (n
 * entries, -1 filled) gets each hit's way out. */
void triplet_greedy(int64_t m, const int64_t *a, const int64_t *b, const int64_t *c, int64_t n,
                    int64_t *out_of, int64_t *in_of, uint8_t *middle) {
    for (int64_t v = 0; v < n; v++) { in_of[v] = -1; middle[v] = 0; }
    for (int64_t t = 0; t < m; t++) {
        const int64_t i = a[t], j = b[t], k = c[t];
        if (middle[j] || (out_of[i] != -1 && out_of[i] != j) || (in_of[j] != -1 && in_of[j] != i)
            || (out_of[j] != -1 && out_of[j] != k) || (in_of[k] != -1 && in_of[k] != j))
            continue;
        middle[j] = 1;
        out_of[i] = j; in_of[j] = i; out_of[j] = k; in_of[k] = j;
    }
}

/* Signed xy curvature of the circle through p, q, w (0 for a straight line), as
 * triplets._curvature computes it. */
static double curvature(double px, double py, double qx, double qy, double wx, double wy) {
    const double ux = qx - px, uy = qy - py, vx = wx - qx, vy = wy - qy;
    const double tx = wx - px, ty = wy - py;
    const double cross = ux * vy - uy * vx;
    const double lengths = sqrt((ux * ux + uy * uy) * (vx * vx + vy * vy) * (tx * tx + ty * ty));
    return lengths > 0 ? 2 * cross / lengths : 0.0;
}

static inline double arm(const double *p, const double *q) { return hypot(q[0] - p[0], q[1] - p[1]); }

static inline double length(const double *p, const double *q) {
    const double dx = q[0] - p[0], dy = q[1] - p[1], dz = q[2] - p[2];
    return sqrt(dx * dx + dy * dy + dz * dz);
}

/* Everything of triplets._triplet_misfit but its arctangents (numpy's own, which libm's
 * differ from in the last bit): per triplet a-b-c, bent = bend^2 / spread^2, and the two
 * (rise, run) pairs whose polar angles' difference is the triplet's turn (zeros when both
 * segments are short). positions is [n, 3]. */
void triplet_parts(int64_t m, const int64_t *a, const int64_t *b, const int64_t *c,
                   const double *positions, double min_segment, double curvature_sq,
                   double arm_noise, double *bent, double *y1, double *x1, double *y2,
                   double *x2) {
    for (int64_t t = 0; t < m; t++) {
        const double *pa = positions + a[t] * 3, *pb = positions + b[t] * 3;
        const double *pc = positions + c[t] * 3;
        const double r_a = hypot(pa[0], pa[1]), r_b = hypot(pb[0], pb[1]);
        const double r_c = hypot(pc[0], pc[1]);
        const int first = length(pa, pb) > min_segment, second = length(pb, pc) > min_segment;
        double bend, arms;
        if (first && second) {
            bend = curvature(pa[0], pa[1], pb[0], pb[1], pc[0], pc[1])
                   - curvature(0.0, 0.0, pa[0], pa[1], pb[0], pb[1]);
            arms = arm(pa, pb) * arm(pb, pc);
            y1[t] = r_b - r_a; x1[t] = pb[2] - pa[2]; y2[t] = r_c - r_b; x2[t] = pc[2] - pb[2];
        } else if (first) {  /* a-b against the chord a-c */
            bend = curvature(0.0, 0.0, pa[0], pa[1], pb[0], pb[1])
                   - curvature(0.0, 0.0, pa[0], pa[1], pc[0], pc[1]);
            arms = arm(pa, pb) * arm(pa, pc);
            y1[t] = r_b - r_a; x1[t] = pb[2] - pa[2]; y2[t] = r_c - r_a; x2[t] = pc[2] - pa[2];
        } else if (second) {  /* the chord a-c against b-c */
            bend = curvature(0.0, 0.0, pa[0], pa[1], pc[0], pc[1])
                   - curvature(0.0, 0.0, pb[0], pb[1], pc[0], pc[1]);
            arms = arm(pa, pc) * arm(pb, pc);
            y1[t] = r_c - r_a; x1[t] = pc[2] - pa[2]; y2[t] = r_c - r_b; x2[t] = pc[2] - pb[2];
        } else {
            bend = 0.0;
            arms = 1.0;
            y1[t] = x1[t] = y2[t] = x2[t] = 0.0;
        }
        const double floor_arms = (isnan(arms) || arms >= 1e-9) ? arms : 1e-9;
        const double noise = arm_noise / floor_arms;
        bent[t] = bend * bend / (curvature_sq + noise * noise);
    }
}

/* The candidate edges of one linking round (triplets._link_round): scored >= cut, not
 * chosen, from a hit with no way out to a hit with no way in, at least one of the two on
 * a chain and not both on the same one. Their indices go to out in edge order; returns
 * how many. */
int64_t link_candidates(int64_t m, const int64_t *src, const int64_t *dst, const double *score,
                        double cut, const uint8_t *chosen, const int64_t *out_of,
                        const int64_t *in_of, const int64_t *label, int64_t *out) {
    int64_t found = 0;
    for (int64_t e = 0; e < m; e++) {
        const int64_t a = src[e], b = dst[e];
        if (score[e] >= cut && !chosen[e] && out_of[a] < 0 && in_of[b] < 0
            && (label[a] >= 0 || label[b] >= 0) && label[a] != label[b])
            out[found++] = e;
    }
    return found;
}

/* First ring position whose azimuth is >= x (right = 0) or > x (right = 1): the ring is
 * the s starts in azimuth order three times over, shifted by -2 pi, 0 and +2 pi. */
static int64_t ring_bisect(const int64_t *by_phi, int64_t s, const double *phi,
                           const double *shift, double x, int right) {
    int64_t lo = 0, hi = 3 * s;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const double v = phi[by_phi[mid % s]] + shift[mid / s];
        if (right ? v <= x : v < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Bridge candidates (triplets.bridges): every (end, start) whose azimuths differ by <=
 * dphi (wrapping at +-pi; starts in ring order per end), on different chains, one of them
 * short, the start farther from the origin. With out_end NULL only counts them. */
int64_t bridge_candidates(int64_t ne, const int64_t *ends, int64_t s, const int64_t *by_phi,
                          const double *phi, const double *shift, double dphi,
                          const int64_t *label, const uint8_t *is_short, const double *distance,
                          int64_t *out_end, int64_t *out_start) {
    int64_t found = 0;
    if (s == 0) return 0;
    for (int64_t i = 0; i < ne; i++) {
        const int64_t end = ends[i];
        const int64_t lo = ring_bisect(by_phi, s, phi, shift, phi[end] - dphi, 0);
        const int64_t hi = ring_bisect(by_phi, s, phi, shift, phi[end] + dphi, 1);
        for (int64_t k = lo; k < hi; k++) {
            const int64_t start = by_phi[k % s];
            if (label[end] == label[start] || !(is_short[label[end]] || is_short[label[start]])
                || !(distance[start] > distance[end]))
                continue;
            if (out_end) { out_end[found] = end; out_start[found] = start; }
            found++;
        }
    }
    return found;
}

/* chains.with_layers: the tracks (labels >= 0, fewer than num_labels) crossing at least
 * min_layers distinct layers keep their hits, renumbered 0.. in label order; the others'
 * hits get -1. Layers are ids in [0, num_layers). Scratch: count and crossed (num_labels
 * + 1 and num_labels entries), order (n), stamp (num_layers). */
void with_layers(int64_t n, const int64_t *labels, const int64_t *layer, int64_t num_labels,
                 int64_t num_layers, int64_t min_layers, int64_t *count, int64_t *crossed,
                 int64_t *order, int64_t *stamp, int64_t *out) {
    for (int64_t l = 0; l <= num_labels; l++) count[l] = 0;
    for (int64_t v = 0; v < n; v++) if (labels[v] >= 0) count[labels[v] + 1]++;
    for (int64_t l = 0; l < num_labels; l++) count[l + 1] += count[l];
    for (int64_t v = 0; v < n; v++) if (labels[v] >= 0) order[count[labels[v]]++] = v;
    /* count[l] is now the end of label l's hits, and the start of l + 1's. */
    for (int64_t k = 0; k < num_layers; k++) stamp[k] = -1;
    int64_t begin = 0, next = 0;
    for (int64_t l = 0; l < num_labels; l++) {
        int64_t distinct = 0;
        for (int64_t i = begin; i < count[l]; i++) {
            const int64_t k = layer[order[i]];
            if (stamp[k] != l) { stamp[k] = l; distinct++; }
        }
        crossed[l] = distinct >= min_layers && count[l] > begin ? next++ : -1;
        begin = count[l];
    }
    for (int64_t v = 0; v < n; v++) out[v] = labels[v] >= 0 ? crossed[labels[v]] : -1;
}
