/* A floor for the audit's dense stream pass (run by hand): one random read-modify-write of a 16-byte
 * (records path) or 8-byte (pair path) per-document record for every entry of a NeoX/megatron document
 * index, prefetched, on 1 or 2 threads.
 *
 *   gcc -O2 -pthread bench/random_access_floor.c -o /tmp/floor
 *   /tmp/floor D/..._doc_idx.npy 51200000 2      # the .npy of bench/audit_bench.py, documents, threads
 *   /tmp/floor D/..._doc_idx.npy 51200000 2 8    # 8-byte records
 *
 * The .npy must hold int32 ids (NeoX's doc_idx); its 128-byte header is skipped. Prints the wall time of
 * the pass alone (the records are allocated on huge pages where available and zeroed before timing). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct { uint32_t size, acc; } Rec;  /* the first 8 bytes of a record of `stride` bytes */

static const int32_t *doc;
static char *rec;
static size_t stride = 16;
#define REC(d) ((Rec *)(rec + (size_t)(d) * stride))
static int64_t ndocs;

typedef struct { int64_t a, b, tokens; } Part;

static void *pass(void *arg) {
    Part *p = (Part *)arg;
    int64_t tokens = 0;
    for (int64_t i = p->a; i < p->b; i++) {
        if (i + 48 < p->b) __builtin_prefetch(REC(doc[i + 48]), 1, 3);
        int32_t d = doc[i];
        if (d < 0 || d >= ndocs) continue;
        tokens += REC(d)->size;  /* the audit reads the size and adds to the counts of the same record */
        __atomic_fetch_add(&REC(d)->acc, 1, __ATOMIC_RELAXED);
    }
    p->tokens = tokens;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s DOC_IDX.npy DOCUMENTS THREADS(1|2) [RECORD_BYTES(8|16)]\n", argv[0]); return 2; }
    if (argc > 4) {
        stride = (size_t)atoi(argv[4]);
        if (stride != 8 && stride != 16) { fprintf(stderr, "RECORD_BYTES %s: 8 or 16\n", argv[4]); return 2; }
    }
    ndocs = atoll(argv[2]);
    int threads = atoi(argv[3]) == 2 ? 2 : 1;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror(argv[1]); return 2; }
    off_t len = lseek(fd, 0, SEEK_END);
    char *raw = malloc((size_t)len);
    if (!raw || pread(fd, raw, (size_t)len, 0) != len) { perror("read"); return 2; }
    doc = (const int32_t *)(raw + 128);
    int64_t n = (len - 128) / 4;
    size_t bytes = (size_t)ndocs * stride;
    rec = aligned_alloc(1 << 21, (bytes + (1 << 21) - 1) & ~(size_t)((1 << 21) - 1));
    if (!rec) { perror("records"); return 2; }
    madvise(rec, bytes, MADV_HUGEPAGE);
    memset(rec, 0, bytes);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Part parts[2] = {{0, threads == 2 ? n / 2 : n, 0}, {n / 2, n, 0}};
    pthread_t t;
    if (threads == 2) pthread_create(&t, NULL, pass, &parts[1]);
    pass(&parts[0]);
    if (threads == 2) pthread_join(t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%lld copies, %lld records of %zu bytes, %d thread(s): %.3f s\n", (long long)n, (long long)ndocs, stride, threads,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
