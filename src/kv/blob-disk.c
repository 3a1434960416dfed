// blob-disk.c — the disk blob store (L2, blob-store.h): one file per entry in a directory,
// named by the key's 64 hex digits, holding the manifest (blob-internal.h) then the payload.
//
// A put writes `.tmp-<hex>-<pid>-<n>` and renames it over the entry, so a reader or a crashed
// process never sees a half entry under an entry's name. No fsync: a process crash leaves
// the written pages in the page cache, and after a power loss a torn or empty file fails its
// checksums on the next read and is dropped like any corrupt entry — this is a cache, a lost
// entry is recomputed, and an fsync per put (milliseconds to tens of ms) would sit on the
// demotion path for nothing. Temporary files whose writer is gone are removed at open.
//
// A full disk (ENOSPC, EFBIG, EDQUOT) fails the put with LI_ERR_IO naming the directory and stops
// writing (stats.writable = false) until a delete frees space; gets go on.
// Tested by tests/test-blob-store.c.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob-internal.h"

typedef struct {
    li_blob_store base;
    char *dir;
    uint64_t n_tmp;  // temporary names made by this handle
} disk_store;

#define TMP_PREFIX ".tmp-"

static void entry_path(const disk_store *d, const li_doc_key *key, char *out, size_t n) {
    char hex[65];
    li_doc_key_hex(key, hex);
    snprintf(out, n, "%s/%s", d->dir, hex);
}

static bool full_errno(int e) { return e == ENOSPC || e == EFBIG || e == EDQUOT; }

static bool write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            return false;
        }
        b += w;
        n -= (size_t)w;
    }
    return true;
}

// Reads exactly n bytes at `off`; false on error or a short file.
static bool read_at(int fd, void *p, size_t n, off_t off) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = pread(fd, b, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= (size_t)r;
        off += r;
    }
    return true;
}

// The payload bytes of the complete entry open on fd, or -1 if it is not one (its manifest is
// off or the file's size disagrees with it). `key`: the entry's expected key (NULL: any).
// On success *m describes it, borrowing *manifest (malloc'd, the caller frees).
static int64_t entry_check(int fd, const li_doc_key *key, li_blob_manifest *m, uint8_t **manifest) {
    *manifest = NULL;
    struct stat st;
    uint8_t fixed[LI_BLOB_FIXED_BYTES];
    if (fstat(fd, &st) != 0 || !read_at(fd, fixed, sizeof fixed, 0)) return -1;
    // n_chunks (little-endian at 32) only sizes the read here; decode validates it
    uint32_t n_chunks = (uint32_t)fixed[32] | (uint32_t)fixed[33] << 8 | (uint32_t)fixed[34] << 16 |
               (uint32_t)fixed[35] << 24;
    size_t mb = li_blob_manifest_bytes(n_chunks);
    if ((uint64_t)st.st_size < mb) return -1;
    uint8_t *p = malloc(mb);
    if (!p) return -1;
    if (!read_at(fd, p, mb, 0) || !li_blob_manifest_decode(p, mb, key, m) ||
        (uint64_t)st.st_size != mb + m->payload) {
        free(p);
        return -1;
    }
    *manifest = p;
    return (int64_t)m->payload;
}

// Payload bytes of the entry at `path` (-1: absent or not a complete entry).
static int64_t entry_bytes(const char *path, const li_doc_key *key) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    li_blob_manifest m;
    uint8_t *manifest;
    int64_t n = entry_check(fd, key, &m, &manifest);
    free(manifest);
    close(fd);
    return n;
}

// Unlinks `path` if it is still the file open on fd (a writer may have renamed a new entry over
// it since we opened it: that one stays).
static void unlink_if_same(const char *path, int fd) {
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        unlink(path);
}

