/* The C99 and C++17 minimal hosts (header_c99.c, header_cxx17.cc). Each negotiates ABI 1.0 through
 * `get_api` and reports the table size it saw, so header_test proves both languages can drive the
 * plugin with nothing but abi/sm70ops.h. */
#ifndef SM70OPS_TESTS_ABI_HEADER_HOSTS_H_
#define SM70OPS_TESTS_ABI_HEADER_HOSTS_H_

#include "abi/sm70ops.h"

#ifdef __cplusplus
extern "C" {
#endif

sm70ops_status sm70ops_c99_host_negotiate(sm70ops_get_api_fn get_api, uint32_t *table_size);
sm70ops_status sm70ops_cxx17_host_negotiate(sm70ops_get_api_fn get_api, uint32_t *table_size);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_TESTS_ABI_HEADER_HOSTS_H_ */
