/* Hot loops of `neox-epoch audit` (neox_epoch/audit/validate.py, exposure.py), optional: the audit
 * falls back to numpy (same answers, slower) when this module is not built.
 *
 * Plain CPython C API with the buffer protocol (no numpy headers). Integer buffers of item size 1, 2,
 * 4 or 8; signedness from the buffer's format character (lower case: signed).
 *
 * scatter(v, j0, store, runs) -> -1 | i
 *     store[v[i]] = value of index j0+i: `val` of the run (a, b, val) holding it, else 1. Returns the
 *     first i with v[i] outside [0, len(store)-1) (nothing written for that chunk then).
 * perm_hash(v, j0, S) -> (bad, h1, h2)
 *     bad: first i with v[i] outside [0, S) (-1: none); sums mod 2^64 of h1: mix(v[i]) - mix(j0 + i)
 *     (a 64-bit mixer), h2: v[i] - (j0 + i); both 0 over a whole permutation of [0, S).
 * doc_scan(d) -> (min, max, h): h = sum mod 2^64 of mix(d[i]) (the mixer of perm_hash).
 * mix_range(lo, hi) -> sum mod 2^64 of mix(x), x in [lo, hi): E * it = h over an index holding each id E times.
 * count_add(d, lo, counts): counts[d[i] - lo] += 1.
 * sum_i32(v) -> (int64 sum, number of zeros) of a contiguous int32 array.
 * finish_store(store) -> (missing, first_missing)
 *     zeros among store[:S] (S = len - 1); then store[:S] -= 1 and store[S] = 0.
 * changes(c) -> number of k in [1, len) with c[k] != c[k-1].
 * stream(doc, lo, sizes, acc, shift, base, c, L, S, cb_out, s_out, head, log, n_log[, split_at, split_base,
 *        pk, bias, inl, n_log2]) -> (base, n_log, seam_ok[, n_log2])
 *     per copy i (document d = doc[i] - lo): s_out[i] = sizes[d], cb_out[i] = stream position of its
 *     first token; acc[d] += 1 | (c[min(cb/L, S)] << shift). With c given, every sample boundary
 *     strictly inside the copy where the draw count changes is a log entry (offset in the document,
 *     change, previous entry of d), linked per document from head[d] (-1 ends). log: [cap, 3], or with
 *     pk > 0 [cap, 2]: ((offset << pk) + change + bias, previous entry). inl (pk > 0): per document, its first
 *     entry packed (0: none; never 0 else), taken instead of a log entry when still 0. n_log2 >= 0: the log
 *     is two regions (the second from cap / 2), one per thread, n_log and n_log2 their next free entries.
 *     kchg (optional, sorted int64): every k in [1, S] with c[k] != c[k-1]; when given, a copy with no such
 *     k inside skips the logging steps (worth it when changes are few).
 * stream_aff(doc, lo, sizes, base, L, S, cb_out, s_out, split_at, split_base, K, dflt, aff, n_aff, n_aff2)
 *     -> (base, n_aff, seam_ok, n_aff2): `stream` without counts, listing (document, position, size) of each
 *     copy overlapping a sample of K (sorted; with dflt also those past S * L) in aff's two regions.
 * pair_init(sizes, rec) -> the largest size: rec[d] = (no copy yet << 24) | sizes[d] (uint64).
 * stream_pair(doc, lo, sizes, rec, base, c, L, S, cb_out, s_out, split_at, split_base, hist, stats)
 *     -> (base, seam_ok): `stream` when every document is there exactly once (rec None) or twice (rec from
 *     pair_init): each document's exposure is complete at its last copy and goes straight into the token
 *     and document histograms hist [2, 2, H] and the unseen / partial counts stats [2, 2] (one row a thread).
 * rows_before(rows, q1) -> first k with rows[k, 0] >= q1 (rows sorted on column 0).
 * check_block(rows, prev_p) -> (first row going back or -1, first negative offset or -1)
 * check_rows(rows, q0, row0, L, cb, s) -> first k with rows[k,1] > s[p] or cb[p] + rows[k,1] != (row0+k)*L
 *     (p = rows[k,0] - q0), else -1.
 * doc_stats(acc, shift, sizes) -> (documents, tokens, epochs, first_absent, first_other, other_copies)
 * fill(buf, pattern)
 *     buf (contiguous bytes, a whole number of patterns) = the pattern repeated; two threads when large.
 * finalize(sizes, acc, shift, head, log, d0, d1, hist_tokens, hist_docs, mn, mx, tot[, pk, bias, inl])
 *     -> (unseen, partial)
 *     per document of [d0, d1): its exposure as a step function over its tokens (base counts of all
 *     copies plus the steps of its non-uniform copies), added to the token histogram (weighted by
 *     tokens) and, at its minimum, to the document histogram; mn/mx/tot (or None) get min, max, sum.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    char *buf;
    Py_ssize_t n;       /* elements */
    Py_ssize_t st;      /* bytes from one element to the next (1-D views may be strided: a field of records) */
    int size;           /* item size */
    int is_signed;
    int held;
} Arr;

static void arr_release(Arr *a) {
    if (a->held) PyBuffer_Release(&a->view);
    a->held = 0;
}

static int arr_get(PyObject *o, Arr *a, int writable, const char *name) {
    memset(a, 0, sizeof(*a));
    if (o == Py_None) return 0;
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &a->view, flags) < 0) return -1;
    a->held = 1;
    if (a->view.ndim > 1 && !PyBuffer_IsContiguous(&a->view, 'C')) {
        PyErr_Format(PyExc_TypeError, "%s: a C-contiguous buffer is needed", name);
        arr_release(a);
        return -1;
    }
    if (a->view.ndim == 1 && a->view.shape[0] > 1 && a->view.strides[0] <= 0) {
        PyErr_Format(PyExc_TypeError, "%s: a positive stride is needed", name);
        arr_release(a);
        return -1;
    }
    const char *f = a->view.format ? a->view.format : "B";
    while (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!') f++;
    int sz = (int)a->view.itemsize;
    if ((sz != 1 && sz != 2 && sz != 4 && sz != 8) || strchr("bBhHiIlLqQ", *f) == NULL || *f == 0) {
        PyErr_Format(PyExc_TypeError, "%s: an integer buffer is needed (format %s)", name, a->view.format);
        arr_release(a);
        return -1;
    }
    a->size = sz;
    a->is_signed = (*f >= 'a' && *f <= 'z');
    a->buf = (char *)a->view.buf;
    a->n = a->view.len / sz;
    a->st = sz;
    if (a->view.ndim == 1) {
        a->n = a->view.shape[0];
        if (a->n > 1) a->st = a->view.strides[0];
    }
    return 0;
}

#define AT(a, i) ((a)->buf + (Py_ssize_t)(i) * (a)->st)

static inline int64_t get(const Arr *a, Py_ssize_t i) {
    const char *p = AT(a, i);
    switch (a->size) {
    case 1: return a->is_signed ? (int64_t)*(const int8_t *)p : (int64_t)*(const uint8_t *)p;
    case 2: return a->is_signed ? (int64_t)*(const int16_t *)p : (int64_t)*(const uint16_t *)p;
    case 4: return a->is_signed ? (int64_t)*(const int32_t *)p : (int64_t)*(const uint32_t *)p;
    default: return *(const int64_t *)p;
    }
}

static inline void set(Arr *a, Py_ssize_t i, int64_t v) {
    char *p = AT(a, i);
    switch (a->size) {
    case 1: *(uint8_t *)p = (uint8_t)v; break;
    case 2: *(uint16_t *)p = (uint16_t)v; break;
    case 4: *(uint32_t *)p = (uint32_t)v; break;
    default: *(int64_t *)p = v; break;
    }
}

static inline uint64_t getu(const Arr *a, Py_ssize_t i) {
    const char *p = AT(a, i);
    switch (a->size) {
    case 1: return *(const uint8_t *)p;
    case 2: return *(const uint16_t *)p;
    case 4: return *(const uint32_t *)p;
    default: return *(const uint64_t *)p;
    }
}

static inline int contig(const Arr *a) { return a->st == a->size; }

#define RELEASE(...) do { Arr *_l[] = {__VA_ARGS__}; for (size_t _k = 0; _k < sizeof(_l) / sizeof(_l[0]); _k++) arr_release(_l[_k]); } while (0)

/* ------------------------------------------------------------------ threads */

/* Work of at least this many entries is split between two threads (the caller may lower it: tests). */
static long long par_min = 1 << 16;

typedef void *(*job_fn)(void *);

/* Runs f(a) on a new thread and f(b) on this one; f(a) alone when no thread can be started. */
static void run2(job_fn f, void *a, void *b) {
    pthread_t t;
    if (pthread_create(&t, NULL, f, b) == 0) {
        f(a);
        pthread_join(t, NULL);
    } else {
        f(a);
        f(b);
    }
}

/* Runs job a over its range [lo, hi), or, when that holds at least 2 * par_min entries, a over the first half
 * and b over the second on two threads: *a_end and *b_start (fields of a and b) are set to the middle first.
 * 1 when split. */
static int run_halves(job_fn f, void *a, void *b, int64_t lo, int64_t hi, int64_t *a_end, int64_t *b_start) {
    if (hi - lo < 2 * par_min) {
        f(a);
        return 0;
    }
    *a_end = *b_start = lo + (hi - lo) / 2;
    run2(f, a, b);
    return 1;
}

/* ------------------------------------------------------------------ scatter */

#define MAXRUNS 64
#define PF_SCATTER 64

typedef struct {
    const Arr *v;
    Arr *st;
    int64_t i0, i1, j0;
    int nr;
    const long long *ra, *rb, *rv;
} ScJob;

static void *scatter_job(void *arg) {
    ScJob *j = (ScJob *)arg;
    const Arr *v = j->v;
    Arr *st = j->st;
    int fast = st->size == 1 && contig(st) && v->size == 4 && !v->is_signed && contig(v);
    int64_t i = j->i0, n = j->i1;
    /* the range split at the runs' edges: a constant value per piece */
    while (i < n) {
        int64_t jj = j->j0 + i, stop = n, val = 1;
        for (int k = 0; k < j->nr; k++) {
            if (jj >= j->ra[k] && jj < j->rb[k]) { val = j->rv[k]; if (j->rb[k] - j->j0 < stop) stop = j->rb[k] - j->j0; }
            else if (j->ra[k] > jj && j->ra[k] - j->j0 < stop) stop = j->ra[k] - j->j0;
        }
        if (fast) {
            const uint32_t *vv = (const uint32_t *)v->buf;
            uint8_t *s8 = (uint8_t *)st->buf, b = (uint8_t)val;
            for (; i < stop; i++) {
                if (i + PF_SCATTER < stop) __builtin_prefetch(s8 + vv[i + PF_SCATTER], 1, 3);
                /* a damaged (non-permutation) shuffle can name a sample twice, on both threads: it is
                   reported as such, and the relaxed store keeps that race defined */
                __atomic_store_n(s8 + vv[i], b, __ATOMIC_RELAXED);
            }
        } else {
            for (; i < stop; i++) set(st, (Py_ssize_t)get(v, i), val);
        }
    }
    return NULL;
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    PyObject *vo, *so, *runs;
    long long j0;
    if (!PyArg_ParseTuple(args, "OLOO", &vo, &j0, &so, &runs)) return NULL;
    Arr v, st;
    if (arr_get(vo, &v, 0, "v") < 0) return NULL;
    if (arr_get(so, &st, 1, "store") < 0) { RELEASE(&v); return NULL; }
    PyObject *seq = PySequence_Fast(runs, "runs must be a sequence");
    if (!seq) { RELEASE(&v, &st); return NULL; }
    Py_ssize_t nr = PySequence_Fast_GET_SIZE(seq);
    if (nr > MAXRUNS) { Py_DECREF(seq); RELEASE(&v, &st); PyErr_SetString(PyExc_ValueError, "too many runs"); return NULL; }
    long long ra[MAXRUNS], rb[MAXRUNS], rv[MAXRUNS];
    for (Py_ssize_t k = 0; k < nr; k++) {
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "LLL", &ra[k], &rb[k], &rv[k])) {
            Py_DECREF(seq); RELEASE(&v, &st); return NULL;
        }
    }
    Py_DECREF(seq);
    int64_t S = (int64_t)st.n - 1, n = (int64_t)v.n;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    if (v.size == 4 && !v.is_signed && contig(&v)) {
        const uint32_t *vv = (const uint32_t *)v.buf;
        uint32_t mx = 0;
        for (int64_t i = 0; i < n; i++) mx = vv[i] > mx ? vv[i] : mx;
        if ((int64_t)mx >= S) {
            for (int64_t i = 0; i < n; i++) if ((int64_t)vv[i] >= S) { bad = i; break; }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            int64_t x = get(&v, i);
            if (x < 0 || x >= S) { bad = i; break; }
        }
    }
    if (bad < 0) {
        ScJob a = {&v, &st, 0, n, j0, (int)nr, ra, rb, rv}, b = a;
        run_halves(scatter_job, &a, &b, 0, n, &a.i1, &b.i0);
    }
    Py_END_ALLOW_THREADS
    RELEASE(&v, &st);
    return PyLong_FromSsize_t(bad);
}

