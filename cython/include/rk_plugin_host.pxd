# Cython declarations of the custom-operator host (cython/include/rk_plugin_host.h).

from libc.stdint cimport uint32_t

from rknn_custom_op cimport rknn_custom_op, rknn_custom_op_attr, rknn_custom_op_context

cdef extern from "rk_plugin_host.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct rkl_node_ctx:
        rknn_custom_op_context ctx
        uint32_t n_attrs
        rknn_custom_op_attr* attrs
        pthread_mutex_t call_lock
    int pthread_mutex_init(pthread_mutex_t*, void*) nogil
    int pthread_mutex_destroy(pthread_mutex_t*) nogil
    int pthread_mutex_lock(pthread_mutex_t*) nogil
    int pthread_mutex_unlock(pthread_mutex_t*) nogil
    void rkl_link(rkl_node_ctx*) nogil
    void rkl_unlink(rkl_node_ctx*) nogil
    const char* rkl_export_symbols() nogil
    void* rkl_get_attr_address() nogil
    rknn_custom_op* rkl_call_getter(void*) nogil
    void* dlopen(const char*, int) nogil
    void* dlsym(void*, const char*) nogil
    int dlclose(void*) nogil
    char* dlerror() nogil
    int RTLD_NOW
    int RTLD_LOCAL
