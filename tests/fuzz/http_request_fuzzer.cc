// Fuzz target: the metrics port's HTTP request-head parser.
#include <cstdint>
#include <string>

#include "server/metrics/http_request.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace expertd::server::metrics;
  const std::string input(reinterpret_cast<const char*>(data), size);
  for (size_t limit : {size_t{64}, size_t{16384}}) {
    HttpRequestHead head;
    size_t consumed = 0;
    const HttpParse r = ParseHttpRequestHead(input, limit, &head, &consumed);
    if (r != HttpParse::kComplete) continue;
    FUZZ_REQUIRE(consumed > 0 && consumed <= input.size() && consumed <= limit);
    FUZZ_REQUIRE(!head.method.empty() && !head.target.empty());
    FUZZ_REQUIRE(head.target.compare(0, head.path.size(), head.path) == 0);
    FUZZ_REQUIRE(head.minor_version == 0 || head.minor_version == 1);
    // Re-parsing a prefix that ends with the head gives the same answer.
    HttpRequestHead again;
    size_t consumed_again = 0;
    FUZZ_REQUIRE(ParseHttpRequestHead(input.substr(0, consumed), limit, &again, &consumed_again) ==
                 HttpParse::kComplete);
    FUZZ_REQUIRE(consumed_again == consumed && again.target == head.target);
  }
  return 0;
}
