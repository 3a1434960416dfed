// test-blob-store.c — the blob stores below the document tiers (src/kv/blob-*.c).
//   disk: round trips at sizes around the chunk size, reopen rebuilds the listing, a damaged
//         chunk / manifest and a truncated file are misses and get deleted, leftover temporary
//         files go at open, a full disk (RLIMIT_FSIZE) stops writing while gets go on.
//   redis: against a redis-server this program starts on a free loopback port in a temporary
//         folder with persistence off (stopped at exit, on a crash too): round trips, SELECT, a
//         damaged chunk (SETRANGE) and a partial entry are misses and get dropped, no chunk is
//         orphaned by overwrites or deletes, URL and password errors are named, Redis killed
//         mid-run fails fast and the store reconnects after its backoff once it is back, two
//         writers of one key leave one writer's entry whole while a reader never sees a mix.
// Without redis-server the Redis cases FAIL and name scripts/setup.sh (CI installs it).
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hiredis.h>

#include "kv/blob-internal.h"
#include "redis-fixture.h"
#include "test.h"

#define C LI_BLOB_CHUNK_BYTES

static li_rng rng;

static uint8_t *random_bytes(size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)li_rng_u64(&rng);
    return p;
}

static li_doc_key random_key(void) {
    li_doc_key k;
    for (int i = 0; i < 32; i++) k.b[i] = (uint8_t)li_rng_u64(&rng);
    return k;
}

// get == expected bytes
static bool get_equals(li_blob_store *s, const li_doc_key *k, const void *want, size_t n) {
    void *got = NULL;
    size_t gn = 0;
    li_status rc = li_blob_get(s, k, &got, &gn);
    bool ok = rc == LI_OK && got && gn == n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

static bool get_misses(li_blob_store *s, const li_doc_key *k) {
    void *got = (void *)1;
    size_t gn = 1;
    li_status rc = li_blob_get(s, k, &got, &gn);
    return rc == LI_ERR_NOT_FOUND && got == NULL && gn == 0;
}

typedef struct {
    int n;
    int64_t bytes;
} list_count;

static void count_cb(void *ctx, const li_doc_key *key, int64_t bytes) {
    list_count *lc = ctx;
    lc->n++;
    lc->bytes += bytes;
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "  cannot remove %s\n", dir);
}

static void entry_file(const char *dir, const li_doc_key *k, char *out, size_t n) {
    char hex[65];
    li_doc_key_hex(k, hex);
    snprintf(out, n, "%s/%s", dir, hex);
}

static void flip_byte(const char *path, off_t off) {
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) fprintf(stderr, "  cannot read %s\n", path);
    b ^= 0x40;
    if (fd >= 0 && pwrite(fd, &b, 1, off) != 1) fprintf(stderr, "  cannot write %s\n", path);
    if (fd >= 0) close(fd);
}

static const size_t SIZES[] = {0, 1, C - 1, C, C + 1, 3 * (size_t)C + 17};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

