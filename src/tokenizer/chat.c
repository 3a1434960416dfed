// chat.c — chat formats: detection from the model's Jinja template text, and renderers that
// produce exactly what the templates we know render for system/user/assistant messages with
// default variables (checked against jinja2 by tests/test_tokenizer_parity.py and golden strings
// in tests/test-tokenizer.c):
//   llama3  Llama-3 : bos + per message '<|start_header_id|>'+role+'<|end_header_id|>\n\n'
//                     + content|trim + '<|eot_id|>'
//           Llama-3.1/3.2/3.3 (template mentions "Cutting Knowledge Date"): bos + a system header
//                     "Cutting Knowledge Date: December 2023\nToday Date: <date_string default>
//                     \n\n" + the system message|trim (or "") + '<|eot_id|>', then the others
//   llada   as Llama-3 with bos <|startoftext|>
//   chatml  '<|im_start|>'+role+'\n'+content+'<|im_end|>\n' (no trim, no bos), preceded by the
//           template's default system message (SmolLM2: "You are a helpful AI assistant named
//           SmolLM, trained by Hugging Face") when the first message is not a system message.
// Generation prompt: the assistant header. This is not a Jinja interpreter: templates of other
// shapes are LI_ERR_UNSUPPORTED with a hint to pass --chat-template.
#include <stdlib.h>
#include <string.h>

#include "tokenizer-internal.h"

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

// Copies a Jinja string literal's text, turning the escapes "\n" and "\\" into characters.
static char *unescape(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == '\\')) {
            d[k++] = s[i + 1] == 'n' ? '\n' : '\\';
            i++;
        } else {
            d[k++] = s[i];
        }
    }
    d[k] = 0;
    return d;
}

