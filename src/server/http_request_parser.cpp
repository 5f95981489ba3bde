// HTTP/1.1 request parsing on Boost.Beast's incremental parser, with the server's limits checked
// as each piece arrives (Beast's own head and body limits, plus header count, line and target length).
#include "server/http_request_parser.h"

#include <algorithm>
#include <cctype>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

namespace tf::server {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::string_view;

std::string lower(string_view text) {
  std::string out(text.data(), text.size());
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

std::string_view HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

// Beast calls these as the head and body are recognised; a limit broken sets `failure` and an
// error code, which stops the parse at once.
struct HttpRequestParser::Impl final : http::basic_parser<true> {
  const HttpParseLimits& limits;
  HttpRequest request;
  std::optional<HttpParseFailure> failure;
  size_t n_headers = 0;
  size_t head_bytes = 0;  // consumed before the head was done: the limit, whatever the pieces

  explicit Impl(const HttpParseLimits& parse_limits) : limits(parse_limits) {
    header_limit(uint32_t(std::min<size_t>(limits.max_head_bytes, UINT32_MAX)));
    body_limit(uint64_t(limits.max_body_bytes));
    eager(false);  // stop after the head, so the caller may refuse before any body byte is read
  }

  void fail(int status, std::string message, std::string code, error_code& ec) {
    failure = HttpParseFailure{status, std::move(message), std::move(code)};
    ec = http::error::bad_value;
  }

  void on_request_impl(http::verb, string_view method, string_view target, int version,
                       error_code& ec) override {
    if (target.size() > limits.max_line_bytes)
      return fail(414, "The request target is longer than the limit of " +
                           std::to_string(limits.max_line_bytes) + " bytes.",
                  "uri_too_long", ec);
    request.method.assign(method.data(), method.size());
    request.target.assign(target.data(), target.size());
    // The absolute form (http://host/path?query, as proxies send it) names the same resource as
    // its origin form; servers must accept it (RFC 9112, 3.2.2).
    for (const std::string_view prefix : {"http://", "https://"}) {
      if (!iequals(std::string_view(request.target).substr(0, prefix.size()), prefix)) continue;
      const size_t path_start = request.target.find_first_of("/?", prefix.size());
      request.target = path_start == std::string::npos ? "/" : request.target.substr(path_start);
      if (request.target[0] == '?') request.target.insert(0, "/");
      break;
    }
    request.path = request.target.substr(0, request.target.find('?'));
    request.version = version;
  }

  void on_response_impl(int, string_view, int, error_code& ec) override { ec = http::error::bad_version; }

  void on_field_impl(http::field, string_view name, string_view value, error_code& ec) override {
    if (++n_headers > limits.max_header_count)
      return fail(431, "The request has more than " + std::to_string(limits.max_header_count) +
                           " header lines.",
                  "request_header_fields_too_large", ec);
    if (name.size() + value.size() + 2 > limits.max_line_bytes)
      return fail(431, "The header line '" + std::string(name.substr(0, 64)) +
                           "' is longer than the limit of " + std::to_string(limits.max_line_bytes) +
                           " bytes.",
                  "request_header_fields_too_large", ec);
    request.headers.emplace_back(lower(name), std::string(value.data(), value.size()));
  }

  void on_header_impl(error_code& ec) override {
    // A transfer coding other than chunked alone would leave the body's end unknown: read as
    // Content-Length or as nothing, its bytes would be taken for the next request (smuggled).
    int n_codings = 0;
    for (const auto& [name, value] : request.headers) {
      if (name != "transfer-encoding") continue;
      if (++n_codings > 1 || !iequals(trim(value), "chunked"))
        return fail(501, "Only the chunked transfer coding is supported (Transfer-Encoding: chunked, once).",
                    "unsupported_transfer_coding", ec);
    }
    request.keep_alive = keep_alive();
    request.expects_continue = iequals(request.header("expect"), "100-continue");
  }

  void on_body_init_impl(const boost::optional<uint64_t>& content_length, error_code&) override {
    if (content_length) request.body.reserve(size_t(*content_length));  // within body_limit already
  }

  size_t on_body_impl(string_view body, error_code&) override {
    request.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(uint64_t, string_view, error_code&) override {}

  size_t on_chunk_body_impl(uint64_t, string_view body, error_code&) override {
    request.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(error_code&) override {}

  // Beast's own errors, in words; a failure our callbacks set wins.
  void take_error(const error_code& ec) {
    if (failure) return;
    if (ec == http::error::header_limit)
      failure = HttpParseFailure{431, "The request head is larger than the limit of " +
                                          std::to_string(limits.max_head_bytes) + " bytes.",
                                 "request_header_fields_too_large"};
    else if (ec == http::error::body_limit)
      failure = HttpParseFailure{413, "The request body is larger than the limit of " +
                                          std::to_string(limits.max_body_bytes) + " bytes.",
                                 "request_too_large"};
    else
      failure = HttpParseFailure{400, "Malformed HTTP request: " + ec.message() + ".", "bad_request"};
  }
};

HttpRequestParser::HttpRequestParser(const HttpParseLimits& limits)
    : limits_(limits), impl_(std::make_unique<Impl>(limits_)) {}

HttpRequestParser::~HttpRequestParser() = default;

size_t HttpRequestParser::feed(std::string_view bytes) {
  size_t used = 0;
  while (!impl_->failure && !impl_->is_done()) {
    const bool was_head_done = impl_->is_header_done();
    // After the head Beast is shown at most a head's worth at a time, so a chunk-size line or a
    // trailer section longer than that fails whether its bytes arrive whole or in pieces.
    size_t shown = bytes.size() - used;
    if (was_head_done) shown = std::min(shown, limits_.max_head_bytes);
    error_code ec;
    const size_t n = impl_->put(boost::asio::const_buffer(bytes.data() + used, shown), ec);
    used += n;
    // Beast's own head limit depends on how the bytes arrived (a head one byte over it passed when
    // it came whole, found by fuzz_http_request); this count does not.
    if (!was_head_done && !impl_->failure) {
      impl_->head_bytes += n;
      const bool head_done = impl_->is_header_done();
      const size_t head_so_far = impl_->head_bytes + (head_done ? 0 : bytes.size() - used);
      if ((head_done || ec == http::error::need_more) && head_so_far > limits_.max_head_bytes) {
        impl_->take_error(http::error::header_limit);
        break;
      }
    }
    if (ec == http::error::need_more) {
      if (was_head_done && n == 0 && bytes.size() - used >= limits_.max_head_bytes)
        impl_->failure = HttpParseFailure{400, "A chunk-size or trailer line of the request body is "
                                               "longer than " + std::to_string(limits_.max_head_bytes) +
                                               " bytes.", "bad_request"};
      break;
    }
    if (ec) {
      impl_->take_error(ec);
      break;
    }
    if (!was_head_done && impl_->is_header_done()) break;  // the caller looks at the head first
    if (n == 0 && used == bytes.size()) break;
  }
  return used;
}

void HttpRequestParser::feed_eof() {
  if (impl_->failure || impl_->is_done() || !impl_->got_some()) return;
  error_code ec;
  impl_->put_eof(ec);
  if (ec) impl_->take_error(ec);
}

bool HttpRequestParser::has_started() const { return impl_->got_some(); }
bool HttpRequestParser::is_head_done() const { return impl_->is_header_done(); }
bool HttpRequestParser::is_done() const { return impl_->is_done(); }
const std::optional<HttpParseFailure>& HttpRequestParser::failure() const { return impl_->failure; }
const HttpRequest& HttpRequestParser::request() const { return impl_->request; }
HttpRequest HttpRequestParser::take_request() { return std::move(impl_->request); }
void HttpRequestParser::reset() { impl_ = std::make_unique<Impl>(limits_); }

std::pair<std::vector<HttpRequest>, std::optional<HttpParseFailure>> parse_http_requests(
    std::string_view bytes, const HttpParseLimits& limits) {
  std::vector<HttpRequest> requests;
  HttpRequestParser parser(limits);
  for (;;) {
    const size_t used = parser.feed(bytes);
    bytes.remove_prefix(used);
    if (parser.failure()) return {std::move(requests), parser.failure()};
    if (parser.is_done()) {
      requests.push_back(parser.take_request());
      parser.reset();
      if (bytes.empty()) break;
      continue;
    }
    if (used == 0) {  // nothing more will come: an unfinished request is a failure
      if (parser.has_started()) {
        parser.feed_eof();
        if (parser.failure()) return {std::move(requests), parser.failure()};
      }
      break;
    }
  }
  return {std::move(requests), std::nullopt};
}

}  // namespace tf::server