/* perm_hash(v, j0, S) -> (bad, h1, h2): bad = the first i with v[i] outside [0, S) (-1: none); h1 = the
 * sum mod 2^64 of mix(v[i]) - mix(j0 + i) (mix: splitmix64's finalizer, a bijection spreading every bit),
 * h2 = the sum of v[i] - (j0 + i). Over a whole shuffle index both are 0 for a permutation of [0, S); a
 * damaged one of the same length passes both only by a chance of about 2^-64 (h1) and also needs the
 * ids' plain sum unchanged (h2). */
static inline uint64_t mix1(uint64_t x) {  /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

typedef struct { const Arr *v; int64_t i0, i1, j0, S, bad; uint64_t h1, h2; } PhJob;

/* the 32-bit unsigned loops below have no early exit, so that the compiler vectorizes them (SIMD clones
 * picked at load time where the compiler supports them) */
#if defined(__GNUC__) && __GNUC__ >= 11 && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    defined(__GLIBC__)
#define VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define VEC_CLONES
#endif

VEC_CLONES
static uint64_t hash_u32(const uint32_t *vv, int64_t n, uint64_t k0, uint64_t S, uint64_t *h2out, int *out_of_range) {
    uint64_t h1 = 0, h2 = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t x = vv[i], k = k0 + (uint64_t)i;
        bad |= x >= S;
        h1 += mix1(x) - mix1(k);
        h2 += x - k;
    }
    *h2out = h2;
    *out_of_range = bad != 0;
    return h1;
}

static void *perm_hash_job(void *arg) {
    PhJob *j = (PhJob *)arg;
    uint64_t h1 = 0, h2 = 0;
    if (j->v->size == 4 && !j->v->is_signed && contig(j->v) && j->S >= 0) {
        int oor = 0;
        h1 = hash_u32((const uint32_t *)j->v->buf + j->i0, j->i1 - j->i0, (uint64_t)(j->j0 + j->i0), (uint64_t)j->S, &h2, &oor);
        if (oor) {
            const uint32_t *vv = (const uint32_t *)j->v->buf;
            for (int64_t i = j->i0; i < j->i1; i++) if ((int64_t)vv[i] >= j->S) { j->bad = i; break; }
        }
    } else {
        for (int64_t i = j->i0; i < j->i1; i++) {
            const int64_t x = get(j->v, i);
            if (x < 0 || x >= j->S) { j->bad = i; break; }
            const uint64_t k = (uint64_t)(j->j0 + i);
            h1 += mix1((uint64_t)x) - mix1(k);
            h2 += (uint64_t)x - k;
        }
    }
    j->h1 = h1;
    j->h2 = h2;
    return NULL;
}

static PyObject *perm_hash(PyObject *self, PyObject *args) {
    PyObject *vo;
    long long j0, S;
    if (!PyArg_ParseTuple(args, "OLL", &vo, &j0, &S)) return NULL;
    Arr v;
    if (arr_get(vo, &v, 0, "v") < 0) return NULL;
    int64_t n = (int64_t)v.n;
    PhJob a = {&v, 0, n, j0, S, -1, 0, 0}, b = a;
    Py_BEGIN_ALLOW_THREADS
    if (!run_halves(perm_hash_job, &a, &b, 0, n, &a.i1, &b.i0)) b.i0 = b.i1 = n;
    Py_END_ALLOW_THREADS
    RELEASE(&v);
    int64_t bad = a.bad >= 0 ? a.bad : b.bad;
    return Py_BuildValue("LKK", (long long)bad, (unsigned long long)(a.h1 + b.h1), (unsigned long long)(a.h2 + b.h2));
}

/* doc_scan(d) -> (min, max, h): h = the sum mod 2^64 of mix(d[i]). Over a document index that holds every
 * id of [lo, hi) exactly E times, h = E * mix_range(lo, hi); another multiset of ids matches only by a
 * chance of about 2^-64. */
typedef struct { const Arr *v; int64_t i0, i1, mn, mx; uint64_t h; } DscJob;

VEC_CLONES
static uint64_t scan_i32(const int32_t *vv, int64_t n, int64_t *mn_out, int64_t *mx_out) {
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    uint64_t h = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t x = vv[i];
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        h += mix1((uint64_t)(int64_t)x);
    }
    *mn_out = mn;
    *mx_out = mx;
    return h;
}

static void *doc_scan_job(void *arg) {
    DscJob *j = (DscJob *)arg;
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    uint64_t h = 0;
    if (j->i1 <= j->i0) {
    } else if (j->v->size == 4 && j->v->is_signed && contig(j->v)) {
        h = scan_i32((const int32_t *)j->v->buf + j->i0, j->i1 - j->i0, &mn, &mx);
    } else {
        for (int64_t i = j->i0; i < j->i1; i++) {
            const int64_t x = get(j->v, i);
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
            h += mix1((uint64_t)x);
        }
    }
    j->mn = mn; j->mx = mx; j->h = h;
    return NULL;
}

static PyObject *doc_scan(PyObject *self, PyObject *args) {
    PyObject *vo;
    if (!PyArg_ParseTuple(args, "O", &vo)) return NULL;
    Arr v;
    if (arr_get(vo, &v, 0, "doc") < 0) return NULL;
    const int64_t n = (int64_t)v.n;
    DscJob a = {&v, 0, n, INT64_MAX, INT64_MIN, 0}, b = a;
    b.i0 = b.i1 = n;
    Py_BEGIN_ALLOW_THREADS
    run_halves(doc_scan_job, &a, &b, 0, n, &a.i1, &b.i0);
    Py_END_ALLOW_THREADS
    RELEASE(&v);
    return Py_BuildValue("LLK", (long long)(a.mn < b.mn ? a.mn : b.mn), (long long)(a.mx > b.mx ? a.mx : b.mx),
                         (unsigned long long)(a.h + b.h));
}

typedef struct { int64_t lo, hi; uint64_t h; } MrJob;

static void *mix_range_job(void *arg) {
    MrJob *j = (MrJob *)arg;
    uint64_t h = 0;
    for (int64_t x = j->lo; x < j->hi; x++) h += mix1((uint64_t)x);
    j->h = h;
    return NULL;
}

/* mix_range(lo, hi) -> the sum mod 2^64 of mix(x) for x in [lo, hi) */
static PyObject *mix_range(PyObject *self, PyObject *args) {
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "LL", &lo, &hi)) return NULL;
    if (hi < lo) hi = lo;
    MrJob a = {lo, hi, 0}, b = {hi, hi, 0};
    Py_BEGIN_ALLOW_THREADS
    run_halves(mix_range_job, &a, &b, lo, hi, &a.hi, &b.lo);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("K", (unsigned long long)(a.h + b.h));
}

/* count_add(d, lo, counts): counts[d[i] - lo] += 1 (one thread; ids checked by the caller) */
static PyObject *count_add(PyObject *self, PyObject *args) {
    PyObject *vo, *co;
    long long lo;
    if (!PyArg_ParseTuple(args, "OLO", &vo, &lo, &co)) return NULL;
    Arr v, cnt;
    if (arr_get(vo, &v, 0, "doc") < 0) return NULL;
    if (arr_get(co, &cnt, 1, "counts") < 0) { RELEASE(&v); return NULL; }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < v.n; i++) {
        const int64_t k = get(&v, i) - lo;
        if (k < 0 || k >= cnt.n) { bad = 1; break; }
        set(&cnt, k, get(&cnt, k) + 1);
    }
    Py_END_ALLOW_THREADS
    RELEASE(&v, &cnt);
    if (bad) { PyErr_SetString(PyExc_ValueError, "count_add: id outside the counts"); return NULL; }
    Py_RETURN_NONE;
}

typedef struct { const int32_t *v; int64_t i0, i1, sum, zeros; } SumJob;

VEC_CLONES
static int64_t sum_i32_range(const int32_t *v, int64_t i0, int64_t i1, int64_t *zeros) {
    int64_t t = 0, z = 0;
    for (int64_t i = i0; i < i1; i++) {
        t += v[i];
        z += v[i] == 0;
    }
    *zeros = z;
    return t;
}

static void *sum_job(void *arg) {
    SumJob *j = (SumJob *)arg;
    j->sum = sum_i32_range(j->v, j->i0, j->i1, &j->zeros);
    return NULL;
}

