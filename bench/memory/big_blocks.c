/* Counts the process's live malloc blocks of BIG_MIN bytes and more (malloc, calloc, realloc, posix_memalign;
 * any thread), their peak since the last mt_reset(), and a histogram by power of two. Loaded with LD_PRELOAD;
 * bench/memory/big_blocks.py reads it between the phases of the bench's GRPO stage (docs/benchmarks.md,
 * session 18). Build: gcc -O2 -shared -fPIC -o /tmp/big_blocks.so bench/memory/big_blocks.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TB (1 << 22)                 /* open-addressing table of live blocks */
#define BIG_MIN (32 * 1024)
static void *keys[TB];
static size_t vals[TB], live, peak, hist[64], peakhist[64];
static int (*r_pm)(void **, size_t, size_t);
static void *(*r_malloc)(size_t), *(*r_realloc)(void *, size_t), *(*r_calloc)(size_t, size_t);
static void (*r_free)(void *);
static char boot[1 << 16];          /* dlsym's own allocations, before the real functions are known */
static size_t bootpos;
static int booting;
static volatile int lock;
#define LOCK while (__sync_lock_test_and_set(&lock, 1))
#define UNLOCK __sync_lock_release(&lock)
#define TOMB ((void *)1)

static size_t slot(void *p) { return ((uintptr_t)p >> 4) * 11400714819323198485ull >> (64 - 22); }

static void put(void *p, size_t s) {
    if (!p || s < BIG_MIN) return;
    LOCK;
    size_t i = slot(p);
    while (keys[i] && keys[i] != TOMB) i = (i + 1) & (TB - 1);
    keys[i] = p; vals[i] = s; live += s; hist[63 - __builtin_clzll(s)]++;
    if (live > peak) { peak = live; memcpy(peakhist, hist, sizeof hist); }
    UNLOCK;
}

static void del(void *p) {
    if (!p) return;
    LOCK;
    for (size_t i = slot(p); keys[i]; i = (i + 1) & (TB - 1))
        if (keys[i] == p) { live -= vals[i]; hist[63 - __builtin_clzll(vals[i])]--; keys[i] = TOMB; break; }
    UNLOCK;
}

static void init(void) {
    booting = 1;
    r_pm = dlsym(RTLD_NEXT, "posix_memalign"); r_malloc = dlsym(RTLD_NEXT, "malloc");
    r_free = dlsym(RTLD_NEXT, "free"); r_realloc = dlsym(RTLD_NEXT, "realloc"); r_calloc = dlsym(RTLD_NEXT, "calloc");
    booting = 0;
}

static void *boot_alloc(size_t s) { void *p = boot + bootpos; bootpos += (s + 15) & ~(size_t)15; return p; }

void *malloc(size_t s) {
    if (!r_malloc) { if (booting) return boot_alloc(s); init(); }
    void *p = r_malloc(s); put(p, s); return p;
}
void free(void *p) {
    if ((char *)p >= boot && (char *)p < boot + sizeof boot) return;
    if (!r_free) init();
    del(p); r_free(p);
}
void *calloc(size_t n, size_t s) {
    if (!r_calloc) { if (booting) { void *p = boot_alloc(n * s); memset(p, 0, n * s); return p; } init(); }
    void *p = r_calloc(n, s); put(p, n * s); return p;
}
void *realloc(void *p, size_t s) { if (!r_realloc) init(); del(p); void *q = r_realloc(p, s); put(q, s); return q; }
int posix_memalign(void **pp, size_t a, size_t s) {
    if (!r_pm) init();
    int r = r_pm(pp, a, s); if (!r) put(*pp, s); return r;
}

size_t mt_live(void) { return live; }
size_t mt_peak(void) { return peak; }
size_t mt_peakhist(int b) { return peakhist[b]; }
void mt_reset(void) { LOCK; peak = live; memcpy(peakhist, hist, sizeof hist); UNLOCK; }
/* the sizes of the live blocks (up to cap of them) into out; returns how many */
size_t mt_sizes(size_t *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < TB && n < cap; i++) if (keys[i] && keys[i] != TOMB) out[n++] = vals[i];
    return n;
}
