/* Exact replay of the greedy blending rule used by GPT-NeoX and megatron-core
 * (build_blending_indices), written from its published description:
 *
 *   for s in [0, size): x = max(double(s), 1.0)
 *       pick the source i maximizing w[i] * x - count[i]   (strict '>', so ties go to the lowest i)
 *       count[i] += 1
 *
 * Only the counts are kept (no per-sample arrays), so 1e9 steps need O(sources) memory.
 * Built with -ffp-contract=off so that w*x - c is two IEEE double roundings, as in the frameworks.
 *
 * advance(weights, start, counts, stop, marks) -> (counts, positions)
 *   runs the steps s in [start, stop) from the given counts;
 *   marks: sequence of (source, count) pairs; positions[k] is the step s at which source
 *   marks[k][0] drew its marks[k][1]-th sample during this call, else -1.
 *
 * Past 16 sources, a long run without marks scans only the heaviest 16 or 32 sources every step and the others
 * only when a proven bound on their errors reaches the maximum (run_hotcold; a trial picks it or the AVX2 scan).
 *
 * Long runs are split over threads without giving up exactness. Chunk k > 0 starts from a GUESSED
 * state (the largest-remainder rounding of w * b_k) and keeps snapshots of its first steps. Once the
 * true state at b_k is known (the end of chunk k-1), it is stepped forward until it equals the
 * chunk's snapshot at the same step; from there the two trajectories are the same deterministic
 * sequence, so the chunk's end state and later marks are exact. If they never meet within the
 * snapshots, the chunk is replayed sequentially from the true state. (In practice they meet within
 * a step or two at a few sources; at 64 log-uniform weights within 1 to ~17,000 steps.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXN 16
#define NSNAP 4096
#define MAX_THREADS 8
#define PARALLEL_MIN_STEPS 8000000LL
/* measured (paired, 2 threads): the AVX2 loop is 1.16-1.19x slower than the unrolled scalar loops at 9-10 sources,
 * 1.20x faster at 11 and 1.29x at 16 (log-uniform weights; 1.54x and 1.24x with equal weights) */
#define SIMD_MIN_SOURCES 11
/* run_hotcold: only for calls this long (it sorts and allocates per call), and picked per problem by a trial */
#define HOTCOLD_MIN_STEPS 4096
#define HOTCOLD_TRIAL_STEPS 16384

typedef struct {
    int n;
    int simd; /* 0: the plain scalar loops only (the test oracle and the bench's baseline) */
    double *w;
    Py_ssize_t nm;
    const long long *msrc;
    const long long *mcnt;
    int hot;   /* > MAXN sources without marks: 0 the AVX2 scan of every source, else run_hotcold with this many hot */
    int *perm; /* the sources by weight, heaviest first (ties by index), for run_hotcold; NULL: not used */
    double wmax;
    long long parallel_min; /* runs this long are split over threads */
} problem;

/* After source best drew at step s: if its count reached its next mark, record the step of every mark
 * (best, count) and move dnext[best] to its next mark count (1e300: none). */
static inline void note_marks(const problem *p, int best, const double *dcount, double *dnext, long long s,
                              long long *mpos) {
    if (dcount[best] != dnext[best]) return;
    const int64_t cnt = (int64_t)dcount[best];
    int64_t nxt = INT64_MAX;
    for (Py_ssize_t k = 0; k < p->nm; k++) {
        if (p->msrc[k] != best) continue;
        if (p->mcnt[k] == cnt) mpos[k] = s;
        else if (p->mcnt[k] > cnt && p->mcnt[k] < nxt) nxt = p->mcnt[k];
    }
    dnext[best] = nxt == INT64_MAX ? 1e300 : (double)nxt;
}

static void next_marks(const problem *p, const int64_t *count, double *dnext) {
    for (int i = 0; i < p->n; i++) dnext[i] = 1e300;
    for (Py_ssize_t k = 0; k < p->nm; k++) {
        long long src = p->msrc[k];
        if (src >= 0 && src < p->n && p->mcnt[k] > count[src] && (double)p->mcnt[k] < dnext[src])
            dnext[src] = (double)p->mcnt[k];
    }
}

