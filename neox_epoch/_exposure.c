/* Hot loops of `neox-epoch audit` (neox_epoch/audit/validate.py, exposure.py), optional: the audit
 * falls back to numpy (same answers, slower) when this module is not built.
 *
 * Plain CPython C API with the buffer protocol (no numpy headers). Integer buffers of item size 1, 2,
 * 4 or 8; signedness from the buffer's format character (lower case: signed).
 *
 * scatter(v, j0, store, runs) -> -1 | i
 *     store[v[i]] = value of index j0+i: `val` of the run (a, b, val) holding it, else 1. Returns the
 *     first i with v[i] outside [0, len(store)-1) (nothing written for that chunk then).
 * finish_store(store) -> (missing, first_missing)
 *     zeros among store[:S] (S = len - 1); then store[:S] -= 1 and store[S] = 0.
 * changes(c) -> number of k in [1, len) with c[k] != c[k-1].
 * stream(doc, lo, sizes, acc, shift, base, c, L, S, cb_out, s_out, head, log, n_log) -> (base, n_log)
 *     per copy i (document d = doc[i] - lo): s_out[i] = sizes[d], cb_out[i] = stream position of its
 *     first token; acc[d] += 1 | (c[min(cb/L, S)] << shift). With c given, every sample boundary
 *     strictly inside the copy where the draw count changes is a log entry (offset in the document,
 *     change, previous entry of d), linked per document from head[d] (-1 ends). log: [cap, 3].
 * rows_before(rows, q1) -> first k with rows[k, 0] >= q1 (rows sorted on column 0).
 * check_block(rows, prev_p) -> (first row going back or -1, first negative offset or -1)
 * check_rows(rows, q0, row0, L, cb, s) -> first k with rows[k,1] > s[p] or cb[p] + rows[k,1] != (row0+k)*L
 *     (p = rows[k,0] - q0), else -1.
 * doc_stats(acc, shift, sizes) -> (documents, tokens, epochs, first_absent, first_other, other_copies)
 * finalize(sizes, acc, shift, head, log, d0, d1, hist_tokens, hist_docs, mn, mx, tot) -> (unseen, partial)
 *     per document of [d0, d1): its exposure as a step function over its tokens (base counts of all
 *     copies plus the steps of its non-uniform copies), added to the token histogram (weighted by
 *     tokens) and, at its minimum, to the document histogram; mn/mx/tot (or None) get min, max, sum.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    char *buf;
    Py_ssize_t n;       /* elements */
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
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &a->view, flags) < 0) return -1;
    a->held = 1;
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
    return 0;
}

static inline int64_t get(const Arr *a, Py_ssize_t i) {
    switch (a->size) {
    case 1: return a->is_signed ? (int64_t)((int8_t *)a->buf)[i] : (int64_t)((uint8_t *)a->buf)[i];
    case 2: return a->is_signed ? (int64_t)((int16_t *)a->buf)[i] : (int64_t)((uint16_t *)a->buf)[i];
    case 4: return a->is_signed ? (int64_t)((int32_t *)a->buf)[i] : (int64_t)((uint32_t *)a->buf)[i];
    default: return ((int64_t *)a->buf)[i];
    }
}

static inline void set(Arr *a, Py_ssize_t i, int64_t v) {
    switch (a->size) {
    case 1: ((uint8_t *)a->buf)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)a->buf)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)a->buf)[i] = (uint32_t)v; break;
    default: ((int64_t *)a->buf)[i] = v; break;
    }
}

static inline uint64_t getu(const Arr *a, Py_ssize_t i) {
    switch (a->size) {
    case 1: return ((uint8_t *)a->buf)[i];
    case 2: return ((uint16_t *)a->buf)[i];
    case 4: return ((uint32_t *)a->buf)[i];
    default: return ((uint64_t *)a->buf)[i];
    }
}

#define RELEASE(...) do { Arr *_l[] = {__VA_ARGS__}; for (size_t _k = 0; _k < sizeof(_l) / sizeof(_l[0]); _k++) arr_release(_l[_k]); } while (0)

/* ------------------------------------------------------------------ scatter */

