/* Would a radix-partitioned stream pass beat the audit's random access per copy? (run by hand)
 *
 *   gcc -O2 -march=native bench/partition_floor.c -o /tmp/partition_floor
 *   /tmp/partition_floor 51200000 9        # documents (each twice, shuffled together), log2(buckets)
 *
 * Both ways compute what the stream pass needs first, each copy's .idx size in stream order and the running
 * stream position, on one thread over the same synthetic document index (sizes 1-3,999, seeded):
 *   random:      sizes[doc[i]] with a prefetch 48 copies ahead (what the audit does, its records aside);
 *   partitioned: the ids bucketed by their high bits (a count and a scatter into per-bucket runs), each
 *                bucket's sizes gathered while that slice of the sizes is in cache, then the copies replayed
 *                in stream order from the buckets' cursors.
 * Prints the wall time of each (the arrays on huge pages where available, touched before timing) and a
 * checksum that must match. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *big(size_t n) {
    const size_t huge = (size_t)1 << 21;
    void *p = aligned_alloc(huge, (n + huge - 1) / huge * huge);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0, n);
    return p;
}

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DOCUMENTS BUCKET_BITS\n", argv[0]);
        return 2;
    }
    const int64_t D = atoll(argv[1]), N = 2 * D;
    const int bits = atoi(argv[2]);
    if (D <= 0 || bits < 1 || bits > 20) {
        fprintf(stderr, "DOCUMENTS > 0 and BUCKET_BITS in [1, 20]\n");
        return 2;
    }
    int32_t *sz = big((size_t)D * 4), *doc = big((size_t)N * 4);
    uint64_t x = 88172645463325252ull;
    for (int64_t d = 0; d < D; d++) sz[d] = (int32_t)(1 + rnd(&x) % 3999);
    for (int64_t i = 0; i < N; i++) doc[i] = (int32_t)(i % D);
    for (int64_t i = N - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rnd(&x) % (uint64_t)(i + 1));
        const int32_t t = doc[i];
        doc[i] = doc[j];
        doc[j] = t;
    }

    double t0 = now();
    int64_t base = 0;
    uint64_t chk = 0;  /* wraps: a checksum only */
    for (int64_t i = 0; i < N; i++) {
        if (i + 48 < N) __builtin_prefetch(sz + doc[i + 48], 0, 3);
        chk += (uint64_t)base;
        base += sz[doc[i]];
    }
    const double t_random = now() - t0;
    printf("random       %.3f s  (checksum %llu)\n", t_random, (unsigned long long)chk);

    const int B = 1 << bits;
    int sh = 0;
    while (((int64_t)1 << sh) * B < D) sh++;  /* bucket of d: d >> sh */
    int64_t *start = calloc((size_t)B + 1, 8), *cur = malloc((size_t)B * 8);
    uint32_t *e = big((size_t)N * 4);
    t0 = now();
    for (int64_t i = 0; i < N; i++) start[(doc[i] >> sh) + 1]++;
    for (int b = 0; b < B; b++) start[b + 1] += start[b];
    memcpy(cur, start, (size_t)B * 8);
    for (int64_t i = 0; i < N; i++) e[cur[doc[i] >> sh]++] = (uint32_t)doc[i];
    const double t1 = now();
    for (int b = 0; b < B; b++)
        for (int64_t k = start[b]; k < start[b + 1]; k++) e[k] = (uint32_t)sz[e[k]];
    const double t2 = now();
    memcpy(cur, start, (size_t)B * 8);
    base = chk = 0;
    for (int64_t i = 0; i < N; i++) {
        chk += (uint64_t)base;
        base += e[cur[doc[i] >> sh]++];
    }
    const double t3 = now();
    printf("partitioned  %.3f s = bucket %.3f + gather %.3f + replay %.3f  (%d buckets, checksum %llu)\n", t3 - t0,
           t1 - t0, t2 - t1, t3 - t2, B, (unsigned long long)chk);
    return 0;
}
