/* fk_json.c -- see fk_json.h. */
#include "fk_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FK_JSON_MAX_DEPTH 64

typedef struct {
    const char* p;
    const char* end;
    char* err;
    size_t err_size;
    int failed;
} parser;

static void fail(parser* ps, const char* what) {
    if (!ps->failed && ps->err && ps->err_size) snprintf(ps->err, ps->err_size, "%s", what);
    ps->failed = 1;
}

static void skip_ws(parser* ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static fk_json* new_value(fk_json_type t) {
    fk_json* v = (fk_json*)calloc(1, sizeof(fk_json));
    if (v) v->type = t;
    return v;
}

static int push_item(fk_json* v, fk_json* item, char* key) {
    fk_json** items = (fk_json**)realloc(v->items, sizeof(fk_json*) * (size_t)(v->n + 1));
    if (!items) return -1;
    v->items = items;
    if (v->type == FK_J_OBJ) {
        char** keys = (char**)realloc(v->keys, sizeof(char*) * (size_t)(v->n + 1));
        if (!keys) return -1;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static void put_utf8(char* out, size_t* len, unsigned cp) {
    if (cp < 0x80) {
        out[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (char)(0xC0 | (cp >> 6));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*len)++] = (char)(0xE0 | (cp >> 12));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*len)++] = (char)(0xF0 | (cp >> 18));
        out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(parser* ps, unsigned* out) {
    unsigned v = 0;
    int i;
    if (ps->end - ps->p < 4) return -1;
    for (i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

/* ps->p is just after the opening quote. */
static char* parse_string(parser* ps) {
    /* Decoded text is never longer than the source (a \uXXXX escape is 6 bytes, at most 4 out). */
    const char* start = ps->p;
    size_t cap = 1, len = 0;
    char* out;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\') ps->p++;
        if (ps->p < ps->end) ps->p++;
    }
    if (ps->p >= ps->end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    cap += (size_t)(ps->p - start);
    ps->p = start;
    out = (char*)malloc(cap);
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    while (*ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) {
            fail(ps, "control character in string");
            free(out);
            return NULL;
        }
        if (c != '\\') {
            out[len++] = c;
            continue;
        }
        c = *ps->p++;
        switch (c) {
            case '"': out[len++] = '"'; break;
            case '\\': out[len++] = '\\'; break;
            case '/': out[len++] = '/'; break;
            case 'b': out[len++] = '\b'; break;
            case 'f': out[len++] = '\f'; break;
            case 'n': out[len++] = '\n'; break;
            case 'r': out[len++] = '\r'; break;
            case 't': out[len++] = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (hex4(ps, &cp) != 0) {
                    fail(ps, "bad \\u escape");
                    free(out);
                    return NULL;
                }
                if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                    ps->p += 2;
                    if (hex4(ps, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
                        fail(ps, "bad surrogate pair");
                        free(out);
                        return NULL;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                put_utf8(out, &len, cp);
                break;
            }
            default:
                fail(ps, "bad escape in string");
                free(out);
                return NULL;
        }
    }
    ps->p++; /* closing quote */
    out[len] = '\0';
    return out;
}

static fk_json* parse_value(parser* ps, int depth);

static fk_json* parse_container(parser* ps, int depth, int is_obj) {
    fk_json* v = new_value(is_obj ? FK_J_OBJ : FK_J_ARR);
    char close = is_obj ? '}' : ']';
    if (!v) {
        fail(ps, "out of memory");
        return NULL;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return v;
    }
    for (;;) {
        char* key = NULL;
        fk_json* item;
        skip_ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a key");
                break;
            }
            ps->p++;
            key = parse_string(ps);
            if (!key) break;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "expected ':'");
                free(key);
                break;
            }
            ps->p++;
        }
        item = parse_value(ps, depth + 1);
        if (!item) {
            free(key);
            break;
        }
        if (push_item(v, item, key) != 0) {
            fail(ps, "out of memory");
            fk_json_free(item);
            free(key);
            break;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return v;
        }
        fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    fk_json_free(v);
    return NULL;
}

static fk_json* parse_value(parser* ps, int depth) {
    fk_json* v;
    if (depth > FK_JSON_MAX_DEPTH) {
        fail(ps, "nesting too deep");
        return NULL;
    }
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "unexpected end of text");
        return NULL;
    }
    switch (*ps->p) {
        case '{': ps->p++; return parse_container(ps, depth, 1);
        case '[': ps->p++; return parse_container(ps, depth, 0);
        case '"': {
            char* s;
            ps->p++;
            s = parse_string(ps);
            if (!s) return NULL;
            v = new_value(FK_J_STR);
            if (!v) {
                free(s);
                fail(ps, "out of memory");
                return NULL;
            }
            v->str = s;
            return v;
        }
        default: break;
    }
    if (ps->end - ps->p >= 4 && memcmp(ps->p, "true", 4) == 0) {
        ps->p += 4;
        v = new_value(FK_J_BOOL);
        if (v) v->num = 1;
        return v;
    }
    if (ps->end - ps->p >= 5 && memcmp(ps->p, "false", 5) == 0) {
        ps->p += 5;
        return new_value(FK_J_BOOL);
    }
    if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0) {
        ps->p += 4;
        return new_value(FK_J_NULL);
    }
    {
        char buf[64];
        size_t n = 0;
        int is_int = 1;
        while (ps->p < ps->end && n < sizeof(buf) - 1 &&
               (strchr("+-0123456789.eE", *ps->p) != NULL)) {
            if (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E') is_int = 0;
            buf[n++] = *ps->p++;
        }
        buf[n] = '\0';
        if (n == 0) {
            fail(ps, "unexpected character");
            return NULL;
        }
        v = new_value(FK_J_NUM);
        if (!v) return NULL;
        {
            char* endp;
            v->num = strtod(buf, &endp);
            if (*endp != '\0') {
                free(v);
                fail(ps, "bad number");
                return NULL;
            }
        }
        v->is_int = is_int;
        return v;
    }
}

fk_json* fk_json_parse(const char* text, size_t len, char* err, size_t err_size) {
    parser ps;
    fk_json* v;
    ps.p = text;
    ps.end = text + len;
    ps.err = err;
    ps.err_size = err_size;
    ps.failed = 0;
    v = parse_value(&ps, 0);
    if (!v) {
        if (!ps.failed) fail(&ps, "out of memory");
        return NULL;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        fail(&ps, "trailing characters after the JSON value");
        fk_json_free(v);
        return NULL;
    }
    return v;
}

void fk_json_free(fk_json* v) {
    int i;
    if (!v) return;
    for (i = 0; i < v->n; i++) {
        fk_json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

const fk_json* fk_json_get(const fk_json* v, const char* key) {
    int i;
    if (!v || v->type != FK_J_OBJ) return NULL;
    for (i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0) return v->items[i];
    return NULL;
}

const fk_json* fk_json_at(const fk_json* v, int i) {
    if (!v || v->type != FK_J_ARR || i < 0 || i >= v->n) return NULL;
    return v->items[i];
}