#define MAXRUNS 64

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
    for (int64_t i = 0; i < n; i++) {
        int64_t x = get(&v, i);
        if (x < 0 || x >= S) { bad = i; break; }
    }
    if (bad < 0) {
        if (nr == 0 && st.size == 1 && v.size == 4 && !v.is_signed) {
            const uint32_t *vv = (const uint32_t *)v.buf;
            uint8_t *s8 = (uint8_t *)st.buf;
            for (int64_t i = 0; i < n; i++) s8[vv[i]] = 1;
        } else {
            /* the chunk split at the runs' edges: a constant value per piece */
            int64_t i = 0;
            while (i < n) {
                int64_t j = j0 + i, stop = n, val = 1;
                for (Py_ssize_t k = 0; k < nr; k++) {
                    if (j >= ra[k] && j < rb[k]) { val = rv[k]; if (rb[k] - j0 < stop) stop = rb[k] - j0; }
                    else if (ra[k] > j && ra[k] - j0 < stop) stop = ra[k] - j0;
                }
                if (st.size == 1 && v.size == 4 && !v.is_signed) {
                    const uint32_t *vv = (const uint32_t *)v.buf;
                    uint8_t *s8 = (uint8_t *)st.buf, b = (uint8_t)val;
                    for (; i < stop; i++) s8[vv[i]] = b;
                } else {
                    for (; i < stop; i++) set(&st, (Py_ssize_t)get(&v, i), val);
                }
            }
        }
    }
    RELEASE(&v, &st);
    return PyLong_FromSsize_t(bad);
}

static PyObject *finish_store(PyObject *self, PyObject *args) {
    PyObject *so;
    if (!PyArg_ParseTuple(args, "O", &so)) return NULL;
    Arr st;
    if (arr_get(so, &st, 1, "store") < 0) return NULL;
    int64_t S = (int64_t)st.n - 1, missing = 0, first = -1;
    if (st.size == 1) {
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
    if (c.size == 1) {
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
    return c->size == 1 ? ((const uint8_t *)c->buf)[k] : getu(c, k);
}

static PyObject *stream(PyObject *self, PyObject *args) {
    PyObject *doco, *sizeso, *acco, *co, *cbo, *so, *heado, *lgo;
    long long lo, base, L, S, n_log;
    int shift;
    if (!PyArg_ParseTuple(args, "OLOOiLOLLOOOOL", &doco, &lo, &sizeso, &acco, &shift, &base, &co, &L, &S,
                          &cbo, &so, &heado, &lgo, &n_log))
        return NULL;
    Arr doc, sizes, acc, c, cb, s, head, lg;
    memset(&sizes, 0, sizeof(Arr)); memset(&acc, 0, sizeof(Arr)); memset(&c, 0, sizeof(Arr));
    memset(&cb, 0, sizeof(Arr)); memset(&s, 0, sizeof(Arr)); memset(&head, 0, sizeof(Arr));
    memset(&lg, 0, sizeof(Arr));
    if (arr_get(doco, &doc, 0, "doc") < 0 || arr_get(sizeso, &sizes, 0, "sizes") < 0 ||
        arr_get(acco, &acc, 1, "acc") < 0 || arr_get(co, &c, 0, "c") < 0 || arr_get(cbo, &cb, 1, "cb") < 0 ||
        arr_get(so, &s, 1, "s") < 0 || arr_get(heado, &head, 1, "head") < 0 || arr_get(lgo, &lg, 1, "log") < 0) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg);
        return NULL;
    }
    if (sizes.size != 4 || (acc.size != 4 && acc.size != 8) || cb.size != 8 || s.size != 4 || cb.n < doc.n ||
        s.n < doc.n || (c.held && (!head.held || !lg.held || head.n < sizes.n))) {
        RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg);
        PyErr_SetString(PyExc_ValueError, "stream: unexpected buffers");
        return NULL;
    }
    const int32_t *sz = (const int32_t *)sizes.buf;
    int64_t *cbv = (int64_t *)cb.buf;
    int32_t *sv = (int32_t *)s.buf;
    int64_t n = doc.n, D = sizes.n, cap = lg.n / 3;
    int err = 0;
    const int PF = 16;
    for (int64_t i = 0; i < n; i++) {
        if (i + PF < n) {
            int64_t dp = get(&doc, i + PF) - lo;
            if (dp >= 0 && dp < D) {
                __builtin_prefetch(sz + dp, 0, 0);
                __builtin_prefetch(acc.buf + dp * acc.size, 1, 0);
                if (head.held) __builtin_prefetch(head.buf + dp * head.size, 1, 0);
            }
        }
        int64_t d = get(&doc, i) - lo;
        if (d < 0 || d >= D) { err = 1; break; }
        int64_t z = sz[d];
        sv[i] = (int32_t)z;
        cbv[i] = base;
        uint64_t add = 1;
        if (c.held) {
            int64_t k0 = base / L;
            if (k0 > S) k0 = S;
            uint64_t c0 = cval(&c, k0);
            add |= c0 << shift;
            if (z > 0 && k0 < S) {
                int64_t k1 = (base + z - 1) / L;
                if (k1 > S) k1 = S;
                /* one log entry (offset, delta, previous entry of d) per change of the draw count inside */
                uint64_t prevc = c0;
                for (int64_t k = k0 + 1; k <= k1; k++) {
                    uint64_t ck = cval(&c, k);
                    if (ck == prevc) continue;
                    if (n_log >= cap) { err = 2; break; }
                    set(&lg, 3 * n_log, k * L - base);
                    set(&lg, 3 * n_log + 1, (int64_t)ck - (int64_t)prevc);
                    set(&lg, 3 * n_log + 2, get(&head, d));
                    set(&head, d, n_log);
                    n_log++;
                    prevc = ck;
                }
                if (err) break;
            }
        }
        if (acc.size == 4) ((uint32_t *)acc.buf)[d] += (uint32_t)add;
        else ((uint64_t *)acc.buf)[d] += add;
        base += z;
    }
    RELEASE(&doc, &sizes, &acc, &c, &cb, &s, &head, &lg);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err == 1 ? "stream: document id outside the sizes" : "stream: log full");
        return NULL;
    }
    return Py_BuildValue("LL", base, n_log);
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

