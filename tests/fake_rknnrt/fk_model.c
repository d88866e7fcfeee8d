/*
 * fk_model.c -- reads a model file for the fake librknnrt: the Rockchip container (64-byte
 * header, model section, u64 JSON length, JSON trailer) and, in the JSON trailer, either the
 * fake's own "fake_graph" description or (vendor files) the norm_tensor I/O list.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fk_internal.h"
#include "fk_json.h"

static const char* const k_binary_ops[] = {"add", "sub", "mul", "div", "max", "min", NULL};
static const char* const k_unary_ops[] = {"relu", "neg", "abs", "sigmoid", NULL};

static int in_list(const char* const* list, const char* op) {
    int i;
    for (i = 0; list[i]; i++)
        if (strcmp(list[i], op) == 0) return 1;
    return 0;
}

int fk_is_builtin_op(const char* op) { return in_list(k_binary_ops, op) || in_list(k_unary_ops, op); }
int fk_op_is_unary(const char* op) { return in_list(k_unary_ops, op); }

float fk_apply(const char* op, float a, float b) {
    switch (op[0]) {
        case 'a':
            if (op[1] == 'd') return a + b;
            return fabsf(a); /* abs */
        case 's':
            if (op[1] == 'u') return a - b;
            return 1.0f / (1.0f + expf(-a)); /* sigmoid */
        case 'm':
            if (op[1] == 'u') return a * b;
            if (op[1] == 'a') return a > b ? a : b;
            return a < b ? a : b; /* min */
        case 'd': return a / b;
        case 'r': return a > 0.0f ? a : 0.0f;
        case 'n': return -a;
        default: return a;
    }
}

typedef struct {
    int code;
    char* msg;
    size_t msg_size;
} err_t;

static int set_err(err_t* e, int code, const char* fmt, ...) {
    va_list ap;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_size, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t rd_u64(const uint8_t* p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void copy_str(char* dst, size_t size, const char* src) {
    snprintf(dst, size, "%s", src ? src : "");
}

static const char* str_of(const fk_json* v, const char* fallback) {
    return (v && v->type == FK_J_STR) ? v->str : fallback;
}

static int read_shape(const fk_json* arr, uint32_t* n_dims, uint32_t* shape, err_t* e, const char* what) {
    int i;
    if (!arr || arr->type != FK_J_ARR || arr->n < 1 || arr->n > RKNN_MAX_DIMS)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "%s: shape must be a list of 1..16 dims", what);
    for (i = 0; i < arr->n; i++) {
        const fk_json* d = arr->items[i];
        if (d->type != FK_J_NUM || !d->is_int || d->num < 1 || d->num > 65536)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "%s: dim %d is not an integer in 1..65536", what, i);
        shape[i] = (uint32_t)d->num;
    }
    *n_dims = (uint32_t)arr->n;
    return 0;
}

static int read_io(const fk_json* j, fk_io* io, int is_input, err_t* e) {
    const char* dtype;
    const char* layout;
    const fk_json* v;
    if (!j || j->type != FK_J_OBJ) return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: an input/output is not an object");
    copy_str(io->name, sizeof(io->name), str_of(fk_json_get(j, "name"), ""));
    if (!io->name[0]) return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: an input/output has no name");
    if (read_shape(fk_json_get(j, "shape"), &io->n_dims, io->shape, e, io->name) != 0) return -1;
    dtype = str_of(fk_json_get(j, "dtype"), "float16");
    if (strcmp(dtype, "float16") == 0) {
        io->dtype = RKNN_TENSOR_FLOAT16;
    } else if (strcmp(dtype, "int8") == 0) {
        io->dtype = RKNN_TENSOR_INT8;
    } else {
        return set_err(e, RKNN_ERR_MODEL_INVALID, "%s: dtype %s unsupported (float16, int8)", io->name, dtype);
    }
    io->scale = 1.0f;
    io->zp = 0;
    v = fk_json_get(j, "scale");
    if (v && v->type == FK_J_NUM) io->scale = (float)v->num;
    v = fk_json_get(j, "zp");
    if (v && v->type == FK_J_NUM) io->zp = (int32_t)v->num;
    if (!(io->scale > 0.0f) || io->zp < -128 || io->zp > 127)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "%s: bad scale/zp", io->name);
    if (io->n_dims != 4) {
        io->layout = RKNN_TENSOR_UNDEFINED;
    } else if (!is_input) {
        io->layout = RKNN_TENSOR_NCHW;
    } else {
        uint32_t c = io->shape[1];
        layout = str_of(fk_json_get(j, "layout"), (c == 1 || c == 3 || c == 4) ? "NHWC" : "NCHW");
        if (strcmp(layout, "NHWC") == 0) io->layout = RKNN_TENSOR_NHWC;
        else if (strcmp(layout, "NCHW") == 0) io->layout = RKNN_TENSOR_NCHW;
        else return set_err(e, RKNN_ERR_MODEL_INVALID, "%s: layout %s unsupported (NHWC, NCHW)", io->name, layout);
    }
    return 0;
}

