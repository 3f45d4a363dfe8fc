// Helpers shared by the executor, rebatch, step-iterator, prefetch and parallel map tests.
#ifndef SLUICE_TESTS_CORE_ITERATOR_TEST_UTIL_H_
#define SLUICE_TESTS_CORE_ITERATOR_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "gtest/gtest.h"

namespace sluice {
namespace testing_util {

// Reads up to `limit` elements; an error is returned as is. The limit keeps a buggy infinite
// iterator from hanging a test: reaching it is a FAILED_PRECONDITION.
inline absl::StatusOr<std::vector<Element>> Drain(Iterator* it, int64_t limit = 100000) {
  std::vector<Element> out;
  for (int64_t i = 0; i <= limit; ++i) {
    Element e;
    bool end = false;
    absl::Status s = it->GetNext(&e, &end);
    if (!s.ok()) return s;
    if (end) return out;
    out.push_back(std::move(e));
  }
  return absl::FailedPreconditionError("the iterator did not end within the limit");
}

inline absl::StatusOr<std::vector<Element>> RunDataset(const Dataset& ds, int64_t limit = 100000,
                                                const ExecutorOptions& options = {}) {
  auto it = MakeIterator(ds, options);
  if (!it.ok()) return it.status();
  return Drain(it->get(), limit);
}

// The values of a tensor of int64 (any shape), row-major.
inline std::vector<int64_t> Values(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
}

// Each element a scalar int64: their values.
inline std::vector<int64_t> Scalars(const std::vector<Element>& elements) {
  std::vector<int64_t> out;
  for (const Element& e : elements) out.push_back(e.leaf().data<int64_t>()[0]);
  return out;
}

// Each element an int64 tensor: its values.
inline std::vector<std::vector<int64_t>> Rows(const std::vector<Element>& elements) {
  std::vector<std::vector<int64_t>> out;
  for (const Element& e : elements) out.push_back(Values(e.leaf()));
  return out;
}

// The leaf under `key` of a dict element; an invalid tensor (and a test failure) when absent.
inline const Tensor& DictLeaf(const Element& e, const std::string& key) {
  for (size_t i = 0; i < e.keys().size(); ++i) {
    if (e.keys()[i] == key) return e.children()[i].leaf();
  }
  static const Tensor* none = new Tensor();
  ADD_FAILURE() << "the element has no key '" << key << "'";
  return *none;
}

inline std::vector<int64_t> Iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

// Yields `elements`, then `final_status` (end of sequence when OK), repeated.
class VectorIterator : public Iterator {
 public:
  explicit VectorIterator(std::vector<Element> elements, absl::Status final_status = {})
      : elements_(std::move(elements)), final_status_(std::move(final_status)) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    if (next_ < elements_.size()) {
      *out = elements_[next_++];
      *end_of_sequence = false;
      produced_.fetch_add(1);
      return absl::OkStatus();
    }
    *end_of_sequence = final_status_.ok();
    return final_status_;
  }
  // How many elements GetNext has handed out; may be read from another thread.
  int64_t produced() const { return produced_.load(); }

 private:
  std::vector<Element> elements_;
  absl::Status final_status_;
  size_t next_ = 0;
  std::atomic<int64_t> produced_{0};
};

inline std::vector<Element> ScalarElements(const std::vector<int64_t>& values) {
  std::vector<Element> out;
  for (int64_t v : values) out.push_back(Element(Tensor::Scalar<int64_t>(v)));
  return out;
}

// Passes its input through, counting the elements pulled (what a map pulled ahead of its
// consumer). `pulled` is the test's and outlives the iterator.
class CountingIterator : public Iterator {
 public:
  CountingIterator(std::unique_ptr<Iterator> input, int64_t* pulled)
      : input_(std::move(input)), pulled_(pulled) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    absl::Status s = input_->GetNext(out, end_of_sequence);
    if (s.ok() && !*end_of_sequence) ++*pulled_;
    return s;
  }

 private:
  std::unique_ptr<Iterator> input_;
  int64_t* pulled_;
};

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_ITERATOR_TEST_UTIL_H_
