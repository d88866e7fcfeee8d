/* RK_API marks the functions a C file of cython/src/ offers to the Cython module it is linked
 * into.  They have hidden visibility: each extension module carries its own copy, and none of
 * them is exported from the shared object (only custom_op_plugin exports one symbol by name,
 * see rk_plugin_host.h). */
#ifndef RK_API_H
#define RK_API_H

#if defined(__GNUC__) || defined(__clang__)
#define RK_API __attribute__((visibility("hidden")))
#else
#define RK_API
#endif

#endif
