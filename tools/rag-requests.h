// rag-requests.h — the requests of `lazyinfer rag`, read from its options and files
// (docs/RAG.md): --doc files with --query / --queries questions over them, --sample files (one
// request each, with its own passages), or a --workload of JSONL request lines.
//
// Text files must be UTF-8: a UTF-8 byte-order mark is dropped and CRLF becomes LF; UTF-16 and
// UTF-32 (by their byte-order mark, or by the NUL bytes between characters), binary files and
// other encodings are refused with a message that says what the file is and how to convert it.
// A document or a question is refused when it is empty or only whitespace.
//
// Errors of the options themselves (a --doc that is not text, a --workload that cannot be read)
// are li_status errors, for exit code 2. A bad workload line is not: its request keeps the reason
// in `error`, becomes an error record, and the other requests run.
// Tested by tests/test_rag_cli.py.
#ifndef LI_TOOLS_RAG_REQUESTS_H
#define LI_TOOLS_RAG_REQUESTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../src/server/api.h"
#include "lazyinfer.h"

typedef struct {
    char *text; // owned: as the engine sees it: CRLF → LF, trailing whitespace trimmed, "\n\n"
    size_t len; //   appended (so consecutive documents are separated alike)
    char *id;   // owned: the caller's id, or the file's path; NULL: none
} rag_doc;

typedef struct {
    json_t *id;    // owned reference: the line's "id" (string or integer); NULL: none
    char *where;   // owned: "FILE:LINE" of a workload line; NULL otherwise
    rag_doc *docs; // (n_docs) owned; unused when shared_docs
    int n_docs;
    bool shared_docs;     // the list's --doc documents (a --query / --queries request)
    char *query, *system; // owned; system NULL: the command's --system
    li_api_request opt;   // the sampling fields only: max_tokens (-1: the command's -n),
                          // temperature, top_p, top_k, min_p, seed, ignore_eos, stop
    double arrival_ms;    // when it may be submitted, ms after the start; < 0: not given
    char *error;          // owned: why it cannot run (it becomes an error record); NULL: it can
} rag_req;

typedef struct {
    rag_req *reqs; // (n_reqs) in input order
    int n_reqs, cap_reqs;
    rag_doc *docs; // (n_docs) the --doc documents
    int n_docs;
    int n_arrivals; // requests with an arrival_ms
} rag_list;

// Reads a text file for the engine: UTF-8 (its BOM dropped), CRLF → LF, NUL-terminated in a
// malloc'ed *out of *len bytes. LI_ERR_IO / LI_ERR_FORMAT with a message naming the path.
li_status rag_read_text(const char *path, char **out, size_t *len);
li_status rag_add_doc_file(rag_list *l, const char *path); // --doc FILE
li_status rag_add_query(rag_list *l, const char *text);    // --query TEXT, over the --doc files
li_status rag_load_queries(rag_list *l, const char *path); // --queries FILE: a question a line
li_status rag_load_sample(rag_list *l, const char *path);  // --sample FILE: one request
// --workload FILE: a request per line (blank lines and lines starting with '#' skipped). Fails
// only for the file (unreadable, not UTF-8 text); bad lines become requests with an error.
li_status rag_load_workload(rag_list *l, const char *path);
// Warns on stderr about a request id that repeats (the records could be told apart only by their
// order) and about a document id that names two different texts (the cache, keyed by the text,
// holds both): a workload's data error that the run would otherwise pass silently.
void rag_warn_repeated_ids(const rag_list *l);
void rag_list_free(rag_list *l);

// The request's id as text, for messages: its "id", else its index i.
const char *rag_req_label(const rag_req *r, int i, char *buf, size_t cap);

#endif
