// rag-requests.c — reading `lazyinfer rag`'s requests (see rag-requests.h).
#include "rag-requests.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/core/core.h"

#define MAX_TEXT_BYTES (256u << 20) // a document, a --queries or --workload file
#define MAX_WARNED 32               // names warned about: unknown fields, repeated ids

// ---- text ----------------------------------------------------------------------------------

// NULL when s[0, n) is text the engine takes (UTF-8 without NUL bytes); otherwise what it is
// instead, with the fix, in buf.
static const char *text_problem(const unsigned char *s, size_t n, char *buf, size_t cap) {
    if (n >= 4 && ((s[0] == 0xFF && s[1] == 0xFE && !s[2] && !s[3]) ||
                   (!s[0] && !s[1] && s[2] == 0xFE && s[3] == 0xFF))) {
        snprintf(buf, cap,
                 "is UTF-32 text (it starts with a UTF-32 byte-order mark), not UTF-8: "
                 "convert it, e.g. iconv -f UTF-32 -t UTF-8");
        return buf;
    }
    if (n >= 2 && ((s[0] == 0xFF && s[1] == 0xFE) || (s[0] == 0xFE && s[1] == 0xFF))) {
        snprintf(buf, cap,
                 "is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8: "
                 "convert it, e.g. iconv -f UTF-16 -t UTF-8");
        return buf;
    }
    size_t nul[2] = {0, 0}, first_nul = n;
    for (size_t i = 0; i < n; i++)
        if (!s[i]) {
            nul[i & 1]++;
            if (first_nul == n) first_nul = i;
        }
    // UTF-16 without a byte-order mark: mostly ASCII, so every other byte is NUL, all on one side
    if (n >= 2 && (nul[0] == 0) != (nul[1] == 0) && nul[0] + nul[1] >= n / 4) {
        snprintf(buf, cap,
                 "looks like UTF-16 text without a byte-order mark (a NUL byte between "
                 "the characters), not UTF-8: convert it, e.g. iconv -f UTF-16%s -t UTF-8",
                 nul[1] ? "LE" : "BE");
        return buf;
    }
    if (first_nul < n) {
        snprintf(buf, cap, "is not text: a NUL byte at offset %zu (a binary file?)", first_nul);
        return buf;
    }
    size_t bad = li_api_utf8_check((const char *)s, n);
    if (bad < n) {
        snprintf(buf, cap,
                 "is not UTF-8 text: byte 0x%02X at offset %zu; convert it, e.g. "
                 "iconv -f LATIN1 -t UTF-8 if it is Latin-1",
                 s[bad], bad);
        return buf;
    }
    return NULL;
}

// CRLF → LF in place; returns the new length.
static size_t crlf_to_lf(char *s, size_t n) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')) s[w++] = s[i];
    s[w] = 0;
    return w;
}

li_status rag_read_text(const char *path, char **out, size_t *len) {
    char *s;
    size_t n;
    *out = NULL;
    LI_TRY(li_file_read_all(path, &s, &n, MAX_TEXT_BYTES));
    char why[256];
    size_t skip = n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0; // the UTF-8 BOM
    if (text_problem((const unsigned char *)s + skip, n - skip, why, sizeof why)) {
        free(s);
        return li_error_set(LI_ERR_FORMAT, "%s %s", path, why);
    }
    memmove(s, s + skip, n - skip + 1);
    *len = crlf_to_lf(s, n - skip);
    *out = s;
    return LI_OK;
}

// rag_read_text with `label` ("--queries", "document 2") starting any error message.
static li_status read_labelled(const char *label, const char *path, char **out, size_t *len) {
    li_status rc = rag_read_text(path, out, len);
    return rc == LI_OK ? LI_OK : li_error_wrap(rc, "%s: ", label);
}

static bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// True when s holds nothing but whitespace (or nothing): a question without text.
static bool is_blank(const char *s) {
    while (is_space(*s))
        s++;
    return !*s;
}