static int find_tensor(const fk_model* m, const char* name) {
    int t;
    for (t = 0; t < m->n_tensors; t++)
        if (strcmp(m->tensor_name[t], name) == 0) return t;
    return -1;
}

static int read_attrs(const fk_json* attrs, fk_node* n, err_t* e) {
    int k;
    if (!attrs) return 0;
    if (attrs->type != FK_J_OBJ || attrs->n > FK_MAX_ATTRS)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: attrs must be an object of <= %d entries", n->name, FK_MAX_ATTRS);
    for (k = 0; k < attrs->n; k++) {
        fk_attr* a = &n->attrs[n->n_attrs++];
        const fk_json* v = attrs->items[k];
        int count = v->type == FK_J_ARR ? v->n : 1, i, all_int = 1;
        copy_str(a->name, sizeof(a->name), attrs->keys[k]);
        if (count > FK_MAX_ATTR_VALUES)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: attr %s has too many values", n->name, a->name);
        for (i = 0; i < count; i++) {
            const fk_json* x = v->type == FK_J_ARR ? v->items[i] : v;
            if (x->type != FK_J_NUM)
                return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: attr %s is not numeric", n->name, a->name);
            if (!x->is_int) all_int = 0;
            a->f[i] = (float)x->num;
            a->i[i] = (int64_t)x->num;
        }
        a->n = (uint32_t)count;
        a->dtype = all_int ? RKNN_TENSOR_INT64 : RKNN_TENSOR_FLOAT32;
    }
    return 0;
}

static int add_node(fk_model* m, const char* op, const char* name, const char* const* ins, int n_in,
                    const char* out, err_t* e) {
    fk_node* n;
    int k;
    if (m->n_nodes >= FK_MAX_NODES || m->n_tensors >= FK_MAX_TENSORS)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: too many nodes");
    n = &m->nodes[m->n_nodes++];
    copy_str(n->op, sizeof(n->op), op);
    copy_str(n->name, sizeof(n->name), name);
    if (n_in < 1 || n_in > 2) return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: needs 1 or 2 inputs", name);
    n->n_in = n_in;
    for (k = 0; k < n_in; k++) {
        n->in[k] = find_tensor(m, ins[k]);
        if (n->in[k] < 0)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: input %s is not defined before it", name, ins[k]);
    }
    if (!out || !out[0] || find_tensor(m, out) >= 0)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: output name missing or already used", name);
    n->out = m->n_tensors;
    copy_str(m->tensor_name[m->n_tensors++], RKNN_MAX_NAME_LEN, out);
    return 0;
}