/* sum_i32(v) -> (the int64 sum, the number of zeros) of a contiguous int32 array */
static PyObject *sum_i32(PyObject *self, PyObject *args) {
    PyObject *vo;
    if (!PyArg_ParseTuple(args, "O", &vo)) return NULL;
    Arr v;
    if (arr_get(vo, &v, 0, "v") < 0) return NULL;
    if (v.size != 4 || !v.is_signed || !contig(&v)) {
        RELEASE(&v);
        PyErr_SetString(PyExc_TypeError, "sum_i32: a contiguous int32 array is needed");
        return NULL;
    }
    SumJob a = {(const int32_t *)v.buf, 0, v.n, 0, 0}, b = {(const int32_t *)v.buf, v.n, v.n, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    run_halves(sum_job, &a, &b, 0, v.n, &a.i1, &b.i0);
    Py_END_ALLOW_THREADS
    RELEASE(&v);
    return Py_BuildValue("LL", (long long)(a.sum + b.sum), (long long)(a.zeros + b.zeros));
}

static PyObject *finish_store(PyObject *self, PyObject *args) {
    PyObject *so;
    if (!PyArg_ParseTuple(args, "O", &so)) return NULL;
    Arr st;
    if (arr_get(so, &st, 1, "store") < 0) return NULL;
    int64_t S = (int64_t)st.n - 1, missing = 0, first = -1;
    if (st.size == 1 && contig(&st)) {
        uint8_t *s8 = (uint8_t *)st.buf;
        for (int64_t i = 0; i < S; i++) {
            if (s8[i] == 0) { if (first < 0) first = i; missing++; }
        }
        if (!missing) for (int64_t i = 0; i < S; i++) s8[i] -= 1;
    } else {
        for (int64_t i = 0; i < S; i++) if (getu(&st, i) == 0) { if (first < 0) first = i; missing++; }
        if (!missing) for (int64_t i = 0; i < S; i++) set(&st, i, (int64_t)getu(&st, i) - 1);
    }
    if (S >= 0 && !missing) set(&st, S, 0);
    RELEASE(&st);
    return Py_BuildValue("LL", (long long)missing, (long long)first);
}

static PyObject *changes(PyObject *self, PyObject *args) {
    PyObject *co;
    if (!PyArg_ParseTuple(args, "O", &co)) return NULL;
    Arr c;
    if (arr_get(co, &c, 0, "c") < 0) return NULL;
    int64_t n = 0;
    if (c.size == 1 && contig(&c)) {
        const uint8_t *c8 = (const uint8_t *)c.buf;
        for (Py_ssize_t k = 1; k < c.n; k++) n += c8[k] != c8[k - 1];
    } else {
        for (Py_ssize_t k = 1; k < c.n; k++) n += getu(&c, k) != getu(&c, k - 1);
    }
    RELEASE(&c);
    return PyLong_FromLongLong(n);
}

/* ------------------------------------------------------------------ stream */

static inline uint64_t cval(const Arr *c, int64_t k) {
    return c->size == 1 && c->st == 1 ? ((const uint8_t *)c->buf)[k] : getu(c, k);
}

/* Log entries: (offset, change, link) as three integers, or packed as two: (offset << pk) + change + bias,
 * link (pk > 0; the caller checks that every offset and change fits). */
typedef struct { int w, pk; int64_t bias; } LogFmt;

static inline void log_put(Arr *lg, const LogFmt *f, int64_t n, int64_t off, int64_t delta, int64_t link) {
    if (f->pk) {
        set(lg, 2 * n, (int64_t)((uint64_t)off << f->pk) + delta + f->bias);
        set(lg, 2 * n + 1, link);
    } else {
        set(lg, 3 * n, off);
        set(lg, 3 * n + 1, delta);
        set(lg, 3 * n + 2, link);
    }
}
static inline void log_set_link(Arr *lg, const LogFmt *f, int64_t n, int64_t link) { set(lg, f->w * n + f->w - 1, link); }
static inline int64_t log_link(const Arr *lg, const LogFmt *f, int64_t n) { return get(lg, f->w * n + f->w - 1); }
static inline int64_t log_off(const Arr *lg, const LogFmt *f, int64_t n) {
    return f->pk ? get(lg, 2 * n) >> f->pk : get(lg, 3 * n);
}
static inline int64_t log_delta(const Arr *lg, const LogFmt *f, int64_t n) {
    return f->pk ? (get(lg, 2 * n) & (((int64_t)1 << f->pk) - 1)) - f->bias : get(lg, 3 * n + 1);
}

/* The document's first log entry (packed, never 0: its offset is > 0) into its record's inline slot when
 * that is still empty (0); 1 when taken. Both threads may race for it: compare-and-swap then. */
static inline int inl_take(Arr *inl, int64_t d, int64_t v, int atomic) {
    char *ip = AT(inl, d);
    if (inl->size == 4) {
        int32_t z = 0;
        if (!atomic) { if (*(int32_t *)ip) return 0; *(int32_t *)ip = (int32_t)v; return 1; }
        return __atomic_compare_exchange_n((int32_t *)ip, &z, (int32_t)v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    int64_t z = 0;
    if (!atomic) { if (*(int64_t *)ip) return 0; *(int64_t *)ip = v; return 1; }
    return __atomic_compare_exchange_n((int64_t *)ip, &z, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* A document's second change, when its head has no log entry yet, is kept in the head itself, encoded
 * below -1 (-1: nothing; >= 0: the newest log entry; <= -2: a packed entry, the end of the chain). The
 * links of log entries use the same encoding, so a chain may end in an encoded entry. */
#define HEAD_ENC(v) (-(v) - 2)
#define HEAD_DEC(h) (-(h) - 2)

/* One change of document d (a packed entry v > 0) into its record: the inline slot, else the head, else a
 * new log entry at *n_log linked to the old head. 0, or 2 when the log region is full. With `atomic` both
 * threads may add to the same document: compare-and-swap for the slots, exchange for the head. */
static inline int put_change(Arr *inl, Arr *head, Arr *lg, int64_t d, int64_t v, int atomic, int64_t *n_log,
                             int64_t log_end) {
    if (inl_take(inl, d, v, atomic)) return 0;
    char *hp = AT(head, d);
    const int64_t enc = HEAD_ENC(v);
    if (head->size == 4) {
        int32_t none = -1;
        if (atomic ? __atomic_compare_exchange_n((int32_t *)hp, &none, (int32_t)enc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
                   : (*(int32_t *)hp == -1 ? (*(int32_t *)hp = (int32_t)enc, 1) : 0))
            return 0;
    } else {
        int64_t none = -1;
        if (atomic ? __atomic_compare_exchange_n((int64_t *)hp, &none, enc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
                   : (*(int64_t *)hp == -1 ? (*(int64_t *)hp = enc, 1) : 0))
            return 0;
    }
    if (*n_log >= log_end) return 2;
    const int64_t n = (*n_log)++;
    set(lg, 2 * n, v);
    int64_t old;
    if (head->size == 4) {
        if (atomic) old = __atomic_exchange_n((int32_t *)hp, (int32_t)n, __ATOMIC_RELAXED);
        else { old = *(int32_t *)hp; *(int32_t *)hp = (int32_t)n; }
    } else {
        if (atomic) old = __atomic_exchange_n((int64_t *)hp, n, __ATOMIC_RELAXED);
        else { old = *(int64_t *)hp; *(int64_t *)hp = n; }
    }
    set(lg, 2 * n + 1, old);
    return 0;
}

/* copies ahead whose document record is prefetched */
#define PF_STREAM 48

typedef struct {
    const Arr *doc, *sizes, *c;
    Arr *acc, *head, *lg, *inl;
    int64_t lo, L, S, D;
    int shift, atomic;
    int64_t *cbv;
    int32_t *sv;
    int64_t i0, i1, base, log_at, log_end;
    int64_t end, n_log;  /* out: stream position after i1, next free log entry */
    int err;             /* 1: document id outside the sizes, 2: log region full */
    LogFmt fmt;
    const int64_t *kchg; /* sorted k with c[k] != c[k-1] when few (NULL: not given); stream_aff: the samples
                            drawn another number of times than most */
    int64_t nk;
    int64_t *aff;        /* stream_aff: (document, position, size) of each copy touching one of them */
    int64_t aff_n, aff_end;
    int dflt;            /* stream_aff: most samples are drawn at least once (the uncovered tail differs) */
} StJob;

/* first p with K[p] > k (K sorted) */
static int64_t upper(const int64_t *K, int64_t n, int64_t k) {
    int64_t a = 0, b = n;
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (K[m] <= k) a = m + 1; else b = m;
    }
    return a;
}

static void *stream_job(void *arg) {
    StJob *j = (StJob *)arg;
    /* local copies of the descriptors: the stores into the arrays cannot alias them, so their fields stay
       in registers instead of being reloaded after every store */
    Arr l_doc = *j->doc, l_sizes = *j->sizes, l_c = *j->c, l_acc = *j->acc, l_head, l_lg, l_inl;
    memset(&l_head, 0, sizeof(Arr)); memset(&l_lg, 0, sizeof(Arr)); memset(&l_inl, 0, sizeof(Arr));
    if (j->head) l_head = *j->head;
    if (j->lg) l_lg = *j->lg;
    if (j->inl) l_inl = *j->inl;
    const Arr *doc = &l_doc, *sizes = &l_sizes, *c = &l_c;
    Arr *acc = &l_acc, *head = &l_head, *lg = &l_lg, *inl = &l_inl;
    int64_t *const cbv = j->cbv;
    int32_t *const sv = j->sv;
    const int64_t lo = j->lo, L = j->L, S = j->S, D = j->D, i1 = j->i1;
    const int use_inl = inl->held;
    const int logging = c->held, atomic = j->atomic, shift = j->shift;
    /* the size, counts and log head are fields of one record of 8, 16, 32 or 64 bytes, aligned to its size:
       one cache line a document */
    const int counting = acc->held;  /* no acc: the sizes and positions only (a validation) */
    const char *rb = counting ? acc->buf : sizes->buf;
    const Py_ssize_t rs = counting ? acc->st : sizes->st;
    const int one_line = !counting ||
                         ((rs == 8 || rs == 16 || rs == 32 || rs == 64) && ((uintptr_t)rb & (uintptr_t)(rs - 1)) == 0 &&
                          sizes->st == rs && sizes->buf - rb >= 0 && sizes->buf - rb < rs &&
                          (!logging || (head->st == rs && head->buf - rb >= 0 && head->buf - rb < rs)));
    const int doc32 = doc->size == 4 && doc->is_signed && contig(doc);
    const int32_t *d32 = (const int32_t *)doc->buf;
    int64_t base = j->base, n_log = j->log_at;
    const int64_t log_end = j->log_end;
    const LogFmt *fmt = &j->fmt;
    /* k = pos / L by a shift when L is a power of two (positions are >= 0) */
    const int pow2 = L > 0 && (L & (L - 1)) == 0;
    int lsh = 0;
    while (pow2 && ((int64_t)1 << lsh) < L) lsh++;
    /* few changes of c (K given): a copy before the next change takes its count without the logging steps */
    const int64_t *const K = j->kchg, nk = j->nk;
    int64_t kp = -1, knext = INT64_MAX;
    for (int64_t i = j->i0; i < i1; i++) {
        if (i + PF_STREAM < i1) {
            int64_t dp = (doc32 ? d32[i + PF_STREAM] : get(doc, i + PF_STREAM)) - lo;
            if (dp >= 0 && dp < D) {
                /* one record per document holds its size, counts and log head: one line, prefetched once */
                if (counting) __builtin_prefetch(AT(acc, dp), 1, 3);
                else __builtin_prefetch(AT(sizes, dp), 0, 3);
                if (!one_line) {
                    __builtin_prefetch(AT(sizes, dp), 1, 3);
                    if (logging) __builtin_prefetch(AT(head, dp), 1, 3);
                }
            }
        }
        int64_t d = (doc32 ? d32[i] : get(doc, i)) - lo;
        if (d < 0 || d >= D) { j->err = 1; break; }
        int64_t z = *(const int32_t *)AT(sizes, d);
        sv[i] = (int32_t)z;
        cbv[i] = base;
        uint64_t add = 1;
        if (logging) {
            /* the sample holding the copy's first token, and the last boundary k * L <= base + z - 1 */
            const int64_t bb = base < 0 ? 0 : base;
            const int64_t kb = pow2 ? bb >> lsh : bb / L;
            int64_t kl = z > 0 && base + z - 1 >= 0 ? (pow2 ? (base + z - 1) >> lsh : (base + z - 1) / L) : kb;
            const int64_t k0 = kb > S ? S : kb;
            if (kl > S) kl = S;
            const int64_t nb = kl - kb;  /* boundaries strictly inside the copy (<= 0: none) */
            uint64_t c0 = cval(c, k0);
            add |= c0 << shift;
            if (K) {
                if (kp < 0 || knext <= kb) {  /* first copy, or past the change: the next one after kb */
                    kp = upper(K, nk, kb);
                    knext = kp < nk ? K[kp] : INT64_MAX;
                }
                if (kl < knext) goto counted;  /* no change of c inside the copy */
            }
            if (use_inl) {
                /* packed entries: each change goes to the inline slot, the head, or the log (put_change) */
                const int c8 = c->size == 1 && c->st == 1;
                const uint8_t *c8p = (const uint8_t *)c->buf;
                uint64_t prevc = c0;
                if (nb <= 2) {
                    /* a fixed two steps, no branch on the draw counts: the changes into ev, then stored */
                    int64_t ev[2];
                    int ne = 0;
                    for (int t = 0; t < 2; t++) {
                        const int64_t k = kb + 1 + t, kk = k > S ? S : k;
                        const uint64_t ck = c8 ? c8p[kk] : cval(c, kk);
                        const int valid = t < nb;
                        ev[ne] = (int64_t)((uint64_t)(k * L - base) << fmt->pk) + ((int64_t)ck - (int64_t)prevc) + fmt->bias;
                        ne += valid & (ck != prevc);
                        prevc = valid ? ck : prevc;
                    }
                    for (int x = 0; x < ne && !j->err; x++)
                        j->err = put_change(inl, head, lg, d, ev[x], atomic, &n_log, log_end);
                } else {
                    const int64_t last = base + z - 1;
                    for (int64_t k = k0 + 1, kp = kb * L + L; k <= S && kp <= last && !j->err; k++, kp += L) {
                        const uint64_t ck = c8 ? c8p[k] : cval(c, k);
                        if (ck != prevc) {
                            const int64_t v = (int64_t)((uint64_t)(kp - base) << fmt->pk) + ((int64_t)ck - (int64_t)prevc) + fmt->bias;
                            j->err = put_change(inl, head, lg, d, v, atomic, &n_log, log_end);
                        }
                        prevc = ck;
                    }
                }
                if (j->err) break;
            } else if (nb <= 2 && n_log + 2 <= log_end) {
                /* a fixed two steps, no branch on the boundary count or on the draw count changing:
                   each step writes an entry at n_log, kept (n_log advances) when valid and c changes */
                const int64_t first = n_log;
                int64_t prev = -1;  /* the copy's entries link to each other; the first to the old head */
                uint64_t prevc = c0;
                for (int t = 0; t < 2; t++) {
                    const int64_t k = kb + 1 + t, kk = k > S ? S : k;
                    const uint64_t ck = cval(c, kk);
                    const int64_t valid = t < nb;
                    const int64_t ch = valid & (ck != prevc);
                    log_put(lg, fmt, n_log, k * L - base, (int64_t)ck - (int64_t)prevc, prev);
                    prev = ch ? n_log : prev;
                    n_log += ch;
                    prevc = valid ? ck : prevc;
                }
                int kept = n_log > first;
                if (kept && use_inl && inl_take(inl, d, get(lg, 2 * first), atomic)) {
                    /* the document's first entry went into its record: the copy's second (if any) moves
                       into the freed slot */
                    if (n_log - first == 2) {
                        set(lg, 2 * first, get(lg, 2 * first + 2));
                        prev = first;
                        n_log = first + 1;
                    } else {
                        n_log = first;
                        kept = 0;
                    }
                }
                char *hp = AT(head, d);
                int64_t old;
                if (!atomic) {
                    /* without a kept entry the head stays and the link lands in a scratch entry */
                    if (head->size == 4) { old = *(int32_t *)hp; *(int32_t *)hp = (int32_t)(kept ? prev : old); }
                    else { old = *(int64_t *)hp; *(int64_t *)hp = kept ? prev : old; }
                    log_set_link(lg, fmt, first, old);
                } else if (kept) {
                    if (head->size == 4) old = __atomic_exchange_n((int32_t *)hp, (int32_t)prev, __ATOMIC_RELAXED);
                    else old = __atomic_exchange_n((int64_t *)hp, prev, __ATOMIC_RELAXED);
                    log_set_link(lg, fmt, first, old);
                }
            } else if (nb > 0) {
                /* one log entry (offset, delta, previous entry of d) per change of the draw count inside:
                   the boundaries k * L in (base, base + z), k <= S */
                const int64_t last = base + z - 1, kpos = kb * L;
                uint64_t prevc = c0;
                const int64_t first = n_log;
                int64_t prev = -1;  /* the copy's entries link to each other; the first to the old head */
                for (int64_t k = k0 + 1, kp = kpos + L; k <= S && kp <= last; k++, kp += L) {
                    uint64_t ck = cval(c, k);
                    int64_t ch = ck != prevc;
                    /* written whether or not c changes (no branch to mispredict), kept when it does */
                    if (n_log < log_end) {
                        log_put(lg, fmt, n_log, kp - base, (int64_t)ck - (int64_t)prevc, prev);
                    } else if (ch) {
                        j->err = 2;
                        break;
                    }
                    prev = ch ? n_log : prev;
                    n_log += ch;
                    prevc = ck;
                }
                if (j->err) break;
                int64_t link_at = first;
                if (n_log > first && use_inl && inl_take(inl, d, get(lg, 2 * first), atomic)) {
                    /* the first entry went into the record: the slot stays unused, the next one links on */
                    if (n_log - first == 1) n_log = first;
                    else link_at = first + 1;
                }
                if (n_log > first) {
                    char *hp = AT(head, d);
                    int64_t old;
                    if (head->size == 4) {
                        old = atomic ? __atomic_exchange_n((int32_t *)hp, (int32_t)prev, __ATOMIC_RELAXED)
                                     : *(int32_t *)hp;
                        if (!atomic) *(int32_t *)hp = (int32_t)prev;
                    } else {
                        old = atomic ? __atomic_exchange_n((int64_t *)hp, prev, __ATOMIC_RELAXED) : *(int64_t *)hp;
                        if (!atomic) *(int64_t *)hp = prev;
                    }
                    log_set_link(lg, fmt, link_at, old);
                }
                if (j->err) break;
            }
        }
    counted:;
        if (!counting) {
            if (j->aff) {
                /* a copy is affected when a sample it overlaps, [kb, kl], is one of K (or past S while most
                   samples are drawn): its exposure is then computed from it, the others' from the count of most */
                const int64_t bb = base < 0 ? 0 : base;
                const int64_t kb = pow2 ? bb >> lsh : bb / L;
                const int64_t kl = z > 0 && base + z - 1 >= 0 ? (pow2 ? (base + z - 1) >> lsh : (base + z - 1) / L) : kb;
                if (kp < 0 || knext < kb) {
                    kp = upper(K, nk, kb - 1);
                    knext = kp < nk ? K[kp] : INT64_MAX;
                }
                if (knext <= kl || (j->dflt && kl >= S)) {
                    if (j->aff_n < j->aff_end) {
                        int64_t *o = j->aff + 3 * j->aff_n;
                        o[0] = d; o[1] = base; o[2] = z;
                    }
                    j->aff_n++;
                }
            }
            base += z;
            continue;
        }
        char *ap = AT(acc, d);
        if (acc->size == 4) {
            if (atomic) __atomic_fetch_add((uint32_t *)ap, (uint32_t)add, __ATOMIC_RELAXED);
            else *(uint32_t *)ap += (uint32_t)add;
        } else {
            if (atomic) __atomic_fetch_add((uint64_t *)ap, add, __ATOMIC_RELAXED);
            else *(uint64_t *)ap += add;
        }
        base += z;
    }
    j->end = base;
    j->n_log = n_log;
    return NULL;
}

/* changes of c between consecutive samples k-1, k for k in [k0, k1] (clipped to [1, S]) */
static int64_t changes_in(const Arr *c, int64_t k0, int64_t k1, int64_t S) {
    if (k0 < 1) k0 = 1;
    if (k1 > S) k1 = S;
    int64_t n = 0;
    for (int64_t k = k0; k <= k1; k++) n += cval(c, k) != cval(c, k - 1);
    return n;
}

/* After a split stream pass: whether the first part ended where the second started (the position the sample
 * index gave). If not, the sample index disagrees with the sizes: the second part's positions are shifted to
 * what one pass gives (the boundary check then reports the first divergence; the exposure is withheld). */
static int seam_check(int64_t a_end, int64_t *b_end, int64_t *cbv, int64_t split_at, int64_t n, int64_t split_base) {
    if (a_end == split_base) return 1;
    const int64_t fix = a_end - split_base;
    for (int64_t i = split_at; i < n; i++) cbv[i] += fix;
    *b_end += fix;
    return 0;
}

/* Whether a stream chunk of n copies is split between two threads at copy split_at, the second part starting
 * at stream position split_base (both from the sample index; -1: no row there). */
static inline int can_split(int64_t split_at, int64_t split_base, int64_t n) {
    return split_at > 0 && split_at < n && split_base >= 0 && n >= 2 * par_min;
}

/* With split (can_split): runs stream job a over copies [.., split_at) and b over [split_at, n) from position
 * split_base on two threads (the jobs' fields set through the pointers), then the seam check; else a alone
 * (b untouched). 1 when the seam holds (always without a split). */
static int run_split(job_fn f, void *a, void *b, int split, int64_t split_at, int64_t split_base, int64_t n,
                     int64_t *cbv, int64_t *a_i1, int64_t *b_i0, int64_t *b_base, const int64_t *a_end, int64_t *b_end) {
    if (!split) {
        f(a);
        return 1;
    }
    *a_i1 = *b_i0 = split_at;
    *b_base = split_base;
    run2(f, a, b);
    return seam_check(*a_end, b_end, cbv, split_at, n, split_base);
}

static PyObject *stream(PyObject *self, PyObject *args) {
    PyObject *doco, *sizeso, *acco, *co, *cbo, *so, *heado, *lgo, *inlo = Py_None, *ko = Py_None;
    long long lo, base, L, S, n_log, split_at = -1, split_base = 0, bias = 0, n_log2 = -1;
    int shift, pk = 0;
    if (!PyArg_ParseTuple(args, "OLOOiLOLLOOOOL|LLiLOLO", &doco, &lo, &sizeso, &acco, &shift, &base, &co, &L, &S,
                          &cbo, &so, &heado, &lgo, &n_log, &split_at, &split_base, &pk, &bias, &inlo, &n_log2, &ko))
        return NULL;
    Arr doc, sizes, acc, c, cb, s, head, lg, inl, kc;
    memset(&sizes, 0, sizeof(Arr)); memset(&acc, 0, sizeof(Arr)); memset(&c, 0, sizeof(Arr));
    memset(&cb, 0, sizeof(Arr)); memset(&s, 0, sizeof(Arr)); memset(&head, 0, sizeof(Arr));
    memset(&lg, 0, sizeof(Arr)); memset(&inl, 0, sizeof(Arr)); memset(&kc, 0, sizeof(Arr));
    if (arr_get(doco, &doc, 0, "doc") < 0 || arr_get(sizeso, &sizes, 0, "sizes") < 0 ||
        arr_get(acco, &acc, 1, "acc") < 0 || arr_get(co, &c, 0, "c") < 0 || arr_get(cbo, &cb, 1, "cb") < 0 ||
        arr_get(so, &s, 1, "s") < 0 || arr_get(heado, &head, 1, "head") < 0 || arr_get(lgo, &lg, 1, "log") < 0 ||
        arr_get(inlo, &inl, 1, "inl") < 0 || arr_get(ko, &kc, 0, "kchg") < 0) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg, &inl, &kc);
        return NULL;
    }
    if (kc.held && (kc.size != 8 || !contig(&kc))) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg, &inl, &kc);
        PyErr_SetString(PyExc_ValueError, "stream: kchg must be contiguous 64-bit integers");
        return NULL;
    }
    if (inl.held && (!c.held || pk <= 0 || inl.size < lg.size || (inl.size != 4 && inl.size != 8) || inl.n < sizes.n)) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg, &inl, &kc);
        PyErr_SetString(PyExc_ValueError, "stream: unexpected inline buffer");
        return NULL;
    }
    if (sizes.size != 4 || (acc.held && ((acc.size != 4 && acc.size != 8) || acc.n < sizes.n)) || cb.size != 8 ||
        s.size != 4 || cb.n < doc.n || s.n < doc.n || !contig(&cb) || !contig(&s) || (c.held && !acc.held) ||
        (c.held && (!head.held || !lg.held || head.n < sizes.n || (head.size != 4 && head.size != 8) ||
                    !contig(&lg) || c.n < S + 1))) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg, &inl, &kc);
        PyErr_SetString(PyExc_ValueError, "stream: unexpected buffers");
        return NULL;
    }
    LogFmt fmt = {pk > 0 ? 2 : 3, pk > 0 ? pk : 0, pk > 0 ? bias : 0};
    int64_t n = doc.n, cap = lg.n / fmt.w;
    StJob a = {&doc, &sizes, &c, &acc, &head, &lg, &inl, lo, L, S, sizes.n, shift, 0, (int64_t *)cb.buf, (int32_t *)s.buf,
               0, n, base, n_log, cap, 0, 0, 0, fmt, kc.held ? (const int64_t *)kc.buf : NULL, kc.held ? (int64_t)kc.n : 0,
               NULL, 0, 0, 0};
    /* n_log2 >= 0: the log is two regions, one a thread, each filled from its start (no gap between chunks):
       the first part's entries from n_log below cap / 2, the second's from n_log2 */
    const int regions = c.held && n_log2 >= 0;
    if (regions) a.log_end = cap / 2;
    StJob b = a;
    int split = can_split(split_at, split_base, n);
    int seam_ok = 1, err = 0;
    Py_BEGIN_ALLOW_THREADS
    if (split) {
        /* the second part starts at the stream position the sample index gives for entry split_at; its
           log entries go after the most the first part can log (one per change of c in its range) */
        if (regions) {
            b.log_at = n_log2;
            b.log_end = cap;
        } else if (c.held) {
            int64_t need = split_base > base ? changes_in(&c, base / L + 1, (split_base - 1) / L, S) : 0;
            a.log_end = n_log + need < cap ? n_log + need : cap;
            b.log_at = a.log_end;
        }
        a.atomic = b.atomic = 1;
    }
    seam_ok = run_split(stream_job, &a, &b, split, split_at, split_base, n, (int64_t *)cb.buf, &a.i1, &b.i0,
                        &b.base, &a.end, &b.end);
    err = a.err ? a.err : b.err;
    if (err == 2 && !seam_ok) err = 0;
    Py_END_ALLOW_THREADS
    RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg, &inl, &kc);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err == 1 ? "stream: document id outside the sizes" : "stream: log full");
        return NULL;
    }
    if (regions)
        return Py_BuildValue("LLiL", (long long)(split ? b.end : a.end), (long long)a.n_log, seam_ok,
                             (long long)(split ? b.n_log : n_log2));
    return Py_BuildValue("LLi", (long long)(split ? b.end : a.end), (long long)(split ? b.n_log : a.n_log), seam_ok);
}