/* The hot loop for a compile-time number of sources N (lets the compiler unroll and keep registers). */
#define CASE(N)                                                                                 \
    case N:                                                                                     \
        for (long long s = s0; s < s1; s++) {                                                   \
            double x = (double)s;                                                               \
            if (x < 1.0) x = 1.0;                                                               \
            int best = 0;                                                                       \
            double best_err = w[0] * x - dcount[0];                                             \
            for (int i = 1; i < N; i++) {                                                       \
                double err = w[i] * x - dcount[i];                                              \
                if (err > best_err) { best_err = err; best = i; }                               \
            }                                                                                   \
            dcount[best] += 1.0;                                                                \
            note_marks(p, best, dcount, dnext, s, mpos);                                        \
        }                                                                                       \
        break;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNEL 1
/* Lane j of row j is 1: the chosen count is incremented as a whole vector (the other lanes get + 0.0, exact). */
static const double ONEHOT4[4][4] __attribute__((aligned(32))) = {
    {1.0, 0.0, 0.0, 0.0}, {0.0, 1.0, 0.0, 0.0}, {0.0, 0.0, 1.0, 0.0}, {0.0, 0.0, 0.0, 1.0}};

/* The same rule with AVX2, for any number of sources: the errors w*x - c (a multiply and a subtract,
 * each rounded: no FMA), their maximum, then the FIRST index holding it (ties to the lowest index, as
 * the strict '>' of the scalar loop). Sources are padded to a multiple of 16 with w = 0, c = 1e300 (an
 * error of -1e300, never the maximum). Four accumulators keep the max chains independent. */
__attribute__((target("avx2"))) static int run_avx2(const problem *p, int64_t *count, long long s0, long long s1,
                                                    long long *mpos) {
    const int N = p->n, NP = (N + 15) & ~15;
    double *buf = aligned_alloc(32, sizeof(double) * 4 * (size_t)NP);
    if (!buf) return -1;
    double *w = buf, *dcount = buf + NP, *err = buf + 2 * NP, *dnext = buf + 3 * NP;
    for (int i = 0; i < NP; i++) {
        w[i] = i < N ? p->w[i] : 0.0;
        dcount[i] = i < N ? (double)count[i] : 1e300;
    }
    next_marks(p, count, dnext);
    for (long long s = s0; s < s1; s++) {
        double x = (double)s;
        if (x < 1.0) x = 1.0;
        const __m256d vx = _mm256_set1_pd(x);
        __m256d m0 = _mm256_set1_pd(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        for (int k = 0; k < NP; k += 16) {
            __m256d e0 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + k), vx), _mm256_load_pd(dcount + k));
            __m256d e1 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + k + 4), vx), _mm256_load_pd(dcount + k + 4));
            __m256d e2 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + k + 8), vx), _mm256_load_pd(dcount + k + 8));
            __m256d e3 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + k + 12), vx), _mm256_load_pd(dcount + k + 12));
            _mm256_store_pd(err + k, e0);
            _mm256_store_pd(err + k + 4, e1);
            _mm256_store_pd(err + k + 8, e2);
            _mm256_store_pd(err + k + 12, e3);
            m0 = _mm256_max_pd(m0, e0);
            m1 = _mm256_max_pd(m1, e1);
            m2 = _mm256_max_pd(m2, e2);
            m3 = _mm256_max_pd(m3, e3);
        }
        __m256d m = _mm256_max_pd(_mm256_max_pd(m0, m1), _mm256_max_pd(m2, m3));
        __m128d h = _mm_max_pd(_mm256_castpd256_pd128(m), _mm256_extractf128_pd(m, 1));
        h = _mm_max_sd(h, _mm_unpackhi_pd(h, h));
        const __m256d vm = _mm256_set1_pd(_mm_cvtsd_f64(h));
        int k = 0, lane = 0; /* (0, 0) only if no error equals the maximum: NaN weights, as the scalar loop */
        for (int j = 0; j < NP; j += 4) {
            int bits = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_load_pd(err + j), vm, _CMP_EQ_OQ));
            if (bits) { k = j; lane = __builtin_ctz((unsigned)bits); break; }
        }
        const int best = k + lane;
        /* a whole-vector update: a scalar store read back by the next step's vector loads would stall them */
        _mm256_store_pd(dcount + k, _mm256_add_pd(_mm256_load_pd(dcount + k), _mm256_load_pd(ONEHOT4[lane])));
        note_marks(p, best, dcount, dnext, s, mpos);
    }
    for (int i = 0; i < N; i++) count[i] = (int64_t)dcount[i];
    free(buf);
    return 0;
}

