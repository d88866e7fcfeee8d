/* The SIMD level of the CPU running this process, shared by the C files that pick a code path at
 * run time (rk_conv.c, rk_pooling.c). */
#ifndef RK_CPU_H
#define RK_CPU_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RK_X86 1
#else
#define RK_X86 0
#endif
/* aarch64: Advanced SIMD (NEON) is part of the base architecture: no run-time check. */
#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__))
#define RK_NEON 1
#else
#define RK_NEON 0
#endif

/* 0: baseline only; 1: AVX2+FMA (x86-64) or NEON (aarch64); 2: AVX-512F. */
static inline int rk_cpu_level(void) {
#if RK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#elif RK_NEON
    return 1;
#endif
    return 0;
}

#endif
