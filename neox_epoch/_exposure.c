/* The audit's stream pass over a document index, in one sequential walk (neox_epoch.audit.exposure).
 *
 * stream(documents, first_id, sizes, records, position, epochs, draws, seq_length, samples, positions, tokens_hist,
 *        documents_hist, stats, sample_draws, per_document, tokens_out, token_starts[, splits]) -> position
 *   With `splits` (int64 (entry, stream position) pairs, entries increasing inside the chunk; not with sample_draws or
 *   tokens_out) the chunk is cut there into pieces walked by two threads (see walk_pieces).
 *   positions[j] = the stream position of entry j of `documents` (int32 ids of a chunk of the document index).
 *   The sizes are `sizes` (int32, by id - first_id) or, with `draws` (each sample's draw count, uint8/16/32, or
 *   uint64 words of one bit per sample when none is drawn twice: 1/8 of the bytes, random reads from cache),
 *   the first of a document's `epochs` int64 in `records` (one cache line); the others are its earlier copies'
 *   positions + 1 (0: not seen yet); or, `records` with one column fewer (packed: sizes below 2^24, positions + 1
 *   below 2^39), the first word the size in its low 24 bits under the first copy's position + 1 (or its STEPS). A last
 *   copy completes the document's exposure: its copies' step functions
 *   (a step at each sample boundary inside a copy) summed into the token and document histograms, stats[0] and
 *   stats[1] (never seen, seen unevenly); stats[2] counts exposures outside the histograms (inconsistent inputs).
 *   `sample_draws` ([S, 2] first/last draw of each sample) and `per_document` ([D, 5] min, max, token
 *   exposures, first and last draw) are for the manifest; with `tokens_out` (int32, one per token of some
 *   documents) and `token_starts` (int64, a document's first token there, -1: not there) each token's exposure is
 *   added into `tokens_out` (two passes, two indexes of one corpus, summed).
 * rows(positions, rows, start, first_row, seq_length, samples) -> the first row i of `rows` (a chunk of the
 *   sample index, int32/int64 [n, 2]: entry, offset) not at positions[entry - start] + offset inside that copy
 *   and at (first_row + i) * seq_length (but row `samples`, whose end the caller checks), or -1.
 * scatter(ids, store, value, bound) -> (position, mix sum, largest): store[id] = value (a zero value: nothing written)
 *   for each id of `ids` (uint32 or int64) up to the first outside [0, bound), that id's position (-1: none), the sum
 *   of mix over the ids before it (as mixed(ids)) and the largest id (as unsigned); store: zeros, uint8/16/32 by id, or
 *   uint64 words of one bit per id.
 * mixed(first, stop) -> the sum (mod 2^64) of mix(x) over x in [first, stop); mixed(ids) -> the same over the ids
 *   (uint32 or int64, >= 0).
 * scan(ids) -> (smallest, largest, the sum of mix over the ids as int64, their sum mod 2^64 as int64) of int32 or
 *   int64 ids (a chunk of the document index: its ids' mix sum is checked against mixed(first, stop) x epochs, nothing
 *   kept per document; or of the .idx sizes, one pass for their range and sum).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SIMD_CLONES
#endif

typedef struct {
    const int32_t *sizes; int64_t *records, epochs, width; int packed;
    const void *draws; int draw_bytes, shift; int64_t seq_length, samples;
    int64_t *tokens_hist, *documents_hist, *stats, bins;
    const int64_t *sample_draws; int64_t *per_document;
    int32_t *tokens_out; const int64_t *token_starts;
    int64_t *scratch;  /* 3 x epochs: each copy's next boundary (document offset), its sample there, that draw count */
    int64_t documents;  /* the documents of sizes / records: an id outside [first_id, first_id + documents) is refused */
    int64_t *bad;  /* the first entry found outside (one for both threads), else -1 */
    int steps;  /* packed records of two copies, no manifest or tokens_out: a first copy may keep its steps (STEPS) */
} Pass;

/* In a packed record, the first copy's draw counts instead of its position + 1 (< 2^39): STEPS, its first sample
 * boundary b (< 2^24) in bits 24-47 and the counts (< 32) on [0, b), [b, b + L) and [b + L, size) in 5 bits each
 * from bit 48, for a document of at most 2L + 1 tokens (at most two boundaries inside a copy): its last copy then
 * reads no draw count at random (stream pass x0.5 of the same with positions kept, 30M samples, half drawn). */
#define STEPS ((uint64_t)1 << 63)