/* stream_aff(doc, lo, sizes, base, L, S, cb_out, s_out, split_at, split_base, K, dflt, aff, n_aff, n_aff2)
 *     -> (base, n_aff, seam_ok, n_aff2): `stream` without counts (sizes and positions out) that lists in aff
 *     ([rows, 3] int64, two regions as the log: the second from rows / 2) the (document, position, size) of
 *     every copy overlapping a sample of K (sorted int64) or, with dflt, the uncovered tail past S * L. The
 *     counts returned may exceed the regions (nothing written past them): the caller then counts instead. */
static PyObject *stream_aff(PyObject *self, PyObject *args) {
    PyObject *doco, *sizeso, *cbo, *so, *ko, *affo;
    long long lo, base, L, S, split_at, split_base, n_aff, n_aff2;
    int dflt;
    if (!PyArg_ParseTuple(args, "OLOLLLOOLLOiOLL", &doco, &lo, &sizeso, &base, &L, &S, &cbo, &so, &split_at,
                          &split_base, &ko, &dflt, &affo, &n_aff, &n_aff2))
        return NULL;
    Arr doc, sizes, cb, s, kc, af, none;
    memset(&none, 0, sizeof(Arr));
    memset(&sizes, 0, sizeof(Arr)); memset(&cb, 0, sizeof(Arr)); memset(&s, 0, sizeof(Arr));
    memset(&kc, 0, sizeof(Arr)); memset(&af, 0, sizeof(Arr));
    if (arr_get(doco, &doc, 0, "doc") < 0 || arr_get(sizeso, &sizes, 0, "sizes") < 0 || arr_get(cbo, &cb, 1, "cb") < 0 ||
        arr_get(so, &s, 1, "s") < 0 || arr_get(ko, &kc, 0, "K") < 0 || arr_get(affo, &af, 1, "aff") < 0) {
        RELEASE(&doc, &sizes, &cb, &s, &kc, &af);
        return NULL;
    }
    const int64_t n = doc.n, rows = af.n / 3;
    if (L <= 0 || sizes.size != 4 || cb.size != 8 || s.size != 4 || cb.n < n || s.n < n || !contig(&cb) || !contig(&s) ||
        !kc.held || kc.size != 8 || !contig(&kc) || !af.held || af.size != 8 || !contig(&af) || n_aff < 0 ||
        n_aff2 < rows / 2) {
        RELEASE(&doc, &sizes, &cb, &s, &kc, &af);
        PyErr_SetString(PyExc_ValueError, "stream_aff: unexpected buffers");
        return NULL;
    }
    LogFmt fmt = {2, 0, 0};
    StJob a = {&doc, &sizes, &none, &none, NULL, NULL, NULL, lo, L, S, sizes.n, 0, 0, (int64_t *)cb.buf, (int32_t *)s.buf,
               0, n, base, 0, 0, 0, 0, 0, fmt, (const int64_t *)kc.buf, (int64_t)kc.n,
               (int64_t *)af.buf, n_aff, rows / 2, dflt};
    StJob b = a;
    b.aff_n = n_aff2;
    b.aff_end = rows;
    const int split = can_split(split_at, split_base, n);  /* one thread: the second region is untouched */
    int seam_ok, err;
    Py_BEGIN_ALLOW_THREADS
    seam_ok = run_split(stream_job, &a, &b, split, split_at, split_base, n, (int64_t *)cb.buf, &a.i1, &b.i0,
                        &b.base, &a.end, &b.end);
    err = a.err ? a.err : b.err;
    Py_END_ALLOW_THREADS
    RELEASE(&doc, &sizes, &cb, &s, &kc, &af);
    if (err) {
        PyErr_SetString(PyExc_ValueError, "stream: document id outside the sizes");
        return NULL;
    }
    return Py_BuildValue("LLiL", (long long)(split ? b.end : a.end), (long long)a.aff_n, seam_ok,
                         (long long)(split ? b.aff_n : n_aff2));
}

