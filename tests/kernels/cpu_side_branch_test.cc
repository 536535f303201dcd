// Ops::SideBranch on the CPU backend (kernels/api/ops.h): the branch calls are
// no-ops, ops run in the order issued, so a branched sequence gives exactly the
// results of the same ops without branches, and the backend says branches do not
// overlap (model code then keeps its in-order form).
#include <gtest/gtest.h>

#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

TEST(CpuSideBranch, RunsInOrderWithTheSameResults) {
  auto ops = make_cpu_ops();
  EXPECT_FALSE(ops->concurrent_branches(1));
  const Tensor x = randn({3, 257}, 1);
  Tensor a = ops->empty(x.shape()), b = ops->empty(x.shape()), c = ops->empty(x.shape());
  {
    Ops::SideBranch side(*ops);
    ops->scale(a, x, 2.0f);
    side.end();
    ops->add(b, x, x);  // reads nothing the side branch writes
    side.join();
  }
  ops->add(c, a, b);
  Tensor a2 = ops->empty(x.shape()), b2 = ops->empty(x.shape()), c2 = ops->empty(x.shape());
  ops->scale(a2, x, 2.0f);
  ops->add(b2, x, x);
  ops->add(c2, a2, b2);
  EXPECT_TRUE(same_bits(c, c2));
}

}  // namespace
}  // namespace tf
