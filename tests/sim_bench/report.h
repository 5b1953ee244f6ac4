// What a bench binary under tools/sim_bench.sh prints besides the simulator's own output: one
// case's work, the bracket around the launches that are timed, and its check against the CPU
// reference. tools/sim_bench.py reads these lines (and the simulator's per-launch statistics
// between the brackets) and owns everything derived from them: floors, shares, projections.
#ifndef SM70OPS_TESTS_SIM_BENCH_REPORT_H_
#define SM70OPS_TESTS_SIM_BENCH_REPORT_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace sm70ops_bench {

// The useful FLOPs and compulsory DRAM bytes of the timed launches, how many times that work the
// whole op is (the projection's scaling; 0: none, a calibration case), and in how many calls the
// whole op runs (prefill chunks: each pays its launches' fixed latency once, which the projection
// does not scale). `whole` names the op the projection is for ("T 8192, E 512, per layer and
// rank").
inline void ReportWork(double flops, double bytes, double scale, int calls, const char *whole) {
  std::printf("sim_bench_work: flops=%.6g bytes=%.6g scale=%.6g calls=%d whole=%s\n", flops, bytes,
              scale, calls, whole);
  std::fflush(stdout);
}

// The simulator reads this variable at every launch: 1 runs the launch functionally (its results,
// no cycles, about 20-50 times faster), 0 in the timing model. Where the bench sets it to 1 for
// the whole process (tools/sim_bench.py), the bracket below turns the timing model on for the
// timed launches only, and the set-up and checks around them run functionally; unset, every
// launch is timed, as the simulator's config says.
constexpr char kFunctionalLaunches[] = "PTX_SIM_MODE_FUNC";

inline void TimeLaunches(bool timed) {
  if (std::getenv(kFunctionalLaunches) != nullptr)
    setenv(kFunctionalLaunches, timed ? "0" : "1", 1);
}

// Brackets the launches that are timed: everything the device runs between the two (and only
// that) is the case's time. Both synchronise, so that the simulator's statistics of earlier work
// are printed before the first and those of the timed launches before the second.
inline void BeginTimed() {
  cudaDeviceSynchronize();
  std::fflush(stdout);
  std::printf("sim_bench_timed: begin\n");
  std::fflush(stdout);
  TimeLaunches(true);
}

inline void EndTimed() {
  cudaDeviceSynchronize();
  TimeLaunches(false);
  std::fflush(stdout);
  std::printf("sim_bench_timed: end\n");
  std::fflush(stdout);
}

// The verdict on the outputs: `rows` sampled rows (or entries) compared with the CPU reference.
inline void ReportCheck(int rows, bool ok, const std::string &detail) {
  std::printf("sim_bench_check: rows=%d ok=%d detail=%s\n", rows, ok ? 1 : 0, detail.c_str());
  std::fflush(stdout);
}

// The rows of one prefill call of the served model (vLLM's chunked prefill, the seed's chunks).
constexpr int kPrefillChunk = 8192;

}  // namespace sm70ops_bench

#endif  // SM70OPS_TESTS_SIM_BENCH_REPORT_H_
