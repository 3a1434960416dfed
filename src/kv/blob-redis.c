// blob-redis.c — the Redis/Valkey blob store (L3, blob-store.h), shared by every replica that
// points at the same database, through hiredis.
//
// Keys (namespace lazyinfer:kv:):
//   lazyinfer:kv:<hex>                    the manifest (blob-internal.h): sizes, nonce, chunk sums
//   lazyinfer:kv:<hex>:<nonce>:<i>        chunk i of the write that drew <nonce> (16 hex digits)
// A put writes every chunk under its own write's nonce first, then swaps the manifest in with
// one SET ... GET (Redis ≥ 6.2) and deletes the chunks of the manifest it replaced. A reader thus
// sees one writer's manifest and only that writer's chunks: two writers of one key never mix,
// and the last manifest wins whole. A manifest whose chunk is missing (a writer died, Redis
// evicted it) or fails its sum is deleted — only if it is still the manifest read, by a small
// compare-and-delete script — and the get is a miss.
//
// Entries get no TTL: the shared tier is bounded by Redis's own maxmemory and eviction policy
// (an allkeys-* policy; a chunk it evicts turns its entry into a miss, dropped on the next read).
// Chunks of a writer that died before its manifest are orphans only such a policy removes.
//
// Faults: connect timeout 1 s, command timeout 2 s. A lost connection makes every operation fail
// at once (gets are misses, puts LI_ERR_IO) and reconnects on the first operation after a backoff
// of 100 ms doubling to 5 s. Not for Redis Cluster (one entry's keys span hash slots).
// Tested by tests/test-blob-store.c against a redis-server it starts.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis.h>

#include "blob-internal.h"

#define NS "lazyinfer:kv:"
#define CONNECT_TIMEOUT_MS 1000
#define COMMAND_TIMEOUT_MS 2000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define WINDOW 8  // chunk commands in flight: 32 MiB of 4 MiB chunks

typedef struct {
    li_blob_store base;
    char host[256];
    int port, db;
    char *password;      // NULL: no AUTH
    redisContext *c;     // NULL while disconnected
    int64_t backoff_ms;  // wait before the next reconnect attempt
    int64_t next_try_ms; // monotonic time of that attempt
} redis_store;

