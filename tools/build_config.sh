# Sourced by report.sh and gpu_tests.sh: the machine's GPU, and the Bazel flags of the build
# SM70OPS_CONFIG names.
#   unset  the default build (sm_75 and sm_90 code); on a V100, which can run only the V100
#          release build, that build instead
#   sm70   the V100 release build (--config=sm70: CUDA 11.8, sm_70 code)

# The first GPU's compute capability, e.g. 70; empty without a GPU (or a working driver: then
# nvidia-smi prints its complaint where the number would be).
gpu_compute_capability() {
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d . |
    grep -xE '[0-9]+' || true
}

if [ -z "${SM70OPS_CONFIG:-}" ] && [ "$(gpu_compute_capability)" = 70 ]; then
  export SM70OPS_CONFIG=sm70
fi
build_config=()
case "${SM70OPS_CONFIG:-}" in
  "") ;;
  sm70) build_config=(--config=sm70) ;;
  *) echo "SM70OPS_CONFIG=$SM70OPS_CONFIG: unknown build (sm70, or unset for the default)" >&2
     exit 2 ;;
esac
