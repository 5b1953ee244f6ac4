// What a bench binary under tools/sim_bench.sh prints besides the simulator's own output: one
// case's work, the bracket around the launches that are timed, and its check against the CPU
// reference. tools/sim_bench.py reads these lines (and the simulator's per-launch statistics
// between the brackets) and owns everything derived from them: floors, shares, projections.
#ifndef SM70OPS_TESTS_SIM_BENCH_REPORT_H_
#define SM70OPS_TESTS_SIM_BENCH_REPORT_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace sm70ops_bench {

// The useful FLOPs and compulsory DRAM bytes of the timed launches, and how many times that work
// the whole op is (the projection's scaling; 0: none, a calibration case). `whole` names the op
// the projection is for ("T 8192, E 512, per layer and rank").
inline void ReportWork(double flops, double bytes, double scale, const char *whole) {
  std::printf("sim_bench_work: flops=%.6g bytes=%.6g scale=%.6g whole=%s\n", flops, bytes, scale,
              whole);
  std::fflush(stdout);
}

// Brackets the launches that are timed: everything the device runs between the two (and only
// that) is the case's time. Both synchronise, so that the simulator's statistics of earlier work
// are printed before the first and those of the timed launches before the second.
inline void BeginTimed() {
  cudaDeviceSynchronize();
  std::fflush(stdout);
  std::printf("sim_bench_timed: begin\n");
  std::fflush(stdout);
}

inline void EndTimed() {
  cudaDeviceSynchronize();
  std::fflush(stdout);
  std::printf("sim_bench_timed: end\n");
  std::fflush(stdout);
}

// The verdict on the outputs: `rows` sampled rows (or entries) compared with the CPU reference.
inline void ReportCheck(int rows, bool ok, const std::string &detail) {
  std::printf("sim_bench_check: rows=%d ok=%d detail=%s\n", rows, ok ? 1 : 0, detail.c_str());
  std::fflush(stdout);
}

}  // namespace sm70ops_bench

#endif  // SM70OPS_TESTS_SIM_BENCH_REPORT_H_
