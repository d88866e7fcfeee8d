/*
 * fake_rknnrt.c -- a fake librknnrt.so for contract tests of rknnlite's NPU binding.
 *
 * Implements the runtime ABI declared by cython/include/rknn_api.h and rknn_custom_op.h for a
 * small model kind (element-wise graphs described in the model file's JSON trailer, see
 * README.md) with the vendor's call semantics: size checks, index bounds, error codes, data
 * conversions, zero-copy memory with a simulated device copy (cache coherency), context
 * duplication, core masks per platform, dynamic shapes, perf text, custom operators.
 * Every API call is recorded in an in-memory log (fake_rknnrt_log).
 *
 * -DFAKE_OLD_RUNTIME builds an "old runtime" (default version 1.4.0) without
 * rknn_set_core_mask, rknn_set_input_shapes and rknn_create_mem2.
 *
 * Environment: FAKE_RKNNRT_VERSION (runtime version, "X.Y.Z"), FAKE_RKNNRT_PLATFORM (the
 * board's SoC; default: the model's platform), RKNN_LOG_LEVEL (0 silent, 1 errors (default),
 * 2 + warnings, 3 + info) for the vendor-style "E RKNN: ..." lines on stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fk_internal.h"

#define FK_EXPORT __attribute__((visibility("default")))

#ifdef FAKE_OLD_RUNTIME
#define FK_DEFAULT_VERSION "1.4.0"
#else
#define FK_DEFAULT_VERSION "2.5.0"
#endif
#define FK_DRV_VERSION "0.9.8"

/* ------------------------------------------------------------------------------------------ */
/* Call log and vendor-style messages                                                          */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char* g_log;
static size_t g_log_len, g_log_cap;

static void log_line(const char* fmt, ...) {
    char line[1024];
    va_list ap;
    size_t n;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    n = strlen(line);
    line[n++] = '\n';
    pthread_mutex_lock(&g_log_lock);
    if (g_log_len + n + 1 > g_log_cap) {
        size_t cap = (g_log_cap ? g_log_cap * 2 : 4096) + n;
        char* p = (char*)realloc(g_log, cap);
        if (!p) {
            pthread_mutex_unlock(&g_log_lock);
            return;
        }
        g_log = p;
        g_log_cap = cap;
    }
    memcpy(g_log + g_log_len, line, n);
    g_log_len += n;
    g_log[g_log_len] = '\0';
    pthread_mutex_unlock(&g_log_lock);
}

static int log_level(void) {
    const char* s = getenv("RKNN_LOG_LEVEL");
    return s && *s ? atoi(s) : 1;
}

/* A vendor-style message ("E RKNN: [hh:mm:ss.mmm] ...") on stderr, also kept in the call log
 * as "! E ..." so tests need not capture stderr. */
static void say(char level, const char* fmt, ...) {
    char msg[900];
    va_list ap;
    int need = level == 'E' ? 1 : (level == 'W' ? 2 : 3);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_line("! %c %s", level, msg);
    if (log_level() >= need) {
        struct timespec ts;
        struct tm tmv;
        time_t secs;
        clock_gettime(CLOCK_REALTIME, &ts);
        secs = ts.tv_sec;
        localtime_r(&secs, &tmv);
        fprintf(stderr, "%c RKNN: [%02d:%02d:%02d.%03ld] %s\n", level, tmv.tm_hour, tmv.tm_min, tmv.tm_sec,
                ts.tv_nsec / 1000000L, msg);
    }
}

FK_EXPORT uint64_t fake_rknnrt_log(char* buf, uint64_t size) {
    uint64_t len;
    pthread_mutex_lock(&g_log_lock);
    len = g_log_len;
    if (buf && size) {
        size_t n = g_log_len < size - 1 ? g_log_len : (size_t)(size - 1);
        if (n) memcpy(buf, g_log, n);
        buf[n] = '\0';
    }
    pthread_mutex_unlock(&g_log_lock);
    return len;
}

