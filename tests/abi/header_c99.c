/* abi/sm70ops.h as a C99 host sees it: built with -std=c99 -pedantic -Wpadded -Werror, its layout
 * pinned by abi_layout_golden.inc, and a minimal host that negotiates through the header's types.
 */
#include <stddef.h>

#include "abi/sm70ops.h"
#include "tests/abi/header_hosts.h"

/* C99 has no _Static_assert: a negative array size is the portable compile-time check. */
#define ABI_CAT2(a, b) a##b
#define ABI_CAT(a, b) ABI_CAT2(a, b)
#define ABI_ASSERT(cond) typedef char ABI_CAT(abi_golden_line_, __LINE__)[(cond) ? 1 : -1]
#define ABI_SIZE(type, bytes) ABI_ASSERT(sizeof(type) == (bytes));
#define ABI_OFFSET(type, field, bytes) ABI_ASSERT(offsetof(type, field) == (bytes));
#define ABI_VALUE(constant, value) ABI_ASSERT((constant) == (value));
#include "tests/abi/abi_layout_golden.inc"

sm70ops_status sm70ops_c99_host_negotiate(sm70ops_get_api_fn get_api, uint32_t *table_size) {
  uint32_t minor = 0;
  const sm70ops_api *api = NULL;
  sm70ops_status status = get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api);
  *table_size = status == SM70OPS_OK && api != NULL ? api->struct_size : 0;
  return status;
}