// d ← text[0, n) as the engine sees it (rag_doc.text). `what` names it in the error messages.
static li_status doc_make(rag_doc *d, const char *text, size_t n, const char *id,
                          const char *what) {
    memset(d, 0, sizeof *d);
    size_t bad = li_api_utf8_check(text, n); // a JSON string can hold a NUL (\u0000)
    if (bad < n)
        return li_error_set(LI_ERR_FORMAT, "%s has a NUL character at offset %zu", what, bad);
    d->text = malloc(n + 3);
    if (!d->text || (id && !(d->id = strdup(id)))) {
        free(d->text);
        d->text = NULL;
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    memcpy(d->text, text, n);
    d->text[n] = 0;
    n = crlf_to_lf(d->text, n);
    while (n > 0 && is_space(d->text[n - 1]))
        n--;
    if (n == 0) {
        free(d->text);
        free(d->id);
        memset(d, 0, sizeof *d);
        return li_error_set(LI_ERR_INVALID_ARG, "%s is empty", what);
    }
    memcpy(d->text + n, "\n\n", 3);
    d->len = n + 2;
    return LI_OK;
}

// A document read from `path`; `label` ("--doc", "document 2") starts the error messages.
static li_status doc_from_file(rag_doc *d, const char *path, const char *id, const char *label) {
    char *s;
    size_t n;
    LI_TRY(read_labelled(label, path, &s, &n));
    char what[64 + 1024];
    snprintf(what, sizeof what, "%s '%.1024s'", label, path);
    li_status rc = doc_make(d, s, n, id ? id : path, what);
    free(s);
    return rc;
}

// n documents and the array holding them.
static void docs_free(rag_doc *docs, int n) {
    for (int i = 0; i < n; i++) {
        free(docs[i].text);
        free(docs[i].id);
    }
    free(docs);
}

// ---- the list --------------------------------------------------------------------------------

static rag_req *new_req(rag_list *l) {
    if (l->n_reqs == l->cap_reqs) {
        int cap = l->cap_reqs ? 2 * l->cap_reqs : 16;
        rag_req *p = realloc(l->reqs, (size_t)cap * sizeof *p);
        if (!p) {
            li_error_set(LI_ERR_OOM, "out of memory");
            return NULL;
        }
        l->reqs = p;
        l->cap_reqs = cap;
    }
    rag_req *r = &l->reqs[l->n_reqs++];
    memset(r, 0, sizeof *r);
    r->opt.max_tokens = -1;
    r->opt.top_k = -1;
    r->opt.min_p = -1;
    r->arrival_ms = -1;
    return r;
}

// The first reason a request cannot run, prefixed with where it was read.
static void req_fail(rag_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void req_fail(rag_req *r, const char *fmt, ...) {
    if (r->error) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg) + (r->where ? strlen(r->where) + 2 : 0) + 1;
    if ((r->error = malloc(n)))
        snprintf(r->error, n, "%s%s%s", r->where ? r->where : "", r->where ? ": " : "", msg);
}

li_status rag_add_doc_file(rag_list *l, const char *path) {
    rag_doc *p = realloc(l->docs, (size_t)(l->n_docs + 1) * sizeof *p);
    if (!p) return li_error_set(LI_ERR_OOM, "out of memory");
    l->docs = p;
    LI_TRY(doc_from_file(&l->docs[l->n_docs], path, NULL, "--doc"));
    l->n_docs++;
    return LI_OK;
}

li_status rag_add_query(rag_list *l, const char *text) {
    if (is_blank(text))
        return li_error_set(LI_ERR_INVALID_ARG,
                            "--query '%.64s': the question is empty or only whitespace", text);
    rag_req *r = new_req(l);
    if (!r) return LI_ERR_OOM;
    r->shared_docs = true;
    if (!(r->query = strdup(text))) return li_error_set(LI_ERR_OOM, "out of memory");
    return LI_OK;
}

li_status rag_load_queries(rag_list *l, const char *path) {
    char *s;
    size_t n;
    LI_TRY(read_labelled("--queries", path, &s, &n));
    li_status rc = LI_OK;
    int before = l->n_reqs;
    for (char *line = s, *next; line && rc == LI_OK; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (!is_blank(line)) rc = rag_add_query(l, line);
    }
    free(s);
    if (rc == LI_OK && l->n_reqs == before)
        rc = li_error_set(LI_ERR_INVALID_ARG, "--queries %s has no question (one per line)", path);
    return rc;
}

li_status rag_load_sample(rag_list *l, const char *path) {
    char *s;
    size_t n;
    LI_TRY(read_labelled("--sample", path, &s, &n));
    json_error_t jerr;
    json_t *root = json_loadb(s, n, 0, &jerr);
    free(s);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "--sample %s: not valid JSON (line %d: %s)", path,
                            jerr.line, jerr.text);
    li_status rc = LI_OK;
    json_t *q = json_object_get(root, "query");
    if (!json_is_object(root) || !json_is_string(q)) {
        rc = li_error_set(LI_ERR_FORMAT,
                          "--sample %s: expected an object with passages \"0\", "
                          "\"1\", … and a string \"query\" (data/README.md)",
                          path);
        goto out;
    }
    if (is_blank(json_string_value(q))) {
        rc = li_error_set(LI_ERR_INVALID_ARG,
                          "--sample %s: the \"query\" is empty or only whitespace", path);
        goto out;
    }
    rag_req *r = new_req(l);
    if (!r || !(r->query = strdup(json_string_value(q)))) {
        rc = li_error_set(LI_ERR_OOM, "out of memory");
        goto out;
    }
    for (int i = 0; rc == LI_OK; i++) {
        char key[16], id[64 + 1024], what[96 + 1024];
        snprintf(key, sizeof key, "%d", i);
        json_t *v = json_object_get(root, key);
        if (!v) break;
        snprintf(what, sizeof what, "--sample %.1024s: passage \"%s\"", path, key);
        if (!json_is_string(v)) {
            rc = li_error_set(LI_ERR_FORMAT, "%s is not a string", what);
            break;
        }
        rag_doc *p = realloc(r->docs, (size_t)(r->n_docs + 1) * sizeof *p);
        if (!p) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            break;
        }
        r->docs = p;
        snprintf(id, sizeof id, "%.1024s#%d", path, i);
        if ((rc = doc_make(&r->docs[r->n_docs], json_string_value(v), json_string_length(v), id,
                           what)) == LI_OK)
            r->n_docs++;
    }
