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
 * Long runs are split over threads without giving up exactness. Chunk k > 0 starts from a GUESSED
 * state (the largest-remainder rounding of w * b_k) and keeps snapshots of its first steps. Once the
 * true state at b_k is known (the end of chunk k-1), it is stepped forward until it equals the
 * chunk's snapshot at the same step; from there the two trajectories are the same deterministic
 * sequence, so the chunk's end state and later marks are exact. If they never meet within the
 * snapshots, the chunk is replayed sequentially from the true state. (In practice they meet within
 * a step or two.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXN 16
#define NSNAP 4096
#define MAX_THREADS 8
#define PARALLEL_MIN_STEPS 8000000LL
/* measured (paired, 2 threads): the AVX2 loop is 1.16-1.19x slower than the unrolled scalar loops at 9-10 sources,
 * 1.20x faster at 11 and 1.29x at 16 (log-uniform weights; 1.54x and 1.24x with equal weights) */
#define SIMD_MIN_SOURCES 11

typedef struct {
    int n;
    int simd; /* 0: the plain scalar loops only (the test oracle and the bench's baseline) */
    double *w;
    Py_ssize_t nm;
    const long long *msrc;
    const long long *mcnt;
} problem;

/* Record the step of every mark (source, count) just reached; return the source's next mark count. */
static int64_t hit_mark(const problem *p, int best, int64_t cnt, long long s, long long *mpos) {
    int64_t nxt = INT64_MAX;
    for (Py_ssize_t k = 0; k < p->nm; k++) {
        if (p->msrc[k] != best) continue;
        if (p->mcnt[k] == cnt) mpos[k] = s;
        else if (p->mcnt[k] > cnt && p->mcnt[k] < nxt) nxt = p->mcnt[k];
    }
    return nxt;
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
            if (dcount[best] == dnext[best]) {                                                  \
                int64_t nx = hit_mark(p, best, (int64_t)dcount[best], s, mpos);                 \
                dnext[best] = nx == INT64_MAX ? 1e300 : (double)nx;                             \
            }                                                                                   \
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
        if (dcount[best] == dnext[best]) {
            int64_t nx = hit_mark(p, best, (int64_t)dcount[best], s, mpos);
            dnext[best] = nx == INT64_MAX ? 1e300 : (double)nx;
        }
    }
    for (int i = 0; i < N; i++) count[i] = (int64_t)dcount[i];
    free(buf);
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
        if (dcount[best] == dnext[best]) {
            int64_t nx = hit_mark(p, best, (int64_t)dcount[best], s, mpos);
            dnext[best] = nx == INT64_MAX ? 1e300 : (double)nx;
        }
    }
    for (int i = 0; i < N; i++) count[i] = (int64_t)dcount[i];
    free(buf);
    return 0;
}

