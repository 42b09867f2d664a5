// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/handle.hpp: a move takes a Handle and leaves it null;
// move_assign frees what the target held (once) before taking the source's.
#include "edgellm/backend/vulkan/handle.hpp"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

namespace test_backend_vulkan_handle {

namespace {

using edgellm::backend::vk::Handle;

struct Resource {
  int id;
};

// A move-only owner written as the Vulkan wrappers are: Handle members, the defaulted move
// constructor, move_assign; the destructor records what it frees.
class Owner {
 public:
  Owner(std::vector<int>* freed, int id) : freed_(freed), id_(id) {}
  Owner(Owner&&) noexcept = default;
  Owner& operator=(Owner&& o) noexcept {
    return edgellm::backend::vk::move_assign(*this, std::move(o));
  }
  ~Owner() {
    if (freed_) freed_.get()->push_back(id_);
  }
  int id() const noexcept { return id_; }

 private:
  Handle<std::vector<int>*> freed_;
  Handle<int> id_;
};

}  // namespace

TEST_CASE("Handle: a move takes the value and leaves T{}", "[vulkan]") {
  Handle<int*> a;
  CHECK(a.get() == nullptr);
  int x = 0;
  a = &x;
  Handle<int*> b(std::move(a));
  CHECK(b.get() == &x);
  CHECK(a.get() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  a = std::move(b);
  CHECK(a.get() == &x);
  CHECK(b.get() == nullptr);  // NOLINT(bugprone-use-after-move)
  *a.addressof() = nullptr;
  CHECK(a.get() == nullptr);
  Handle<Resource> r(Resource{7});
  CHECK(r->id == 7);
  Handle<Resource> s(std::move(r));
  CHECK(s->id == 7);
  CHECK(r->id == 0);  // NOLINT(bugprone-use-after-move)
}

TEST_CASE("move_assign frees the target's objects once, then takes the source's", "[vulkan]") {
  std::vector<int> freed;
  {
    Owner a(&freed, 1), b(&freed, 2);
    a = std::move(b);
    CHECK(freed == std::vector<int>{1});
    CHECK(a.id() == 2);
    Owner c(std::move(a));
    CHECK(c.id() == 2);
    Owner& same = c;
    c = std::move(same);  // self-assignment: nothing freed
    CHECK(freed == std::vector<int>{1});
  }
  CHECK(freed == std::vector<int>{1, 2});  // the moved-from owners free nothing
}

}  // namespace test_backend_vulkan_handle