static li_status disk_put(li_blob_store *s, const li_doc_key *key, const void *data, size_t n) {
    disk_store *d = (disk_store *)s;
    if (!s->stats.writable) {
        s->stats.errors++;
        return li_error_set(LI_ERR_IO, "%s: the disk cache is full; not writing until an entry "
                            "is deleted", s->name);
    }
    char path[4200], tmp[4300], hex[65];
    li_doc_key_hex(key, hex);
    entry_path(d, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "%s-%ld-%llu", d->dir, hex, (long)getpid(),
             (unsigned long long)d->n_tmp++);
    uint8_t *manifest = NULL;
    size_t mb = 0;
    li_status rc = li_blob_manifest_encode(key, data, n, LI_BLOB_CHUNK_BYTES, li_blob_nonce(),
                                           &manifest, &mb);
    if (rc != LI_OK) return rc;
    int64_t old = entry_bytes(path, NULL);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        s->stats.errors++;
        if (full_errno(e)) s->stats.writable = false;
        rc = li_error_set(LI_ERR_IO, "%s: cannot create %s: %s", s->name, tmp, strerror(e));
        goto out;
    }
    bool ok = write_all(fd, manifest, mb) && write_all(fd, data, n);
    int e = errno;
    if (close(fd) != 0 && ok) ok = false, e = errno;
    if (ok && rename(tmp, path) != 0) ok = false, e = errno;
    if (!ok) {
        unlink(tmp);
        s->stats.errors++;
        if (full_errno(e)) {
            s->stats.writable = false;
            rc = li_error_set(LI_ERR_IO, "%s: disk full writing a %zu-byte entry (%s): the disk "
                              "cache stops writing, serving goes on", s->name, n, strerror(e));
        } else {
            rc = li_error_set(LI_ERR_IO, "%s: cannot write %s: %s", s->name, tmp, strerror(e));
        }
        goto out;
    }
    if (old >= 0) {
        s->stats.resident_bytes -= old;
        s->stats.resident_entries--;
    }
    s->stats.resident_bytes += (int64_t)n;
    s->stats.resident_entries++;
out:
    free(manifest);
    return rc;
}

static li_status disk_get(li_blob_store *s, const li_doc_key *key, void **data, size_t *n) {
    disk_store *d = (disk_store *)s;
    char path[4200];
    entry_path(d, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) s->stats.errors++;
        return LI_ERR_NOT_FOUND;
    }
    li_status rc = LI_ERR_NOT_FOUND;
    li_blob_manifest m;
    uint8_t *manifest = NULL, *buf = NULL;
    int64_t bytes = entry_check(fd, key, &m, &manifest);
    if (bytes < 0) goto corrupt;
    buf = malloc(bytes ? (size_t)bytes : 1);
    if (!buf) {
        rc = li_error_set(LI_ERR_OOM, "%s: out of memory reading a %lld-byte entry", s->name,
                          (long long)bytes);
        goto out;
    }
    size_t off = li_blob_manifest_bytes(m.n_chunks);
    for (uint32_t i = 0; i < m.n_chunks; i++) {
        size_t len = li_blob_chunk_len(&m, i);
        uint8_t *chunk = buf + (size_t)i * m.chunk_bytes;
        if (!read_at(fd, chunk, len, (off_t)(off + (size_t)i * m.chunk_bytes)) ||
            !li_blob_chunk_ok(&m, i, chunk, len))
            goto corrupt;
    }
    *data = buf;
    *n = (size_t)bytes;
    buf = NULL;
    rc = LI_OK;
    goto out;
corrupt:
    // Torn, truncated, damaged or another format: never served; dropped so the next put rewrites.
    s->stats.corrupt++;
    unlink_if_same(path, fd);
    if (s->stats.resident_entries > 0) s->stats.resident_entries--;
    if (bytes > 0 && s->stats.resident_bytes >= bytes) s->stats.resident_bytes -= bytes;
    LI_WARN("%s: entry %s is corrupt or incomplete; dropped", s->name, path);
out:
    free(buf);
    free(manifest);
    close(fd);
    return rc;
}

static bool disk_exists(li_blob_store *s, const li_doc_key *key) {
    char path[4200];
    entry_path((disk_store *)s, key, path, sizeof path);
    return access(path, F_OK) == 0;
}