/* Many sources (> MAXN), no marks: the same rule, scanning only the heaviest H sources every step.
 *
 * The sources are taken by weight, heaviest first. The H heaviest ("hot") have their errors computed every
 * step, their counts kept in registers. The others sit in groups of 4 ("cold"), each with an upper bound on
 * the error any of its sources can have at a later step x:
 *     B_g(x) = m_g + W_g * (x - x_g) + EPS * (wmax * x + |m_g| + 1)
 * where m_g is the group's largest computed error at step x_g (taken when the group was last scanned or one
 * of its sources drew) and W_g its largest weight. Its counts do not change until it is scanned again, so
 * its real errors grow by w_i * (x - x_g) <= W_g * (x - x_g); the computed ones differ from the real ones by
 * at most a few units of rounding (u = 2^-53) times (wmax * x + |m_g|), and EPS = 2^-44 = 512 u covers them
 * and the rounding of B itself. A group whose bound is below the hot maximum cannot hold the maximum nor
 * tie with it, so it is skipped; the others are scanned exactly. The step's pick is then the plain rule's:
 * the largest computed error, ties to the lowest source index (a tie among the hot sources, or any
 * non-finite value, takes the exact scan of every source). Needs s0 >= 1 (x = s) and finite weights >= 0. */
#define EPS_BOUND 5.684341886080802e-14 /* 2^-44 */

typedef struct {
    int np, groups;  /* padded source count (H + 4 * groups, groups a multiple of 4) */
    int *orig;       /* source index of each sorted slot (padding: INT32_MAX) */
    double *ws, *cs; /* weight and count by slot; padding w = 0, c = 1e300 */
    double *mg, *xg, *wg;
} hotcold;

/* Group g's errors at step x: its bound taken from them, and the best (value bv, source bo, slot bj) updated
 * with them (the largest error, ties to the lowest source). */
static void hc_scan(const hotcold *h, int hot, int g, double x, double *bv, int *bo, int *bj) {
    const int b = hot + 4 * g;
    double m = -INFINITY;
    for (int k = b; k < b + 4; k++) {
        double e = h->ws[k] * x - h->cs[k];
        if (e > m) m = e;
        if (e > *bv || (e == *bv && h->orig[k] < *bo)) { *bv = e; *bo = h->orig[k]; *bj = k; }
    }
    h->mg[g] = m + EPS_BOUND * (fabs(m) + 1.0);
    h->xg[g] = x;
}

static void hc_bound(const hotcold *h, int hot, int g, double x) {
    double bv = INFINITY;
    int bo = 0, bj = 0;
    hc_scan(h, hot, g, x, &bv, &bo, &bj);
}

/* The exact step over every slot (hot counts stored first): the largest error, ties to the lowest source. */
static int hc_pick_all(const hotcold *h, double x) {
    int bj = 0;
    double bv = h->ws[0] * x - h->cs[0];
    for (int j = 1; j < h->np; j++) {
        double e = h->ws[j] * x - h->cs[j];
        if (e > bv || (e == bv && h->orig[j] < h->orig[bj])) { bv = e; bj = j; }
    }
    return bj;
}