// Round trips of every size in SIZES; the listing and stats agree; a reopen finds them all.
static void round_trips(li_blob_store **sp, const char *what, const char *reopen_dir) {
    char name[128];
    snprintf(name, sizeof name, "%s: round trips of 0, 1, chunk-1, chunk, chunk+1, 3 chunks+17",
             what);
    TEST_BEGIN(name);
    li_blob_store *s = *sp;
    li_blob_stats st0, st;
    li_blob_get_stats(s, &st0);
    li_doc_key keys[N_SIZES];
    uint8_t *data[N_SIZES];
    int64_t total = 0;
    for (size_t i = 0; i < N_SIZES; i++) {
        keys[i] = random_key();
        data[i] = random_bytes(SIZES[i]);
        total += (int64_t)SIZES[i];
        CHECK(!li_blob_exists(s, &keys[i]), "exists before put");
        CHECK(get_misses(s, &keys[i]), "miss before put");
        li_status rc = li_blob_put(s, &keys[i], data[i], SIZES[i]);
        CHECK(rc == LI_OK, "put %zu: %s", SIZES[i], li_last_error());
    }
    for (size_t i = 0; i < N_SIZES; i++) {
        CHECK(li_blob_exists(s, &keys[i]), "exists %zu", SIZES[i]);
        CHECK(get_equals(s, &keys[i], data[i], SIZES[i]), "get %zu", SIZES[i]);
    }
    // overwrite one entry with other bytes of another size
    uint8_t *other = random_bytes(C + 7);
    CHECK(li_blob_put(s, &keys[1], other, C + 7) == LI_OK, "overwrite: %s", li_last_error());
    CHECK(get_equals(s, &keys[1], other, C + 7), "get after overwrite");
    total += C + 7 - 1;
    list_count lc = {0};
    CHECK(li_blob_list(s, count_cb, &lc) == LI_OK, "list: %s", li_last_error());
    CHECK(lc.n == (int)N_SIZES && lc.bytes == total, "list: %d entries, %lld bytes; want %d, %lld",
          lc.n, (long long)lc.bytes, (int)N_SIZES, (long long)total);
    li_blob_get_stats(s, &st);
    CHECK(st.puts - st0.puts == (int64_t)N_SIZES + 1 && st.hits - st0.hits == (int64_t)N_SIZES + 1 &&
              st.misses - st0.misses == (int64_t)N_SIZES && st.corrupt == st0.corrupt,
          "stats: +%lld puts, +%lld hits, +%lld misses, +%lld corrupt",
          (long long)(st.puts - st0.puts), (long long)(st.hits - st0.hits),
          (long long)(st.misses - st0.misses), (long long)(st.corrupt - st0.corrupt));
    if (reopen_dir) {
        CHECK(st.resident_entries == (int64_t)N_SIZES && st.resident_bytes == total,
              "resident %lld entries, %lld bytes", (long long)st.resident_entries,
              (long long)st.resident_bytes);
        li_blob_close(s);
        CHECK(li_blob_disk_open(sp, reopen_dir) == LI_OK, "reopen: %s", li_last_error());
        s = *sp;
        li_blob_get_stats(s, &st);
        CHECK(st.resident_entries == (int64_t)N_SIZES && st.resident_bytes == total,
              "after reopen: %lld entries, %lld bytes", (long long)st.resident_entries,
              (long long)st.resident_bytes);
        CHECK(get_equals(s, &keys[5], data[5], SIZES[5]), "get after reopen");
    }
    for (size_t i = 0; i < N_SIZES; i++) {
        CHECK(li_blob_del(s, &keys[i]) == LI_OK, "del: %s", li_last_error());
        CHECK(!li_blob_exists(s, &keys[i]) && get_misses(s, &keys[i]), "gone after del");
        free(data[i]);
    }
    CHECK(li_blob_del(s, &keys[0]) == LI_OK, "deleting an absent key is fine");
    lc = (list_count){0};
    li_blob_list(s, count_cb, &lc);
    CHECK(lc.n == 0, "%d entries left after deleting all", lc.n);
    free(other);
    TEST_END();
}

// ---- disk -------------------------------------------------------------------------------------