static const char *find_n(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

li_status li_chat_format_detect(const char *text, li_chat_format *out) {
    *out = LI_CHAT_UNKNOWN;
    if (!text) text = "";
    if (strstr(text, "<|im_start|>")) *out = LI_CHAT_CHATML;
    else if (strstr(text, "<|start_header_id|>") && strstr(text, "<|eot_id|>"))
        *out = strstr(text, "<|startoftext|>") ? LI_CHAT_LLADA : LI_CHAT_LLAMA3;
    if (*out != LI_CHAT_UNKNOWN) return LI_OK;
    return li_error_set(LI_ERR_UNSUPPORTED, "the model's chat template is not one lazyinfer "
                        "recognises (Llama-3, ChatML, LLaDA); pass --chat-template "
                        "llama3|chatml|llada");
}

li_status li_chat_format_parse(const char *name, li_chat_format *out) {
    static const li_chat_format all[] = {LI_CHAT_LLAMA3, LI_CHAT_CHATML, LI_CHAT_LLADA};
    for (size_t i = 0; name && i < 3; i++)
        if (strcmp(name, li_chat_format_name(all[i])) == 0) {
            *out = all[i];
            return LI_OK;
        }
    return li_error_set(LI_ERR_INVALID_ARG, "unknown chat template '%s' (llama3, chatml, llada)",
                        name ? name : "(null)");
}

const char *li_chat_format_name(li_chat_format f) {
    switch (f) {
    case LI_CHAT_LLAMA3: return "llama3";
    case LI_CHAT_CHATML: return "chatml";
    case LI_CHAT_LLADA: return "llada";
    default: return "unknown";
    }
}

li_chat_format li_tokenizer_chat_format(const li_tokenizer *t) { return t->chat; }

li_status li_tokenizer_set_chat_format(li_tokenizer *t, li_chat_format f) {
    const char *need;
    switch (f) {
    case LI_CHAT_LLAMA3: case LI_CHAT_LLADA: need = "<|start_header_id|>"; break;
    case LI_CHAT_CHATML: need = "<|im_start|>"; break;
    default: return li_error_set(LI_ERR_INVALID_ARG, "chat format %d is not a format", (int)f);
    }
    if (li_tokenizer_find(t, need) < 0)
        return li_error_set(LI_ERR_UNSUPPORTED, "chat template %s needs token %s, which this "
                            "tokenizer does not have", li_chat_format_name(f), need);
    t->chat = f;
    return LI_OK;
}

// The literal default system message of a ChatML template: the text of a
// '<|im_start|>system\n…<|im_end|>' that contains no Jinja expression.
static char *chatml_default_system(const char *s, size_t n) {
    static const char *const heads[] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (int h = 0; h < 2; h++) {
        const char *p = s;
        while ((p = find_n(p, n - (size_t)(p - s), heads[h])) != NULL) {
            p += strlen(heads[h]);
            const char *e = find_n(p, n - (size_t)(p - s), "<|im_end|>");
            if (!e) break;
            if (e > p && !memchr(p, '{', (size_t)(e - p)) && !memchr(p, '}', (size_t)(e - p)) &&
                !memchr(p, '\'', (size_t)(e - p)) && !memchr(p, '"', (size_t)(e - p)))
                return unescape(p, (size_t)(e - p));
        }
    }
    return NULL;
}

li_status li_tok_set_template(li_tokenizer *t, const char *text, size_t len) {
    free(t->chat_template);
    free(t->default_system);
    free(t->date_string);
    t->default_system = t->date_string = NULL;
    t->chat_template = dup_n(text, len);
    if (!t->chat_template) return li_error_set(LI_ERR_OOM, "out of memory for the chat template");
    li_chat_format f;
    if (li_chat_format_detect(t->chat_template, &f) != LI_OK) {
        li_error_clear();  // unknown template: the error comes when rendering, with the hint
        t->chat = LI_CHAT_UNKNOWN;
        return LI_OK;
    }
    if (f == LI_CHAT_LLAMA3 && t->bos >= 0 && strcmp(TOK_TEXT(t, t->bos), "<|startoftext|>") == 0)
        f = LI_CHAT_LLADA;  // LLaDA's template writes bos_token; its BOS tells it apart
    t->chat = f;
    if (f == LI_CHAT_CHATML) t->default_system = chatml_default_system(text, len);
    if (f == LI_CHAT_LLAMA3 && find_n(text, len, "Cutting Knowledge Date")) {
        // {%- set date_string = "26 Jul 2024" %} is the default when the caller passes none.
        const char *d = find_n(text, len, "set date_string = \"");
        const char *e = d ? memchr(d + 19, '"', len - (size_t)(d + 19 - text)) : NULL;
        t->date_string = d && e ? dup_n(d + 19, (size_t)(e - d - 19)) : dup_n("26 Jul 2024", 11);
        if (!t->date_string) return li_error_set(LI_ERR_OOM, "out of memory");
    }
    return LI_OK;
}

// Python str.strip(): removes Unicode whitespace (str.isspace) at both ends.
static bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static uint32_t decode_at(const char *s, size_t n, size_t i, size_t *len) {
    const uint8_t *u = (const uint8_t *)s + i;
    uint8_t c = u[0];
    int l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if ((size_t)l > n - i) l = 1;
    uint32_t v = l == 1 ? c : c & (0x7F >> l);
    for (int k = 1; k < l; k++) v = (v << 6) | (u[k] & 0x3F);
    *len = (size_t)l;
    return v;
}

static void py_strip(const char *s, const char **b, size_t *n) {
    size_t len = strlen(s), i = 0, l;
    while (i < len && is_py_space(decode_at(s, len, i, &l))) i += l;
    size_t e = len;
    while (e > i) {
        size_t j = e - 1;
        while (j > i && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
        if (!is_py_space(decode_at(s, len, j, &l))) break;
        e = j;
    }
    *b = s + i;
    *n = e - i;
}

// Appends a message's content, recording where it lands in span[0..1] (NULL: not recorded).
static li_status put_content(li_buf *out, const char *c, size_t n, size_t *span) {
    if (span) span[0] = out->len;
    LI_TRY(li_buf_append(out, c, n));
    if (span) span[1] = out->len;
    return LI_OK;
}

static li_status llama_turn(li_buf *out, const char *role, const char *content, size_t *span) {
    const char *c;
    size_t n;
    py_strip(content, &c, &n);
    LI_TRY(li_buf_printf(out, "<|start_header_id|>%s<|end_header_id|>\n\n", role));
    LI_TRY(put_content(out, c, n, span));
    return li_buf_append(out, "<|eot_id|>", 10);
}

li_status li_chat_render_messages(const li_tokenizer *t, const li_chat_message *msgs, int n,
                                  bool add_generation_prompt, li_buf *out) {
    return li_chat_render_spans(t, msgs, n, add_generation_prompt, out, NULL);
}

li_status li_chat_tokenize(const li_tokenizer *t, const li_chat_message *msgs, int n,
                           bool add_generation_prompt, int32_t **ids, int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    li_buf b = {0};
    size_t *spans = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *spans);
    if (!spans) return li_error_set(LI_ERR_OOM, "out of memory");
    li_status rc = li_chat_render_spans(t, msgs, n, add_generation_prompt, &b, spans);
    if (rc == LI_OK)
        rc = li_tokenizer_encode_spans(t, b.data ? b.data : "", b.len, false, spans, n, ids, n_ids);
    free(spans);
    li_buf_free(&b);
    return rc;
}

li_status li_chat_render_spans(const li_tokenizer *t, const li_chat_message *msgs, int n,
                               bool add_generation_prompt, li_buf *out, size_t *spans) {
#define SPAN(i) (spans ? spans + 2 * (i) : NULL)
    if (t->chat == LI_CHAT_UNKNOWN)
        return li_error_set(LI_ERR_UNSUPPORTED, "no chat format: the model has no chat template "
                            "or one lazyinfer does not recognise; pass --chat-template "
                            "llama3|chatml|llada");
    if (n < 0 || (n > 0 && !msgs)) return li_error_set(LI_ERR_INVALID_ARG, "chat: no messages");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content || !msgs[i].role[0])
            return li_error_set(LI_ERR_INVALID_ARG, "chat: message %d has no role or content", i);
    if (t->chat == LI_CHAT_CHATML) {
        for (int i = 0; i < n; i++) {
            if (i == 0 && t->default_system && strcmp(msgs[0].role, "system") != 0)
                LI_TRY(li_buf_printf(out, "<|im_start|>system\n%s<|im_end|>\n", t->default_system));
            LI_TRY(li_buf_printf(out, "<|im_start|>%s\n", msgs[i].role));
            LI_TRY(put_content(out, msgs[i].content, strlen(msgs[i].content), SPAN(i)));
            LI_TRY(li_buf_append(out, "<|im_end|>\n", 11));
        }
        if (add_generation_prompt) LI_TRY(li_buf_append(out, "<|im_start|>assistant\n", 22));
        return LI_OK;
    }
    // Llama-3 family: the BOS text is the tokenizer's BOS token (the template's bos_token).
    const char *bos = t->bos >= 0 ? TOK_TEXT(t, t->bos)
                      : t->chat == LI_CHAT_LLADA ? "<|startoftext|>" : "<|begin_of_text|>";
    if (t->date_string && t->chat == LI_CHAT_LLAMA3) {
        const char *sys = "";
        int first = 0;
        size_t unused[2];
        if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
            sys = msgs[0].content;
            first = 1;
        }
        const char *c;
        size_t len;
        py_strip(sys, &c, &len);
        LI_TRY(li_buf_printf(out, "%s<|start_header_id|>system<|end_header_id|>\n\nCutting "
                             "Knowledge Date: December 2023\nToday Date: %s\n\n", bos,
                             t->date_string));
        LI_TRY(put_content(out, c, len, first ? SPAN(0) : spans ? unused : NULL));
        LI_TRY(li_buf_append(out, "<|eot_id|>", 10));
        for (int i = first; i < n; i++)
            LI_TRY(llama_turn(out, msgs[i].role, msgs[i].content, SPAN(i)));
    } else {
        for (int i = 0; i < n; i++) {
            if (i == 0) LI_TRY(li_buf_append(out, bos, strlen(bos)));
            LI_TRY(llama_turn(out, msgs[i].role, msgs[i].content, SPAN(i)));
        }
    }
    if (add_generation_prompt)
        LI_TRY(li_buf_append(out, "<|start_header_id|>assistant<|end_header_id|>\n\n", 47));
    return LI_OK;
#undef SPAN
}