static __attribute__((always_inline, target("avx2"))) inline void hc_loop(const problem *p, hotcold *h, const int H,
                                                                           long long s0, long long s1) {
    __m256d c[8], w[8];
    const __m256d one = _mm256_set1_pd(1.0);
    for (int k = 0; k < H / 4; k++) {
        w[k] = _mm256_load_pd(h->ws + 4 * k);
        c[k] = _mm256_load_pd(h->cs + 4 * k);
    }
    const int GP = h->groups;
    for (long long s = s0; s < s1; s++) {
        const double x = (double)s;
        const __m256d vx = _mm256_set1_pd(x);
        __m256d e[8], q[8];
        for (int k = 0; k < H / 4; k++) e[k] = _mm256_sub_pd(_mm256_mul_pd(w[k], vx), c[k]);
        __m256d m = e[0];
        for (int k = 1; k < H / 4; k++) m = _mm256_max_pd(m, e[k]);
        m = _mm256_max_pd(m, _mm256_permute2f128_pd(m, m, 1));
        m = _mm256_max_pd(m, _mm256_permute_pd(m, 5)); /* the hot maximum in every lane */
        unsigned bits = 0;
        for (int k = 0; k < H / 4; k++) {
            q[k] = _mm256_cmp_pd(e[k], m, _CMP_EQ_OQ);
            bits |= (unsigned)_mm256_movemask_pd(q[k]) << (4 * k);
        }
        if (__builtin_expect(bits == 0 || (bits & (bits - 1)) != 0, 0)) {
            /* a tie among the hot sources: the exact scan of every source */
            for (int k = 0; k < H / 4; k++) _mm256_store_pd(h->cs + 4 * k, c[k]);
            const int bj = hc_pick_all(h, x);
            h->cs[bj] += 1.0;
            if (bj >= H) hc_bound(h, H, (bj - H) / 4, x);
            for (int k = 0; k < H / 4; k++) c[k] = _mm256_load_pd(h->cs + 4 * k);
            continue;
        }
        int bj = __builtin_ctz(bits), bo = h->orig[bj];
        double bv = _mm256_cvtsd_f64(m);
        const __m256d slack = _mm256_set1_pd(EPS_BOUND * p->wmax * x);
        for (int g = 0; g < GP; g += 4) { /* the bounds of 4 groups at a time */
            __m256d d = _mm256_mul_pd(_mm256_load_pd(h->wg + g), _mm256_sub_pd(vx, _mm256_load_pd(h->xg + g)));
            __m256d b = _mm256_add_pd(_mm256_add_pd(_mm256_load_pd(h->mg + g), d), slack);
            unsigned cold = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(b, m, _CMP_NLT_UQ)); /* >=, or NaN */
            while (__builtin_expect(cold != 0, 0)) { /* scan a group that might reach the hot maximum */
                hc_scan(h, H, g + __builtin_ctz(cold), x, &bv, &bo, &bj);
                cold &= cold - 1;
            }
        }
        if (bj < H) { /* the hot winner: its lane of q is the only one set */
            for (int k = 0; k < H / 4; k++) c[k] = _mm256_add_pd(c[k], _mm256_and_pd(q[k], one));
        } else {
            h->cs[bj] += 1.0;
            hc_bound(h, H, (bj - H) / 4, x);
        }
    }
    for (int k = 0; k < H / 4; k++) _mm256_store_pd(h->cs + 4 * k, c[k]);
}

/* run_hotcold: the steps [s0, s1), s0 >= 1, p->hot = H in {16, 32}, no marks. */
__attribute__((target("avx2"))) static int run_hotcold(const problem *p, int64_t *count, long long s0, long long s1) {
    const int H = p->hot, N = p->n;
    hotcold h;
    h.groups = (((N - H + 3) / 4) + 3) & ~3;
    h.np = H + 4 * h.groups;
    double *buf = aligned_alloc(32, sizeof(double) * (2 * (size_t)h.np + 3 * (size_t)h.groups + 4));
    h.orig = malloc(sizeof(int) * (size_t)h.np);
    if (!buf || !h.orig) { free(buf); free(h.orig); return -1; }
    h.ws = buf;
    h.cs = buf + h.np;
    h.mg = buf + 2 * h.np;
    h.xg = h.mg + h.groups;
    h.wg = h.xg + h.groups;
    for (int j = 0; j < h.np; j++) {
        const int i = j < N ? p->perm[j] : -1;
        h.orig[j] = i >= 0 ? i : INT32_MAX;
        h.ws[j] = i >= 0 ? p->w[i] : 0.0;
        h.cs[j] = i >= 0 ? (double)count[i] : 1e300;
    }
    for (int g = 0; g < h.groups; g++) {
        h.wg[g] = h.ws[H + 4 * g]; /* the heaviest of the group (slots are by weight) */
        hc_bound(&h, H, g, (double)s0);
    }
    if (H == 16) hc_loop(p, &h, 16, s0, s1);
    else hc_loop(p, &h, 32, s0, s1);
    for (int j = 0; j < N; j++) count[h.orig[j]] = (int64_t)h.cs[j];
    free(buf);
    free(h.orig);
    return 0;
}

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return cached;
}
#endif

