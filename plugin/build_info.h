/* Facts stamped in by the build (see plugin/BUILD). */
#ifndef SM70OPS_PLUGIN_BUILD_INFO_H_
#define SM70OPS_PLUGIN_BUILD_INFO_H_

extern const char sm70_build_git_revision[]; /* "3f2a9c1b0d4e" or "...-dirty" */
extern const char sm70_build_sm_list[];      /* "sm_70" */

#endif /* SM70OPS_PLUGIN_BUILD_INFO_H_ */
