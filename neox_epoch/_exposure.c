/* The audit's stream pass over a document index, in one sequential walk (neox_epoch.audit.exposure).
 *
 * stream(documents, first_id, records, position, epochs, draws, seq_length, samples, positions, tokens_hist,
 *        documents_hist, stats, sample_draws, per_document) -> position
 *
 * `records` holds one row of `width` int64 per document (id - first_id), so that a copy touches one cache
 * line: its first word is the document's size and copy count (two int32), then, with `draws` (the draw
 * count of each sample, uint8/uint16/uint32), the stream positions of its first epochs-1 copies.
 * For each entry j of `documents` (int32 ids of a chunk of the document index): positions[j] = the
 * stream position of the copy, and the document's copy count goes up by one. With `draws` a document's
 * last copy completes its exposure: the step functions of its copies (a step at each sample boundary
 * inside a copy) summed, swept into the token and document histograms and stats (never seen, seen
 * unevenly). `sample_draws` ([S, 2] first/last draw position of each sample) and `per_document` ([D, 5]
 * min, max, token exposures, first and last draw) are for the manifest. Returns the position after the
 * chunk; -1 when an exposure fell outside the histograms (inconsistent inputs).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct { int64_t offset, change; } Step;

typedef struct { int32_t size, copies; } Head;  /* the first word of a document's record */

typedef struct {
    int64_t *records; int64_t width, epochs;
    const void *draws; int draw_bytes, shift; int64_t seq_length, samples;
    int64_t *tokens_hist, *documents_hist, *stats, bins;
    const int64_t *sample_draws; int64_t *per_document;
    Step *steps; int64_t capacity;
} Pass;

/* The sample holding stream position `position`: a shift when seq_length is a power of two (a 64-bit
 * division takes tens of cycles, and there are several per document) */
static inline int64_t sample_of(const Pass *pass, int64_t position) {
    return pass->shift >= 0 ? position >> pass->shift : position / pass->seq_length;
}

static int64_t draw_count(const Pass *pass, int64_t sample) {
    if (sample >= pass->samples) return 0;
    switch (pass->draw_bytes) {
        case 1: return ((const uint8_t *)pass->draws)[sample];
        case 2: return ((const uint16_t *)pass->draws)[sample];
        default: return ((const uint32_t *)pass->draws)[sample];
    }
}

static int by_offset(const void *left, const void *right) {
    int64_t a = ((const Step *)left)->offset, b = ((const Step *)right)->offset;
    return (a > b) - (a < b);
}

/* The steps of one copy at stream position `start`; adds its first value to *base. */
static int copy_steps(Pass *pass, int64_t start, int64_t size, int64_t *base, int64_t *count, int64_t *first,
                      int64_t *last) {
    int64_t sample = sample_of(pass, start), end = start + size;
    *base += draw_count(pass, sample);
    for (int64_t k = sample; size > 0 && pass->sample_draws && k * pass->seq_length < end && k < pass->samples; k++) {
        int64_t f = pass->sample_draws[2 * k], l = pass->sample_draws[2 * k + 1];
        if (f >= 0 && (*first < 0 || f < *first)) *first = f;
        if (l > *last) *last = l;
    }
    for (int64_t boundary = (sample + 1) * pass->seq_length; boundary < end; boundary += pass->seq_length) {
        sample++;
        int64_t change = draw_count(pass, sample) - draw_count(pass, sample - 1);
        if (!change) continue;
        if (*count == pass->capacity) {
            int64_t grown = pass->capacity ? 2 * pass->capacity : 64;
            Step *steps = realloc(pass->steps, (size_t)grown * sizeof(Step));
            if (!steps) return -1;
            pass->steps = steps, pass->capacity = grown;
        }
        pass->steps[(*count)++] = (Step){boundary - start, change};
    }
    return 0;
}

