// Stand-in for CUTLASS 4.2.0.0's cute/util/print_latex.hpp in the simulator build of
// //tests/sim_bench:cutlass_peers (its copts put this directory ahead of @cutlass's include/).
//
// Why: cute/tensor.hpp includes print_latex.hpp, and cutlass/gemm/device/gemm_grouped.h reaches
// cute/tensor.hpp (base_grouped.h -> kernel/gemm_universal.h -> gemm_universal.hpp). Its
// TikzColor_BWx8/TikzColor_TV hold function-local static tables of string pointers, which nvcc
// emits into every module's PTX as `.global .u64 ...color_map[8] = {generic($str), ...}`. The
// simulator's PTX parser rejects `generic(...)` initializers ("Syntax error"), and a module that
// does not parse runs no kernel at all. Smallest reproducer, no CUTLASS needed: a .cu with
//   struct S { __host__ __device__ const char *operator()(int i) const {
//     static const char *m[2] = {"a", "b"}; return m[i % 2]; } };
// and any kernel. The header only prints layouts as LaTeX on the host; no kernel uses it, so
// leaving it out changes no kernel code (any use would fail to compile, not run differently).
#pragma once