FK_EXPORT void fake_rknnrt_log_clear(void) {
    pthread_mutex_lock(&g_log_lock);
    g_log_len = 0;
    if (g_log) g_log[0] = '\0';
    pthread_mutex_unlock(&g_log_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Registries                                                                                  */

typedef struct fk_mem {
    rknn_tensor_mem pub;
    struct fk_mem* next;
    uint64_t id;
    void* own;    /* runtime-allocated virt memory */
    void* shadow; /* the simulated device copy; NULL = coherent (non-cacheable) */
} fk_mem;

struct fk_ctx;

typedef struct {
    struct fk_ctx* ctx;
    int node;
    int skip; /* init returned RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE */
    rknn_custom_op op;
    rknn_custom_op_context octx;
} fk_opbind;

typedef struct {
    int bound;
    uint64_t mem_id;
    fk_layout lay;
    int pass;
} fk_binding;

typedef struct fk_ctx {
    uint64_t id;
    struct fk_ctx* next;
    pthread_mutex_t mu;
    fk_model* m;
    uint32_t flags;
    int info_only;
    char version[64];
    int version_num;
    char platform[32];
    int core_mask;
    int batch_core_num;
    int shapes_set;
    uint32_t cur[FK_MAX_IO][RKNN_MAX_DIMS];
    float* in_val[FK_MAX_IO];
    int in_ready[FK_MAX_IO];
    fk_binding in_bind[FK_MAX_IO];
    fk_binding out_bind[FK_MAX_IO];
    float* tval[FK_MAX_TENSORS];
    size_t tcap[FK_MAX_TENSORS];
    float* res[2][FK_MAX_IO];
    uint64_t res_frame[2];
    int res_valid[2];
    int latest;
    uint64_t frames;
    int64_t run_us;
    int64_t node_ns[FK_MAX_NODES];
    char* perf_text;
    fk_opbind* ops[FK_MAX_NODES];
    void** out_bufs;
    int n_out_bufs;
    uint64_t weight_mem, internal_mem;
} fk_ctx;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fk_ctx* g_ctxs;
static fk_mem* g_mems;
static uint64_t g_next_ctx = 1, g_next_mem = 1;
static int g_live_models, g_live_outputs;

/* Returns the context locked, or NULL. */
static fk_ctx* lock_ctx(rknn_context id) {
    fk_ctx* c;
    pthread_mutex_lock(&g_lock);
    for (c = g_ctxs; c; c = c->next)
        if (c->id == (uint64_t)id) break;
    pthread_mutex_unlock(&g_lock);
    if (c) pthread_mutex_lock(&c->mu);
    return c;
}

static fk_mem* find_mem_locked(const rknn_tensor_mem* p) {
    fk_mem* m;
    for (m = g_mems; m; m = m->next)
        if (&m->pub == p) return m;
    return NULL;
}

static fk_mem* find_mem(const rknn_tensor_mem* p) {
    fk_mem* m;
    pthread_mutex_lock(&g_lock);
    m = find_mem_locked(p);
    pthread_mutex_unlock(&g_lock);
    return m;
}

static fk_mem* find_mem_id(uint64_t id) {
    fk_mem* m;
    pthread_mutex_lock(&g_lock);
    for (m = g_mems; m; m = m->next)
        if (m->id == id) break;
    pthread_mutex_unlock(&g_lock);
    return m;
}

FK_EXPORT int fake_rknnrt_live(const char* what) {
    int n = 0;
    fk_ctx* c;
    fk_mem* m;
    if (!what) return -1;
    pthread_mutex_lock(&g_lock);
    if (strcmp(what, "contexts") == 0) {
        for (c = g_ctxs; c; c = c->next) n++;
    } else if (strcmp(what, "mems") == 0) {
        for (m = g_mems; m; m = m->next) n++;
    } else if (strcmp(what, "outputs") == 0) {
        n = g_live_outputs;
    } else if (strcmp(what, "models") == 0) {
        n = g_live_models;
    } else {
        n = -1;
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */

static int version_number(const char* s) {
    int a = 0, b = 0, c = 0;
    if (sscanf(s, "%d.%d.%d", &a, &b, &c) < 2) return -1;
    return a * 10000 + b * 100 + c;
}

static const char* runtime_version(void) {
    const char* v = getenv("FAKE_RKNNRT_VERSION");
    return v && *v ? v : FK_DEFAULT_VERSION;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char* type_name(int t) {
    static const char* const names[] = {"FP32", "FP16", "INT8", "UINT8", "INT16", "UINT16",
                                        "INT32", "UINT32", "INT64", "BOOL", "INT4", "BF16"};
    return t >= 0 && t < 12 ? names[t] : "UNKNOW";
}

static const char* fmt_name(int f) {
    static const char* const names[] = {"NCHW", "NHWC", "NC1HWC2", "UNDEFINED"};
    return f >= 0 && f < 4 ? names[f] : "UNKNOW";
}

static size_t cur_elems(const fk_ctx* c, int t, uint32_t shape[RKNN_MAX_DIMS], uint32_t* n_dims) {
    uint32_t s[RKNN_MAX_DIMS];
    uint32_t nd = fk_tensor_shape(c->m, (uint32_t(*)[RKNN_MAX_DIMS])c->cur, t, s);
    if (shape) memcpy(shape, s, sizeof(s));
    if (n_dims) *n_dims = nd;
    return fk_elems(nd, s);
}

static int ensure(float** p, size_t* cap, size_t n) {
    if (*cap >= n && *p) return 0;
    free(*p);
    *p = (float*)calloc(n ? n : 1, sizeof(float));
    *cap = *p ? n : 0;
    return *p ? 0 : -1;
}

/* Which data types rknn_inputs_set / set_io_mem accept for a model input (pass_through = 0). */
static int input_type_ok(const fk_io* io, rknn_tensor_type t) {
    if (t == RKNN_TENSOR_FLOAT32 || t == RKNN_TENSOR_UINT8) return 1;
    return t == io->dtype; /* int8 model: int8; float16 model: float16 */
}

/* Builds the layout of input data described by (type, fmt, pass_through, strides). */
static int input_layout(const fk_ctx* c, int i, rknn_tensor_type type, rknn_tensor_format fmt, int pass,
                        uint32_t w_stride, uint32_t h_stride, int zero_copy, fk_layout* l, char* why, size_t why_size) {
    const fk_io* io = &c->m->in[i];
    memset(l, 0, sizeof(*l));
    l->type = type;
    l->fmt = fmt;
    l->n_dims = io->n_dims;
    memcpy(l->shape, c->cur[i], sizeof(l->shape));
    if ((int)fmt < 0 || fmt >= RKNN_TENSOR_FORMAT_MAX) {
        snprintf(why, why_size, "input %d: invalid fmt %d", i, (int)fmt);
        return -1;
    }
    if (pass ? type != io->dtype : !input_type_ok(io, type)) {
        snprintf(why, why_size, "input %d: type %s not accepted for a %s model input%s", i, type_name(type),
                 type_name(io->dtype), pass ? " with pass_through (must be the model's type)" : "");
        return -1;
    }
    if (io->n_dims != 4) {
        if (fmt == RKNN_TENSOR_NC1HWC2) {
            snprintf(why, why_size, "input %d: NC1HWC2 needs a 4-D tensor", i);
            return -1;
        }
        l->fmt = RKNN_TENSOR_UNDEFINED;
        return 0;
    }
    if (fmt == RKNN_TENSOR_NC1HWC2) {
        if (!pass && !(zero_copy && type == io->dtype)) {
            snprintf(why, why_size, "input %d: NC1HWC2 data needs pass_through=1 and the model's type", i);
            return -1;
        }
        l->c2 = fk_c2(c->platform, io->dtype);
        return 0;
    }
    if (fmt == RKNN_TENSOR_UNDEFINED) l->nhwc_order = io->layout == RKNN_TENSOR_NHWC;
    l->w_stride = l->shape[3];
    l->h_stride = l->shape[2];
    if (fmt == RKNN_TENSOR_NHWC) {
        if (pass && !zero_copy) {
            uint32_t al = fk_width_align(c->platform);
            l->w_stride = (l->shape[3] + al - 1) / al * al;
        }
        if (w_stride) l->w_stride = w_stride;
        if (h_stride) l->h_stride = h_stride;
        if (l->w_stride < l->shape[3] || l->h_stride < l->shape[2]) {
            snprintf(why, why_size, "input %d: w_stride %u / h_stride %u smaller than the width %u / height %u", i,
                     l->w_stride, l->h_stride, l->shape[3], l->shape[2]);
            return -1;
        }
    }
    return 0;
}

/* Converts input data in layout l into the input's canonical float values. */
static void convert_input(const fk_ctx* c, int i, const void* buf, const fk_layout* l, int pass, float* out) {
    const fk_io* io = &c->m->in[i];
    size_t n = fk_elems(l->n_dims, l->shape), k;
    for (k = 0; k < n; k++) {
        float v = fk_load(l->type, buf, fk_layout_offset(l, k));
        if (pass && io->dtype == RKNN_TENSOR_INT8) v = (v - (float)io->zp) * io->scale;
        else if (!pass) v = fk_round_to(io, v);
        out[k] = v;
    }
}

/* Writes an output's canonical float values into layout l (FLOAT32 = dequantized values). */
static void convert_output(const fk_io* io, const float* vals, const fk_layout* l, void* buf) {
    size_t n = fk_elems(l->n_dims, l->shape), k;
    for (k = 0; k < n; k++) {
        float v = vals[k];
        if (l->type == RKNN_TENSOR_INT8 && io->dtype == RKNN_TENSOR_INT8) v = v / io->scale + (float)io->zp;
        fk_store(l->type, buf, fk_layout_offset(l, k), v);
    }
}

static void fill_custom_tensor(fk_ctx* c, int t, uint32_t index, rknn_custom_op_tensor* ct) {
    uint32_t shape[RKNN_MAX_DIMS], nd, d;
    size_t n = cur_elems(c, t, shape, &nd);
    memset(ct, 0, sizeof(*ct));
    ct->attr.index = index;
    snprintf(ct->attr.name, sizeof(ct->attr.name), "%s", c->m->tensor_name[t]);
    ct->attr.n_dims = nd;
    for (d = 0; d < nd; d++) ct->attr.dims[d] = shape[d];
    ct->attr.n_elems = (uint32_t)n;
    ct->attr.size = (uint32_t)(n * 4);
    ct->attr.fmt = nd == 4 ? RKNN_TENSOR_NCHW : RKNN_TENSOR_UNDEFINED;
    ct->attr.type = RKNN_TENSOR_FLOAT32;
    ct->attr.qnt_type = RKNN_TENSOR_QNT_NONE;
    ct->attr.scale = 1.0f;
    ct->attr.w_stride = nd == 4 ? shape[3] : 0;
    ct->attr.size_with_stride = ct->attr.size;
    ct->mem.virt_addr = c->tval[t];
    ct->mem.fd = -1;
    ct->mem.size = (uint32_t)(n * 4);
    ct->mem.flags = RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE;
}

static int alloc_tensors(fk_ctx* c) {
    int t;
    for (t = 0; t < c->m->n_tensors; t++)
        if (ensure(&c->tval[t], &c->tcap[t], cur_elems(c, t, NULL, NULL)) != 0) return -1;
    return 0;
}

static int alloc_inputs(fk_ctx* c) {
    int i;
    for (i = 0; i < c->m->n_in; i++) {
        size_t n = fk_elems(c->m->in[i].n_dims, c->cur[i]);
        free(c->in_val[i]);
        c->in_val[i] = (float*)calloc(n, sizeof(float));
        c->in_ready[i] = 0;
        if (!c->in_val[i]) return -1;
    }
    return 0;
}

static void free_ctx(fk_ctx* c) {
    int i, k;
    for (k = 0; k < FK_MAX_NODES; k++) {
        if (!c->ops[k]) continue;
        if (c->ops[k]->op.destroy) c->ops[k]->op.destroy(&c->ops[k]->octx);
        free(c->ops[k]);
    }
    for (i = 0; i < FK_MAX_IO; i++) {
        free(c->in_val[i]);
        free(c->res[0][i]);
        free(c->res[1][i]);
    }
    for (i = 0; i < FK_MAX_TENSORS; i++) free(c->tval[i]);
    pthread_mutex_lock(&g_lock);
    for (i = 0; i < c->n_out_bufs; i++) {
        free(c->out_bufs[i]);
        g_live_outputs--;
    }
    if (--c->m->refs == 0) {
        fk_model_free(c->m);
        g_live_models--;
    }
    pthread_mutex_unlock(&g_lock);
    free(c->out_bufs);
    free(c->perf_text);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static fk_ctx* new_ctx(fk_model* m, uint32_t flags, const char* version, const char* platform) {
    fk_ctx* c = (fk_ctx*)calloc(1, sizeof(fk_ctx));
    int i;
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->m = m;
    c->flags = flags;
    c->info_only = (flags & RKNN_FLAG_COLLECT_MODEL_INFO_ONLY) != 0;
    snprintf(c->version, sizeof(c->version), "%s", version);
    c->version_num = version_number(version);
    snprintf(c->platform, sizeof(c->platform), "%s", platform);
    c->batch_core_num = 1;
    for (i = 0; i < m->n_in; i++) memcpy(c->cur[i], m->in[i].shape, sizeof(c->cur[i]));
    c->shapes_set = m->n_sets == 0;
    if (alloc_inputs(c) != 0 || alloc_tensors(c) != 0) {
        c->m->refs++; /* free_ctx drops one reference */
        free_ctx(c);
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    c->id = g_next_ctx++;
    c->next = g_ctxs;
    g_ctxs = c;
    pthread_mutex_unlock(&g_lock);
    return c;
}

static void unlink_ctx(fk_ctx* c) {
    fk_ctx** p;
    pthread_mutex_lock(&g_lock);
    for (p = &g_ctxs; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Context lifetime                                                                            */

static uint8_t* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    uint8_t* data;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    data = (uint8_t*)malloc((size_t)n + 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* Takes the shared constants of a weight-less model (remove_weight) from the donor's model. */
static int share_weights(fk_model* m, const fk_model* donor) {
    int k, j;
    if (!donor) {
        say('E', "rknn_init, the model has no weights (built with remove_weight=True): init it with "
                 "RKNN_FLAG_SHARE_WEIGHT_MEM and extend->ctx of a context of the full model");
        return RKNN_ERR_MODEL_INVALID;
    }
    for (k = 0; k < m->n_nodes; k++) {
        fk_node* n = &m->nodes[k];
        if (!n->shared) continue;
        for (j = 0; j < donor->n_nodes; j++)
            if (strcmp(donor->nodes[j].name, n->name) == 0 && donor->nodes[j].has_const && !donor->nodes[j].shared) break;
        if (j == donor->n_nodes) {
            say('E', "rknn_init, RKNN_FLAG_SHARE_WEIGHT_MEM: the shared context's model has no weight for node %s", n->name);
            return RKNN_ERR_MODEL_INVALID;
        }
        n->cval = donor->nodes[j].cval;
    }
    return RKNN_SUCC;
}

static int do_init(rknn_context* context, void* model, uint32_t size, uint32_t flag, rknn_init_extend* extend) {
    uint8_t* file = NULL;
    const uint8_t* data = (const uint8_t*)model;
    size_t len = size;
    fk_model* m;
    fk_ctx* c;
    char msg[512];
    int code, model_v, rt_v;
    const char* version = runtime_version();
    const char* dev = getenv("FAKE_RKNNRT_PLATFORM");

    if (!context || !model) {
        say('E', "rknn_init, param is NULL");
        return RKNN_ERR_PARAM_INVALID;
    }
    say('I', "RKNN Runtime Information, librknnrt version: %s (fake rknnlite test runtime)", version);
    say('I', "RKNN Driver Information, version: %s", FK_DRV_VERSION);
    if ((flag & RKNN_FLAG_SHARE_WEIGHT_MEM) != 0) {
        fk_ctx* other = extend ? lock_ctx(extend->ctx) : NULL;
        if (!other) {
            say('E', "rknn_init, RKNN_FLAG_SHARE_WEIGHT_MEM needs extend->ctx of an initialised context");
            return RKNN_ERR_PARAM_INVALID;
        }
        pthread_mutex_unlock(&other->mu);
    }
    if (size == 0) {
        file = read_file((const char*)model, &len);
        if (!file) {
            say('E', "rknn_init, open model file %s failed!", (const char*)model);
            say('E', "rknn_init, load model failed!");
            return RKNN_ERR_MODEL_INVALID;
        }
        data = file;
    }
    m = fk_model_parse(data, len, &code, msg, sizeof(msg));
    free(file);
    if (!m) {
        say('E', "%s", msg);
        say('E', "rknn_init, load model failed!");
        return code;
    }
    say('I', "RKNN Model Information, version: %d, toolkit version: %s, target platform: %s, framework name: ONNX, "
             "model inference type: %s",
        m->format_version, m->toolkit_version, m->platform, m->n_sets ? "dynamic_shape" : "static_shape");
    model_v = version_number(m->toolkit_version);
    rt_v = version_number(version);
    if (model_v > 0 && rt_v > 0 && model_v / 100 > rt_v / 100) {
        say('E', "Invalid RKNN model version %d", m->format_version);
        say('E', "The model was built by toolkit %s; this librknnrt is %s (update librknnrt)", m->toolkit_version,
            version);
        say('E', "rknn_init, load model failed!");
        fk_model_free(m);
        return rt_v < 10500 ? RKNN_ERR_FAIL : RKNN_ERR_MODEL_INVALID;
    }
    if (dev && *dev && strcmp(dev, m->platform) != 0) {
        say('E', "The target platform of the model is %s, but the device is %s!", m->platform, dev);
        fk_model_free(m);
        return RKNN_ERR_TARGET_PLATFORM_UNMATCH;
    }
    if (m->n_shared > 0) {
        fk_ctx* other = (flag & RKNN_FLAG_SHARE_WEIGHT_MEM) ? lock_ctx(extend->ctx) : NULL;
        code = share_weights(m, other ? other->m : NULL);
        if (other) pthread_mutex_unlock(&other->mu);
        if (code != RKNN_SUCC) {
            fk_model_free(m);
            return code;
        }
    }
    pthread_mutex_lock(&g_lock);
    g_live_models++;
    pthread_mutex_unlock(&g_lock);
    c = new_ctx(m, flag, version, m->platform);
    if (!c) return RKNN_ERR_MALLOC_FAIL;
    *context = (rknn_context)c->id;
    return RKNN_SUCC;
}

FK_EXPORT int rknn_init(rknn_context* context, void* model, uint32_t size, uint32_t flag, rknn_init_extend* extend) {
    int ret = do_init(context, model, size, flag, extend);
    log_line("rknn_init ctx=%llu size=%u flag=0x%x path=%s extend=%d -> %d",
             (unsigned long long)(ret == 0 ? *context : 0), size, flag,
             size == 0 && model ? (const char*)model : "-", extend != NULL, ret);
    return ret;
}

FK_EXPORT int rknn_dup_context(rknn_context* context_in, rknn_context* context_out) {
    fk_ctx* src;
    fk_ctx* c;
    int ret = RKNN_SUCC;
    if (!context_in || !context_out) {
        ret = RKNN_ERR_PARAM_INVALID;
    } else if (!(src = lock_ctx(*context_in))) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        pthread_mutex_lock(&g_lock);
        src->m->refs++;
        pthread_mutex_unlock(&g_lock);
        c = new_ctx(src->m, src->flags, src->version, src->platform);
        pthread_mutex_unlock(&src->mu);
        if (!c) ret = RKNN_ERR_MALLOC_FAIL;
        else *context_out = (rknn_context)c->id;
    }
    log_line("rknn_dup_context in=%llu out=%llu -> %d", (unsigned long long)(context_in ? *context_in : 0),
             (unsigned long long)(ret == 0 ? *context_out : 0), ret);
    return ret;
}

FK_EXPORT int rknn_destroy(rknn_context context) {
    fk_ctx* c = lock_ctx(context);
    int ret = RKNN_SUCC;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        unlink_ctx(c);
        pthread_mutex_unlock(&c->mu);
        free_ctx(c);
    }
    log_line("rknn_destroy ctx=%llu -> %d", (unsigned long long)context, ret);
    return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* Queries                                                                                     */

static const char* cmd_name(int cmd) {
    static const char* const names[] = {
        "RKNN_QUERY_IN_OUT_NUM", "RKNN_QUERY_INPUT_ATTR", "RKNN_QUERY_OUTPUT_ATTR", "RKNN_QUERY_PERF_DETAIL",
        "RKNN_QUERY_PERF_RUN", "RKNN_QUERY_SDK_VERSION", "RKNN_QUERY_MEM_SIZE", "RKNN_QUERY_CUSTOM_STRING",
        "RKNN_QUERY_NATIVE_INPUT_ATTR", "RKNN_QUERY_NATIVE_OUTPUT_ATTR", "RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR",
        "RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR", "RKNN_QUERY_DEVICE_MEM_INFO", "RKNN_QUERY_INPUT_DYNAMIC_RANGE",
        "RKNN_QUERY_CURRENT_INPUT_ATTR", "RKNN_QUERY_CURRENT_OUTPUT_ATTR", "RKNN_QUERY_CURRENT_NATIVE_INPUT_ATTR",
        "RKNN_QUERY_CURRENT_NATIVE_OUTPUT_ATTR"};
    return cmd >= 0 && cmd < RKNN_QUERY_CMD_MAX ? names[cmd] : "UNKNOWN";
}

static uint32_t cmd_size(int cmd) {
    switch (cmd) {
        case RKNN_QUERY_IN_OUT_NUM: return sizeof(rknn_input_output_num);
        case RKNN_QUERY_PERF_DETAIL: return sizeof(rknn_perf_detail);
        case RKNN_QUERY_PERF_RUN: return sizeof(rknn_perf_run);
        case RKNN_QUERY_SDK_VERSION: return sizeof(rknn_sdk_version);
        case RKNN_QUERY_MEM_SIZE: return sizeof(rknn_mem_size);
        case RKNN_QUERY_CUSTOM_STRING: return sizeof(rknn_custom_string);
        case RKNN_QUERY_DEVICE_MEM_INFO: return sizeof(rknn_tensor_mem);
        case RKNN_QUERY_INPUT_DYNAMIC_RANGE: return sizeof(rknn_input_range);
        default: return sizeof(rknn_tensor_attr);
    }
}

/* The fake's weights: one float32 per node constant, shared ones (remove_weight) not counted. */
static size_t weight_bytes(const fk_model* m) {
    size_t n = 0;
    int k;
    for (k = 0; k < m->n_nodes; k++) n += m->nodes[k].has_const && !m->nodes[k].shared ? sizeof(float) : 0;
    return n;
}

static void mem_size(const fk_ctx* c, rknn_mem_size* ms) {
    const fk_model* m = c->m;
    uint64_t internal = 0, io = 0;
    int t, i;
    memset(ms, 0, sizeof(*ms));
    for (t = m->n_in; t < m->n_tensors; t++) {
        int is_out = 0;
        for (i = 0; i < m->n_out; i++) is_out |= m->out_tensor[i] == t;
        if (!is_out) internal += cur_elems(c, t, NULL, NULL) * fk_type_size(m->in[0].dtype);
    }
    for (i = 0; i < m->n_in; i++) io += fk_elems(m->in[i].n_dims, c->cur[i]) * fk_type_size(m->in[i].dtype);
    for (i = 0; i < m->n_out; i++) io += cur_elems(c, m->out_tensor[i], NULL, NULL) * fk_type_size(m->out[i].dtype);
    ms->total_weight_size = (uint32_t)weight_bytes(m);
    ms->total_internal_size = (uint32_t)internal;
    ms->total_dma_allocated_size = ms->total_weight_size + internal + io;
}

/* Presentation of an attribute query: which fmt, and whether it is a native input. */
static int query_attr(fk_ctx* c, int cmd, rknn_tensor_attr* a) {
    const fk_model* m = c->m;
    int is_in = cmd == RKNN_QUERY_INPUT_ATTR || cmd == RKNN_QUERY_NATIVE_INPUT_ATTR ||
                cmd == RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR || cmd == RKNN_QUERY_CURRENT_INPUT_ATTR ||
                cmd == RKNN_QUERY_CURRENT_NATIVE_INPUT_ATTR;
    int current = cmd >= RKNN_QUERY_CURRENT_INPUT_ATTR;
    int native = cmd == RKNN_QUERY_NATIVE_INPUT_ATTR || cmd == RKNN_QUERY_NATIVE_OUTPUT_ATTR ||
                 cmd == RKNN_QUERY_CURRENT_NATIVE_INPUT_ATTR || cmd == RKNN_QUERY_CURRENT_NATIVE_OUTPUT_ATTR;
    int nhwc = cmd == RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR || cmd == RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR;
    uint32_t index = a->index, canon[RKNN_MAX_DIMS], nd;
    const fk_io* io;
    rknn_tensor_format fmt;
    if (index >= (uint32_t)(is_in ? m->n_in : m->n_out)) {
        say('E', "rknn_query, %s, index %u out of range [0, %d)", cmd_name(cmd), index, is_in ? m->n_in : m->n_out);
        return RKNN_ERR_PARAM_INVALID;
    }
    if ((native || nhwc) && !current && m->n_sets) {
        say('E', "rknn_query, %s is not supported by dynamic shape models; use RKNN_QUERY_CURRENT_NATIVE_*",
            cmd_name(cmd));
        return RKNN_ERR_FAIL;
    }
    io = is_in ? &m->in[index] : &m->out[index];
    if (is_in) {
        memcpy(canon, current ? c->cur[index] : io->shape, sizeof(canon));
        nd = io->n_dims;
    } else if (current) {
        nd = fk_tensor_shape(m, (uint32_t(*)[RKNN_MAX_DIMS])c->cur, m->out_tensor[index], canon);
    } else {
        memcpy(canon, io->shape, sizeof(canon));
        nd = io->n_dims;
    }
    if (nhwc) fmt = RKNN_TENSOR_NHWC;
    else if (!native) fmt = io->layout;
    else if (is_in && (canon[1] == 1 || canon[1] == 3 || canon[1] == 4)) fmt = RKNN_TENSOR_NHWC;
    else fmt = RKNN_TENSOR_NC1HWC2;
    fk_fill_attr(a, index, io, canon, nd, fmt, c->platform, is_in && (native || nhwc));
    return RKNN_SUCC;
}

static int do_query(fk_ctx* c, int cmd, void* info, uint32_t size) {
    const fk_model* m = c->m;
    if (!info) {
        say('E', "rknn_query, info is NULL");
        return RKNN_ERR_PARAM_INVALID;
    }
    if (cmd < 0 || cmd >= RKNN_QUERY_CMD_MAX) {
        say('E', "rknn_query, unknown cmd %d", cmd);
        return RKNN_ERR_PARAM_INVALID;
    }
    if (size != cmd_size(cmd)) {
        say('E', "rknn_query, %s, size = %u, expect %u!", cmd_name(cmd), size, cmd_size(cmd));
        return RKNN_ERR_PARAM_INVALID;
    }
    if (c->info_only && cmd != RKNN_QUERY_MEM_SIZE) {
        say('E', "rknn_query, %s: context created with RKNN_FLAG_COLLECT_MODEL_INFO_ONLY", cmd_name(cmd));
        return RKNN_ERR_CTX_INVALID;
    }
    switch (cmd) {
        case RKNN_QUERY_IN_OUT_NUM: {
            rknn_input_output_num* n = (rknn_input_output_num*)info;
            n->n_input = (uint32_t)m->n_in;
            n->n_output = (uint32_t)m->n_out;
            return RKNN_SUCC;
        }
        case RKNN_QUERY_PERF_DETAIL: {
            rknn_perf_detail* p = (rknn_perf_detail*)info;
            static char empty[1] = "";
            p->perf_data = c->perf_text ? c->perf_text : empty;
            p->data_len = strlen(p->perf_data);
            return RKNN_SUCC;
        }
        case RKNN_QUERY_PERF_RUN:
            ((rknn_perf_run*)info)->run_duration = c->run_us;
            return RKNN_SUCC;
        case RKNN_QUERY_SDK_VERSION: {
            rknn_sdk_version* v = (rknn_sdk_version*)info;
            memset(v, 0, sizeof(*v));
            snprintf(v->api_version, sizeof(v->api_version), "%s (fake rknnlite test runtime)", c->version);
            snprintf(v->drv_version, sizeof(v->drv_version), "%s", FK_DRV_VERSION);
            return RKNN_SUCC;
        }
        case RKNN_QUERY_MEM_SIZE:
            mem_size(c, (rknn_mem_size*)info);
            return RKNN_SUCC;
        case RKNN_QUERY_CUSTOM_STRING: {
            rknn_custom_string* s = (rknn_custom_string*)info;
            memset(s, 0, sizeof(*s));
            snprintf(s->string, sizeof(s->string), "%s", m->custom_string);
            return RKNN_SUCC;
        }
        case RKNN_QUERY_DEVICE_MEM_INFO:
            say('E', "rknn_query, RKNN_QUERY_DEVICE_MEM_INFO is not supported on %s", c->platform);
            return RKNN_ERR_FAIL;
        case RKNN_QUERY_INPUT_DYNAMIC_RANGE: {
            rknn_input_range* r = (rknn_input_range*)info;
            uint32_t index = r->index, s;
            const fk_io* io;
            if (!m->n_sets) {
                say('E', "rknn_query, RKNN_QUERY_INPUT_DYNAMIC_RANGE: the model is a static shape model");
                return RKNN_ERR_MODEL_INVALID;
            }
            if (index >= (uint32_t)m->n_in) {
                say('E', "rknn_query, %s, index %u out of range [0, %d)", cmd_name(cmd), index, m->n_in);
                return RKNN_ERR_PARAM_INVALID;
            }
            io = &m->in[index];
            memset(r, 0, sizeof(*r));
            r->index = index;
            r->shape_number = (uint32_t)m->n_sets;
            r->fmt = io->layout;
            r->n_dims = io->n_dims;
            snprintf(r->name, sizeof(r->name), "%s", io->name);
            for (s = 0; s < (uint32_t)m->n_sets; s++) {
                rknn_tensor_attr a;
                fk_fill_attr(&a, index, io, m->sets[s][index], io->n_dims, io->layout, c->platform, 0);
                memcpy(r->dyn_range[s], a.dims, sizeof(uint32_t) * io->n_dims);
            }
            return RKNN_SUCC;
        }
        default:
            return query_attr(c, cmd, (rknn_tensor_attr*)info);
    }
}

FK_EXPORT int rknn_query(rknn_context context, rknn_query_cmd cmd, void* info, uint32_t size) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    uint32_t index = 0;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        if (info && size >= 4) memcpy(&index, info, 4);
        ret = do_query(c, (int)cmd, info, size);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_query ctx=%llu cmd=%d size=%u index=%u -> %d", (unsigned long long)context, (int)cmd, size, index,
             ret);
    return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* General I/O                                                                                 */

static int do_inputs_set(fk_ctx* c, uint32_t n, rknn_input* inputs) {
    const fk_model* m = c->m;
    fk_layout lay[FK_MAX_IO];
    int seen[FK_MAX_IO];
    char why[300];
    uint32_t k;
    if (c->info_only) return RKNN_ERR_CTX_INVALID;
    if (!inputs || n != (uint32_t)m->n_in) {
        say('E', "rknn_inputs_set, n_inputs = %u, expect %d", n, m->n_in);
        return RKNN_ERR_PARAM_INVALID;
    }
    memset(seen, 0, sizeof(seen));
    for (k = 0; k < n; k++) {
        const rknn_input* in = &inputs[k];
        size_t need;
        if (in->index >= n || seen[in->index]) {
            say('E', "rknn_inputs_set, input index %u invalid or repeated", in->index);
            return RKNN_ERR_PARAM_INVALID;
        }
        seen[in->index] = 1;
        if (!in->buf) {
            say('E', "rknn_inputs_set, input[%u].buf is NULL", in->index);
            return RKNN_ERR_PARAM_INVALID;
        }
        if (input_layout(c, (int)in->index, in->type, in->fmt, in->pass_through, 0, 0, 0, &lay[k], why, sizeof(why)) != 0) {
            say('E', "rknn_inputs_set, %s", why);
            return RKNN_ERR_PARAM_INVALID;
        }
        need = fk_layout_bytes(&lay[k]);
        if (in->size != need) {
            say('E', "rknn_inputs_set, input[%u] size = %u, expect %zu (type %s, fmt %s%s)", in->index, in->size, need,
                type_name(in->type), fmt_name(in->fmt), in->pass_through ? ", pass_through" : "");
            return RKNN_ERR_PARAM_INVALID;
        }
    }
    for (k = 0; k < n; k++) {
        uint32_t i = inputs[k].index;
        convert_input(c, (int)i, inputs[k].buf, &lay[k], inputs[k].pass_through, c->in_val[i]);
        c->in_ready[i] = 1;
        c->in_bind[i].bound = 0;
    }
    return RKNN_SUCC;
}

FK_EXPORT int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    char args[256] = "";
    uint32_t k;
    if (inputs)
        for (k = 0; k < n_inputs && k < 4; k++) {
            size_t len = strlen(args);
            snprintf(args + len, sizeof(args) - len, " in%u=(index=%u,size=%u,type=%d,fmt=%d,pass=%u)", k,
                     inputs[k].index, inputs[k].size, (int)inputs[k].type, (int)inputs[k].fmt, inputs[k].pass_through);
        }
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_inputs_set(c, n_inputs, inputs);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_inputs_set ctx=%llu n=%u%s -> %d", (unsigned long long)context, n_inputs, args, ret);
    return ret;
}

static const char* const k_multicore_ops[] = {"add", "relu", NULL};

static void workload(const fk_ctx* c, const char* op, int custom, char* out, size_t size) {
    int cores = fk_cores(c->platform), share[3] = {0, 0, 0}, k, used = 0, split = 0;
    int mask = c->core_mask;
    if (mask == RKNN_NPU_CORE_ALL) mask = (1 << cores) - 1;
    for (k = 0; k < cores; k++) used += (mask >> k) & 1;
    for (k = 0; k < 2 && !custom; k++) split |= k_multicore_ops[k] && strcmp(k_multicore_ops[k], op) == 0;
    if (used <= 1 || !split) {
        int core = 0;
        for (k = 0; k < cores; k++)
            if ((mask >> k) & 1) {
                core = k;
                break;
            }
        share[core] = 100;
    } else {
        int each = 100 / used, left = 100;
        for (k = 0; k < cores; k++)
            if ((mask >> k) & 1) share[k] = each;
        for (k = 0; k < cores; k++) left -= share[k];
        for (k = 0; k < cores; k++)
            if ((mask >> k) & 1) {
                share[k] += left;
                break;
            }
    }
    out[0] = '\0';
    for (k = 0; k < cores; k++) {
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s%d.0%%", k ? "/" : "", share[k]);
    }
}

static void shape_text(const uint32_t* s, uint32_t nd, char* out, size_t size) {
    uint32_t d;
    size_t len;
    snprintf(out, size, "(");
    for (d = 0; d < nd; d++) {
        len = strlen(out);
        snprintf(out + len, size - len, "%s%u", d ? "," : "", s[d]);
    }
    len = strlen(out);
    snprintf(out + len, size - len, ")");
}

/* The vendor-like fixed-width perf table (RKNN_QUERY_PERF_DETAIL). */
static void build_perf(fk_ctx* c) {
    const fk_model* m = c->m;
    size_t cap = 4096 + (size_t)(m->n_nodes + m->n_in + m->n_out) * 512, len = 0;
    char* t = (char*)malloc(cap);
    double total_us = 0, total_kb = 0;
    int k, row = 0;
    const char* rule =
        "---------------------------------------------------------------------------------------------------------------"
        "---------------------------------------------";
    if (!t) return;
#define PERF(...) (len += (size_t)snprintf(t + len, cap - len, __VA_ARGS__))
    PERF("%s\n", rule);
    PERF("                                         Operator Time Consuming Ranking Table (fake librknnrt)\n");
    PERF("%s\n", rule);
    PERF("%-4s %-16s %-8s %-6s %-34s %-20s %-24s %-10s %-12s %-20s %-10s %s\n", "ID", "OpType", "DataType", "Target",
         "InputShape", "OutputShape", "Cycles(DDR/NPU/Total)", "Time(us)", "MacUsage(%)", "WorkLoad(0/1/2)", "RW(KB)",
         "FullName");
    PERF("%s\n", rule);
    for (k = 0; k < m->n_in; k++) {
        char s[96], w[48];
        double kb = (double)(fk_elems(m->in[k].n_dims, c->cur[k]) * fk_type_size(m->in[k].dtype)) / 1024.0;
        shape_text(c->cur[k], m->in[k].n_dims, s, sizeof(s));
        workload(c, "input", 0, w, sizeof(w));
        PERF("%-4d %-16s %-8s %-6s %-34s %-20s %-24s %-10d %-12s %-20s %-10.2f %s\n", ++row, "InputOperator",
             type_name(m->in[k].dtype), "CPU", "\\", s, "0/0/0", 0, "\\", w, kb, m->in[k].name);
        total_kb += kb;
    }
    for (k = 0; k < m->n_nodes; k++) {
        const fk_node* n = &m->nodes[k];
        int custom = c->ops[k] && !c->ops[k]->skip;
        char ins[256] = "", s[96], out[96], w[48], full[300];
        uint32_t shp[RKNN_MAX_DIMS], nd;
        double kb = 0, us = (double)c->node_ns[k] / 1000.0;
        int j;
        for (j = 0; j < n->n_in; j++) {
            size_t l = strlen(ins);
            size_t e = cur_elems(c, n->in[j], shp, &nd);
            shape_text(shp, nd, s, sizeof(s));
            snprintf(ins + l, sizeof(ins) - l, "%s%s", j ? "," : "", s);
            kb += (double)(e * fk_type_size(m->in[0].dtype)) / 1024.0;
        }
        kb += (double)(cur_elems(c, n->out, shp, &nd) * fk_type_size(m->in[0].dtype)) / 1024.0;
        shape_text(shp, nd, out, sizeof(out));
        workload(c, n->op, custom || !fk_is_builtin_op(n->op), w, sizeof(w));
        snprintf(full, sizeof(full), "%s:%s", n->op, n->name);
        PERF("%-4d %-16s %-8s %-6s %-34s %-20s %-24s %-10.0f %-12s %-20s %-10.2f %s\n", ++row, n->op,
             type_name(m->in[0].dtype), custom ? "CPU" : "NPU", ins, out, "0/0/0", us, "0.00", w, kb, full);
        total_us += us;
        total_kb += kb;
    }
    for (k = 0; k < m->n_out; k++) {
        char s[96], w[48];
        uint32_t shp[RKNN_MAX_DIMS], nd;
        double kb = (double)(cur_elems(c, m->out_tensor[k], shp, &nd) * fk_type_size(m->out[k].dtype)) / 1024.0;
        shape_text(shp, nd, s, sizeof(s));
        workload(c, "output", 0, w, sizeof(w));
        PERF("%-4d %-16s %-8s %-6s %-34s %-20s %-24s %-10d %-12s %-20s %-10.2f %s\n", ++row, "OutputOperator",
             type_name(m->out[k].dtype), "CPU", s, "\\", "0/0/0", 0, "\\", w, kb, m->out[k].name);
        total_kb += kb;
    }
    PERF("%s\n", rule);
    PERF("Total Operator Elapsed Per Frame Time(us): %.0f\n", total_us);
    PERF("Total Memory Read/Write Per Frame (KB): %.2f\n", total_kb);
    PERF("%s\n", rule);
#undef PERF
    free(c->perf_text);
    c->perf_text = t;
}

static int run_node(fk_ctx* c, int k) {
    const fk_node* n = &c->m->nodes[k];
    fk_opbind* b = c->ops[k];
    size_t len = cur_elems(c, n->out, NULL, NULL), i;
    if (b && !b->skip) {
        rknn_custom_op_tensor ins[2], outs[1];
        int j, ret;
        for (j = 0; j < n->n_in; j++) fill_custom_tensor(c, n->in[j], (uint32_t)j, &ins[j]);
        fill_custom_tensor(c, n->out, 0, &outs[0]);
        if (b->op.prepare) {
            ret = b->op.prepare(&b->octx, ins, (uint32_t)n->n_in, outs, 1);
            if (ret != 0) {
                say('E', "custom op %s (%s) prepare failed: %d", n->op, n->name, ret);
                return RKNN_ERR_FAIL;
            }
        }
        ret = b->op.compute(&b->octx, ins, (uint32_t)n->n_in, outs, 1);
        if (ret != 0) {
            say('E', "custom op %s (%s) compute failed: %d", n->op, n->name, ret);
            return RKNN_ERR_FAIL;
        }
        return RKNN_SUCC;
    }
    if (!fk_is_builtin_op(n->op)) {
        say('E', "op type %s of node %s is not supported: register it with rknn_register_custom_ops", n->op, n->name);
        return RKNN_ERR_MODEL_INVALID;
    }
    {
        const float* a = c->tval[n->in[0]];
        const float* bv = n->n_in > 1 ? c->tval[n->in[1]] : NULL;
        size_t bn = n->n_in > 1 ? cur_elems(c, n->in[1], NULL, NULL) : 1;
        float* o = c->tval[n->out];
        for (i = 0; i < len; i++) {
            float y = bv ? bv[bn == 1 ? 0 : i] : n->cval;
            o[i] = fk_apply(n->op, a[i], y);
        }
    }
    return RKNN_SUCC;
}

/* Copies the bytes of a memory between its CPU view and its simulated device copy. */
static void mem_copy(fk_mem* mem, int to_device) {
    if (!mem->shadow) return;
    if (to_device) memcpy(mem->shadow, mem->pub.virt_addr, mem->pub.size);
    else memcpy(mem->pub.virt_addr, mem->shadow, mem->pub.size);
}

/* The device-side view of a memory (what the NPU reads and writes). */
static uint8_t* mem_device(fk_mem* mem) {
    return (uint8_t*)(mem->shadow ? mem->shadow : mem->pub.virt_addr) + mem->pub.offset;
}

static int do_run(fk_ctx* c, rknn_run_extend* extend) {
    const fk_model* m = c->m;
    int i, k, ret, slot;
    int64_t t0 = now_ns();
    if (c->info_only) return RKNN_ERR_CTX_INVALID;
    if (!c->shapes_set) {
        say('E', "rknn_run, dynamic shape model: call rknn_set_input_shapes before the first run");
        return RKNN_ERR_INPUT_INVALID;
    }
    if ((c->flags & (RKNN_FLAG_MEM_ALLOC_OUTSIDE | RKNN_FLAG_INTERNAL_ALLOC_OUTSIDE)) && !find_mem_id(c->internal_mem)) {
        say('E', "rknn_run, internal memory is allocated outside: call rknn_set_internal_mem first");
        return RKNN_ERR_FAIL;
    }
    if ((c->flags & RKNN_FLAG_MEM_ALLOC_OUTSIDE) && weight_bytes(c->m) > 0 && !find_mem_id(c->weight_mem)) {
        say('E', "rknn_run, weight memory is allocated outside: call rknn_set_weight_mem first");
        return RKNN_ERR_FAIL;
    }
    if (alloc_tensors(c) != 0) return RKNN_ERR_MALLOC_FAIL;
    for (i = 0; i < m->n_in; i++) {
        fk_binding* b = &c->in_bind[i];
        size_t n = fk_elems(m->in[i].n_dims, c->cur[i]);
        if (b->bound) {
            fk_mem* mem = find_mem_id(b->mem_id);
            if (!mem) {
                say('E', "rknn_run, the memory bound to input %d was destroyed", i);
                return RKNN_ERR_INPUT_INVALID;
            }
            if (memcmp(b->lay.shape, c->cur[i], sizeof(b->lay.shape)) != 0) {
                say('E', "rknn_run, input %d: shape changed since rknn_set_io_mem; set it again", i);
                return RKNN_ERR_INPUT_INVALID;
            }
            if (!(c->flags & RKNN_FLAG_DISABLE_FLUSH_INPUT_MEM_CACHE)) mem_copy(mem, 1);
            convert_input(c, i, mem_device(mem), &b->lay, b->pass, c->tval[i]);
        } else if (c->in_ready[i]) {
            memcpy(c->tval[i], c->in_val[i], n * sizeof(float));
        } else {
            say('E', "rknn_run, input %d (%s) was never set (rknn_inputs_set or rknn_set_io_mem)", i, m->in[i].name);
            return RKNN_ERR_INPUT_INVALID;
        }
    }
    for (k = 0; k < m->n_nodes; k++) {
        int64_t s = now_ns();
        ret = run_node(c, k);
        c->node_ns[k] = now_ns() - s;
        if (ret != RKNN_SUCC) return ret;
    }
    slot = c->frames == 0 ? 0 : 1 - c->latest;
    for (i = 0; i < m->n_out; i++) {
        size_t n = cur_elems(c, m->out_tensor[i], NULL, NULL), j;
        free(c->res[slot][i]);
        c->res[slot][i] = (float*)malloc(n * sizeof(float) + 1);
        if (!c->res[slot][i]) return RKNN_ERR_MALLOC_FAIL;
        for (j = 0; j < n; j++) c->res[slot][i][j] = fk_round_to(&m->out[i], c->tval[m->out_tensor[i]][j]);
    }
    c->frames++;
    c->latest = slot;
    c->res_valid[slot] = 1;
    c->res_frame[slot] = c->frames;
    for (i = 0; i < m->n_out; i++) {
        fk_binding* b = &c->out_bind[i];
        fk_mem* mem;
        if (!b->bound) continue;
        mem = find_mem_id(b->mem_id);
        if (!mem) {
            say('E', "rknn_run, the memory bound to output %d was destroyed", i);
            return RKNN_ERR_OUTPUT_INVALID;
        }
        fk_tensor_shape(m, c->cur, m->out_tensor[i], b->lay.shape);
        convert_output(&m->out[i], c->res[slot][i], &b->lay, mem_device(mem));
        if (!(c->flags & RKNN_FLAG_DISABLE_FLUSH_OUTPUT_MEM_CACHE)) mem_copy(mem, 0);
    }
    c->run_us = (now_ns() - t0) / 1000;
    if (c->flags & RKNN_FLAG_COLLECT_PERF_MASK) build_perf(c);
    if (extend) extend->frame_id = c->frames;
    return RKNN_SUCC;
}

FK_EXPORT int rknn_run(rknn_context context, rknn_run_extend* extend) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_run(c, extend);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_run ctx=%llu extend=%d -> %d", (unsigned long long)context, extend != NULL, ret);
    return ret;
}

FK_EXPORT int rknn_wait(rknn_context context, rknn_run_extend* extend) {
    (void)extend;
    say('E', "rknn_wait is not supported on this platform");
    log_line("rknn_wait ctx=%llu -> %d", (unsigned long long)context, RKNN_ERR_FAIL);
    return RKNN_ERR_FAIL;
}

static int do_outputs_get(fk_ctx* c, uint32_t n, rknn_output* outputs, rknn_output_extend* extend) {
    const fk_model* m = c->m;
    int async = (c->flags & RKNN_FLAG_ASYNC_MASK) != 0;
    int slot = c->latest;
    uint64_t frame;
    fk_layout lay[FK_MAX_IO];
    uint32_t k;
    if (c->info_only) return RKNN_ERR_CTX_INVALID;
    if (!outputs || n == 0 || n > (uint32_t)m->n_out) {
        say('E', "rknn_outputs_get, n_outputs = %u, expect 1..%d", n, m->n_out);
        return RKNN_ERR_PARAM_INVALID;
    }
    if (c->frames == 0) {
        say('E', "rknn_outputs_get, no rknn_run yet");
        return RKNN_ERR_OUTPUT_INVALID;
    }
    if (async && c->frames > 1) slot = 1 - c->latest; /* the previous frame; the first run gives its own */
    frame = slot < 0 ? 0 : c->res_frame[slot];
    for (k = 0; k < n; k++) {
        rknn_output* o = &outputs[k];
        int i = (int)o->index;
        if (o->index >= (uint32_t)m->n_out) {
            say('E', "rknn_outputs_get, output index %u out of range [0, %d)", o->index, m->n_out);
            return RKNN_ERR_PARAM_INVALID;
        }
        memset(&lay[k], 0, sizeof(lay[k]));
        lay[k].type = o->want_float ? RKNN_TENSOR_FLOAT32 : m->out[i].dtype;
        lay[k].fmt = RKNN_TENSOR_NCHW;
        lay[k].n_dims = fk_tensor_shape(m, c->cur, m->out_tensor[i], lay[k].shape);
        if (o->is_prealloc && (!o->buf || o->size < fk_layout_bytes(&lay[k]))) {
            say('E', "rknn_outputs_get, output[%u] preallocated buffer of %u bytes, expect %zu", o->index, o->size,
                fk_layout_bytes(&lay[k]));
            return RKNN_ERR_PARAM_INVALID;
        }
    }
    for (k = 0; k < n; k++) {
        rknn_output* o = &outputs[k];
        int i = (int)o->index;
        size_t bytes = fk_layout_bytes(&lay[k]);
        if (!o->is_prealloc) {
            void** list = (void**)realloc(c->out_bufs, sizeof(void*) * (size_t)(c->n_out_bufs + 1));
            if (!list) return RKNN_ERR_MALLOC_FAIL;
            c->out_bufs = list;
            o->buf = calloc(bytes ? bytes : 1, 1);
            if (!o->buf) return RKNN_ERR_MALLOC_FAIL;
            c->out_bufs[c->n_out_bufs++] = o->buf;
            pthread_mutex_lock(&g_lock);
            g_live_outputs++;
            pthread_mutex_unlock(&g_lock);
        }
        o->size = (uint32_t)bytes;
        if (slot < 0) memset(o->buf, 0, bytes); /* async mode, first frame: no previous outputs */
        else convert_output(&m->out[i], c->res[slot][i], &lay[k], o->buf);
    }
    if (extend) extend->frame_id = frame;
    return RKNN_SUCC;
}

FK_EXPORT int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[],
                               rknn_output_extend* extend) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    char args[256] = "";
    uint32_t k;
    if (outputs)
        for (k = 0; k < n_outputs && k < 4; k++) {
            size_t len = strlen(args);
            snprintf(args + len, sizeof(args) - len, " out%u=(index=%u,want_float=%u,is_prealloc=%u)", k,
                     outputs[k].index, outputs[k].want_float, outputs[k].is_prealloc);
        }
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_outputs_get(c, n_outputs, outputs, extend);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_outputs_get ctx=%llu n=%u%s -> %d", (unsigned long long)context, n_outputs, args, ret);
    return ret;
}

static int do_outputs_release(fk_ctx* c, uint32_t n, rknn_output* outputs) {
    uint32_t k;
    int j;
    if (!outputs) return RKNN_ERR_PARAM_INVALID;
    for (k = 0; k < n; k++) {
        rknn_output* o = &outputs[k];
        if (o->is_prealloc || !o->buf) continue;
        for (j = 0; j < c->n_out_bufs; j++)
            if (c->out_bufs[j] == o->buf) break;
        if (j == c->n_out_bufs) {
            say('E', "rknn_outputs_release, output[%u].buf was not returned by rknn_outputs_get (released twice?)", k);
            return RKNN_ERR_PARAM_INVALID;
        }
        free(o->buf);
        c->out_bufs[j] = c->out_bufs[--c->n_out_bufs];
        o->buf = NULL;
        pthread_mutex_lock(&g_lock);
        g_live_outputs--;
        pthread_mutex_unlock(&g_lock);
    }
    return RKNN_SUCC;
}

FK_EXPORT int rknn_outputs_release(rknn_context context, uint32_t n_outputs, rknn_output outputs[]) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_outputs_release(c, n_outputs, outputs);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_outputs_release ctx=%llu n=%u -> %d", (unsigned long long)context, n_outputs, ret);
    return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* Cores, shapes                                                                               */

#ifndef FAKE_OLD_RUNTIME
static int do_core_mask(fk_ctx* c, int mask) {
    int cores = fk_cores(c->platform);
    int ok;
    if (cores == 1) {
        say('E', "rknn_set_core_mask: not supported on %s (single NPU core)", c->platform);
        return RKNN_ERR_FAIL;
    }
    if (cores == 3)
        ok = mask == RKNN_NPU_CORE_AUTO || mask == RKNN_NPU_CORE_0 || mask == RKNN_NPU_CORE_1 ||
             mask == RKNN_NPU_CORE_2 || mask == RKNN_NPU_CORE_0_1 || mask == RKNN_NPU_CORE_0_1_2 ||
             mask == RKNN_NPU_CORE_ALL;
    else
        ok = mask == RKNN_NPU_CORE_AUTO || mask == RKNN_NPU_CORE_0 || mask == RKNN_NPU_CORE_1 ||
             mask == RKNN_NPU_CORE_0_1 || mask == RKNN_NPU_CORE_ALL;
    if (!ok) {
        say('E', "rknn_set_core_mask: invalid core mask 0x%x for %s (%d cores)", mask, c->platform, cores);
        return RKNN_ERR_PARAM_INVALID;
    }
    c->core_mask = mask;
    return RKNN_SUCC;
}

FK_EXPORT int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_core_mask(c, (int)core_mask);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_set_core_mask ctx=%llu mask=0x%x -> %d", (unsigned long long)context, (unsigned)core_mask, ret);
    return ret;
}
#endif

FK_EXPORT int rknn_set_batch_core_num(rknn_context context, int core_num) {
    fk_ctx* c = lock_ctx(context);
    int ret = RKNN_SUCC;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        int cores = fk_cores(c->platform);
        if (cores == 1) {
            say('E', "rknn_set_batch_core_num: not supported on %s (single NPU core)", c->platform);
            ret = RKNN_ERR_FAIL;
        } else if (core_num < 1 || core_num > cores) {
            say('E', "rknn_set_batch_core_num: core_num %d out of range [1, %d]", core_num, cores);
            ret = RKNN_ERR_PARAM_INVALID;
        } else {
            c->batch_core_num = core_num;
        }
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_set_batch_core_num ctx=%llu core_num=%d -> %d", (unsigned long long)context, core_num, ret);
    return ret;
}

#ifndef FAKE_OLD_RUNTIME
static int do_set_shapes(fk_ctx* c, uint32_t n, rknn_tensor_attr* attrs) {
    const fk_model* m = c->m;
    uint32_t want[FK_MAX_IO][RKNN_MAX_DIMS];
    int seen[FK_MAX_IO], s, i;
    uint32_t k;
    if (!attrs || n != (uint32_t)m->n_in) {
        say('E', "rknn_set_input_shapes, n_inputs = %u, expect %d", n, m->n_in);
        return RKNN_ERR_PARAM_INVALID;
    }
    memset(want, 0, sizeof(want));
    memset(seen, 0, sizeof(seen));
    for (k = 0; k < n; k++) {
        const rknn_tensor_attr* a = &attrs[k];
        const fk_io* io;
        if (a->index >= n || seen[a->index]) {
            say('E', "rknn_set_input_shapes, input index %u invalid or repeated", a->index);
            return RKNN_ERR_PARAM_INVALID;
        }
        seen[a->index] = 1;
        io = &m->in[a->index];
        if (a->n_dims != io->n_dims) {
            say('E', "rknn_set_input_shapes, input %u: n_dims %u, expect %u", a->index, a->n_dims, io->n_dims);
            return RKNN_ERR_PARAM_INVALID;
        }
        if (a->n_dims == 4 && a->fmt == RKNN_TENSOR_NHWC) {
            want[a->index][0] = a->dims[0];
            want[a->index][1] = a->dims[3];
            want[a->index][2] = a->dims[1];
            want[a->index][3] = a->dims[2];
        } else if (a->n_dims == 4 && a->fmt == RKNN_TENSOR_NC1HWC2) {
            say('E', "rknn_set_input_shapes, input %u: fmt must be NHWC or NCHW", a->index);
            return RKNN_ERR_PARAM_INVALID;
        } else {
            memcpy(want[a->index], a->dims, sizeof(uint32_t) * a->n_dims);
        }
    }
    for (s = 0; s < (m->n_sets ? m->n_sets : 1); s++) {
        int match = 1;
        for (i = 0; i < m->n_in; i++) {
            const uint32_t* shape = m->n_sets ? m->sets[s][i] : m->in[i].shape;
            match &= memcmp(shape, want[i], sizeof(uint32_t) * m->in[i].n_dims) == 0;
        }
        if (match) break;
    }
    if (s == (m->n_sets ? m->n_sets : 1)) {
        say('E', "rknn_set_input_shapes, the shapes are not among the model's %s", m->n_sets ? "dynamic shapes" : "(static) shape");
        return RKNN_ERR_PARAM_INVALID;
    }
    for (i = 0; i < m->n_in; i++) memcpy(c->cur[i], want[i], sizeof(c->cur[i]));
    c->shapes_set = 1;
    if (alloc_inputs(c) != 0 || alloc_tensors(c) != 0) return RKNN_ERR_MALLOC_FAIL;
    return RKNN_SUCC;
}

FK_EXPORT int rknn_set_input_shapes(rknn_context context, uint32_t n_inputs, rknn_tensor_attr attr[]) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    char args[256] = "";
    uint32_t k, d;
    if (attr)
        for (k = 0; k < n_inputs && k < 4; k++) {
            size_t len = strlen(args);
            snprintf(args + len, sizeof(args) - len, " in%u=(index=%u,fmt=%d,dims=", k, attr[k].index, (int)attr[k].fmt);
            for (d = 0; d < attr[k].n_dims && d < RKNN_MAX_DIMS; d++) {
                len = strlen(args);
                snprintf(args + len, sizeof(args) - len, "%s%u", d ? "x" : "", attr[k].dims[d]);
            }
            len = strlen(args);
            snprintf(args + len, sizeof(args) - len, ")");
        }
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_set_shapes(c, n_inputs, attr);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_set_input_shapes ctx=%llu n=%u%s -> %d", (unsigned long long)context, n_inputs, args, ret);
    return ret;
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                      */

static rknn_tensor_mem* new_mem(void* virt, uint64_t phys, int32_t fd, int32_t offset, uint32_t size,
                                rknn_tensor_mem_flags flags, int cacheable) {
    fk_mem* m = (fk_mem*)calloc(1, sizeof(fk_mem));
    if (!m) return NULL;
    if (!virt) {
        m->own = calloc(size, 1);
        if (!m->own) {
            free(m);
            return NULL;
        }
        virt = m->own;
    }
    if (cacheable) {
        m->shadow = calloc(size, 1);
        if (!m->shadow) {
            free(m->own);
            free(m);
            return NULL;
        }
        memcpy(m->shadow, virt, size);
    }
    m->pub.virt_addr = virt;
    m->pub.fd = fd;
    m->pub.offset = offset;
    m->pub.size = size;
    m->pub.flags = (uint32_t)flags;
    m->pub.priv_data = m;
    pthread_mutex_lock(&g_lock);
    m->id = g_next_mem++;
    m->pub.phys_addr = phys ? phys : 0x10000000ull + m->id * 0x100000ull;
    m->next = g_mems;
    g_mems = m;
    pthread_mutex_unlock(&g_lock);
    return &m->pub;
}

static int ctx_ok(rknn_context context) {
    fk_ctx* c = lock_ctx(context);
    if (!c) return 0;
    pthread_mutex_unlock(&c->mu);
    return 1;
}

FK_EXPORT rknn_tensor_mem* rknn_create_mem(rknn_context ctx, uint32_t size) {
    rknn_tensor_mem* m = NULL;
    if (!ctx_ok(ctx)) say('E', "rknn_create_mem, invalid context");
    else if (size == 0) say('E', "rknn_create_mem, size is 0");
    else m = new_mem(NULL, 0, -1, 0, size, RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE, 1);
    log_line("rknn_create_mem ctx=%llu size=%u -> %s", (unsigned long long)ctx, size, m ? "mem" : "NULL");
    return m;
}

#ifndef FAKE_OLD_RUNTIME
FK_EXPORT rknn_tensor_mem* rknn_create_mem2(rknn_context ctx, uint64_t size, uint64_t alloc_flags) {
    rknn_tensor_mem* m = NULL;
    int no_ctx = (alloc_flags & RKNN_MEM_FLAG_ALLOC_NO_CONTEXT) != 0;
    int cacheable = (alloc_flags & RKNN_FLAG_MEMORY_CACHEABLE) != 0, non_cacheable = (alloc_flags & RKNN_FLAG_MEMORY_NON_CACHEABLE) != 0;
    if (!no_ctx && !ctx_ok(ctx)) say('E', "rknn_create_mem2, invalid context (use RKNN_MEM_FLAG_ALLOC_NO_CONTEXT without one)");
    else if (size == 0 || size > 0xFFFFFFFFull) say('E', "rknn_create_mem2, invalid size %llu", (unsigned long long)size);
    else if (cacheable && non_cacheable) say('E', "rknn_create_mem2, CACHEABLE and NON_CACHEABLE together");
    else m = new_mem(NULL, 0, -1, 0, (uint32_t)size, RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE, !non_cacheable);
    log_line("rknn_create_mem2 ctx=%llu size=%llu flags=0x%llx -> %s", (unsigned long long)ctx, (unsigned long long)size,
             (unsigned long long)alloc_flags, m ? "mem" : "NULL");
    return m;
}
#endif

FK_EXPORT rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context ctx, int32_t fd, void* virt_addr, uint32_t size,
                                                   int32_t offset) {
    rknn_tensor_mem* m = NULL;
    if (!ctx_ok(ctx)) say('E', "rknn_create_mem_from_fd, invalid context");
    else if (!virt_addr || size == 0 || offset < 0 || (uint32_t)offset >= size)
        say('E', "rknn_create_mem_from_fd, the fake needs a mapped virt_addr, size > 0 and 0 <= offset < size");
    else m = new_mem(virt_addr, 0, fd, offset, size, RKNN_TENSOR_MEMORY_FLAGS_FROM_FD, 1);
    log_line("rknn_create_mem_from_fd ctx=%llu fd=%d size=%u offset=%d -> %s", (unsigned long long)ctx, fd, size,
             offset, m ? "mem" : "NULL");
    return m;
}

FK_EXPORT rknn_tensor_mem* rknn_create_mem_from_phys(rknn_context ctx, uint64_t phys_addr, void* virt_addr,
                                                     uint32_t size) {
    rknn_tensor_mem* m = NULL;
    if (!ctx_ok(ctx)) say('E', "rknn_create_mem_from_phys, invalid context");
    else if (!virt_addr || size == 0 || phys_addr == 0)
        say('E', "rknn_create_mem_from_phys, the fake needs phys_addr, a mapped virt_addr and size > 0");
    else m = new_mem(virt_addr, phys_addr, -1, 0, size, RKNN_TENSOR_MEMORY_FLAGS_FROM_PHYS, 1);
    log_line("rknn_create_mem_from_phys ctx=%llu phys=0x%llx size=%u -> %s", (unsigned long long)ctx,
             (unsigned long long)phys_addr, size, m ? "mem" : "NULL");
    return m;
}

FK_EXPORT rknn_tensor_mem* rknn_create_mem_from_mb_blk(rknn_context ctx, void* mb_blk, int32_t offset) {
    (void)mb_blk;
    say('E', "rknn_create_mem_from_mb_blk is not supported on this platform");
    log_line("rknn_create_mem_from_mb_blk ctx=%llu offset=%d -> NULL", (unsigned long long)ctx, offset);
    return NULL;
}

FK_EXPORT int rknn_destroy_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    fk_mem** p;
    fk_mem* m = NULL;
    int ret = RKNN_ERR_PARAM_INVALID;
    pthread_mutex_lock(&g_lock);
    for (p = &g_mems; *p; p = &(*p)->next)
        if (&(*p)->pub == mem) {
            m = *p;
            *p = m->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    if (m) {
        free(m->own);
        free(m->shadow);
        free(m);
        ret = RKNN_SUCC;
    } else {
        say('E', "rknn_destroy_mem, unknown memory (destroyed twice?)");
    }
    log_line("rknn_destroy_mem ctx=%llu -> %d", (unsigned long long)ctx, ret);
    return ret;
}

static int find_io(const fk_model* m, const rknn_tensor_attr* a, int* is_input) {
    int i;
    for (i = 0; i < m->n_in; i++)
        if (strcmp(m->in[i].name, a->name) == 0 && a->index == (uint32_t)i) {
            *is_input = 1;
            return i;
        }
    for (i = 0; i < m->n_out; i++)
        if (strcmp(m->out[i].name, a->name) == 0 && a->index == (uint32_t)i) {
            *is_input = 0;
            return i;
        }
    return -1;
}

static int do_set_io_mem(fk_ctx* c, rknn_tensor_mem* pub, rknn_tensor_attr* a) {
    const fk_model* m = c->m;
    fk_mem* mem = pub ? find_mem(pub) : NULL;
    fk_layout lay;
    char why[300];
    int is_in = 0, i;
    size_t need;
    if (!mem || !a) {
        say('E', "rknn_set_io_mem, %s", !a ? "attr is NULL" : "unknown tensor memory");
        return RKNN_ERR_PARAM_INVALID;
    }
    i = find_io(m, a, &is_in);
    if (i < 0) {
        say('E', "rknn_set_io_mem, attr (index %u, name '%s') names no input or output", a->index, a->name);
        return RKNN_ERR_PARAM_INVALID;
    }
    if (is_in) {
        if (input_layout(c, i, a->type, a->fmt, a->pass_through, a->fmt == RKNN_TENSOR_NHWC ? a->w_stride : 0,
                         a->fmt == RKNN_TENSOR_NHWC ? a->h_stride : 0, 1, &lay, why, sizeof(why)) != 0) {
            say('E', "rknn_set_io_mem, %s", why);
            return RKNN_ERR_PARAM_INVALID;
        }
    } else {
        const fk_io* io = &m->out[i];
        memset(&lay, 0, sizeof(lay));
        lay.type = a->type;
        lay.fmt = io->n_dims == 4 ? a->fmt : RKNN_TENSOR_UNDEFINED;
        lay.n_dims = fk_tensor_shape(m, c->cur, m->out_tensor[i], lay.shape);
        if (a->type != RKNN_TENSOR_FLOAT32 && a->type != io->dtype) {
            say('E', "rknn_set_io_mem, output %d: type %s not supported (FLOAT32 or the model's %s)", i,
                type_name(a->type), type_name(io->dtype));
            return RKNN_ERR_PARAM_INVALID;
        }
        if ((int)lay.fmt < 0 || lay.fmt >= RKNN_TENSOR_FORMAT_MAX ||
            (lay.fmt == RKNN_TENSOR_NC1HWC2 && a->type == RKNN_TENSOR_FLOAT32)) {
            say('E', "rknn_set_io_mem, output %d: fmt %s not supported for %s", i, fmt_name(a->fmt), type_name(a->type));
            return RKNN_ERR_PARAM_INVALID;
        }
        if (lay.n_dims == 4) {
            lay.w_stride = a->fmt == RKNN_TENSOR_NHWC && a->w_stride >= lay.shape[3] ? a->w_stride : lay.shape[3];
            lay.h_stride = lay.shape[2];
            lay.c2 = fk_c2(c->platform, io->dtype);
        }
    }
    need = fk_layout_bytes(&lay);
    if ((size_t)mem->pub.offset + need > mem->pub.size) {
        say('E', "rknn_set_io_mem, %s %d needs %zu bytes, the memory has %u after offset %d", is_in ? "input" : "output",
            i, need, mem->pub.size - (uint32_t)mem->pub.offset, mem->pub.offset);
        return RKNN_ERR_PARAM_INVALID;
    }
    {
        fk_binding* b = is_in ? &c->in_bind[i] : &c->out_bind[i];
        b->bound = 1;
        b->mem_id = mem->id;
        b->lay = lay;
        b->pass = a->pass_through;
    }
    return RKNN_SUCC;
}

FK_EXPORT int rknn_set_io_mem(rknn_context context, rknn_tensor_mem* mem, rknn_tensor_attr* attr) {
    fk_ctx* c = lock_ctx(context);
    int ret;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_set_io_mem(c, mem, attr);
        pthread_mutex_unlock(&c->mu);
    }
    if (attr)
        log_line("rknn_set_io_mem ctx=%llu index=%u name=%s type=%d fmt=%d pass=%u w_stride=%u h_stride=%u size=%u -> %d",
                 (unsigned long long)context, attr->index, attr->name, (int)attr->type, (int)attr->fmt,
                 attr->pass_through, attr->w_stride, attr->h_stride, mem ? mem->size : 0, ret);
    else
        log_line("rknn_set_io_mem ctx=%llu attr=NULL -> %d", (unsigned long long)context, ret);
    return ret;
}

static int set_model_mem(rknn_context context, rknn_tensor_mem* pub, int internal) {
    fk_ctx* c = lock_ctx(context);
    fk_mem* mem;
    int ret = RKNN_SUCC;
    if (!c) return RKNN_ERR_CTX_INVALID;
    mem = pub ? find_mem(pub) : NULL;
    if (!mem) {
        say('E', "rknn_set_%s_mem, unknown tensor memory", internal ? "internal" : "weight");
        ret = RKNN_ERR_PARAM_INVALID;
    } else if (internal) {
        rknn_mem_size ms;
        mem_size(c, &ms);
        if (mem->pub.size < ms.total_internal_size) {
            say('E', "rknn_set_internal_mem, size %u < total_internal_size %u", mem->pub.size, ms.total_internal_size);
            ret = RKNN_ERR_PARAM_INVALID;
        } else {
            c->internal_mem = mem->id;
        }
    } else if (mem->pub.size - (uint32_t)mem->pub.offset < weight_bytes(c->m)) {
        say('E', "rknn_set_weight_mem, size %u < total_weight_size %zu", mem->pub.size, weight_bytes(c->m));
        ret = RKNN_ERR_PARAM_INVALID;
    } else {
        size_t off = 0;
        int k;
        for (k = 0; k < c->m->n_nodes; k++) /* the runtime puts the weights there */
            if (c->m->nodes[k].has_const && !c->m->nodes[k].shared) {
                memcpy((uint8_t*)mem->pub.virt_addr + mem->pub.offset + off, &c->m->nodes[k].cval, sizeof(float));
                off += sizeof(float);
            }
        c->weight_mem = mem->id;
    }
    pthread_mutex_unlock(&c->mu);
    return ret;
}

FK_EXPORT int rknn_set_weight_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    int ret = set_model_mem(ctx, mem, 0);
    log_line("rknn_set_weight_mem ctx=%llu -> %d", (unsigned long long)ctx, ret);
    return ret;
}