/* The exposure of document `doc` (size `size`), its last copy at `start`: histograms and stats. */
static int complete(Pass *pass, int64_t doc, int64_t size, int64_t start) {
    int64_t base = 0, count = 0, first = -1, last = -1;
    const int64_t *earlier = pass->records + doc * pass->width + 1;
    for (int64_t copy = 0; copy < pass->epochs; copy++) {
        int64_t at = copy + 1 < pass->epochs ? earlier[copy] : start;
        if (copy_steps(pass, at, size, &base, &count, &first, &last)) return -1;
    }
    if (count > 1) qsort(pass->steps, (size_t)count, sizeof(Step), by_offset);
    int64_t value = base, low = INT64_MAX, high = -1, total = 0, done = 0;
    for (int64_t i = 0; i <= count; i++) {
        int64_t until = i < count ? pass->steps[i].offset : size;
        if (until > done) {
            if (value < 0 || value >= pass->bins) return -1;
            pass->tokens_hist[value] += until - done;
            total += value * (until - done);
            low = value < low ? value : low;
            high = value > high ? value : high;
            done = until;
        }
        if (i < count) value += pass->steps[i].change;
    }
    if (size > 0) {
        pass->documents_hist[low]++;
        pass->stats[0] += high == 0;
        pass->stats[1] += low != high;
    }
    if (pass->per_document) {
        int64_t *row = pass->per_document + 5 * doc;
        row[0] = size > 0 ? low : 0, row[1] = size > 0 ? high : 0, row[2] = total, row[3] = first, row[4] = last;
    }
    return 0;
}

static void *data_of(PyObject *object, Py_buffer *view, int writable) {
    if (object == Py_None) return NULL;
    if (PyObject_GetBuffer(object, view, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    return view->buf;
}

static PyObject *stream(PyObject *self, PyObject *args) {
    PyObject *objects[9];
    Py_buffer views[9] = {{0}};
    long long first_id, position, epochs, seq_length, samples;
    if (!PyArg_ParseTuple(args, "OLOLLOLLOOOOOO", &objects[0], &first_id, &objects[1], &position, &epochs,
                          &objects[2], &seq_length, &samples, &objects[3], &objects[4], &objects[5], &objects[6],
                          &objects[7], &objects[8]))
        return NULL;
    static const int writable[9] = {0, 1, 0, 1, 1, 1, 1, 0, 1};
    void *data[9];
    for (int i = 0; i < 9; i++) {
        data[i] = data_of(objects[i], &views[i], writable[i]);
        if (!data[i] && objects[i] != Py_None) {
            for (int k = 0; k < i; k++) if (views[k].obj) PyBuffer_Release(&views[k]);
            return NULL;
        }
    }
    const void *draws = data[2];
    int shift = seq_length > 0 && !(seq_length & (seq_length - 1)) ? __builtin_ctzll((unsigned long long)seq_length) : -1;
    Pass pass = {data[1], draws && epochs > 1 ? epochs : 1, epochs, draws, draws ? (int)views[2].itemsize : 0, shift,
                 seq_length, samples, data[4], data[5], data[6], draws ? views[4].len / 8 : 0, data[7], data[8],
                 NULL, 0};
    const int32_t *documents = data[0];
    int64_t *positions = data[3], count = views[0].len / 4, status = 0, width = pass.width;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t j = 0; j < count; j++) {
        if (j + 64 < count) __builtin_prefetch(pass.records + (documents[j + 64] - first_id) * width, 1);
        if (draws && epochs > 1 && j + 16 < count) {  /* a last copy 16 ahead: the draw counts at its earlier copies */
            const int64_t *ahead = pass.records + (documents[j + 16] - first_id) * width;
            for (int64_t copy = 0; copy + 1 < epochs && ((const Head *)ahead)->copies == epochs - 1; copy++)
                __builtin_prefetch((const char *)draws + sample_of(&pass, ahead[1 + copy]) * pass.draw_bytes);
        }
        int64_t doc = documents[j] - first_id, *record = pass.records + doc * width;
        Head *head = (Head *)record;
        int64_t size = head->size, copy = head->copies++;
        positions[j] = position;
        if (draws && copy + 1 < epochs) record[1 + copy] = position;
        else if (draws && copy + 1 == epochs && complete(&pass, doc, size, position)) status = -1;
        position += size;
    }
    Py_END_ALLOW_THREADS
    free(pass.steps);
    for (int i = 0; i < 9; i++) if (views[i].obj) PyBuffer_Release(&views[i]);
    return PyLong_FromLongLong(status ? -1 : position);
}

static PyMethodDef methods[] = {
    {"stream", stream, METH_VARARGS, "The stream pass over a chunk of a document index (see the module comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exposure", "The audit's stream pass.", -1, methods};

PyMODINIT_FUNC PyInit__exposure(void) { return PyModule_Create(&module); }