out:
    json_decref(root);
    return rc;
}

// ---- the workload ----------------------------------------------------------------------------

static const char *const known_fields[] = {
    "id",          "documents", "docs",  "query", "system", "max_tokens", "max_completion_tokens",
    "temperature", "top_p",     "top_k", "min_p", "seed",   "stop",       "ignore_eos",
    "arrival_ms",  "repair"};

typedef struct {
    char *names[MAX_WARNED];
    int n;
} warned;

// A field the workload format does not have: a typo ("temprature") would otherwise change the
// run silently, and extra data (a reference answer) is common; so a warning, once per name.
static void warn_unknown(warned *w, const char *where, const char *key) {
    for (size_t i = 0; i < sizeof known_fields / sizeof known_fields[0]; i++)
        if (!strcmp(key, known_fields[i])) return;
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->names[i], key)) return;
    if (w->n < MAX_WARNED) w->names[w->n++] = strdup(key);
    fprintf(stderr,
            "lazyinfer rag: %s: field \"%s\" ignored (request fields: id, documents, "
            "query, system, max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
            "ignore_eos, arrival_ms, repair)\n",
            where, key);
}

// The documents array of a line: texts, {"id", "text"} or {"id", "file"} objects.
static void parse_docs(rag_req *r, const json_t *docs, const char *key) {
    if (!json_is_array(docs)) {
        req_fail(r,
                 "\"%s\" must be an array of texts, {\"id\", \"text\"} or {\"id\", \"file\"} "
                 "objects",
                 key);
        return;
    }
    size_t n = json_array_size(docs);
    if (n > LI_API_MAX_DOCS) {
        req_fail(r, "%zu documents: at most %d per request", n, LI_API_MAX_DOCS);
        return;
    }
    if (n && !(r->docs = calloc(n, sizeof *r->docs))) {
        req_fail(r, "out of memory");
        return;
    }
    for (size_t i = 0; i < n && !r->error; i++) {
        const json_t *d = json_array_get(docs, i), *id = NULL, *text = d, *file = NULL;
        char what[64];
        snprintf(what, sizeof what, "document %zu", i);
        if (json_is_object(d)) {
            id = json_object_get(d, "id");
            text = json_object_get(d, "text");
            file = json_object_get(d, "file");
            if (id && !json_is_string(id)) {
                req_fail(r, "%s: \"id\" must be a string", what);
                break;
            }
            if (!text == !file || (text && !json_is_string(text)) ||
                (file && !json_is_string(file))) {
                req_fail(r,
                         "%s: give a string \"text\" or a string \"file\" (a path), one of the "
                         "two",
                         what);
                break;
            }
        } else if (!json_is_string(d)) {
            req_fail(r, "%s must be a string or an object with \"text\" or \"file\"", what);
            break;
        }
        const char *ids = id ? json_string_value(id) : NULL;
        li_status rc = text
                           ? doc_make(&r->docs[r->n_docs], json_string_value(text),
                                      json_string_length(text), ids, what)
                           : doc_from_file(&r->docs[r->n_docs], json_string_value(file), ids, what);
        if (rc != LI_OK)
            req_fail(r, "%s", li_last_error());
        else
            r->n_docs++;
    }
}