static void disk_tests(const char *root) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/disk", root);
    li_blob_store *s = NULL;
    TEST_BEGIN("disk: open errors name the path");
    {
        char file[600];
        snprintf(file, sizeof file, "%s/plain-file", root);
        FILE *f = fopen(file, "w");
        if (f) fclose(f);
        li_blob_store *x = NULL;
        CHECK(li_blob_disk_open(&x, file) == LI_ERR_IO && strstr(li_last_error(), "plain-file"),
              "%s", li_last_error());
        CHECK(li_blob_disk_open(&x, "/nonexistent-parent/x/y") == LI_ERR_IO &&
              strstr(li_last_error(), "nonexistent-parent"), "%s", li_last_error());
        CHECK(x == NULL, "no handle on failure");
    }
    TEST_END();
    if (li_blob_disk_open(&s, dir) != LI_OK) {
        TEST_BEGIN("disk: open");
        CHECK(0, "%s", li_last_error());
        TEST_END();
        return;
    }
    CHECK(!strncmp(li_blob_name(s), "disk:", 5), "name %s", li_blob_name(s));
    round_trips(&s, "disk", dir);

    TEST_BEGIN("disk: a damaged chunk, manifest or a truncated file is a miss and is deleted");
    {
        size_t n = 2 * (size_t)C + 5;
        uint8_t *d = random_bytes(n);
        li_doc_key k[3] = {random_key(), random_key(), random_key()};
        char path[3][700];
        for (int i = 0; i < 3; i++) {
            li_blob_put(s, &k[i], d, n);
            entry_file(dir, &k[i], path[i], sizeof path[i]);
        }
        size_t mb = li_blob_manifest_bytes(3);
        flip_byte(path[0], (off_t)(mb + C + 12345));  // a byte of chunk 1
        flip_byte(path[1], 20);                        // the payload size in the manifest
        CHECK(truncate(path[2], (off_t)(mb + n - 1)) == 0, "truncate");
        li_blob_stats before, after;
        li_blob_get_stats(s, &before);
        for (int i = 0; i < 3; i++) {
            CHECK(get_misses(s, &k[i]), "entry %d served", i);
            CHECK(access(path[i], F_OK) != 0, "entry %d file still there", i);
        }
        li_blob_get_stats(s, &after);
        CHECK(after.corrupt - before.corrupt == 3 && after.misses - before.misses == 3,
              "corrupt +%lld misses +%lld", (long long)(after.corrupt - before.corrupt),
              (long long)(after.misses - before.misses));
        CHECK(li_blob_put(s, &k[0], d, n) == LI_OK && get_equals(s, &k[0], d, n),
              "rewritten after the drop");
        li_blob_del(s, &k[0]);
        free(d);
    }
    TEST_END();

    TEST_BEGIN("disk: leftover temporary files of dead writers are removed at open");
    {
        li_doc_key k = random_key();
        char hex[65], stale[700], garbage[700], live[700], foreign[700];
        li_doc_key_hex(&k, hex);
        // pid 4194304 is above Linux's pid_max limit, so it names no process
        snprintf(stale, sizeof stale, "%s/.tmp-%s-4194304-0", dir, hex);
        snprintf(garbage, sizeof garbage, "%s/.tmp-junk", dir);
        snprintf(live, sizeof live, "%s/.tmp-%s-%ld-7", dir, hex, (long)getpid());
        snprintf(foreign, sizeof foreign, "%s/README", dir);
        const char *files[] = {stale, garbage, live, foreign};
        for (int i = 0; i < 4; i++) {
            FILE *f = fopen(files[i], "w");
            if (f) fputs("half an entry", f), fclose(f);
        }
        li_blob_close(s);
        s = NULL;
        CHECK(li_blob_disk_open(&s, dir) == LI_OK, "reopen: %s", li_last_error());
        CHECK(access(stale, F_OK) != 0 && access(garbage, F_OK) != 0, "leftovers kept");
        CHECK(access(live, F_OK) == 0, "a live writer's temporary file was removed");
        CHECK(access(foreign, F_OK) == 0, "a foreign file was removed");
        list_count lc = {0};
        li_blob_list(s, count_cb, &lc);
        CHECK(lc.n == 0, "%d entries listed from junk", lc.n);
        unlink(live);
        unlink(foreign);
    }
    TEST_END();

    TEST_BEGIN("disk: a full disk (RLIMIT_FSIZE) fails puts, stops writing, gets go on");
    if (s) {
        li_doc_key small = random_key(), big = random_key(), later = random_key();
        uint8_t *d = random_bytes(2 * (size_t)C);
        CHECK(li_blob_put(s, &small, d, 1000) == LI_OK, "small put: %s", li_last_error());
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 1 << 20;  // files may not grow past 1 MiB: EFBIG, like a full disk
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &lim);
        li_status rc = li_blob_put(s, &big, d, 2 * (size_t)C);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", li_last_error());
        li_blob_stats st;
        li_blob_get_stats(s, &st);
        li_status rc2 = li_blob_put(s, &later, d, 10);  // small, but the store stopped writing
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev);
        CHECK(rc == LI_ERR_IO && strstr(msg, "full"), "big put: %s: %s", li_status_str(rc), msg);
        CHECK(!st.writable && st.errors >= 1, "still writable after a full disk");
        CHECK(rc2 == LI_ERR_IO, "a put after the full disk went through");
        CHECK(get_equals(s, &small, d, 1000), "get after the full disk");
        CHECK(!li_blob_exists(s, &big) && get_misses(s, &big), "half-written entry visible");
        char cmd[700];
        snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q tmp", dir);
        CHECK(system(cmd) != 0, "a temporary file was left behind");
        CHECK(li_blob_del(s, &small) == LI_OK, "del");
        li_blob_get_stats(s, &st);
        CHECK(st.writable, "writable again once a delete freed space");
        CHECK(li_blob_put(s, &big, d, 2 * (size_t)C) == LI_OK, "put after space was freed: %s",
              li_last_error());
        li_blob_del(s, &big);
        free(d);
    }
    TEST_END();
    li_blob_close(s);
}