/* The generic loop for any number of sources (heap arrays). */
static int run_generic(const problem *p, int64_t *count, long long s0, long long s1, long long *mpos) {
    const int N = p->n;
    double *buf = malloc(sizeof(double) * 2 * (size_t)N);
    if (!buf) return -1;
    double *dcount = buf, *dnext = buf + N;
    const double *w = p->w;
    for (int i = 0; i < N; i++) dcount[i] = (double)count[i];
    next_marks(p, count, dnext);
    for (long long s = s0; s < s1; s++) {
        double x = (double)s;
        if (x < 1.0) x = 1.0;
        int best = 0;
        double best_err = w[0] * x - dcount[0];
        for (int i = 1; i < N; i++) {
            double err = w[i] * x - dcount[i];
            if (err > best_err) { best_err = err; best = i; }
        }
        dcount[best] += 1.0;
        note_marks(p, best, dcount, dnext, s, mpos);
    }
    for (int i = 0; i < N; i++) count[i] = (int64_t)dcount[i];
    free(buf);
    return 0;
}

/* Run the steps [s0, s1) from count (updated in place), recording mark positions into mpos. */
static int run(const problem *p, int64_t *count, long long s0, long long s1, long long *mpos) {
#ifdef HAVE_AVX2_KERNEL
    if (p->hot && s1 - s0 >= HOTCOLD_MIN_STEPS) {
        if (s0 < 1 && run_generic(p, count, s0, 1, mpos) != 0) return -1; /* step 0: x = max(0, 1) */
        return run_hotcold(p, count, s0 < 1 ? 1 : s0, s1);
    }
    if (p->simd && p->n >= SIMD_MIN_SOURCES && have_avx2()) return run_avx2(p, count, s0, s1, mpos);
#endif
    if (p->n > MAXN) return run_generic(p, count, s0, s1, mpos);
    double dcount[MAXN], dnext[MAXN], w[MAXN];
    for (int i = 0; i < p->n; i++) {
        dcount[i] = (double)count[i];
        w[i] = p->w[i];
    }
    next_marks(p, count, dnext);
    switch (p->n) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
    }
    for (int i = 0; i < p->n; i++) count[i] = (int64_t)dcount[i];
    return 0;
}

/* Any state with sum(count) = b works as a guess; this one is usually the true state. */
static int guess_state(const problem *p, long long b, int64_t *count) {
    double x = b < 1 ? 1.0 : (double)b;
    double *frac = malloc(sizeof(double) * (size_t)p->n);
    if (!frac) return -1;
    long long total = 0;
    double sum = 0.0;
    for (int i = 0; i < p->n; i++) sum += p->w[i];
    if (!(sum > 0.0) || !isfinite(sum)) sum = 1.0; /* any guess is correct; this one keeps the loops below short */
    for (int i = 0; i < p->n; i++) {
        double f = isfinite(p->w[i]) && p->w[i] > 0.0 ? p->w[i] / sum * x : 0.0;
        count[i] = (int64_t)floor(f);
        frac[i] = f - floor(f);
        total += count[i];
    }
    long long r = b - total;
    if (r > p->n) { /* no usable weights */
        count[0] += r - p->n;
        r = p->n;
    }
    while (r > 0) {
        int best = 0;
        for (int i = 1; i < p->n; i++)
            if (frac[i] > frac[best]) best = i;
        count[best] += 1;
        frac[best] = -1.0;
        r--;
    }
    for (int i = 0; i < p->n && r < 0; i++) { /* rounding only: keep the sum right anyway */
        int64_t take = count[i] < -r ? count[i] : -r;
        count[i] -= take;
        r += take;
    }
    free(frac);
    return 0;
}

/* Snapshot j of a guessed chunk is its state before step s0 + snap_offset[j]: every step for the first NSNAP,
 * then 1/64 further apart each (a guess differing in a rare source meets the true state only once that source
 * draws: measured at 64 log-uniform sources, up to ~17,000 steps). Met once, the two stay equal. */
#define NCHECK (NSNAP + 1024)
#define PARALLEL_MAX_SOURCES 256

static void snap_offsets(long long *off) {
    for (long long j = 0; j < NCHECK; j++) off[j] = j < NSNAP ? j : off[j - 1] + (off[j - 1] / 64 > 1 ? off[j - 1] / 64 : 1);
}

typedef struct {
    const problem *p;
    long long s0, s1;
    int64_t *count;
    long long *mpos;
    const long long *off;
    int64_t *snap; /* the states at s0 + off[j], or NULL for the first chunk */
    long long nsnap;
    int rc;
} chunk;