/* ------------------------------------------------------------------ pairs */

/* Every document exactly E = 1 or 2 times (checked by the hash sum before): its exposure is complete at its
 * last copy, so the stream pass computes it there, with no log and no last pass over the documents. E = 2:
 * a record of 8 bytes a document, the size in the low PAIR_ZBITS bits and above it, f (40 bits):
 *   PAIR_NONE                       no copy seen yet;
 *   PAIR_STEPS | b << 14 | c0 << 7 | c1   the first copy's draw counts, c0 on tokens [0, b), c1 on [b, z) (at most
 *                                   one sample boundary inside it and counts below 128: most documents), so
 *                                   the last copy needs no read of c elsewhere;
 *   below PAIR_STEPS                the first copy's stream position (its samples are walked at the last copy).
 * b <= z < 2^24 keeps a steps value below PAIR_NONE. */
#define PAIR_ZBITS 24
#define PAIR_ZMASK ((((uint64_t)1) << PAIR_ZBITS) - 1)
#define PAIR_NONE ((((uint64_t)1) << (64 - PAIR_ZBITS)) - 1)
#define PAIR_STEPS (((uint64_t)1) << (63 - PAIR_ZBITS))
#define PF_PAIR 48

typedef struct { const int32_t *sz; uint64_t *rec; int64_t i0, i1, top; } PInitJob;

static void *pair_init_job(void *arg) {
    PInitJob *j = (PInitJob *)arg;
    int64_t top = 0;
    for (int64_t i = j->i0; i < j->i1; i++) {
        const int64_t z = j->sz[i];
        /* a negative size is reported as too large (no pairs then) */
        const uint64_t zz = z < 0 ? PAIR_ZMASK + 1 : (uint64_t)z;
        if ((int64_t)zz > top) top = (int64_t)zz;
        j->rec[i] = (PAIR_NONE << PAIR_ZBITS) | (zz & PAIR_ZMASK);
    }
    j->top = top;
    return NULL;
}

/* pair_init(sizes, rec) -> the largest size (a negative one counts as 2^24): rec[d] = no copy yet, sizes[d];
 * records hold sizes below 2^24 only (the caller uses them when the result is below). */
static PyObject *pair_init(PyObject *self, PyObject *args) {
    PyObject *so, *ro;
    if (!PyArg_ParseTuple(args, "OO", &so, &ro)) return NULL;
    Arr s, r;
    memset(&r, 0, sizeof(Arr));
    if (arr_get(so, &s, 0, "sizes") < 0 || arr_get(ro, &r, 1, "rec") < 0) {
        RELEASE(&s, &r);
        return NULL;
    }
    if (s.size != 4 || !s.is_signed || !contig(&s) || r.size != 8 || r.is_signed || !contig(&r) || r.n != s.n) {
        RELEASE(&s, &r);
        PyErr_SetString(PyExc_ValueError, "pair_init: contiguous int32 sizes and uint64 records of one length");
        return NULL;
    }
    PInitJob a = {(const int32_t *)s.buf, (uint64_t *)r.buf, 0, s.n, 0}, b = a;
    Py_BEGIN_ALLOW_THREADS
    run_halves(pair_init_job, &a, &b, 0, s.n, &a.i1, &b.i0);
    Py_END_ALLOW_THREADS
    RELEASE(&s, &r);
    return PyLong_FromLongLong(a.top > b.top ? a.top : b.top);
}

typedef struct {
    const Arr *doc, *sizes, *c;
    uint64_t *rec;           /* E = 2: the records; NULL: E = 1 (sizes read from `sizes`) */
    int64_t lo, L, S, D, H;
    int atomic;
    int64_t *cbv;
    int32_t *sv;
    int64_t i0, i1, base;
    int64_t end;             /* out: stream position after i1 */
    int64_t *ht, *hd;        /* histograms of this thread: tokens and documents (at their minimum) by exposure */
    int64_t *st;             /* unseen, partial documents of this thread */
    int err;                 /* 1: document id outside the sizes, 3: an exposure past the histograms */
} PairJob;

/* c of the sample holding stream position p: min(max(p, 0) / L, S), as the stream pass reads it */
static inline int64_t pair_k(int64_t p, int64_t L, int pow2, int lsh) {
    const int64_t q = p < 0 ? 0 : p;
    return pow2 ? q >> lsh : q / L;
}

/* One copy's draw counts over its z tokens: walking its samples from stream position g (walk), or, when at
 * most one sample boundary falls inside it, c0 on [0, b) and c1 on [b, z) (b >= z: none). */
typedef struct { int64_t b, v, k, c1; int walk; } Copy;

static inline int64_t pair_c(const PairJob *j, const uint8_t *c8, int64_t k) {
    const int64_t kk = k < j->S ? k : j->S;
    return c8 ? c8[kk] : (int64_t)cval(j->c, kk);
}

/* The sample k holding stream position g, and the offset from g of the next sample boundary (> 0). */
static inline int64_t pair_first(const PairJob *j, int64_t g, int pow2, int lsh, int64_t *k) {
    *k = pair_k(g, j->L, pow2, lsh);
    return (*k + 1) * j->L - g;
}

/* The copy at stream position g: its first boundary offset b (> 0) and, with at most one boundary inside
 * (b + L >= z), its two counts; 1 then, else 0 (the copy walks its samples). */
static inline int pair_step(const PairJob *j, const uint8_t *c8, int64_t g, int64_t z, int pow2, int lsh,
                            int64_t *b, int64_t *c0, int64_t *c1) {
    int64_t k;
    *b = pair_first(j, g, pow2, lsh, &k);
    if (*b + j->L < z) return 0;
    *c0 = pair_c(j, c8, k);
    *c1 = *b < z ? pair_c(j, c8, k + 1) : *c0;
    return 1;
}

/* Both copies with at most one boundary inside (the second one absent: c 0): at most three steps, added
 * without a branch on the counts. 0, or 3 when an exposure is past the histograms. */
static inline int pair_fast(const PairJob *j, int64_t z, int64_t b0, int64_t c00, int64_t c01, int64_t b1,
                            int64_t c10, int64_t c11, int64_t *unseen, int64_t *partial) {
    const int64_t B0 = b0 < z ? b0 : z, B1 = b1 < z ? b1 : z;
    const int first0 = B0 <= B1;
    const int64_t lo = first0 ? B0 : B1, hi = first0 ? B1 : B0;
    const int64_t v1 = c00 + c10, v2 = first0 ? c01 + c10 : c00 + c11, v3 = c01 + c11;
    const int64_t l2 = hi - lo, l3 = z - hi;  /* the first step, [0, lo), is never empty (b > 0) */
    int64_t mn = v1, mx = v1;
    mn = l2 > 0 && v2 < mn ? v2 : mn;
    mx = l2 > 0 && v2 > mx ? v2 : mx;
    mn = l3 > 0 && v3 < mn ? v3 : mn;
    mx = l3 > 0 && v3 > mx ? v3 : mx;
    if (v1 >= j->H || v2 >= j->H || v3 >= j->H) return 3;
    j->ht[v1] += lo;
    j->ht[v2] += l2;
    j->ht[v3] += l3;
    j->hd[mn] += 1;
    *unseen += mx == 0;
    *partial += mn != mx;
    return 0;
}

