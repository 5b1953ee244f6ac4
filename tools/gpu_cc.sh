# Sourced by build_config.sh and gpu_tests.sh. The first GPU's compute capability, e.g. 70; empty
# without a GPU (or a working driver: then nvidia-smi prints its complaint where the number would
# be).
gpu_compute_capability() {
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d . |
    grep -xE '[0-9]+' || true
}
