/* Per-node operator contexts and rknn_custom_op_get_op_attr for the software backend's custom
 * operators (see rk_plugin_host.h and the module doc of custom_op_plugin.pyx). */
#define _GNU_SOURCE  /* RTLD_NEXT, RTLD_NOLOAD, dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include "rk_plugin_host.h"


static pthread_mutex_t rkl_live_lock = PTHREAD_MUTEX_INITIALIZER;
static rkl_node_ctx* rkl_live_head = NULL;

void rkl_link(rkl_node_ctx* c)
{
    pthread_mutex_lock(&rkl_live_lock);
    c->next = rkl_live_head;
    rkl_live_head = c;
    pthread_mutex_unlock(&rkl_live_lock);
}

void rkl_unlink(rkl_node_ctx* c)
{
    rkl_node_ctx** p;
    pthread_mutex_lock(&rkl_live_lock);
    for (p = &rkl_live_head; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&rkl_live_lock);
}

typedef void (*rkl_get_attr_fn)(rknn_custom_op_context*, const char*, rknn_custom_op_attr*);

/* The attribute attr_name of the node running in op_ctx: its dtype, n_elems and a pointer to
 * its values (owned by the runtime, valid until the context is destroyed); n_elems 0, dtype 0
 * and data NULL when the node has no such attribute. */
RKNN_CUSTOM_OP_EXPORT void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx,
                                                      const char* attr_name,
                                                      rknn_custom_op_attr* op_attr)
{
    int known = 0, found = 0;
    uint32_t i;
    rkl_node_ctx* c;
    if (op_attr == NULL)
        return;
    pthread_mutex_lock(&rkl_live_lock);
    for (c = rkl_live_head; c != NULL; c = c->next) {
        if (&c->ctx != op_ctx)
            continue;
        known = 1;
        for (i = 0; attr_name != NULL && i < c->n_attrs; i++) {
            if (strncmp(c->attrs[i].name, attr_name, RKNN_MAX_NAME_LEN) == 0) {
                *op_attr = c->attrs[i];
                found = 1;
                break;
            }
        }
        break;
    }
    pthread_mutex_unlock(&rkl_live_lock);
    if (known) {
        if (!found) {
            memset(op_attr, 0, sizeof(*op_attr));
            if (attr_name != NULL)
                strncpy(op_attr->name, attr_name, RKNN_MAX_NAME_LEN - 1);
        }
        return;
    }
    {
        /* Not one of ours: another runtime's context (librknnrt), if it is loaded. */
        void* next = dlsym(RTLD_NEXT, "rknn_custom_op_get_op_attr");
        if (next != NULL && next != (void*)&rknn_custom_op_get_op_attr) {
            rkl_get_attr_fn fn;
            memcpy(&fn, &next, sizeof(fn));
            fn(op_ctx, attr_name, op_attr);
        } else {
            memset(op_attr, 0, sizeof(*op_attr));
        }
    }
}

/* Put this extension's exported symbols in the global scope (see the module doc). */
const char* rkl_export_symbols(void)
{
    Dl_info info;
    void* self;
    if (!dladdr((void*)&rknn_custom_op_get_op_attr, &info) || info.dli_fname == NULL)
        return "dladdr found no file for rknnlite._native.custom_op_plugin";
    self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    if (self == NULL) {
        const char* e = dlerror();
        return e != NULL ? e : "dlopen(RTLD_NOLOAD | RTLD_GLOBAL) failed";
    }
    /* the reference is kept on purpose: the extension is never unloaded anyway */
    return NULL;
}

void* rkl_get_attr_address(void) { return (void*)&rknn_custom_op_get_op_attr; }

rknn_custom_op* rkl_call_getter(void* fn_address)
{
    get_custom_op_func fn;
    memcpy(&fn, &fn_address, sizeof(fn));
    return fn();
}