// compare-and-delete: deletes KEYS (manifest first, then its chunks) only if the manifest still
// holds ARGV[1], the bytes the caller read.
static const char CAD_SCRIPT[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', unpack(KEYS)) end "
    "return 0";

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval tv_ms(int ms) { return (struct timeval){ms / 1000, (ms % 1000) * 1000}; }

static void manifest_key(const li_doc_key *key, char out[96]) {
    char hex[65];
    li_doc_key_hex(key, hex);
    snprintf(out, 96, NS "%s", hex);
}

static void chunk_key(const li_doc_key *key, uint64_t nonce, uint32_t i, char out[128]) {
    char hex[65];
    li_doc_key_hex(key, hex);
    snprintf(out, 128, NS "%s:%016llx:%u", hex, (unsigned long long)nonce, i);
}

// ---- connection ---------------------------------------------------------------------------------

static void drop_connection(redis_store *r, const char *why) {
    LI_WARN("%s: connection lost (%s); operations fail as misses, reconnecting in %lld ms",
            r->base.name, why, (long long)r->backoff_ms);
    redisFree(r->c);
    r->c = NULL;
    r->base.stats.writable = false;
    r->next_try_ms = now_ms() + r->backoff_ms;
}

// A reply that must be a status "OK"/"PONG" or similar; returns the error text or NULL.
static const char *reply_error(redisReply *y) {
    if (!y) return "no reply";
    if (y->type == REDIS_REPLY_ERROR) return y->str;
    return NULL;
}

// One connection attempt: connect, AUTH, SELECT, PING. The message names what failed.
static li_status connect_once(redis_store *r) {
    li_status rc = LI_OK;
    redisReply *y = NULL;
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv_ms(CONNECT_TIMEOUT_MS));
    if (!c || c->err) {
        rc = li_error_set(LI_ERR_IO, "%s: cannot connect: %s", r->base.name,
                          c ? c->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(c, tv_ms(COMMAND_TIMEOUT_MS));
    if (r->password) {
        y = redisCommand(c, "AUTH %s", r->password);
        if (reply_error(y)) {
            rc = li_error_set(LI_ERR_IO, "%s: AUTH failed: %s (check the password file)",
                              r->base.name, y ? y->str : c->errstr);
            goto fail;
        }
        freeReplyObject(y);
    }
    if (r->db) {
        y = redisCommand(c, "SELECT %d", r->db);
        if (reply_error(y)) {
            rc = li_error_set(LI_ERR_IO, "%s: SELECT %d failed: %s", r->base.name, r->db,
                              y ? y->str : c->errstr);
            goto fail;
        }
        freeReplyObject(y);
    }
    y = redisCommand(c, "PING");
    if (reply_error(y)) {
        const char *e = y ? y->str : c->errstr;
        rc = li_error_set(LI_ERR_IO, "%s: %s%s", r->base.name, e,
                          strstr(e, "NOAUTH") ? " (the server wants a password: give a password "
                                                "file)" : "");
        goto fail;
    }
    freeReplyObject(y);
    r->c = c;
    r->base.stats.writable = true;
    r->backoff_ms = BACKOFF_MIN_MS;
    return LI_OK;
fail:
    if (y) freeReplyObject(y);
    if (c) redisFree(c);
    return rc;
}

// True when connected, reconnecting first if the backoff has passed; false fails fast.
static bool ensure(redis_store *r) {
    if (r->c) return true;
    if (now_ms() < r->next_try_ms) return false;
    if (connect_once(r) == LI_OK) {
        LI_INFO("%s: reconnected", r->base.name);
        return true;
    }
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
    r->next_try_ms = now_ms() + r->backoff_ms;
    return false;
}

// Runs a command; NULL when the connection failed (it is then dropped). Error replies return.
static redisReply *cmd(redis_store *r, int argc, const char **argv, const size_t *lens) {
    redisReply *y = redisCommandArgv(r->c, argc, argv, lens);
    if (!y) drop_connection(r, r->c->errstr[0] ? r->c->errstr : "no reply");
    return y;
}

// Runs n commands pipelined (argv[i], lens[i] with argc[i] words) and reads their replies into
// ys[i]; false when the connection failed (everything freed, connection dropped).
static bool pipeline(redis_store *r, int n, const int *argc, const char *const *const *argv,
                     const size_t *const *lens, redisReply **ys) {
    for (int i = 0; i < n; i++) ys[i] = NULL;
    for (int i = 0; i < n; i++)
        if (redisAppendCommandArgv(r->c, argc[i], (const char **)argv[i], lens[i]) != REDIS_OK)
            goto lost;
    for (int i = 0; i < n; i++)
        if (redisGetReply(r->c, (void **)&ys[i]) != REDIS_OK) goto lost;
    return true;
lost:
    for (int i = 0; i < n; i++)
        if (ys[i]) freeReplyObject(ys[i]), ys[i] = NULL;
    drop_connection(r, r->c->errstr[0] ? r->c->errstr : "pipeline failed");
    return false;
}

// Chunks i0 .. i0 + k - 1 (k <= WINDOW) of the entry (key, nonce) in one pipeline: SET key chunk
// with data (the entry's n bytes; a chunk is its slice of them), GET key when data is NULL.
// Replies in ys; false when the connection was lost (ys all NULL then).
static bool chunk_pipeline(redis_store *r, const li_doc_key *key, uint64_t nonce, uint32_t i0,
                           uint32_t k, const void *data, size_t n, redisReply **ys) {
    char keys[WINDOW][128];
    const char *words[WINDOW][3];
    size_t wl[WINDOW][3];
    const char *const *argv[WINDOW];
    const size_t *lens[WINDOW];
    int argc[WINDOW];
    LI_ASSERT(k <= WINDOW);
    for (uint32_t j = 0; j < k; j++) {
        chunk_key(key, nonce, i0 + j, keys[j]);
        words[j][0] = data ? "SET" : "GET", wl[j][0] = 3;
        words[j][1] = keys[j], wl[j][1] = strlen(keys[j]);
        argc[j] = 2;
        if (data) {
            size_t off = (size_t)(i0 + j) * LI_BLOB_CHUNK_BYTES;
            words[j][2] = (const char *)data + off;
            wl[j][2] = n - off < LI_BLOB_CHUNK_BYTES ? n - off : LI_BLOB_CHUNK_BYTES;
            argc[j] = 3;
        }
        argv[j] = words[j], lens[j] = wl[j];
    }
    return pipeline(r, (int)k, argc, argv, lens, ys);
}

// Deletes the manifest `mbytes` (as read) and, when m is not NULL, its chunks — only if the
// manifest is still that one. Returns true if it deleted it.
static bool drop_entry(redis_store *r, const li_doc_key *key, const char *mbytes, size_t mlen,
                       const li_blob_manifest *m) {
    uint32_t n_chunks = m ? m->n_chunks : 0;
    int argc = 3 + 1 + (int)n_chunks + 1;
    const char **argv = malloc((size_t)argc * sizeof *argv);
    size_t *lens = malloc((size_t)argc * sizeof *lens);
    char (*keys)[128] = malloc(((size_t)n_chunks + 1) * sizeof *keys);
    bool deleted = false;
    if (!argv || !lens || !keys) goto out;
    char numkeys[16];
    snprintf(numkeys, sizeof numkeys, "%u", n_chunks + 1);
    manifest_key(key, keys[0]);
    for (uint32_t i = 0; i < n_chunks; i++) chunk_key(key, m->nonce, i, keys[i + 1]);
    argv[0] = "EVAL";
    argv[1] = CAD_SCRIPT;
    argv[2] = numkeys;
    for (uint32_t i = 0; i <= n_chunks; i++) argv[3 + i] = keys[i];
    argv[argc - 1] = mbytes;
    for (int i = 0; i < argc - 1; i++) lens[i] = strlen(argv[i]);
    lens[argc - 1] = mlen;
    redisReply *y = cmd(r, argc, argv, lens);
    if (y && y->type == REDIS_REPLY_INTEGER) deleted = y->integer > 0;
    if (y) freeReplyObject(y);
out:
    free(argv);
    free(lens);
    free(keys);
    return deleted;
}

// Deletes chunks [0, n_chunks) of the write `nonce` (a replaced or abandoned write).
static void del_chunks(redis_store *r, const li_doc_key *key, uint64_t nonce, uint32_t n_chunks) {
    for (uint32_t i0 = 0; i0 < n_chunks && r->c; i0 += WINDOW) {
        uint32_t n = n_chunks - i0 < WINDOW ? n_chunks - i0 : WINDOW;
        char keys[WINDOW][128];
        const char *argv[WINDOW + 1] = {"DEL"};
        size_t lens[WINDOW + 1] = {3};
        for (uint32_t i = 0; i < n; i++) {
            chunk_key(key, nonce, i0 + i, keys[i]);
            argv[1 + i] = keys[i];
            lens[1 + i] = strlen(keys[i]);
        }
        redisReply *y = cmd(r, (int)n + 1, argv, lens);
        if (y) freeReplyObject(y);
    }
}

// ---- operations ---------------------------------------------------------------------------------

static li_status down(redis_store *r) {
    r->base.stats.errors++;
    return li_error_set(LI_ERR_IO, "%s: not connected (reconnect in %lld ms)", r->base.name,
                        (long long)(r->next_try_ms - now_ms()));
}

static li_status redis_put(li_blob_store *s, const li_doc_key *key, const void *data, size_t n) {
    redis_store *r = (redis_store *)s;
    if (!ensure(r)) return down(r);
    uint64_t nonce = li_blob_nonce();
    uint8_t *manifest = NULL;
    size_t mb = 0;
    li_status rc = li_blob_manifest_encode(key, data, n, LI_BLOB_CHUNK_BYTES, nonce, &manifest, &mb);
    if (rc != LI_OK) return rc;
    uint32_t n_chunks = li_blob_n_chunks(n, LI_BLOB_CHUNK_BYTES), written = 0;
    redisReply *ys[WINDOW];
    const char *bad = NULL;
    for (uint32_t i0 = 0; i0 < n_chunks && !bad; i0 += WINDOW) {
        uint32_t k = n_chunks - i0 < WINDOW ? n_chunks - i0 : WINDOW;
        if (!chunk_pipeline(r, key, nonce, i0, k, data, n, ys)) {
            bad = "connection lost";
            break;
        }
        for (uint32_t j = 0; j < k; j++) {
            if (!bad && reply_error(ys[j])) {
                rc = li_error_set(LI_ERR_IO, "%s: writing a chunk: %s", s->name, ys[j]->str);
                bad = "error";
            }
            freeReplyObject(ys[j]);
        }
        written = i0 + k;
    }
    if (!bad) {
        char mkey[96];
        manifest_key(key, mkey);
        const char *argv[] = {"SET", mkey, (const char *)manifest, "GET"};
        size_t lens[] = {3, strlen(mkey), mb, 3};
        redisReply *y = cmd(r, 4, argv, lens);
        if (!y) {
            bad = "connection lost";
        } else if (reply_error(y)) {
            rc = li_error_set(LI_ERR_IO, "%s: writing the manifest: %s (SET ... GET needs "
                              "Redis >= 6.2 or Valkey)", s->name, y->str);
            bad = "error";
        } else if (y->type == REDIS_REPLY_STRING) {
            li_blob_manifest old;
            if (li_blob_manifest_decode(y->str, y->len, key, &old) && old.nonce != nonce)
                del_chunks(r, key, old.nonce, old.n_chunks);
        }
        if (y) freeReplyObject(y);
    }
    if (bad) {
        if (rc == LI_OK)
            rc = li_error_set(LI_ERR_IO, "%s: %s while writing an entry", s->name, bad);
        s->stats.errors++;
        if (r->c) del_chunks(r, key, nonce, written);
    }
    free(manifest);
    return rc;
}

static li_status redis_get(li_blob_store *s, const li_doc_key *key, void **data, size_t *n) {
    redis_store *r = (redis_store *)s;
    if (!ensure(r)) {
        s->stats.errors++;
        return LI_ERR_NOT_FOUND;
    }
    char mkey[96];
    manifest_key(key, mkey);
    const char *argv[] = {"GET", mkey};
    size_t lens[] = {3, strlen(mkey)};
    redisReply *my = cmd(r, 2, argv, lens), *ys[WINDOW];
    uint8_t *buf = NULL;
    li_status rc = LI_ERR_NOT_FOUND;
    li_blob_manifest m;
    bool have_m = false;
    if (!my) {
        s->stats.errors++;
        return LI_ERR_NOT_FOUND;
    }
    if (my->type != REDIS_REPLY_STRING) goto out;  // nil: a plain miss
    have_m = li_blob_manifest_decode(my->str, my->len, key, &m) &&
             my->len == li_blob_manifest_bytes(m.n_chunks);
    if (!have_m) goto corrupt;
    buf = malloc(m.payload ? (size_t)m.payload : 1);
    if (!buf) {
        rc = li_error_set(LI_ERR_OOM, "%s: out of memory reading a %llu-byte entry", s->name,
                          (unsigned long long)m.payload);
        goto out;
    }
    for (uint32_t i0 = 0; i0 < m.n_chunks; i0 += WINDOW) {
        uint32_t k = m.n_chunks - i0 < WINDOW ? m.n_chunks - i0 : WINDOW;
        if (!chunk_pipeline(r, key, m.nonce, i0, k, NULL, 0, ys)) {
            s->stats.errors++;
            goto out;
        }
        bool ok = true;
        for (uint32_t j = 0; j < k; j++) {
            uint32_t i = i0 + j;
            if (ok && ys[j]->type == REDIS_REPLY_STRING &&
                li_blob_chunk_ok(&m, i, ys[j]->str, ys[j]->len))
                memcpy(buf + (size_t)i * m.chunk_bytes, ys[j]->str, ys[j]->len);
            else
                ok = false;  // missing (partial entry) or damaged
            freeReplyObject(ys[j]);
        }
        if (!ok) goto corrupt;
    }
    *data = buf;
    *n = (size_t)m.payload;
    buf = NULL;
    rc = LI_OK;
    goto out;
corrupt:
    // Not counted when another writer replaced the manifest meanwhile (its chunks went with it).
    if (drop_entry(r, key, my->str, my->len, have_m ? &m : NULL)) {
        s->stats.corrupt++;
        LI_WARN("%s: entry %s is corrupt or incomplete; dropped", s->name, mkey);
    }
out:
    free(buf);
    freeReplyObject(my);
    return rc;
}

static bool redis_exists(li_blob_store *s, const li_doc_key *key) {
    redis_store *r = (redis_store *)s;
    if (!ensure(r)) return false;
    char mkey[96];
    manifest_key(key, mkey);
    const char *argv[] = {"EXISTS", mkey};
    size_t lens[] = {6, strlen(mkey)};
    redisReply *y = cmd(r, 2, argv, lens);
    bool yes = y && y->type == REDIS_REPLY_INTEGER && y->integer == 1;
    if (y) freeReplyObject(y);
    return yes;
}

static li_status redis_del(li_blob_store *s, const li_doc_key *key) {
    redis_store *r = (redis_store *)s;
    char mkey[96];
    manifest_key(key, mkey);
    // A put may swap the manifest between our GET and the delete: then delete what it put.
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!ensure(r)) return down(r);
        const char *argv[] = {"GET", mkey};
        size_t lens[] = {3, strlen(mkey)};
        redisReply *y = cmd(r, 2, argv, lens);
        if (!y) return down(r);
        if (y->type != REDIS_REPLY_STRING) {
            freeReplyObject(y);
            return LI_OK;  // absent
        }
        li_blob_manifest m;
        bool ok = li_blob_manifest_decode(y->str, y->len, key, &m);
        bool deleted = drop_entry(r, key, y->str, y->len, ok ? &m : NULL);
        freeReplyObject(y);
        if (deleted) return LI_OK;
    }
    s->stats.errors++;
    return li_error_set(LI_ERR_IO, "%s: entry %s kept changing while being deleted", s->name, mkey);
}