/* Any two (or one) copies: their steps merged over the z tokens. 0, or 3 past the histograms. */
static int pair_walk(const PairJob *j, const uint8_t *c8, Copy *cp, int n, int64_t z, int64_t *unseen,
                     int64_t *partial) {
    const int64_t L = j->L;
    int64_t t = 0, lo_v = INT64_MAX, hi_v = -1;
    while (t < z) {
        int64_t nt = n > 1 && cp[1].b < cp[0].b ? cp[1].b : cp[0].b;
        if (nt > z) nt = z;
        const int64_t v = cp[0].v + (n > 1 ? cp[1].v : 0);
        if (v >= j->H) return 3;
        j->ht[v] += nt - t;
        if (v < lo_v) lo_v = v;
        if (v > hi_v) hi_v = v;
        for (int x = 0; x < n; x++) {
            if (nt != cp[x].b) continue;
            if (cp[x].walk) { cp[x].k++; cp[x].b += L; cp[x].v = pair_c(j, c8, cp[x].k); }
            else { cp[x].v = cp[x].c1; cp[x].b = INT64_MAX; }
        }
        t = nt;
    }
    j->hd[lo_v] += 1;
    *unseen += hi_v == 0;
    *partial += lo_v != hi_v;
    return 0;
}

static inline void pair_copy_walk(const PairJob *j, const uint8_t *c8, Copy *cp, int64_t g, int pow2, int lsh) {
    cp->walk = 1;
    cp->b = pair_first(j, g, pow2, lsh, &cp->k);
    cp->v = pair_c(j, c8, cp->k);
}

static void *pair_job(void *arg) {
    PairJob *j = (PairJob *)arg;
    const Arr l_doc = *j->doc, l_sizes = *j->sizes, l_c = *j->c;  /* see stream_job */
    const Arr *doc = &l_doc, *sizes = &l_sizes, *c = &l_c;
    const int64_t lo = j->lo, L = j->L, D = j->D, i1 = j->i1;
    uint64_t *const rec = j->rec;
    const int atomic = j->atomic;
    const int doc32 = doc->size == 4 && doc->is_signed && contig(doc);
    const int32_t *d32 = (const int32_t *)doc->buf;
    const uint8_t *c8 = c->size == 1 && contig(c) ? (const uint8_t *)c->buf : NULL;
    const int pow2 = L > 0 && (L & (L - 1)) == 0;
    int lsh = 0;
    while (pow2 && ((int64_t)1 << lsh) < L) lsh++;
    int64_t *const cbv = j->cbv;
    int32_t *const sv = j->sv;
    int64_t base = j->base, unseen = 0, partial = 0;
    for (int64_t i = j->i0; i < i1; i++) {
        if (i + PF_PAIR < i1) {
            const int64_t dp = (doc32 ? d32[i + PF_PAIR] : get(doc, i + PF_PAIR)) - lo;
            if (dp >= 0 && dp < D) {
                if (rec) __builtin_prefetch(rec + dp, 1, 3);
                else __builtin_prefetch(AT(sizes, dp), 0, 3);
            }
            /* the draw counts at a first copy kept by position, of a document half as far ahead (its record
               is cached by now) */
            const int64_t dq = (doc32 ? d32[i + PF_PAIR / 2] : get(doc, i + PF_PAIR / 2)) - lo;
            if (rec && c8 && dq >= 0 && dq < D) {
                const uint64_t f = __atomic_load_n(rec + dq, __ATOMIC_RELAXED) >> PAIR_ZBITS;
                if (f < PAIR_STEPS) {
                    const int64_t kq = pair_k((int64_t)f, L, pow2, lsh);
                    if (kq < j->S) __builtin_prefetch(c8 + kq, 0, 3);
                }
            }
        }
        const int64_t d = (doc32 ? d32[i] : get(doc, i)) - lo;
        if (d < 0 || d >= D) { j->err = 1; break; }
        int64_t z, b1, c10 = 0, c11 = 0;
        if (rec) {
            uint64_t v = atomic ? __atomic_load_n(rec + d, __ATOMIC_RELAXED) : rec[d];
            z = (int64_t)(v & PAIR_ZMASK);
            if ((v >> PAIR_ZBITS) == PAIR_NONE) {
                /* the first copy: its steps when it has at most one boundary inside and small counts (read
                   here, where c is being read in order), else its position (a wrong one, only when the sample
                   index disagrees with the sizes, gives an exposure the caller withholds) */
                int64_t b, c0 = 0, c1 = 0;
                uint64_t f;
                if (z > 0 && pair_step(j, c8, base, z, pow2, lsh, &b, &c0, &c1) && c0 < 128 && c1 < 128)
                    f = PAIR_STEPS | ((uint64_t)(b < z ? b : z) << 14) | ((uint64_t)c0 << 7) | (uint64_t)c1;
                else
                    f = (uint64_t)base & (PAIR_STEPS - 1);
                const uint64_t nv = (f << PAIR_ZBITS) | (uint64_t)z;
                if (!atomic) { rec[d] = nv; goto next; }
                if (__atomic_compare_exchange_n(rec + d, &v, nv, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) goto next;
                /* the other thread stored the first copy meanwhile: v holds it now */
            }
            if (z <= 0) goto next;
            const uint64_t f = v >> PAIR_ZBITS;
            int64_t b0, c00 = 0, c01 = 0;
            int fast0;
            if (f >= PAIR_STEPS) {
                b0 = (int64_t)((f >> 14) & PAIR_ZMASK);
                c00 = (int64_t)((f >> 7) & 127);
                c01 = (int64_t)(f & 127);
                fast0 = 1;
            } else {
                fast0 = pair_step(j, c8, (int64_t)f, z, pow2, lsh, &b0, &c00, &c01);
            }
            if (fast0 && pair_step(j, c8, base, z, pow2, lsh, &b1, &c10, &c11)) {
                if ((j->err = pair_fast(j, z, b0, c00, c01, b1, c10, c11, &unseen, &partial))) break;
            } else {
                Copy cp[2];
                if (f >= PAIR_STEPS) cp[0] = (Copy){b0 < z ? b0 : INT64_MAX, c00, 0, c01, 0};
                else pair_copy_walk(j, c8, &cp[0], (int64_t)f, pow2, lsh);
                pair_copy_walk(j, c8, &cp[1], base, pow2, lsh);
                if ((j->err = pair_walk(j, c8, cp, 2, z, &unseen, &partial))) break;
            }
        } else {
            z = *(const int32_t *)AT(sizes, d);
            if (z <= 0) goto next;
            if (pair_step(j, c8, base, z, pow2, lsh, &b1, &c10, &c11)) {
                if ((j->err = pair_fast(j, z, b1, c10, c11, z, 0, 0, &unseen, &partial))) break;
            } else {
                Copy cp[1];
                pair_copy_walk(j, c8, &cp[0], base, pow2, lsh);
                if ((j->err = pair_walk(j, c8, cp, 1, z, &unseen, &partial))) break;
            }
        }
    next:
        sv[i] = (int32_t)z;
        cbv[i] = base;
        base += z;
    }
    j->end = base;
    j->st[0] += unseen;
    j->st[1] += partial;
    return NULL;
}

/* stream_pair(doc, lo, sizes, rec, base, c, L, S, cb_out, s_out, split_at, split_base, hist, stats)
 *     -> (base, seam_ok): `stream` (sizes and positions out) computing each document's exposure at its last
 *     copy (E = 2: rec from pair_init, else None and E = 1). hist: int64 [2, 2, H] (thread, tokens /
 *     documents, exposure) and stats int64 [2, 2] (thread, unseen / partial documents), both added to. */
static PyObject *stream_pair(PyObject *self, PyObject *args) {
    PyObject *doco, *sizeso, *reco, *co, *cbo, *so, *ho, *sto;
    long long lo, base, L, S, split_at, split_base;
    if (!PyArg_ParseTuple(args, "OLOOLOLLOOLLOO", &doco, &lo, &sizeso, &reco, &base, &co, &L, &S, &cbo, &so,
                          &split_at, &split_base, &ho, &sto))
        return NULL;
    Arr doc, sizes, rec, c, cb, s, h, st;
    Arr *all[] = {&doc, &sizes, &rec, &c, &cb, &s, &h, &st};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) memset(all[k], 0, sizeof(Arr));
    if (arr_get(doco, &doc, 0, "doc") < 0 || arr_get(sizeso, &sizes, 0, "sizes") < 0 ||
        arr_get(reco, &rec, 1, "rec") < 0 || arr_get(co, &c, 0, "c") < 0 || arr_get(cbo, &cb, 1, "cb") < 0 ||
        arr_get(so, &s, 1, "s") < 0 || arr_get(ho, &h, 1, "hist") < 0 || arr_get(sto, &st, 1, "stats") < 0) {
        RELEASE(&doc, &sizes, &rec, &c, &cb, &s, &h, &st);
        return NULL;
    }
    const int64_t n = doc.n, H = h.n / 4;
    if (L <= 0 || S < 0 || sizes.size != 4 || !c.held || c.n < S + 1 || cb.size != 8 || s.size != 4 || cb.n < n ||
        s.n < n || !contig(&cb) || !contig(&s) || h.size != 8 || !contig(&h) || H < 1 || h.n != 4 * H ||
        st.size != 8 || !contig(&st) || st.n != 4 ||
        (rec.held && (rec.size != 8 || rec.is_signed || !contig(&rec) || rec.n != sizes.n))) {
        RELEASE(&doc, &sizes, &rec, &c, &cb, &s, &h, &st);
        PyErr_SetString(PyExc_ValueError, "stream_pair: unexpected buffers");
        return NULL;
    }
    int64_t *hv = (int64_t *)h.buf, *sv = (int64_t *)st.buf;
    PairJob a = {&doc, &sizes, &c, rec.held ? (uint64_t *)rec.buf : NULL, lo, L, S, sizes.n, H, 0,
                 (int64_t *)cb.buf, (int32_t *)s.buf, 0, n, base, 0, hv, hv + H, sv, 0};
    PairJob b = a;
    b.ht = hv + 2 * H;
    b.hd = hv + 3 * H;
    b.st = sv + 2;
    const int split = can_split(split_at, split_base, n);
    a.atomic = b.atomic = split;
    int seam_ok, err;
    Py_BEGIN_ALLOW_THREADS
    seam_ok = run_split(pair_job, &a, &b, split, split_at, split_base, n, (int64_t *)cb.buf, &a.i1, &b.i0, &b.base,
                        &a.end, &b.end);
    err = a.err ? a.err : b.err;
    Py_END_ALLOW_THREADS
    RELEASE(&doc, &sizes, &rec, &c, &cb, &s, &h, &st);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err == 1 ? "stream_pair: document id outside the sizes"
                                                   : "stream_pair: an exposure past the histograms");
        return NULL;
    }
    return Py_BuildValue("Li", (long long)(split ? b.end : a.end), seam_ok);
}

/* ------------------------------------------------------------------ sample rows */

static PyObject *rows_before(PyObject *self, PyObject *args) {
    PyObject *ro;
    long long q1;
    if (!PyArg_ParseTuple(args, "OL", &ro, &q1)) return NULL;
    Arr r;
    if (arr_get(ro, &r, 0, "rows") < 0) return NULL;
    Py_ssize_t a = 0, b = r.n / 2;
    while (a < b) {
        Py_ssize_t m = a + (b - a) / 2;
        if (get(&r, 2 * m) < q1) a = m + 1; else b = m;
    }
    RELEASE(&r);
    return PyLong_FromSsize_t(a);
}

typedef struct { const Arr *r; int64_t k0, k1, prev, order, neg; } CbJob;