/* Run the steps [s0, s1) from count (updated in place), recording mark positions into mpos. */
static int run(const problem *p, int64_t *count, long long s0, long long s1, long long *mpos) {
#ifdef HAVE_AVX2_KERNEL
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
static void guess_state(const problem *p, long long b, int64_t *count) {
    double x = b < 1 ? 1.0 : (double)b;
    double frac[MAXN];
    long long total = 0;
    for (int i = 0; i < p->n; i++) {
        double f = p->w[i] * x;
        count[i] = (int64_t)floor(f);
        frac[i] = f - floor(f);
        total += count[i];
    }
    long long r = b - total;
    while (r > 0) {
        int best = 0;
        for (int i = 1; i < p->n; i++)
            if (frac[i] > frac[best]) best = i;
        count[best] += 1;
        frac[best] = -1.0;
        r--;
    }
    while (r < 0) { /* cannot happen for normalized weights; keep the sum right anyway */
        for (int i = 0; i < p->n && r < 0; i++)
            if (count[i] > 0) { count[i] -= 1; r++; }
    }
}

typedef struct {
    const problem *p;
    long long s0, s1;
    int64_t count[MAXN];
    long long *mpos;
    int64_t *snap; /* NSNAP states (the state before step s0 + j), or NULL for the first chunk */
    long long nsnap;
} chunk;

static void *chunk_main(void *arg) {
    chunk *c = (chunk *)arg;
    long long s = c->s0;
    if (c->snap) {
        c->nsnap = c->s1 - c->s0 < NSNAP ? c->s1 - c->s0 : NSNAP;
        for (long long j = 0; j < c->nsnap; j++, s++) {
            memcpy(c->snap + j * c->p->n, c->count, sizeof(int64_t) * c->p->n);
            run(c->p, c->count, s, s + 1, c->mpos);
        }
    }
    run(c->p, c->count, s, c->s1, c->mpos);
    return NULL;
}

static int num_threads(void) {
    const char *env = getenv("NEOX_EPOCH_THREADS");
    long t = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (t < 1) t = 1;
    if (t > MAX_THREADS) t = MAX_THREADS;
    return (int)t;
}

/* Exact parallel run of [s0, s1) from count; mpos gets the true mark positions. */
static int run_parallel(const problem *p, int64_t *count, long long s0, long long s1, long long *mpos) {
    int T = num_threads();
    if (T < 2 || s1 - s0 < PARALLEL_MIN_STEPS || p->n > MAXN) return run(p, count, s0, s1, mpos);
    int n = p->n;
    Py_ssize_t nm = p->nm;
    chunk ch[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    long long *pos_all = malloc(sizeof(long long) * (nm + 1) * T);
    int64_t *snaps = malloc(sizeof(int64_t) * (size_t)NSNAP * n * T);
    if (!pos_all || !snaps) { free(pos_all); free(snaps); return -1; }
    for (int k = 0; k < T; k++) {
        ch[k].p = p;
        ch[k].s0 = s0 + (s1 - s0) * k / T;
        ch[k].s1 = s0 + (s1 - s0) * (k + 1) / T;
        ch[k].mpos = pos_all + (size_t)(nm + 1) * k;
        for (Py_ssize_t m = 0; m < nm; m++) ch[k].mpos[m] = -1;
        ch[k].nsnap = 0;
        if (k == 0) {
            memcpy(ch[k].count, count, sizeof(int64_t) * n);
            ch[k].snap = NULL;
        } else {
            guess_state(p, ch[k].s0, ch[k].count);
            ch[k].snap = snaps + (size_t)NSNAP * n * k;
        }
    }
    int started[MAX_THREADS] = {0};
    for (int k = 1; k < T; k++) started[k] = pthread_create(&tid[k], NULL, chunk_main, &ch[k]) == 0;
    chunk_main(&ch[0]);
    for (int k = 1; k < T; k++) {
        if (started[k]) pthread_join(tid[k], NULL);
        else chunk_main(&ch[k]);
    }
    /* marks of the first chunk are exact */
    for (Py_ssize_t m = 0; m < nm; m++) mpos[m] = ch[0].mpos[m];
    int64_t truth[MAXN];
    memcpy(truth, ch[0].count, sizeof(int64_t) * n);
    long long *fix = malloc(sizeof(long long) * (nm + 1));
    for (int k = 1; k < T; k++) {
        for (Py_ssize_t m = 0; m < nm; m++) fix[m] = -1;
        long long s = ch[k].s0, merged = -1;
        for (long long j = 0; j < ch[k].nsnap; j++, s++) {
            if (memcmp(truth, ch[k].snap + j * n, sizeof(int64_t) * n) == 0) { merged = s; break; }
            run(p, truth, s, s + 1, fix);
        }
        if (merged >= 0) {
            memcpy(truth, ch[k].count, sizeof(int64_t) * n);
            for (Py_ssize_t m = 0; m < nm; m++) {
                if (fix[m] >= 0) mpos[m] = fix[m];
                else if (ch[k].mpos[m] >= merged) mpos[m] = ch[k].mpos[m];
            }
        } else { /* never met: replay the rest of the chunk from the true state */
            run(p, truth, s, ch[k].s1, fix);
            for (Py_ssize_t m = 0; m < nm; m++)
                if (fix[m] >= 0) mpos[m] = fix[m];
        }
    }
    memcpy(count, truth, sizeof(int64_t) * n);
    free(fix);
    free(pos_all);
    free(snaps);
    return 0;
}

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

static PyObject *advance_impl(PyObject *args, int simd) {
    PyObject *weights_obj, *counts_obj, *marks_obj;
    long long start, stop;
    if (!PyArg_ParseTuple(args, "OLOLO", &weights_obj, &start, &counts_obj, &stop, &marks_obj)) return NULL;

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
    if (failed) { free(msrc); free(mcnt); free(mpos); free(wbuf); free(count); return NULL; }
    p.nm = nm;
    p.simd = simd;
    p.msrc = msrc;
    p.mcnt = mcnt;

    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_parallel(&p, count, start, stop, mpos);
    Py_END_ALLOW_THREADS
    if (rc != 0) { free(msrc); free(mcnt); free(mpos); free(wbuf); free(count); return PyErr_NoMemory(); }

    PyObject *out_counts = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(out_counts, i, PyLong_FromLongLong(count[i]));
    PyObject *positions = PyList_New(nm);
    for (Py_ssize_t k = 0; k < nm; k++) PyList_SET_ITEM(positions, k, PyLong_FromLongLong(mpos[k]));
    free(msrc); free(mcnt); free(mpos); free(wbuf); free(count);
    return Py_BuildValue("(NN)", out_counts, positions);
}

static PyObject *advance(PyObject *self, PyObject *args) { return advance_impl(args, 1); }

static PyObject *advance_plain(PyObject *self, PyObject *args) { return advance_impl(args, 0); }

static PyMethodDef methods[] = {
    {"advance", advance, METH_VARARGS, "advance(weights, start, counts, stop, marks) -> (counts, positions)"},
    {"advance_plain", advance_plain, METH_VARARGS,
     "advance without the AVX2 loop: the plain scalar replay (the test oracle and the bench's baseline)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_greedy", "Exact greedy blend counting.", -1, methods};

PyMODINIT_FUNC PyInit__greedy(void) { return PyModule_Create(&module); }
