/* Facts stamped in by the build (see plugin/BUILD). */
#ifndef SM70OPS_PLUGIN_BUILD_INFO_H_
#define SM70OPS_PLUGIN_BUILD_INFO_H_

extern const char sm70_build_git_revision[]; /* "3f2a9c1b0d4e" or "...-dirty" */
extern const char sm70_build_sm_list[];      /* "sm_70" */
extern const int sm70_build_archs[];         /* the same as compute capabilities: {70} */
extern const int sm70_build_arch_count;
extern const int sm70_build_ptx_arch; /* the compute_XX PTX it also carries: 70, or 0 for none */

#endif /* SM70OPS_PLUGIN_BUILD_INFO_H_ */
