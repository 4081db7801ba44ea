#include "daemon/table_full.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace zernel::daemon {
namespace {

using telemetry::NamedCounter;

TEST(TableFullLog, says_once_per_counter_what_a_full_table_costs) {
  TableFullLog log;
  std::vector<NamedCounter> c = {{"local", 100}, {"node_map_full", 0}, {"thread_map_full", 0}};
  EXPECT_TRUE(log.check(c).empty());  // nothing full yet

  c[1].value = 3;
  const auto lines = log.check(c);
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_NE(lines[0].find("3 cgroups got no node"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("cpu.max is not enforced"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("node_map_full"), std::string::npos) << lines[0];

  c[1].value = 50;  // grows: not logged again
  EXPECT_TRUE(log.check(c).empty());

  c[2].value = 1;  // another table
  const auto more = log.check(c);
  ASSERT_EQ(more.size(), 1U);
  EXPECT_NE(more[0].find("zernel_probe_threads"), std::string::npos) << more[0];
  EXPECT_TRUE(log.check(c).empty());
}

TEST(TableFullLog, ignores_counters_that_are_not_about_a_full_table) {
  TableFullLog log;
  const std::vector<NamedCounter> c = {
      {"starve_rescue", 9}, {"phase_events_lost", 4}, {"kick_preempt", 1}};
  EXPECT_TRUE(log.check(c).empty());
}

}  // namespace
}  // namespace zernel::daemon
