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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>


#define MAXN 16

/* Record the step of every mark (source, count) just reached and find the source's next mark. */
static void hit_mark(Py_ssize_t best, int64_t cnt, long long s, Py_ssize_t nm, const long long *msrc,
                     const long long *mcnt, long long *mpos, int64_t *next) {
    int64_t nxt = INT64_MAX;
    for (Py_ssize_t k = 0; k < nm; k++) {
        if (msrc[k] != best) continue;
        if (mcnt[k] == cnt) mpos[k] = s;
        else if (mcnt[k] > cnt && mcnt[k] < nxt) nxt = mcnt[k];
    }
    *next = nxt;
}

/* The hot loop for a compile-time number of sources N (lets the compiler unroll and keep registers). */
#define CASE(N)                                                                                 \
    case N:                                                                                     \
        for (long long s = start; s < stop; s++) {                                              \
            double x = (double)s;                                                               \
            if (x < 1.0) x = 1.0;                                                               \
            int best = 0;                                                                       \
            double best_err = wl[0] * x - dcount[0];                                            \
            for (int i = 1; i < N; i++) {                                                       \
                double err = wl[i] * x - dcount[i];                                             \
                if (err > best_err) { best_err = err; best = i; }                               \
            }                                                                                   \
            dcount[best] += 1.0;                                                                \
            if (dcount[best] == dnext[best]) {                                                  \
                int64_t nx;                                                                     \
                hit_mark(best, (int64_t)dcount[best], s, nm, msrc, mcnt, mpos, &nx);            \
                dnext[best] = nx == INT64_MAX ? 1e300 : (double)nx;                             \
            }                                                                                   \
        }                                                                                       \
        break;

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

static PyObject *advance(PyObject *self, PyObject *args) {
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
    if (n < 1 || PySequence_Fast_GET_SIZE(cseq) != n) {
        Py_DECREF(wseq); Py_DECREF(cseq); Py_DECREF(mseq);
        PyErr_SetString(PyExc_ValueError, "weights and counts must be non-empty and of equal length");
        return NULL;
    }
    double *w = malloc(sizeof(double) * n);
    int64_t *count = malloc(sizeof(int64_t) * n);
    int64_t *next_mark = malloc(sizeof(int64_t) * n);
    long long *msrc = malloc(sizeof(long long) * (nm + 1));
    long long *mcnt = malloc(sizeof(long long) * (nm + 1));
    long long *mpos = malloc(sizeof(long long) * (nm + 1));
    for (Py_ssize_t i = 0; i < n; i++) {
        w[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(wseq, i));
        count[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(cseq, i));
        next_mark[i] = INT64_MAX;
    }
    int failed = PyErr_Occurred() != NULL;
    for (Py_ssize_t k = 0; k < nm && !failed; k++) {
        failed = read_ll_pair(PySequence_Fast_GET_ITEM(mseq, k), &msrc[k], &mcnt[k]) != 0;
        mpos[k] = -1;
        if (!failed && msrc[k] >= 0 && msrc[k] < n && mcnt[k] > count[msrc[k]] && mcnt[k] < next_mark[msrc[k]])
            next_mark[msrc[k]] = mcnt[k];
    }
    Py_DECREF(wseq); Py_DECREF(cseq); Py_DECREF(mseq);
    if (failed) { free(w); free(count); free(next_mark); free(msrc); free(mcnt); free(mpos); return NULL; }

    Py_BEGIN_ALLOW_THREADS
    /* counts kept as doubles in the hot loop (exact below 2^53); a mark check is one compare */
    double dcount[MAXN], dnext[MAXN], wl[MAXN];
    if (n <= MAXN) {
        for (Py_ssize_t i = 0; i < n; i++) {
            dcount[i] = (double)count[i];
            dnext[i] = next_mark[i] == INT64_MAX ? 1e300 : (double)next_mark[i];
            wl[i] = w[i];
        }
        switch (n) {
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
            CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
        }
        for (Py_ssize_t i = 0; i < n; i++) count[i] = (int64_t)dcount[i];
    } else {
        for (long long s = start; s < stop; s++) {
            double x = (double)s;
            if (x < 1.0) x = 1.0;
            Py_ssize_t best = 0;
            double best_err = w[0] * x - (double)count[0];
            for (Py_ssize_t i = 1; i < n; i++) {
                double err = w[i] * x - (double)count[i];
                if (err > best_err) { best_err = err; best = i; }
            }
            count[best] += 1;
            if (count[best] == next_mark[best]) hit_mark(best, count[best], s, nm, msrc, mcnt, mpos, &next_mark[best]);
        }
    }
    Py_END_ALLOW_THREADS

    PyObject *out_counts = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(out_counts, i, PyLong_FromLongLong(count[i]));
    PyObject *positions = PyList_New(nm);
    for (Py_ssize_t k = 0; k < nm; k++) PyList_SET_ITEM(positions, k, PyLong_FromLongLong(mpos[k]));
    free(w); free(count); free(next_mark); free(msrc); free(mcnt); free(mpos);
    return Py_BuildValue("(NN)", out_counts, positions);
}

static PyMethodDef methods[] = {
    {"advance", advance, METH_VARARGS, "advance(weights, start, counts, stop, marks) -> (counts, positions)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_greedy", "Exact greedy blend counting.", -1, methods};

PyMODINIT_FUNC PyInit__greedy(void) { return PyModule_Create(&module); }
