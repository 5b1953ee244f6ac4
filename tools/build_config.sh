# Sourced by report.sh and gpu_tests.sh pack: the machine's GPU (gpu_cc: its compute capability,
# empty without one) and the Bazel flags of the build SM70OPS_CONFIG names.
#   unset  the default build (sm_75 and sm_90 code); on a V100, which can run only the V100
#          release build, that build instead
#   sm70   the V100 release build (--config=sm70: CUDA 11.8, sm_70 code)
source tools/gpu_cc.sh
gpu_cc=$(gpu_compute_capability)
if [ -z "${SM70OPS_CONFIG:-}" ] && [ "$gpu_cc" = 70 ]; then
  export SM70OPS_CONFIG=sm70
fi
build_config=()
case "${SM70OPS_CONFIG:-}" in
  "") ;;
  sm70) build_config=(--config=sm70) ;;
  *) echo "SM70OPS_CONFIG=$SM70OPS_CONFIG: unknown build (sm70, or unset for the default)" >&2
     exit 2 ;;
esac