static int read_fake_graph(fk_model* m, const fk_json* g, err_t* e) {
    const fk_json* ins = fk_json_get(g, "inputs");
    const fk_json* outs = fk_json_get(g, "outputs");
    const fk_json* nodes = fk_json_get(g, "nodes");
    const fk_json* dyn = fk_json_get(g, "dynamic_shapes");
    const fk_json* v;
    int i, k;
    if (g->type != FK_J_OBJ) return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph is not an object");
    if (!ins || ins->type != FK_J_ARR || ins->n < 1 || ins->n > FK_MAX_IO || !outs || outs->type != FK_J_ARR ||
        outs->n < 1 || outs->n > FK_MAX_IO)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: 1..%d inputs and outputs expected", FK_MAX_IO);
    if (!nodes || nodes->type != FK_J_ARR) return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: no node list");
    copy_str(m->platform, sizeof(m->platform), str_of(fk_json_get(g, "platform"), m->platform));
    copy_str(m->toolkit_version, sizeof(m->toolkit_version), str_of(fk_json_get(g, "toolkit_version"), m->toolkit_version));
    copy_str(m->custom_string, sizeof(m->custom_string), str_of(fk_json_get(g, "custom_string"), ""));
    v = fk_json_get(g, "batch");
    if (v && v->type == FK_J_NUM && v->num >= 1) m->batch = (int)v->num;
    m->n_in = ins->n;
    for (i = 0; i < ins->n; i++) {
        if (read_io(ins->items[i], &m->in[i], 1, e) != 0) return -1;
        if (find_tensor(m, m->in[i].name) >= 0) return set_err(e, RKNN_ERR_MODEL_INVALID, "input %s listed twice", m->in[i].name);
        copy_str(m->tensor_name[m->n_tensors++], RKNN_MAX_NAME_LEN, m->in[i].name);
    }
    for (k = 0; k < nodes->n; k++) {
        const fk_json* nj = nodes->items[k];
        const fk_json* nin = fk_json_get(nj, "inputs");
        const char* names[2] = {NULL, NULL};
        char defname[32];
        const char* op = str_of(fk_json_get(nj, "op"), "");
        fk_node* n;
        if (!op[0] || !nin || nin->type != FK_J_ARR || nin->n < 1 || nin->n > 2)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "fake_graph: node %d needs an op and 1..2 inputs", k);
        for (i = 0; i < nin->n; i++) names[i] = str_of(nin->items[i], "");
        snprintf(defname, sizeof(defname), "node%d", k);
        if (add_node(m, op, str_of(fk_json_get(nj, "name"), defname), names, nin->n,
                     str_of(fk_json_get(nj, "output"), NULL), e) != 0)
            return -1;
        n = &m->nodes[m->n_nodes - 1];
        v = fk_json_get(nj, "const");
        if (v && v->type == FK_J_NUM) {
            n->has_const = 1;
            n->cval = (float)v->num;
        } else if (v && v->type == FK_J_STR && strcmp(v->str, "shared") == 0) {
            n->has_const = 1; /* the value is not in this file (remove_weight) */
            n->shared = 1;
            m->n_shared++;
        }
        if (fk_is_builtin_op(op)) {
            int want = fk_op_is_unary(op) ? 1 : 2;
            if (n->n_in + (n->has_const ? 1 : 0) != want)
                return set_err(e, RKNN_ERR_MODEL_INVALID, "node %s: %s takes %d operand(s)", n->name, op, want);
        }
        if (read_attrs(fk_json_get(nj, "attrs"), n, e) != 0) return -1;
    }
    m->n_out = outs->n;
    for (i = 0; i < outs->n; i++) {
        if (read_io(outs->items[i], &m->out[i], 0, e) != 0) return -1;
        m->out_tensor[i] = find_tensor(m, m->out[i].name);
        if (m->out_tensor[i] < m->n_in)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "output %s is not produced by a node", m->out[i].name);
    }
    if (dyn && dyn->type == FK_J_ARR && dyn->n > 0) {
        if (dyn->n > FK_MAX_SETS) return set_err(e, RKNN_ERR_MODEL_INVALID, "too many dynamic shape sets");
        for (k = 0; k < dyn->n; k++) {
            const fk_json* set = dyn->items[k];
            if (!set || set->type != FK_J_ARR || set->n != m->n_in)
                return set_err(e, RKNN_ERR_MODEL_INVALID, "dynamic shape set %d must give one shape per input", k);
            for (i = 0; i < m->n_in; i++) {
                uint32_t nd;
                if (read_shape(set->items[i], &nd, m->sets[k][i], e, "dynamic shape") != 0) return -1;
                if (nd != m->in[i].n_dims)
                    return set_err(e, RKNN_ERR_MODEL_INVALID, "dynamic shape set %d: input %d rank differs", k, i);
            }
        }
        m->n_sets = dyn->n;
    }
    return 0;
}

