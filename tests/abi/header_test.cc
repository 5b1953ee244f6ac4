// abi.md items 1 and 4: the header builds as C99 and as C++17 under -Wpadded -pedantic -Werror
// with its golden layout (header_c99.c, header_cxx17.cc: a layout change fails the build), and a
// host in either language negotiates with the real plugin through it.
#include "tests/abi/header_hosts.h"
#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

TEST(Abi_Header, C99HostNegotiates) {
  ASSERT_EQ(SharedPlugin().error(), "");
  uint32_t table_size = 0;
  EXPECT_EQ(sm70ops_c99_host_negotiate(SharedPlugin().get_api(), &table_size), SM70OPS_OK);
  EXPECT_EQ(table_size, sizeof(sm70ops_api));
}

TEST(Abi_Header, Cxx17HostNegotiates) {
  ASSERT_EQ(SharedPlugin().error(), "");
  uint32_t table_size = 0;
  EXPECT_EQ(sm70ops_cxx17_host_negotiate(SharedPlugin().get_api(), &table_size), SM70OPS_OK);
  EXPECT_EQ(table_size, sizeof(sm70ops_api));
}

}  // namespace
}  // namespace sm70ops_test