static void *chunk_main(void *arg) {
    chunk *c = (chunk *)arg;
    const int n = c->p->n;
    long long s = c->s0;
    c->rc = 0;
    for (long long j = 0; c->snap && j < NCHECK && c->s0 + c->off[j] < c->s1; j++) {
        c->rc |= run(c->p, c->count, s, c->s0 + c->off[j], c->mpos);
        s = c->s0 + c->off[j];
        memcpy(c->snap + j * n, c->count, sizeof(int64_t) * n);
        c->nsnap = j + 1;
    }
    c->rc |= run(c->p, c->count, s, c->s1, c->mpos);
    return NULL;
}

static int num_threads(void) {
    const char *env = getenv("NEOX_EPOCH_THREADS");
    long t = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (t < 1) t = 1;
    if (t > MAX_THREADS) t = MAX_THREADS;
    return (int)t;
}

/* Chunk k > 0 after the true state at its start is known (in truth, from chunk k - 1): step the truth to each
 * snapshot until they meet; from there the chunk's own run is the truth. Marks found on the way go to fix. */
static int join_chunk(const chunk *c, int64_t *truth, long long *mpos, long long *fix) {
    const problem *p = c->p;
    const int n = p->n;
    int rc = 0;
    for (Py_ssize_t m = 0; m < p->nm; m++) fix[m] = -1;
    long long s = c->s0, merged = -1;
    for (long long j = 0; j < c->nsnap; j++) {
        rc |= run(p, truth, s, c->s0 + c->off[j], fix);
        s = c->s0 + c->off[j];
        if (memcmp(truth, c->snap + j * n, sizeof(int64_t) * n) == 0) { merged = s; break; }
    }
    if (merged >= 0) {
        memcpy(truth, c->count, sizeof(int64_t) * n);
        for (Py_ssize_t m = 0; m < p->nm; m++) {
            if (fix[m] >= 0) mpos[m] = fix[m];
            else if (c->mpos[m] >= merged) mpos[m] = c->mpos[m];
        }
    } else { /* never met: replay the rest of the chunk from the true state */
        rc |= run(p, truth, s, c->s1, fix);
        for (Py_ssize_t m = 0; m < p->nm; m++)
            if (fix[m] >= 0) mpos[m] = fix[m];
    }
    return rc;
}

/* Exact parallel run of [s0, s1) from count; mpos gets the true mark positions. The plain replay
 * (simd = 0) stays sequential past MAXN sources, as it always was: it is the bench's baseline. */
static int run_parallel(const problem *p, int64_t *count, long long s0, long long s1, long long *mpos) {
    const int T = num_threads(), n = p->n;
    const int fits = n <= MAXN || (p->simd && n <= PARALLEL_MAX_SOURCES);
    if (T < 2 || s1 - s0 < p->parallel_min || !fits) return run(p, count, s0, s1, mpos);
    const Py_ssize_t nm = p->nm;
    chunk ch[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    long long off[NCHECK];
    snap_offsets(off);
    long long *pos_all = malloc(sizeof(long long) * (nm + 1) * (T + 1));
    int64_t *snaps = malloc(sizeof(int64_t) * (size_t)NCHECK * n * T);
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)n * T);
    if (!pos_all || !snaps || !counts) { free(pos_all); free(snaps); free(counts); return -1; }
    int rc = 0;
    for (int k = 0; k < T; k++) {
        ch[k] = (chunk){p, s0 + (s1 - s0) * k / T, s0 + (s1 - s0) * (k + 1) / T, counts + (size_t)n * k,
                        pos_all + (size_t)(nm + 1) * k, off, NULL, 0, 0};
        for (Py_ssize_t m = 0; m < nm; m++) ch[k].mpos[m] = -1;
        if (k == 0) {
            memcpy(ch[k].count, count, sizeof(int64_t) * n);
        } else {
            rc |= guess_state(p, ch[k].s0, ch[k].count);
            ch[k].snap = snaps + (size_t)NCHECK * n * k;
        }
    }
    int started[MAX_THREADS] = {0};
    for (int k = 1; k < T; k++) started[k] = pthread_create(&tid[k], NULL, chunk_main, &ch[k]) == 0;
    chunk_main(&ch[0]);
    for (int k = 1; k < T; k++) {
        if (started[k]) pthread_join(tid[k], NULL);
        else chunk_main(&ch[k]);
    }
    for (int k = 0; k < T; k++) rc |= ch[k].rc;
    /* marks of the first chunk are exact */
    for (Py_ssize_t m = 0; m < nm; m++) mpos[m] = ch[0].mpos[m];
    int64_t *truth = ch[0].count;
    long long *fix = pos_all + (size_t)(nm + 1) * T;
    for (int k = 1; k < T; k++) rc |= join_chunk(&ch[k], truth, mpos, fix);
    memcpy(count, truth, sizeof(int64_t) * n);
    free(pos_all);
    free(snaps);
    free(counts);
    return rc ? -1 : 0;
}