// ---- redis server fixture --------------------------------------------------------------------

typedef struct {
    pid_t pid;
    int port;
    char dir[256];
} redis_server;

static redis_server servers[4];
static int n_servers;

static void server_stop(redis_server *sv) { li_redis_server_kill(&sv->pid); }

// Starts redis-server on sv->port (0: a free one) with persistence off in sv->dir, optionally
// with a password; waits until it answers. false with a message on stderr otherwise.
static bool server_start(redis_server *sv, const char *password) {
    if (li_redis_server_spawn(sv->dir, password, &sv->pid, &sv->port)) return true;
    fprintf(stderr, "  redis-server did not start (log in %s)\n", sv->dir);
    return false;
}

static void stop_all(void) {
    for (int i = 0; i < n_servers; i++) server_stop(&servers[i]);
}

static void on_fatal(int sig) {
    stop_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static redisContext *raw(const redis_server *sv, int db) {
    redisContext *c = redisConnect("127.0.0.1", sv->port);
    if (c && !c->err && db) freeReplyObject(redisCommand(c, "SELECT %d", db));
    return c;
}

static long long raw_int(redisContext *c, const char *cmd) {
    redisReply *y = redisCommand(c, cmd);
    long long v = y && y->type == REDIS_REPLY_INTEGER ? y->integer : -1;
    if (y) freeReplyObject(y);
    return v;
}

// ---- redis cases ------------------------------------------------------------------------------

static void url_errors(void) {
    TEST_BEGIN("redis: URL and password-file errors are named");
    struct {
        const char *url, *want;
    } cases[] = {
        {"http://127.0.0.1:6379", "redis://HOST:PORT"},
        {"redis://127.0.0.1:99999", "port"},
        {"redis://127.0.0.1:6379/x", "database"},
        {"redis://:pw@127.0.0.1:6379", "password-file"},
        {"redis://", "no host"},
        {"redis://[::1:6379", "unclosed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        li_blob_store *s = NULL;
        li_status rc = li_blob_redis_open(&s, cases[i].url, NULL);
        CHECK(rc == LI_ERR_INVALID_ARG && strstr(li_last_error(), cases[i].want) && !s,
              "%s: %s", cases[i].url, li_last_error());
    }
    li_blob_store *s = NULL;
    CHECK(li_blob_redis_open(&s, "redis://127.0.0.1:1", "/nonexistent/pw") == LI_ERR_IO &&
              strstr(li_last_error(), "password-file"), "%s", li_last_error());
    TEST_END();
}

static void corrupt_and_partial(li_blob_store *s, const redis_server *sv, int db) {
    TEST_BEGIN("redis: a damaged chunk, a partial entry, a stale manifest are dropped misses");
    redisContext *c = raw(sv, db);
    size_t n = 2 * (size_t)C + 9;
    uint8_t *d = random_bytes(n);
    li_doc_key k[3] = {random_key(), random_key(), random_key()};
    for (int i = 0; i < 3; i++)
        CHECK(li_blob_put(s, &k[i], d, n) == LI_OK, "put: %s", li_last_error());
    CHECK(raw_int(c, "DBSIZE") == 3 * 4, "keys %lld, want 3 manifests + 9 chunks",
          raw_int(c, "DBSIZE"));
    // find each entry's chunk keys through its manifest
    char mkey[3][96], ck[3][128];
    for (int i = 0; i < 3; i++) {
        char hex[65];
        li_doc_key_hex(&k[i], hex);
        snprintf(mkey[i], sizeof mkey[i], "lazyinfer:kv:%s", hex);
        redisReply *y = redisCommand(c, "GET %s", mkey[i]);
        li_blob_manifest m;
        CHECK(y && y->type == REDIS_REPLY_STRING && li_blob_manifest_decode(y->str, y->len, &k[i], &m),
              "manifest %d", i);
        snprintf(ck[i], sizeof ck[i], "%s:%016llx:1", mkey[i], (unsigned long long)m.nonce);
        if (y) freeReplyObject(y);
    }
    redisReply *y = redisCommand(c, "GETRANGE %s 777 777", ck[0]);
    char flipped = y && y->len == 1 ? (char)(y->str[0] ^ 1) : 'x';
    if (y) freeReplyObject(y);
    freeReplyObject(redisCommand(c, "SETRANGE %s 777 %b", ck[0], &flipped, (size_t)1));
    freeReplyObject(redisCommand(c, "DEL %s", ck[1]));
    freeReplyObject(redisCommand(c, "SETRANGE %s 8 %b", mkey[2], "\x02", (size_t)1));  // version 2
    li_blob_stats before, after;
    li_blob_get_stats(s, &before);
    for (int i = 0; i < 3; i++) {
        CHECK(get_misses(s, &k[i]), "entry %d served", i);
        CHECK(!li_blob_exists(s, &k[i]), "entry %d still there", i);
    }
    li_blob_get_stats(s, &after);
    CHECK(after.corrupt - before.corrupt == 3, "corrupt +%lld",
          (long long)(after.corrupt - before.corrupt));
    // the damaged and partial entries' chunks went with them; the stale manifest's chunks could
    // not be named (its version is unknown), so 3 chunks of entry 2 remain for maxmemory
    CHECK(raw_int(c, "DBSIZE") == 3, "keys left %lld, want entry 2's 3 chunks",
          raw_int(c, "DBSIZE"));
    freeReplyObject(redisCommand(c, "FLUSHDB"));
    redisFree(c);
    free(d);
    TEST_END();
}

typedef struct {
    char url[128];
    li_doc_key key;
    const uint8_t *data;  // this writer's value (readers: NULL)
    const uint8_t *a, *b; // both values, for readers
    size_t n;
    int rounds;
    int failures, mixed, hits;
} writer_arg;

static void *writer(void *p) {
    writer_arg *w = p;
    li_blob_store *s = NULL;
    if (li_blob_redis_open(&s, w->url, NULL) != LI_OK) {
        w->failures = w->rounds;
        return NULL;
    }
    for (int i = 0; i < w->rounds; i++) {
        if (w->data) {
            if (li_blob_put(s, &w->key, w->data, w->n) != LI_OK) w->failures++;
        } else {
            void *got = NULL;
            size_t gn = 0;
            if (li_blob_get(s, &w->key, &got, &gn) == LI_OK) {
                w->hits++;
                if (gn != w->n || (memcmp(got, w->a, gn) && memcmp(got, w->b, gn))) w->mixed++;
            }
            free(got);
        }
    }
    li_blob_close(s);
    return NULL;
}

static void concurrent_writers(const char *url, const redis_server *sv, int db) {
    TEST_BEGIN("redis: two writers of one key leave one whole entry; a reader never sees a mix");
    size_t n = 3 * (size_t)C + 1;
    uint8_t *a = random_bytes(n), *b = random_bytes(n);
    li_doc_key k = random_key();
    writer_arg w[3];
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        snprintf(w[i].url, sizeof w[i].url, "%s", url);
        w[i].key = k;
        w[i].n = n;
        w[i].a = a;
        w[i].b = b;
        w[i].rounds = i < 2 ? 8 : 40;
    }
    w[0].data = a;
    w[1].data = b;
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, writer, &w[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    CHECK(w[0].failures == 0 && w[1].failures == 0, "put failures %d %d", w[0].failures,
          w[1].failures);
    CHECK(w[2].mixed == 0, "%d of %d reads mixed two writers", w[2].mixed, w[2].hits);
    li_blob_store *s = NULL;
    li_blob_redis_open(&s, url, NULL);
    void *got = NULL;
    size_t gn = 0;
    CHECK(s && li_blob_get(s, &k, &got, &gn) == LI_OK && gn == n &&
              (!memcmp(got, a, n) || !memcmp(got, b, n)), "final entry not one writer's");
    free(got);
    redisContext *c = raw(sv, db);
    CHECK(raw_int(c, "DBSIZE") == 1 + 4, "keys %lld: want one manifest + 4 chunks (no orphans)",
          raw_int(c, "DBSIZE"));
    li_blob_del(s, &k);
    CHECK(raw_int(c, "DBSIZE") == 0, "keys left after del: %lld", raw_int(c, "DBSIZE"));
    redisFree(c);
    li_blob_close(s);
    free(a);
    free(b);
    TEST_END();
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void killed_mid_run(const char *url, redis_server *sv) {
    TEST_BEGIN("redis: killed mid-run fails fast as misses, reconnects after restart");
    li_blob_store *s = NULL;
    CHECK(li_blob_redis_open(&s, url, NULL) == LI_OK, "open: %s", li_last_error());
    if (!s) {
        TEST_END();
        return;
    }
    li_doc_key k = random_key();
    uint8_t *d = random_bytes(C + 3);
    CHECK(li_blob_put(s, &k, d, C + 3) == LI_OK, "put: %s", li_last_error());
    server_stop(sv);
    double t0 = now_s();
    CHECK(get_misses(s, &k), "get with Redis gone");
    CHECK(li_blob_put(s, &k, d, 10) == LI_ERR_IO, "put with Redis gone");
    for (int i = 0; i < 20; i++) get_misses(s, &k);  // inside the backoff: no connect attempts
    double dt = now_s() - t0;
    // the loopback connection is refused at once; 22 operations within the first 100 ms
    // backoff take microseconds each — 1 s leaves room for a loaded machine
    CHECK(dt < 1.0, "operations took %.3f s with Redis gone", dt);
    li_blob_stats st;
    li_blob_get_stats(s, &st);
    CHECK(!st.writable && st.errors >= 22, "writable %d, errors %lld", st.writable,
          (long long)st.errors);
    CHECK(server_start(sv, NULL), "restart on port %d", sv->port);
    // data is gone (no persistence); the store must come back within its backoff (≤ 5 s + slack)
    double t1 = now_s();
    bool back = false;
    while (!back && now_s() - t1 < 12) {
        back = li_blob_put(s, &k, d, C + 3) == LI_OK;
        if (!back) nanosleep(&(struct timespec){0, 20 * 1000000}, NULL);
    }
    CHECK(back, "no reconnection within 12 s");
    CHECK(get_equals(s, &k, d, C + 3), "get after reconnecting");
    li_blob_get_stats(s, &st);
    CHECK(st.writable, "writable after reconnecting");
    li_blob_del(s, &k);
    li_blob_close(s);
    free(d);
    TEST_END();
}

static void password_cases(const char *root) {
    TEST_BEGIN("redis: a wrong or missing password is a clear error at open");
    redis_server *sv = &servers[n_servers++];
    snprintf(sv->dir, sizeof sv->dir, "%s/redis-auth", root);
    mkdir(sv->dir, 0700);
    if (!server_start(sv, "s3cret-pw")) {
        CHECK(0, "cannot start a redis-server with a password");
        TEST_END();
        return;
    }
    char url[64], good[300], bad[300];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", sv->port);
    snprintf(good, sizeof good, "%s/good-pw", root);
    snprintf(bad, sizeof bad, "%s/bad-pw", root);
    FILE *f = fopen(good, "w");
    if (f) fputs("s3cret-pw\n", f), fclose(f);
    f = fopen(bad, "w");
    if (f) fputs("wrong\n", f), fclose(f);
    li_blob_store *s = NULL;
    CHECK(li_blob_redis_open(&s, url, bad) == LI_ERR_IO && strstr(li_last_error(), "AUTH") && !s,
          "wrong password: %s", li_last_error());
    CHECK(li_blob_redis_open(&s, url, NULL) == LI_ERR_IO && strstr(li_last_error(), "password"),
          "no password: %s", li_last_error());
    CHECK(li_blob_redis_open(&s, url, good) == LI_OK, "right password: %s", li_last_error());
    li_doc_key k = random_key();
    CHECK(s && li_blob_put(s, &k, "abc", 3) == LI_OK && get_equals(s, &k, "abc", 3),
          "round trip with AUTH");
    li_blob_close(s);
    server_stop(sv);
    TEST_END();
}

static void redis_tests(const char *root) {
    url_errors();
    if (!li_redis_installed()) {
        TEST_BEGIN("redis: redis-server is installed");
        CHECK(0, "redis-server not found: run scripts/setup.sh (it installs the Debian "
                 "redis-server package the Redis tests start)");
        TEST_END();
        return;
    }
    redis_server *sv = &servers[n_servers++];
    snprintf(sv->dir, sizeof sv->dir, "%s/redis", root);
    mkdir(sv->dir, 0700);
    TEST_BEGIN("redis: the suite starts its own redis-server");
    bool up = server_start(sv, NULL);
    CHECK(up, "cannot start redis-server");
    TEST_END();
    if (!up) return;

    TEST_BEGIN("redis: unreachable at open is an error naming the server");
    {
        li_blob_store *s = NULL;
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", li_redis_free_port());
        CHECK(li_blob_redis_open(&s, url, NULL) == LI_ERR_IO && !s &&
              strstr(li_last_error(), "cannot connect") && strstr(li_last_error(), url),
              "%s", li_last_error());
    }
    TEST_END();

    const int db = 3;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/%d", sv->port, db);
    li_blob_store *s = NULL;
    if (li_blob_redis_open(&s, url, NULL) != LI_OK) {
        TEST_BEGIN("redis: open");
        CHECK(0, "%s", li_last_error());
        TEST_END();
        return;
    }
    TEST_BEGIN("redis: name, SELECT of the URL's database");
    CHECK(!strcmp(li_blob_name(s), url), "name %s, want %s", li_blob_name(s), url);
    li_doc_key k = random_key();
    li_blob_put(s, &k, "x", 1);
    redisContext *c = raw(sv, 0);
    CHECK(raw_int(c, "DBSIZE") == 0, "wrote into db 0");
    freeReplyObject(redisCommand(c, "SELECT %d", db));
    CHECK(raw_int(c, "DBSIZE") == 2, "db %d holds %lld keys, want manifest + chunk", db,
          raw_int(c, "DBSIZE"));
    li_blob_del(s, &k);
    CHECK(raw_int(c, "DBSIZE") == 0, "del left %lld keys", raw_int(c, "DBSIZE"));
    redisFree(c);
    TEST_END();

    round_trips(&s, "redis", NULL);
    TEST_BEGIN("redis: overwrites and deletes leave no chunk behind");
    {
        c = raw(sv, db);
        uint8_t *d = random_bytes(3 * (size_t)C);
        li_blob_put(s, &k, d, 3 * (size_t)C);
        li_blob_put(s, &k, d, C + 1);
        CHECK(raw_int(c, "DBSIZE") == 3, "keys %lld after overwrite, want manifest + 2 chunks",
              raw_int(c, "DBSIZE"));
        li_blob_del(s, &k);
        CHECK(raw_int(c, "DBSIZE") == 0, "keys %lld after del", raw_int(c, "DBSIZE"));
        redisFree(c);
        free(d);
    }
    TEST_END();
    corrupt_and_partial(s, sv, db);
    li_blob_close(s);
    concurrent_writers(url, sv, db);
    killed_mid_run(url, sv);
    server_stop(sv);
    password_cases(root);
}

int main(void) {
    li_rng_seed(&rng, test_seed("test-blob-store"));
    li_log_set_level(LI_LOG_ERROR);  // the stores' warnings are expected here
    char root[] = "/tmp/li-test-blob-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    atexit(stop_all);
    signal(SIGSEGV, on_fatal);
    signal(SIGABRT, on_fatal);
    signal(SIGTERM, on_fatal);
    signal(SIGINT, on_fatal);
    // SIGPIPE keeps its default: a write to a killed Redis must fail in the store, not kill us
    disk_tests(root);
    redis_tests(root);
    stop_all();
    rm_rf(root);
    return test_summary();
}