static li_status redis_list(li_blob_store *s, void (*fn)(void *, const li_doc_key *, int64_t),
                            void *ctx) {
    redis_store *r = (redis_store *)s;
    if (!ensure(r)) return down(r);
    char cursor[32] = "0";
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", NS "*", "COUNT", "1000"};
        size_t lens[6];
        for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
        redisReply *y = cmd(r, 6, argv, lens);
        if (!y) return down(r);
        if (y->type != REDIS_REPLY_ARRAY || y->elements != 2 ||
            y->element[0]->type != REDIS_REPLY_STRING) {
            li_status rc = li_error_set(LI_ERR_IO, "%s: SCAN: %s", s->name,
                                        y->type == REDIS_REPLY_ERROR ? y->str : "odd reply");
            freeReplyObject(y);
            return rc;
        }
        snprintf(cursor, sizeof cursor, "%s", y->element[0]->str);
        redisReply *keys = y->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            redisReply *k = keys->element[i];
            li_doc_key key;
            if (k->type != REDIS_REPLY_STRING || k->len != strlen(NS) + 64 ||
                !li_blob_key_from_hex(k->str + strlen(NS), 64, &key))
                continue;  // a chunk key
            const char *gargv[] = {"GET", k->str};
            size_t glens[] = {3, k->len};
            redisReply *g = cmd(r, 2, gargv, glens);
            if (!g) {
                freeReplyObject(y);
                return down(r);
            }
            li_blob_manifest m;
            if (g->type == REDIS_REPLY_STRING && li_blob_manifest_decode(g->str, g->len, &key, &m))
                fn(ctx, &key, (int64_t)m.payload);
            freeReplyObject(g);
        }
        freeReplyObject(y);
    } while (strcmp(cursor, "0") != 0);
    return LI_OK;
}

