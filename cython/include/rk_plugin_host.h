/* The software backend's side of the custom-operator ABI (cython/src/rk_plugin_host.c), used
 * by rknnlite._native.custom_op_plugin: per-node operator contexts, the one exported symbol
 * rknn_custom_op_get_op_attr that plugins call by name, and the calls into a plugin. */
#ifndef RK_PLUGIN_HOST_H
#define RK_PLUGIN_HOST_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include "rk_api.h"
#include "rknn_custom_op.h"

/* One node's operator context; plugins only ever see &ctx (the first member). */
typedef struct rkl_node_ctx {
    rknn_custom_op_context ctx;
    uint32_t n_attrs;
    rknn_custom_op_attr* attrs;      /* owned, data of each owned too */
    pthread_mutex_t call_lock;       /* one callback at a time per node */
    struct rkl_node_ctx* next;       /* list of live contexts */
} rkl_node_ctx;

/* Adds / removes a context to / from the live list rknn_custom_op_get_op_attr searches. */
RK_API void rkl_link(rkl_node_ctx* c);
RK_API void rkl_unlink(rkl_node_ctx* c);
/* Puts this extension's exported symbols in the process's global scope (re-opens the extension
 * with RTLD_NOLOAD | RTLD_GLOBAL); NULL on success, else an error message. */
RK_API const char* rkl_export_symbols(void);
/* The address of this extension's rknn_custom_op_get_op_attr. */
RK_API void* rkl_get_attr_address(void);
/* Calls a plugin's get_rknn_custom_op at fn_address. */
RK_API rknn_custom_op* rkl_call_getter(void* fn_address);

#endif