/* A vendor file without fake_graph: I/O from norm_tensor; only the add_mul fixture graph is known. */
static int read_vendor(fk_model* m, const fk_json* root, err_t* e) {
    const fk_json* graph = fk_json_get(root, "graph");
    const fk_json* norm = fk_json_get(root, "norm_tensor");
    int i, k;
    if (!graph || graph->type != FK_J_ARR || !norm || norm->type != FK_J_ARR)
        return set_err(e, RKNN_ERR_MODEL_INVALID, "JSON trailer without graph/norm_tensor");
    for (i = 0; i < graph->n; i++) {
        const fk_json* link = graph->items[i];
        const char* side = str_of(fk_json_get(link, "left"), "");
        const fk_json* idx = fk_json_get(link, "left_tensor_id");
        const fk_json* tid = fk_json_get(link, "right_tensor_id");
        const fk_json* entry = NULL;
        fk_io* io;
        int is_in = strcmp(side, "input") == 0, slot;
        const char* q;
        if (!idx || idx->type != FK_J_NUM || !tid || tid->type != FK_J_NUM)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "JSON graph[%d] is malformed", i);
        slot = (int)idx->num;
        if (slot < 0 || slot >= FK_MAX_IO) return set_err(e, RKNN_ERR_MODEL_INVALID, "JSON graph[%d]: bad index", i);
        for (k = 0; k < norm->n; k++) {
            const fk_json* t = fk_json_get(norm->items[k], "tensor_id");
            if (t && t->type == FK_J_NUM && t->num == tid->num) entry = norm->items[k];
        }
        if (!entry) return set_err(e, RKNN_ERR_MODEL_INVALID, "JSON graph[%d]: unknown norm_tensor", i);
        io = is_in ? &m->in[slot] : &m->out[slot];
        if (is_in && slot + 1 > m->n_in) m->n_in = slot + 1;
        if (!is_in && slot + 1 > m->n_out) m->n_out = slot + 1;
        copy_str(io->name, sizeof(io->name), str_of(fk_json_get(entry, "url"), ""));
        if (read_shape(fk_json_get(entry, "size"), &io->n_dims, io->shape, e, io->name) != 0) return -1;
        q = str_of(fk_json_get(fk_json_get(entry, "dtype"), "qnt_type"), "");
        if (q[0])
            return set_err(e, RKNN_ERR_MODEL_INVALID,
                           "fake runtime: quantized vendor files are not executable (tensor %s is %s)", io->name, q);
        io->dtype = RKNN_TENSOR_FLOAT16;
        io->scale = 1.0f;
        io->zp = 0;
        if (io->n_dims != 4) io->layout = RKNN_TENSOR_UNDEFINED;
        else if (is_in && (io->shape[1] == 1 || io->shape[1] == 3 || io->shape[1] == 4)) io->layout = RKNN_TENSOR_NHWC;
        else io->layout = RKNN_TENSOR_NCHW;
    }
    if (m->n_in == 2 && m->n_out == 2 && strcmp(m->in[0].name, "a") == 0 && strcmp(m->in[1].name, "b") == 0 &&
        strcmp(m->out[0].name, "sum") == 0 && strcmp(m->out[1].name, "prod") == 0) {
        const char* ab[2] = {"a", "b"};
        const char* sb[2] = {"sum", "b"};
        copy_str(m->tensor_name[0], RKNN_MAX_NAME_LEN, "a");
        copy_str(m->tensor_name[1], RKNN_MAX_NAME_LEN, "b");
        m->n_tensors = 2;
        if (add_node(m, "add", "Add:sum", ab, 2, "sum", e) != 0 || add_node(m, "mul", "Mul:prod", sb, 2, "prod", e) != 0)
            return -1;
        m->out_tensor[0] = 2;
        m->out_tensor[1] = 3;
        return 0;
    }
    return set_err(e, RKNN_ERR_MODEL_INVALID,
                   "fake runtime: this vendor graph is unknown (only fake_graph models and the add_mul fixture run)");
}

uint32_t fk_tensor_shape(const fk_model* m, uint32_t in_shapes[FK_MAX_IO][RKNN_MAX_DIMS], int t,
                         uint32_t out[RKNN_MAX_DIMS]) {
    int k;
    while (t >= m->n_in) {
        for (k = 0; k < m->n_nodes; k++)
            if (m->nodes[k].out == t) break;
        if (k == m->n_nodes) return 0;
        t = m->nodes[k].in[0];
    }
    memcpy(out, in_shapes[t], sizeof(uint32_t) * RKNN_MAX_DIMS);
    return m->in[t].n_dims;
}

int fk_model_shapes_ok(const fk_model* m, uint32_t shapes[FK_MAX_IO][RKNN_MAX_DIMS], char* msg, size_t msg_size) {
    int k;
    for (k = 0; k < m->n_nodes; k++) {
        const fk_node* n = &m->nodes[k];
        uint32_t a[RKNN_MAX_DIMS], b[RKNN_MAX_DIMS];
        uint32_t na, nb;
        if (n->n_in < 2) continue;
        na = fk_tensor_shape(m, shapes, n->in[0], a);
        nb = fk_tensor_shape(m, shapes, n->in[1], b);
        if (fk_elems(nb, b) == 1) continue;
        if (na != nb || memcmp(a, b, sizeof(uint32_t) * na) != 0) {
            snprintf(msg, msg_size, "node %s: operand shapes differ (only equal shapes or a 1-element second operand)",
                     n->name);
            return 0;
        }
    }
    return 1;
}

