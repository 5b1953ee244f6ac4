// Checks every op's GPU test applies to its runs (ABI rules 8 and the reliability issue): execute
// under global-mode stream capture and graph replay equals eager, concurrent streams from several
// host threads equal a serial run bit for bit, and the caller's current device is left as it was.
//
// A Run owns one op's device inputs and outputs and provides:
//   void Poison(void *stream);                         poison outputs (and workspace) on stream
//   sm70ops_status Execute(const Plugin &, void *stream);  enqueue the op, nothing else
//   std::vector<uint8_t> Bytes() const;                every output, as bytes
#ifndef SM70OPS_TESTS_GPU_ROBUSTNESS_H_
#define SM70OPS_TESTS_GPU_ROBUSTNESS_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_env.h"

namespace sm70ops_gpu {

template <class Run>
std::vector<uint8_t> EagerBytes(const Plugin &plugin, Run &run, cudaStream_t stream) {
  run.Poison(stream);
  EXPECT_EQ(run.Execute(plugin, stream), SM70OPS_OK) << plugin.api().last_error();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return run.Bytes();
}

template <class Run>
void ExpectGraphReplayEqualsEager(const Plugin &plugin, Run &run) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int device_before = -1, device_after = -2;
  cudaGetDevice(&device_before);
  const std::vector<uint8_t> eager = EagerBytes(plugin, run, stream);
  cudaGetDevice(&device_after);
  EXPECT_EQ(device_before, device_after) << "execute changed the current device";
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const sm70ops_status captured = run.Execute(plugin, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(captured, SM70OPS_OK) << plugin.api().last_error();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    run.Poison(stream);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(run.Bytes() == eager) << "graph replay " << replay << " differs from eager";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// `threads` runs made by `make`, each on its own host thread and stream at once, against the
// first run's serial result.
template <class Run>
void ExpectConcurrentStreamsBitIdentical(const Plugin &plugin,
                                         const std::function<std::unique_ptr<Run>()> &make,
                                         int threads) {
  std::vector<std::unique_ptr<Run>> runs;
  std::vector<cudaStream_t> streams(threads);
  for (int i = 0; i < threads; ++i) {
    runs.push_back(make());
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), cudaSuccess);
  }
  const std::vector<uint8_t> serial = EagerBytes(plugin, *runs[0], streams[0]);
  for (int i = 0; i < threads; ++i) runs[i]->Poison(streams[i]);
  cudaDeviceSynchronize();
  std::vector<sm70ops_status> status(threads, SM70OPS_ERR_INTERNAL);
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] { status[i] = runs[i]->Execute(plugin, streams[i]); });
  }
  for (auto &w : workers) w.join();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < threads; ++i) {
    EXPECT_EQ(status[i], SM70OPS_OK) << "thread " << i;
    EXPECT_TRUE(runs[i]->Bytes() == serial) << "thread " << i << " differs from the serial run";
    cudaStreamDestroy(streams[i]);
  }
}

}  // namespace sm70ops_gpu

#endif  // SM70OPS_TESTS_GPU_ROBUSTNESS_H_