static inline uint64_t mix(uint64_t x) {  /* splitmix64's finalizer */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The sample holding stream position `position`: a shift when seq_length is a power of two (a 64-bit
 * division takes tens of cycles, and there are several per document) */
static inline int64_t sample_of(const Pass *pass, int64_t position) {
    return pass->shift >= 0 ? position >> pass->shift : position / pass->seq_length;
}

static inline int64_t draw_count(const Pass *pass, int64_t sample) {
    if ((uint64_t)sample >= (uint64_t)pass->samples) return 0;  /* (past S, or before 0: a position off the grid) */
    switch (pass->draw_bytes) {
        case 1: return ((const uint8_t *)pass->draws)[sample];
        case 2: return ((const uint16_t *)pass->draws)[sample];
        case 4: return ((const uint32_t *)pass->draws)[sample];
        default: return (((const uint64_t *)pass->draws)[sample >> 6] >> (sample & 63)) & 1;
    }
}

/* Where a sample's draw count is (to prefetch it). */
static inline const char *draw_address(const void *draws, int draw_bytes, int64_t sample) {
    return (const char *)draws + (draw_bytes == 8 ? sample >> 3 : sample * draw_bytes);
}

/* A document's record: its size, and the position + 1 of its earlier copy `copy` (0: not seen yet), see above. */
static inline int64_t *record_of(const Pass *pass, int64_t doc) { return pass->records + doc * pass->width; }

static inline int64_t record_size(const Pass *pass, const int64_t *record) {
    return pass->packed ? record[0] & 0xffffff : record[0];
}

static inline int64_t record_seen(const Pass *pass, const int64_t *record, int64_t copy) {
    return !pass->packed ? record[copy + 1] : copy ? record[copy] : (int64_t)((uint64_t)record[0] >> 24);
}

/* The first and last draws of the samples of one copy at `start` into *first and *last (the manifest). */
static void copy_draws(const Pass *pass, int64_t start, int64_t size, int64_t *first, int64_t *last) {
    for (int64_t k = start > 0 ? sample_of(pass, start) : 0; size > 0 && k * pass->seq_length < start + size && k < pass->samples; k++) {
        int64_t f = pass->sample_draws[2 * k], l = pass->sample_draws[2 * k + 1];
        if (f >= 0 && (*first < 0 || f < *first)) *first = f;
        if (l > *last) *last = l;
    }
}

/* The first sample boundary of a copy at `position` of at most 2L + 1 tokens (> 0, maybe past its end) and the draw
 * counts on [0, b), [b, b + L) and [b + L, size) into `counts` (of the samples there, past its end too). */
static int64_t copy_steps(const Pass *pass, int64_t position, int64_t *counts) {
    int64_t k = sample_of(pass, position);
    if (pass->draw_bytes == 8 && k >= 0 && k + 2 < pass->samples) {  /* bits from their words (no bound or size: x0.93 stream) */
        const uint64_t *words = pass->draws;
        for (int i = 0; i < 3; i++) counts[i] = (int64_t)(words[(k + i) >> 6] >> ((k + i) & 63) & 1);
    } else {
        counts[0] = draw_count(pass, k), counts[1] = draw_count(pass, k + 1), counts[2] = draw_count(pass, k + 2);
    }
    return (k + 1) * pass->seq_length - position;
}

/* A first copy's record bits (above the size): its steps when they fit (see STEPS), else its position + 1. */
static uint64_t first_copy(const Pass *pass, int64_t position, int64_t size) {
    int64_t counts[3], b = pass->steps && size > 0 && size <= 2 * pass->seq_length + 1 ? copy_steps(pass, position, counts) : -1;
    if (b < 0 || b >= 1 << 24 || counts[0] >= 32 || counts[1] >= 32 || counts[2] >= 32)
        return (uint64_t)(position + 1) << 24;
    return STEPS | (uint64_t)b << 24 | (uint64_t)counts[0] << 48 | (uint64_t)counts[1] << 53 | (uint64_t)counts[2] << 58;
}

/* The exposure of a document of two copies of at most 2L + 1 tokens (most documents), the first as its record word
 * keeps it and the last at `last`: the copies' boundaries merged by a sorting network, as complete() would (no
 * branch on the data; with STEPS, stream pass x0.85 of the previous kernel's, 30M samples, half drawn). 0 when it
 * does not apply. */
static int complete_pair(Pass *pass, int64_t size, uint64_t word, int64_t last) {
    int64_t L = pass->seq_length, counts[2][3], ends[2][2], first, values[5], least = INT64_MAX, most = -1, top = 0;
    if (size <= 0 || size > 2 * L + 1) return 0;
    if (word & STEPS)
        first = (int64_t)(word >> 24 & 0xffffff), counts[0][0] = word >> 48 & 31, counts[0][1] = word >> 53 & 31,
        counts[0][2] = word >> 58 & 31;
    else
        first = copy_steps(pass, (int64_t)(word >> 24) - 1, counts[0]);
    int64_t b[2] = {first, copy_steps(pass, last, counts[1])};
    for (int copy = 0; copy < 2; copy++)
        ends[copy][0] = b[copy] < size ? b[copy] : size, ends[copy][1] = b[copy] + L < size ? b[copy] + L : size;
    int64_t inner = ends[0][0] > ends[1][0] ? ends[0][0] : ends[1][0], outer = ends[0][1] < ends[1][1] ? ends[0][1] : ends[1][1];
    int64_t points[6] = {0, ends[0][0] < ends[1][0] ? ends[0][0] : ends[1][0], inner < outer ? inner : outer,
                         inner < outer ? outer : inner, ends[0][1] > ends[1][1] ? ends[0][1] : ends[1][1], size};
    for (int step = 0; step < 5; step++) {
        int64_t at = points[step], length = points[step + 1] - at;
        values[step] = counts[0][(at >= ends[0][0]) + (at >= ends[0][1])] + counts[1][(at >= ends[1][0]) + (at >= ends[1][1])];
        least = length && values[step] < least ? values[step] : least;
        most = length && values[step] > most ? values[step] : most;
        top = values[step] > top ? values[step] : top;
    }
    if (top >= pass->bins) return pass->stats[2]++, 1;
    for (int step = 0; step < 5; step++) pass->tokens_hist[values[step]] += points[step + 1] - points[step];
    pass->documents_hist[least]++;
    pass->stats[0] += most == 0;
    pass->stats[1] += least != most;
    return 1;
}

/* The exposure of document `doc` (size `size`), its last copy at `start`: histograms and stats. A copy's boundaries
 * are seq_length apart from its first, so the copies' boundaries in offset order are, period after period, the copies
 * in the order of their first boundaries (no sort of the boundaries); the value between two is the draws summed. */
static void complete(Pass *pass, int64_t doc, int64_t size, int64_t start) {
    if (pass->steps && complete_pair(pass, size, (uint64_t)*record_of(pass, doc), start)) return;
    int64_t epochs = pass->epochs, *next = pass->scratch, *sample = next + epochs, *draw = sample + epochs;
    int64_t value = 0, first = -1, last = -1;
    const int64_t *record = record_of(pass, doc);
    for (int64_t copy = 0; copy < epochs; copy++) {
        int64_t at = copy + 1 < epochs ? record_seen(pass, record, copy) - 1 : start, k = sample_of(pass, at), i = copy;
        int64_t boundary = (k + 1) * pass->seq_length - at, count = draw_count(pass, k);
        if (pass->sample_draws) copy_draws(pass, at, size, &first, &last);
        for (; i > 0 && next[i - 1] > boundary; i--)
            next[i] = next[i - 1], sample[i] = sample[i - 1], draw[i] = draw[i - 1];
        next[i] = boundary, sample[i] = k, draw[i] = count;
        value += count;
    }
    int64_t low = INT64_MAX, high = -1, total = 0, done = 0;
    for (int64_t period = 0; done < size; period += pass->seq_length) {
        for (int64_t copy = 0; copy < epochs && done < size; copy++) {
            int64_t until = next[copy] + period < size ? next[copy] + period : size;
            if (until > done) {
                if (value < 0 || value >= pass->bins) {
                    pass->stats[2]++;
                    return;
                }
                pass->tokens_hist[value] += until - done;
                total += value * (until - done);
                for (int64_t t = done; pass->tokens_out && pass->token_starts[doc] >= 0 && t < until; t++)
                    pass->tokens_out[pass->token_starts[doc] + t] += (int32_t)value;
                low = value < low ? value : low;
                high = value > high ? value : high;
                done = until;
            }
            int64_t count = draw_count(pass, ++sample[copy]);
            value += count - draw[copy];
            draw[copy] = count;
        }
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
}

/* One copy of document `doc` at `position` with draws: an earlier copy's position kept, or the exposure. `shared`
 * (two threads on one records array): a slot is taken by compare-and-swap, a slot the other thread took meanwhile
 * is an earlier copy, and the copy that finds every slot taken completes the document. */
static void expose(Pass *pass, int64_t doc, int64_t size, int64_t position, int shared) {
    int64_t *record = record_of(pass, doc);
    for (int64_t copy = 0; copy + 1 < pass->epochs; copy++) {
        int64_t *slot = record + copy + !pass->packed, old = shared ? __atomic_load_n(slot, __ATOMIC_RELAXED) : *slot;
        if (pass->packed && !copy ? (uint64_t)old >> 24 : (uint64_t)old) continue;
        int64_t value = pass->packed && !copy ? (int64_t)((uint64_t)old | first_copy(pass, position, size)) : position + 1;
        if (!shared) {
            *slot = value;
            return;
        }
        if (__atomic_compare_exchange_n(slot, &old, value, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
    }
    complete(pass, doc, size, position);
}

static void release(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) if (views[i].obj) PyBuffer_Release(&views[i]);
}

/* The C-contiguous buffers of `objects` (writable where asked; None: NULL); -1 with none held on failure. */
static int buffers(PyObject **objects, Py_buffer *views, void **data, const int *writable, int count) {
    for (int i = 0; i < count; i++) {
        int flags = writable[i] ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
        if (objects[i] != Py_None && PyObject_GetBuffer(objects[i], &views[i], flags) < 0) return release(views, i), -1;
        data[i] = objects[i] == Py_None ? NULL : views[i].buf;
    }
    return 0;
}

/* The copies [j0, j1) of a chunk from stream position `position`, on one thread (`shared`: beside another). */
typedef struct {
    Pass pass;
    const int32_t *documents;
    int64_t first_id, j0, j1, position, *positions;
    int shared;
} Part;

/* Entry `j` holds an id outside the documents: the walk stops there (the first such entry of either thread kept). */
static void refuse(Pass *pass, int64_t j) {
    int64_t seen = __atomic_load_n(pass->bad, __ATOMIC_RELAXED);
    while ((seen < 0 || j < seen) && !__atomic_compare_exchange_n(pass->bad, &seen, j, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* Counters of the pairs: tokens seen once and twice, all tokens of the documents, and documents by their least
 * exposure (0, 1, 2), never seen and seen unevenly. */
typedef struct { int64_t once, twice, tokens, least[3], unseen, partial; } Tally;

/* The exposure of `count` documents of two copies, each copy's STEPS word (the first's with the size in its low 24
 * bits) with one bit per sample (counts 0 or 1), into `tally`. A copy is three segments, [0, b), [b, b + L) and
 * [b + L, size), each drawn or not: the tokens seen twice are the drawn overlaps of the two copies' segments (with
 * b in (0, L] segment i of one copy meets only segments i - 1, i and i + 1 of the other), those seen once the drawn
 * tokens of both copies less twice those, the rest never; the least and most exposure follow from which of the three
 * is not empty. No branch, one document per SIMD lane (in scalar code the blocks of walk_pairs gained nothing). */
SIMD_CLONES
static void pairs(const uint64_t *firsts, const uint64_t *lasts, int64_t count, int64_t L, Tally *tally) {
    int64_t once_sum = 0, twice_sum = 0, tokens = 0, least0 = 0, least1 = 0, least2 = 0, unseen = 0, partial = 0;
    for (int64_t q = 0; q < count; q++) {
        uint64_t w0 = firsts[q], w1 = lasts[q];
        int64_t size = (int64_t)(w0 & 0xffffff), b0 = (int64_t)(w0 >> 24 & 0xffffff), b1 = (int64_t)(w1 >> 24 & 0xffffff);
        int64_t m00 = -(int64_t)(w0 >> 48 & 1), m01 = -(int64_t)(w0 >> 53 & 1), m02 = -(int64_t)(w0 >> 58 & 1);
        int64_t m10 = -(int64_t)(w1 >> 48 & 1), m11 = -(int64_t)(w1 >> 53 & 1), m12 = -(int64_t)(w1 >> 58 & 1);
        int64_t a0 = b0 < size ? b0 : size, a1 = b0 + L < size ? b0 + L : size;  /* copy 0: [0, a0) [a0, a1) [a1, size) */
        int64_t c0 = b1 < size ? b1 : size, c1 = b1 + L < size ? b1 + L : size;  /* copy 1: [0, c0) [c0, c1) [c1, size) */
        int64_t ones = (a0 & m00) + ((a1 - a0) & m01) + ((size - a1) & m02) + (c0 & m10) + ((c1 - c0) & m11) + ((size - c1) & m12);
        int64_t o00 = a0 < c0 ? a0 : c0, o01 = a0 > c0 ? a0 - c0 : 0, o10 = c0 > a0 ? c0 - a0 : 0;
        int64_t o11 = (a1 < c1 ? a1 : c1) - (a0 > c0 ? a0 : c0), o12 = a1 > c1 ? a1 - c1 : 0, o21 = c1 > a1 ? c1 - a1 : 0;
        int64_t o22 = size - (a1 > c1 ? a1 : c1);
        int64_t twice = (o00 & m00 & m10) + (o01 & m00 & m11) + (o10 & m01 & m10) + (o11 & m01 & m11) + (o12 & m01 & m12)
                        + (o21 & m02 & m11) + (o22 & m02 & m12);
        int64_t once = ones - 2 * twice, never = size - once - twice;
        once_sum += once, twice_sum += twice, tokens += size;
        least0 += never != 0, least1 += (never == 0) & (once != 0), least2 += (never == 0) & (once == 0);
        unseen += (once | twice) == 0, partial += (never != 0) + (once != 0) + (twice != 0) > 1;
    }
    tally->once += once_sum, tally->twice += twice_sum, tally->tokens += tokens, tally->unseen += unseen;
    tally->least[0] += least0, tally->least[1] += least1, tally->least[2] += least2, tally->partial += partial;
}

/* walk() for two copies in packed records with one bit per sample (NeoX's and megatron-core's usual audit: at most
 * one draw of each sample), block by block: a tight loop over the records (a first copy keeps its steps, a last copy
 * is queued with its own beside its first copy's), then the queued documents completed by pairs(). The loop that
 * completes each document where its last copy is met stalls on every record it waits for (x0.56-0.70 the stream
 * pass of that loop at 30M samples, half drawn). */
#define QUEUE 256
static void walk_pairs(Part *part) {
    Pass *pass = &part->pass;
    const int32_t *documents = part->documents;
    int64_t first_id = part->first_id, position = part->position, *positions = part->positions, j1 = part->j1;
    int64_t *records = pass->records;
    uint64_t firsts[QUEUE], lasts[QUEUE];
    int shared = part->shared;
    Tally tally = {0};
    for (int64_t block = part->j0; block < j1; block += QUEUE) {
        int64_t stop = block + QUEUE < j1 ? block + QUEUE : j1, queued = 0;
        for (int64_t j = block; j < stop; j++) {
            if (j + 64 < j1) __builtin_prefetch(records + (documents[j + 64] - first_id), 1);
            int64_t doc = documents[j] - first_id, *slot = records + doc, at = position, size;
            if ((uint64_t)doc >= (uint64_t)pass->documents) {  /* (the index changed since its ids were scanned) */
                refuse(pass, j);
                break;
            }
            uint64_t word = shared ? __atomic_load_n((uint64_t *)slot, __ATOMIC_RELAXED) : (uint64_t)*slot;
            positions[j] = position, size = (int64_t)(word & 0xffffff), position += size;
            if (!(word >> 24)) {
                uint64_t value = word | first_copy(pass, at, size);
                if (!shared) {
                    *slot = (int64_t)value;
                    continue;
                }
                if (__atomic_compare_exchange_n((uint64_t *)slot, &word, value, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                    continue;  /* (else the other thread took the slot: this is the last copy, `word` its record) */
            }
            uint64_t last = word & STEPS ? first_copy(pass, at, size) : 0;
            if (last & STEPS)
                firsts[queued] = word, lasts[queued++] = last;
            else
                complete(pass, doc, size, at);
        }
        pairs(firsts, lasts, queued, pass->seq_length, &tally);
        if (__atomic_load_n(pass->bad, __ATOMIC_RELAXED) >= 0) break;
    }
    pass->tokens_hist[0] += tally.tokens - tally.once - tally.twice;
    pass->tokens_hist[1] += tally.once, pass->tokens_hist[2] += tally.twice;
    for (int v = 0; v < 3; v++) pass->documents_hist[v] += tally.least[v];
    pass->stats[0] += tally.unseen, pass->stats[1] += tally.partial;
    part->position = position;
}

static void *walk(void *arg) {
    Part *part = arg;
    Pass *pass = &part->pass;
    if (pass->steps && pass->draw_bytes == 8 && pass->bins >= 3) return walk_pairs(part), NULL;
    const int32_t *documents = part->documents;
    int64_t first_id = part->first_id, position = part->position, *positions = part->positions, j1 = part->j1;
    for (int64_t j = part->j0; j < j1; j++) {
        if (j + 64 < j1) {
            if (pass->records) __builtin_prefetch(record_of(pass, documents[j + 64] - first_id), 1);
            else __builtin_prefetch(pass->sizes + documents[j + 64] - first_id);
        }
        int64_t doc = documents[j] - first_id, size;
        if ((uint64_t)doc >= (uint64_t)pass->documents) {  /* (the index changed since its ids were scanned) */
            refuse(pass, j);
            break;
        }
        size = pass->records ? record_size(pass, record_of(pass, doc)) : pass->sizes[doc];
        positions[j] = position;
        if (pass->draws) expose(pass, doc, size, position, part->shared);
        position += size;
    }
    part->position = position;
    return NULL;
}

/* Two threads over the pieces of a chunk, each taking the next piece (one counter): piece k is the copies
 * [starts[k], starts[k + 1]) from stream position bases[k] (piece 0: the chunk's position; the others: the sample
 * index's word for their first entry), its end into ends[k]. Each thread's histograms are its own. */
typedef struct {
    Part part;
    const int64_t *starts, *bases;
    int64_t *ends, pieces, *next;
} Crew;

static void *crew_walk(void *arg) {
    Crew *crew = arg;
    for (int64_t k; __atomic_load_n(crew->part.pass.bad, __ATOMIC_RELAXED) < 0 &&
                    (k = __atomic_fetch_add(crew->next, 1, __ATOMIC_RELAXED)) < crew->pieces;) {
        Part part = crew->part;
        part.j0 = crew->starts[k], part.j1 = crew->starts[k + 1], part.position = crew->bases[k];
        walk(&part);
        crew->ends[k] = part.position;
    }
    return NULL;
}

/* With `splits` ((entry, position) pairs, entries increasing in (0, count)): the chunk cut there into pieces walked by
 * two threads (a piece at a time, so that neither waits for the other: x0.8 the stream pass with one cut in the
 * middle, whose second thread finished last by 1/3 at 30M samples). A piece that does not start where the one before
 * it ends has its positions moved to follow it (exact; its exposure is then wrong, and withheld by the caller, which
 * finds that sample row off its boundary). One thread without splits or a second thread. */
static void walk_pieces(Part *first, const int64_t *splits, int64_t cuts, int64_t count) {
    int64_t bins = first->pass.bins, epochs = first->pass.epochs > 0 ? first->pass.epochs : 1, pieces = cuts + 1, next = 0;
    int64_t *own = cuts > 0 ? calloc((size_t)(2 * bins + 3 + 3 * epochs + 3 * pieces + 1), 8) : NULL;
    pthread_t thread;
    if (own) {
        int64_t *starts = own + 2 * bins + 3 + 3 * epochs, *bases = starts + pieces + 1, *ends = bases + pieces;
        starts[0] = first->j0, bases[0] = first->position, starts[pieces] = count;
        for (int64_t k = 1; k < pieces; k++) starts[k] = splits[2 * (k - 1)], bases[k] = splits[2 * (k - 1) + 1];
        Crew crews[2] = {{*first, starts, bases, ends, pieces, &next}, {*first, starts, bases, ends, pieces, &next}};
        crews[0].part.shared = crews[1].part.shared = 1;
        Pass *second = &crews[1].part.pass;
        second->tokens_hist = own, second->documents_hist = own + bins, second->stats = own + 2 * bins;
        second->scratch = own + 2 * bins + 3;
        if (!pthread_create(&thread, NULL, crew_walk, &crews[1])) {
            crew_walk(&crews[0]);
            pthread_join(thread, NULL);
            int64_t at = ends[0];
            for (int64_t k = 1; k < pieces; k++) {
                int64_t moved = at - bases[k];
                for (int64_t j = starts[k]; moved && j < starts[k + 1]; j++) first->positions[j] += moved;
                at = ends[k] + moved;
            }
            first->position = at;
            for (int64_t v = 0; v < bins; v++)
                first->pass.tokens_hist[v] += own[v], first->pass.documents_hist[v] += own[bins + v];
            for (int k = 0; k < 3; k++) first->pass.stats[k] += own[2 * bins + k];
            return free(own);
        }
        free(own);
    }
    first->shared = 0;
    walk(first);
}

static PyObject *stream(PyObject *self, PyObject *args) {
    PyObject *objects[13];
    Py_buffer views[13] = {{0}};
    long long first_id, position, epochs, seq_length, samples;
    objects[12] = Py_None;
    if (!PyArg_ParseTuple(args, "OLOOLLOLLOOOOOOOO|O", &objects[0], &first_id, &objects[1], &objects[2], &position,
                          &epochs, &objects[3], &seq_length, &samples, &objects[4], &objects[5], &objects[6],
                          &objects[7], &objects[8], &objects[9], &objects[10], &objects[11], &objects[12]))
        return NULL;
    static const int writable[13] = {0, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0};
    void *data[13];
    if (buffers(objects, views, data, writable, 13)) return NULL;
    const void *draws = data[3];
    int shift = seq_length > 0 && !(seq_length & (seq_length - 1)) ? __builtin_ctzll((unsigned long long)seq_length) : -1;
    int64_t width = views[2].obj && views[2].ndim == 2 ? views[2].shape[1] : 1, count = views[0].len / 4;
    Part part = {{data[1], data[2], epochs, width, width < epochs, draws, draws ? (int)views[3].itemsize : 0,
                  shift, seq_length, samples, data[5], data[6], data[7], draws ? views[5].len / 8 : 0, data[8],
                  data[9], data[10], data[11], malloc((size_t)(epochs > 0 ? 3 * epochs : 1) * sizeof(int64_t))},
                 data[0], first_id, 0, count, position, data[4], 0};
    if (!part.pass.scratch) return release(views, 13), PyErr_NoMemory();
    int64_t bad = -1;
    part.pass.bad = &bad;
    part.pass.documents = data[2] ? (views[2].ndim == 2 ? views[2].shape[0] : views[2].len / 8 / width)
                                  : data[1] ? views[1].len / 4 : 0;
    const int64_t *splits = data[12];
    int64_t cuts = splits && views[12].itemsize == 8 ? views[12].len / 16 : 0;
    for (int64_t k = 0; k < cuts; k++)  /* (entries increasing inside the chunk, or one thread) */
        if (splits[2 * k] <= (k ? splits[2 * k - 2] : 0) || splits[2 * k] >= count) cuts = 0;
    if (part.pass.sample_draws || part.pass.tokens_out) cuts = 0;  /* (the manifest and tokens_out: one thread) */
    part.pass.steps = part.pass.packed && epochs == 2 && draws && !part.pass.per_document && !part.pass.tokens_out;
    Py_BEGIN_ALLOW_THREADS
    walk_pieces(&part, splits, cuts, count);
    Py_END_ALLOW_THREADS
    free(part.pass.scratch);
    if (bad >= 0) {
        int64_t id = ((const int32_t *)data[0])[bad];
        release(views, 13);
        return PyErr_Format(PyExc_IndexError, "document id %lld at entry %lld of the chunk is outside [%lld, %lld)",
                            (long long)id, (long long)bad, first_id, first_id + (long long)part.pass.documents);
    }
    release(views, 13);
    return PyLong_FromLongLong(part.position);
}

/* Rows [from, to) of a chunk of the sample index checked against the copies' positions (see rows()). */
typedef struct {
    const int64_t *positions;
    const void *rows;
    int wide;
    int64_t copies, start, first_row, seq_length, samples, from, to, bad;
} RowCheck;

static void *check_rows(void *arg) {
    RowCheck *check = arg;
    const int32_t *narrow = check->rows;
    const int64_t *wide = check->rows, *positions = check->positions;
    check->bad = -1;
    for (int64_t i = check->from; i < check->to; i++) {
        int64_t entry = check->wide ? wide[2 * i] : narrow[2 * i], offset = check->wide ? wide[2 * i + 1] : narrow[2 * i + 1];
        int64_t local = entry - check->start, row = check->first_row + i;
        if (local < 0 || local >= check->copies || offset < 0 || positions[local] + offset > positions[local + 1] ||
            (row != check->samples && positions[local] + offset != row * check->seq_length))
            return check->bad = i, NULL;
    }
    return NULL;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *objects[2];
    Py_buffer views[2] = {{0}};
    long long start, first_row, seq_length, samples;
    if (!PyArg_ParseTuple(args, "OOLLLL", &objects[0], &objects[1], &start, &first_row, &seq_length, &samples))
        return NULL;
    static const int writable[2] = {0, 0};
    void *data[2];
    if (buffers(objects, views, data, writable, 2)) return NULL;
    int64_t count = views[1].len / views[1].itemsize / 2, half = count >= 1 << 16 ? count / 2 : count;
    RowCheck checks[2] = {{data[0], data[1], views[1].itemsize == 8, views[0].len / 8 - 1, start, first_row, seq_length,
                           samples, 0, half, -1}};
    checks[1] = checks[0], checks[1].from = half, checks[1].to = count;
    pthread_t thread;
    int second;
    Py_BEGIN_ALLOW_THREADS
    second = half < count && !pthread_create(&thread, NULL, check_rows, &checks[1]);  /* (a half each: x0.65) */
    if (!second) checks[0].to = count;
    check_rows(&checks[0]);
    if (second) pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    release(views, 2);
    return PyLong_FromLongLong(checks[0].bad >= 0 || !second ? checks[0].bad : checks[1].bad);
}

/* The sum of mix over `count` ids (uint32, or int64 when `wide`; NULL: first, first + 1, ...) and into *top the
 * largest as unsigned (a negative id is past any bound), in SIMD clones chosen at load time (AVX-512: mixed x0.25
 * and the shuffle's scatter x0.65 at 30M ids). */
SIMD_CLONES
static uint64_t mix_sum(const void *ids, int wide, int64_t first, int64_t count, uint64_t *top) {
    uint64_t sum = 0, most = 0;
    if (!ids)
        for (int64_t i = 0; i < count; i++) sum += mix((uint64_t)(first + i));
    else if (wide)
        for (int64_t i = 0; i < count; i++) {
            uint64_t id = ((const uint64_t *)ids)[i];
            sum += mix(id), most = id > most ? id : most;
        }
    else
        for (int64_t i = 0; i < count; i++) {
            uint64_t id = ((const uint32_t *)ids)[i];
            sum += mix(id), most = id > most ? id : most;
        }
    *top = most;
    return sum;
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    PyObject *objects[2];
    Py_buffer views[2] = {{0}};
    long long value, bound;
    if (!PyArg_ParseTuple(args, "OOLL", &objects[0], &objects[1], &value, &bound)) return NULL;
    static const int writable[2] = {0, 1};
    void *data[2];
    if (buffers(objects, views, data, writable, 2)) return NULL;
    int wide = views[0].itemsize == 8, bytes = (int)views[1].itemsize;
    int64_t count = views[0].len / views[0].itemsize, bad = -1;
    uint64_t sum, top;
    const uint32_t *narrow_ids = data[0];
    const int64_t *wide_ids = data[0];
    char *store = data[1];
    if (bound > (bytes == 8 ? views[1].len * 8 : views[1].len / bytes)) bound = -1;  /* (a caller's error: no write) */
    Py_BEGIN_ALLOW_THREADS
    sum = mix_sum(data[0], wide, 0, count, &top);
    if (count && (bound < 0 || top >= (uint64_t)bound)) {  /* the first id outside, and the sum before it */
        for (sum = 0, bad = 0; (wide ? wide_ids[bad] : narrow_ids[bad]) >= 0 && (wide ? wide_ids[bad] : narrow_ids[bad]) < bound; bad++)
            sum += mix((uint64_t)(wide ? wide_ids[bad] : narrow_ids[bad]));
    }
    for (int64_t i = 0; value && i < (bad < 0 ? count : bad); i++) {
        int64_t ahead = i + 32 < count ? (wide ? wide_ids[i + 32] : narrow_ids[i + 32]) : -1;
        if (ahead >= 0 && ahead < bound) __builtin_prefetch(draw_address(store, bytes, ahead), 1);
        int64_t id = wide ? wide_ids[i] : narrow_ids[i];
        switch (bytes) {
            case 1: ((uint8_t *)store)[id] = (uint8_t)value; break;
            case 2: ((uint16_t *)store)[id] = (uint16_t)value; break;
            case 4: ((uint32_t *)store)[id] = (uint32_t)value; break;
            default: ((uint64_t *)store)[id >> 6] |= (uint64_t)1 << (id & 63);
        }
    }
    Py_END_ALLOW_THREADS
    release(views, 2);
    return Py_BuildValue("LKK", (long long)bad, (unsigned long long)sum, (unsigned long long)top);
}

static PyObject *mixed(PyObject *self, PyObject *args) {
    long long first = 0, stop = 0;
    PyObject *ids = NULL;
    Py_buffer view = {0};
    uint64_t sum, top;
    if (PyTuple_GET_SIZE(args) == 1 ? !PyArg_ParseTuple(args, "O", &ids) || PyObject_GetBuffer(ids, &view, PyBUF_C_CONTIGUOUS)
                                    : !PyArg_ParseTuple(args, "LL", &first, &stop))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    sum = mix_sum(ids ? view.buf : NULL, ids && view.itemsize == 8, first, ids ? view.len / view.itemsize : stop - first, &top);
    Py_END_ALLOW_THREADS
    if (ids) PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(sum);
}

SIMD_CLONES
static uint64_t scan_ids(const void *ids, int wide, int64_t count, int64_t *low, int64_t *high, uint64_t *total) {
    uint64_t sum = 0, plain = 0;
    int64_t least = INT64_MAX, most = INT64_MIN;
    for (int64_t i = 0; i < count; i++) {
        int64_t id = wide ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
        sum += mix((uint64_t)id), plain += (uint64_t)id, least = id < least ? id : least, most = id > most ? id : most;
    }
    *low = least, *high = most, *total = plain;
    return sum;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *ids;
    Py_buffer view = {0};
    int64_t low, high;
    uint64_t sum, total;
    if (!PyArg_ParseTuple(args, "O", &ids) || PyObject_GetBuffer(ids, &view, PyBUF_C_CONTIGUOUS)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    sum = scan_ids(view.buf, view.itemsize == 8, view.len / view.itemsize, &low, &high, &total);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("LLLL", (long long)low, (long long)high, (long long)(int64_t)sum, (long long)(int64_t)total);
}

static PyMethodDef methods[] = {
    {"stream", stream, METH_VARARGS, "The stream pass over a chunk of a document index (see the module comment)."},
    {"rows", rows, METH_VARARGS, "The first sample row off its boundary, or -1 (see the module comment)."},
    {"scatter", scatter, METH_VARARGS, "Draw counts into a store by sample id (see the module comment)."},
    {"mixed", mixed, METH_VARARGS, "The sum of mix(x) over a range of ids or an array (see the module comment)."},
    {"scan", scan, METH_VARARGS, "The smallest, largest, mix sum and sum of int32/int64 ids (see the module comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_exposure", "The audit's stream pass.", -1, methods};

PyMODINIT_FUNC PyInit__exposure(void) { return PyModule_Create(&module); }