FK_EXPORT int rknn_set_internal_mem(rknn_context ctx, rknn_tensor_mem* mem) {
    int ret = set_model_mem(ctx, mem, 1);
    log_line("rknn_set_internal_mem ctx=%llu -> %d", (unsigned long long)ctx, ret);
    return ret;
}

FK_EXPORT int rknn_mem_sync(rknn_context context, rknn_tensor_mem* mem, rknn_mem_sync_mode mode) {
    fk_mem* m = NULL;
    int ret = RKNN_SUCC;
    if (!ctx_ok(context)) {
        ret = RKNN_ERR_CTX_INVALID;
    } else if (!mem || !(m = find_mem(mem))) {
        say('E', "rknn_mem_sync, unknown tensor memory");
        ret = RKNN_ERR_PARAM_INVALID;
    } else if (mode != RKNN_MEMORY_SYNC_TO_DEVICE && mode != RKNN_MEMORY_SYNC_FROM_DEVICE &&
               mode != RKNN_MEMORY_SYNC_BIDIRECTIONAL) {
        say('E', "rknn_mem_sync, invalid mode %d", (int)mode);
        ret = RKNN_ERR_PARAM_INVALID;
    } else {
        if (mode & RKNN_MEMORY_SYNC_TO_DEVICE) mem_copy(m, 1);
        if (mode & RKNN_MEMORY_SYNC_FROM_DEVICE) mem_copy(m, 0);
    }
    log_line("rknn_mem_sync ctx=%llu mode=%d -> %d", (unsigned long long)context, (int)mode, ret);
    return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* Custom operators                                                                            */

static int do_register(fk_ctx* c, rknn_custom_op* ops, uint32_t n) {
    const fk_model* m = c->m;
    uint32_t k;
    int j;
    if (!ops || n == 0) {
        say('E', "rknn_register_custom_ops, no operators");
        return RKNN_ERR_PARAM_INVALID;
    }
    for (k = 0; k < n; k++) {
        const rknn_custom_op* op = &ops[k];
        if (!op->op_type[0] || !op->compute || op->target != RKNN_TARGET_TYPE_CPU) {
            say('E', "rknn_register_custom_ops, op %u: needs an op_type, a compute callback and target CPU "
                     "(the fake runs CPU operators only)", k);
            return RKNN_ERR_PARAM_INVALID;
        }
        for (j = 0; j < m->n_nodes; j++)
            if (c->ops[j] && strcmp(c->ops[j]->op.op_type, op->op_type) == 0) {
                say('E', "rknn_register_custom_ops, op type %s is already registered", op->op_type);
                return RKNN_ERR_PARAM_INVALID;
            }
    }
    if (alloc_tensors(c) != 0) return RKNN_ERR_MALLOC_FAIL;
    for (k = 0; k < n; k++) {
        const rknn_custom_op* op = &ops[k];
        int found = 0;
        for (j = 0; j < m->n_nodes; j++) {
            const fk_node* node = &m->nodes[j];
            fk_opbind* b;
            if (strncmp(node->op, op->op_type, RKNN_MAX_NAME_LEN) != 0) continue;
            found = 1;
            b = (fk_opbind*)calloc(1, sizeof(fk_opbind));
            if (!b) return RKNN_ERR_MALLOC_FAIL;
            b->ctx = c;
            b->node = j;
            b->op = *op;
            b->octx.target = RKNN_TARGET_TYPE_CPU;
            b->octx.internal_ctx = (rknn_custom_op_interal_context)(uintptr_t)b;
            c->ops[j] = b;
            if (op->init) {
                rknn_custom_op_tensor ins[2], outs[1];
                int i, ret;
                for (i = 0; i < node->n_in; i++) fill_custom_tensor(c, node->in[i], (uint32_t)i, &ins[i]);
                fill_custom_tensor(c, node->out, 0, &outs[0]);
                ret = op->init(&b->octx, ins, (uint32_t)node->n_in, outs, 1);
                if (ret == RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE) {
                    b->skip = 1;
                } else if (ret != 0) {
                    say('E', "rknn_register_custom_ops, init of %s (%s) failed: %d", op->op_type, node->name, ret);
                    free(b);
                    c->ops[j] = NULL;
                    return ret < 0 ? ret : RKNN_ERR_FAIL;
                }
            }
        }
        if (!found) say('W', "rknn_register_custom_ops, op type %s does not occur in the model", op->op_type);
    }
    return RKNN_SUCC;
}

FK_EXPORT int rknn_register_custom_ops(rknn_context ctx, rknn_custom_op* op, uint32_t custom_op_num) {
    fk_ctx* c = lock_ctx(ctx);
    int ret;
    if (!c) {
        ret = RKNN_ERR_CTX_INVALID;
    } else {
        ret = do_register(c, op, custom_op_num);
        pthread_mutex_unlock(&c->mu);
    }
    log_line("rknn_register_custom_ops ctx=%llu n=%u first=%s -> %d", (unsigned long long)ctx, custom_op_num,
             op && custom_op_num ? op[0].op_type : "-", ret);
    return ret;
}

FK_EXPORT void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx, const char* attr_name,
                                          rknn_custom_op_attr* op_attr) {
    const fk_opbind* b;
    const fk_node* node;
    int k;
    if (!op_ctx || !attr_name || !op_attr) return;
    memset(op_attr, 0, sizeof(*op_attr));
    snprintf(op_attr->name, sizeof(op_attr->name), "%s", attr_name);
    b = (const fk_opbind*)(uintptr_t)op_ctx->internal_ctx;
    if (!b) return;
    node = &b->ctx->m->nodes[b->node];
    for (k = 0; k < node->n_attrs; k++) {
        const fk_attr* a = &node->attrs[k];
        if (strcmp(a->name, attr_name) != 0) continue;
        op_attr->dtype = a->dtype;
        op_attr->n_elems = a->n;
        op_attr->data = a->dtype == RKNN_TENSOR_INT64 ? (void*)a->i : (void*)a->f;
        break;
    }
    log_line("rknn_custom_op_get_op_attr name=%s n_elems=%u", attr_name, op_attr->n_elems);
}