static int check_outputs(fk_model* m, err_t* e) {
    uint32_t shapes[FK_MAX_IO][RKNN_MAX_DIMS];
    int i;
    memset(shapes, 0, sizeof(shapes));
    for (i = 0; i < m->n_in; i++) {
        if (m->n_sets) memcpy(m->in[i].shape, m->sets[0][i], sizeof(m->in[i].shape));
        memcpy(shapes[i], m->in[i].shape, sizeof(shapes[i]));
    }
    for (i = 0; i < m->n_sets; i++) {
        int k;
        uint32_t set[FK_MAX_IO][RKNN_MAX_DIMS];
        memset(set, 0, sizeof(set));
        for (k = 0; k < m->n_in; k++) memcpy(set[k], m->sets[i][k], sizeof(set[k]));
        if (!fk_model_shapes_ok(m, set, e->msg, e->msg_size)) return set_err(e, RKNN_ERR_MODEL_INVALID, "%s", e->msg);
    }
    if (!fk_model_shapes_ok(m, shapes, e->msg, e->msg_size)) return set_err(e, RKNN_ERR_MODEL_INVALID, "%s", e->msg);
    for (i = 0; i < m->n_out; i++) {
        uint32_t s[RKNN_MAX_DIMS];
        uint32_t nd = fk_tensor_shape(m, shapes, m->out_tensor[i], s);
        if (nd != m->out[i].n_dims || memcmp(s, m->out[i].shape, sizeof(uint32_t) * nd) != 0)
            return set_err(e, RKNN_ERR_MODEL_INVALID, "output %s: declared shape differs from the graph's", m->out[i].name);
    }
    return 0;
}

fk_model* fk_model_parse(const uint8_t* data, size_t size, int* code, char* msg, size_t msg_size) {
    err_t e;
    fk_model* m;
    fk_json* root;
    const fk_json* g;
    uint64_t version, model_size, json_len;
    char jerr[128];
    e.code = RKNN_SUCC;
    e.msg = msg;
    e.msg_size = msg_size;
    msg[0] = '\0';
    if (size >= 8 && memcmp(data, "CYPTRKNN", 8) == 0) {
        set_err(&e, RKNN_ERR_MODEL_INVALID, "invalid rknn model magic: encrypted models are not supported by the fake");
        *code = e.code;
        return NULL;
    }
    if (size < 72 || memcmp(data, "RKNN\0\0\0\0", 8) != 0) {
        set_err(&e, RKNN_ERR_MODEL_INVALID, "parseRKNN from buffer: Invalid RKNN format!");
        *code = e.code;
        return NULL;
    }
    version = rd_u64(data + 8);
    model_size = rd_u64(data + 16);
    if (version < 1 || version > 6 || model_size > size - 72) {
        set_err(&e, RKNN_ERR_MODEL_INVALID, "parseRKNN from buffer: Invalid RKNN format! (version %llu, model size %llu)",
                (unsigned long long)version, (unsigned long long)model_size);
        *code = e.code;
        return NULL;
    }
    json_len = rd_u64(data + 64 + model_size);
    if (json_len == 0 || json_len != size - 72 - model_size) {
        set_err(&e, RKNN_ERR_MODEL_INVALID, "parseRKNN from buffer: bad JSON trailer length %llu",
                (unsigned long long)json_len);
        *code = e.code;
        return NULL;
    }
    root = fk_json_parse((const char*)data + 72 + model_size, (size_t)json_len, jerr, sizeof(jerr));
    if (!root || root->type != FK_J_OBJ) {
        set_err(&e, RKNN_ERR_MODEL_INVALID, "parseRKNN: the JSON trailer is not a JSON object (%s)", root ? "" : jerr);
        fk_json_free(root);
        *code = e.code;
        return NULL;
    }
    m = (fk_model*)calloc(1, sizeof(fk_model));
    if (!m) {
        fk_json_free(root);
        *code = RKNN_ERR_MALLOC_FAIL;
        snprintf(msg, msg_size, "out of memory");
        return NULL;
    }
    m->refs = 1;
    m->batch = 1;
    m->format_version = (int)version;
    copy_str(m->platform, sizeof(m->platform), str_of(fk_json_at(fk_json_get(root, "target_platform"), 0), ""));
    copy_str(m->toolkit_version, sizeof(m->toolkit_version), str_of(fk_json_get(root, "version"), ""));
    g = fk_json_get(root, "fake_graph");
    if ((g ? read_fake_graph(m, g, &e) : read_vendor(m, root, &e)) != 0 || check_outputs(m, &e) != 0) {
        fk_json_free(root);
        free(m);
        *code = e.code;
        return NULL;
    }
    fk_json_free(root);
    if (!m->platform[0]) copy_str(m->platform, sizeof(m->platform), "rk3588");
    *code = RKNN_SUCC;
    return m;
}

void fk_model_free(fk_model* m) { free(m); }
