// file.c — read-only mapping of whole files, small-file reads, path helpers.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

li_status li_mapped_file_open(li_mapped_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return li_error_set(LI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    li_status rc = LI_OK;
    if (fstat(fd, &st) != 0) {
        rc = li_error_set(LI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = li_error_set(LI_ERR_IO, "%s: not a regular file", path);
        goto close_fd;
    }
    f->path = strdup(path);
    if (!f->path) {
        rc = li_error_set(LI_ERR_OOM, "out of memory");
        goto close_fd;
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = li_error_set(LI_ERR_IO, "%s: cannot map %zu bytes: %s", path, f->size,
                              strerror(errno));
            free(f->path);
            memset(f, 0, sizeof *f);
            goto close_fd;
        }
        f->data = p;
    }
close_fd:
    close(fd);
    return rc;
}

void li_mapped_file_close(li_mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

li_status li_file_read_all(const char *path, char **out, size_t *out_len, size_t max_bytes) {
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return li_error_set(LI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    li_buf b = {0};
    char chunk[65536];
    size_t n;
    li_status rc = LI_OK;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0) {
        if (b.len + n > max_bytes) {
            rc = li_error_set(LI_ERR_FORMAT, "%s: larger than the %zu bytes allowed", path,
                              max_bytes);
            goto fail;
        }
        if ((rc = li_buf_append(&b, chunk, n)) != LI_OK) goto fail;
    }
    if (ferror(fp)) {
        rc = li_error_set(LI_ERR_IO, "%s: read error", path);
        goto fail;
    }
    if (!b.data && (rc = li_buf_append(&b, "", 0)) != LI_OK) goto fail;
    fclose(fp);
    *out = b.data;
    if (out_len) *out_len = b.len;
    return LI_OK;
fail:
    fclose(fp);
    li_buf_free(&b);
    return rc;
}

bool li_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool li_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

li_status li_path_join(char *dst, size_t dst_size, const char *dir, const char *name) {
    int n = snprintf(dst, dst_size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= dst_size)
        return li_error_set(LI_ERR_INVALID_ARG, "path too long: %s/%s", dir, name);
    return LI_OK;
}