#ifdef HAVE_AVX2_KERNEL
typedef struct {
    double w;
    int i;
} by_weight;

static int heavier_first(const void *a, const void *b) {
    const by_weight *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->i - y->i;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* For a long run of many sources without marks: run_hotcold with 16 or 32 hot sources, or the AVX2 scan of
 * all, whichever is fastest on a trial of HOTCOLD_TRIAL_STEPS steps from the start (on a copy: the trial's
 * steps are not used). All three give the same counts; only their speed depends on the weights (the hot
 * loop wins when a few sources carry most of the weight, the full scan when many weights are alike). */
static void choose_kernel(problem *p, const int64_t *count, long long start, long long stop, int force) {
    p->hot = 0;
    if (!p->simd || p->nm || p->n <= MAXN || p->n > 4096 || !have_avx2()) return;
    if (force < 0 && stop - start < (1LL << 20)) return;
    by_weight *order = malloc(sizeof(by_weight) * (size_t)p->n);
    int64_t *trial = malloc(sizeof(int64_t) * (size_t)p->n);
    p->perm = malloc(sizeof(int) * (size_t)p->n);
    if (!order || !trial || !p->perm) { free(order); free(trial); free(p->perm); p->perm = NULL; return; }
    int ok = 1;
    p->wmax = 0.0;
    for (int i = 0; i < p->n; i++) {
        ok &= isfinite(p->w[i]) && p->w[i] >= 0.0;
        order[i] = (by_weight){p->w[i], i};
        if (p->w[i] > p->wmax) p->wmax = p->w[i];
    }
    qsort(order, (size_t)p->n, sizeof(by_weight), heavier_first);
    for (int i = 0; i < p->n; i++) p->perm[i] = order[i].i;
    const int candidates[3] = {0, 16, 32};
    double best = INFINITY;
    int choice = 0;
    const long long s0 = start < 1 ? 1 : start;
    for (int k = 0; k < 3 && ok && force < 0; k++) {
        if (candidates[k] + 4 > p->n) continue;
        memcpy(trial, count, sizeof(int64_t) * (size_t)p->n);
        if (start < 1) run_generic(p, trial, 0, 1, NULL);
        p->hot = candidates[k];
        double t = seconds();
        int rc = candidates[k] ? run_hotcold(p, trial, s0, s0 + HOTCOLD_TRIAL_STEPS)
                               : run_avx2(p, trial, s0, s0 + HOTCOLD_TRIAL_STEPS, NULL);
        t = seconds() - t;
        if (rc == 0 && t < best) { best = t; choice = candidates[k]; }
    }
    p->hot = !ok ? 0 : force >= 0 ? force : choice;
    free(order);
    free(trial);
}
#endif

static int read_ll_pair(PyObject *pair, long long *a, long long *b) {
    PyObject *seq = PySequence_Fast(pair, "marks must hold (source, count) pairs");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 2) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "marks must hold (source, count) pairs");
        return -1;
    }
    *a = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, 0));
    *b = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, 1));
    Py_DECREF(seq);
    return PyErr_Occurred() ? -1 : 0;
}

/* simd 0: the plain replay. forced: the hot count comes last in args (-1: chosen; 0, 16, 32: that loop, for
 * tests), runs split over threads from 2^16 steps. */