static PyObject *check_block(PyObject *self, PyObject *args) {
    PyObject *ro;
    long long prev;
    if (!PyArg_ParseTuple(args, "OL", &ro, &prev)) return NULL;
    Arr r;
    if (arr_get(ro, &r, 0, "rows") < 0) return NULL;
    Py_ssize_t n = r.n / 2, order = -1, neg = -1;
    int64_t p = prev;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t x = get(&r, 2 * k), o = get(&r, 2 * k + 1);
        if (order < 0 && x < p) order = k;
        if (neg < 0 && o < 0) neg = k;
        p = x;
    }
    RELEASE(&r);
    return Py_BuildValue("nn", order, neg);
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
    int64_t want = row0 * L;
    for (Py_ssize_t k = 0; k < n; k++, want += L) {
        int64_t p = get(&r, 2 * k) - q0, o = get(&r, 2 * k + 1);
        if (p < 0 || p >= cb.n || p >= s.n) { bad = k; break; }
        if (o > get(&s, p) || get(&cb, p) + o != want) { bad = k; break; }
    }
    RELEASE(&r, &cb, &s);
    return PyLong_FromSsize_t(bad);
}

/* ------------------------------------------------------------------ per-document results */

static PyObject *doc_stats(PyObject *self, PyObject *args) {
    PyObject *ao, *so;
    int shift;
    if (!PyArg_ParseTuple(args, "OiO", &ao, &shift, &so)) return NULL;
    Arr acc, sizes;
    memset(&sizes, 0, sizeof(Arr));
    if (arr_get(ao, &acc, 0, "acc") < 0 || arr_get(so, &sizes, 0, "sizes") < 0) { RELEASE(&acc, &sizes); return NULL; }
    uint64_t mask = (shift >= 64) ? ~(uint64_t)0 : (((uint64_t)1 << shift) - 1);
    int64_t docs = 0, tokens = 0, epochs = 0, first_absent = -1, other = -1, other_c = 0;
    for (Py_ssize_t d = 0; d < acc.n; d++) {
        int64_t k = (int64_t)(getu(&acc, d) & mask);
        if (k > 0) { docs++; tokens += get(&sizes, d); if (k > epochs) epochs = k; }
        else if (first_absent < 0) first_absent = d;
    }
    for (Py_ssize_t d = 0; d < acc.n; d++) {
        int64_t k = (int64_t)(getu(&acc, d) & mask);
        if (k > 0 && k != epochs) { other = d; other_c = k; break; }
    }
    RELEASE(&acc, &sizes);
    return Py_BuildValue("LLLLLL", docs, tokens, epochs, first_absent, other, other_c);
}

typedef struct { int64_t off; int64_t delta; } Ev;

static int ev_cmp(const void *a, const void *b) {
    int64_t x = ((const Ev *)a)->off, y = ((const Ev *)b)->off;
    return (x > y) - (x < y);
}