static void *check_block_job(void *arg) {
    CbJob *j = (CbJob *)arg;
    const Arr *r = j->r;
    int64_t p = j->prev;
    j->order = j->neg = -1;
    if (r->size == 4 && r->is_signed && contig(r)) {
        /* typed, no early exit (vectorizable); the generic loop below finds the first bad row */
        const int32_t *r32 = (const int32_t *)r->buf;
        int bad = j->k0 < j->k1 && (int64_t)r32[2 * j->k0] < p;
        for (int64_t k = j->k0 + 1; k < j->k1; k++) bad |= (r32[2 * k] < r32[2 * k - 2]) | (r32[2 * k + 1] < 0);
        if (j->k0 < j->k1) bad |= r32[2 * j->k0 + 1] < 0;
        if (!bad) return NULL;
    }
    for (int64_t k = j->k0; k < j->k1; k++) {
        int64_t x = get(r, 2 * k), o = get(r, 2 * k + 1);
        if (j->order < 0 && x < p) j->order = k;
        if (j->neg < 0 && o < 0) j->neg = k;
        p = x;
    }
    return NULL;
}

static PyObject *check_block(PyObject *self, PyObject *args) {
    PyObject *ro;
    long long prev;
    if (!PyArg_ParseTuple(args, "OL", &ro, &prev)) return NULL;
    Arr r;
    if (arr_get(ro, &r, 0, "rows") < 0) return NULL;
    const int64_t n = r.n / 2;
    CbJob a = {&r, 0, n, prev, -1, -1}, b = a;
    Py_BEGIN_ALLOW_THREADS
    if (n >= 2 * par_min) {
        /* two halves, the second's first row compared with the first's last */
        a.k1 = b.k0 = n / 2;
        b.prev = get(&r, 2 * (b.k0 - 1));
        run2(check_block_job, &a, &b);
    } else {
        check_block_job(&a);
        b.order = b.neg = -1;
    }
    Py_END_ALLOW_THREADS
    RELEASE(&r);
    return Py_BuildValue("nn", (Py_ssize_t)(a.order >= 0 ? a.order : b.order), (Py_ssize_t)(a.neg >= 0 ? a.neg : b.neg));
}

typedef struct {
    const Arr *r, *cb, *s;
    int64_t q0, row0, L;
    Py_ssize_t k0, k1, bad;
} CrJob;

/* the usual buffers (int32 rows, int64 positions, int32 sizes, contiguous) get typed loads and no early
 * exit; the first bad row is searched by the generic loop only when there is one */
static void *check_rows_job(void *arg) {
    CrJob *j = (CrJob *)arg;
    const Arr r = *j->r, cb = *j->cb, s = *j->s;
    int64_t want = (j->row0 + j->k0) * j->L;
    j->bad = -1;
    if (r.size == 4 && r.is_signed && contig(&r) && cb.size == 8 && contig(&cb) && s.size == 4 && contig(&s) &&
        cb.n > 0 && s.n > 0) {
        const int32_t *r32 = (const int32_t *)r.buf, *s32 = (const int32_t *)s.buf;
        const int64_t *c64 = (const int64_t *)cb.buf;
        const int64_t n = cb.n < s.n ? cb.n : s.n, L = j->L, q0 = j->q0;
        int bad = 0;
        for (Py_ssize_t k = j->k0; k < j->k1; k++, want += L) {
            const int64_t p = (int64_t)r32[2 * k] - q0, o = r32[2 * k + 1];
            const int out = p < 0 || p >= n;
            const int64_t pp = out ? 0 : p;
            bad |= out | (o > s32[pp]) | (c64[pp] + o != want);
        }
        if (!bad) return NULL;
        want = (j->row0 + j->k0) * j->L;
    }
    for (Py_ssize_t k = j->k0; k < j->k1; k++, want += j->L) {
        int64_t p = get(&r, 2 * k) - j->q0, o = get(&r, 2 * k + 1);
        if (p < 0 || p >= cb.n || p >= s.n) { j->bad = k; break; }
        if (o > get(&s, p) || get(&cb, p) + o != want) { j->bad = k; break; }
    }
    return NULL;
}

static PyObject *check_rows(PyObject *self, PyObject *args) {
    PyObject *ro, *cbo, *so;
    long long q0, row0, L;
    if (!PyArg_ParseTuple(args, "OLLLOO", &ro, &q0, &row0, &L, &cbo, &so)) return NULL;
    Arr r, cb, s;
    memset(&cb, 0, sizeof(Arr)); memset(&s, 0, sizeof(Arr));
    if (arr_get(ro, &r, 0, "rows") < 0 || arr_get(cbo, &cb, 0, "cb") < 0 || arr_get(so, &s, 0, "s") < 0) {
        RELEASE(&r, &cb, &s);
        return NULL;
    }
    Py_ssize_t n = r.n / 2, bad = -1;
    CrJob a = {&r, &cb, &s, q0, row0, L, 0, n, -1}, b = a;
    Py_BEGIN_ALLOW_THREADS
    if (n >= 2 * par_min) {
        /* two halves; the first bad row is the first half's, else the second's */
        a.k1 = b.k0 = n / 2;
        run2(check_rows_job, &a, &b);
        bad = a.bad >= 0 ? a.bad : b.bad;
    } else {
        check_rows_job(&a);
        bad = a.bad;
    }
    Py_END_ALLOW_THREADS
    RELEASE(&r, &cb, &s);
    return PyLong_FromSsize_t(bad);
}

/* ------------------------------------------------------------------ per-document results */

typedef struct {
    const Arr *acc, *sizes;
    uint64_t mask;
    Py_ssize_t d0, d1;
    int pass;   /* 0: counts, 1: the first irregular document (epochs known) */
    int64_t docs, tokens, epochs, first_absent, other, other_c;
} DsJob;

static void *doc_stats_job(void *arg) {
    DsJob *j = (DsJob *)arg;
    const Arr acc = *j->acc, sizes = *j->sizes;
    const uint64_t mask = j->mask;
    if (j->pass == 0) {
        int64_t docs = 0, tokens = 0, epochs = 0, first_absent = -1;
        for (Py_ssize_t d = j->d0; d < j->d1; d++) {
            int64_t k = (int64_t)(getu(&acc, d) & mask);
            if (k > 0) { docs++; tokens += get(&sizes, d); if (k > epochs) epochs = k; }
            else if (first_absent < 0) first_absent = d;
        }
        j->docs = docs; j->tokens = tokens; j->epochs = epochs; j->first_absent = first_absent;
    } else {
        j->other = -1;
        for (Py_ssize_t d = j->d0; d < j->d1; d++) {
            int64_t k = (int64_t)(getu(&acc, d) & mask);
            if (k > 0 && k != j->epochs) { j->other = d; j->other_c = k; break; }
        }
    }
    return NULL;
}

static PyObject *doc_stats(PyObject *self, PyObject *args) {
    PyObject *ao, *so;
    int shift;
    if (!PyArg_ParseTuple(args, "OiO", &ao, &shift, &so)) return NULL;
    Arr acc, sizes;
    memset(&sizes, 0, sizeof(Arr));
    if (arr_get(ao, &acc, 0, "acc") < 0 || arr_get(so, &sizes, 0, "sizes") < 0) { RELEASE(&acc, &sizes); return NULL; }
    uint64_t mask = (shift >= 64) ? ~(uint64_t)0 : (((uint64_t)1 << shift) - 1);
    int64_t docs, tokens, epochs, first_absent, other, other_c;
    DsJob a = {&acc, &sizes, mask, 0, acc.n, 0, 0, 0, 0, -1, -1, 0}, b = a;
    Py_BEGIN_ALLOW_THREADS
    int two = acc.n >= 2 * par_min;
    if (two) {
        /* two halves, combined: the first absent / irregular document is the first half's if any */
        a.d1 = b.d0 = acc.n / 2;
        b.first_absent = -1;
        run2(doc_stats_job, &a, &b);
    } else {
        doc_stats_job(&a);
    }
    docs = a.docs + (two ? b.docs : 0);
    tokens = a.tokens + (two ? b.tokens : 0);
    epochs = two && b.epochs > a.epochs ? b.epochs : a.epochs;
    first_absent = a.first_absent >= 0 ? a.first_absent : (two ? b.first_absent : -1);
    a.pass = b.pass = 1;
    a.epochs = b.epochs = epochs;
    if (two) run2(doc_stats_job, &a, &b); else doc_stats_job(&a);
    other = a.other >= 0 ? a.other : (two ? b.other : -1);
    other_c = a.other >= 0 ? a.other_c : (two ? b.other_c : 0);
    Py_END_ALLOW_THREADS
    RELEASE(&acc, &sizes);
    return Py_BuildValue("LLLLLL", docs, tokens, epochs, first_absent, other, other_c);
}

typedef struct { int64_t off; int64_t delta; } Ev;

static int ev_cmp(const void *a, const void *b) {
    int64_t x = ((const Ev *)a)->off, y = ((const Ev *)b)->off;
    return (x > y) - (x < y);
}

#define PF_FIN 32

typedef struct {
    const Arr *sizes, *acc, *head, *lg, *inl;
    Arr *mn, *mx, *tot;
    int64_t d0, da, db, H;
    uint64_t mask;
    int shift, man;
    int64_t *htv, *hdv;      /* histograms of this part */
    int64_t unseen, partial;
    int err;                 /* 1: inconsistent entries, 2: out of memory */
    LogFmt fmt;
} FinJob;