static void parse_line(rag_req *r, const json_t *o, warned *w) {
    const char *key;
    const json_t *v;
    if (!json_is_object(o)) {
        req_fail(r, "a request must be a JSON object");
        return;
    }
    json_object_foreach((json_t *)o, key, v) warn_unknown(w, r->where, key);
    const json_t *id = json_object_get(o, "id");
    if (id && !json_is_null(id)) {
        if (json_is_string(id) || json_is_integer(id))
            r->id = json_incref((json_t *)id);
        else
            req_fail(r, "\"id\" must be a string or an integer");
    }
    const json_t *docs = json_object_get(o, "documents"), *old = json_object_get(o, "docs");
    if (docs && old)
        req_fail(r, "give \"documents\" or \"docs\" (its old name), not both");
    else if (docs || old)
        parse_docs(r, docs ? docs : old, docs ? "documents" : "docs");
    const json_t *q = json_object_get(o, "query"), *sys = json_object_get(o, "system");
    if (!q)
        req_fail(r, "no \"query\" (the question)");
    else if (!json_is_string(q))
        req_fail(r, "\"query\" must be a string");
    else if (li_api_utf8_check(json_string_value(q), json_string_length(q)) < json_string_length(q))
        req_fail(r, "\"query\" has a NUL character");
    else if (is_blank(json_string_value(q)))
        req_fail(r, "\"query\" is empty or only whitespace");
    if (sys && !json_is_null(sys) &&
        (!json_is_string(sys) ||
         li_api_utf8_check(json_string_value(sys), json_string_length(sys)) <
             json_string_length(sys)))
        req_fail(r, "\"system\" must be a string without NUL characters");
    li_api_error err;
    if (!li_api_parse_sampling(o, &r->opt, &err)) req_fail(r, "%s", err.message);
    li_repair rp;
    if (!r->error && r->opt.repair && li_repair_parse(r->opt.repair, &rp) != LI_OK)
        req_fail(r, "\"repair\": %s", li_last_error());
    const json_t *t = json_object_get(o, "arrival_ms");
    if (t && !json_is_null(t)) {
        if (!json_is_number(t) || !(json_number_value(t) >= 0))
            req_fail(r, "\"arrival_ms\" must be a number >= 0 (ms after the start of the run)");
        else
            r->arrival_ms = json_number_value(t);
    }
    if (r->error) return;
    if (!(r->query = strdup(json_string_value(q))) ||
        (sys && json_is_string(sys) && !(r->system = strdup(json_string_value(sys)))))
        req_fail(r, "out of memory");
}

li_status rag_load_workload(rag_list *l, const char *path) {
    char *s;
    size_t n;
    LI_TRY(read_labelled("--workload", path, &s, &n));
    li_status rc = LI_OK;
    warned w = {.n = 0};
    int line_no = 0;
    for (char *line = s, *next; line && rc == LI_OK; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        const char *c = line;
        while (is_space(*c))
            c++;
        if (!*c || *c == '#') continue;
        rag_req *r = new_req(l);
        if (!r) {
            rc = LI_ERR_OOM;
            break;
        }
        size_t wn = strlen(path) + 24;
        if (!(r->where = malloc(wn))) {
            rc = li_error_set(LI_ERR_OOM, "out of memory");
            break;
        }
        snprintf(r->where, wn, "%s:%d", path, line_no);
        json_error_t jerr;
        json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
            req_fail(r, "not valid JSON: %s (column %d)", jerr.text, jerr.column);
        else
            parse_line(r, o, &w);
        json_decref(o);
        l->n_arrivals += r->arrival_ms >= 0;
    }
    for (int i = 0; i < w.n; i++)
        free(w.names[i]);
    free(s);
    if (rc == LI_OK && line_no > 0 && l->n_reqs == 0)
        rc = li_error_set(LI_ERR_INVALID_ARG, "--workload %s has no request line", path);
    return rc;
}

// ---- ids that repeat -------------------------------------------------------------------------

