// MetricsRegistry: the text exposition format (golden), escaping, collectors, concurrency.
#include "core/obs/metrics.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/observability/prometheus_text.h"

namespace sluice {
namespace {

TEST(MetricsTest, GoldenTextFormat) {
  MetricsRegistry m;
  CounterFamily* steps = m.Counter("sluice_steps_total", "Steps delivered.", {"job", "task"});
  steps->Add({"2", "7"}, 3);
  steps->Add({"1", "5"});
  steps->Add({"2", "7"}, 2);
  GaugeFamily* fill = m.Gauge("sluice_fill_bytes", "Buffer fill.\nIn bytes \\ per task.");
  fill->Set({}, 1.5);
  GaugeFamily* odd = m.Gauge("sluice_odd", "Odd label values.", {"path"});
  odd->Set({"a\"b\\c\nd"}, -2);
  auto handle = m.AddCollector([](MetricSink& sink) {
    sink.Gauge("sluice_age_seconds", "Heartbeat age.", {{"worker", "w1"}}, 0.25);
    sink.Gauge("sluice_age_seconds", "Heartbeat age.", {{"worker", "w0"}}, 1e300);
  });
  EXPECT_EQ(m.Scrape(),
            "# HELP sluice_age_seconds Heartbeat age.\n"
            "# TYPE sluice_age_seconds gauge\n"
            "sluice_age_seconds{worker=\"w0\"} 1.0000000000000001e+300\n"
            "sluice_age_seconds{worker=\"w1\"} 0.25\n"
            "# HELP sluice_fill_bytes Buffer fill.\\nIn bytes \\\\ per task.\n"
            "# TYPE sluice_fill_bytes gauge\n"
            "sluice_fill_bytes 1.5\n"
            "# HELP sluice_odd Odd label values.\n"
            "# TYPE sluice_odd gauge\n"
            "sluice_odd{path=\"a\\\"b\\\\c\\nd\"} -2\n"
            "# HELP sluice_steps_total Steps delivered.\n"
            "# TYPE sluice_steps_total counter\n"
            "sluice_steps_total{job=\"1\",task=\"5\"} 1\n"
            "sluice_steps_total{job=\"2\",task=\"7\"} 5\n");
  // The reader the other tests use agrees, escapes included.
  absl::StatusOr<testing::PromText> parsed = testing::ParsePromText(m.Scrape());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Sum("sluice_steps_total"), 6);
  EXPECT_EQ(parsed->Sum("sluice_odd", {{"path", "a\"b\\c\nd"}}), -2);
  EXPECT_EQ(parsed->types.at("sluice_steps_total"), "counter");
}

TEST(MetricsTest, ValuesAndSpecialNumbers) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(12345678901), "12345678901");
  EXPECT_EQ(FormatMetricValue(0.1), "0.10000000000000001");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatMetricValue(0.0 / 0.0), "NaN");
  EXPECT_EQ(SanitizeMetricName("9a-b.c"), "_a_b_c");
}

TEST(MetricsTest, CountersNeverGoDownAndGaugesDo) {
  MetricsRegistry m;
  CounterFamily* c = m.Counter("c_total", "c", {"k"});
  c->Add({"x"}, 2);
  c->Add({"x"}, -5);
  EXPECT_EQ(c->Value({"x"}), 2);
  EXPECT_EQ(c->Value({"y"}), 0);
  GaugeFamily* g = m.Gauge("g", "g", {"k"});
  g->Set({"x"}, 4);
  g->Add({"x"}, -1);
  EXPECT_EQ(g->Value({"x"}), 3);
  g->Remove({"x"});
  EXPECT_EQ(m.Scrape().find("g{"), std::string::npos);
}

TEST(MetricsTest, SameNameReturnsSameFamilyAndKindClashIsNotExported) {
  MetricsRegistry m;
  CounterFamily* a = m.Counter("x_total", "first", {"k"});
  EXPECT_EQ(m.Counter("x_total", "second", {"other"}), a);
  GaugeFamily* clash = m.Gauge("x_total", "a gauge now");
  ASSERT_NE(clash, nullptr);
  clash->Set({}, 9);
  a->Add({"v"});
  EXPECT_EQ(m.Scrape(),
            "# HELP x_total first\n# TYPE x_total counter\nx_total{k=\"v\"} 1\n");
}

TEST(MetricsTest, RemovedCollectorStopsContributing) {
  MetricsRegistry m;
  {
    MetricsRegistry::CollectorHandle h = m.AddCollector(
        [](MetricSink& sink) { sink.Counter("live_total", "live", {}, 1); });
    EXPECT_NE(m.Scrape().find("live_total 1"), std::string::npos);
    MetricsRegistry::CollectorHandle moved = std::move(h);
    EXPECT_NE(m.Scrape().find("live_total 1"), std::string::npos);
  }
  EXPECT_EQ(m.Scrape(), "");
}

TEST(MetricsTest, ConcurrentUpdatesAndScrapes) {
  MetricsRegistry m;
  CounterFamily* c = m.Counter("n_total", "n", {"t"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c, &m, t] {
      for (int i = 0; i < 2000; ++i) {
        c->Add({std::to_string(t % 2)});
        if (i % 500 == 0) (void)m.Scrape();
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::StatusOr<testing::PromText> parsed = testing::ParsePromText(m.Scrape());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Sum("n_total"), 8000);
  EXPECT_EQ(parsed->Sum("n_total", {{"t", "0"}}), 4000);
}

// RpcMethodMetrics counts through bound samples: AddAt must add exactly as Add does, to the
// same sample, from several threads, and ignore negative amounts.
TEST(MetricsTest, ABoundSampleAddsToTheSameSampleAsAdd) {
  MetricsRegistry m;
  CounterFamily* c = m.Counter("b_total", "b", {"k"});
  double* x = c->AddAndBind({"x"});
  EXPECT_EQ(c->Value({"x"}), 1);
  double* zero = c->AddAndBind({"z"}, 0);  // bound without counting
  EXPECT_EQ(c->Value({"z"}), 0);
  c->Add({"x"}, 2);
  c->AddAt(x, -4);
  c->AddAt(zero, 3);
  EXPECT_EQ(c->Value({"x"}), 3);
  EXPECT_EQ(c->Value({"z"}), 3);
  EXPECT_EQ(c->AddAndBind({"x"}, 0), x);  // the same place for the same labels
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c, x, &m] {
      for (int i = 0; i < 2000; ++i) {
        c->AddAt(x);
        if (i % 500 == 0) (void)m.Scrape();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value({"x"}), 8003);
  EXPECT_EQ(m.Scrape(),
            "# HELP b_total b\n# TYPE b_total counter\nb_total{k=\"x\"} 8003\n"
            "b_total{k=\"z\"} 3\n");
}

TEST(PromTextTest, RejectsMalformedLines) {
  EXPECT_FALSE(testing::ParsePromText("x 1").ok());  // no final newline
  EXPECT_FALSE(testing::ParsePromText("x{a=\"1} 1\n").ok());
  EXPECT_FALSE(testing::ParsePromText("x{a=1} 1\n").ok());
  EXPECT_FALSE(testing::ParsePromText("x one\n").ok());
  EXPECT_FALSE(testing::ParsePromText("# TYPE x cake\n").ok());
  EXPECT_TRUE(testing::ParsePromText("# TYPE x gauge\nx{a=\"\\\"\"} +Inf 123\n").ok());
}

}  // namespace
}  // namespace sluice