static PyObject *advance_impl(PyObject *args, int simd, int forced) {
    PyObject *weights_obj, *counts_obj, *marks_obj;
    long long start, stop;
    int force = -1;
    if (!PyArg_ParseTuple(args, forced ? "OLOLOi" : "OLOLO", &weights_obj, &start, &counts_obj, &stop, &marks_obj,
                          &force))
        return NULL;

    PyObject *wseq = PySequence_Fast(weights_obj, "weights must be a sequence");
    if (!wseq) return NULL;
    PyObject *cseq = PySequence_Fast(counts_obj, "counts must be a sequence");
    if (!cseq) { Py_DECREF(wseq); return NULL; }
    PyObject *mseq = PySequence_Fast(marks_obj, "marks must be a sequence");
    if (!mseq) { Py_DECREF(wseq); Py_DECREF(cseq); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(wseq);
    Py_ssize_t nm = PySequence_Fast_GET_SIZE(mseq);
    if (n < 1 || n > 1000000 || PySequence_Fast_GET_SIZE(cseq) != n) {
        Py_DECREF(wseq); Py_DECREF(cseq); Py_DECREF(mseq);
        PyErr_SetString(PyExc_ValueError, "weights and counts must be non-empty and of equal length");
        return NULL;
    }
    problem p;
    p.n = (int)n;
    double *wbuf = malloc(sizeof(double) * n);
    int64_t *count = malloc(sizeof(int64_t) * n);
    p.w = wbuf;
    long long *msrc = malloc(sizeof(long long) * (nm + 1));
    long long *mcnt = malloc(sizeof(long long) * (nm + 1));
    long long *mpos = malloc(sizeof(long long) * (nm + 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        p.w[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(wseq, i));
        count[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(cseq, i));
    }
    int failed = PyErr_Occurred() != NULL;
    for (Py_ssize_t k = 0; k < nm && !failed; k++) {
        failed = read_ll_pair(PySequence_Fast_GET_ITEM(mseq, k), &msrc[k], &mcnt[k]) != 0;
        mpos[k] = -1;
    }
    Py_DECREF(wseq); Py_DECREF(cseq); Py_DECREF(mseq);
    p.nm = nm;
    p.simd = simd;
    for (Py_ssize_t i = 0; i < n; i++) /* a NaN or infinite weight: the plain loop's comparisons decide */
        if (!isfinite(p.w[i])) p.simd = 0;
    p.msrc = msrc;
    p.mcnt = mcnt;
    p.hot = 0;
    p.perm = NULL;
    p.wmax = 0.0;
    p.parallel_min = forced ? 1LL << 16 : PARALLEL_MIN_STEPS;
    if (force >= 0 && force != 0 && force != 16 && force != 32) {
        PyErr_SetString(PyExc_ValueError, "hot must be -1, 0, 16 or 32");
        failed = 1;
    }
    if (failed) { free(msrc); free(mcnt); free(mpos); free(wbuf); free(count); return NULL; }

    int rc;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_AVX2_KERNEL
    choose_kernel(&p, count, start, stop, force);
#endif
    rc = run_parallel(&p, count, start, stop, mpos);
    Py_END_ALLOW_THREADS
    free(p.perm);
    if (rc != 0) { free(msrc); free(mcnt); free(mpos); free(wbuf); free(count); return PyErr_NoMemory(); }

    PyObject *out_counts = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(out_counts, i, PyLong_FromLongLong(count[i]));
    PyObject *positions = PyList_New(nm);
    for (Py_ssize_t k = 0; k < nm; k++) PyList_SET_ITEM(positions, k, PyLong_FromLongLong(mpos[k]));
    free(msrc); free(mcnt); free(mpos); free(wbuf); free(count);
    return Py_BuildValue("(NN)", out_counts, positions);
}

static PyObject *advance(PyObject *self, PyObject *args) { return advance_impl(args, 1, 0); }

static PyObject *advance_plain(PyObject *self, PyObject *args) { return advance_impl(args, 0, 0); }

static PyObject *advance_kernel(PyObject *self, PyObject *args) { return advance_impl(args, 1, 1); }

static PyMethodDef methods[] = {
    {"advance", advance, METH_VARARGS, "advance(weights, start, counts, stop, marks) -> (counts, positions)"},
    {"advance_plain", advance_plain, METH_VARARGS,
     "advance without the AVX2 loop: the plain scalar replay (the test oracle and the bench's baseline)"},
    {"advance_kernel", advance_kernel, METH_VARARGS,
     "advance_kernel(weights, start, counts, stop, marks, hot): advance with run_hotcold's hot count forced (0: the AVX2 "
     "scan; 16 or 32; -1: chosen) and runs split over threads from 2^16 steps (for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_greedy", "Exact greedy blend counting.", -1, methods};

PyMODINIT_FUNC PyInit__greedy(void) { return PyModule_Create(&module); }