// A request's or a document's id, where it was read and its position in the input.
typedef struct {
    const char *name;   // a request's id as JSON ("q1" quoted, 7 bare), a document's id
    const char *where;  // "FILE:LINE", "--doc", "--sample"
    int order;          // in input order
    const rag_doc *doc; // a document id's text; NULL for a request id
} named;

static int named_cmp(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static bool same_text(const rag_doc *a, const rag_doc *b) {
    return a->len == b->len && !memcmp(a->text, b->text, a->len);
}

// Warns, once per name (the first MAX_WARNED names, then how many more), about a request id met
// again, or a document id met again with another text; e holds one kind of id.
static void warn_repeats(named *e, int n) {
    qsort(e, (size_t)n, sizeof *e, named_cmp);
    int n_warned = 0;
    bool warned = false; // about e[first].name
    for (int i = 1, first = 0; i < n; i++) {
        if (strcmp(e[i].name, e[first].name)) {
            first = i;
            warned = false;
            continue;
        }
        if (warned || (e[i].doc && same_text(e[i].doc, e[first].doc))) continue;
        warned = true;
        if (++n_warned > MAX_WARNED) continue;
        if (e[i].doc)
            fprintf(stderr,
                    "lazyinfer rag: warning: %s: document id \"%s\" names another text than at "
                    "%s: the cache keys documents by their text, so it holds both\n",
                    e[i].where, e[i].name, e[first].where);
        else
            fprintf(stderr,
                    "lazyinfer rag: warning: %s: request id %s repeats that of %s: their records "
                    "are told apart only by their order\n",
                    e[i].where, e[i].name, e[first].where);
    }
    if (n_warned > MAX_WARNED)
        fprintf(stderr, "lazyinfer rag: warning: %d more %s ids repeat\n", n_warned - MAX_WARNED,
                e[0].doc ? "document" : "request");
}

// Appends document d's id, when it has one, to e[0, *n).
static void add_doc_id(named *e, int *n, const rag_doc *d, const char *where) {
    if (!d->id) return;
    e[*n] = (named){d->id, where, *n, d};
    (*n)++;
}

void rag_warn_repeated_ids(const rag_list *l) {
    int n_docs = l->n_docs;
    for (int i = 0; i < l->n_reqs; i++)
        n_docs += l->reqs[i].n_docs;
    named *e = malloc((size_t)(n_docs > l->n_reqs ? n_docs : l->n_reqs) * sizeof *e + 1);
    char **ids = calloc((size_t)l->n_reqs + 1, sizeof *ids); // the request ids as JSON
    bool oom = !e || !ids;
    for (int i = 0; !oom && i < l->n_reqs; i++) { // the ids the records carry
        const rag_req *r = &l->reqs[i];
        json_t *id = r->id ? json_incref(r->id) : json_integer(i);
        oom = !(ids[i] = json_dumps(id, JSON_ENCODE_ANY));
        json_decref(id);
        e[i] = (named){ids[i], r->where ? r->where : "--query", i, NULL};
    }
    if (!oom) warn_repeats(e, l->n_reqs);
    int n = 0;
    for (int k = 0; e && k < l->n_docs; k++)
        add_doc_id(e, &n, &l->docs[k], "--doc");
    for (int i = 0; e && i < l->n_reqs; i++) {
        const rag_req *r = &l->reqs[i];
        for (int k = 0; k < r->n_docs; k++)
            add_doc_id(e, &n, &r->docs[k], r->where ? r->where : "--sample");
    }
    if (e) warn_repeats(e, n);
    for (int i = 0; ids && i < l->n_reqs; i++)
        free(ids[i]);
    free(ids);
    free(e);
}

void rag_list_free(rag_list *l) {
    for (int i = 0; i < l->n_reqs; i++) {
        rag_req *r = &l->reqs[i]; // its fields in the order of rag_req
        json_decref(r->id);
        free(r->where);
        docs_free(r->docs, r->n_docs);
        free(r->query);
        free(r->system);
        li_api_request_free(&r->opt);
        free(r->error);
    }
    free(l->reqs);
    docs_free(l->docs, l->n_docs);
    memset(l, 0, sizeof *l);
}

const char *rag_req_label(const rag_req *r, int i, char *buf, size_t cap) {
    if (r->id && json_is_string(r->id)) return json_string_value(r->id);
    if (r->id)
        snprintf(buf, cap, "%lld", (long long)json_integer_value(r->id));
    else
        snprintf(buf, cap, "%d", i);
    return buf;
}