static PyObject *finalize(PyObject *self, PyObject *args) {
    PyObject *sizeso, *acco, *heado, *lgo, *hto, *hdo, *mno, *mxo, *toto;
    int shift;
    long long d0, d1;
    if (!PyArg_ParseTuple(args, "OOiOOLLOOOOO", &sizeso, &acco, &shift, &heado, &lgo,
                          &d0, &d1, &hto, &hdo, &mno, &mxo, &toto))
        return NULL;
    Arr sizes, acc, head, lg, ht, hd, mn, mx, tot;
    Arr *all[] = {&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) memset(all[k], 0, sizeof(Arr));
    if (arr_get(sizeso, &sizes, 0, "sizes") < 0 || arr_get(acco, &acc, 0, "acc") < 0 ||
        arr_get(heado, &head, 0, "head") < 0 || arr_get(lgo, &lg, 0, "log") < 0 ||
        arr_get(hto, &ht, 1, "hist_tokens") < 0 || arr_get(hdo, &hd, 1, "hist_docs") < 0 ||
        arr_get(mno, &mn, 1, "mn") < 0 || arr_get(mxo, &mx, 1, "mx") < 0 || arr_get(toto, &tot, 1, "tot") < 0) {
        RELEASE(&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot);
        return NULL;
    }
    int64_t *htv = (int64_t *)ht.buf, *hdv = (int64_t *)hd.buf;
    int64_t H = ht.n;
    int man = mn.held && mx.held && tot.held;
    uint64_t mask = (shift >= 64) ? ~(uint64_t)0 : (((uint64_t)1 << shift) - 1);
    int64_t unseen = 0, partial = 0;
    Ev *ev = NULL;
    int64_t evcap = 0;
    int err = 0;
    if (ht.size != 8 || hd.size != 8 || hd.n < H || d1 > acc.n || d1 > sizes.n || d0 < 0 ||
        (man && (mn.n < d1 - d0 || mx.n < d1 - d0 || tot.n < d1 - d0))) err = 3;
    if (!err && head.held && head.n < d1) err = 3;
    for (int64_t d = d0; d < d1 && !err; d++) {
        if (head.held && d + 16 < d1) {
            int64_t ep = get(&head, d + 16);
            if (ep >= 0) __builtin_prefetch(lg.buf + 3 * ep * lg.size, 0, 0);
        }
        uint64_t a = getu(&acc, d);
        int64_t i = d - d0;
        if ((a & mask) == 0) {
            if (man) { set(&mn, i, 0); set(&mx, i, 0); set(&tot, i, 0); }
            continue;
        }
        int64_t z = get(&sizes, d);
        int64_t b = (int64_t)(a >> shift);
        if (z <= 0) {
            if (man) { set(&mn, i, 0); set(&mx, i, 0); set(&tot, i, 0); }
            continue;
        }
        int64_t lo_v = b, hi_v = b, total = 0;
        int64_t e = head.held ? get(&head, d) : -1;
        if (e < 0) {
            if (b >= H) { err = 1; break; }
            htv[b] += z;
            total = b * z;
        } else {
            int64_t ne = 0;
            for (; e >= 0; e = get(&lg, 3 * e + 2)) {
                if (ne >= evcap) {
                    int64_t nc = evcap ? 2 * evcap : 64;
                    Ev *g = (Ev *)realloc(ev, (size_t)nc * sizeof(Ev));
                    if (!g) { err = 2; break; }
                    ev = g; evcap = nc;
                }
                ev[ne].off = get(&lg, 3 * e);
                ev[ne].delta = get(&lg, 3 * e + 1);
                ne++;
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
        if (man) { set(&mn, i, lo_v); set(&mx, i, hi_v); set(&tot, i, total); }
    }
    free(ev);
    RELEASE(&sizes, &acc, &head, &lg, &ht, &hd, &mn, &mx, &tot);
    if (err) {
        PyErr_SetString(err == 2 ? PyExc_MemoryError : PyExc_ValueError,
                        err == 1 ? "negative or too large exposure: inconsistent events"
                                 : (err == 2 ? "finalize: out of memory" : "finalize: unexpected buffers"));
        return NULL;
    }
    return Py_BuildValue("LL", (long long)unseen, (long long)partial);
}

static PyMethodDef methods[] = {
    {"scatter", scatter, METH_VARARGS, "store[v[i]] = the run value of index j0+i; -1 or the first bad i"},
    {"finish_store", finish_store, METH_VARARGS, "(missing, first missing); then store -= 1, store[S] = 0"},
    {"changes", changes, METH_VARARGS, "number of k with c[k] != c[k-1]"},
    {"stream", stream, METH_VARARGS, "one chunk of doc_idx: sizes, positions, copies, base counts, non-uniform copies"},
    {"rows_before", rows_before, METH_VARARGS, "first row whose document position is >= q1"},
    {"check_block", check_block, METH_VARARGS, "(first row going back, first negative offset), -1 when none"},
    {"check_rows", check_rows, METH_VARARGS, "first sample boundary not at row * L, else -1"},
    {"doc_stats", doc_stats, METH_VARARGS, "documents, tokens, epochs, first absent, first irregular, its copies"},
    {"finalize", finalize, METH_VARARGS, "per-document exposure of [d0, d1): histograms, unseen, partial"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exposure", "Hot loops of neox-epoch audit.", -1, methods};

PyMODINIT_FUNC PyInit__exposure(void) { return PyModule_Create(&module); }