static li_status disk_del(li_blob_store *s, const li_doc_key *key) {
    char path[4200];
    entry_path((disk_store *)s, key, path, sizeof path);
    int64_t old = entry_bytes(path, NULL);
    if (unlink(path) != 0) {
        if (errno == ENOENT) return LI_OK;
        s->stats.errors++;
        return li_error_set(LI_ERR_IO, "%s: cannot delete %s: %s", s->name, path, strerror(errno));
    }
    if (old >= 0) {
        s->stats.resident_bytes -= old;
        s->stats.resident_entries--;
    }
    s->stats.writable = true;  // space was freed: try writing again
    return LI_OK;
}

// A temporary file is left over when its writer (the pid in its name) is gone.
static bool tmp_is_stale(const char *name) {
    size_t at = strlen(TMP_PREFIX) + 64;  // ".tmp-<hex>" then "-<pid>-<n>"
    if (strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0 || strlen(name) <= at || name[at] != '-')
        return true;
    long pid = strtol(name + at + 1, NULL, 10);
    if (pid <= 0) return true;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// Walks the directory: removes stale temporary files (when `sweep`), calls fn for each complete
// entry. Files of other names are left alone.
static li_status walk(disk_store *d, bool sweep, void (*fn)(void *, const li_doc_key *, int64_t),
                      void *ctx) {
    DIR *dir = opendir(d->dir);
    if (!dir)
        return li_error_set(LI_ERR_IO, "%s: cannot read the directory: %s", d->base.name,
                            strerror(errno));
    char path[4200];
    for (struct dirent *e; (e = readdir(dir));) {
        li_doc_key key;
        snprintf(path, sizeof path, "%s/%s", d->dir, e->d_name);
        if (!strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) {
            if (sweep && tmp_is_stale(e->d_name) && unlink(path) == 0)
                LI_INFO("%s: removed the leftover temporary file %s", d->base.name, e->d_name);
            continue;
        }
        if (!li_blob_key_from_hex(e->d_name, strlen(e->d_name), &key)) continue;
        int64_t bytes = entry_bytes(path, &key);
        if (bytes >= 0) fn(ctx, &key, bytes);
    }
    closedir(dir);
    return LI_OK;
}

static li_status disk_list(li_blob_store *s, void (*fn)(void *, const li_doc_key *, int64_t),
                           void *ctx) {
    return walk((disk_store *)s, false, fn, ctx);
}

static void disk_close(li_blob_store *s) {
    disk_store *d = (disk_store *)s;
    free(d->dir);
    free(d);
}

static void count_entry(void *ctx, const li_doc_key *key, int64_t bytes) {
    li_blob_stats *st = ctx;
    st->resident_entries++;
    st->resident_bytes += bytes;
}

static const li_blob_ops disk_ops = {disk_put, disk_get, disk_exists, disk_del, disk_list,
                                     disk_close};

li_status li_blob_disk_open(li_blob_store **out, const char *dir) {
    *out = NULL;
    if (!dir || !*dir) return li_error_set(LI_ERR_INVALID_ARG, "disk cache: empty directory name");
    if (strlen(dir) > 4000)
        return li_error_set(LI_ERR_INVALID_ARG, "disk cache: directory name too long");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return li_error_set(LI_ERR_IO, "disk cache %s: cannot create the directory: %s", dir,
                            strerror(errno));
    if (!li_path_is_dir(dir))
        return li_error_set(LI_ERR_IO, "disk cache %s: not a directory", dir);
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return li_error_set(LI_ERR_IO, "disk cache %s: not writable: %s", dir, strerror(errno));
    disk_store *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        return li_error_set(LI_ERR_OOM, "out of memory opening disk cache %s", dir);
    }
    size_t len = strlen(d->dir);
    while (len > 1 && d->dir[len - 1] == '/') d->dir[--len] = 0;
    d->base.ops = &disk_ops;
    d->base.stats.writable = true;
    snprintf(d->base.name, sizeof d->base.name, "disk:%s", d->dir);
    li_status rc = walk(d, true, count_entry, &d->base.stats);
    if (rc != LI_OK) {
        disk_close(&d->base);
        return rc;
    }
    *out = &d->base;
    return LI_OK;
}