static void redis_close(li_blob_store *s) {
    redis_store *r = (redis_store *)s;
    if (r->c) redisFree(r->c);
    free(r->password);
    free(r);
}

static const li_blob_ops redis_ops = {redis_put, redis_get, redis_exists, redis_del, redis_list,
                                      redis_close};

// ---- open ---------------------------------------------------------------------------------------

// redis://HOST:PORT[/DB], HOST a name, an IPv4 address or [IPv6].
static li_status parse_url(redis_store *r, const char *url) {
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0)
        return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: want redis://HOST:PORT[/DB]", url);
    p += 8;
    if (strchr(p, '@'))
        return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: credentials in the URL are not "
                            "supported; give --kv-remote-password-file", url);
    const char *host = p, *host_end;
    if (*p == '[') {
        host = ++p;
        host_end = strchr(p, ']');
        if (!host_end)
            return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: unclosed [ in the host", url);
        p = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        p = host_end;
    }
    size_t hl = (size_t)(host_end - host);
    if (hl == 0 || hl >= sizeof r->host)
        return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: %s host name", url,
                            hl ? "too long a" : "no");
    memcpy(r->host, host, hl);
    r->host[hl] = 0;
    r->port = 6379;
    if (*p == ':') {
        char *end;
        errno = 0;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || errno || port < 1 || port > 65535 || (*end && *end != '/'))
            return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: port: want 1..65535", url);
        r->port = (int)port;
        p = end;
    }
    if (*p == '/' && p[1]) {
        char *end;
        errno = 0;
        long db = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end || errno || db < 0 || db > 1000000)
            return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: database: want a number "
                                "after /", url);
        r->db = (int)db;
    } else if (*p && strcmp(p, "/") != 0) {
        return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote %s: unexpected '%s' after the host",
                            url, p);
    }
    return LI_OK;
}

