// abi/sm70ops.h as a C++17 host sees it: built with -pedantic -Wpadded -Werror, its layout pinned
// by abi_layout_golden.inc, and a minimal host that negotiates through the header's types.
#include <cstddef>

#include "abi/sm70ops.h"
#include "tests/abi/header_hosts.h"

#define ABI_SIZE(type, bytes) static_assert(sizeof(type) == (bytes), "sizeof " #type);
#define ABI_OFFSET(type, field, bytes) \
  static_assert(offsetof(type, field) == (bytes), "offsetof " #type "." #field);
#define ABI_VALUE(constant, value) static_assert((constant) == (value), #constant);
#include "tests/abi/abi_layout_golden.inc"

sm70ops_status sm70ops_cxx17_host_negotiate(sm70ops_get_api_fn get_api, uint32_t* table_size) {
  uint32_t minor = 0;
  const sm70ops_api* api = nullptr;
  sm70ops_status status = get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api);
  *table_size = status == SM70OPS_OK && api != nullptr ? api->struct_size : 0;
  return status;
}