static void *finalize_job(void *arg) {
    FinJob *j = (FinJob *)arg;
    const Arr l_sizes = *j->sizes, l_acc = *j->acc, l_head = *j->head, l_lg = *j->lg, l_inl = *j->inl;  /* see stream_job */
    const Arr *sizes = &l_sizes, *acc = &l_acc, *head = &l_head, *lg = &l_lg, *inl = &l_inl;
    const int use_inl = inl->held;
    Arr *mn = j->mn, *mx = j->mx, *tot = j->tot;
    const int64_t H = j->H, d0 = j->d0, db = j->db;
    const int man = j->man, shift = j->shift;
    const uint64_t mask = j->mask;
    const LogFmt *fmt = &j->fmt;
    const int64_t W = fmt->w;
    int64_t *htv = j->htv, *hdv = j->hdv;
    int64_t unseen = 0, partial = 0;
    Ev *ev = NULL;
    int64_t evcap = 0;
    int err = 0;
    for (int64_t d = j->da; d < db && !err; d++) {
        if (head->held && d + PF_FIN < db) {
            /* the newest entry of the document PF_FIN ahead, and the entry it links to (another copy's,
               elsewhere in the log) of the document PF_FIN / 2 ahead, whose newest entry is cached by now */
            __builtin_prefetch(AT(head, d + 2 * PF_FIN), 0, 3);
            int64_t ep = get(head, d + PF_FIN);
            if (ep >= 0) __builtin_prefetch(AT(lg, W * ep), 0, 3);
            int64_t eq = get(head, d + PF_FIN / 2);
            if (eq >= 0) {
                int64_t nx = log_link(lg, fmt, eq);
                if (nx >= 0) __builtin_prefetch(AT(lg, W * nx), 0, 3);
            }
        }
        uint64_t a = getu(acc, d);
        int64_t i = d - d0;
        if ((a & mask) == 0) {
            if (man) { set(mn, i, 0); set(mx, i, 0); set(tot, i, 0); }
            continue;
        }
        int64_t z = get(sizes, d);
        int64_t b = (int64_t)(a >> shift);
        if (z <= 0) {
            if (man) { set(mn, i, 0); set(mx, i, 0); set(tot, i, 0); }
            continue;
        }
        int64_t lo_v = b, hi_v = b, total = 0;
        int64_t e = head->held ? get(head, d) : -1;
        const int64_t iv = use_inl ? get(inl, d) : 0;  /* the document's first entry, packed (0: none) */
        if (e == -1 && iv == 0) {
            if (b >= H) { err = 1; break; }
            htv[b] += z;
            total = b * z;
        } else if (e == -1 && (iv >> fmt->pk) > 0 && (iv >> fmt->pk) < z) {
            /* one change, strictly inside (always, by the stream pass): two steps, no sort, no branch */
            const int64_t off = iv >> fmt->pk, b2 = b + (iv & (((int64_t)1 << fmt->pk) - 1)) - fmt->bias;
            if (b >= H || b2 < 0 || b2 >= H) { err = 1; break; }
            htv[b] += off;
            htv[b2] += z - off;
            total = b * off + b2 * (z - off);
            lo_v = b < b2 ? b : b2;
            hi_v = b < b2 ? b2 : b;
        } else {
            int64_t ne = 0;
            if (iv) {
                if (!evcap) {
                    ev = (Ev *)malloc(64 * sizeof(Ev));
                    if (!ev) { err = 2; break; }
                    evcap = 64;
                }
                ev[0].off = iv >> fmt->pk;
                ev[0].delta = (iv & (((int64_t)1 << fmt->pk) - 1)) - fmt->bias;
                ne = 1;
            }
            /* the chain from the head: log entries (>= 0), ending at -1 or at an entry kept encoded (<= -2) */
            for (;;) {
                if (e == -1) break;
                if (ne >= evcap) {
                    int64_t nc = evcap ? 2 * evcap : 64;
                    Ev *g = (Ev *)realloc(ev, (size_t)nc * sizeof(Ev));
                    if (!g) { err = 2; break; }
                    ev = g; evcap = nc;
                }
                if (e <= -2) {
                    const int64_t v = HEAD_DEC(e);
                    if (!fmt->pk) { err = 1; break; }
                    ev[ne].off = v >> fmt->pk;
                    ev[ne].delta = (v & (((int64_t)1 << fmt->pk) - 1)) - fmt->bias;
                    ne++;
                    break;
                }
                ev[ne].off = log_off(lg, fmt, e);
                ev[ne].delta = log_delta(lg, fmt, e);
                ne++;
                e = log_link(lg, fmt, e);
            }
            if (err) break;
            if (ne <= 24) {
                for (int64_t x = 1; x < ne; x++) {
                    Ev t = ev[x];
                    int64_t y = x - 1;
                    while (y >= 0 && ev[y].off > t.off) { ev[y + 1] = ev[y]; y--; }
                    ev[y + 1] = t;
                }
            } else {
                qsort(ev, (size_t)ne, sizeof(Ev), ev_cmp);
            }
            int64_t cur = b, prev = 0;
            lo_v = INT64_MAX; hi_v = INT64_MIN;
            for (int64_t x = 0; x <= ne; x++) {
                int64_t at = x < ne ? ev[x].off : z;
                if (at > prev) {
                    if (cur < 0 || cur >= H) { err = 1; break; }
                    htv[cur] += at - prev;
                    total += cur * (at - prev);
                    if (cur < lo_v) lo_v = cur;
                    if (cur > hi_v) hi_v = cur;
                    prev = at;
                }
                if (x < ne) cur += ev[x].delta;
            }
            if (err) break;
        }
        if (lo_v >= H) { err = 1; break; }
        hdv[lo_v] += 1;
        unseen += hi_v == 0;
        partial += lo_v != hi_v;
        if (man) { set(mn, i, lo_v); set(mx, i, hi_v); set(tot, i, total); }
    }
    free(ev);
    j->unseen = unseen;
    j->partial = partial;
    j->err = err;
    return NULL;
}

static PyObject *finalize(PyObject *self, PyObject *args) {
    PyObject *sizeso, *acco, *heado, *lgo, *hto, *hdo, *mno, *mxo, *toto, *inlo = Py_None;
    int shift, pk = 0;
    long long d0, d1, bias = 0;
    if (!PyArg_ParseTuple(args, "OOiOOLLOOOOO|iLO", &sizeso, &acco, &shift, &heado, &lgo,
                          &d0, &d1, &hto, &hdo, &mno, &mxo, &toto, &pk, &bias, &inlo))
        return NULL;
    Arr sizes, acc, head, lg, ht, hd, mn, mx, tot, inl;
    Arr *all[] = {&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot, &inl};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) memset(all[k], 0, sizeof(Arr));
    if (arr_get(sizeso, &sizes, 0, "sizes") < 0 || arr_get(acco, &acc, 0, "acc") < 0 ||
        arr_get(heado, &head, 0, "head") < 0 || arr_get(lgo, &lg, 0, "log") < 0 ||
        arr_get(hto, &ht, 1, "hist_tokens") < 0 || arr_get(hdo, &hd, 1, "hist_docs") < 0 ||
        arr_get(mno, &mn, 1, "mn") < 0 || arr_get(mxo, &mx, 1, "mx") < 0 || arr_get(toto, &tot, 1, "tot") < 0 ||
        arr_get(inlo, &inl, 0, "inl") < 0) {
        RELEASE(&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot, &inl);
        return NULL;
    }
    int64_t H = ht.n;
    int man = mn.held && mx.held && tot.held;
    uint64_t mask = (shift >= 64) ? ~(uint64_t)0 : (((uint64_t)1 << shift) - 1);
    int err = 0;
    if (ht.size != 8 || hd.size != 8 || !contig(&ht) || !contig(&hd) || hd.n < H || d1 > acc.n || d1 > sizes.n ||
        d0 < 0 || (man && (mn.n < d1 - d0 || mx.n < d1 - d0 || tot.n < d1 - d0))) err = 3;
    if (!err && head.held && head.n < d1) err = 3;
    if (!err && inl.held && (pk <= 0 || inl.n < d1)) err = 3;
    int64_t unseen = 0, partial = 0;
    if (!err) {
        FinJob a = {&sizes, &acc, &head, &lg, &inl, &mn, &mx, &tot, d0, d0, d1, H, mask, shift, man,
                    (int64_t *)ht.buf, (int64_t *)hd.buf, 0, 0, 0, {pk > 0 ? 2 : 3, pk > 0 ? pk : 0, pk > 0 ? bias : 0}};
        FinJob b = a;
        int64_t *mine = NULL;
        Py_BEGIN_ALLOW_THREADS
        if (d1 - d0 >= 2 * par_min) mine = (int64_t *)calloc((size_t)(2 * H), sizeof(int64_t));
        if (mine) {
            /* two halves of the documents, the second with its own histograms, added after */
            a.db = b.da = d0 + (d1 - d0) / 2;
            b.htv = mine;
            b.hdv = mine + H;
            run2(finalize_job, &a, &b);
            for (int64_t k = 0; k < H; k++) { a.htv[k] += b.htv[k]; a.hdv[k] += b.hdv[k]; }
            free(mine);
            unseen = a.unseen + b.unseen;
            partial = a.partial + b.partial;
            err = a.err ? a.err : b.err;
        } else {
            finalize_job(&a);
            unseen = a.unseen;
            partial = a.partial;
            err = a.err;
        }
        Py_END_ALLOW_THREADS
    }
    RELEASE(&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot, &inl);
    if (err) {
        PyErr_SetString(err == 2 ? PyExc_MemoryError : PyExc_ValueError,
                        err == 1 ? "negative or too large exposure: inconsistent events"
                                 : (err == 2 ? "finalize: out of memory" : "finalize: unexpected buffers"));
        return NULL;
    }
    return Py_BuildValue("LL", (long long)unseen, (long long)partial);
}

/* ------------------------------------------------------------------ fill */

typedef struct { char *p; size_t n; const char *pat; size_t pn; int zero; } FillJob;

static void *fill_job(void *arg) {
    FillJob *j = (FillJob *)arg;
    if (j->zero) { memset(j->p, 0, j->n); return NULL; }
    /* the pattern once, then doubling copies up to 1 MB, then that block repeated */
    size_t have = j->n < j->pn ? j->n : j->pn;
    memcpy(j->p, j->pat, have);
    size_t blk = (size_t)1 << 20;
    while (have < j->n && have < blk) {
        size_t m = have <= j->n - have ? have : j->n - have;
        memcpy(j->p + have, j->p, m);
        have += m;
    }
    for (size_t at = have; at < j->n; at += have) memcpy(j->p + at, j->p, j->n - at < have ? j->n - at : have);
    return NULL;
}

static PyObject *fill(PyObject *self, PyObject *args) {
    PyObject *bo;
    Py_buffer pat;
    if (!PyArg_ParseTuple(args, "Oy*", &bo, &pat)) return NULL;
    Arr b;
    if (arr_get(bo, &b, 1, "buf") < 0) { PyBuffer_Release(&pat); return NULL; }
    size_t n = (size_t)b.n * (size_t)b.size, pn = (size_t)pat.len;
    if (!contig(&b) || pn == 0 || n % pn) {
        RELEASE(&b);
        PyBuffer_Release(&pat);
        PyErr_SetString(PyExc_ValueError, "fill: a contiguous buffer of whole patterns is needed");
        return NULL;
    }
    int zero = 1;
    for (size_t k = 0; k < pn; k++) zero &= ((const char *)pat.buf)[k] == 0;
    Py_BEGIN_ALLOW_THREADS
    FillJob a = {b.buf, n, (const char *)pat.buf, pn, zero}, c = a;
    /* two threads for large buffers: the kernel's zeroing of fresh pages, the bulk of the cost, in parallel */
    size_t half = n / 2 / pn * pn;
    if ((long long)n >= 64 * par_min && half > 0) {
        a.n = half;
        c.p = b.buf + half;
        c.n = n - half;
        run2(fill_job, &a, &c);
    } else {
        fill_job(&a);
    }
    Py_END_ALLOW_THREADS
    RELEASE(&b);
    PyBuffer_Release(&pat);
    Py_RETURN_NONE;
}

static PyObject *set_parallel_min(PyObject *self, PyObject *args) {
    long long v;
    if (!PyArg_ParseTuple(args, "L", &v)) return NULL;
    long long old = par_min;
    par_min = v < 1 ? 1 : v;
    return PyLong_FromLongLong(old);
}

static PyMethodDef methods[] = {
    {"scatter", scatter, METH_VARARGS, "store[v[i]] = the run value of index j0+i; -1 or the first bad i"},
    {"perm_hash", perm_hash, METH_VARARGS, "(first id outside [0, S) or -1, h1, h2): permutation sums of a shuffle chunk"},
    {"doc_scan", doc_scan, METH_VARARGS, "(min, max, sum of mix(d[i])) of a document index chunk"},
    {"mix_range", mix_range, METH_VARARGS, "sum of mix(x) for x in [lo, hi)"},
    {"count_add", count_add, METH_VARARGS, "counts[d[i] - lo] += 1"},
    {"sum_i32", sum_i32, METH_VARARGS, "(int64 sum, zeros) of a contiguous int32 array (two threads when large)"},
    {"finish_store", finish_store, METH_VARARGS, "(missing, first missing); then store -= 1, store[S] = 0"},
    {"changes", changes, METH_VARARGS, "number of k with c[k] != c[k-1]"},
    {"stream", stream, METH_VARARGS, "one chunk of doc_idx: sizes, positions, copies, base counts, non-uniform copies"},
    {"stream_aff", stream_aff, METH_VARARGS, "stream without counts, listing the copies that overlap given samples"},
    {"pair_init", pair_init, METH_VARARGS, "records of the documents for stream_pair: sizes, no copy yet; the largest size"},
    {"stream_pair", stream_pair, METH_VARARGS, "stream computing each document's exposure at its last copy (every document 1 or 2 times)"},
    {"rows_before", rows_before, METH_VARARGS, "first row whose document position is >= q1"},
    {"check_block", check_block, METH_VARARGS, "(first row going back, first negative offset), -1 when none"},
    {"check_rows", check_rows, METH_VARARGS, "first sample boundary not at row * L, else -1"},
    {"doc_stats", doc_stats, METH_VARARGS, "documents, tokens, epochs, first absent, first irregular, its copies"},
    {"finalize", finalize, METH_VARARGS, "per-document exposure of [d0, d1): histograms, unseen, partial"},
    {"fill", fill, METH_VARARGS, "fill(buf, pattern): a contiguous byte buffer filled with a repeated pattern (two threads when large)"},
    {"set_parallel_min", set_parallel_min, METH_VARARGS, "entries from which work is split over two threads; returns the old value"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exposure", "Hot loops of neox-epoch audit.", -1, methods};

PyMODINIT_FUNC PyInit__exposure(void) { return PyModule_Create(&module); }