static li_status read_password(redis_store *r, const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (li_file_read_all(path, &text, &len, 4096) != LI_OK)
        return li_error_wrap(LI_ERR_IO, "--kv-remote-password-file: ");
    text[strcspn(text, "\r\n")] = 0;
    if (!*text) {
        li_free(text);
        return li_error_set(LI_ERR_INVALID_ARG, "--kv-remote-password-file %s: empty first line",
                            path);
    }
    r->password = strdup(text);
    li_free(text);
    return r->password ? LI_OK : li_error_set(LI_ERR_OOM, "out of memory");
}

li_status li_blob_redis_open(li_blob_store **out, const char *url, const char *password_file) {
    *out = NULL;
    redis_store *r = calloc(1, sizeof *r);
    if (!r) return li_error_set(LI_ERR_OOM, "out of memory opening %s", url);
    r->base.ops = &redis_ops;
    r->backoff_ms = BACKOFF_MIN_MS;
    li_status rc = parse_url(r, url);
    if (rc == LI_OK && password_file) rc = read_password(r, password_file);
    if (rc == LI_OK) {
        bool v6 = strchr(r->host, ':') != NULL;
        snprintf(r->base.name, sizeof r->base.name, "redis://%s%s%s:%d/%d", v6 ? "[" : "",
                 r->host, v6 ? "]" : "", r->port, r->db);
        rc = connect_once(r);
        if (rc != LI_OK) LI_WARN("%s", li_last_error());
    }
    if (rc != LI_OK) {
        redis_close(&r->base);
        return rc;
    }
    *out = &r->base;
    return LI_OK;
}
