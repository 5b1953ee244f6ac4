# Sourced by report.sh and gpu_tests.sh: the Bazel flags of the build SM70OPS_CONFIG names.
#   unset  the default build (sm_75 and sm_90 code)
#   sm70   the V100 release build (--config=sm70: CUDA 11.8, sm_70 code)
build_config=()
case "${SM70OPS_CONFIG:-}" in
  "") ;;
  sm70) build_config=(--config=sm70) ;;
  *) echo "SM70OPS_CONFIG=$SM70OPS_CONFIG: unknown build (sm70, or unset for the default)" >&2
     exit 2 ;;
esac
